"""Compiler benchmark: time and peak memory to compile, verify, simulate and write a schedule.

Each rank count runs in a fresh Python process, so its peak resident memory (ru_maxrss)
is that job's alone, interpreter included. Targets (issue 2): ring at P = 1024 within
2 s and 1 GiB for compile + verify + write.
"""
from __future__ import annotations

import datetime
import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.progress import Progress

from . import __version__

TARGET_S, TARGET_BYTES = 2.0, 1 << 30

_CHILD = r"""
import json, os, resource, sys, time
from collsched.pipeline import compile_schedule
alg, p, b, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
t = time.perf_counter()
res = compile_schedule(alg, p, b, output=out)
wall = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"ranks": p, "ops": res.schedule.total_ops, "file_bytes": res.file_bytes,
                  "timings_s": res.timings_s, "wall_s": wall, "peak_rss_bytes": peak}))
"""


def measure(algorithm: str, nranks: int, nbytes: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.sched"
        proc = subprocess.run([sys.executable, "-c", _CHILD, algorithm, str(nranks), str(nbytes), str(out)],
                              capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark child failed for P={nranks}: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_compiler_bench(ranks: list[int], algorithm: str, nbytes: int, *, doc=None, plot=None,
                       as_json=False) -> int:
    rows = []
    with Progress(transient=True) as prog:
        task = prog.add_task(f"compiling {algorithm}", total=len(ranks))
        for p in ranks:
            rows.append(measure(algorithm, p, nbytes))
            prog.advance(task)
    for r in rows:
        t = r["timings_s"]
        r["cvw_s"] = t["generate"] + t["verify"] + t.get("write", 0.0)
        r["total_s"] = sum(t.values())
    if as_json:
        print(json.dumps({"algorithm": algorithm, "bytes": nbytes, "results": rows}))
    md = _markdown(rows, algorithm, nbytes)
    if plot:
        _plot(rows, algorithm, plot)
        if doc:
            import os
            rel = os.path.relpath(plot, os.path.dirname(os.path.abspath(doc)))
            md += f"\n![compile time by stage]({rel})\n"
    if not as_json:
        print(md)
    if doc:
        from .benchdoc import replace_section

        replace_section(doc, "compiler", md)
    big = [r for r in rows if r["ranks"] == 1024]
    return 0 if all(r["cvw_s"] <= TARGET_S and r["peak_rss_bytes"] <= TARGET_BYTES for r in big) else 1


def _markdown(rows, algorithm, nbytes) -> str:
    date = datetime.date.today().isoformat()
    lines = [
        "## Compiler: compile, verify, simulate, write",
        "",
        f"Measured {date} by `collsched bench --suite compiler` (collsched {__version__}, "
        f"Python {platform.python_version()}, {platform.machine()}, one fresh process per row). "
        f"Algorithm `{algorithm}`, {nbytes} bytes per rank, homogeneous default topology, flat arrivals. "
        "*c+v+w* is generate + verify + write (target at P = 1024: at most 2 s and 1 GiB); "
        "*all* adds reading inputs and the cost-model simulation that `compile --json` reports.",
        "",
        "| P | ops | file MB | generate s | verify s | simulate s | write s | c+v+w s | all s | peak RSS MiB | target |",
        "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|:--|",
    ]
    for r in rows:
        t = r["timings_s"]
        ok = r["cvw_s"] <= TARGET_S and r["peak_rss_bytes"] <= TARGET_BYTES
        lines.append(
            f"| {r['ranks']} | {r['ops']} | {r['file_bytes'] / 1e6:.1f} | {t['generate']:.3f} | "
            f"{t['verify']:.3f} | {t['simulate']:.3f} | {t.get('write', 0):.3f} | {r['cvw_s']:.3f} | "
            f"{r['total_s']:.3f} | {r['peak_rss_bytes'] / 2**20:.0f} | "
            f"{'met' if ok else 'missed'} |")
    return "\n".join(lines) + "\n"


def _plot(rows, algorithm, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    p = [r["ranks"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    bottom = [0.0] * len(rows)
    for stage in ("generate", "verify", "simulate", "write"):
        vals = [r["timings_s"].get(stage, 0.0) for r in rows]
        ax.bar([str(x) for x in p], vals, bottom=bottom, label=stage)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.axhline(TARGET_S, color="red", linestyle="--", label="target (c+v+w)")
    ax.set_xlabel("ranks P")
    ax.set_ylabel("seconds")
    ax.set_title(f"collsched compile time, {algorithm}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
