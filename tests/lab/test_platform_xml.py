"""SimGrid platforms: the one the lab generates from a topology's wide-area links (checked
through SimGrid against the topology's formulas and sharing), and a user's own platform and
host file (simgrid_platform.load_platform; bench --platform --hostfile under SMPI)."""
import dataclasses
import hashlib
import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from collsched.cli import main
from collsched.errors import InputError
from collsched.inputs import network as nw
from collsched.inputs.topology import _from_hosts, load_topology
from collsched.lab.platform import build_platform
from collsched.lab.simgrid_platform import load_platform
from collsched.runtime_build import build_dir

ROOT = Path(__file__).resolve().parents[2]
TOPO = ROOT / "topologies"
DATA = ROOT / "tests" / "data" / "platforms"
MINIBENCH = build_dir() / "smpi" / "bin" / "collsched-minibench"
G = 1e9 / 8  # 1 Gbit/s in bytes/s


# --- topologies with wide-area links, built in code -----------------------------------------

def links_topology(sites, links, via=None, own=None, window=None):
    """sites: [(name, hosts, lan latency, lan bandwidth)]; own: {(a, b): a route's own latency}.
    Host matrices by the spec's formulas: L = lan_a/2 + route + lan_b/2, b = min(NICs, route)."""
    names = [s[0] for s in sites]
    net = nw.resolve(links, names, via)
    routes = dict(net.routes)
    for (a, b), extra in (own or {}).items():
        r = routes[a, b]
        more = {"own_latency": extra} if hasattr(r, "own_latency") else {}
        routes[a, b] = dataclasses.replace(r, latency=r.latency + extra, **more)
    net = dataclasses.replace(net, routes=routes)
    lan, hosts, host_site = {}, [], []
    for name, k, L, B in sites:
        lan[name] = (L, B)
        hosts += [f"{name}-{j}" for j in range(k)]
        host_site += [name] * k
    h = len(hosts)
    hl, hb = np.zeros((h, h)), np.zeros((h, h))
    for i in range(h):
        for j in range(h):
            a, b = host_site[i], host_site[j]
            if i == j:
                hl[i, j], hb[i, j] = 1e-6, 10e9
            elif a == b:
                hl[i, j], hb[i, j] = lan[a]
            else:
                r = net.routes[a, b]
                hl[i, j] = lan[a][0] / 2 + r.latency + lan[b][0] / 2
                hb[i, j] = min(lan[a][1], lan[b][1], r.bandwidth)
    t = _from_hosts("links-test", "<test>", hosts, host_site, np.arange(h), hl, hb, True)
    return dataclasses.replace(t, network=net, tcp_window=window)


def example():
    """paris (3 hosts) behind fr-eu and the shared atlantic; chicago behind a split link whose
    way back is slower; tokyo behind a split pacific; sydney, one host, behind tokyo; a route
    with a latency of its own (paris -> tokyo)."""
    sites = [("paris", 3, 10e-6, 25 * G), ("chicago", 2, 20e-6, 10 * G), ("tokyo", 2, 10e-6, 10 * G),
             ("sydney", 1, 0.0, 10 * G)]
    links = [nw.WanLink("fr-eu", ("paris", "eu-gw"), 1e-3, 100 * G),
             nw.WanLink("atlantic", ("eu-gw", "us-gw"), 40e-3, 2.5 * G),
             nw.WanLink("us-chi", ("us-gw", "chicago"), 2e-3, 40 * G, nw.SPLIT, 2 * G),
             nw.WanLink("pacific", ("us-gw", "tokyo"), 60e-3, 5 * G, nw.SPLIT),
             nw.WanLink("syd", ("tokyo", "sydney"), 30e-3, 8 * G, nw.SPLIT, 4 * G)]
    return links_topology(sites, links, own={("paris", "tokyo"): 3e-3})


# --- the generated platform: what it says ------------------------------------------------------

# The XML the lab generated before the links form (commit 3a408e0): the `wan:` form and the
# class-shaped cluster keep producing exactly it.
UNCHANGED = {
    "wan-3x16": "36c7bf9749a9fbb9a3a04158a6540b9fd1851d5e4b24285a86c89f2733e2ea50",
    "three-site-grid": "d950867a55a81b85e9a342d815c48af1cb72af5f118f24243f4a7e194cb415d1",
    "tryton-48": "27abad6681e57aa873ae8db6300f0a2c907376ec53b3b2fbc9badd2cf1e890c1",
    "grid-8x128": "e16fafb73cc64872110b24c431d5e8b0551853985fa4271909d76b0bf17aa5da",
}


@pytest.mark.parametrize("name", sorted(UNCHANGED))
def test_wan_form_platform_is_unchanged(name):
    plat = build_platform(load_topology(TOPO / f"{name}.yaml"))
    assert plat.shape == "sites"
    assert hashlib.sha256(plat.xml.encode()).hexdigest() == UNCHANGED[name]


def test_links_platform_says_the_network():
    t = example()
    plat = build_platform(t)
    assert plat.shape == "links"
    zone = ET.fromstring(plat.xml).find("zone")
    clusters = zone.findall("cluster")
    assert [c.get("radical") for c in clusters] == ["0-2", "0-1", "0-1", "0-0"]
    assert all(c.get("sharing_policy") == "SPLITDUPLEX" for c in clusters)
    assert float(clusters[1].get("bw")[:-3]) == 10 * G and float(clusters[1].get("lat")[:-1]) == 10e-6
    links = {lk.get("id"): lk for lk in zone.findall("link")}
    policy = {k: v.get("sharing_policy") for k, v in links.items()}
    # fr-eu, atlantic shared; us-chi split with a slower way back: two links; pacific split
    assert policy == {"wan-0": "SHARED", "wan-1": "SHARED", "wan-2_UP": "SHARED", "wan-2_DOWN": "SHARED",
                      "wan-3": "SPLITDUPLEX", "wan-4_UP": "SHARED", "wan-4_DOWN": "SHARED",
                      "lat-0-2": "FATPIPE"}
    assert float(links["wan-2_DOWN"].get("bandwidth")[:-3]) == 2 * G
    assert float(links["lat-0-2"].get("latency")[:-1]) == pytest.approx(3e-3)
    routes = {(r.get("src"), r.get("dst")): [(c.get("id"), c.get("direction")) for c in r]
              for r in zone.findall("zoneRoute")}
    assert len(routes) == 12 and all(r.get("symmetrical") == "NO" for r in zone.findall("zoneRoute"))
    assert routes["site0", "site2"] == [("wan-0", None), ("wan-1", None), ("wan-3", "UP"), ("lat-0-2", None)]
    assert routes["site2", "site0"] == [("wan-3", "DOWN"), ("wan-1", None), ("wan-0", None)]
    assert routes["site1", "site0"] == [("wan-2_DOWN", None), ("wan-1", None), ("wan-0", None)]
    assert routes["site3", "site1"] == [("wan-4_DOWN", None), ("wan-3", "DOWN"), ("wan-2_UP", None)]
    assert plat.hostfile.split() == ["s0-0", "s0-1", "s0-2", "s1-0", "s1-1", "s2-0", "s2-1", "s3-0"]


# --- the generated platform through SimGrid ----------------------------------------------------

@pytest.fixture(scope="module")
def flows(tmp_path_factory):
    """tests/data/platforms/flows.c built with smpicc."""
    if shutil.which("smpicc") is None or shutil.which("smpirun") is None:
        pytest.skip("SimGrid SMPI missing (make deps)")
    exe = tmp_path_factory.mktemp("flows") / "flows"
    subprocess.run(["smpicc", "-O1", "-o", str(exe), str(DATA / "flows.c")], check=True,
                   capture_output=True, timeout=120)
    return exe


def run_flows(flows, directory, ranks, nbytes, rounds, gamma=1e15, xml=None, hosts=None):
    """Per round, per pair, seconds from the send's start to the receive's end."""
    cmd = ["smpirun", "-np", str(ranks), "-platform", str(xml or directory / "platform.xml"),
           "-hostfile", str(hosts or directory / "platform.hosts"), "--cfg=network/model:CM02",
           "--cfg=network/crosstraffic:0", f"--cfg=network/TCP-gamma:{gamma:.0f}",
           "--cfg=smpi/simulate-computation:no", "--log=root.thres:error", str(flows), str(nbytes), *rounds]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=directory)
    assert out.returncode == 0, out.stderr[-2000:]
    return [[float(x) for x in ln.split(":")[1].split()] for ln in out.stdout.splitlines()
            if ln.startswith("round")]


@pytest.mark.smpi
def test_links_platform_gives_every_pair_the_formulas(flows, tmp_path):
    """Every ordered host pair alone: latency (1 byte) and bandwidth (10 MB) as the topology's
    formulas say: L = lan_a/2 + route (links + its own) + lan_b/2, b = min(NICs, links)."""
    t = example()
    build_platform(t).write(tmp_path)
    h = len(t.hosts)
    pairs = [(i, j) for i in range(h) for j in range(h) if i != j]
    rounds = [f"{i}-{j}" for i, j in pairs]
    m = 10_000_000
    small, big = run_flows(flows, tmp_path, h, 1, rounds), run_flows(flows, tmp_path, h, m, rounds)
    for (i, j), s, b in zip(pairs, small, big):
        L, B = t.host_latency[i, j], t.host_bandwidth[i, j]
        # SMPI adds a few tens of nanoseconds per message; the clock's microsecond naps none
        assert s[0] - 1 / B == pytest.approx(L, rel=3e-3, abs=50e-9), (i, j)
        assert (m - 1) / (b[0] - s[0]) == pytest.approx(B, rel=1e-4), (i, j)


@pytest.mark.smpi
def test_shared_links_share_and_split_directions_do_not(flows, tmp_path):
    t = example()
    build_platform(t).write(tmp_path)
    m = 10_000_000

    def rates(*pairs, gamma=1e15):
        d = run_flows(flows, tmp_path, len(t.hosts), m, [",".join(f"{i}-{j}" for i, j in pairs)], gamma)[0]
        return [m / (x - t.host_latency[i, j]) for (i, j), x in zip(pairs, d)]

    atlantic = 2.5 * G  # paris <-> chicago's bottleneck, shared by both directions
    assert rates((0, 3)) == pytest.approx([atlantic], rel=1e-3)
    assert rates((0, 3), (1, 4)) == pytest.approx([atlantic / 2] * 2, rel=1e-3)  # same way: half each
    assert rates((0, 3), (4, 1)) == pytest.approx([atlantic / 2] * 2, rel=1e-3)  # both ways: half each
    # split links: each direction its own capacity, alone or together
    assert rates((5, 7), (7, 6)) == pytest.approx([8 * G, 4 * G], rel=1e-3)  # syd, back 4G
    assert rates((5, 3), (4, 6)) == pytest.approx([5 * G, 2 * G], rel=1e-3)  # pacific both ways
    # the TCP window caps one flow at window / (2 L), L the pair's whole latency
    window = 4 << 20
    assert rates((0, 5), gamma=window) == pytest.approx([window / (2 * t.host_latency[0, 5])], rel=1e-3)


# Flows started together (two hosts per site, ranks 2k and 2k+1 in site k): the bundled
# platforms' shared links crossed by several flows, both ways, and a split link both ways.
TOGETHER = {"four-site": ["0-4,2-5", "0-4,5-2", "4-6,7-5", "0-6,2-7,6-1", "1-3,3-0,4-7,6-5"],
            "hub-3site": ["0-2,1-4", "0-2,3-1", "2-4,5-0", "0-4,2-5,4-1"]}


@pytest.mark.smpi
@pytest.mark.parametrize("name", sorted(TOGETHER))
def test_bundled_platform_is_its_yaml_and_the_hand_written_one(flows, tmp_path, name):
    """topologies/NAME.yaml (links form) through SimGrid, two hosts per site: every ordered
    pair alone has the formulas' latency and bandwidth, and the generated platform times
    every flow, alone or crossing shared links together, as the hand-written
    topologies/NAME.xml does."""
    t = load_topology(TOPO / f"{name}.yaml")
    plat = build_platform(t)
    assert plat.shape == "links"
    plat.write(tmp_path)
    picked = [h for s in t.sites() for h in [i for i, x in enumerate(t.host_site) if x == s][:2]]
    (tmp_path / "gen.hosts").write_text("".join(plat.host_names[h] + "\n" for h in picked))
    (tmp_path / "own.hosts").write_text("".join(t.hosts[h] + "\n" for h in picked))
    n = len(picked)
    pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
    singles = [f"{i}-{j}" for i, j in pairs]
    together = TOGETHER[name]
    m = 10_000_000
    runs = {}
    for which in ("gen", "own"):
        xml = tmp_path / "platform.xml" if which == "gen" else TOPO / f"{name}.xml"
        go = lambda size, rounds: run_flows(flows, tmp_path, n, size, rounds, xml=xml,
                                            hosts=tmp_path / f"{which}.hosts")
        runs[which] = (go(1, singles), go(m, singles + together))
    for (i, j), s, b in zip(pairs, *runs["gen"]):
        L, B = t.host_latency[picked[i], picked[j]], t.host_bandwidth[picked[i], picked[j]]
        assert s[0] - 1 / B == pytest.approx(L, rel=3e-3, abs=50e-9), (i, j)
        assert (m - 1) / (b[0] - s[0]) == pytest.approx(B, rel=1e-4), (i, j)
    for mine, theirs in zip(sum(runs["gen"], []), sum(runs["own"], [])):
        assert mine == pytest.approx(theirs, rel=1e-6)


# --- a user's platform --------------------------------------------------------------------------

PLATFORM = """<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">
<platform version="4.1">
<zone id="w" routing="Full">
  <zone id="z1" routing="Full"><zone id="z2" routing="Full"><host id="x" speed="1Gf"/></zone></zone>
  <cluster id="c" prefix="n" suffix=".a" radical="0-3,7,9-10" speed="1Gf" bw="1GBps" lat="1us"/>
  <cabinet id="cab" prefix="k" suffix="" radical="1-2" speed="1Gf" bw="1GBps" lat="1us"/>
</zone></platform>
"""


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_load_platform_reads_hosts_at_any_depth_and_smpi_host_files(tmp_path):
    xml = write(tmp_path, "p.xml", PLATFORM)
    hosts = write(tmp_path, "h", "x:2\n\n  n7.a  \nn10.a\nk2:1\n")
    up = load_platform(xml, hosts, 5)
    assert up.platform_hosts == ["x", "n0.a", "n1.a", "n2.a", "n3.a", "n7.a", "n9.a", "n10.a", "k1", "k2"]
    assert up.hosts == ["x", "x", "n7.a", "n10.a", "k2"]
    assert up.xml == Path(xml).resolve() and up.hostfile.is_absolute()
    assert load_platform(xml, hosts).hosts == up.hosts  # no rank count: every slot
    up.write_hostfile(tmp_path / "used", 3)
    assert (tmp_path / "used").read_text() == "x\nx\nn7.a\n"


def test_the_bundled_two_zone_platform_loads():
    up = load_platform(str(DATA / "two-zone.xml"), str(DATA / "two-zone.hosts"), 5)
    assert up.platform_hosts == ["e0", "e1", "e2", "w0", "w1"]
    assert up.hosts == ["e0", "e0", "w0", "e1", "w1"]


LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
 <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
 <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
 <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
 <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<platform version="4.1"><zone id="w" routing="Full"><host id="&lol9;" speed="1Gf"/></zone></platform>
"""


@pytest.mark.parametrize("xml, hosts, ranks, says", [
    (LAUGHS, "x\n", 1, "<!ENTITY: expected no entity declarations"),
    ("name: t\nsites: [{name: a, hosts: 2}]\n", "x\n", 1, "this is YAML: a topology goes to --topology"),
    ("just words\n", "x\n", 1, "got text that is not XML"),
    ("<platform><zone>\n", "x\n", 1, "line 2: expected well-formed XML"),
    ("<topology/>", "x\n", 1, "<topology>: expected a SimGrid platform"),
    ("<platform version='4.1'/>", "x\n", 1, "expected a SimGrid platform with hosts"),
    ("<platform><cluster id='c' prefix='n' radical='3-1'/></platform>", "n1\n", 1,
     "<cluster id='c'>: expected a radical such as 0-15"),
    ("<platform><host id='a'/><host id='a'/></platform>", "a\n", 1, "host 'a': expected every host declared once"),
    (PLATFORM, "x\nnope\n", 1, "h: line 2: expected a host of"),
    (PLATFORM, "x:two\n", 1, "h: line 1: expected `host` or `host:count`"),
    (PLATFORM, "x:0\n", 1, "h: line 1: expected `host` or `host:count`"),
    (PLATFORM, "x\nn0.a\n", 3, "h: slots: expected at least 3 slots (one per rank), got 2"),
    (PLATFORM, "\n  \n", 1, "h: --hostfile: expected at least one line"),
])
def test_load_platform_errors_are_one_line(tmp_path, xml, hosts, ranks, says):
    with pytest.raises(InputError) as e:
        load_platform(write(tmp_path, "p.xml", xml), write(tmp_path, "h", hosts), ranks)
    line = str(e.value)
    assert says in line and "\n" not in line, line


def test_load_platform_refuses_what_is_not_a_file_without_reading(tmp_path):
    hosts = write(tmp_path, "h", "x\n")
    os.mkfifo(tmp_path / "fifo")  # opening it would block: refused by its type
    for path, says in [(str(tmp_path), "found a directory"), ("/dev/zero", "found a special file"),
                       (str(tmp_path / "fifo"), "found a special file"), (str(tmp_path / "no.xml"), "expected an existing")]:
        with pytest.raises(InputError, match=says):
            load_platform(path, hosts)
    with pytest.raises(InputError, match="--hostfile: expected a regular host file"):
        load_platform(write(tmp_path, "p.xml", PLATFORM), "/dev/zero")


def test_load_platform_bounds_the_platforms_size(tmp_path, monkeypatch):
    from collsched.lab import simgrid_platform

    monkeypatch.setattr(simgrid_platform, "MAX_PLATFORM_BYTES", 100)
    with pytest.raises(InputError, match="at most 100 bytes"):
        load_platform(write(tmp_path, "p.xml", PLATFORM), write(tmp_path, "h", "x\n"))


# --- bench --platform ---------------------------------------------------------------------------

@pytest.mark.parametrize("argv, says", [
    (["--platform", str(DATA / "two-zone.xml")], "--platform: " + str(DATA / "two-zone.xml") +
     ": expected --hostfile FILE with it"),
    (["--platform", str(DATA / "two-zone.xml"), "--hostfile", str(DATA / "two-zone.hosts"), "--backend", "mpi"],
     "expected only with --backend smpi"),
    (["--platform", str(DATA / "two-zone.xml"), "--hostfile", str(DATA / "two-zone.hosts"), "--suite", "scale"],
     "expected only with --suite lab, model, recurring, intergroup, platforms: scale runs its own platforms"),
    (["--platform", str(TOPO / "wan-3x16.yaml"), "--hostfile", str(DATA / "two-zone.hosts")],
     "this is YAML: a topology goes to --topology"),
    (["--platform", str(DATA / "two-zone.xml"), "--hostfile", str(DATA / "two-zone.hosts"), "--ranks", "5"],
     "expected --topology with it"),
    (["--platform", str(DATA / "two-zone.xml"), "--hostfile", str(DATA / "two-zone.hosts"), "--ranks", "6",
      "--topology", str(DATA / "two-zone.yaml")], "expected at least 6 slots"),
    (["--platform", str(DATA / "two-zone.xml"), "--hostfile", str(DATA / "two-zone.hosts"), "--suite",
      "intergroup"], "expected no --platform with --suite intergroup"),
])
def test_bench_platform_refusals_one_line_exit_2(argv, says, capsys):
    assert main(["bench", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("collsched: error:") and "\n" not in err and says in err, err


@pytest.mark.smpi
def test_bench_runs_on_the_users_platform(tmp_path):
    """The hand-written two-zone platform: every byte checked, SimGrid ran that XML with the
    host file's placement, the compiler and the models used --topology."""
    from collsched.lab.runner import LabConfig, run_lab

    if shutil.which("smpirun") is None or not MINIBENCH.exists():
        pytest.skip("SimGrid SMPI or build/smpi/bin/collsched-minibench missing (make)")
    cfg = LabConfig("smpi", str(DATA / "two-zone.yaml"), 5, 65537, iterations=2, max_delay_ms=1.0,
                    workdir=str(tmp_path), platform=str(DATA / "two-zone.xml"), hostfile=str(DATA / "two-zone.hosts"))
    rep = run_lab(cfg, ["ring", "min3", "native"])
    assert [r["data_ok"] for r in rep["results"]] == [True] * 3
    assert all(r["checked_bytes_per_piece"] == 65537 and r["predicted_avg_elapsed_s"] > 0
               for r in rep["results"] if r["algorithm"] != "native")
    assert rep["platform"]["platform"] == str(DATA / "two-zone.xml")
    assert rep["platform"]["hostfile"] == str(DATA / "two-zone.hosts")
    for r in rep["results"]:
        cmd = r["command"]
        assert cmd[cmd.index("-platform") + 1] == str(DATA / "two-zone.xml")
        assert Path(cmd[cmd.index("-hostfile") + 1]).read_text().split() == ["e0", "e0", "w0", "e1", "w1"]
    assert not (tmp_path / "platform.xml").exists()  # nothing generated for SimGrid
    # two-zone.yaml describes the platform (its shared link both ways): the fluid model agrees
    ring = rep["results"][0]
    assert ring["fluid_ratio"] == pytest.approx(1.0, abs=0.05), ring


def test_bench_suite_platforms_passes_the_users_platform(monkeypatch, capsys):
    """bench --suite platforms --platform --hostfile --topology: lab/platforms.py's suite on
    that one platform (a Bundle of the three files), --bytes and --algorithms as lists."""
    from collsched.lab import platforms as suite

    seen = {}

    def fake(bundles, sizes, names, workdir, progress=None):
        seen.update(bundles=bundles, sizes=sizes, names=names, workdir=workdir)
        return {"summary": {"data_ok": True}}, "text report"

    monkeypatch.setattr(suite, "run_platforms_suite", fake)
    argv = ["bench", "--suite", "platforms", "--platform", str(DATA / "two-zone.xml"), "--hostfile",
            str(DATA / "two-zone.hosts"), "--topology", str(DATA / "two-zone.yaml"), "--bytes", "64KiB,1MiB",
            "--algorithms", "min3,ring"]
    assert main(argv) == 0
    (b,) = seen["bundles"]
    assert (b.name, b.yaml, b.xml, b.hosts) == ("two-zone", DATA / "two-zone.yaml", DATA / "two-zone.xml",
                                                DATA / "two-zone.hosts")
    assert seen["sizes"] == [64 << 10, 1 << 20] and seen["names"] == ["min3", "ring"]
    assert capsys.readouterr().out.strip() == "text report"
    assert main(["bench", "--suite", "platforms", "--backend", "mpi"]) == 2


@pytest.mark.smpi
def test_intergroup_case_runs_on_the_users_platform(tmp_path):
    from collsched.intergroup import Groups
    from collsched.lab.intergroup_run import InterConfig, run_intergroup

    if shutil.which("smpirun") is None or not (build_dir() / "smpi" / "bin" / "collsched-inter-bench").exists():
        pytest.skip("SimGrid SMPI or build/smpi/bin/collsched-inter-bench missing (make)")
    cfg = InterConfig(Groups.equal(3, 2, 4099, 4099), topology=str(DATA / "two-zone.yaml"), workdir=str(tmp_path),
                      platform=str(DATA / "two-zone.xml"), hostfile=str(DATA / "two-zone.hosts"))
    rep = run_intergroup(cfg, ["kang", "native"])
    assert all(r["data_ok"] for r in rep["results"])
    assert rep["platform"]["platform"] == str(DATA / "two-zone.xml")
    for r in rep["results"]:
        assert r["command"][r["command"].index("-platform") + 1] == str(DATA / "two-zone.xml")


def test_a_placement_other_than_the_topologys_is_noted():
    from collsched.lab.simgrid_platform import placement_note

    up = load_platform(str(DATA / "two-zone.xml"), str(DATA / "two-zone.hosts"), 5)  # e0 e0 w0 e1 w1
    assert placement_note(up, [0, 0, 3, 1, 4], 5) is None  # other names, the same grouping
    assert placement_note(up, [7, 7, 2, 1, 4], 5) is None
    assert "ranks 0 and 1 on one host" in placement_note(up, [0, 1, 3, 2, 4], 5)
    assert "ranks 0 and 2 on different hosts" in placement_note(up, [0, 0, 0, 1, 4], 5)
