"""Half duplex for every schedule.

A schedule compiled for full duplex has every rank send and receive in one step, so its
lists give no single-port order: the DAG model serves its one port greedily in simulated
time (dag._GreedyPorts) instead of ending in a ModelCycle; the fluid model shares
one capacity between a host's up and down flows.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from collsched.algorithms import REGISTRY, Request, generate
from collsched.cli import main
from collsched.errors import InputError
from collsched.model.fluid import simulate_fluid
from collsched.model.simulate import simulate
from collsched.inputs.topology import homogeneous, load_topology

ROOT = Path(__file__).resolve().parents[2]
ALGORITHMS = sorted(REGISTRY)


def _schedule(name, p, nseg):
    try:  # cost-aware algorithms (bdr, min3, ...) plan on the default cluster
        return generate(name, Request(p, nbytes=1 << 16, nseg=nseg, topology=homogeneous(p)))
    except InputError:  # nex on odd P, rd on P not a power of two
        assume(False)


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(ALGORITHMS), p=st.integers(2, 17), nseg=st.integers(1, 3),
       nbytes=st.integers(0, 1 << 20))
def test_full_duplex_schedule_under_half_duplex(name, p, nseg, nbytes):
    s = _schedule(name, p, nseg)
    full_tl, full = simulate(s, homogeneous(p), nbytes)
    half_tl, half = simulate(s, homogeneous(p, full_duplex=False), nbytes)
    assert np.isfinite(half_tl.end).all()
    # One port per host only adds waits: no transfer ends earlier than with two.
    assert (half_tl.end >= full_tl.end - 1e-12).all()
    assert half.run_time_s >= full.run_time_s - 1e-12


def test_ring_under_half_duplex_takes_twice_as_long():
    """Greedy ports pair the ring up about as a half-duplex compile does (even ranks send
    while odd ones receive, then the other way round): about twice the full-duplex time,
    never slower than the lists a half-duplex compile writes."""
    p = 8
    s = generate("ring", Request(p))
    full = simulate(s, homogeneous(p), 1 << 20)[1].run_time_s
    half = simulate(s, homogeneous(p, full_duplex=False), 1 << 20)[1].run_time_s
    compiled_half = simulate(generate("ring", Request(p, full_duplex=False)),
                             homogeneous(p, full_duplex=False), 1 << 20)[1].run_time_s
    assert half <= compiled_half
    assert half == pytest.approx(2 * full, rel=0.01)


@pytest.mark.parametrize("name", ["ring", "bruck", "nex", "rd", "spreading", "bdr"])
def test_fluid_half_duplex_is_slower(name):
    p = 8
    s = generate(name, Request(p, nbytes=1 << 16, topology=homogeneous(p)))
    full = simulate_fluid(s, homogeneous(p), 1 << 16)[1].avg_elapsed_s
    half = simulate_fluid(s, homogeneous(p, full_duplex=False), 1 << 16)[1].avg_elapsed_s
    assert half > full


@pytest.mark.parametrize("topology,p", [("tryton-48", 12), ("three-site-grid", 12), ("wan-3x16", 9)])
@pytest.mark.parametrize("name", ALGORITHMS)
def test_cli_half_duplex(tmp_path, capsys, topology, p, name):
    """compile on a half-duplex topology, simulate and plot a full-duplex file with
    --duplex half: every algorithm, exit 0 (2 with one line when the algorithm refuses P)."""
    topo_file = tmp_path / "half.yaml"
    text = (ROOT / "topologies" / f"{topology}.yaml").read_text()
    topo_file.write_text(text.replace("duplex: full", "duplex: half"))
    assert load_topology(str(topo_file), p).full_duplex is False
    out = tmp_path / "h.sched"
    rc = main(["compile", "--algorithm", name, "--ranks", str(p), "--bytes", "64KiB",
               "--topology", str(topo_file), "-o", str(out)])
    err = capsys.readouterr().err
    if rc == 2:
        assert "--algorithm" in err and len(err.strip().splitlines()) == 1
        return
    assert rc == 0, err
    full = tmp_path / "f.sched"
    assert main(["compile", "--algorithm", name, "--ranks", str(p), "--bytes", "64KiB",
                 "--topology", str(ROOT / "topologies" / f"{topology}.yaml"), "-o", str(full)]) == 0
    for model in ("dag", "fluid"):
        assert main(["simulate", str(full), "--duplex", "half", "--model", model,
                     "--topology", str(ROOT / "topologies" / f"{topology}.yaml"), "--json"]) == 0
    assert main(["plot", str(full), "--duplex", "half", "-o", str(tmp_path / "h.png")]) == 0
    assert "Traceback" not in capsys.readouterr().err


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(["bdr", "bslb", "min3", "ring"]), p=st.integers(2, 12),
       seed=st.integers(0, 2**32 - 1))
def test_arrival_aware_schedules_under_half_duplex(name, p, seed):
    """Schedules built for an arrival pattern (background pre-steps: bdr, bslb, min3)
    time under half duplex too, each rank exiting after it arrives."""
    from collsched.model.simulate import simulate_pattern

    a = np.random.default_rng(seed).uniform(0, 5e-3, p)
    topo = homogeneous(p)
    s = generate(name, Request(p, nbytes=1 << 16, topology=topo, arrivals=a - a.min()))
    timelines, _, mean = simulate_pattern(s, homogeneous(p, full_duplex=False), 1 << 16, a[None, :])
    assert np.isfinite(mean.run_time_s)
    assert (timelines[0].exits >= a - a.min() - 1e-12).all()  # each clock starts at 0
