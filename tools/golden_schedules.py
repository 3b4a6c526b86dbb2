"""The golden table: SHA-256 of the schedule file and the predicted times of every
algorithm on every bundled topology (with and without an arrival pattern).

A structural change (a refactor, a hardening fix) must leave every compiled schedule
byte for byte, and every prediction figure for figure, the same:
tests/compiler/test_golden_schedules.py compares against tests/data/golden-schedules.json.
Regenerate the table only when a change is *meant* to alter schedules, and say so in
the commit:  .venv/bin/python tools/golden_schedules.py > tests/data/golden-schedules.json
"""
from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOPOLOGIES = ROOT / "topologies"

# (topology, ranks, bytes per rank): every bundled topology, odd and even rank counts.
CASES = [
    ("tryton-48.yaml", 28, 37448),
    ("tryton-48.yaml", 13, 65536),
    ("three-site-grid.yaml", 20, 262144),
    ("wan-3x16.yaml", 48, 1 << 20),
    ("grid-8x128.yaml", 64, 65536),
]
MAX_DELAY_S = 0.005  # the arrival-pattern cases: the lab's seed-1 pattern, maxDelay 5 ms


def cases():
    from collsched.algorithms import REGISTRY
    for topo, ranks, nbytes in CASES:
        for alg in sorted(REGISTRY):
            if alg == "rd" and ranks & (ranks - 1):
                continue
            if alg == "nex" and ranks % 2:
                continue
            for pap in (False, True):
                yield topo, ranks, nbytes, alg, pap


def table() -> dict:
    from collsched import pipeline
    from collsched.errors import InputError
    from collsched.inputs.arrivals import write_pap
    from collsched.lab.arrivals import arrival_pattern
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for topo, ranks, nbytes, alg, pap in cases():
            pap_path = None
            if pap:
                pap_path = tmp / f"pap-{ranks}.yaml"
                if not pap_path.exists():
                    write_pap(pap_path, arrival_pattern(1, 1, ranks, MAX_DELAY_S))
            sched = tmp / "s.sched"
            key = f"{topo}:{ranks}:{nbytes}:{alg}:{'pap' if pap else 'flat'}"
            try:
                r = pipeline.compile_schedule(alg, ranks, nbytes, topology=str(TOPOLOGIES / topo),
                                              pap=str(pap_path) if pap_path else None, output=sched)
            except InputError as e:  # an algorithm that does not serve the case (agg: grids)
                out[key] = {"refused": e.line()}
                print(key, "refused", file=sys.stderr)
                continue
            out[key] = {"sha256": hashlib.sha256(sched.read_bytes()).hexdigest(),
                        "avg_elapsed_s": repr(r.metrics.avg_elapsed_s),
                        "run_time_s": repr(r.metrics.run_time_s)}
            print(key, file=sys.stderr)
    return out


if __name__ == "__main__":
    json.dump(table(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
