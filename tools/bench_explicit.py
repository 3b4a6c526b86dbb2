"""The explicit compile path at scale (issue 24 part 3): wall time and peak memory of
`collsched compile` for ring at P = 1024, 2048, 4096 and bdr (arrival-aware) at 4096,
each in a fresh process, written to docs/benchmarks.md between the explicit-scale markers.

    .venv/bin/python tools/bench_explicit.py                  # measure, print, write the doc
    .venv/bin/python tools/bench_explicit.py --baseline DIR   # also time an older checkout
    .venv/bin/python tools/bench_explicit.py --cases ring:1024 --no-doc

Each case runs `python -m collsched compile ... --json` as a child process: the wall time
is the parent's clock around it, the peak resident memory the child's ru_maxrss (wait4),
the stage times those `compile --json` reports. --baseline DIR runs the same command with
DIR/compiler first on PYTHONPATH (e.g. a `git worktree` of the commit before this work),
under the same load, so that before and after are measured alike. The machine is shared:
the load average at each start is recorded beside the figures.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "compiler"))

TARGET_S, TARGET_BYTES = 10.0, 2 << 30  # ring at P = 4096 (issue 24)
NBYTES = "64KiB"
CASES = ["ring:1024", "ring:2048", "ring:4096", "bdr:4096"]
SECTION = "explicit-scale"
# bdr's arrival pattern: patterns.scenario.recurring, one class: an eighth of the ranks late
# by up to SPREAD_S (the recurring-load scenario), seed 0.
SPREAD_S = 5e-3


def _pattern(nranks: int, tmp: Path) -> Path:
    from collsched.inputs.arrivals import write_pap
    from collsched.patterns.scenario import recurring

    path = tmp / f"pap-{nranks}.yaml"
    write_pap(path, recurring(nranks, 1, 1, SPREAD_S, seed=0).patterns,
              comment=f"recurring({nranks}, 1 class, spread {SPREAD_S} s, seed 0)")
    return path


def measure(case: str, tmp: Path, code: Path | None = None) -> dict:
    """One compile in a fresh process; code: another checkout's root (its compiler/ first
    on PYTHONPATH)."""
    alg, ranks = case.split(":")
    out = tmp / f"{alg}-{ranks}.sched"
    cmd = [sys.executable, "-m", "collsched", "compile", "--algorithm", alg, "--ranks", ranks,
           "--bytes", NBYTES, "-o", str(out), "--json"]
    if alg != "ring":
        cmd += ["--pap", str(_pattern(int(ranks), tmp))]
    env = dict(os.environ, PYTHONPATH=str((code or ROOT) / "compiler"))
    load = os.getloadavg()[0]
    with open(tmp / "out", "w+b") as so, open(tmp / "err", "w+b") as se:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=so, stderr=se, env=env, cwd=tmp)
        _, status, usage = os.wait4(proc.pid, 0)  # the child's own peak (ru_maxrss, KiB)
        wall = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        so.seek(0), se.seek(0)
        stdout, stderr = so.read(), se.read()
    peak = usage.ru_maxrss * 1024
    cpu = usage.ru_utime + usage.ru_stime  # the child's CPU time: less sensitive to the load
    out.unlink(missing_ok=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{case}: compile failed: {stderr.decode().strip().splitlines()[-1:]}")
    summary = json.loads(stdout.decode().strip().splitlines()[-1])
    return {"case": case, "algorithm": alg, "ranks": int(ranks), "ops": summary["total_ops"],
            "file_bytes": summary["file_bytes"], "timings_s": summary["timings_s"], "wall_s": wall,
            "cpu_s": cpu,
            "peak_rss_bytes": peak, "load": load, "code": "baseline" if code else "this",
            "kernels": summary["kernels"], "predicted_avg_elapsed_s": summary["predicted_avg_elapsed_s"]}


def markdown(rows: list[dict], started: str, baseline: str | None) -> str:
    head = (f"## Compiler: the explicit path at scale (issue 24 part 3)\n\n"
            f"Measured {started} by `tools/bench_explicit.py` (Python {platform.python_version()}, "
            f"{platform.machine()}, {os.cpu_count()} cores shared with other jobs: the load average "
            f"at each start is in the table; C kernels: {rows[0]['kernels'] if rows else '-'}). "
            f"`collsched compile --bytes {NBYTES} --json` in a fresh process per row, homogeneous "
            f"default topology; ring with flat arrivals, bdr with `patterns.scenario.recurring` "
            f"(one class: an eighth of the ranks late by up to {SPREAD_S * 1e3:g} ms, seed 0). "
            f"*wall* is the whole command (interpreter start-up included), *cpu* its user + "
            f"system CPU time (what the load inflates least), *peak* its peak resident memory; the stage times are those `compile --json` reports, *simulate* the DAG cost "
            f"model whose prediction it prints. Target (issue 24): ring at P = 4096 within "
            f"{TARGET_S:g} s and {TARGET_BYTES >> 30} GiB.\n")
    if baseline:
        head += f"\n*before* rows: the same command on the code of {baseline}, measured alike in turn.\n"
    if any(r["code"] == "class route" for r in rows):
        head += ("\n*class route* rows: measured with commit b74e75b, which timed symmetric schedules "
                 "over their symmetry classes (compact/model_sym.py, the same metrics to the last "
                 "bit); reverted for the import cycle it closes (below).\n")
    lines = [head, "| code | algorithm | P | ops | file MB | generate s | verify s | simulate s | write s "
                   "| wall s | cpu s | peak MiB | load | target |",
             "|:--|:--|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|:--|"]
    for r in rows:
        t = r["timings_s"]
        target = ""
        if r["algorithm"] == "ring" and r["ranks"] == 4096:
            ok_t, ok_m = r["wall_s"] <= TARGET_S, r["peak_rss_bytes"] <= TARGET_BYTES  # wall, as the issue measured
            target = "met" if ok_t and ok_m else "missed: " + ", ".join(
                w for w, ok in (("time", ok_t), ("memory", ok_m)) if not ok)
        label = {"baseline": "before", "this": "now"}.get(r["code"], r["code"])
        lines.append(f"| {label} | {r['algorithm']} | {r['ranks']} "
                     f"| {r['ops']} | {r['file_bytes'] / 1e6:.1f} | {t.get('generate', 0):.2f} "
                     f"| {t.get('verify', 0):.2f} | {t.get('simulate', 0):.2f} | {t.get('write', 0):.2f} "
                     f"| {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['peak_rss_bytes'] / 2 ** 20:.0f} | {r['load']:.1f} | {target} |")
    return "\n".join(lines) + "\n" + _floor_text(rows) + _how()


def _how() -> str:
    from collsched import pipeline, schedfile

    return ("\nHow the explicit path runs now (`git log` has the before and after of each step):\n\n"
            "- `ir.from_transfers` packs each op's sort key (rank, background first, step, sub-step, "
            "receive before send) with the op's own number into one int64 and sorts the values in "
            "place (`ir._op_order`): a SIMD sort, no argsort, no index array beside it; integer "
            "columns keep their width (ring's are int32), all-zero columns are not gathered.\n"
            "- The verifier sorts each link's sends and receives the same way, takes the FIFO "
            "chains from the matching instead of sorting again, keeps the maps between matched ops "
            "in int32, and names an op's place in its list only when it reports it. Its passes and "
            "verdicts are unchanged.\n"
            f"- The file is streamed: sections a group of ranks at a time (at most "
            f"{schedfile.STREAM_OPS} ops of records in memory), the index and header last.\n"
            f"- `compile` times symmetric schedules (`{'`, `'.join(pipeline.CLASS_MODEL_ALGORITHMS)}`) "
            f"of at least {pipeline.CLASS_MODEL_OPS} ops on the default cluster with flat arrivals by "
            "the DAG model over their symmetry classes (`compact/model_sym.py`): the same metrics "
            "to the last bit as the whole graph (tests/compiler/test_explicit_stream.py), where the "
            "whole graph of a P = 4096 ring took tens of seconds and most of the old peak. bdr and "
            "every other case time the whole graph as before.\n"
            "- bdr builds its ring part with array operations (it was a Python loop over P^2).\n"
            "- Every emitted schedule still passes the whole verifier, and the bytes are unchanged "
            "(the golden table, and the compile matrix of test_explicit_stream against a lexsort route).\n")


def floor(nranks: int) -> dict:
    """What a ring compile at nranks must hold at once, in bytes, from the code's own types:
    the IR's columns (per op), the default topology's P x P matrices, the matching (two int64
    per transfer) and the progress walk's int64 inputs (two dependency columns and the
    rank per op, the blocking sends)."""
    import numpy as np

    from collsched.algorithms import Request, generate
    from collsched.pipeline import resolve_topology

    small = generate("ring", Request(nranks=4))
    per_op = sum(getattr(small, c).itemsize for c in ("kind", "peer", "origin", "segment", "phase", "fifo"))
    ops = 2 * nranks * (nranks - 1)
    topo = resolve_topology(nranks, None, None)
    matrices = sum(v.nbytes for v in vars(topo).values() if isinstance(v, np.ndarray) and v.ndim == 2)
    return {"ir": per_op * ops, "per_op": per_op, "topology": matrices, "matching": 8 * ops,
            "progress": 8 * (3 * ops + ops // 2)}


def _floor_text(rows: list[dict]) -> str:
    now = [r for r in rows if r["code"] == "this" and r["algorithm"] == "ring" and r["ranks"] == 4096]
    if not now:
        return ""
    r, f = now[0], floor(4096)
    mib = 2 ** 20
    t = r["timings_s"]
    return (f"\nWhat bounds ring at P = 4096 now ({r['ops']} ops; the figures below are computed from the "
            f"code's types, not measured): the IR's columns take {f['ir'] / mib:.0f} MiB ({f['per_op']} bytes "
            f"per op), the default topology's P x P matrices {f['topology'] / mib:.0f} MiB (a homogeneous "
            f"cluster stores every pair's latency and bandwidth), the matching the model is handed "
            f"{f['matching'] / mib:.0f} MiB, and the deadlock walk's C kernel takes int64 columns only: "
            f"{f['progress'] / mib:.0f} MiB of dependencies, ranks and blocking sends at once. Those "
            f"alone are {(f['ir'] + f['topology'] + f['matching'] + f['progress']) / mib:.0f} MiB beside the "
            f"interpreter; the measured peak is {r['peak_rss_bytes'] / mib:.0f} MiB. Of the stage times, "
            f"verify ({t.get('verify', 0):.1f} s) and generate ({t.get('generate', 0):.1f} s, the FIFO "
            f"marking pass included) dominate; simulate ({t.get('simulate', 0):.1f} s) is the class route "
            f"(below). Wall times here are inflated by the load (the *cpu* column is the "
            f"process's own work, interpreter start-up included).\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES), help="ALG:P,... (default: %(default)s)")
    ap.add_argument("--baseline", help="another checkout's root: time the same cases on its code too")
    ap.add_argument("--doc", default=str(ROOT / "docs" / "benchmarks.md"))
    ap.add_argument("--no-doc", action="store_true", help="print only")
    ap.add_argument("--save", help="also write the measurements (JSON) here")
    ap.add_argument("--load", help="render measurements saved by --save instead of measuring")
    a = ap.parse_args(argv)
    if a.load:
        saved = json.loads(Path(a.load).read_text())
        return _publish(saved["rows"], saved["started"], saved["baseline"], a)
    cases = [c for c in a.cases.split(",") if c]
    for c in cases:
        alg, _, p = c.partition(":")
        if not (alg and p.isdigit()):
            print(f"bench_explicit: error: --cases: {c!r}: expected ALG:P", file=sys.stderr)
            return 2
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    code = [None] + ([Path(a.baseline).resolve()] if a.baseline else [])
    if a.baseline:  # name it by its commit where it is a git checkout
        rev = subprocess.run(["git", "-C", a.baseline, "log", "-1", "--format=%h (%cs)"],
                             capture_output=True, text=True, check=False).stdout.strip()
        a.baseline = f"commit {rev}" if rev else a.baseline
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        jobs = [(c, k) for c in cases for k in code]
        for i, (c, k) in enumerate(jobs, 1):
            print(f"[{i}/{len(jobs)}] {c} {'(baseline)' if k else ''} ...", file=sys.stderr, flush=True)
            r = measure(c, Path(tmp), k)
            print(f"    {r['wall_s']:.1f} s ({r['cpu_s']:.1f} s CPU), {r['peak_rss_bytes'] / 2 ** 20:.0f} MiB peak, "
                  f"stages {json.dumps({s: round(v, 2) for s, v in r['timings_s'].items()})}",
                  file=sys.stderr, flush=True)
            rows.append(r)
    if a.save:
        Path(a.save).write_text(json.dumps({"rows": rows, "started": started, "baseline": a.baseline}, indent=1))
    return _publish(rows, started, a.baseline, a)


def _publish(rows, started, baseline, a) -> int:
    text = markdown(rows, started, baseline)
    print(text)
    if not a.no_doc:
        from collsched.lab.benchdoc import replace_section
        replace_section(a.doc, SECTION, text)  # re-reads the page: other sections stay as they are
    return 0


if __name__ == "__main__":
    sys.exit(main())
