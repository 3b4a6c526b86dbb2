"""`collsched tune`: the tuning-table use of a schedule cache, for balanced calls
(docs/cache.md, "Tuning tables"), in the spirit of Open MPI's coll/tuned dynamic rules
and MPICH's JSON tuning files.

For every cell (ranks P, bytes per rank B) of the grid, every candidate algorithm (those
`--algorithm auto` compiles for a flat pattern, or a given list) is compiled for B and
timed: by the cost model, or by a `measure` function the caller gives (the CLI's
--backend smpi runs the lab; the core never imports it). The fastest gets the cell's
`regular` entry (site *): it serves B up to the next cell's bytes minus one; the largest
cell serves B and everything above. A cell the MPI library's own collective wins
(`native`, measured only) gets no entry: the runtime then calls the library.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import schedfile
from ..errors import InputError
from ..pipeline import auto_candidates, compile_schedule, resolve_topology
from .index import ANY_SITE, MAX_BYTES, Entry
from .store import DEFAULT_MAX_SIZE, Update, commit, file_name

NATIVE = "native"


@dataclass
class Cell:
    """One (ranks, bytes) cell: every candidate's time in seconds (or why it was not
    compiled, a string), the winner, and the byte range its entry serves."""
    ranks: int
    nbytes: int
    bytes_min: int
    bytes_max: int
    times: dict = field(default_factory=dict)
    winner: str | None = None
    file: str | None = None

    def to_dict(self) -> dict:
        return {"ranks": self.ranks, "bytes": self.nbytes, "bytes_min": self.bytes_min,
                "bytes_max": self.bytes_max, "winner": self.winner, "file": self.file,
                "avg_elapsed_s": self.times}


def byte_ranges(sizes: list[int]) -> list[tuple[int, int, int]]:
    """(B, min, max) per distinct size in increasing order: each serves its size up to
    the next one's minus one, the largest everything above it."""
    s = sorted(set(int(b) for b in sizes))
    return [(b, b, (s[i + 1] - 1) if i + 1 < len(s) else MAX_BYTES) for i, b in enumerate(s)]


def candidates(topology: str | None, ranks: int, algorithms) -> list[str]:
    """The algorithms a cell compiles: auto's for a flat pattern, or the list given."""
    if algorithms is None or algorithms == "auto":
        topo = resolve_topology(ranks, topology, None)
        return auto_candidates(topo, np.zeros((1, ranks)))
    return list(algorithms)


def tune_cell(ranks: int, rng: tuple[int, int, int], topology, names: list[str], engine: str,
              measure=None) -> tuple[Cell, bytes | None]:
    """One cell: every candidate compiled for its bytes and timed; (the cell, the
    winner's schedule file bytes, its header serving the cell's range; None: native won)."""
    nbytes, lo, hi = rng
    cell = Cell(ranks, nbytes, lo, hi)
    scheds = {}
    for name in names:
        if name == NATIVE:
            continue
        try:
            r = compile_schedule(name, ranks, nbytes, topology=topology, engine=engine)
        except InputError as e:
            if e.source != "--algorithm":  # not the algorithm refusing this request
                raise
            cell.times[name] = f"not applicable: {e.expected}"
            continue
        scheds[name] = r.schedule
        cell.times[name] = r.metrics.avg_elapsed_s
    if measure is not None:  # measured times replace the model's (native measured too)
        cell.times.update(measure(ranks, nbytes, [n for n in names if n in scheds or n == NATIVE]))
    timed = {n: t for n, t in cell.times.items() if isinstance(t, float)}
    if not timed:
        raise InputError("--algorithms", ",".join(names), f"no candidate serves {ranks} ranks, {nbytes} B")
    cell.winner = min(timed, key=lambda n: (timed[n], names.index(n)))
    if cell.winner == NATIVE:
        return cell, None
    sched = scheds[cell.winner]
    # The schedule was compiled (and timed) for the cell's bytes; the entry serves the
    # cell's range (any size runs any schedule: docs/semantics.md), as its header says.
    sched.bytes_min, sched.bytes_max = lo, hi
    data = schedfile.encode(sched)
    cell.file = file_name(data)
    return cell, data


@dataclass
class Tuned:
    cells: list[Cell]
    candidates: dict  # ranks -> the candidate names
    update: Update


def tune(ranks: list[int], sizes: list[int], directory, *, topology: str | None = None,
         algorithms=None, engine: str = "none", measure=None, progress=None,
         max_size: int | None = DEFAULT_MAX_SIZE) -> Tuned:
    """Tune every (ranks, bytes) cell and commit the winners as `regular` entries (site
    *), replacing the cache's site-* regular entries of the tuned communicator sizes (a
    tuning table is replaced whole per size) except those whose group has class entries."""
    if not ranks or not sizes:
        raise InputError("--ranks" if not ranks else "--bytes", "", "expected at least one value")
    cells, new, names_of = [], [], {}
    topo_digest = {}
    for p in sorted(set(ranks)):
        names = candidates(topology, p, algorithms)
        if measure is not None and NATIVE not in names:
            names = names + [NATIVE]
        names_of[p] = names
        topo_digest[p] = resolve_topology(p, topology, None).digest()[:16] if topology else "-"
        for rng in byte_ranges(sizes):
            if progress is not None:
                progress(f"{p} ranks, {rng[0]} B")
            cell, data = tune_cell(p, rng, topology, names, engine, measure)
            cells.append(cell)
            if data is not None:
                new.append((Entry(cell.file, "allgather", p, cell.bytes_min, cell.bytes_max, ANY_SITE,
                                  topo_digest[p], None, None, 0, None), data))
    tuned = set(ranks)

    def replaces(e: Entry, old: list[Entry]) -> bool:
        """A site-* regular entry of a tuned size, unless it backs class entries (a build's
        regular entry is the fallback of its group's classes: kept)."""
        return (e.regular and e.site == ANY_SITE and e.ranks in tuned
                and not any(not o.regular and o.group == e.group for o in old))

    update = commit(directory, new, max_size=max_size, comment="by collsched tune", replaces=replaces)
    return Tuned(cells, names_of, update)


def plot_winners(cells: list[Cell], path, title: str = "collsched tune: the fastest per cell") -> None:
    """A coloured grid, ranks x bytes, the winner's name in each cell (matplotlib Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..files import save_figure
    from ..inputs.units import format_bytes

    ranks = sorted({c.ranks for c in cells})
    sizes = sorted({c.nbytes for c in cells})
    names = sorted({c.winner for c in cells if c.winner})
    grid = np.full((len(ranks), len(sizes)), np.nan)
    for c in cells:
        if c.winner:
            grid[ranks.index(c.ranks), sizes.index(c.nbytes)] = names.index(c.winner)
    fig, ax = plt.subplots(figsize=(1.2 + 1.3 * len(sizes), 1.0 + 0.6 * len(ranks)))
    cmap = plt.get_cmap("tab20", max(len(names), 1))
    ax.imshow(grid, cmap=cmap, vmin=-0.5, vmax=max(len(names), 1) - 0.5, aspect="auto")
    for c in cells:
        ax.text(sizes.index(c.nbytes), ranks.index(c.ranks), c.winner or "-", ha="center",
                va="center", fontsize=8)
    ax.set_xticks(range(len(sizes)), [format_bytes(b) for b in sizes])
    ax.set_yticks(range(len(ranks)), [str(p) for p in ranks])
    ax.set_xlabel("bytes per rank")
    ax.set_ylabel("ranks")
    ax.set_title(title)
    fig.tight_layout()
    try:
        save_figure(fig, path)
    finally:
        plt.close(fig)
