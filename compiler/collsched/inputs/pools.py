"""Pool trees (Min3 paper, section 5.1): which ranks belong together, by link bandwidth.

A *pool* is a set of ranks whose links among themselves are fast; a pool splits into
sub-pools across its slowest links, recursively, down to single ranks. The tree drives
Min3-Allgather (algorithms/min3/) and the verifier's wide-area check (each piece enters
each pool at most once).

How the tree is built (the paper's steps, and what it leaves open; docs/grid.md):

1. One bandwidth per rank pair: the rate one flow gets (Topology.flow_bandwidth, i.e.
   capped by the TCP window over long links, which is what a measured bandwidth shows),
   made symmetric with the *slower* direction: min(b(s, r), b(r, s)). An allgather sends
   both ways over every boundary, so the slower direction is the one that limits it.
2. Sort the pairwise bandwidths and group them into *bands*: starting from the smallest,
   a band takes every value up to 10% above its first value; the next value starts a new
   band. A band's *threshold* is its largest value (the paper's "maximum of each set").
3. Split a pool at the lowest band whose removal disconnects it: drop every link whose
   band is at most k, for the smallest k that leaves more than one connected component;
   the components are the sub-pools and the pool's threshold is band k's. So links between
   two sub-pools are never faster than the parent's threshold, and each sub-pool is held
   together by faster links. A pool whose links all fall in one band splits into single
   ranks. Ranks on one host form a pool of their own (the intra-host class is the fastest).

Rank level, not host level: the cost model and the schedules are per rank, and with one
rank per host (the default placement) both are the same.
"""
from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np

from ..errors import InputError
from ..files import save_figure

BAND_WIDTH = 0.10  # a band holds values up to 10% above its smallest (paper, section 5.1)
# Pools of at most this many ranks find their components on Python lists, larger ones with
# numpy (same labels).
SMALL_POOL = 64


@dataclass
class Bands:
    """Bandwidth bands of a topology: per rank pair its band, per band its threshold."""

    bandwidth: np.ndarray  # (P, P) symmetric bytes/s, diagonal inf
    band: np.ndarray  # (P, P) int band index per pair; diagonal -1
    thresholds: np.ndarray  # (K,) bytes/s, increasing: the largest value in each band


def symmetric_bandwidth(topo) -> np.ndarray:
    """(P, P) bytes/s per rank pair: the slower direction of one flow's bandwidth."""
    bw = np.asarray(topo.flow_bandwidth(), dtype=np.float64)
    if bw.ndim != 2 or bw.shape[0] != bw.shape[1]:
        raise InputError(topo.source, "bandwidth",
                         f"expected a square matrix, got shape {bw.shape}")
    sym = np.minimum(bw, bw.T)
    np.fill_diagonal(sym, np.inf)
    off = ~np.eye(len(sym), dtype=bool)
    if np.any(~(sym[off] > 0)) or np.any(np.isnan(sym)):
        raise InputError(topo.source, "bandwidth",
                         "expected positive bandwidths between every pair of ranks")
    return sym


def bands_of(bandwidth: np.ndarray, width: float = BAND_WIDTH) -> Bands:
    """Group the off-diagonal values of a symmetric (P, P) matrix into 10% bands."""
    p = len(bandwidth)
    band = np.full((p, p), -1, np.int64)
    if p < 2:
        return Bands(bandwidth, band, np.zeros(0))
    iu = np.triu_indices(p, 1)
    values = _distinct(bandwidth[iu])
    # Greedy from the smallest value: one band per jump of more than `width`. The loop runs
    # once per band (a few dozen even for noisy measured matrices), not once per value.
    starts, thresholds = [], []
    i = 0
    while i < len(values):
        j = int(np.searchsorted(values, values[i] * (1.0 + width), side="right"))
        starts.append(values[i])
        thresholds.append(values[j - 1])
        i = j
    idx = np.searchsorted(np.asarray(starts), bandwidth[iu], side="right") - 1
    band[iu] = idx
    band[(iu[1], iu[0])] = idx
    return Bands(bandwidth, band, np.asarray(thresholds, np.float64))


def _distinct(a: np.ndarray) -> np.ndarray:
    """Sorted distinct values (np.unique without its one-off import of numpy.ma)."""
    v = np.sort(a, axis=None)
    if len(v) < 2:
        return v
    return v[np.concatenate(([True], v[1:] != v[:-1]))]  # (np.r_ costs more than the sort)


def _components(adjacent: np.ndarray) -> np.ndarray:
    """Connected-component label per node of a boolean adjacency matrix (labels 0..C-1)."""
    n = len(adjacent)
    if n <= SMALL_POOL:
        return _components_small(adjacent)
    label = np.full(n, -1, np.int64)
    count = 0
    for start in range(n):
        if label[start] >= 0:
            continue
        label[start] = count
        frontier = np.array([start])
        while len(frontier):
            reached = adjacent[frontier].any(0) & (label < 0)
            frontier = np.nonzero(reached)[0]
            label[frontier] = count
        count += 1
    return label


def _components_small(adjacent: np.ndarray) -> np.ndarray:
    """_components with each row as a Python int bit set (numpy's per-call cost dominates
    small pools); the same labels: components numbered in order of their smallest node."""
    n = len(adjacent)
    rows = [int.from_bytes(r.tobytes(), "little")
            for r in np.packbits(adjacent, axis=1, bitorder="little")]
    label = np.empty(n, np.int64)
    unseen, count = (1 << n) - 1, 0
    while unseen:
        comp = frontier = unseen & -unseen  # the smallest node not labelled yet
        while frontier:
            reached = 0
            while frontier:
                low = frontier & -frontier
                reached |= rows[low.bit_length() - 1]
                frontier ^= low
            frontier = reached & ~comp
            comp |= frontier
        unseen &= ~comp
        while comp:
            low = comp & -comp
            label[low.bit_length() - 1] = count
            comp ^= low
        count += 1
    return label


def _split(band: np.ndarray) -> tuple[int, np.ndarray]:
    """(band k, component labels): the smallest k whose removal disconnects the pool."""
    n = len(band)
    present = _distinct(band)[1:]  # the diagonal's -1 comes first
    lo, hi = 0, len(present) - 1  # at present[hi] every link is removed: n components
    labels_hi = np.arange(n)
    while lo < hi:  # the number of components never decreases with k: binary search
        mid = (lo + hi) // 2
        labels = _components(band > present[mid])
        if labels.max() >= 1:
            hi, labels_hi = mid, labels
        else:
            lo = mid + 1
    return int(present[lo]), labels_hi


def pool_tree(topo) -> nx.DiGraph:
    """The pool tree of a topology's ranks as a networkx DiGraph (edges parent -> child).

    Node ids are integers, 0 for the root (all ranks), numbered breadth first. Attributes:
    `ranks` (sorted int array), `depth`, `threshold_Bps` (bandwidth at which the pool splits
    into its children: no link between two of them is faster; None for a single rank),
    `band` (index into the graph's `thresholds`), `sites` (site labels of its ranks, in
    order of first appearance). Graph attributes: `thresholds` (Bps per band), `nranks`.
    """
    b = bands_of(symmetric_bandwidth(topo))
    p = len(b.band)
    site_of = list(topo.rank_site())
    site_names = list(dict.fromkeys(site_of))  # in order of first appearance
    site_idx = np.array([site_names.index(x) for x in site_of] if len(site_names) < 64 else
                        [{n: i for i, n in enumerate(site_names)}[x] for x in site_of], np.int64)
    pools = []  # (ranks, depth, parent index, attributes), breadth first
    queue = [(np.arange(p), 0, None)]
    head = 0
    while head < len(queue):  # breadth first: children come after all shallower pools
        ranks, depth, parent = queue[head]
        head += 1
        sites = ([site_names[site_idx[ranks[0]]]] if len(ranks) == 1 else
                 [site_names[i] for i in _distinct(site_idx[ranks])])
        attrs = dict(ranks=ranks, depth=depth, sites=sites, threshold_Bps=None, band=None)
        if len(ranks) > 1:
            k, labels = _split(b.band[np.ix_(ranks, ranks)])
            attrs.update(threshold_Bps=float(b.thresholds[k]), band=k)
            groups = [ranks[labels == c] for c in range(int(labels.max()) + 1)]
            for g in sorted(groups, key=lambda g: int(g[0])):
                queue.append((g, depth + 1, head - 1))
        pools.append((ranks, depth, parent, attrs))
    # Node ids: pools first (breadth first), then the single ranks in rank order (short pool
    # ids). Nodes and edges are added in breadth-first order, as networkx.relabel_nodes
    # would leave them (without its first-call cost).
    if p == 1:
        ids = [0]
    else:
        multi = [i for i, q in enumerate(pools) if len(q[0]) > 1]
        single = sorted((i for i, q in enumerate(pools) if len(q[0]) == 1), key=lambda i: int(pools[i][0][0]))
        ids = [0] * len(pools)
        for new_id, i in enumerate(multi + single):
            ids[i] = new_id
    tree = nx.DiGraph(thresholds=b.thresholds, nranks=p)
    tree.add_nodes_from((ids[i], q[3]) for i, q in enumerate(pools))
    tree.add_edges_from((ids[q[2]], ids[i]) for i, q in enumerate(pools) if q[2] is not None)
    return tree


def children(tree: nx.DiGraph, node: int) -> list[int]:
    """Sub-pools of a pool, in the order of their smallest rank."""
    return sorted(tree.successors(node), key=lambda c: int(tree.nodes[c]["ranks"][0]))


def partitions(tree: nx.DiGraph) -> list[np.ndarray]:
    """Pool id of every rank at each depth 1.. of the tree (verify.check_wide_area's input).

    A rank whose branch ends higher up keeps the id of its deepest pool. Depths where every
    pool is a single rank are left out (the delivery check already covers them).
    """
    p = tree.graph["nranks"]
    by_depth: dict[int, list[int]] = {}
    for node, d in tree.nodes(data="depth"):
        by_depth.setdefault(d, []).append(node)
    label = np.zeros(p, np.int64)
    out = []
    for depth in range(1, max(by_depth) + 1 if by_depth else 1):
        multi = False
        for node in by_depth.get(depth, []):
            ranks = tree.nodes[node]["ranks"]
            label[ranks] = node
            multi |= len(ranks) > 1
        if multi:
            out.append(label.copy())
    return out


def format_rate(bps: float) -> str:
    """Bytes/s as a short bit rate: 160000.0 -> '1.28 Mbit/s'."""
    bits = float(bps) * 8
    for unit, f in (("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bits >= f:
            return f"{bits / f:.4g} {unit}"
    return f"{bits:.4g} bit/s"


def describe(tree: nx.DiGraph, max_ranks_listed: int = 8) -> str:
    """The tree as indented text: one line per pool (single ranks folded into their parent)."""
    lines = []

    def rank_list(ranks):
        r = [int(x) for x in ranks]
        if len(r) > 1 and r == list(range(r[0], r[-1] + 1)):
            return f"ranks {r[0]}-{r[-1]}"
        shown = ", ".join(map(str, r[:max_ranks_listed]))
        return "ranks " + shown + (", ..." if len(r) > max_ranks_listed else "")

    def walk(node, indent):
        a = tree.nodes[node]
        kids = children(tree, node)
        if len(a["ranks"]) == 1:
            return
        thr = format_rate(a["threshold_Bps"])
        leaf = all(len(tree.nodes[c]["ranks"]) == 1 for c in kids)
        what = f"{len(kids)} single ranks" if leaf else f"{len(kids)} sub-pools"
        lines.append(f"{'  ' * indent}pool {node}: {len(a['ranks'])} ranks ({rank_list(a['ranks'])}), "
                     f"sites {', '.join(a['sites'])}; splits at {thr} into {what}")
        for c in kids:
            walk(c, indent + 1)

    walk(0, 0)
    if len(tree.nodes[0]["ranks"]) == 1:
        lines.append("pool 0: 1 rank (nothing to split)")
    return "\n".join(lines)


def to_json(tree: nx.DiGraph) -> dict:
    """JSON-ready form: the pools (single ranks left out) and the partitions per depth."""
    pools = []
    for node in sorted(tree.nodes):
        a = tree.nodes[node]
        if len(a["ranks"]) == 1 and node != 0:
            continue
        parent = next(iter(tree.predecessors(node)), None)
        pools.append({"id": node, "parent": parent, "depth": a["depth"],
                      "ranks": [int(r) for r in a["ranks"]], "sites": a["sites"],
                      "threshold_Bps": a["threshold_Bps"],
                      "children": children(tree, node)})
    return {"nranks": tree.graph["nranks"],
            "band_thresholds_Bps": [float(t) for t in tree.graph["thresholds"]],
            "pools": pools,
            "partitions": [[int(x) for x in lv] for lv in partitions(tree)]}


def plot(tree: nx.DiGraph, path, title: str = "pool tree") -> None:
    """Draw the pools (single ranks counted, not drawn) top-down into an image file."""
    import matplotlib.pyplot as plt

    fig = plot_figure(tree, title)
    try:
        save_figure(fig, path)
    finally:
        plt.close(fig)


def plot_figure(tree: nx.DiGraph, title: str = "pool tree"):
    """The pool tree as a Figure: one box per pool of two or more ranks (its size, the
    rate it splits at, its sites when two at most), lines to its sub-pools, a key."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [n for n in tree.nodes if len(tree.nodes[n]["ranks"]) > 1] or [0]
    sub = tree.subgraph(shown)
    pos, leaves = {}, [0]

    def place(node):  # x: middle of its leaves; y: depth
        kids = [c for c in children(tree, node) if c in sub]
        if not kids:
            pos[node] = (leaves[0], -tree.nodes[node]["depth"])
            leaves[0] += 1
            return
        for c in kids:
            place(c)
        xs = [pos[c][0] for c in kids]
        pos[node] = ((min(xs) + max(xs)) / 2, -tree.nodes[node]["depth"])

    place(0)
    depth = max(-y for _, y in pos.values())
    fig, ax = plt.subplots(figsize=(min(max(4.5, 1.9 * leaves[0] + 0.6), 30), 1.3 + 1.15 * (depth + 1)))
    for u, v in sub.edges:
        ax.plot([pos[u][0], pos[v][0]], [pos[u][1], pos[v][1]], color="#4a6f91", lw=1, zorder=1)
    for n in sub.nodes:
        a = tree.nodes[n]
        label = f"pool {n}: {len(a['ranks'])} ranks"
        if a["threshold_Bps"] is not None:
            label += f"\nsplits at {format_rate(a['threshold_Bps'])}"
        if len(a["sites"]) <= 2:
            label += "\n" + ", ".join(a["sites"])
        ax.text(*pos[n], label, ha="center", va="center", fontsize=7, zorder=2,
                bbox={"boxstyle": "round,pad=0.4", "facecolor": "#dbe9f6", "edgecolor": "#4a6f91"})
    ax.set_xlim(-0.6, leaves[0] - 0.4)
    ax.set_ylim(-depth - 0.5, 0.5)
    ax.set_title(title, fontsize=10)
    ax.axis("off")
    fig.text(0.01, 0.01, "A pool splits into its sub-pools across links no faster than its split\n"
             "rate (one flow's bandwidth); pools of one rank are not drawn.", fontsize=7, color="0.3",
             va="bottom")
    fig.tight_layout(rect=(0, 0.3 / fig.get_size_inches()[1], 1, 1))
    return fig
