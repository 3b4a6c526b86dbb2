"""The runtime's online BDR generator (runtime/src/bdr.c) and the compiler's
(collsched/algorithms/bdr.py) build the same lists, op for op, on shared random patterns."""
import random
import subprocess

import numpy as np
import pytest

from collsched.algorithms import Request, generate
from collsched.inputs.topology import homogeneous
from rt_helpers import build_c_tool


def python_lines(p, tau, a):
    s = generate("bdr", Request(p, nbytes=65536, topology=homogeneous(p), arrivals=np.array(a), tau=tau))
    lines = []
    for r in range(p):
        ops = s.ops_of(r)
        lines.append(f"{r}:" + "".join(
            f" {0 if k == 'send' else 1},{peer},{o},{0 if ph == 'fg' else 1}" for k, peer, o, _, ph in ops))
    return lines


def cases(n=1000, seed=20261122):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        p = rng.randint(2, 64)
        tau = rng.choice([1e-4, 3e-4, 1e-3, 2.5e-3])
        kind = i % 4
        if kind == 0:
            a = [rng.uniform(0, 20 * tau) for _ in range(p)]
        elif kind == 1:  # ties: a few arrival times shared by many ranks
            levels = [rng.uniform(0, 10 * tau) for _ in range(3)]
            a = [rng.choice(levels) for _ in range(p)]
        elif kind == 2:  # exact multiples of tau (floor at the boundary)
            a = [rng.randint(0, 6) * tau for _ in range(p)]
        else:  # one late rank, or nearly flat
            a = [0.0] * p
            a[rng.randrange(p)] = rng.uniform(0, 3 * p * tau)
        out.append((p, tau, a))
    return out


@pytest.mark.mpi
def test_online_bdr_matches_the_compiler(tmp_path):
    exe = build_c_tool(tmp_path / "bdr_main", ["bdr.c"], "bdr_main.c", "-O2", "-ffp-contract=off")
    all_cases = cases()
    text = "".join(f"{p} {tau!r} " + " ".join(repr(x) for x in a) + "\n" for p, tau, a in all_cases)
    proc = subprocess.run([str(exe)], input=text, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    got = proc.stdout.splitlines()
    per_case = [python_lines(p, tau, a) for p, tau, a in all_cases]
    expected = [line for lines in per_case for line in lines]
    assert len(got) == len(expected)
    wrong = [(e, g) for e, g in zip(expected, got) if e != g]
    assert not wrong, wrong[:3]
    # Most cases exercise background pre-steps (an op whose phase field is 1).
    with_pre_steps = sum(any(op.endswith(",1") for line in lines for op in line.split()[1:])
                         for lines in per_case)
    assert with_pre_steps > 500, with_pre_steps
