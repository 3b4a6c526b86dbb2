"""collsched-run --samples (issue 23 item 8): every iteration's time in the --json line, the
input of bench_runtime.py's confidence intervals; the median it reports is theirs."""
from __future__ import annotations

import statistics

import pytest

from rt_helpers import make_schedule, run_driver


@pytest.mark.mpi
@pytest.mark.parametrize("mode", ["--compare", "--compare-self"])
def test_samples_with_compare(tmp_path, mode):
    f = make_schedule(tmp_path / "ring.sched", "ring", 3)
    run = run_driver(3, [f], mode, "--samples", "--iterations", "7", "--bytes", "1024,65536")
    assert run.returncode == 0, run
    assert len(run.rows) == 2, run
    for row in run.rows:
        assert row["data_ok"], row
        ours, ref = row["samples_s"], row["ref_samples_s"]
        assert len(ours) == len(ref) == 7, row
        assert all(x > 0 for x in ours + ref), row
        assert statistics.median(ours) == pytest.approx(row["median_s"], rel=1e-6)
        assert statistics.median(ref) == pytest.approx(row["ref_median_s"], rel=1e-6)
        ratios = [a / b for a, b in zip(ours, ref)]
        assert statistics.median(ratios) == pytest.approx(row["median_ratio"], rel=1e-4)


@pytest.mark.mpi
def test_samples_alone_and_absent_by_default(tmp_path):
    f = make_schedule(tmp_path / "ring.sched", "ring", 2)
    run = run_driver(2, [f], "--samples", "--iterations", "3", "--bytes", "4096")
    assert run.returncode == 0, run
    (row,) = run.rows
    assert len(row["samples_s"]) == 3 and "ref_samples_s" not in row, row
    run = run_driver(2, [f], "--iterations", "3", "--bytes", "4096")
    (row,) = run.rows
    assert "samples_s" not in row and "ref_samples_s" not in row, row
