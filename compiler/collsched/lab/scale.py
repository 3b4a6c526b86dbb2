"""Scale check of the lab: P = 256 ranks with 1 MiB per rank under SMPI on this machine.

Records wall time, the machine's memory in use (sampled from /proc/meminfo while the
simulation runs: getrusage counts SMPI's shared pages once per mapping and overstates it)
and the data verdict (partial shared malloc: the first page of every piece is checked).
"""
from __future__ import annotations

import datetime
import threading
import time

from .runner import LabConfig, run_lab
from .launch import used_mib


def run_scale(ranks: int = 256, nbytes: int = 1 << 20, algorithms=("ring", "native"),
              network_model: str = "CM02") -> dict:
    base = used_mib()
    peak = [base]
    done = threading.Event()

    def sample():
        while not done.wait(0.2):
            peak[0] = max(peak[0], used_mib())
    t = threading.Thread(target=sample, daemon=True)
    t.start()
    start = time.perf_counter()
    try:
        report = run_lab(LabConfig("smpi", None, ranks, nbytes, iterations=1, flat_iterations=0,
                                   shared_data="yes", network_model=network_model), list(algorithms))
    finally:
        done.set()
        t.join()
    return {"ranks": ranks, "bytes": nbytes, "network_model": network_model, "wall_s": time.perf_counter() - start,
            "memory_mib": peak[0] - base, "results": report["results"]}


def markdown(scale: dict) -> str:
    date = datetime.date.today().isoformat()
    lines = ["## Lab: scale", "",
             f"Measured {date} by `collsched bench --suite scale`: SimGrid SMPI "
             f"(network model {scale.get('network_model', 'CM02')}), homogeneous "
             f"1 Gbit/s 50 us cluster, P = {scale['ranks']}, {scale['bytes'] >> 20} MiB per rank, one "
             "iteration after a warm-up call, receive buffers in SMPI's partial shared malloc (the first "
             "4 KiB of every piece private and checked on every rank). Target: under 10 minutes.", "",
             f"Whole run (compile, platform, all algorithms): **{scale['wall_s']:.1f} s** wall, "
             f"**{scale['memory_mib']:.0f} MiB** more memory in use at the peak (sampled).", "",
             "| algorithm | simulated avg elapsed s | wall s | data |", "|:--|--:|--:|:--|"]
    for r in scale["results"]:
        lines.append(f"| {r['algorithm']} | {r['avg_elapsed_s']:.3f} | {r['wall_s']:.1f} | "
                     f"{'ok' if r['data_ok'] else 'WRONG'} |")
    return "\n".join(lines) + "\n"
