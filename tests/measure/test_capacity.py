"""Capacity probes (lab/capacity.py, runtime/measure/collsched_flows.c): the capacity of every
ordered site pair, which pairs share a bottleneck, the TCP window, and the links form they
are written in.

* on fluid networks in Python (fluid_net.py: max-min sharing, TCP window), the inference
  alone: capacities within 1%, the sharing structure exact, the window within 1%;
* under SMPI (CM02) on a SimGrid platform with shared wide-area links written in code
  (platforms.py, measured through --platform/--hostfile) and on a generated `wan:`-form
  platform: latency and bandwidth within 5% of the platform's, capacities within 10%,
  sites exact, the written file loads and its routes give every pair's latency and
  bottleneck;
* collsched-flows under real MPI and its one-line refusal of bad input.
"""
import itertools
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from collsched.cli import main
from collsched.inputs.topology import load_topology
from collsched.lab import capacity as capmod
from collsched.lab import measure as measure_mod
from collsched.lab.measured_links import links_form

from fluid_net import GBIT, FluidNet, bottleneck, four_sites, truth_shares, wan_form
from platforms import shared_four_sites

ROOT = Path(__file__).resolve().parents[2]


def _routes_share(net_desc, p, q):
    """Whether the written description routes p and q through a common link (and the same
    direction of a split one)."""
    hops = {(r["from"], r["to"]): {(h["link"], True) if isinstance(h, dict) else (h, False) for h in r["links"]}
            for r in net_desc["routes"]}
    split = {lk["name"] for lk in net_desc["links"] if lk["sharing"] == "split"}
    common = hops[p] & hops[q]
    shared_any = {n for n, _ in hops[p]} & {n for n, _ in hops[q]} - split
    return bool(common) or bool(shared_any)


def _route_capacity(net_desc, key):
    bw = {}
    for lk in net_desc["links"]:
        bw[lk["name"], False] = lk["bandwidth"]
        bw[lk["name"], True] = lk.get("bandwidth_back") or lk["bandwidth"]
    r = next(r for r in net_desc["routes"] if (r["from"], r["to"]) == key)
    return min(bw[(h["link"], True) if isinstance(h, dict) else (h, False)] for h in r["links"])


def _probe(net: FluidNet):
    meas = net.measurement()
    return meas, capmod.Prober(meas, net.run).probe()


# --- the inference on fluid networks -----------------------------------------------------------

def test_fluid_four_sites_capacity_sharing_window():
    net = four_sites()
    meas, cap = _probe(net)
    site = {h: s for h, s in enumerate(net.host_site)}
    assert sorted(cap.sites) == sorted(net.sites)
    desc = capmod.network_description(cap)
    for key, p in cap.probes.items():
        assert p.capacity == pytest.approx(bottleneck(net, *key), rel=0.01), key
        assert not p.nic_limited and not p.still_growing
        assert _route_capacity(desc, key) == pytest.approx(bottleneck(net, *key), rel=0.01), key
    for p, q in itertools.combinations(cap.probes, 2):
        assert _routes_share(desc, p, q) == truth_shares(net, p, q), (p, q)
    assert cap.tcp_window == pytest.approx(net.window, rel=0.01)
    # every route's latency (links' + its own) plus the LAN halves is the pair's latency
    lat = {lk["name"]: lk["latency"] for lk in desc["links"]}
    for r in desc["routes"]:
        a, b = r["from"], r["to"]
        h = next(i for i, s in site.items() if s == a)
        g = next(i for i, s in site.items() if s == b)
        total = cap.lan[a][0] / 2 + cap.lan[b][0] / 2 + r.get("latency", 0.0) + sum(
            lat[x["link"] if isinstance(x, dict) else x] for x in r["links"])
        assert total == pytest.approx(net.latency(h, g), rel=1e-9)
        assert r.get("latency", 0.0) >= 0


def test_fluid_wan_form_one_split_link_per_site_pair():
    net = wan_form()
    _, cap = _probe(net)
    desc = capmod.network_description(cap)
    assert len(desc["links"]) == 3 and all(lk["sharing"] == "split" for lk in desc["links"])
    for key, p in cap.probes.items():
        assert p.capacity == pytest.approx(10 * GBIT, rel=0.01)
    assert not any(v[2] for v in cap.shares.values())


def test_fluid_nics_are_the_limit():
    # 2 x 2 hosts on 1 Gbit/s NICs behind a 100 Gbit/s link: the NICs' sum is the plateau
    net = FluidNet({"A": (2, 1 * GBIT, 5e-6), "B": (2, 1 * GBIT, 5e-6)},
                   {"ab": 100 * GBIT, "ba": 100 * GBIT}, {("A", "B"): (["ab"], 1e-3), ("B", "A"): (["ba"], 1e-3)})
    _, cap = _probe(net)
    for p in cap.probes.values():
        assert p.nic_limited and p.capacity == pytest.approx(2 * GBIT, rel=0.01)
    assert cap.shares == {}  # nothing to compare: no link was the limit
    assert cap.tcp_window is None  # no single flow was window-limited
    text = links_form(net.measurement(), cap, "nic")
    assert "NIC-limited" in text and "# tcp_window: none written" in text


def test_growth_steps_and_probe_bytes():
    assert capmod.growth_steps(5) == [(1, 1), (2, 1), (4, 1), (5, 1), (5, 2), (5, 4), (5, 8), (5, 16),
                                      (5, 32), (5, 64)]
    assert capmod.growth_steps(1)[0] == (1, 1)
    assert capmod.MIN_BYTES <= capmod.probe_bytes(1e3, 1e-6) <= capmod.probe_bytes(1e9, 0.1) == capmod.MAX_BYTES


def test_links_form_loads_with_the_measured_figures(tmp_path):
    net = four_sites()
    meas, cap = _probe(net)
    path = tmp_path / "m.yaml"
    path.write_text(links_form(meas, cap, "measured", comment="test"))
    topo = load_topology(path)
    assert topo.network is not None and topo.tcp_window == pytest.approx(net.window, rel=0.01)
    n = len(net.host_site)
    for h in range(n):
        for g in range(n):
            if h != g:
                assert topo.latency[h, g] == pytest.approx(net.latency(h, g), rel=1e-6)


# --- SMPI ----------------------------------------------------------------------------------------

def _need_smpi():
    if shutil.which("smpirun") is None:
        pytest.skip("smpirun is not installed")
    for name in ("collsched-measure", "collsched-flows"):
        if not measure_mod.program_path("smpi", name).exists():
            subprocess.run(["make", "-s", "measure"], cwd=ROOT, check=True, capture_output=True)


@pytest.mark.smpi
def test_smpi_shared_four_sites_platform(tmp_path, capsys):
    _need_smpi()
    plat = shared_four_sites()
    xml, hosts = tmp_path / "four.xml", tmp_path / "four.hosts"
    xml.write_text(plat.xml)
    hosts.write_text(plat.hostfile)
    out = tmp_path / "measured.yaml"
    rc = main(["measure", "--backend", "smpi", "--ranks", str(plat.ranks), "--platform", str(xml),
               "--hostfile", str(hosts), "--repeats", "1", "--sweep", "off", "--gap-burst", "0",
               "-o", str(out), "--json"])
    assert rc == 0, capsys.readouterr().err
    report = json.loads(capsys.readouterr().out)
    topo = load_topology(out)
    # sites exact (named site0..3 in host order)
    names = {s: f"site{k}" for k, s in enumerate(plat.sites)}
    assert [names[s] for s in plat.site_of_rank] == [topo.host_site[h] for h in topo.rank_host]
    cap = report["capacity"]
    for (a, b) in plat.routes:
        key = f"{names[a]}->{names[b]}"
        assert cap["pairs"][key]["capacity_Bps"] == pytest.approx(plat.bottleneck(a, b), rel=0.10), key
    first = {s: plat.site_of_rank.index(s) for s in plat.sites}
    for a, b in itertools.permutations(plat.sites, 2):
        i, j = first[a], first[b]
        assert topo.latency[i, j] == pytest.approx(plat.latency(a, b), rel=0.05)
        assert topo.flow_bandwidth()[i, j] == pytest.approx(
            min(plat.bottleneck(a, b), 4 * 2**20 / (2 * plat.latency(a, b))), rel=0.05)
    for s in plat.sites:
        lat, bw = plat.lan(s)
        i = first[s]
        if plat.sites[s][0] > 1:
            assert topo.latency[i, i + 1] == pytest.approx(lat, rel=0.05)
            assert topo.bandwidth[i, i + 1] == pytest.approx(bw, rel=0.05)
    assert cap["tcp_window_bytes"] == pytest.approx(4 * 2**20, rel=0.05)
    # the sharing structure, as read back: two ordered pairs cross a common resource iff they
    # share a limiting one on the platform
    routes = {key: set(r.resources) for key, r in topo.network.routes.items()}
    for p, q in itertools.combinations(plat.routes, 2):
        got = bool(routes[names[p[0]], names[p[1]]] & routes[names[q[0]], names[q[1]]])
        assert got == plat.shares(p, q), (p, q)
    assert cap["wall_s"] > 0 and cap["runs"] >= 2


@pytest.mark.smpi
def test_smpi_wan_form_platform_from(tmp_path):
    _need_smpi()
    src = tmp_path / "wan.yaml"
    src.write_text("""name: wan-3x3
tcp_window: 4MiB
sites:
  - {name: A, hosts: 3, lan: {latency: 5us, bandwidth: 10Gbit/s}}
  - {name: B, hosts: 3, lan: {latency: 5us, bandwidth: 10Gbit/s}}
  - {name: C, hosts: 3, lan: {latency: 5us, bandwidth: 10Gbit/s}}
wan:
  - {between: [A, B], latency: 20ms, bandwidth: 10Gbit/s}
  - {between: [A, C], latency: 40ms, bandwidth: 10Gbit/s}
  - {between: [B, C], latency: 80ms, bandwidth: 10Gbit/s}
""")
    out = tmp_path / "m.yaml"
    report = measure_mod.measure(measure_mod.MeasureConfig(
        backend="smpi", ranks=9, platform_from=str(src), repeats=1, gap_burst=0, fit_sizes=None), out)
    truth, got = load_topology(src, 9), load_topology(out)
    off = ~np.eye(9, dtype=bool)
    np.testing.assert_allclose(got.latency[off], truth.latency[off], rtol=0.05)
    np.testing.assert_allclose(got.flow_bandwidth()[off], truth.flow_bandwidth()[off], rtol=0.05)
    for key, p in report["capacity"]["pairs"].items():
        assert p["capacity_Bps"] == pytest.approx(10 * GBIT, rel=0.10), key
    assert all(lk.sharing == "split" for lk in got.network.links) and len(got.network.links) == 3
    assert report["form"] == "links" and report["capacity"]["runs"] >= 2
    text = measure_mod.text_report(report)
    assert "capacity probes:" in text and "site0->site1: one flow" in text


# --- real MPI: the program itself --------------------------------------------------------------

def _need_mpi():
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun is not installed")
    if not measure_mod.program_path("mpi", "collsched-flows").exists():
        subprocess.run(["make", "-s", "measure"], cwd=ROOT, check=True, capture_output=True)


@pytest.mark.mpi
def test_real_mpi_flows(tmp_path):
    _need_mpi()
    cfg = measure_mod.MeasureConfig(backend="mpi", ranks=4, timeout_s=120)
    times, info = measure_mod.run_flows(cfg, [[(0, 1, 1 << 20, 4), (2, 3, 1000, 1)], [(3, 0, 0, 1)]])
    assert [len(t) for t in times] == [2, 1] and all(x > 0 for t in times for x in t)
    assert info["format"] == "collsched-flows/1" and info["ranks"] == 4


BAD_TESTS = [  # each case starts mpirun (~2 s): a few representative ones
    ("collsched-flows/2\n1\n1\n0 1 1 1\n", "first word"),
    ("collsched-flows/1\n1\n1\n0 9 1 1\n", "two different ranks"),
    ("collsched-flows/1\n1\n1\n0 1 5 100000\n", "COUNT"),
    ("collsched-flows/1\n1\n1\n0 1 5 1 7\n", "unexpected text"),
]


@pytest.mark.mpi
@pytest.mark.parametrize("text, mention", BAD_TESTS)
def test_flows_refuses_bad_input_in_one_line(text, mention, tmp_path):
    _need_mpi()
    spec = tmp_path / "tests.txt"
    spec.write_text(text)
    cmd, env = measure_mod.launch_command(measure_mod.MeasureConfig(backend="mpi", ranks=2), tmp_path,
                                          [str(measure_mod.program_path("mpi", "collsched-flows")),
                                           "--tests", str(spec), "--output", str(tmp_path / "o.json")])
    import os
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env={**os.environ, **env})
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("collsched-flows:")]
    assert len(lines) == 1 and mention in lines[0], proc.stderr
    assert not (tmp_path / "o.json").exists()


def test_fluid_site_of_one_host():
    # B has one host (no LAN pair, its NIC unknown): messages in flight fill the 5 Gbit/s link
    net = FluidNet({"A": (4, 10 * GBIT, 5e-6), "B": (1, 10 * GBIT, 5e-6)},
                   {"ab": 5 * GBIT, "ba": 5 * GBIT}, {("A", "B"): (["ab"], 10e-3), ("B", "A"): (["ba"], 10e-3)})
    _, cap = _probe(net)
    for p in cap.probes.values():
        assert not p.nic_limited and p.capacity == pytest.approx(5 * GBIT, rel=0.01)
    assert cap.tcp_window == pytest.approx(net.window, rel=0.01)
    assert cap.lan["B"][1] >= 5 * GBIT * 0.99  # at least what it moved


def test_many_tests_are_split_over_launches(monkeypatch):
    monkeypatch.setattr(capmod, "MAX_TESTS_PER_RUN", 5)
    net = four_sites()
    meas = net.measurement()
    launches = []

    def run(tests, phase):
        launches.append(len(tests))
        return net.run(tests)
    cap = capmod.Prober(meas, run).probe()
    assert max(launches) <= 5 and cap.runs == len(launches) and cap.tests == sum(launches)
    assert cap.probes["paris", "chicago"].capacity == pytest.approx(5 * GBIT, rel=0.01)
