"""Model fidelity on wide-area networks of `links:`: the fluid and DAG models' predictions
against SimGrid SMPI (CM02) for a few algorithms on the topologies of
tests/compiler/netcases.py (several sites behind one link, a route through two links, a
SHARED link carrying both directions, window-capped links), built in code.

    python tools/netfidelity.py [--cases a,b] [--algorithms min3,ring] [--bytes 262144,4194304]
                                [--out results.jsonl]

Each run: the schedule compiled for the topology (the compiler reads it in memory), the
platform from lab/platform.py, the lab's minibench under smpirun (lab/runner.py's launch),
and both models timing the measured arrivals, as the lab's model check does. One JSON line
per run; a table at the end (ratio = model / SMPI, average elapsed time).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "compiler"))

from collsched import pipeline  # noqa: E402
from collsched.inputs.arrivals import write_pap  # noqa: E402
from collsched.lab import runner  # noqa: E402
from collsched.lab.netmodel import network_setup  # noqa: E402
from collsched.lab.platform import build_platform  # noqa: E402
from collsched.model.fluid import fluid_pattern  # noqa: E402
from collsched.model.lowerbound import pattern_lower_bound  # noqa: E402
from collsched.model.simulate import simulate_pattern  # noqa: E402

import netcases  # noqa: E402

WINDOW = 4 * 1024 * 1024


def run_case(case: str, alg: str, nbytes: int, tmp: Path, iterations: int) -> dict:
    if case.endswith(".yaml"):  # a topology file (the bundled multi-site ones)
        from collsched.inputs.topology import load_topology
        topo = load_topology(case)
    else:
        topo = netcases.CASES[case](tcp_window=WINDOW)
    window = int(topo.tcp_window or WINDOW)
    net = network_setup("CM02", topo)
    topo = net.topology
    p = topo.nranks
    plat = build_platform(topo).write(tmp)
    env = runner._RunEnv(tmp, plat, net.simgrid_cfg, "<in memory>")
    cfg = runner.LabConfig("smpi", "<in memory>", p, nbytes, iterations=iterations,
                           flat_iterations=0, tcp_gamma=window)
    pap = tmp / "pattern.yaml"
    write_pap(pap, np.zeros((1, p)), unit="s", comment="flat")
    real = pipeline.resolve_topology
    pipeline.resolve_topology = lambda n, path, duplex: topo
    try:
        res = pipeline.compile_schedule(alg, p, nbytes, topology="<in memory>", pap=str(pap),
                                        output=tmp / f"{alg}.sched", segments="auto")
    finally:
        pipeline.resolve_topology = real
    t0 = time.time()
    run = runner._launch(cfg, alg, tmp / f"{alg}.sched", env)
    wall = time.time() - t0
    a = np.array(run["arrivals"])[:iterations]
    f = np.array(run["exits"])[:iterations]
    measured = float(np.mean(f - a))
    run_time = float(np.mean(f.max(1) - a.min(1)))
    bound = pattern_lower_bound(topo, nbytes, a).run_time_s
    dag = simulate_pattern(res.schedule, topo, nbytes, a)[2].avg_elapsed_s
    fl = fluid_pattern(res.schedule, topo, nbytes, a, simgrid_eager=True)[2].avg_elapsed_s
    return {"case": case, "algorithm": alg, "nbytes": nbytes, "ranks": p,
            "segments": int(res.schedule.nseg) if hasattr(res.schedule, "nseg") else None,
            "smpi_avg_elapsed_s": measured, "dag_s": dag, "fluid_s": fl,
            "dag_ratio": dag / measured, "fluid_ratio": fl / measured,
            "smpi_run_time_s": run_time, "lower_bound_run_time_s": bound,
            "bound_below_run": bound <= run_time,
            "data_ok": bool(run["data_ok"]), "wall_s": wall}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(netcases.CASES),
                    help="netcases.py names, or topology files (.yaml)")
    ap.add_argument("--algorithms", default="min3,ring,bruck,spreading")
    ap.add_argument("--bytes", default="262144,4194304")
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    rows = []
    for case in args.cases.split(","):
        for nb in (int(x) for x in args.bytes.split(",")):
            for alg in args.algorithms.split(","):
                with tempfile.TemporaryDirectory(prefix="netfid-") as d:
                    try:
                        row = run_case(case, alg, nb, Path(d).resolve(), args.iterations)
                    except Exception as exc:  # a run that fails is reported, not fatal
                        row = {"case": case, "algorithm": alg, "nbytes": nb, "error": str(exc)[:300]}
                row["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
                rows.append(row)
                print(json.dumps(row), flush=True)
                if args.out:
                    with open(args.out, "a") as fh:
                        fh.write(json.dumps(row) + "\n")
    print(f"{'case':28} {'alg':10} {'bytes':>8} {'smpi s':>9} {'fluid':>6} {'dag':>6} {'bound/run':>9}")
    for r in rows:
        if "error" in r:
            print(f"{r['case']:28} {r['algorithm']:10} {r['nbytes']:>8} error: {r['error'][:60]}")
        else:
            print(f"{r['case']:28} {r['algorithm']:10} {r['nbytes']:>8} {r['smpi_avg_elapsed_s']:9.4f} "
                  f"{r['fluid_ratio']:6.3f} {r['dag_ratio']:6.3f} "
                  f"{r['lower_bound_run_time_s'] / r['smpi_run_time_s']:9.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
