"""Message-size-dependent costs (inputs/msgcosts.py): the table semantics (SimGrid's),
the topology format and its errors, and what the DAG model and the lower bound make of them."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from collsched.algorithms import Request, generate
from collsched.errors import InputError
from collsched.inputs import msgcosts
from collsched.inputs.msgcosts import SIMGRID_SMPI, CostTable
from collsched.inputs.topology import homogeneous, load_topology, write_topology
from collsched.model.lowerbound import lower_bound, serial_lower_bound
from collsched.model.simulate import simulate, simulate_pattern

TWO_SITES = """\
name: t
sites:
  - {name: a, hosts: 2, lan: {latency: 50us, bandwidth: 1Gbit/s}}
  - {name: b, hosts: 2, lan: {latency: 20us, bandwidth: 10Gbit/s}}
wan:
  - {between: [a, b], latency: 5ms, bandwidth: 100Mbit/s}
"""


def write(tmp_path, text, name="t.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


# --- SimGrid's semantics --------------------------------------------------------------

def simgrid_factor(table_text: str, size: float) -> float:
    """SimGrid 3.32's lookup (network_smpi.cpp): thresholds ascending; the value of the
    largest threshold below the size, 1.0 at or below the smallest."""
    pairs = sorted((int(t), float(v)) for t, v in (c.split(":") for c in table_text.split(";")))
    current = 1.0
    for t, v in pairs:
        if size <= t:
            return current
        current = v
    return current


@pytest.mark.parametrize("size", [1, 256, 257, 258, 731, 732, 733, 1426, 1427, 3484, 5777, 9376,
                                  9377, 15424, 15425, 37448, 65472, 65473, 65536, 1 << 20])
def test_preset_is_simgrids_table(size):
    lat_cfg, bw_cfg = SIMGRID_SMPI.simgrid_cfg()
    lf, bf = SIMGRID_SMPI.at(size)
    assert float(lf) == simgrid_factor(lat_cfg, size)
    assert float(bf) == simgrid_factor(bw_cfg, size)


def test_simgrid_cfg_round_trip():
    t = CostTable((0, 100, 5000), (1.5, 2.0, 4.0), (0.5, 0.9, 1.1))
    lat_cfg, bw_cfg = t.simgrid_cfg()
    for size in (1, 99, 100, 101, 4999, 5000, 5001, 10**7):
        lf, bf = t.at(size)
        assert float(lf) == simgrid_factor(lat_cfg, size)
        assert float(bf) == simgrid_factor(bw_cfg, size)


def test_extremes_over_sizes():
    assert SIMGRID_SMPI.extremes(37448) == (1.61075, 1.08739)
    assert SIMGRID_SMPI.extremes(100) == (2.01467, 0.812084)
    assert SIMGRID_SMPI.extremes(1 << 30) == (1.61075, 1.08739)


# --- the topology format ----------------------------------------------------------------

def test_tables_per_class_and_precedence(tmp_path):
    p = write(tmp_path, TWO_SITES + """\
placement: {hosts: [a-0, a-1, b-0, b-1]}
message_costs:
  all: [{from: 0, latency_factor: 2, bandwidth_factor: 0.5}]
  lan: [{from: 0, latency_factor: 3, bandwidth_factor: 0.25}]
  lan:b: [{from: 0, latency_factor: 4, bandwidth_factor: 1}, {from: 1KiB, latency_factor: 5, bandwidth_factor: 2}]
""")
    t = load_topology(p)
    lf, bf = t.size_factors([0, 0, 2, 2, 2], [1, 2, 3, 3, 0], [10, 10, 10, 2048, 10])
    assert lf.tolist() == [3, 2, 4, 5, 2]
    assert bf.tolist() == [0.25, 0.5, 1, 2, 0.5]
    # transfer_time: L * lf + m / (b * bf)
    tt = t.transfer_time(2048)
    assert tt[2, 3] == pytest.approx(20e-6 * 5 + 2048 / (1.25e9 * 2))
    assert tt[0, 2] == pytest.approx(5e-3 * 2 + 2048 / (12.5e6 * 0.5))


def test_round_trip_keeps_tables_and_digest(tmp_path):
    p = write(tmp_path, TWO_SITES + """\
message_costs:
  weight_s: 8775
  envelope_bytes: 16
  wan: [{from: 0, latency_factor: 1.5, bandwidth_factor: 0.8}, {from: 64KiB, latency_factor: 3, bandwidth_factor: 0.9}]
""")
    t = load_topology(p)
    out = tmp_path / "w.yaml"
    write_topology(t, out)
    t2 = load_topology(out)
    assert t2.digest() == t.digest()
    assert np.array_equal(t2.transfer_time(70000), t.transfer_time(70000))
    assert t2.message_costs.weight_s == 8775 and t2.message_costs.envelope_bytes == 16


def test_no_costs_keeps_digest_and_times():
    t = homogeneous(4)
    ones = t.with_message_costs(msgcosts.build({"all": CostTable((0,), (1.0,), (1.0,))}, t.host_site))
    assert "message_costs" not in t.to_dict()
    assert np.array_equal(t.transfer_time(1000), ones.transfer_time(1000))


@pytest.mark.parametrize("section, field, needle", [
    ("{}", "message_costs", "at least one table"),
    ("{preset: nope}", "message_costs.preset", "simgrid-smpi"),
    ("{preset: simgrid-smpi, all: []}", "message_costs.all", "not allowed together with preset"),
    ("{lan:zz: [{from: 0, latency_factor: 1, bandwidth_factor: 1}]}", "message_costs.lan:zz", "unknown site"),
    ("{site: [{from: 0, latency_factor: 1, bandwidth_factor: 1}]}", "message_costs.site", "link class"),
    ("{all: []}", "message_costs.all", "list of segments"),
    ("{all: [{from: 5, latency_factor: 1, bandwidth_factor: 1}]}", "message_costs.all[0].from", "start at 0"),
    ("{all: [{from: 0, latency_factor: 1, bandwidth_factor: 1}, {from: 0, latency_factor: 1, bandwidth_factor: 1}]}",
     "message_costs.all[1].from", "increasing"),
    ("{all: [{from: 0, latency_factor: 0, bandwidth_factor: 1}]}", "message_costs.all[0].latency_factor", "positive factor"),
    ("{all: [{from: 0, latency_factor: 1, bandwidth_factor: .nan}]}", "message_costs.all[0].bandwidth_factor", "positive factor"),
    ("{all: [{from: 0, latency_factor: 1, bandwidth_factor: true}]}", "message_costs.all[0].bandwidth_factor", "positive factor"),
    ("{all: [{from: -1, latency_factor: 1, bandwidth_factor: 1}]}", "message_costs.all[0].from", ""),
    ("{all: [{from: 0, latency_factor: 1}]}", "message_costs.all[0].bandwidth_factor", "missing"),
    ("{all: [{from: 0, latency_factor: 1, bandwidth_factor: 1, x: 1}]}", "message_costs.all[0].x", "unknown field"),
    ("{weight_s: -1, all: [{from: 0, latency_factor: 1, bandwidth_factor: 1}]}", "message_costs.weight_s", "non-negative"),
    ("[1, 2]", "message_costs", "mapping"),
])
def test_errors_name_the_field(tmp_path, section, field, needle):
    p = write(tmp_path, TWO_SITES + f"message_costs: {section}\n")
    with pytest.raises(InputError) as e:
        load_topology(p)
    line = str(e.value)
    assert field in line and needle in line and "\n" not in line


def test_too_many_segments(tmp_path):
    segs = ", ".join(f"{{from: {i}, latency_factor: 1, bandwidth_factor: 1}}" for i in range(300))
    p = write(tmp_path, TWO_SITES + f"message_costs: {{all: [{segs}]}}\n")
    with pytest.raises(InputError, match="at most 256 segments"):
        load_topology(p)


# --- the models -----------------------------------------------------------------------

def smpi(p, **kw):
    t = homogeneous(p, **kw)
    return t.with_message_costs(msgcosts.simgrid_smpi(t.host_site))


@pytest.mark.parametrize("nbytes", [100, 5000, 37448, 65536, 1 << 20])
def test_dag_two_ranks_is_one_message(nbytes):
    """Two ranks exchange their blocks: one message each way, L * lf + m / (b * bf)."""
    t = smpi(2)
    sched = generate("ring", Request(2, nbytes))
    _, m = simulate(sched, t, nbytes)
    wire = nbytes + 16  # SMPI's envelope (msgcosts.SMPI_ENVELOPE_BYTES)
    lf, bf = SIMGRID_SMPI.at(wire)
    assert m.run_time_s == pytest.approx(50e-6 * lf + wire / (125e6 * bf), rel=1e-12)


def test_dag_ring_counts_every_step():
    p, nbytes = 8, 65536
    _, m = simulate(generate("ring", Request(p, nbytes)), smpi(p), nbytes)
    lf, bf = SIMGRID_SMPI.at(nbytes + 16)
    assert m.run_time_s == pytest.approx((p - 1) * (50e-6 * lf + (nbytes + 16) / (125e6 * bf)), rel=1e-9)


def test_preset_looks_up_the_wire_size():
    """SMPI adds a 16-byte envelope: a payload of 65457 B is a 65473-byte message, past
    SimGrid's 65472 threshold; a table without envelope hands SimGrid thresholds 16 higher."""
    t = smpi(2)
    assert t.size_factors([0], [1], [65456])[0][0] == 3.48845
    assert t.size_factors([0], [1], [65457])[0][0] == 11.6436
    plain = CostTable((0, 1000), (1.0, 2.0), (1.0, 1.0))
    lat_cfg, _ = plain.simgrid_cfg(envelope_bytes=0)
    assert simgrid_factor(lat_cfg, 999 + 16) == 1.0 and simgrid_factor(lat_cfg, 1000 + 16) == 2.0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=st.integers(2, 12), nbytes=st.integers(1, 1 << 21),
       alg=st.sampled_from(["ring", "bruck", "spreading", "nex", "lnbc"]),
       delays=st.lists(st.floats(0, 5e-3), min_size=12, max_size=12), lp=st.booleans())
def test_bounds_hold_under_size_factors(p, nbytes, alg, delays, lp):
    """The LP bound and the serial bound stay below what the DAG model predicts for any
    schedule, with SimGrid's factors (the bound assumes the most favourable piece size)."""
    if alg == "nex" and p % 2:
        p += 1
    t = smpi(p)
    a = np.array(delays[:p])
    sched = generate(alg, Request(p, nbytes))
    _, m = simulate(sched, t, nbytes, a)
    lb = lower_bound(t, nbytes, a, use_lp=lp and p <= 8)
    assert lb.run_time_s <= m.run_time_s * (1 + 1e-9) + 1e-12
    assert lb.avg_elapsed_s <= m.avg_elapsed_s * (1 + 1e-9) + 1e-12
    # The serial bound holds for the same schedule run serially.
    ms = simulate_pattern(sched, t, nbytes, a[None, :], serial_sends=True)[2]
    sb = serial_lower_bound(t, nbytes, a)
    assert sb.run_time_s <= ms.run_time_s * (1 + 1e-9) + 1e-12


def test_bound_uses_favourable_factors():
    """At 37448 B a piece of 5777..9376 B moves at 1.087 x b: the bound must allow it."""
    t = smpi(4)
    plain = homogeneous(4)
    lb = lower_bound(t, 37448, use_lp=False)
    lb_plain = lower_bound(plain, 37448, use_lp=False)
    assert lb.run_time_s < lb_plain.run_time_s  # faster bytes than the nominal bandwidth
