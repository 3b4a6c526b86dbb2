"""Forest allgather: every block broadcast over a packed set of spanning trees, in the
style of ForestColl (Zhao et al., arXiv 2402.06787); the method and where our network
differs from the paper's are in docs/forest.md.

Each piece (origin, segment) is broadcast down one spanning out-tree rooted at its origin:

1. **Across sites** the tree is the piece's *site tree* (forest_routes.py): every other
   site Y gets the piece once, straight from the origin or through a relay site Z that got
   it straight from the origin; an LP packs the site trees so that the congestion of the
   shared wide-area links plus the trees' path latency is smallest. A site's pieces are
   split over its trees in proportion to the LP's weights (per piece: with segments the
   weights are realised more finely).
2. **Inside a site** the tree is a path: the piece enters the site at one rank (its origin,
   or the *entry* rank its wide-area edge reaches) and goes around the site's ring from
   there (members in rank order). On a full-bisection site this packing is the ring's,
   which is bandwidth-optimal: every rank receives each piece once and sends as much as
   it receives.

**Order.** The trees say who sends what to whom; the order comes from a plan in slots per
site (a slot: one piece over the LAN, L + m/b): each rank's send port and receive port
hold at most one piece per slot. Wide-area sends leave just in time, when their link's
queue (the DAG model's rule: a shared link admits a transfer every m / capacity; it lasts
L + m / b_flow) would take them. A wide-area receive holds its rank's receive port from
its posting to its landing (the cost model serves a rank's receives in list order and the
walk posts a rendezvous receive when it gets there), so that *window* is reserved; the
entry rank is one whose window is open (joined) or a fresh one (_enter; up to 256 ranks two
settings are planned and the one the DAG model times faster is kept). Relays follow the same way. Then each
site's pieces, by the slot at which their entry holds them, take the earliest ring
*diagonal* free all along their path (slot c at the entry, c + 1 at the next hop, ...),
so pieces never meet on a port in the same slot. Every op sits at its transfer's planned
start (a receive at its posting); `ir.from_transfers` (recv_step) sorts each rank's list
by those times, so every wait of the cost model points back in time (no cycle), a
forward follows its receive and the k-th send a -> b meets the k-th receive. docs/forest.md
has the decisions and the measurements (on grids Min3 is better).
"""
from __future__ import annotations

import math

import numpy as np

from ..inputs.topology import homogeneous
from ..ir import from_transfers
from .forest_routes import route_fractions, site_graph
from .magpie import refuse_mismatched_topology
from .registry import Request, register

MARGIN = 0.02  # a wide-area receive is planned this fraction after its estimated arrival
MARGIN_SLOTS = 1
WINDOW = 64  # ring slots searched at once
# Entry windows (_enter): (slots a landing may wait to share an open window, the longest
# window in flight times). Few long windows suit a site whose windows are long against
# its ring (wan-3x16: 16 ranks, 20-80 ms), many short ones a large site with short
# windows (lyon-grenoble: 128 ranks, 2 ms). Up to PICK_MAX_RANKS ranks build makes both
# and keeps the one the DAG model times faster (the plans' own ends rank them wrongly on
# three-site-grid); beyond, the first.
WINDOW_SETTINGS = ((2, 1.2), (16, 4.0))
PICK_MAX_RANKS = 256


class _Site:
    """Slot occupancy of one site's ports: send[j, s], recv[j, s] for member j, slot s."""

    def __init__(self, members: np.ndarray, tau: float):
        self.members = members
        self.n = len(members)
        self.tau = tau
        self.send = np.zeros((self.n, 256), bool)
        self.recv = np.zeros((self.n, 256), bool)
        self.wan_in = np.zeros(self.n, np.int64)
        self.last_land = np.full(self.n, -1, np.int64)  # end of the open wide-area window
        self.win_start = np.zeros(self.n, np.int64)  # its start

    def ensure(self, slots: int) -> None:
        h = self.send.shape[1]
        if slots <= h:
            return
        h2 = max(slots, 2 * h)
        for name in ("send", "recv"):
            b = np.zeros((self.n, h2), bool)
            b[:, :h] = getattr(self, name)
            setattr(self, name, b)

    def first(self, recv: bool, j: int, s0: int) -> int:
        """First slot >= s0 at which member j's send (recv) port is free."""
        while True:
            self.ensure(s0 + WINDOW)
            port = self.recv if recv else self.send
            free = np.nonzero(~port[j, s0:s0 + WINDOW])[0]
            if len(free):
                return s0 + int(free[0])
            s0 += WINDOW

    def take_send(self, j: int, s0: int) -> int:
        s = self.first(False, j, s0)
        self.send[j, s] = True
        return s

    def start_ring(self) -> None:
        """Switch to diagonal bit masks for the ring phase: cell (member j, slot t) of the
        send ports is bit j of dsend[t - j + n], of the receive ports bit j of
        drecv[t - j + n]; a piece entering at member j at slot c then needs, per port
        kind, two diagonals free on two member ranges (ring_place)."""
        n, h = self.n, self.send.shape[1]
        self.dsend = [0] * (h + 2 * n + 2)
        self.drecv = [0] * (h + 2 * n + 2)
        for arr, diag in ((self.send, self.dsend), (self.recv, self.drecv)):
            jj, tt = np.nonzero(arr)
            for j, t in zip(jj.tolist(), tt.tolist()):
                diag[t - j + n] |= 1 << j

    def ring_place(self, j: int, avail: int) -> int:
        """Earliest slot c >= avail at which a piece entering at member j can go around the
        ring (hop h at slot c + h from member j + h to j + h + 1) without meeting another
        piece on a port; marks the ports taken. Returns c."""
        n = self.n
        full = (1 << n) - 1
        hi_s = full & ~((1 << j) - 1)  # senders j .. n-1 on diagonal c - j (not j - 1)
        if j == 0:
            hi_s &= ~(1 << (n - 1))
        lo_s = (1 << max(j - 1, 0)) - 1  # senders 0 .. j-2 on diagonal c - j + n
        hi_r = full & ~((1 << (j + 1)) - 1)  # receivers j+1 .. n-1 on diagonal c - j - 1
        lo_r = (1 << j) - 1  # receivers 0 .. j-1 on diagonal c - j - 1 + n
        ds, dr = self.dsend, self.drecv
        c = avail
        while True:
            need = c - j + 2 * n + 2
            if need >= len(ds):
                grow = [0] * (need - len(ds) + len(ds))
                ds.extend(grow)
                dr.extend(grow)
            u = c - j + n
            if not (ds[u] & hi_s or ds[u + n] & lo_s or dr[u - 1] & hi_r or dr[u - 1 + n] & lo_r):
                ds[u] |= hi_s
                ds[u + n] |= lo_s
                dr[u - 1] |= hi_r
                dr[u - 1 + n] |= lo_r
                return c
            c += 1


def _largest_remainder(shares: dict, n: int) -> dict:
    counts = {z: int(math.floor(v * n + 1e-9)) for z, v in shares.items()}
    rest = n - sum(counts.values())
    for z in sorted(shares, key=lambda z: (-(shares[z] * n - counts[z]), z))[:max(rest, 0)]:
        counts[z] += 1
    return counts


def assign_routes(g, frac: dict, k: int) -> dict:
    """{(X, Y): per piece of X (origin-major: origin index * k + segment), the relay site
    or -1 (direct)}: the LP's fractions rounded to pieces (largest remainder); a piece
    relayed through Z to Y goes to Z directly (forced where rounding disagrees)."""
    s = len(g.members)
    routes = {}
    for x in range(s):
        npieces = len(g.members[x]) * k
        # seg-major walk over the pieces, so that consecutive relayed pieces come from
        # different origins (their entries and relays spread over the ranks)
        walk = np.arange(npieces).reshape(len(g.members[x]), k).T.ravel()
        for y in range(s):
            if y == x:
                continue
            keys = [-1] + [z for z in range(s) if z not in (x, y)]
            counts = _largest_remainder({z: frac.get((x, y, z), 0.0) for z in keys}, npieces)
            r = np.full(npieces, -1, np.int64)
            at = (y * npieces) // s
            for z in keys[1:]:
                idx = walk[(at + np.arange(counts[z])) % npieces]
                r[idx] = z
                at += counts[z]
            routes[x, y] = r
    for x in range(s):
        for y in range(s):
            if y != x:
                r = routes[x, y]
                for z in np.unique(r[r >= 0]):
                    routes[x, int(z)][r == z] = -1
    return routes


def _plan(req: Request, topo, windows=WINDOW_SETTINGS[0]):
    """Planned transfers: (send time, posting time, landing time, src, dst, origin, segment)."""
    p, k, nb = req.nranks, req.nseg, int(req.nbytes)
    g = site_graph(topo)
    s = len(g.members)
    m = max(nb / k, 1.0)
    lat, bw = np.asarray(topo.latency), np.asarray(topo.bandwidth)
    sites = []
    for mem in g.members:
        tau = (lat[mem[0], mem[1]] + m / bw[mem[0], mem[1]]) if len(mem) > 1 else m / 1e9
        sites.append(_Site(mem, float(tau)))
    pos = np.empty(p, np.int64)
    for mem in g.members:
        pos[mem] = np.arange(len(mem))
    out = []
    entry = {}  # (piece id, site) -> (member index, receive slot)
    if s > 1:
        frac = route_fractions(g, nb)[0]
        _plan_wan(g, sites, assign_routes(g, frac, k), pos, k, m, entry, out, windows)
    for y, site in enumerate(sites):
        if site.n < 2:
            continue
        pieces = [(0, seg, int(pos[o]), int(o) * k + seg) for o in g.members[y] for seg in range(k)]
        pieces += [(slot + 1, pid % k, j, pid) for (pid, yy), (j, slot) in entry.items() if yy == y]
        pieces.sort()
        site.start_ring()
        placed = np.array([(site.ring_place(j, avail), j, pid) for avail, _, j, pid in pieces], np.int64)
        hops = np.arange(site.n - 1)
        c, j, pid = (placed[:, i, None] for i in range(3))
        t = ((c + hops) * site.tau).ravel()
        a = site.members[(j + hops) % site.n].ravel()
        b = site.members[(j + hops + 1) % site.n].ravel()
        pid = np.broadcast_to(pid, (len(placed), len(hops))).ravel()
        out.append((t, t, t, a, b, pid // k, pid % k))
    return out


def _plan_wan(g, sites, routes, pos, k, m, entry, out, windows) -> None:
    """Wide-area edges of the site trees: direct sends from the origins, then relays."""
    s = len(g.members)
    relays = {}  # (x, z, pid) -> [y, ...]: z forwards pid to each y
    direct = []
    for x in range(s):
        for y in range(s):
            if x == y:
                continue
            r = routes[x, y]
            for i in range(len(r)):
                pid = int(g.members[x][i // k]) * k + i % k
                if r[i] < 0:
                    direct.append((x, y, pid))
                else:
                    relays.setdefault((x, int(r[i]), pid), []).append(y)
    # Pieces some site relays onward first, then the farthest sites first.
    direct.sort(key=lambda t: ((t[0], t[1], t[2]) not in relays, -g.latency[t[0], t[1]], t[2] % k, t[2]))
    # Just in time: a piece leaves when its link would take it (the receive it lands in
    # holds its port from the send on, so sending early only lengthens that window).
    sends = []  # (send time, x, y, src rank, pid)
    free = {}
    for x, y, pid in direct:
        o, key = pid // k, g.bottleneck[x, y]
        start = free.get(key, 0.0)
        slot = sites[x].take_send(int(pos[o]), int(start / sites[x].tau))
        t = slot * sites[x].tau
        if key >= 0:
            free[key] = max(t, start) + m / g.capacity[key]
        sends.append((t, x, y, o, pid))
    _enter(g, sites, _queue(g, sends, m, {}), k, entry, out, windows)
    state = _link_state(g, sends, m)
    rsends = []
    for (x, z, pid), ys in sorted(relays.items(), key=lambda kv: entry[kv[0][2], kv[0][1]][1]):
        j, slot = entry[pid, z]
        for y in sorted(ys, key=lambda y: -g.latency[z, y]):
            ready = (slot + 1) * sites[z].tau
            start = _queue(g, [(ready, z, y, 0, pid)], m, state)[0][0] - g.latency[z, y] - m / g.flow[z, y]
            sl = sites[z].take_send(j, max(slot + 1, int(start / sites[z].tau)))
            rsends.append((sl * sites[z].tau, z, y, int(sites[z].members[j]), pid))
    if rsends:
        _enter(g, sites, _queue(g, rsends, m, state), k, entry, out, windows)


def _link_state(g, sends, m):
    """Per bottleneck link: (sorted send times, link free after each) of earlier transfers."""
    state = {}
    for t, x, y, _, _ in sorted(sends):
        key = g.bottleneck[x, y]
        if key < 0:
            continue
        ts, free = state.setdefault(key, ([], []))
        ts.append(t)
        free.append(max(t, free[-1] if free else 0.0) + m / g.capacity[key])
    return state


def _queue(g, sends, m, before):
    """(estimated arrival, send time, x, y, src, pid) of wide-area sends, by the DAG model's
    link rule (a shared link admits a transfer every m / capacity); `before`: transfers
    already on the links (_link_state)."""
    out = []
    last = {}
    for t, x, y, src, pid in sorted(sends):
        key = g.bottleneck[x, y]
        start = t
        if key >= 0:
            if key in before:
                ts, free = before[key]
                i = int(np.searchsorted(ts, t, side="right"))
                if i:
                    start = max(start, free[i - 1])
            start = max(start, last.get(key, 0.0))
            last[key] = start + m / g.capacity[key]
        out.append((start + g.latency[x, y] + m / g.flow[x, y], t, x, y, src, pid))
    return out


def _enter(g, sites, arrivals, k, entry, out, windows) -> None:
    """Entry rank and landing slot of each wide-area transfer, in posting order. The cost
    model serves a rank's receives in list order and the walk posts a receive when it gets
    there, so a wide-area receive holds its rank's receive port from its posting (the
    send) until it lands: that window is reserved. A transfer joins an entry whose window
    is still open when it lands no more than `tolerance` slots later than on a fresh rank;
    else it opens a window on the member with the fewest wide-area receives."""
    tolerance, cap = windows
    for arr, t, x, y, src, pid in sorted(arrivals, key=lambda r: (r[1], r[0], r[5])):
        site = sites[y]
        ps = int(math.floor(t / site.tau))
        a = max(int(math.ceil(arr * (1 + MARGIN) / site.tau)) + MARGIN_SLOTS, ps + 1)
        site.ensure(a + WINDOW)
        wmax = int(cap * (arr - t) / site.tau) + tolerance
        open_ = np.nonzero((site.last_land >= ps) & (site.win_start >= a - wmax))[0]
        best = None
        if len(open_):
            lands = np.maximum(a, site.last_land[open_] + 1)
            i = int(np.argmin(lands))
            best = (int(lands[i]), int(open_[i]))
        if best is None or best[0] > a + tolerance:
            fresh = np.nonzero(site.last_land < ps)[0]
            if len(fresh):
                j = int(fresh[np.lexsort((fresh, site.wan_in[fresh]))[0]])
                best = (a, j)
        if best is None:  # every member has a window open: the one that lands first
            lands = np.maximum(a, site.last_land + 1)
            best = (int(lands.min()), int(np.argmin(lands)))
        sl, j = best
        site.ensure(sl + WINDOW)
        if site.last_land[j] < ps:
            lo = site.win_start[j] = ps
        else:
            lo = site.last_land[j] + 1
        site.recv[j, lo:sl + 1] = True
        site.last_land[j] = sl
        site.wan_in[j] += 1
        entry[pid, y] = (j, sl)
        out.append((np.array([t]), np.array([t]), np.array([sl * site.tau]), np.array([src]),
                    np.array([site.members[j]]), np.array([pid // k]), np.array([pid % k])))


def _refuse(req: Request):
    if req.nbytes is None or req.nbytes < 0:
        return "expected a byte count"
    return refuse_mismatched_topology(req)


@register("forest", "spanning-tree packing (ForestColl style): per piece a site tree packed "
          "by an LP against the shared links' congestion, a ring path inside each site, "
          "ordered by a slot plan", _refuse)
def build(req: Request):
    p, k = req.nranks, req.nseg
    topo = req.topology if req.topology is not None else homogeneous(p, full_duplex=req.full_duplex)
    if p < 2:
        return from_transfers(p, k, [], [], [], [], algorithm="forest")
    settings = WINDOW_SETTINGS if len(set(topo.rank_site())) > 1 and p <= PICK_MAX_RANKS else WINDOW_SETTINGS[:1]
    best = None
    for w in settings:
        sched = _lists(p, k, req.full_duplex, *_columns(_plan(req, topo, w)))
        if len(settings) == 1:
            return sched
        from ..model.simulate import simulate  # the model imports the IR, not the algorithms
        run = simulate(sched, topo, int(req.nbytes))[1].run_time_s
        if best is None or run < best[0]:
            best = (run, sched)
    return best[1]


def _columns(parts):
    return tuple(np.concatenate([np.asarray(c[i]) for c in parts]) for i in range(7))


def _lists(p, k, full_duplex, ts, tp, tl, src, dst, origin, seg):
    """Schedule from planned transfers: every op at its transfer's planned start (a receive
    at its posting), so every wait of the cost model points back in time: no cycle."""
    order = np.lexsort((tl, ts))  # transfer order = start order (ties: landing)
    ts, tp, tl, src, dst, origin, seg = (a[order] for a in (ts, tp, tl, src, dst, origin, seg))
    n = len(ts)
    key = tp
    times, inv = np.unique(np.concatenate([ts, key]), return_inverse=True)
    step, rstep = inv[:n], inv[n:]
    return from_transfers(p, k, step, src, dst, origin, seg, algorithm="forest",
                          half_duplex_order=not full_duplex, recv_step=rstep)
