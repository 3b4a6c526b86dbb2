"""A small fluid network for the capacity inference's unit tests: hosts in sites, each with
a split-duplex NIC, routes between sites through shared resources, a TCP window capping
each flow at window / (2 L); bandwidth shared max-min fairly (as SimGrid's CM02 without
its latency weights). It runs collsched-flows' tests in Python: per flow, the time from the
start to its last message's arrival (one latency, then the transfer)."""
from __future__ import annotations

import math

import numpy as np

from collsched.lab.measure import Measurement


class FluidNet:
    def __init__(self, sites, resources, routes, window=4 * 2**20, ranks_per_host=1):
        """sites: {name: (hosts, NIC B/s, LAN latency s)}; resources: {name: B/s};
        routes: {(a, b): ([resource, ...], latency between the LAN halves)}."""
        self.sites, self.resources, self.routes, self.window = sites, resources, routes, window
        self.host_site = [s for s, (n, _, _) in sites.items() for _ in range(n)]
        self.rank_host = [h for h in range(len(self.host_site)) for _ in range(ranks_per_host)]

    def latency(self, h, g):
        a, b = self.host_site[h], self.host_site[g]
        if a == b:
            return self.sites[a][2]
        return self.sites[a][2] / 2 + self.routes[a, b][1] + self.sites[b][2] / 2

    def path(self, h, g):
        a, b = self.host_site[h], self.host_site[g]
        res = [f"nic{h}>", f"nic{g}<"]
        return res if a == b else res + list(self.routes[a, b][0])

    def capacity_of(self, r):
        if r.startswith("nic"):
            return self.sites[self.host_site[int(r[3:-1])]][1]
        return self.resources[r]

    def one_flow(self, h, g):
        return min([self.capacity_of(r) for r in self.path(h, g)] + [self.window / (2 * self.latency(h, g))])

    def measurement(self) -> Measurement:
        n = len(self.host_site)
        lat = np.full((n, n), np.nan)
        bw = np.full((n, n), np.nan)
        for h in range(n):
            for g in range(n):
                if h != g:
                    lat[h, g], bw[h, g] = self.latency(h, g), self.one_flow(h, g)
        return Measurement(hosts=[f"h{i}" for i in range(n)], rank_host=self.rank_host,
                           host_site=list(self.host_site), host_latency=lat, host_bandwidth=bw,
                           intra_host=None, send_overhead=None, gap=None, pairs=[], raw={})

    def run(self, tests, phase=None):
        return [self._test(flows) for flows in tests]

    def _test(self, flows):
        """Durations of one test's flows: max-min fair sharing, recomputed as messages end."""
        subs = []  # [flow index, bytes left, path, cap]
        for i, (s, d, nbytes, count) in enumerate(flows):
            h, g = self.rank_host[s], self.rank_host[d]
            cap = self.window / (2 * self.latency(h, g))
            for _ in range(count):
                subs.append([i, float(nbytes), self.path(h, g), cap])
        end = [0.0] * len(flows)
        t = 0.0
        live = [x for x in subs if x[1] > 0]
        while live:
            rates = self._maxmin(live)
            dt = min(x[1] / r for x, r in zip(live, rates))
            t += dt
            for x, r in zip(live, rates):
                x[1] -= r * dt
                if x[1] <= 1e-9 * max(1.0, r):
                    x[1] = 0.0
                    end[x[0]] = max(end[x[0]], t)
            live = [x for x in live if x[1] > 0]
        return [e + self.latency(self.rank_host[s], self.rank_host[d]) for e, (s, d, _, _) in zip(end, flows)]

    def _maxmin(self, live):
        rate = [0.0] * len(live)
        frozen = [False] * len(live)
        left = {}
        for x in live:
            for r in x[2]:
                left.setdefault(r, self.capacity_of(r))
        while not all(frozen):
            users = {r: [i for i, x in enumerate(live) if not frozen[i] and r in x[2]] for r in left}
            share = min([left[r] / len(u) for r, u in users.items() if u] +
                        [live[i][3] - rate[i] for i in range(len(live)) if not frozen[i]])
            for i in range(len(live)):
                if not frozen[i]:
                    rate[i] += share
            for r, u in users.items():
                left[r] -= share * len(u)
            for i, x in enumerate(live):
                if not frozen[i] and (rate[i] >= x[3] * (1 - 1e-12) or
                                      any(left[r] <= 1e-9 * self.capacity_of(r) for r in x[2])):
                    frozen[i] = True
        return [max(r, 1e-30) for r in rate]


GBIT = 1e9 / 8


def four_sites():
    """The shared four-site network of platforms.py, as a fluid network (Atlantic shared by
    both directions, the Pacific split, a split Paris-London channel)."""
    sites = {"paris": (4, 25 * GBIT, 10e-6), "london": (3, 10 * GBIT, 10e-6),
             "chicago": (4, 10 * GBIT, 10e-6), "tokyo": (2, 10 * GBIT, 20e-6)}
    res = {"atlantic": 5 * GBIT, "pacific>": 2.5 * GBIT, "pacific<": 2.5 * GBIT,
           "channel>": 8 * GBIT, "channel<": 8 * GBIT}
    routes = {("paris", "london"): (["channel>"], 4e-3), ("london", "paris"): (["channel<"], 4e-3)}
    for s, extra in (("paris", 2e-3), ("london", 3e-3)):
        routes[s, "chicago"] = routes["chicago", s] = (["atlantic"], extra + 41e-3)
        routes[s, "tokyo"] = (["atlantic", "pacific>"], extra + 102e-3)
        routes["tokyo", s] = (["pacific<", "atlantic"], extra + 102e-3)
    routes["chicago", "tokyo"] = (["pacific>"], 62e-3)
    routes["tokyo", "chicago"] = (["pacific<"], 62e-3)
    return FluidNet(sites, res, routes)


def truth_shares(net, p, q):
    """p and q cross a common resource (every resource here limits some pair)."""
    return bool(set(net.routes[p][0]) & set(net.routes[q][0]))


def bottleneck(net, a, b):
    return min(net.resources[r] for r in net.routes[a, b][0])


def wan_form(sites=3, hosts=4, nic=10 * GBIT, wan=10 * GBIT, lat=(20e-3, 40e-3, 80e-3)):
    """wan-3x16's shape (smaller): one link per ordered site pair."""
    names = [f"S{i}" for i in range(sites)]
    s = {n: (hosts, nic, 5e-6) for n in names}
    res, routes, k = {}, {}, 0
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            for x, y in ((a, b), (b, a)):
                res[f"{x}->{y}"] = wan
                routes[x, y] = ([f"{x}->{y}"], lat[k % len(lat)])
            k += 1
    return FluidNet(s, res, routes)


def math_close(x, y, rel):
    return math.isclose(x, y, rel_tol=rel)
