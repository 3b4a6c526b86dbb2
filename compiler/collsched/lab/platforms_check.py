"""Does a SimGrid platform run the network its topology YAML describes? (issue 21; the
bundled multi-site platforms, docs/platforms.md)

Two checks of a platform XML + host file against a topology with wide-area links:

* `compare_files`: the files themselves (platforms_xml.py reads the XML): the same sites
  with the same hosts, NICs, TCP window, per ordered site pair the same route latency and
  link capacities, and the same sharing: every resource (a shared link, or one direction
  of a split one) is crossed by the same set of ordered site pairs in both;
* `check_smpi`: SimGrid itself, through collsched-flows (runtime/measure/collsched_flows.c)
  under smpirun on the XML: every ordered host pair's one flow alone (1 B and 4 MiB)
  against the spec's formulas (L = lan_a / 2 + route + lan_b / 2, rate = min(NICs, the
  route's links, tcp_window / 2L)), and for every wide-area resource a test with enough
  concurrent flows to fill it, every site pair that crosses it at once, against a fluid
  replay of the topology (`expect_flows`: weighted max-min sharing by 1 / RTT as SimGrid's
  CM02 does, each flow first waiting its latency).
"""
from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..inputs.links import host_matrices
from .platforms_xml import read_platform
from .simgrid_platform import load_platform

EXACT = 1e-6  # relative: values that must agree (files; SimGrid's clock is printed at 1e-17)
PAIR_BYTES = (1, 4 << 20)
FILL_BYTES = 16 << 20
SMPI_TIMEOUT_S = 900


def _close(a: float, b: float, tol: float = EXACT) -> bool:
    return abs(a - b) <= tol * max(abs(a), abs(b), 1e-300)


def compare_files(xml: str | Path, hostfile: str | Path, topo) -> list[str]:
    """Every difference between the platform files and the topology (empty: they agree)."""
    plat = read_platform(xml)
    diffs = []
    net = topo.network
    if net is None:
        return [f"{topo.source}: no wide-area links (expected a topology with links:)"]
    sites = list(dict.fromkeys(topo.host_site))
    if set(sites) != set(plat.sites):
        diffs.append(f"sites: YAML {sorted(sites)}, XML {sorted(plat.sites)}")
        return diffs
    for s in sites:
        mine = [h for h, hs in zip(topo.hosts, topo.host_site) if hs == s]
        if mine != plat.sites[s].hosts:
            diffs.append(f"site {s}: hosts differ (YAML {len(mine)}, XML {len(plat.sites[s].hosts)})")
        lat, bw = net.lan[s]
        if not _close(bw, plat.sites[s].nic_bandwidth):
            diffs.append(f"site {s}: NIC {bw:g} B/s in YAML, {plat.sites[s].nic_bandwidth:g} in XML")
        if not _close(lat, 2 * plat.sites[s].nic_latency):
            diffs.append(f"site {s}: LAN latency {lat:g} s in YAML, 2 x {plat.sites[s].nic_latency:g} in XML")
        if plat.sites[s].sharing != "SPLITDUPLEX":
            diffs.append(f"site {s}: NICs {plat.sites[s].sharing} in XML (expected SPLITDUPLEX: full duplex)")
    if plat.tcp_gamma is None or not _close(plat.tcp_gamma, float(topo.tcp_window or 0)):
        diffs.append(f"TCP window: YAML {topo.tcp_window}, XML network/TCP-gamma {plat.tcp_gamma}")
    hosts = load_platform(str(plat.path), str(hostfile)).hosts
    ranked = [topo.hosts[int(h)] for h in topo.rank_host]
    if hosts[:len(ranked)] != ranked:
        diffs.append(f"{hostfile}: rank placement differs from the topology's")
    for (a, b), route in net.routes.items():
        if (a, b) not in plat.routes:
            diffs.append(f"route {a} -> {b}: missing in XML")
            continue
        mine = sorted(net.resources[r].capacity for r in route.resources)
        theirs = sorted(plat.links[lk].bandwidth for _, lk in plat.routes[a, b])
        if len(mine) != len(theirs) or not all(_close(x, y) for x, y in zip(mine, theirs)):
            diffs.append(f"route {a} -> {b}: capacities {mine} in YAML, {theirs} in XML")
        if not _close(route.latency + getattr(route, "own_latency", 0.0), plat.route_latency(a, b)):
            diffs.append(f"route {a} -> {b}: latency {route.latency:g} s in YAML, "
                         f"{plat.route_latency(a, b):g} in XML")
    diffs += _sharing_diffs(net, plat)
    return diffs


def _sharing_diffs(net, plat) -> list[str]:
    """Resources as the sets of ordered site pairs crossing them, with their capacities."""
    yaml_users: dict[int, set] = {}
    for pair, route in net.routes.items():
        for r in route.resources:
            yaml_users.setdefault(r, set()).add(pair)
    mine = {frozenset(p): net.resources[r].capacity for r, p in yaml_users.items()}
    theirs = {frozenset(p): plat.links[res.rstrip("<>")].bandwidth for res, p in plat.users().items()}
    diffs = []
    for pairs, cap in mine.items():
        other = theirs.get(pairs)
        names = ", ".join(f"{a}->{b}" for a, b in sorted(pairs))
        if other is None:
            diffs.append(f"sharing: no XML resource is crossed by exactly {names}")
        elif not _close(cap, other):
            diffs.append(f"sharing: the resource of {names}: {cap:g} B/s in YAML, {other:g} in XML")
    for pairs in set(theirs) - set(mine):
        diffs.append("sharing: an XML resource is crossed by " + ", ".join(f"{a}->{b}" for a, b in sorted(pairs))
                     + ", no YAML resource by exactly those")
    return diffs


def _path(topo, s: int, d: int):
    """(latency, resources with capacities) of a flow from rank s to rank d."""
    hs, hd = int(topo.rank_host[s]), int(topo.rank_host[d])
    a, b = topo.host_site[hs], topo.host_site[hd]
    net = topo.network
    res = [(f"up:{hs}", net.lan[a][1]), (f"down:{hd}", net.lan[b][1])]
    lat = (net.lan[a][0] + net.lan[b][0]) / 2
    if a != b:
        route = net.routes[a, b]
        res += [(net.resources[r].name, net.resources[r].capacity) for r in route.resources]
        lat += route.latency + getattr(route, "own_latency", 0.0)
    return lat, res


def expect_single(topo, s: int, d: int, nbytes: int) -> float:
    """Seconds for one flow alone: L + m / min(b, window / 2L) (the spec's formulas)."""
    lat, bw = host_matrices(topo)
    hs, hd = int(topo.rank_host[s]), int(topo.rank_host[d])
    L, b = float(lat[hs, hd]), float(bw[hs, hd])
    if topo.tcp_window:
        b = min(b, float(topo.tcp_window) / (2 * L))
    return L + nbytes / b


def expect_flows(topo, flows, starts=None) -> list[float]:
    """Per flow (src, dst, bytes, count), seconds from its start to its last message's
    arrival: every message a flow of its own that waits its latency, then moves at its
    weighted max-min share (weight 1 / L, cap window / 2L) of every resource it crosses."""
    msgs = []
    for k, (s, d, m, c) in enumerate(flows):
        lat, res = _path(topo, s, d)
        cap = float(topo.tcp_window) / (2 * lat) if topo.tcp_window else float("inf")
        t0 = 0.0 if starts is None else float(starts[k])
        msgs += [dict(flow=k, ready=t0 + lat, left=float(m), res=res, cap=cap, w=1.0 / lat, start=t0)
                 for _ in range(c)]
    t = 0.0
    end = [0.0] * len(flows)
    live = list(msgs)
    while live:
        moving = [x for x in live if x["ready"] <= t * (1 + 1e-12) + 1e-15]
        rates = _max_min(moving)
        nxt = min([x["ready"] for x in live if x not in moving] or [float("inf")])
        dt = min([x["left"] / rates[id(x)] for x in moving if rates[id(x)] > 0] or [float("inf")])
        step = min(nxt - t, dt)
        for x in moving:
            x["left"] -= rates[id(x)] * step
        t += step
        for x in moving:
            if x["left"] <= 1e-9 * max(1.0, rates[id(x)]):
                end[x["flow"]] = max(end[x["flow"]], t - x["start"])
        live = [x for x in live if not (x in moving and x["left"] <= 1e-9 * max(1.0, rates[id(x)]))]
    return end


def _max_min(moving) -> dict:
    """Weighted progressive filling: a level rises, each flow at level x its weight, until
    a resource fills or a flow reaches its cap."""
    rate, open_ = {}, list(moving)
    cap = {}
    for x in moving:
        for r, c in x["res"]:
            cap[r] = c
    while open_:
        load = {}
        for x in open_:
            for r, _ in x["res"]:
                load[r] = load.get(r, 0.0) + x["w"]
        level = min(min((cap[r] / w for r, w in load.items()), default=float("inf")),
                    min(x["cap"] / x["w"] for x in open_))
        fixed = [x for x in open_ if x["cap"] / x["w"] <= level * (1 + 1e-12)
                 or any(cap[r] / load[r] <= level * (1 + 1e-12) for r, _ in x["res"])]
        for x in fixed:
            rate[id(x)] = level * x["w"]
            for r, _ in x["res"]:
                cap[r] -= rate[id(x)]
        open_ = [x for x in open_ if id(x) not in rate]
    return rate


def fill_tests(topo, nbytes: int = FILL_BYTES) -> list[tuple[str, list]]:
    """For every wide-area resource: a test in which every ordered site pair crossing it
    sends from each of its source site's hosts to a host of the other site, with enough
    messages in flight that the pairs' windows together ask for twice its capacity."""
    net = topo.network
    site_ranks: dict[str, list[int]] = {}
    for r, h in enumerate(topo.rank_host):
        site_ranks.setdefault(topo.host_site[int(h)], []).append(r)
    tests = []
    for k, res in enumerate(net.resources):
        pairs = [p for p, route in net.routes.items() if k in route.resources
                 and p[0] in site_ranks and p[1] in site_ranks]
        if not pairs:
            continue
        flows = []
        for a, b in pairs:
            src, dst = site_ranks[a], site_ranks[b]
            lat, _ = _path(topo, src[0], dst[0])
            window = float(topo.tcp_window) / (2 * lat) if topo.tcp_window else res.capacity
            need = int(np.ceil(2 * res.capacity / window / len(pairs) / len(src)))
            flows += [(s, dst[i % len(dst)], nbytes, max(1, min(need, 64))) for i, s in enumerate(src)]
        tests.append((res.name, flows))
    return tests


def _run_flows(program: Path, xml, hostfile, ranks: int, tests: list[list], workdir: Path) -> list[list[float]]:
    spec = workdir / "flows.txt"
    lines = ["collsched-flows/1", str(len(tests))]
    for flows in tests:
        lines.append(str(len(flows)))
        lines += [f"{s} {d} {m} {c}" for s, d, m, c in flows]
    spec.write_text("\n".join(lines) + "\n")
    out = workdir / "flows.json"
    cmd = ["smpirun", "-np", str(ranks), "-platform", str(Path(xml).resolve()),
           "-hostfile", str(Path(hostfile).resolve()),
           "--cfg=network/model:CM02", "--cfg=network/crosstraffic:0", "--cfg=smpi/simulate-computation:no",
           "--log=root.thres:error", str(program), "--tests", str(spec), "--output", str(out), "--repeats", "1"]
    done = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=SMPI_TIMEOUT_S)
    if done.returncode != 0 or not out.exists():
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise InputError("smpirun", str(xml), f"collsched-flows failed (exit {done.returncode}): {tail}")
    return json.loads(out.read_text())["tests"]


def check_smpi(xml, hostfile, topo, program: Path, pairs=None, fill=True, workdir=None) -> dict:
    """SimGrid on the XML against the topology: one flow alone per ordered host pair in
    `pairs` (None: every pair of ranks on different hosts), both PAIR_BYTES sizes, and
    (fill) fill_tests. Returns worst relative errors and every test's figures."""
    P = len(topo.rank_host)
    if pairs is None:
        pairs = [(s, d) for s in range(P) for d in range(P) if topo.rank_host[s] != topo.rank_host[d]]
    tests = [[(s, d, m, 1)] for s, d in pairs for m in PAIR_BYTES]
    fills = fill_tests(topo) if fill else []
    tests += [f for _, f in fills]
    with tempfile.TemporaryDirectory(prefix="collsched-platform-check-", dir=workdir) as tmp:
        got = _run_flows(program, xml, hostfile, P, tests, Path(tmp))
    single = [(s, d, m) for s, d in pairs for m in PAIR_BYTES]
    errs = [abs(got[i][0] / expect_single(topo, s, d, m) - 1) for i, (s, d, m) in enumerate(single)]
    out = {"pairs": len(pairs), "single_max_error": max(errs, default=0.0), "fill": []}
    for j, (name, flows) in enumerate(fills):
        want = expect_flows(topo, flows)
        have = got[len(single) + j]
        err = max(abs(h / w - 1) for h, w in zip(have, want))
        moved = sum(m * c for _, _, m, c in flows)
        out["fill"].append({"resource": name, "flows": len(flows), "messages": sum(c for *_, c in flows),
                            "max_error": err, "measured_s": max(have), "expected_s": max(want),
                            "aggregate_Bps": moved / max(have)})
    out["fill_max_error"] = max((f["max_error"] for f in out["fill"]), default=0.0)
    return out
