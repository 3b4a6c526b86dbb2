"""The piecewise fit of time by message size (lab/sizefit.py) and its tables
(lab/sizecosts.py), on synthetic data: exact piecewise-linear data gives its breakpoints
back (within one sweep step) and its times exactly; noisy straight data stays one line."""
import math

import numpy as np
import pytest

from collsched.errors import InputError
from collsched.inputs import msgcosts
from collsched.lab import sizecosts
from collsched.lab.measure import parse_sweep
from collsched.lab.sizefit import fit_piecewise, log_sizes

SIZES = np.array(log_sizes(1, 4 << 20, 8), np.float64)
STEP = 1 / 8  # one sweep step, in octaves


def _within_step(found, true_starts):
    assert len(found) == len(true_starts), (found, true_starts)
    for f, t in zip(found, true_starts):
        assert abs(math.log2(f / t)) <= STEP, (f, t)


def test_log_sizes_are_dense_and_start_at_zero():
    s = log_sizes(1, 4 << 20, 8)
    assert s[0] == 0 and s[1] == 1 and s[-1] == 4 << 20
    assert s == sorted(set(s))
    big = np.array([x for x in s if x >= 64])
    assert np.all(big[1:] / big[:-1] <= 2 ** (1 / 8) * 1.01)  # 8 per octave where sizes allow
    assert 140 <= len(s) <= 180


def test_exact_piecewise_data_recovers_breakpoints_and_times():
    # three protocols: eager, bounce buffer, rendezvous
    starts, a, b = [0, 1500, 70000], [5e-6, 9e-6, 40e-6], [1e9, 2e9, 8e9]
    seg = np.searchsorted(starts, SIZES, side="right") - 1
    t = np.array(a)[seg] + SIZES / np.array(b)[seg]
    fit = fit_piecewise(SIZES, t)
    _within_step(fit.breakpoints, starts[1:])
    assert fit.rms < 1e-9
    np.testing.assert_allclose(fit.predict(SIZES), t, rtol=1e-9)
    for s, aa, bb in zip(fit.segments, a, b):
        assert s.a == pytest.approx(aa, rel=1e-6) and 1 / s.per_byte == pytest.approx(bb, rel=1e-6)


@pytest.mark.parametrize("latency, bandwidth", [(50e-6, 125e6), (1e-6, 10e9), (5e-3, 1.25e9)])
def test_simgrid_smpi_factors_recovered(latency, bandwidth):
    lf, bf = msgcosts.SIMGRID_SMPI.at(SIZES)
    t = latency * lf + SIZES / (bandwidth * bf)
    fit = fit_piecewise(SIZES, t)
    _within_step(fit.breakpoints, msgcosts.SIMGRID_SMPI.starts[1:])
    table = sizecosts.table_of(fit, latency, bandwidth)
    np.testing.assert_allclose(table.latency_factor, msgcosts.SIMGRID_SMPI.latency_factor, rtol=1e-6)
    np.testing.assert_allclose(table.bandwidth_factor, msgcosts.SIMGRID_SMPI.bandwidth_factor, rtol=1e-6)


@pytest.mark.parametrize("noise", [0.002, 0.01, 0.05])
@pytest.mark.parametrize("seed", range(4))
def test_noisy_straight_line_is_one_segment(noise, seed):
    rng = np.random.default_rng(seed)
    t = (3e-6 + SIZES / 5e9) * (1 + noise * rng.standard_normal(len(SIZES)))
    fit = fit_piecewise(SIZES, t)
    assert len(fit.segments) == 1, fit.breakpoints
    assert fit.noise == pytest.approx(noise, rel=0.35)
    assert 1 / fit.segments[0].per_byte == pytest.approx(5e9, rel=0.05)


def test_noisy_jump_is_found_and_an_outlier_dropped():
    rng = np.random.default_rng(7)
    true = np.where(SIZES > 65536, 60e-6, 5e-6) + SIZES / 1e9
    t = true * (1 + 0.01 * rng.standard_normal(len(SIZES)))
    k = int(np.searchsorted(SIZES, 1000))
    t[k] *= 3  # one disturbed size
    fit = fit_piecewise(SIZES, t)
    _within_step(fit.breakpoints, [65537])
    assert int(SIZES[k]) in fit.dropped


def test_one_disturbed_sample_gets_no_segment_of_its_own():
    # exact data (SimGrid) but one size 0.4% high: no bump segment, the point is dropped
    t = 60e-6 + SIZES / 1e7
    k = int(np.searchsorted(SIZES, 2233))
    t[k] *= 1.004
    fit = fit_piecewise(SIZES, t)
    assert len(fit.segments) == 1 and fit.dropped == (int(SIZES[k]),)


@pytest.mark.parametrize("seed", range(4))
def test_noise_with_spikes_is_one_segment(seed):
    # real MPI: 1% noise and a few samples disturbed by other processes (+20% to +100%)
    rng = np.random.default_rng(seed)
    t = (3e-6 + SIZES / 5e9) * (1 + 0.01 * rng.standard_normal(len(SIZES)))
    spikes = rng.choice(np.arange(2, len(SIZES) - 2), 6, replace=False)
    t[spikes] *= 1.2 + 0.8 * rng.random(6)
    fit = fit_piecewise(SIZES, t)
    assert len(fit.segments) == 1, fit.breakpoints
    assert set(fit.dropped) >= {int(x) for x in SIZES[spikes]}


def test_unmeasured_sizes_are_ignored_and_too_few_refused():
    t = 1e-6 + SIZES / 1e9
    t[-20:] = np.nan  # past the sweep budget
    assert len(fit_piecewise(SIZES, t).segments) == 1
    with pytest.raises(ValueError):
        fit_piecewise([1, 2], [np.nan, 1.0])


def _class_fit(cls, latency=50e-6, bandwidth=125e6):
    lf, bf = msgcosts.SIMGRID_SMPI.at(SIZES)
    fit = fit_piecewise(SIZES, latency * lf + SIZES / (bandwidth * bf))
    return sizecosts.ClassFit(cls, [(0, 1)], latency, bandwidth, fit,
                              sizecosts.table_of(fit, latency, bandwidth), [], [])


def test_unswept_classes_get_their_kind_or_all():
    # sites A (hosts 0, 1), B (host 2), C (host 3): only A's LAN and A -> B were swept
    host_site = ["A", "A", "B", "C"]
    mc = sizecosts.message_costs([_class_fit("lan:A"), _class_fit("wan:A:B")], host_site)
    d = mc.to_dict()
    assert set(d) == {"lan:A", "wan:A:B", "wan"}  # no LAN elsewhere; every other WAN pair: wan
    assert np.all(mc.host_table[~np.eye(4, dtype=bool)] >= 0)
    # only an intra-host sweep: `all` covers the pairs between hosts
    mc = sizecosts.message_costs([_class_fit("intra_host")], ["A", "B"])
    assert set(mc.to_dict()) == {"intra_host", "all"}
    assert sizecosts.message_costs([], ["A"]) is None


def test_one_way_time_subtracts_half_the_empty_round_trip():
    np.testing.assert_allclose(sizecosts.one_way([0, 10], [4.0, 7.0]), [2.0, 5.0])
    with pytest.raises(ValueError):
        sizecosts.one_way([1, 10], [4.0, 7.0])


@pytest.mark.parametrize("text, per_octave", [("4:1", 8), ("1:4MiB:2", 8), ("x:1MiB", 8), ("1:4", 8),
                                              ("1:4MiB", 0), ("1:4GiB", 8), ("1:4MiB", 64)])
def test_parse_sweep_bad_input(text, per_octave):
    with pytest.raises(InputError):
        parse_sweep(text, per_octave)


def test_parse_sweep():
    assert parse_sweep("off") is None
    s = parse_sweep("1:1MiB", 4)
    assert s[0] == 0 and s[-1] == 1 << 20
