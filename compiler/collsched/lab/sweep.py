"""`collsched sweep`: the BDR paper's mini-benchmark grid under SMPI, printed as its Tables 3/4.

The paper (section 4) ran every algorithm for P = 4, 8, ..., 48 processes, N = 128K, 256K,
512K, 1M and 2M floats gathered in total (K = 1024), and maxDelay = 0, 1, 5, 10, 50, 100
and 500 ms, 256 iterations each, and reported per cell the fastest algorithm and, when a
PAP-aware one (BDR, BSLB) won, its speedup over the best regular one. Here each
(cell, algorithm) is one `lab.runner.run_lab` call on the same seeded arrival patterns, so
within a cell all algorithms see the same iterations (a paired comparison); SMPI is
deterministic, so the only noise left is which patterns the reduced iteration count draws.

Every rank contributes floor(4 N / P) bytes (N floats in total, 4 bytes each, rounded
down to whole bytes per rank). With a user's SimGrid platform (SweepConfig.platform and
hostfile; `collsched sweep --platform FILE.xml --hostfile FILE`) every run is on that
platform, ranks on the host file's first P slots; the topology still predicts and compiles. Results are cached per (cell, algorithm) in a JSON file
written after every run, so an interrupted sweep continues where it stopped.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import resources
from ..errors import InputError
from ..files import read_input, write_atomic
from .netmodel import check_model
from .runner import PAP_AWARE, LabConfig, check_algorithm, run_lab

KILO = 1024
FLOAT_BYTES = 4
PAPER_RANKS = tuple(range(4, 49, 4))
PAPER_FLOATS = tuple(f * KILO for f in (128, 256, 512, 1024, 2048))
PAPER_DELAYS_MS = (0.0, 1.0, 5.0, 10.0, 50.0, 100.0, 500.0)
PAPER_ALGORITHMS = ("nex", "lnbc", "bslb", "bdr", "ring", "native")
PAPER_ITERATIONS = 256
# The whole grid takes about an hour at 4 iterations on a 2-core machine (docs/sweep.md
# has the measured time; half of it is bdr, whose explicit PAT driver naps in tau/32
# slices). Twice the iterations would come close to a 2-hour budget, so the default is 4
# (the paper: 256).
DEFAULT_ITERATIONS = 4
# Algorithms that use the predicted arrival pattern (runner.PAP_AWARE); the rest are "regular".
# The paper's best cell (docs/sweep.md): BDR 1.9x faster than the best regular algorithm there.
PAPER_BEST_CELL = (28, 256 * KILO, 5.0)
TARGET_AGREEMENT = 0.10  # bdr: measured vs predicted speedup over ring, maxDelay >= 5 ms
TARGET_FLAT_SLOWDOWN = 0.02  # bdr at maxDelay 0: at most 2% slower than ring
CACHE_VERSION = 3  # runtime and lab changes make older runs not count: 2 serial PAT schedules,
# 3 serial chains, background relays, SMPI's MPI_Test charge off (2026-11-23)
NETMODEL_VERSION = 1
# SimGrid aborted now and then (1 of ~1,200 runs, not reproducible): one more try at once.
RUN_ATTEMPTS = 2


@dataclass
class SweepConfig:
    ranks: tuple = PAPER_RANKS
    floats: tuple = PAPER_FLOATS  # gathered in total, not per rank
    delays_ms: tuple = PAPER_DELAYS_MS
    algorithms: tuple = PAPER_ALGORITHMS
    iterations: int = DEFAULT_ITERATIONS
    seed: int = 1
    topology: str = "topologies/tryton-48.yaml"
    network_model: str = "CM02"
    cache: str | None = None  # default: out/sweep/<topology>-cache.json
    platform: str | None = None  # a user's SimGrid platform XML (with hostfile; simgrid_platform.py)
    hostfile: str | None = None

    def settings(self) -> dict:
        """What a cached result depends on besides its cell and algorithm."""
        out = {"version": CACHE_VERSION, "topology": Path(self.topology).name, "iterations": self.iterations,
               "seed": self.seed, "network_model": self.network_model, "flat_iterations": 0}
        if self.network_model != "CM02":
            # Since lab/netmodel.py, predictions under SMPI and LV08 use the model's factors:
            # older runs under those models do not count (CM02 ones do: nothing changed there).
            out["predictions"] = NETMODEL_VERSION
        if self.platform is not None:  # the runs belong to that platform and placement
            out["platform"] = str(Path(self.platform).resolve())
            out["hostfile"] = str(Path(self.hostfile).resolve()) if self.hostfile else None
            out["platform_digest"] = _digest(self.platform, self.hostfile)
        return out

    def cache_path(self, root: Path) -> Path:
        if self.cache:
            return Path(self.cache)
        model = "" if self.network_model == "CM02" else f"-{self.network_model}"
        on = "" if self.platform is None else f"-on-{Path(self.platform).stem}"
        return root / "out" / "sweep" / f"{Path(self.topology).stem}{on}{model}-cache.json"

    def check(self) -> None:
        check_model(self.network_model)
        if not self.ranks or any(p < 2 for p in self.ranks):
            raise InputError("--ranks", ",".join(map(str, self.ranks)), "expected rank counts of at least 2")
        if not self.floats or any(n < 1 for n in self.floats):
            raise InputError("--floats", ",".join(map(str, self.floats)), "expected positive float counts")
        if not self.delays_ms or any(not d >= 0 for d in self.delays_ms):
            raise InputError("--max-delays-ms", ",".join(map(str, self.delays_ms)), "expected delays >= 0")
        if self.iterations < 1:
            raise InputError("--iterations", str(self.iterations), "expected at least 1")
        if not self.algorithms:
            raise InputError("--algorithms", "", "expected at least one algorithm")
        for name in self.algorithms:
            check_algorithm(name, "smpi")
        from .simgrid_platform import check_options, load_platform

        if check_options("smpi", self.platform, self.hostfile):
            load_platform(self.platform, self.hostfile, max(self.ranks))
        for p in self.ranks:
            for n in self.floats:
                if bytes_per_rank(n, p) < 1:
                    raise InputError("--floats", str(n), f"expected at least one byte per rank at P = {p}")


def _digest(*paths) -> str:
    """SHA-256 of the files' contents (bounded reads: simgrid_platform checked them)."""
    import hashlib

    h = hashlib.sha256()
    for path in paths:
        if path is not None:
            with open(path, "rb") as f:
                h.update(f.read(64 << 20))
    return h.hexdigest()[:16]


def bytes_per_rank(floats: int, ranks: int) -> int:
    """N floats gathered in total: each rank contributes floor(4 N / P) bytes."""
    return FLOAT_BYTES * floats // ranks


def cell_key(ranks: int, floats: int, delay_ms: float, algorithm: str) -> str:
    return f"P={ranks} N={floats} maxDelay={delay_ms:g}ms {algorithm}"


def floats_label(floats: int) -> str:
    """128K, 1M, ... as in the paper (K = 1024 floats); other counts as they are."""
    for unit, size in (("M", KILO * KILO), ("K", KILO)):
        if floats % size == 0:
            return f"{floats // size}{unit}"
    return str(floats)


def parse_floats(text: str) -> tuple[int, ...]:
    """Comma-separated float counts: 131072, 128K or 2M (K = 1024, M = 1024 K, as the paper)."""
    out = []
    for item in (x.strip() for x in str(text).split(",")):
        if not item:
            continue
        factor = {"K": KILO, "M": KILO * KILO}.get(item[-1].upper(), 1)
        digits = item[:-1] if factor > 1 else item
        # ASCII digits only (str.isdigit takes other scripts' too), at most 2^40 floats
        if not (digits.isascii() and digits.isdigit() and len(digits) <= 13) or not 0 < int(digits) * factor <= 1 << 40:
            raise InputError("--floats", item[:40], "expected comma-separated positive counts such as "
                                                    "131072, 128K or 2M (at most 2^40)")
        out.append(int(digits) * factor)
    if not out:
        raise InputError("--floats", text, "expected at least one count")
    return tuple(out)


class SweepCache:
    """Results per (cell, algorithm) in one JSON file, rewritten atomically after each run."""

    def __init__(self, path: Path, settings: dict):
        self.path, self.settings = Path(path), settings
        self.runs: dict[str, dict] = {}
        if self.path.exists():
            try:
                doc = json.loads(read_input(self.path, "sweep cache"))
                if not isinstance(doc, dict):
                    raise ValueError("not a JSON object")
            except ValueError as e:
                raise InputError(str(self.path), "", f"expected a sweep cache (JSON): {e}") from None
            if doc.get("settings") != settings:
                raise InputError(str(self.path), "settings",
                                 f"holds a sweep with {doc.get('settings')}, this one has {settings}; "
                                 "pass --fresh to start over or another --cache")
            self.runs = doc.get("runs", {})

    def get(self, key: str) -> dict | None:
        row = self.runs.get(key)
        return row if row is not None and "error" not in row else None  # failed runs are retried

    def put(self, key: str, row: dict) -> None:
        self.runs[key] = row
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps({"settings": self.settings, "runs": self.runs}, indent=0))


def _find_topology(path: str, root: Path) -> str:
    """A topology path as given, else relative to the repository (the bundled ones)."""
    for candidate in (Path(resources.topology_path(path)), root / path):
        if candidate.is_file():
            return str(candidate.resolve())
    raise InputError("--topology", path, "expected a topology YAML file (e.g. topologies/tryton-48.yaml)")


def grid(cfg: SweepConfig) -> list[tuple[int, int, float]]:
    return [(p, n, float(d)) for p in cfg.ranks for n in cfg.floats for d in cfg.delays_ms]


def run_sweep(cfg: SweepConfig, *, root: Path, fresh: bool = False, redo: tuple = (),
              progress=None) -> dict:
    """Run every (cell, algorithm) not cached yet; returns the sweep (settings, cells).

    `progress(done, total, text)` is called before each run and once at the end; `redo`
    names algorithms whose cached results are run again (after a change to them).
    """
    cfg.check()
    path = cfg.cache_path(root)
    if fresh and path.exists():
        path.unlink()
    cache = SweepCache(path, cfg.settings())
    jobs = [(c, a) for c in grid(cfg) for a in cfg.algorithms]
    todo = [(c, a) for c, a in jobs if a in redo or cache.get(cell_key(*c, a)) is None]
    topology = _find_topology(cfg.topology, root)
    started = time.perf_counter()
    for i, ((p, n, d), alg) in enumerate(todo):
        if progress:
            progress(i, len(todo), f"P={p} N={floats_label(n)} maxDelay={d:g}ms {alg}")
        lab = LabConfig(backend="smpi", topology=topology, ranks=p, nbytes=bytes_per_rank(n, p),
                        iterations=cfg.iterations, max_delay_ms=d, seed=cfg.seed, flat_iterations=0,
                        network_model=cfg.network_model, bounds=False,  # one run per cell: no report
                        platform=cfg.platform, hostfile=cfg.hostfile)
        for attempt in range(RUN_ATTEMPTS):
            try:
                row = run_lab(lab, [alg])["results"][0]
                break
            except RuntimeError as e:  # LabRunError; the next sweep tries again, too
                row = {"algorithm": alg, "error": str(e), "attempts": attempt + 1}
        cache.put(cell_key(p, n, d, alg), row)
    if progress:
        progress(len(todo), len(todo), "done")
    cells = []
    for p, n, d in grid(cfg):
        results = {a: cache.runs[cell_key(p, n, d, a)] for a in cfg.algorithms}
        cells.append({"ranks": p, "floats": n, "bytes_per_rank": bytes_per_rank(n, p), "max_delay_ms": d,
                      "results": results})
    return {"settings": cfg.settings() | {"cache": str(path), "algorithms": list(cfg.algorithms),
                                          "ranks": list(cfg.ranks), "floats": list(cfg.floats),
                                          "delays_ms": list(cfg.delays_ms)},
            "runs_done": len(todo), "wall_s": time.perf_counter() - started,
            "run_wall_s": sum(c["results"][a].get("wall_s", 0.0) for c in cells for a in cfg.algorithms),
            "cells": cells}


def judge_cell(cell: dict) -> dict:
    """Winner, its speedup over the best regular algorithm, and bdr's measured vs predicted."""
    ok = {a: r for a, r in cell["results"].items() if "error" not in r and r.get("data_ok")}
    out: dict = {"failed": sorted(a for a in cell["results"] if a not in ok)}
    if not ok:
        return out
    avg = {a: r["avg_elapsed_s"] for a, r in ok.items()}
    winner = min(avg, key=lambda a: (avg[a], a))
    regular = {a: t for a, t in avg.items() if a not in PAP_AWARE}
    aware = {a: t for a, t in avg.items() if a in PAP_AWARE}
    out["winner"] = winner
    if regular:
        best_regular = min(regular, key=lambda a: (regular[a], a))
        out["best_regular"] = best_regular
        if aware:
            best_aware = min(aware, key=lambda a: (aware[a], a))
            out["best_pap_aware"] = best_aware
            # > 1: the PAP-aware algorithm is faster by that factor (the paper's number).
            out["pap_aware_speedup"] = regular[best_regular] / aware[best_aware]
    if "bdr" in ok and "ring" in ok:
        bdr, ring = ok["bdr"], ok["ring"]
        out["bdr_speedup_measured"] = ring["avg_elapsed_s"] / bdr["avg_elapsed_s"]
        if bdr.get("predicted_avg_elapsed_s") and ring.get("predicted_avg_elapsed_s"):
            out["bdr_speedup_predicted"] = ring["predicted_avg_elapsed_s"] / bdr["predicted_avg_elapsed_s"]
            out["bdr_agreement"] = out["bdr_speedup_measured"] / out["bdr_speedup_predicted"] - 1
    out["fallbacks"] = sorted(a for a, r in ok.items() if r.get("fallback_reason"))
    return out


def bdr_target(cell: dict, judged: dict) -> bool | None:
    """The sweep's targets for one cell (docs/sweep.md); None where neither applies or bdr/ring are missing."""
    d = cell["max_delay_ms"]
    if d == 0 and "bdr_speedup_measured" in judged:
        return judged["bdr_speedup_measured"] >= 1 / (1 + TARGET_FLAT_SLOWDOWN)
    if d >= 5 and "bdr_agreement" in judged:
        return abs(judged["bdr_agreement"]) <= TARGET_AGREEMENT
    return None


def summarize(sweep: dict) -> dict:
    """Adds the judgement to every cell and counts the targets."""
    met = missed = 0
    for cell in sweep["cells"]:
        cell["judged"] = judged = judge_cell(cell)
        cell["bdr_target_met"] = hit = bdr_target(cell, judged)
        met += hit is True
        missed += hit is False
    sweep["bdr_targets"] = {"met": met, "missed": missed}
    return sweep


def _cell_text(judged: dict) -> str:
    if "winner" not in judged:
        return "FAILED"
    w = judged["winner"]
    text = w.upper()
    if w in PAP_AWARE and "pap_aware_speedup" in judged:
        text += f"{judged['pap_aware_speedup']:.2f}"
    if judged["failed"] or judged["fallbacks"]:
        text += "*"
    return text


def _bdr_text(cell: dict) -> str:
    j = cell["judged"]
    if "bdr_speedup_measured" not in j:
        return "-"
    text = f"{j['bdr_speedup_measured']:.2f}"
    if "bdr_speedup_predicted" in j:
        text += f"/{j['bdr_speedup_predicted']:.2f}"
    mark = {True: "", False: " !", None: ""}[cell["bdr_target_met"]]
    return text + mark


def _blocks(sweep: dict) -> list[list[int]]:
    """The paper's split: Table 3 holds the first half of the rank counts, Table 4 the rest."""
    ranks = sweep["settings"]["ranks"]
    half = (len(ranks) + 1) // 2
    return [ranks[:half], ranks[half:]] if len(ranks) > 1 else [ranks]


def _lookup(sweep: dict) -> dict:
    return {(c["ranks"], c["floats"], c["max_delay_ms"]): c for c in sweep["cells"]}


def layout(sweep: dict, text_of) -> list[tuple[str, list[tuple[int, list[list[str]]]]]]:
    """Tables as the paper lays them out: per P a section, rows N, columns maxDelay."""
    s = sweep["settings"]
    cells = _lookup(sweep)
    tables = []
    for t, ranks in enumerate(_blocks(sweep)):
        sections = []
        for p in ranks:
            rows = [[floats_label(n)] + [text_of(cells[(p, n, float(d))]) for d in s["delays_ms"]]
                    for n in s["floats"]]
            sections.append((p, rows))
        tables.append((f"Table {3 + t}" if len(_blocks(sweep)) > 1 else "Table", sections))
    return tables


def header_text(sweep: dict) -> str:
    s = sweep["settings"]
    on = s["topology"] if "platform" not in s else f"{Path(s['platform']).name} (predicted from {s['topology']})"
    return (f"SMPI, network model {s['network_model']}, on {on}, {s['iterations']} iterations per cell "
            f"(the paper: {PAPER_ITERATIONS}; reduced so that the full grid finishes within 2 hours "
            f"on a 2-core machine), seed {s['seed']}, no flat iterations. N = floats gathered in total "
            f"(K = 1024); each rank contributes floor(4 N / P) bytes. Algorithms: {', '.join(s['algorithms'])}; "
            f"PAP-aware: {', '.join(a for a in s['algorithms'] if a in PAP_AWARE) or 'none'}.")


def _views(sweep: dict) -> list[tuple[str, object, str]]:
    """(name, cell text, explanation) of each table kind; bdr's only when bdr and ring ran."""
    views = [("fastest algorithm", lambda c: _cell_text(c["judged"]),
              "per cell the fastest algorithm; a PAP-aware winner shows its speedup over the best "
              "regular algorithm, as in the paper; * = a run failed, fell back to MPI_Allgather or "
              "returned wrong data")]
    if {"bdr", "ring"} <= set(sweep["settings"]["algorithms"]):
        views.append(("bdr vs ring", _bdr_text,
                      "bdr's speedup over ring, measured/predicted by the cost model; ! = target missed "
                      f"(maxDelay 0: bdr at most {TARGET_FLAT_SLOWDOWN:.0%} slower than ring; maxDelay >= 5 ms: "
                      f"measured within {TARGET_AGREEMENT:.0%} of predicted)"))
    return views


def print_tables(sweep: dict, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console(width=max(120, Console().width))
    delays = [f"{d:g}" for d in sweep["settings"]["delays_ms"]]
    console.print(header_text(sweep))
    for name, text_of, what in _views(sweep):
        console.print(f"\n[bold]{name}[/bold]: {what}")
        for title, sections in layout(sweep, text_of):
            t = Table(title=f"{title}: {name}", title_justify="left")
            t.add_column("N \\ maxDelay ms")
            for d in delays:
                t.add_column(d, justify="right")
            for p, rows in sections:
                t.add_section()
                t.add_row(f"[bold]P = {p}[/bold]", *[""] * len(delays))
                for row in rows:
                    t.add_row(*row)
            console.print(t)
    for line in notes(sweep):
        console.print(line)


def notes(sweep: dict) -> list[str]:
    """The target count, the paper's best cell, failures, and the time it took."""
    s = sweep["settings"]
    out = []
    bt = sweep["bdr_targets"]
    if bt["met"] + bt["missed"]:
        out.append(f"bdr targets: met in {bt['met']} of {bt['met'] + bt['missed']} cells "
                   f"(maxDelay 0: at most {TARGET_FLAT_SLOWDOWN:.0%} slower than ring; maxDelay >= 5 ms: "
                   f"measured speedup over ring within {TARGET_AGREEMENT:.0%} of predicted).")
    cell = _lookup(sweep).get(PAPER_BEST_CELL)
    if cell is not None:
        j = cell["judged"]
        times = ", ".join(f"{a} {r['avg_elapsed_s'] * 1e3:.2f} ms" for a, r in cell["results"].items()
                          if "avg_elapsed_s" in r)
        out.append(f"Paper's best cell (P = 28, N = 256K, maxDelay 5 ms; paper: BDR 1.90x the best regular): "
                   f"fastest {j.get('winner', '-')}"
                   + (f", PAP-aware {j['best_pap_aware']} {j['pap_aware_speedup']:.2f}x {j['best_regular']}"
                      if "pap_aware_speedup" in j else "") + f"; {times}.")
    bad = [(c, a) for c in sweep["cells"] for a, r in c["results"].items()
           if "error" in r or not r.get("data_ok", False)]
    for c, a in bad[:10]:
        r = c["results"][a]
        out.append(f"FAILED P={c['ranks']} N={floats_label(c['floats'])} maxDelay={c['max_delay_ms']:g}ms {a}: "
                   + (r.get("error") or "wrong data"))
    if len(bad) > 10:
        out.append(f"... and {len(bad) - 10} more failed runs (see the JSON)")
    out.append(f"{sweep['runs_done']} runs this time in {_duration(sweep['wall_s'])}; the grid's runs took "
               f"{_duration(sweep['run_wall_s'])} of wall time in all (SimGrid itself). Cache: {s['cache']}.")
    return out


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def markdown(sweep: dict, plot_rel: str | None = None) -> str:
    """Tables 3/4 and the bdr comparison as a Markdown section for docs/benchmarks.md."""
    import datetime

    s = sweep["settings"]
    lines = [f"## Lab: the BDR paper's sweep (Tables 3 and 4), network model {s['network_model']}", "",
             f"Measured {datetime.date.today().isoformat()} by `collsched sweep`: " + header_text(sweep), ""]
    delays = [f"{d:g}" for d in s["delays_ms"]]
    for name, text_of, what in _views(sweep):
        for title, sections in layout(sweep, text_of):
            lines += [f"**{title}: {name}** ({what}).", "",
                      "| N \\ maxDelay ms | " + " | ".join(delays) + " |",
                      "|:--|" + "--:|" * len(delays)]
            for p, rows in sections:
                lines.append(f"| **P = {p}** |" + " |" * len(delays))
                lines += ["| " + " | ".join(row) + " |" for row in rows]
            lines.append("")
    lines += [f"- {n}" for n in notes(sweep)]
    if plot_rel:
        lines += ["", f"![sweep heat map]({plot_rel})"]
    return "\n".join(lines) + "\n"


def plot_heatmap(sweep: dict, path) -> None:
    """The heat map (heatmap_figure) written to `path`."""
    from .charts import save

    save(heatmap_figure(sweep), path)


def heatmap_figure(sweep: dict):
    """One panel per P: rows N, columns maxDelay; colour = best PAP-aware vs best regular;
    a Figure."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm

    from .charts import backend_text, topology_name

    s = sweep["settings"]
    cells = _lookup(sweep)
    ranks, floats, delays = s["ranks"], s["floats"], s["delays_ms"]
    ncol = min(4, len(ranks))
    nrow = -(-len(ranks) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(3.4 * ncol + 1.5, 2.4 * nrow + 1.6), squeeze=False,
                             layout="constrained")
    norm = TwoSlopeNorm(vcenter=0.0, vmin=-1.0, vmax=1.0)  # log2 of the speedup: 0.5x .. 2x
    image = None
    for n_panel, (ax, p) in enumerate(zip(axes.ravel(), ranks)):
        values = np.full((len(floats), len(delays)), np.nan)
        for i, n in enumerate(floats):
            for k, d in enumerate(delays):
                j = cells[(p, n, float(d))]["judged"]
                if "pap_aware_speedup" in j:
                    values[i, k] = np.log2(j["pap_aware_speedup"])
                label = j.get("winner", "FAILED")
                if label in PAP_AWARE and "pap_aware_speedup" in j:
                    label += f"\n{j['pap_aware_speedup']:.2f}x"
                ax.text(k, i, label, ha="center", va="center", fontsize=6.5)
        ax.set_facecolor("0.85")  # cells without a PAP-aware result
        image = ax.imshow(np.clip(values, -1, 1), cmap="RdBu", norm=norm, aspect="auto")
        ax.set_title(f"P = {p}", fontsize=9)
        ax.set_xticks(range(len(delays)), [f"{d:g}" for d in delays], fontsize=7)
        ax.set_yticks(range(len(floats)), [floats_label(n) for n in floats], fontsize=7)
        if n_panel // ncol == nrow - 1 or n_panel + ncol >= len(ranks):
            ax.set_xlabel("maxDelay (ms)", fontsize=7)
        if n_panel % ncol == 0:
            ax.set_ylabel("N floats in total", fontsize=7)
    for ax in axes.ravel()[len(ranks):]:
        ax.axis("off")
    cbar = fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8)
    cbar.set_ticks([-1, -0.5, 0, 0.5, 1], labels=["0.5x", "0.71x", "1x", "1.41x", "2x"])
    cbar.set_label("best PAP-aware vs best regular algorithm\n(blue: PAP-aware faster; red: slower)", fontsize=8)
    fig.suptitle(f"BDR paper sweep: allgather on {topology_name(s['topology'])}, "
                 f"{backend_text('smpi', s['network_model'])}, {s['iterations']} iterations per cell\n"
                 "text: the fastest algorithm of the cell (a PAP-aware one with its speedup over the best "
                 "regular one); grey: no PAP-aware algorithm ran", fontsize=9.5)
    fig.get_layout_engine().set(h_pad=0.12)
    return fig
