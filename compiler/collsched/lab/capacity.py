"""Capacity probes: what one flow per pair cannot see (docs/measure.md, "Capacity").

One flow between two sites shows the path's latency and the bandwidth *one* flow gets,
which on a long fat link is the TCP window's cap (window / 2L), not the link. This module
designs sets of concurrent flows for the MPI program collsched-flows (runtime/measure/
collsched_flows.c), run by the caller, and infers from their times:

1. **capacity** of every ordered pair of sites (a, b): k flows from distinct hosts of a to
   distinct hosts of b (k = 1, 2, 4, ..., then several messages in flight per host pair when
   hosts run out, so that the hosts' NICs do not limit), until the aggregate grows by less
   than `GAIN` (5%): the plateau. When the plateau is the NICs' sum of the hosts used, the
   link was not the limit (the capacity is at least that: `nic_limited`).
2. **shared bottlenecks**: two saturated ordered pairs at once (the two directions of one
   site pair too) against each alone, on the same hosts, each sized to last as long alone;
   if together their own rates (each over its own time) add up to clearly less
   (`SHARE_DROP`, 10%; `SMPI_SHARE_DROP`, 3%, under SMPI, where a pair that shares nothing
   keeps its rate to four digits) than alone, they share a bottleneck.
3. **the TCP window**: one flow between sites that neither the NICs nor the capacity limit
   moves window / (2 L): window = b1 x 2L (the median over such pairs).

The result is a topology in the links form (topology.py, docs/inputs.md): sites with
their measured LAN as `lan`, one link per set of ordered site pairs that share a
bottleneck (a split link for the two directions of a site pair that do not share), an
explicit route per ordered pair with its own latency so that every pair's latency is the
measured one, and `tcp_window`.

A "runner" runs tests: run(tests) -> per test, per flow, the duration in seconds, where a
test is a list of flows (src rank, dst rank, bytes per message, messages in flight).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

GAIN = 0.05  # a step that adds less than this to the aggregate ends the growth
SHARE_DROP = 0.10  # together below (1 - this) x the sum alone: a shared bottleneck
SMPI_SHARE_DROP = 0.03  # the same under SMPI (exact times)
NIC_LIMIT = 0.90  # a plateau at this fraction of the NICs' sum: the NICs were the limit
NIC_SHARE = 0.5  # two pairs share a site's hosts in a sharing test when they need at most this of a NIC
WINDOW_MARGIN = 0.90  # one flow below this fraction of NICs and capacity: window-limited
MAX_IN_FLIGHT = 64  # messages in flight per host pair (collsched_flows.c allows 1024)
STEPS_PER_RUN = 3  # growth steps measured per run of the program (fewer launches)
MIN_BYTES, MAX_BYTES = 1 << 20, 256 << 20  # one message of a probe
RTTS_PER_MESSAGE = 16  # a probe message lasts this many latencies at the one-flow rate
# per launch of collsched-flows (its limits: 100,000 tests, 1,000,000 flows)
MAX_TESTS_PER_RUN, MAX_FLOWS_PER_RUN = 20_000, 500_000


@dataclass
class PairProbe:
    """The growth probe of one ordered pair of sites."""

    src: str
    dst: str
    src_hosts: list[int]
    dst_hosts: list[int]
    latency: float  # one-way, host to host (median)
    one_flow: float  # bytes/s, one flow alone (median over host pairs)
    bytes: int  # per message
    steps: list = field(default_factory=list)  # (host pairs, in flight, aggregate B/s)
    done: bool = False
    capacity: float = 0.0  # plateau, bytes/s
    nic_sum: float = math.inf  # min(senders' NICs, receivers' NICs) at the last step
    nic_limited: bool = False
    still_growing: bool = False  # steps ran out before the plateau (capacity is a lower bound)

    @property
    def key(self):
        return self.src, self.dst

    def saturating_flows(self) -> int:
        """Flows (host pairs x in flight) of the first step within 5% of the plateau."""
        for k, c, agg in self.steps:
            if agg >= (1 - GAIN) * self.capacity:
                return k * c
        return self.steps[-1][0] * self.steps[-1][1]


@dataclass
class Capacity:
    """What the probes found (summary() gives its JSON form)."""

    sites: list[str]
    lan: dict  # site -> (latency s, bandwidth B/s)
    probes: dict  # (a, b) -> PairProbe
    # frozenset{p, q} -> (all bytes / common span, sum alone, shared?, sum of own rates together)
    shares: dict = field(default_factory=dict)
    tcp_window: float | None = None
    window_pairs: list = field(default_factory=list)  # the pairs it was inferred from
    runs: int = 0
    tests: int = 0
    wall_s: float = 0.0
    simulated_s: float = 0.0


def _median(values, default=math.nan):
    vals = [float(v) for v in values if v is not None and np.isfinite(v)]
    return float(np.median(vals)) if vals else default


def site_lans(meas) -> dict:
    """site -> (latency, bandwidth) of its LAN: medians over its host pairs. A site of one
    host has none: the median of the other sites' latency, and the fastest one flow it was
    seen to move (a lower bound of its NIC)."""
    sites = list(dict.fromkeys(meas.host_site))
    members = {s: [h for h, x in enumerate(meas.host_site) if x == s] for s in sites}
    lat, bw = meas.host_latency, meas.host_bandwidth
    out = {}
    for s in sites:
        hs = members[s]
        pairs = [(i, j) for i in hs for j in hs if i != j]
        if pairs:
            out[s] = (_median(lat[i, j] for i, j in pairs), _median(bw[i, j] for i, j in pairs))
    fallback_lat = _median(v[0] for v in out.values()) if out else 1e-6
    for s in sites:
        if s not in out:
            h = members[s][0]
            seen = [bw[h, j] for j in range(len(lat)) if j != h] + [bw[j, h] for j in range(len(lat)) if j != h]
            out[s] = (fallback_lat, max([float(x) for x in seen if np.isfinite(x)] or [1e9]))
    return out


def probe_bytes(one_flow: float, latency: float) -> int:
    """One probe message: RTTS_PER_MESSAGE latencies at the one-flow rate (so the latency,
    subtracted, is small against the transfer), within MIN_BYTES..MAX_BYTES."""
    want = one_flow * max(RTTS_PER_MESSAGE * latency, 1e-3)
    return int(min(max(want, MIN_BYTES), MAX_BYTES))


def growth_steps(n_pairs: int) -> list[tuple[int, int]]:
    """(host pairs, messages in flight per host pair): 1, 2, 4, ... n host pairs, then n
    host pairs with 2, 4, ... MAX_IN_FLIGHT messages each."""
    steps, k = [], 1
    while k < n_pairs:
        steps.append((k, 1))
        k *= 2
    steps.append((n_pairs, 1))
    c = 2
    while c <= MAX_IN_FLIGHT:
        steps.append((n_pairs, c))
        c *= 2
    return steps


def aggregate(flows, durations, latency: float) -> float:
    """Bytes/s of a test: all bytes over the last flow's time less one latency (the
    transfer's start-up)."""
    total = sum(b * c for _, _, b, c in flows)
    span = max(durations) - latency
    return total / span if span > 0 else math.inf


def _flows(src_ranks, dst_ranks, k, c, nbytes):
    return [(src_ranks[i], dst_ranks[i], nbytes, c) for i in range(k)]


class Prober:
    """Designs the tests and interprets their times; `run` runs a list of tests."""

    def __init__(self, meas, run, progress=None, share_drop=SHARE_DROP):
        self.share_drop = share_drop
        self.meas = meas
        self.run_tests = run
        self.progress = progress
        # the lowest rank of every host stands for it
        self.host_rank = {}
        for r, h in enumerate(meas.rank_host):
            self.host_rank.setdefault(h, r)
        self.sites = list(dict.fromkeys(meas.host_site))
        self.members = {s: [h for h, x in enumerate(meas.host_site) if x == s] for s in self.sites}
        self.lan = site_lans(meas)
        # a site of one host has no LAN pair: its NIC is unknown (never called the limit)
        self.nic = {s: self.lan[s][1] if len(self.members[s]) > 1 else math.inf for s in self.sites}
        self.runs = self.tests = 0
        self.simulated_s = 0.0
        self.wall_s = 0.0

    def _run(self, tests, phase):
        """Run tests, in as many launches as collsched-flows' limits need."""
        out, chunk = [], []
        for t in tests:
            if chunk and (len(chunk) >= MAX_TESTS_PER_RUN
                          or sum(map(len, chunk)) + len(t) > MAX_FLOWS_PER_RUN):
                out += self._launch(chunk, phase)
                chunk = []
            chunk.append(t)
        return out + (self._launch(chunk, phase) if chunk else [])

    def _launch(self, tests, phase):
        self.runs += 1
        self.tests += len(tests)
        out = self.run_tests(tests, f"capacity {phase} (run {self.runs})")
        if isinstance(out, tuple):  # (durations, info)
            out, info = out
            self.simulated_s += float(info.get("elapsed_s", 0.0))
            self.wall_s += float(info.get("wall_s", 0.0))
        return out

    def _ranks(self, hosts):
        return [self.host_rank[h] for h in hosts]

    def _pair_latency(self, a, b):
        lat = self.meas.host_latency
        return _median(lat[i, j] for i in self.members[a] for j in self.members[b])

    def _pair_bandwidth(self, a, b):
        bw = self.meas.host_bandwidth
        return _median(bw[i, j] for i in self.members[a] for j in self.members[b])

    def _nic_sum(self, src_site, dst_site, k):
        return min(k * self.nic[src_site], k * self.nic[dst_site])

    # --- 1. growth -----------------------------------------------------------------------
    def grow(self) -> dict:
        probes = {}
        for a in self.sites:
            for b in self.sites:
                if a == b:
                    continue
                L, b1 = self._pair_latency(a, b), self._pair_bandwidth(a, b)
                probes[a, b] = PairProbe(a, b, self.members[a], self.members[b], L, b1, probe_bytes(b1, L))
        plans = {key: growth_steps(min(len(p.src_hosts), len(p.dst_hosts))) for key, p in probes.items()}
        while True:
            active = [p for p in probes.values() if not p.done]
            if not active:
                break
            tests, where = [], []
            for p in active:
                todo = plans[p.key][len(p.steps):len(p.steps) + STEPS_PER_RUN]
                for k, c in todo:
                    tests.append(_flows(self._ranks(p.src_hosts), self._ranks(p.dst_hosts), k, c, p.bytes))
                    where.append((p, k, c))
            times = self._run(tests, "growth")
            for (p, k, c), flows, durations in zip(where, tests, times):
                if p.done:
                    continue
                agg = aggregate(flows, durations, p.latency)
                prev = max((s[2] for s in p.steps), default=None)
                p.steps.append((k, c, agg))
                p.nic_sum = self._nic_sum(p.src, p.dst, k)
                if prev is not None and agg < (1 + GAIN) * prev:
                    p.done = True
                elif len(p.steps) == len(plans[p.key]):
                    p.done = p.still_growing = True
            for p in active:
                if p.done:
                    p.capacity = max(s[2] for s in p.steps)
                    last_k = p.steps[-1][0]
                    p.nic_sum = self._nic_sum(p.src, p.dst, last_k)
                    p.nic_limited = p.capacity >= NIC_LIMIT * p.nic_sum
        return probes

    # --- 2. sharing ------------------------------------------------------------------------
    def _halves(self, p, q):
        """Hosts of p and of q for running both at once. A site that sends (receives) in
        both gives each half its hosts, unless its NICs carry both at full rate with room
        to spare (each host p's and q's share of their capacities, at most NIC_SHARE of its
        NIC): then both use all of them, so that each can still fill what it fills alone
        (Paris -> Frankfurt fills a 100 Gbit/s link only from 10 or more hosts). A site of
        one host gives it to both."""
        def split(hosts, first):
            if len(hosts) < 2:
                return hosts
            h = len(hosts) // 2
            return hosts[:h] if first else hosts[h:]

        def roomy(site, n_p, n_q):
            return p.capacity / n_p + q.capacity / n_q <= NIC_SHARE * self.nic[site]
        ps, pd, qs, qd = p.src_hosts, p.dst_hosts, q.src_hosts, q.dst_hosts
        np_, nq = min(len(ps), len(pd)), min(len(qs), len(qd))
        if p.src == q.src and not roomy(p.src, np_, nq):
            ps, qs = split(ps, True), split(qs, False)
        if p.dst == q.dst and not roomy(p.dst, np_, nq):
            pd, qd = split(pd, True), split(qd, False)
        return (ps, pd), (qs, qd)

    def _saturating(self, p, hosts, seconds):
        """p's flows on these hosts: twice its saturating flow count over its host pairs,
        messages sized so that alone they last about `seconds` at p's capacity."""
        src, dst = hosts
        n = min(len(src), len(dst))
        want = 2 * p.saturating_flows()
        total = p.capacity * seconds
        c = max(1, math.ceil(want / n), math.ceil(total / (n * MAX_BYTES)))  # more messages, not larger
        nbytes = int(max(total / (n * c), MIN_BYTES / 16))
        return _flows(self._ranks(src), self._ranks(dst), n, c, nbytes)

    def share(self, probes) -> dict:
        """Every two limited ordered pairs, each alone and both at once, on the same hosts.
        Both are sized to last as long alone, so that together they move their two
        capacities' sum unless they share a bottleneck: then at most its capacity."""
        limited = [p for p in probes.values() if not p.nic_limited]
        combos = [(p, q) for i, p in enumerate(limited) for q in limited[i + 1:]]
        if not combos:
            return {}
        tests, plan = [], []
        for p, q in combos:
            hp, hq = self._halves(p, q)
            seconds = RTTS_PER_MESSAGE * max(p.latency, q.latency, 1e-4)
            fp, fq = self._saturating(p, hp, seconds), self._saturating(q, hq, seconds)
            plan.append((p, q, fp, fq, len(tests)))
            tests += [fp, fq, fp + fq]
        times = self._run(tests, "sharing")
        out = {}
        for p, q, fp, fq, i in plan:
            alone = aggregate(fp, times[i], p.latency) + aggregate(fq, times[i + 1], q.latency)
            both = times[i + 2]
            # each pair's own rate, over its own time: unchanged unless the other slowed it
            own = aggregate(fp, both[:len(fp)], p.latency) + aggregate(fq, both[len(fp):], q.latency)
            # all bytes over the common span (from the smaller latency on: data moves from
            # then): at most a shared bottleneck's capacity
            span = aggregate(fp + fq, both, min(p.latency, q.latency))
            out[frozenset((p.key, q.key))] = (span, alone, own < (1 - self.share_drop) * alone, own)
        return out

    # --- 3. the window -----------------------------------------------------------------------
    def window(self, probes):
        """window = b1 x 2L over the pairs whose one flow neither NICs nor capacity limit."""
        pairs, values = [], []
        for p in probes.values():
            nic = min(self.nic[p.src], self.nic[p.dst])
            if p.one_flow < WINDOW_MARGIN * min(nic, p.capacity):
                pairs.append(p.key)
                values.append(p.one_flow * 2 * p.latency)
        return (_median(values) if values else None), pairs

    def probe(self) -> Capacity:
        probes = self.grow()
        for s in self.sites:  # one host: its NIC moved at least every plateau it took part in
            if not math.isfinite(self.nic[s]):
                seen = [p.capacity for p in probes.values() if s in p.key]
                self.lan[s] = (self.lan[s][0], max([self.lan[s][1], *seen]))
        shares = self.share(probes)
        window, wpairs = self.window(probes)
        return Capacity(self.sites, self.lan, probes, shares, window, wpairs, self.runs, self.tests,
                        self.wall_s, self.simulated_s)


# --- from the probes to a network ----------------------------------------------------------

def _shares(cap: Capacity, p, q) -> bool:
    return cap.shares.get(frozenset((p, q)), (0.0, 0.0, False))[2]


def class_bandwidth(cap: Capacity, cls) -> float:
    """The largest aggregate a class's pairs reached: alone, or two sharing ones together."""
    return max(max(cap.probes[k].capacity for k in cls),
               max((cap.shares[frozenset((k, m))][0] for k in cls for m in cls
                    if k < m and _shares(cap, k, m)), default=0.0))


def bottleneck_classes(cap: Capacity) -> list[list[tuple[str, str]]]:
    """Sets of ordered site pairs that share a bottleneck: one wide-area link each.

    Seeds, greedily, the fastest pairs first (so that a set is seeded by a pair whose own
    bottleneck is the shared one): a pair joins the first set whose members all share with
    it, else starts one. Then every pair joins every other set it shares with, where each
    member either slowed it down or could not have (their two capacities fit in the set's
    together; e.g. Paris -> Tokyo and Tokyo -> Paris both cross the Atlantic but are
    limited by the Pacific's two directions), so a route may cross several shared links:
    Paris -> Tokyo shares the Atlantic with Paris -> Chicago and the Pacific with Chicago ->
    Tokyo. A pair the probes found NIC-limited is a set of its own.
    """
    order = sorted(cap.probes, key=lambda k: (-cap.probes[k].capacity, k))
    limited = [k for k in order if not cap.probes[k].nic_limited]
    classes: list[list] = []
    for key in limited:
        for cls in classes:
            if all(_shares(cap, key, m) for m in cls):
                cls.append(key)
                break
        else:
            classes.append([key])
    bws = [class_bandwidth(cap, cls) for cls in classes]
    for key in limited:
        for cls, bw in zip(classes, bws):
            if key in cls or not any(_shares(cap, key, m) for m in cls):
                continue
            if all(_shares(cap, key, m) or cap.probes[key].capacity + cap.probes[m].capacity
                   <= (1 + GAIN) * bw for m in cls):
                cls.append(key)
    return classes + [[k] for k in order if cap.probes[k].nic_limited]


def _link_name(cls) -> str:
    """wan-A-B for one ordered pair (or a split link's two), bottleneck-A-B for a set seeded
    by A -> B (a pair seeds one set at most: names are unique)."""
    a, b = cls[0]
    return f"wan-{a}-{b}" if len(cls) == 1 else f"bottleneck-{a}-{b}"


def network_description(cap: Capacity) -> dict:
    """links, routes and tcp_window of the links form (plain values: seconds, bytes/s).

    One link per bottleneck class (a shared link; the two directions of a site pair that
    do not share, each a class of its own, become one split link), with the largest
    aggregate its pairs reached; a pair whose own plateau is clearly below every class it
    is in gets a link of its own too. Link latencies are given greedily (each at most what
    its pairs' routes have left), the rest is the route's own latency: every pair's
    latency is the measured one."""
    classes = bottleneck_classes(cap)
    extra = {}
    for key, p in cap.probes.items():
        a, b = key
        extra[key] = max(p.latency - cap.lan[a][0] / 2 - cap.lan[b][0] / 2, 0.0)
    links, hops = [], {key: [] for key in cap.probes}
    members = {}  # link name -> pairs crossing it
    count = {}
    for cls in classes:
        for k in cls:
            count[k] = count.get(k, 0) + 1
    single = {cls[0]: cls for cls in classes if len(cls) == 1 and count[cls[0]] == 1}
    done = set()
    for cls in classes:
        key = cls[0]
        if id(cls) in done:
            continue
        done.add(id(cls))
        rev = (key[1], key[0])
        name = _link_name(cls)
        if key in single and rev in single and id(single[rev]) not in done:
            # the two directions of one site pair, each alone: one split link
            done.add(id(single[rev]))
            if rev < key:
                key, rev = rev, key
            name = f"wan-{key[0]}-{key[1]}"
            p, q = cap.probes[key], cap.probes[rev]
            links.append({"name": name, "between": list(key), "bandwidth": p.capacity, "sharing": "split",
                          "bandwidth_back": q.capacity, "_note": _note([p, q])})
            hops[key].append((name, False))
            hops[rev].append((name, True))
            members[name] = [key, rev]
            continue
        ps = [cap.probes[k] for k in cls]
        bw = class_bandwidth(cap, cls)
        sites = sorted({s for k in cls for s in k})
        link = {"name": name, "bandwidth": bw, "sharing": "shared", "_note": _note(ps)}
        if len(sites) == 2:
            link["between"] = sites
        links.append(link)
        members[name] = list(cls)
        for k in cls:
            hops[k].append((name, False))
    cap_of = {}
    for lk in links:
        cap_of[lk["name"], False] = lk["bandwidth"]
        cap_of[lk["name"], True] = lk.get("bandwidth_back") or lk["bandwidth"]
    for key, p in cap.probes.items():
        if hops[key] and p.capacity < (1 - SHARE_DROP) * min(cap_of[h] for h in hops[key]):
            own = f"wan-{key[0]}-{key[1]}-own"  # its own, smaller limit behind the shared ones
            links.append({"name": own, "between": list(key), "bandwidth": p.capacity, "sharing": "shared",
                          "_note": _note([p])})
            hops[key].append((own, False))
            members[own] = [key]
    used = {key: 0.0 for key in cap.probes}
    for lk in links:
        lk["latency"] = max(min(extra[k] - used[k] for k in members[lk["name"]]), 0.0)
        for k in members[lk["name"]]:
            used[k] += lk["latency"]
    routes = []
    for key in cap.probes:
        r = {"from": key[0], "to": key[1],
             "links": [({"link": n, "back": True} if back else n) for n, back in hops[key]]}
        if extra[key] - used[key] > 1e-7:  # below 0.1 us: rounding of the links' latencies
            r["latency"] = extra[key] - used[key]
        routes.append(r)
    return {"links": links, "routes": routes, "tcp_window": cap.tcp_window}


def _note(ps) -> str:
    parts = []
    for p in ps:
        how = ("NIC-limited: the link is at least this fast" if p.nic_limited else
               "still growing at the last step: at least this" if p.still_growing else "plateau")
        parts.append(f"{p.src}->{p.dst} {how} ({len(p.steps)} steps)")
    return "; ".join(parts)


def summary(cap: Capacity) -> dict:
    """JSON-able: every pair's steps and capacity, the sharing tests, the window."""
    return {
        "runs": cap.runs, "tests": cap.tests, "wall_s": cap.wall_s, "simulated_s": cap.simulated_s,
        "tcp_window_bytes": cap.tcp_window, "window_from": [f"{a}->{b}" for a, b in cap.window_pairs],
        "pairs": {f"{a}->{b}": {
            "latency_s": p.latency, "one_flow_Bps": p.one_flow, "bytes_per_message": p.bytes,
            "steps": [{"host_pairs": k, "in_flight": c, "aggregate_Bps": agg} for k, c, agg in p.steps],
            "capacity_Bps": p.capacity, "nic_sum_Bps": p.nic_sum if np.isfinite(p.nic_sum) else None,
            "nic_limited": p.nic_limited, "still_growing": p.still_growing}
            for (a, b), p in cap.probes.items()},
        "sharing": [{"pairs": sorted(f"{a}->{b}" for a, b in key), "together_span_Bps": v[0],
                     "together_own_Bps": v[3], "alone_sum_Bps": v[1], "shared": v[2]}
                    for key, v in cap.shares.items()],
        "bottlenecks": [[f"{a}->{b}" for a, b in cls] for cls in bottleneck_classes(cap)],
    }


def report_lines(summ: dict | None) -> list[str]:
    """A few lines for people (measure's text report) from summary()."""
    if not summ:
        return []

    def rate(bps):
        return f"{bps * 8 / 1e9:.4g} Gbit/s"
    lines = [f"  capacity probes: {summ['runs']} run(s), {summ['tests']} tests, {summ['wall_s']:.1f} s"
             + (f"; TCP window {summ['tcp_window_bytes'] / 2**20:.4g} MiB" if summ["tcp_window_bytes"] else
                "; no window-limited pair")]
    for key, p in summ["pairs"].items():
        how = " (NICs were the limit: at least)" if p["nic_limited"] else \
            " (still growing: at least)" if p["still_growing"] else ""
        lines.append(f"    {key}: one flow {rate(p['one_flow_Bps'])}, capacity {rate(p['capacity_Bps'])}{how}")
    shared = [" + ".join(c) for c in summ["bottlenecks"] if len(c) > 1]
    if shared:
        lines.append("    shared bottlenecks: " + "; ".join(shared))
    return lines
