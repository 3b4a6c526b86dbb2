"""The C executor under mpirun: every baseline algorithm at P = 2..9 and 16, sizes 0, 1, odd,
64 KiB and 4 MiB, MPI_Allgather and MPI_Allgatherv, in place and not; every byte of every
rank is checked by collsched-run (which exits non-zero on a mismatch)."""
from __future__ import annotations

import pytest

from rt_helpers import baseline_algorithms, make_schedule, run_driver

SIZES = [0, 1, 777, 65537, 65536, 4 << 20]
MODES = 4  # (allgather, allgatherv) x (in place, not)


def expect_all_used(run, files):
    assert run.returncode == 0, run
    assert len(run.rows) == len(files) * len(SIZES) * MODES, run
    for row in run.rows:
        assert row["data_ok"], row
        assert row["mpi_error"] == 0, row
        assert row["used_schedule"], row
        assert row["schedule"] == row["file"], row


@pytest.mark.mpi
@pytest.mark.parametrize("nranks", [2, 3, 4, 5, 6, 7, 8, 9, 16])
def test_baselines_all_sizes_and_modes(tmp_path, nranks):
    files = [make_schedule(tmp_path / f"{alg}.sched", alg, nranks)
             for alg in baseline_algorithms(nranks)]
    # Segmented pieces: empty pieces at tiny sizes, uneven ones at odd sizes.
    files.append(make_schedule(tmp_path / "ring-seg3.sched", "ring", nranks, nseg=3))
    files.append(make_schedule(tmp_path / "bruck-seg2.sched", "bruck", nranks, nseg=2))
    run = run_driver(nranks, files, "--bytes", ",".join(map(str, SIZES)), "--all-modes",
                     "--iterations", "1")
    expect_all_used(run, files)
    ranks = {row["ranks"] for row in run.rows}
    assert ranks == {nranks}


@pytest.mark.mpi
def test_repeated_calls_and_int_datatype(tmp_path):
    files = [make_schedule(tmp_path / "ring.sched", "ring", 4, nseg=2)]
    run = run_driver(4, files, "--bytes", "4,1028,65536", "--all-modes", "--iterations", "4",
                     "--dtype", "int")
    assert run.returncode == 0, run
    assert len(run.rows) == 3 * MODES
    assert all(r["data_ok"] and r["used_schedule"] and r["dtype"] == "int" for r in run.rows), run


@pytest.mark.mpi
def test_checker_catches_wrong_data(tmp_path):
    """The byte check is real: one flipped byte on one rank fails the run."""
    f = make_schedule(tmp_path / "ring.sched", "ring", 3)
    run = run_driver(3, [f], "--bytes", "100", "--inject-error", "--iterations", "1")
    assert run.returncode != 0, run
    assert run.rows and not run.rows[0]["data_ok"], run
