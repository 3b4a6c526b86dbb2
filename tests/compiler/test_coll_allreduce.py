"""Allreduce algorithms (collectives/algorithms/allreduce.py, allreduce_grid.py,
arrival_trees.py): every program passes the verifier and the independent value executor
of test_coll_reduce (every rank ends with every contribution once, in rank order unless
commutative-only) for any rank count, segment count, arrival pattern and site grouping;
the ring sends exactly 2 (P-1)/P n bytes per rank; hier crosses each slow link the
minimum number of times."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from collsched.collectives.algorithms import CollRequest, generate, names
from collsched.collectives.algorithms.allreduce_grid import part_units, part_weights, pool_sites
from collsched.collectives.program import RECV, SEND, piece_units
from collsched.errors import InputError
from collsched.inputs.topology import homogeneous, load_topology
from test_coll_reduce import check_result, sent_units

SLOW = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                  HealthCheck.function_scoped_fixture])
FLAT = ("ring", "rd", "rabenseifner", "arrival")
GRID = ("hier", "hier-spread")


def test_all_registered():
    assert set(FLAT + GRID) <= set(names("allreduce"))


@pytest.mark.parametrize("name", FLAT)
@given(p=st.integers(1, 40), nseg=st.integers(1, 3),
       arrivals=st.one_of(st.none(), st.lists(st.floats(0, 1e-2), min_size=40, max_size=40)),
       order=st.sampled_from(["auto", "preserve", "any"]))
@settings(max_examples=30, **SLOW)
def test_flat_correct(name, p, nseg, arrivals, order):
    req = CollRequest("allreduce", p, nbytes=1 << 16, nseg=nseg,
                      arrivals=None if arrivals is None else np.array(arrivals[:p]),
                      options={"order": order} if name == "arrival" else {})
    prog = generate(name, req)
    assert prog.algorithm == name and prog.root == 0
    check_result(prog, range(p))
    if name in ("rd", "rabenseifner") or (name == "arrival" and order == "preserve"):
        assert not prog.commutative_only


@given(p=st.integers(1, 40), nseg=st.integers(1, 4), per=st.integers(1, 50))
@settings(max_examples=40, **SLOW)
def test_ring_bytes_and_messages(p, nseg, per):
    """Each rank sends exactly 2 (P-1) of the P chunks, one message per segment, to its
    successor: 2 (P-1)/P n bytes when n divides into the P x nseg segments; the flag says
    commutative-only exactly when P > 2."""
    prog = generate("ring", CollRequest("allreduce", p, nseg=nseg))
    assert prog.nseg == p * nseg
    n = prog.nseg * per
    assert sent_units(prog, n) == [2 * (p - 1) * n // p] * p
    for r, lst in enumerate(prog.ops):
        sends = [op for op in lst if op.kind == SEND]
        assert len(sends) == 2 * (p - 1) * nseg
        assert all(op.peer == (r + 1) % p and len(op.pieces) == 1 for op in sends)
    assert prog.commutative_only == (p > 2)
    if p <= 12:
        check_result(prog, range(p))


def test_ring_has_no_phase_barrier():
    """No fence or FIFO anywhere; rank 1 forwards the first reduced segment of the
    allgather before it has received its last reduce-scatter segment... of a later chunk:
    the lists interleave by step only, and a send waits only on receives of its pieces."""
    prog = generate("ring", CollRequest("allreduce", 6, nseg=4))
    assert not any(op.fence or op.fifo for lst in prog.ops for op in lst)


@given(p=st.integers(1, 40), nseg=st.integers(1, 3), per=st.integers(1, 20))
@settings(max_examples=30, **SLOW)
def test_rabenseifner_and_rd_bytes(p, nseg, per):
    pof2 = 1 << (p.bit_length() - 1)
    rab = generate("rabenseifner", CollRequest("allreduce", p, nseg=nseg))
    rd = generate("rd", CollRequest("allreduce", p, nseg=nseg))
    n = rab.nseg * per
    steps = pof2.bit_length() - 1
    for r, (a, b) in enumerate(zip(sent_units(rab, n), sent_units(rd, rd.nseg * per))):
        folded = r < 2 * (p - pof2)
        # The group's ranks: 2 (1 - 1/pof2) n, plus n to return the result to a folded rank.
        assert a == (n if folded and r % 2 == 0 else 2 * (n - n // pof2) + (n if folded else 0))
        assert b == rd.nseg * per * (1 if folded and r % 2 == 0 else steps + folded)


# --- grid -------------------------------------------------------------------------------


def grouped_topology(tmp_path, labels, lan=5e-6, wan_lat=0.01, bw=1.25e9):
    """One host per rank, host i in site labels[i] (any grouping: non-contiguous too);
    wide-area links 10 to 20 times slower than the LANs, so the pool tree's sites are the
    labels."""
    names_ = sorted(set(labels))
    lines = ["hosts:"] + [f"  - {{name: h{i}, site: {s}}}" for i, s in enumerate(labels)]
    lines += ["sites:"] + [f"  - {{name: {s}, lan: {{latency: {lan}, bandwidth: {bw}}}}}" for s in names_]
    pairs = [(a, b) for i, a in enumerate(names_) for b in names_[i + 1:]]
    lines += ["wan: [" + ", ".join(f"{{between: [{a}, {b}], latency: {wan_lat * (1 + k % 3)}, "
                                   f"bandwidth: {bw / (10 + 10 * (k % 2))}}}"
                                   for k, (a, b) in enumerate(pairs)) + "]"]
    path = tmp_path / "g.yaml"
    path.write_text("\n".join(lines) + "\n")
    return load_topology(str(path))


def wide_area(prog, sites, nunits):
    """(messages, units) per ordered site pair crossing the wide area."""
    site = {r: k for k, m in enumerate(sites) for r in m}
    units = piece_units(nunits, prog.nseg)
    count, size = {}, {}
    for r, lst in enumerate(prog.ops):
        for op in lst:
            if op.kind == SEND and site[r] != site[op.peer]:
                key = (site[r], site[op.peer])
                count[key] = count.get(key, 0) + 1
                size[key] = size.get(key, 0) + sum(units[q.seg] for q in op.pieces)
    return count, size


@pytest.mark.parametrize("name", GRID)
@given(labels=st.lists(st.sampled_from("ABCD"), min_size=1, max_size=24), nseg=st.integers(1, 3),
       wan=st.sampled_from(["auto", "exchange", "rsag"]), per=st.integers(1, 6),
       nbytes=st.sampled_from([1 << 20, 1 << 26]), intra=st.sampled_from(["auto", "binomial", "chain"]))
@settings(max_examples=25, **SLOW)
def test_grid_correct_and_wide_area_minimal(tmp_path, name, labels, nseg, wan, per, nbytes, intra):
    topo = grouped_topology(tmp_path, labels)
    p = len(labels)
    sites = pool_sites(topo)
    assert sorted(map(tuple, sites)) == sorted(
        tuple(i for i, x in enumerate(labels) if x == s) for s in set(labels))
    prog = generate(name, CollRequest("allreduce", p, nbytes=nbytes, nseg=nseg, topology=topo,
                                      options={"wan": wan, "intra": intra}))
    check_result(prog, range(p))
    contiguous = all(m == list(range(m[0], m[0] + len(m))) for m in sites)
    assert prog.commutative_only == (not contiguous)
    mode = prog.notes["wan"]
    assert wan == "auto" or mode == wan
    s = len(sites)
    n = prog.nseg * per
    count, size = wide_area(prog, sites, n)
    if mode == "exchange":
        # Each slow link carries each site's partial once each way: n per direction.
        assert set(count) == {(x, y) for x in range(s) for y in range(s) if x != y}
        assert all(v == n for v in size.values())
    else:
        # Reduce-scatter + allgather: the pair x, y carries parts x and y each way, and
        # nothing else (equal parts: 2 n / S per direction).
        u = prog.notes["part_units"]
        assert len(u) == s and (prog.notes["wan_fifo"] or u == [1] * s)
        want = {(x, y): n * (u[x] + u[y]) // sum(u) for x in range(s) for y in range(s)
                if x != y and u[x] + u[y]}
        assert size == want
    if name == "hier":
        # From the leaders only: one message per segment and direction (rsag: one per
        # phase that moves a non-empty part).
        u = prog.notes["part_units"]
        for (x, y), v in count.items():
            assert v == nseg * (1 if mode == "exchange" else (u[x] > 0) + (u[y] > 0))


@given(st.integers(2, 6), st.data())
@settings(max_examples=40, **SLOW)
def test_part_weights_minimise_the_busiest_link(s, data):
    """The simplex's shares are feasible and no worse than uniform shares or random ones."""
    rate = np.array(data.draw(st.lists(st.floats(0.1, 100.0), min_size=s * s, max_size=s * s))).reshape(s, s)
    np.fill_diagonal(rate, np.inf)
    c = np.minimum(rate, rate.T)

    def busiest(w):
        return max((w[x] + w[y]) / c[x, y] for x in range(s) for y in range(s) if x != y)

    w = part_weights(rate)
    assert np.all(w >= 0) and abs(w.sum() - 1) < 1e-9
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    for other in [np.full(s, 1.0 / s)] + list(rng.dirichlet(np.ones(s), 30)):
        assert busiest(w) <= busiest(other) * (1 + 1e-9)
    u = part_units(w, 8 * s)
    assert sum(u) == 8 * s and all(abs(a - b * 8 * s) < 1 for a, b in zip(u, w))


def test_three_site_grid_pipelined_parts_spare_the_slow_site():
    """Pipelined on three-site-grid, UT (all its links slow) homes no part; every link
    then carries what the cut around UT needs, not 2 n / 3."""
    topo = load_topology("three-site-grid")
    prog = generate("hier-spread", CollRequest("allreduce", 20, nbytes=1 << 20, nseg=4, topology=topo))
    assert prog.notes["wan"] == "rsag" and prog.notes["wan_fifo"]
    u = prog.notes["part_units"]
    assert u[0] == 0 and u[1] > 0 and u[2] > 0
    check_result(prog, range(20))


def test_hier_on_the_bundled_grids():
    for tname, sizes, mode in (("three-site-grid", [8, 4, 8], "rsag"), ("wan-3x16", [16, 16, 16], "exchange")):
        topo = load_topology(tname)
        p = topo.nranks
        assert [len(m) for m in pool_sites(topo)] == sizes
        for name in GRID:
            prog = generate(name, CollRequest("allreduce", p, nbytes=1 << 20, nseg=1, topology=topo))
            assert prog.notes["wan"] == mode  # bandwidth-bound vs latency-bound wide area
            assert not prog.commutative_only
            check_result(prog, range(p))


def test_one_site_is_reduce_then_bcast():
    topo = homogeneous(9)
    prog = generate("hier", CollRequest("allreduce", 9, nbytes=1000, nseg=2, topology=topo))
    check_result(prog, range(9))
    # binomial up (8 edges) and down (8 edges), per segment
    assert sum(op.kind == SEND for lst in prog.ops for op in lst) == 2 * 8 * 2


def test_grid_refusals():
    with pytest.raises(InputError, match="--topology"):
        generate("hier", CollRequest("allreduce", 4))
    with pytest.raises(InputError, match="wan"):
        generate("hier", CollRequest("allreduce", 4, topology=homogeneous(4), options={"wan": "x"}))
    with pytest.raises(InputError, match="intra"):
        generate("hier", CollRequest("allreduce", 4, topology=homogeneous(4), options={"intra": "x"}))
    with pytest.raises(InputError, match="topology with 5 ranks"):
        generate("hier-spread", CollRequest("allreduce", 5, topology=homogeneous(4)))
    with pytest.raises(InputError, match="segments"):
        generate("ring", CollRequest("allreduce", 40, nseg=2000))


def test_arrival_allreduce_roots_at_the_latest_rank():
    p = 12
    arr = np.linspace(0, 1e-3, p)
    arr[3] = 5e-2
    prog = generate("arrival", CollRequest("allreduce", p, nbytes=4096, arrivals=arr))
    assert prog.notes["reduction_root"] == 3
    check_result(prog, range(p))
    # Rank 3 sends nothing before its last receive-and-reduce (it only receives, then
    # broadcasts), and receives nothing after it.
    kinds = [op.kind for op in prog.ops[3]]
    assert SEND not in kinds[:max(i for i, k in enumerate(kinds) if k != SEND) + 1]


def test_arrival_broadcast_shape_follows_the_costs():
    """Tiny vectors over a high-latency network: the greedy LogP tree (the root sends to
    many ranks while the first ones are still in flight); large vectors: binomial. Either
    way every rank but the reduction root receives the result exactly once."""
    p = 16
    topo = homogeneous(p, latency_s=1e-3, bandwidth_Bps=1e9)
    for n, shape in ((8, "greedy"), (1 << 24, "binomial")):
        prog = generate("arrival", CollRequest("allreduce", p, nbytes=n, topology=topo,
                                               arrivals=np.linspace(0, 1e-4, p)))
        assert prog.notes["bcast"] == shape
        root = prog.notes["reduction_root"]
        assert root == p - 1
        fan = sum(op.kind == SEND for op in prog.ops[root])
        assert (fan > 4) == (shape == "greedy")  # binomial: log2 16 = 4 children
        overwrites = [sum(op.kind == RECV for op in lst) for lst in prog.ops]
        assert overwrites == [int(r != root) for r in range(p)]
        check_result(prog, range(p))


def test_sites_from_the_pool_tree(tmp_path):
    """Without site labels the pool tree splits where the bandwidth does; with two ranks
    per host a site stays one site (its hosts are not sites)."""
    import dataclasses

    topo = homogeneous(8)
    bw = np.array(topo.bandwidth)
    bw[:4, 4:] = bw[4:, :4] = 125e5
    split = dataclasses.replace(topo, bandwidth=bw)
    assert pool_sites(split) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    prog = generate("hier", CollRequest("allreduce", 8, nbytes=1 << 20, topology=split))
    check_result(prog, range(8))
    path = tmp_path / "two.yaml"
    path.write_text("sites:\n"
                    "  - {name: A, hosts: 3, lan: {latency: 5us, bandwidth: 10Gbit/s}}\n"
                    "  - {name: B, hosts: 3, lan: {latency: 5us, bandwidth: 10Gbit/s}}\n"
                    "wan: [{between: [A, B], latency: 10ms, bandwidth: 1Gbit/s}]\n"
                    "placement: {ranks_per_host: 2}\n")
    two = load_topology(str(path))
    assert two.nranks == 12
    assert pool_sites(two) == [list(range(6)), list(range(6, 12))]


def test_hier_intra_site_shapes():
    """hier's intra-site phases: binomial trees, or chains (each member sends once up and
    once down per segment, to a neighbour in the site); auto takes the chain once the
    segments are at least the members."""
    topo = load_topology("three-site-grid")
    for nseg, want in ((2, "binomial"), (8, "chain")):
        prog = generate("hier", CollRequest("allreduce", 20, nbytes=1 << 20, nseg=nseg, topology=topo))
        assert prog.notes["intra"] == want
    prog = generate("hier", CollRequest("allreduce", 20, nbytes=1 << 20, nseg=2, topology=topo,
                                        options={"intra": "chain"}))
    check_result(prog, range(20))
    sites = pool_sites(topo)
    site = {r: k for k, m in enumerate(sites) for r in m}
    for m in sites:
        for r in m[1:-1]:  # inner members: one send down the chain per segment and phase
            local = [op.peer for op in prog.ops[r] if op.kind == SEND and site[op.peer] == site[r]]
            assert sorted(set(local)) == [r - 1, r + 1] and len(local) == 2 * 2
