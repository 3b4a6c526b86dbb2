"""Pool trees (Min3 paper, section 5.1): bands, splits, nesting, partitions, the CLI, and
the paper's three-site grid."""
import json
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from collsched.inputs import pools
from collsched.cli import main
from collsched.inputs.topology import homogeneous, load_topology, write_matrix_topology

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"


@st.composite
def grid_yaml(draw, max_sites=4, max_hosts=6):
    """A class-based topology document: random sites, LANs and WAN links (some asymmetric)."""
    n_sites = draw(st.integers(1, max_sites))
    sites = []
    for i in range(n_sites):
        sites.append({"name": f"s{i}", "hosts": draw(st.integers(1, max_hosts)),
                      "lan": {"latency": f"{draw(st.integers(1, 100))}us",
                              "bandwidth": f"{draw(st.integers(100, 10000))}Mbit/s"}})
    wan = []
    nic = [int(s["lan"]["bandwidth"].removesuffix("Mbit/s")) for s in sites]
    for i in range(n_sites):
        for j in range(i + 1, n_sites):
            # a wan: class is one host pair's rate: at most both NICs (docs/inputs.md)
            cap = min(nic[i], nic[j])
            w = {"between": [f"s{i}", f"s{j}"], "latency": f"{draw(st.integers(1, 80))}ms",
                 "bandwidth": f"{min(cap, draw(st.integers(1, 2000)))}Mbit/s"}
            if draw(st.booleans()):
                w["bandwidth_back"] = f"{min(cap, draw(st.integers(1, 2000)))}Mbit/s"
            wan.append(w)
    doc = {"name": "random-grid", "duplex": draw(st.sampled_from(["full", "half"])), "sites": sites}
    if wan:
        doc["wan"] = wan
    if draw(st.booleans()):
        doc["tcp_window"] = "4MiB"
    if draw(st.booleans()):
        doc["placement"] = {"ranks_per_host": 2}
    return doc


def draw_grid(tmp_path, doc, data, min_ranks=2, max_ranks=24):
    """The document's topology on a drawn rank count it can place (at least min_ranks)."""
    hosts = sum(s["hosts"] for s in doc["sites"]) * doc.get("placement", {}).get("ranks_per_host", 1)
    assume(hosts >= min_ranks)
    p = data.draw(st.integers(min_ranks, min(hosts, max_ranks)), label="ranks")
    return load_topology(write_yaml(tmp_path, doc), p)


def draw_arrivals(data, p, latest=0.02):
    """A drawn arrival time per rank, 0..latest seconds."""
    return np.array(data.draw(st.lists(st.floats(0, latest), min_size=p, max_size=p), label="a"))


def write_yaml(tmp_path, doc, name="topo.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def check_tree(tree, topo):
    """Structural properties every pool tree must have."""
    p = topo.nranks
    sym = pools.symmetric_bandwidth(topo)
    assert nx.is_arborescence(tree) and set(tree.nodes[0]["ranks"].tolist()) == set(range(p))
    for node in tree.nodes:
        a = tree.nodes[node]
        kids = pools.children(tree, node)
        ranks = a["ranks"]
        if len(ranks) == 1:
            assert not kids and a["threshold_Bps"] is None
            continue
        assert len(kids) >= 2, "a pool splits into at least two sub-pools"
        parts = [tree.nodes[c]["ranks"] for c in kids]
        joined = np.sort(np.concatenate(parts))
        assert np.array_equal(joined, np.sort(ranks)), "sub-pools partition their pool"
        thr = a["threshold_Bps"]
        label = np.empty(p, np.int64)
        for i, part in enumerate(parts):
            label[part] = i
        sub = sym[np.ix_(ranks, ranks)]
        between = label[ranks][:, None] != label[ranks][None, :]
        assert np.all(sub[between] <= thr * (1 + 1e-12)), "no link between sub-pools beats the threshold"
        for part in parts:  # each sub-pool is held together by links faster than the threshold
            if len(part) > 1:
                fast = sym[np.ix_(part, part)] > thr
                np.fill_diagonal(fast, False)
                g = nx.from_numpy_array(fast.astype(int))
                assert nx.is_connected(g)
        for c in kids:  # thresholds grow downwards
            if tree.nodes[c]["threshold_Bps"] is not None:
                assert tree.nodes[c]["threshold_Bps"] > thr
                assert tree.nodes[c]["depth"] == a["depth"] + 1
    levels = pools.partitions(tree)
    for upper, lower in zip(levels, levels[1:]):  # every level refines the one above
        for pool_id in np.unique(lower):
            assert len(np.unique(upper[lower == pool_id])) == 1


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=grid_yaml())
def test_random_grids_give_valid_trees(tmp_path, doc):
    topo = load_topology(write_yaml(tmp_path, doc))
    check_tree(pools.pool_tree(topo), topo)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(h=st.integers(2, 14), seed=st.integers(0, 2**31), spread=st.floats(0.0, 3.0))
def test_measured_matrices_give_valid_trees(tmp_path, h, seed, spread):
    """Noisy, asymmetric measured bandwidths: every value its own, many bands."""
    rng = np.random.default_rng(seed)
    bw = 10 ** rng.uniform(6, 6 + spread, (h, h))
    lat = rng.uniform(1e-5, 1e-2, (h, h))
    path = tmp_path / "m.yaml"
    write_matrix_topology(path, [f"h{i}" for i in range(h)], ["x"] * h, lat, bw)
    topo = load_topology(path)
    check_tree(pools.pool_tree(topo), topo)


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.floats(1e3, 1e10), min_size=1, max_size=40))
def test_bands_hold_values_within_ten_percent(values):
    p = len(values) + 1
    m = np.full((p, p), np.inf)
    for i, v in enumerate(values):  # a star: rank 0 to every other rank
        m[0, i + 1] = m[i + 1, 0] = v
    for i in range(1, p):
        for j in range(1, p):
            if i != j:
                m[i, j] = 1e12
    b = pools.bands_of(m)
    v = m[np.triu_indices(p, 1)]
    idx = b.band[np.triu_indices(p, 1)]
    for k in np.unique(idx):
        inside = v[idx == k]
        assert inside.max() <= inside.min() * 1.1 * (1 + 1e-12)
        assert b.thresholds[k] == inside.max()
    starts = [v[idx == k].min() for k in range(len(b.thresholds))]
    assert all(b2 > b1 * 1.1 for b1, b2 in zip(starts, starts[1:]))


def test_paper_three_site_grid():
    """UT apart from Europe first (its links are the slowest), then UK from NTH, then hosts."""
    topo = load_topology(TOPOLOGIES / "three-site-grid.yaml")
    tree = pools.pool_tree(topo)
    check_tree(tree, topo)
    root = tree.nodes[0]
    # Slower direction of UT<->UK (1.28 Mbit/s back) is 10% above UT<->NTH (1.16): own band.
    assert root["threshold_Bps"] == pytest.approx(1.28e6 / 8)
    sets = [tree.nodes[c]["sites"] for c in pools.children(tree, 0)]
    assert sets == [["UT"], ["UK", "NTH"]]
    europe = pools.children(tree, 0)[1]
    assert tree.nodes[europe]["threshold_Bps"] == pytest.approx(4.75e6 / 8)
    assert [tree.nodes[c]["sites"] for c in pools.children(tree, europe)] == [["UK"], ["NTH"]]
    levels = pools.partitions(tree)
    site = np.array([["UT", "UK", "NTH"].index(s) for s in topo.rank_site()])
    assert len(levels) == 2  # depth 1: UT | Europe; depth 2: UK | NTH (UT's ranks alone)
    assert len(np.unique(levels[0])) == 2 and len(np.unique(levels[0][site == 0])) == 1
    for s in (1, 2):
        assert len(np.unique(levels[1][site == s])) == 1
    assert len(np.unique(levels[1][site == 0])) == 8


def test_homogeneous_cluster_is_one_pool_of_single_ranks():
    topo = homogeneous(12)
    tree = pools.pool_tree(topo)
    assert len(pools.children(tree, 0)) == 12 and pools.partitions(tree) == []
    one = pools.pool_tree(homogeneous(1))
    assert one.number_of_nodes() == 1


def test_two_ranks_per_host_form_host_pools(tmp_path):
    doc = yaml.safe_load((TOPOLOGIES / "tryton-48.yaml").read_text())
    doc["placement"] = {"ranks_per_host": 2}
    topo = load_topology(write_yaml(tmp_path, doc), 8)
    tree = pools.pool_tree(topo)
    kids = pools.children(tree, 0)
    assert [tree.nodes[c]["ranks"].tolist() for c in kids] == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_asymmetric_links_use_the_slower_direction():
    topo = homogeneous(4)
    bw = topo.bandwidth.copy()
    bw[np.ix_([0, 1], [2, 3])] = 1e3  # slow from {0, 1} to {2, 3}, fast the other way
    import dataclasses
    slow = dataclasses.replace(topo, bandwidth=bw)
    sym = pools.symmetric_bandwidth(slow)
    assert sym[0, 2] == sym[2, 0] == 1e3 and sym[0, 1] == 125e6
    tree = pools.pool_tree(slow)
    assert tree.nodes[0]["threshold_Bps"] == 1e3
    assert [tree.nodes[c]["ranks"].tolist() for c in pools.children(tree, 0)] == [[0, 1], [2, 3]]
    # One slow link alone does not split a pool whose other links hold it together.
    bw = topo.bandwidth.copy()
    bw[0, 1] = 1e3
    tree = pools.pool_tree(dataclasses.replace(topo, bandwidth=bw))
    assert tree.nodes[0]["threshold_Bps"] == 125e6 and len(pools.children(tree, 0)) == 4


def test_cli_pools_text_json_plot(tmp_path, capsys):
    png = tmp_path / "tree.png"
    assert main(["pools", str(TOPOLOGIES / "three-site-grid.yaml"), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "splits at 1.28 Mbit/s" in out and png.stat().st_size > 1000
    assert main(["pools", str(TOPOLOGIES / "wan-3x16.yaml"), "--ranks", "20", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["nranks"] == 20 and d["pools"][0]["ranks"] == list(range(20))
    assert len(d["partitions"]) >= 1 and len(d["partitions"][0]) == 20


def test_cli_pools_bad_input_is_one_line(tmp_path, capsys):
    assert main(["pools", str(tmp_path / "missing.yaml")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "missing.yaml" in err
    assert main(["pools", str(TOPOLOGIES / "three-site-grid.yaml"), "--ranks", "99"]) == 2
    assert "99 ranks" in capsys.readouterr().err
    assert main(["pools", str(TOPOLOGIES / "three-site-grid.yaml"), "--plot",
                 str(tmp_path / "no" / "dir.png")]) == 2


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 30), data=st.data())
def test_components_on_lists_and_in_numpy_agree(n, data):
    bits = np.array(data.draw(st.lists(st.booleans(), min_size=n * n, max_size=n * n)), bool).reshape(n, n)
    adjacent = bits | bits.T
    small = pools._components_small(adjacent)
    saved = pools.SMALL_POOL
    pools.SMALL_POOL = -1
    try:
        big = pools._components(adjacent)
    finally:
        pools.SMALL_POOL = saved
    assert small.tolist() == big.tolist()
