"""Arrival-trace overhead: what COLLSCHED_ARRIVALS costs an allgather call.

Real MPI (P = 4 and 8, 64 KiB, 256 KiB, 1 MiB per rank): runtime/bench/trace_overhead.c
under the preload library with COLLSCHED_ARRIVALS alternates, call by call with the order
flipped every iteration, MPI_Allgather (recorded) and PMPI_Allgather (which nothing
intercepts), a barrier before each; a call's time is the slowest rank's, the figure the
median over iterations of traced / plain. The same launch without COLLSCHED_ARRIVALS (the
preload wrapper passes straight through) is the noise floor. Then the recording's own
cost per call, with no communication to hide it: one process, MPI_Allgather of one int on
MPI_COMM_SELF, traced and not, in alternating blocks.

SimGrid SMPI (P = 4 and 8, same sizes, simulate-computation off so that only
communication takes simulated time): the program built with collsched_allgather, run with
and without COLLSCHED_ARRIVALS: the simulated call times must be identical (the trace adds
no message and no synchronisation inside the call).

Writes the section `arrival-trace-overhead` of docs/benchmarks.md (collsched.lab.benchdoc).

    .venv/bin/python runtime/bench/bench_trace.py [--doc docs/benchmarks.md] [--quick]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "compiler"))

from collsched.patterns.tracefile import read_trace  # noqa: E402

SRC = ROOT / "runtime" / "bench" / "trace_overhead.c"
BUILD = ROOT / "build"
RANKS = [4, 8]
# (bytes per rank, iterations): the larger calls are slower and steadier
SIZES = [(64 << 10, 300), (256 << 10, 200), (1 << 20, 60)]
SELF_CALLS = 200000
TARGET = 1.02
PLATFORM = """<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">
<platform version="4.1">
  <zone id="bench" routing="Full">
    <cluster id="c" prefix="node-" suffix="" radical="0-7" speed="1Gf" bw="125MBps" lat="50us"/>
  </zone>
</platform>
"""


def mpirun(nranks: int) -> list[str]:
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(nranks)]
    if os.geteuid() == 0:
        cmd.insert(1, "--allow-run-as-root")
    return cmd


def launch(cmd: list[str], env: dict) -> list[dict]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    if proc.returncode != 0 or "CRITICAL" in proc.stderr:  # (SimGrid's deadlock report)
        sys.exit(f"bench-trace: {' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
    return [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]


def environment(trace: Path | None, preload: bool) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("COLLSCHED_ARRIVALS", "COLLSCHED_SCHEDULES", "LD_PRELOAD")}
    if preload:
        env["LD_PRELOAD"] = str(BUILD / "lib" / "libcollsched-preload.so")
    if trace is not None:
        env["COLLSCHED_ARRIVALS"] = str(trace)
    return env


def traced_calls(trace: Path) -> int:
    """The calls the trace holds (it must hold every traced call: tracing was on)."""
    return read_trace(trace).ncalls


def real_mpi(tmp: Path, quick: bool) -> tuple[list[dict], dict]:
    exe = tmp / "trace_overhead"
    subprocess.run(["mpicc", "-O2", "-Wall", "-o", str(exe), str(SRC)], check=True, timeout=120)
    rows = []
    for p in RANKS:
        for nbytes, iters in SIZES:
            iters = max(20, iters // 5) if quick else iters
            args = [str(exe), str(iters), str(nbytes)]
            trace = tmp / f"p{p}-{nbytes}.trace"
            traced = launch(mpirun(p) + args, environment(trace, True))[0]
            floor = launch(mpirun(p) + args, environment(None, True))[0]
            traced["floor_ratio"] = floor["median_ratio"]
            traced["trace_calls"] = traced_calls(trace)
            traced["expected_calls"] = iters + 5
            rows.append(traced)
    calls = SELF_CALLS // 10 if quick else SELF_CALLS
    args = [str(exe), "1", "64", str(calls)]
    self_traced = launch(mpirun(1) + args, environment(tmp / "self.trace", True))[-1]
    self_plain = launch(mpirun(1) + args, environment(None, True))[-1]
    return rows, {"calls": calls, "traced_s": self_traced["traced_per_call_s"],
                  "mpi_s": self_traced["plain_per_call_s"],
                  "untraced_wrapper_s": self_plain["traced_per_call_s"]}


def smpi(tmp: Path, quick: bool) -> list[dict]:
    lib = BUILD / "smpi" / "lib" / "libcollsched.a"
    if not shutil.which("smpicc") or not lib.exists():
        return []
    exe = tmp / "trace_overhead_smpi"
    subprocess.run(["smpicc", "-O2", "-DUSE_API", f"-I{ROOT / 'runtime' / 'include'}", str(SRC),
                    str(lib), "-o", str(exe)], check=True, capture_output=True, timeout=300)
    plat = tmp / "platform-8.xml"
    plat.write_text(PLATFORM)
    hosts = tmp / "hostfile-8.txt"
    hosts.write_text("".join(f"node-{i}\n" for i in range(8)))
    rows = []
    for p in RANKS:
        iters = 5 if quick else 20
        sizes = ",".join(str(b) for b, _ in SIZES)
        cmd = ["smpirun", "-np", str(p), "-platform", str(plat), "-hostfile", str(hosts),
               "--cfg=smpi/display-timing:no", "--cfg=smpi/simulate-computation:no",
               "--log=root.thr:warning", str(exe), str(iters), sizes]
        trace = tmp / f"smpi-p{p}.trace"
        on = launch(cmd, environment(trace, False))
        off = launch(cmd, environment(None, False))
        ncalls = traced_calls(trace)
        for a, b in zip(on, off):
            rows.append({"ranks": p, "bytes": a["bytes"], "iterations": iters,
                         "traced_s": a["traced_mean_s"], "untraced_s": b["traced_mean_s"],
                         "mpi_s": a["plain_mean_s"], "data_ok": a["data_ok"] and b["data_ok"],
                         "trace_calls": ncalls, "expected_calls": len(SIZES) * (iters + 5)})
    return rows


def fmt_size(b: int) -> str:
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"


def markdown(rows: list[dict], self_cost: dict, srows: list[dict], quick: bool) -> str:
    ompi = subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout
    ompi = ompi.splitlines()[0] if ompi else "unknown MPI"
    lines = [
        "## Runtime: arrival-trace overhead (`make bench-trace`)",
        "",
        f"- date: {datetime.date.today().isoformat()}; backend: real MPI, {ompi}, "
        f"{os.cpu_count()} cores ({platform.machine()}), ranks oversubscribed, shared memory; "
        "and SimGrid SMPI" + (" (quick run: fewer iterations)" if quick else ""),
        "- inputs: `runtime/bench/trace_overhead.c` under the preload library with "
        "`COLLSCHED_ARRIVALS`: `MPI_Allgather` (recorded) and `PMPI_Allgather` (not) on "
        "`MPI_COMM_WORLD`, alternating call by call, order flipped every iteration, a barrier "
        "before each call (outside the timing); a call's time is the slowest rank's; every "
        "result checked byte for byte; the trace file read back (it holds every traced call)",
        "- figures: the median over iterations of traced / plain, beside its noise floor (the "
        "same launch without `COLLSCHED_ARRIVALS`: the wrapper passes straight to the MPI "
        "library, so its ratio would be 1 without noise); and the recording's cost per call "
        "(measured below, where no communication hides it) as a share of the fastest plain "
        "call (the least disturbed by the machine's load: other jobs share its cores), which "
        f"the target bounds: <= {(TARGET - 1) * 100:.0f}% from 64 KiB. "
        "On this shared, oversubscribed machine the paired ratios scatter by more than the "
        "cost they would show; the SMPI runs below show that the trace adds no "
        "communication",
        "",
        "| P | bytes per rank | iterations | traced median (us) | plain median (us) "
        "| median ratio | noise floor ratio | fastest plain (us) | recording cost / call "
        "| target | calls in trace | data ok |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    cost = self_cost["traced_s"] - self_cost["mpi_s"]
    for r in rows:
        share = cost / r["plain_min_s"]
        verdict = "met" if share <= TARGET - 1 else "MISSED"
        lines.append(
            f"| {r['ranks']} | {fmt_size(r['bytes'])} | {r['iterations']} "
            f"| {r['traced_median_s'] * 1e6:.1f} | {r['plain_median_s'] * 1e6:.1f} "
            f"| {r['median_ratio']:.3f} | {r['floor_ratio']:.3f} | {r['plain_min_s'] * 1e6:.1f} "
            f"| {share * 100:.3f}% "
            f"| <= {(TARGET - 1) * 100:.0f}% ({verdict}) "
            f"| {r['trace_calls']} of {r['expected_calls']} | {'yes' if r['data_ok'] else 'NO'} |")
    lines += [
        "",
        f"The recording's own cost (one process, `MPI_Allgather` of one int on "
        f"`MPI_COMM_SELF`, {self_cost['calls']} calls each, in alternating blocks): "
        f"{self_cost['traced_s'] * 1e9:.0f} ns per traced call, against "
        f"{self_cost['mpi_s'] * 1e9:.0f} ns for `PMPI_Allgather` and "
        f"{self_cost['untraced_wrapper_s'] * 1e9:.0f} ns through the preload wrapper with "
        f"tracing off (a separate launch): {cost * 1e9:.0f} ns per call, the two `PMPI_Wtime` "
        "calls included.",
    ]
    if srows:
        same = all(r["traced_s"] == r["untraced_s"] for r in srows)
        lines += [
            "",
            "SimGrid SMPI (platform: one 1 Gbit/s switch, 50 us links; "
            "`smpi/simulate-computation:no`: only communication takes simulated time; "
            "`collsched_allgather`, the API path, traced and untraced in two runs): "
            + ("the simulated call times are identical, the trace adds no message and no "
               "synchronisation inside the call. (`PMPI_Allgather`, in the same runs, is "
               "faster by the two `PMPI_Wtime` calls every `collsched_allgather` makes, "
               "which SMPI charges 10 ns each: the 0.020 us between the columns.)" if same else
               "**the simulated call times differ** (see the table)."),
            "",
            "| P | bytes per rank | iterations | traced mean (us) | untraced mean (us) "
            "| MPI_Allgather mean (us) | calls in trace | data ok |",
            "|---:|---:|---:|---:|---:|---:|---:|:---:|",
        ]
        for r in srows:
            lines.append(
                f"| {r['ranks']} | {fmt_size(r['bytes'])} | {r['iterations']} "
                f"| {r['traced_s'] * 1e6:.3f} | {r['untraced_s'] * 1e6:.3f} | {r['mpi_s'] * 1e6:.3f} "
                f"| {r['trace_calls']} of {r['expected_calls']} | {'yes' if r['data_ok'] else 'NO'} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--doc", default=str(ROOT / "docs" / "benchmarks.md"))
    ap.add_argument("--quick", action="store_true", help="fewer iterations (smoke test)")
    args = ap.parse_args()
    if not (BUILD / "lib" / "libcollsched-preload.so").exists():
        sys.exit("bench-trace: build/lib/libcollsched-preload.so not built (make runtime)")
    with tempfile.TemporaryDirectory() as tmp:
        rows, self_cost = real_mpi(Path(tmp), args.quick)
        srows = smpi(Path(tmp), args.quick)
        md = markdown(rows, self_cost, srows, args.quick)
        out = Path(tmp) / "arrival-trace-overhead.md"
        out.write_text(md)
        subprocess.run([sys.executable, "-m", "collsched.lab.benchdoc", args.doc,
                        "arrival-trace-overhead", str(out)], check=True, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT / "compiler")))
    print(md)
    ok = all(r["data_ok"] and r["trace_calls"] == r["expected_calls"] for r in rows + srows)
    if not ok:
        sys.exit("bench-trace: data check failed or calls missing from a trace")


if __name__ == "__main__":
    main()
