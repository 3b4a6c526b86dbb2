"""The inter-site plan of the hierarchical composition (hier.py; docs/hier.md): which site
sends which origin site's blocks to which other site, in which step, computed over sites,
not ranks (S sites: O(S^2) entries whatever the rank count).

A plan is a list of entries (step, src_site, dst_site, origin_site): in that step site src
sends every block of origin site `origin` to site dst (hier.py spreads each entry's
blocks over the members of both sites). A plan is *valid* (`refusal`) when every site
receives every other site's blocks exactly once, from a site that holds them from an
earlier step (the origin site itself holds its own from the start), and entries are in
nondecreasing step order.

Two plans:

- `direct`: in round d = 1 .. S-1 site j sends its own blocks to site (j + d) mod S
  (spreading simple, as magpie's coordinators do); every entry in step d - 1.
- `relay`: per origin a broadcast tree over sites, built greedily by earliest predicted
  arrival (in the spirit of Min3's pool trees): repeatedly the (src, dst, origin) whose
  blocks would arrive first, src any site already holding them, so a fast site relays
  for a slow link. Entry steps are tree depths (0: sent by the origin site), entries of
  one step in order of predicted start.

`choose` predicts both with the same site-level model (`predict`) and keeps the relay
plan only when it is predicted strictly faster. The model, at site level only:

- an entry (X -> Y, origin O) moves n_O blocks of B bytes over the X -> Y link: it
  arrives L_XY + n_O B / rate after it starts, where rate = min(b_XY, c f_XY), f the
  bandwidth one flow gets (the TCP window's cap) and c = min(n_O, lcm(n_X, n_Y)) the
  distinct (owner in X, owner in Y) member pairs that carry it at once (hier.py's owner
  rule); the link is busy for n_O B / rate, and entries on one directed link take it in
  plan order;
- an entry starts when its source site holds the origin's blocks and its link is free;
  the intra-site phases and the members' NICs are not modelled (the per-level cost model
  of issue 24 item 4 refines this).

The relay planner scans O(S^3) candidates per entry; above RELAY_MAX_SITES sites it is
not run and the plan is direct.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

DIRECT, RELAY = "direct", "relay"
PLANS = (DIRECT, RELAY)
# The relay planner's cost is O(S^5) elementwise (S^2 entries, S^3 candidates each).
RELAY_MAX_SITES = 32


@dataclass(frozen=True)
class PlanEntry:
    """In plan step `step`, site `src` sends all blocks of site `origin` to site `dst`."""

    step: int
    src: int
    dst: int
    origin: int


@dataclass(frozen=True)
class SiteCosts:
    """What the plan depends on, per site and site pair (row = sending site): member
    counts, latency (s), bandwidth (B/s) and one flow's bandwidth (B/s, the TCP window's
    cap: <= bandwidth). Sites are numbered by their lowest rank. The diagonal is the
    site's LAN (unused by the plan; hier's FIFO marks on intra-site sends use it)."""

    sizes: tuple[int, ...]
    latency: np.ndarray  # (S, S) float64
    bandwidth: np.ndarray  # (S, S) float64
    flow: np.ndarray  # (S, S) float64

    @property
    def nsites(self) -> int:
        return len(self.sizes)

    @property
    def first(self) -> tuple[int, ...]:
        """First rank of each site when sites are contiguous rank ranges."""
        return tuple(int(x) for x in np.concatenate([[0], np.cumsum(self.sizes)[:-1]]))


@dataclass(frozen=True)
class SitePlan:
    """One inter-site plan: its kind (DIRECT or RELAY), the sites' member counts and first
    ranks (sites as contiguous rank ranges; hier.py's explicit side also takes any site
    grouping, first = lowest rank), the entries in list order (nondecreasing step), the
    block size it was planned for and the predicted completion of every plan compared
    (seconds, `predict`)."""

    kind: str
    sizes: tuple[int, ...]
    first: tuple[int, ...]
    entries: tuple[PlanEntry, ...]
    nbytes: int = 0
    predicted_s: dict = field(default_factory=dict)

    @property
    def nsites(self) -> int:
        return len(self.sizes)

    @property
    def nsteps(self) -> int:
        """Steps the plan takes (its last entry's step + 1; 0 without entries)."""
        return self.entries[-1].step + 1 if self.entries else 0


def direct(nsites: int) -> list[PlanEntry]:
    """Spreading simple: in round d (step d - 1) site j sends its own blocks to j + d."""
    return [PlanEntry(d - 1, j, (j + d) % nsites, j) for d in range(1, nsites) for j in range(nsites)]


def _durations(costs: SiteCosts, nbytes: int) -> tuple[np.ndarray, np.ndarray]:
    """(arrival delay, link busy time) of every (src, dst, origin) entry, (S, S, S)."""
    s = costs.nsites
    n = np.asarray(costs.sizes, np.float64)
    flows = np.empty((s, s, s))
    for x in range(s):
        for y in range(s):
            lcm = math.lcm(costs.sizes[x], costs.sizes[y])
            flows[x, y, :] = np.minimum(n, float(lcm))
    rate = np.minimum(costs.bandwidth[:, :, None], flows * costs.flow[:, :, None])
    with np.errstate(divide="ignore", invalid="ignore"):
        busy = np.where(n[None, None, :] * nbytes > 0, n[None, None, :] * float(nbytes) / rate, 0.0)
    return costs.latency[:, :, None] + busy, busy


def predict(entries, costs: SiteCosts, nbytes: int) -> float:
    """Predicted completion (s) of the plan's entries in list order (module docstring)."""
    s = costs.nsites
    delay, busy = _durations(costs, nbytes)
    hold = np.full((s, s), np.inf)
    np.fill_diagonal(hold, 0.0)
    free = np.zeros((s, s))
    end = 0.0
    for e in entries:
        start = max(hold[e.src, e.origin], free[e.src, e.dst])
        free[e.src, e.dst] = start + busy[e.src, e.dst, e.origin]
        hold[e.dst, e.origin] = start + delay[e.src, e.dst, e.origin]
        end = max(end, hold[e.dst, e.origin])
    return float(end)


def relay(costs: SiteCosts, nbytes: int) -> list[PlanEntry]:
    """Per origin a broadcast tree over sites, greedily by earliest predicted arrival
    (module docstring); ties go to the lowest (src, dst, origin)."""
    s = costs.nsites
    delay, busy = _durations(costs, nbytes)
    hold = np.full((s, s), np.inf)  # hold[site, origin]: when the site holds its blocks
    np.fill_diagonal(hold, 0.0)
    depth = np.zeros((s, s), np.int64)
    free = np.zeros((s, s))
    picked = []  # (depth, start, commit index, entry)
    for i in range(s * (s - 1)):
        # start[x, y, o] = max(hold[x, o], free[x, y]); only x holding o, y lacking it
        start = np.maximum(hold[:, None, :], free[:, :, None])
        arrive = start + delay
        ok = np.isfinite(hold)[:, None, :] & ~np.isfinite(hold)[None, :, :]
        arrive = np.where(ok, arrive, np.inf)
        x, y, o = np.unravel_index(int(np.argmin(arrive)), arrive.shape)
        t0 = float(start[x, y, o])
        hold[y, o] = arrive[x, y, o]
        free[x, y] = t0 + busy[x, y, o]
        depth[y, o] = 0 if x == o else depth[x, o] + 1
        picked.append((int(depth[y, o]), t0, i, PlanEntry(int(depth[y, o]), int(x), int(y), int(o))))
    return [e for *_, e in sorted(picked, key=lambda t: t[:3])]


def choose(costs: SiteCosts, nbytes: int, first: tuple[int, ...] | None = None,
           kind: str | None = None) -> SitePlan:
    """The plan for these sites: `kind` if given, else the relay plan where predicted
    strictly faster than direct (and RELAY_MAX_SITES allows it), else direct. `first`:
    the sites' first ranks (default: contiguous ranges)."""
    s = costs.nsites
    plans = {DIRECT: direct(s)}
    if kind == RELAY or (kind is None and 2 < s <= RELAY_MAX_SITES):
        plans[RELAY] = relay(costs, nbytes)
    predicted = {k: predict(v, costs, nbytes) for k, v in plans.items()}
    if kind is None:
        kind = RELAY if RELAY in plans and predicted[RELAY] < predicted[DIRECT] else DIRECT
    return SitePlan(kind, tuple(int(n) for n in costs.sizes), first if first is not None else costs.first,
                    tuple(plans[kind]), int(nbytes), predicted)


def refusal(entries, nsites: int) -> tuple[str, str] | None:
    """(field, expected) for entries that are not a valid plan over nsites sites (module
    docstring), else None. O(entries + S^2). The checks and their order are
    compact_hier.c's (check_plan), which gives the same lines."""
    if len(entries) != nsites * (nsites - 1):
        return "entries", f"expected {nsites * (nsites - 1)} (every site receives every other site's blocks once), found {len(entries)}"
    got = np.eye(nsites, dtype=bool)  # got[site, origin]: received in an earlier step
    i = 0
    while i < len(entries):
        j = i
        while j < len(entries) and entries[j].step == entries[i].step:
            j += 1
        for k in range(i, j):
            e = entries[k]
            if not (0 <= e.src < nsites and 0 <= e.dst < nsites and 0 <= e.origin < nsites):
                return f"entries[{k}]", f"expected sites below {nsites}, found {e.src}->{e.dst} origin {e.origin}"
            if e.src == e.dst:
                return f"entries[{k}]", f"expected two different sites, found {e.src} twice"
            if not got[e.src, e.origin]:
                return f"entries[{k}]", f"expected site {e.src} to hold origin site {e.origin}'s blocks before step {e.step}"
        for k in range(i, j):
            e = entries[k]
            if got[e.dst, e.origin]:
                return f"entries[{k}]", f"expected site {e.dst} to receive origin site {e.origin}'s blocks once"
            got[e.dst, e.origin] = True
        if j < len(entries) and entries[j].step < entries[i].step:
            return f"entries[{j}].step", f"expected nondecreasing steps, found {entries[j].step} after {entries[i].step}"
        i = j
    return None
