"""Derived datatypes under the preload library: an unmodified program
(tests/runtime/apps/datatypes_app.c) runs MPI_Allgather and MPI_Allgatherv (blocks in rank
order, and reversed with some displacements negative) with 19 derived
types - reordered, in order, with holes, resized, subarray, darray, dup, pair, ... - as send
type, as receive type, both, mixed and in place, and compares every byte of each receive
buffer (holes and guards included) with PMPI_Allgather(v) on the same buffers. Strict
mode is on, so every call must run the schedule: a type whose layout is not one run of
bytes in order is staged, never run in place with the bytes in the wrong order."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rt_helpers import TIMEOUT, make_schedule, mpirun_cmd, build_mpi_app
from test_preload_mpi import preload_env


# How the runtime lays each type out (datatype.c): in place from this byte offset, or staged.
LAYOUT = {
    "indexed_reordered": "staged", "indexed_in_order": "run 0", "indexed_hole": "staged",
    "vector_stride": "staged", "struct_holes": "staged", "struct_reordered": "staged",
    "resized_grow": "staged", "resized_lb_hole": "staged", "resized_lb_shift": "run 8",
    "subarray_2x2": "staged", "subarray_rows_resized": "run 24", "dup_int": "run 0",
    "contiguous_of_contiguous": "run 0", "pair_2int": "run 0", "hvector": "staged",
    "hvector_tight": "run 0", "indexed_block_reordered": "staged", "darray_cyclic": "staged",
    "reordered_on_even_ranks": "staged",
}


@pytest.fixture(scope="module")
def app(tmp_path_factory) -> Path:
    return build_mpi_app(tmp_path_factory.mktemp("apps") / "datatypes_app", "datatypes_app.c", "-Werror")


@pytest.fixture(scope="module")
def linked_app(tmp_path_factory) -> Path:
    """The same program linked against libcollsched.a: it prints the runtime's layout of
    each type (cs_type_run, which the shared libraries do not export)."""
    return build_mpi_app(tmp_path_factory.mktemp("apps") / "datatypes_app_linked", "datatypes_app.c",
                         "-Werror", "-DDATATYPES_APP_LINKED", linked=True)


@pytest.mark.mpi
def test_runtime_layout_of_each_type(linked_app):
    proc = subprocess.run(mpirun_cmd(3) + [str(linked_app)], capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert proc.returncode == 0 and "calls per rank: OK" in proc.stdout, proc.stdout + proc.stderr
    layout = dict(line.split(" ", 3)[2:] for line in proc.stdout.splitlines()
                  if line.startswith("datatypes_app: layout "))
    assert layout == LAYOUT, layout


@pytest.mark.mpi
@pytest.mark.parametrize("nranks", [3, 4])
@pytest.mark.parametrize("algorithm,nseg", [("ring", 2), ("bruck", 1)])
def test_derived_types_match_the_mpi_library_byte_for_byte(app, tmp_path, nranks, algorithm, nseg):
    d = tmp_path / "schedules"
    d.mkdir()
    make_schedule(d / f"{algorithm}.sched", algorithm, nranks, nseg=nseg)
    env = preload_env(d, verbose=False)
    env["COLLSCHED_STRICT"] = "1"  # a call no schedule serves would be an error, not a fallback
    proc = subprocess.run(mpirun_cmd(nranks) + [str(app)], capture_output=True, text=True,
                          timeout=TIMEOUT, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "types, 1140 calls per rank: OK" in proc.stdout, out[-4000:]
    assert "collsched:" not in proc.stderr, out[-4000:]


@pytest.mark.mpi
def test_catalogue_agrees_without_the_preload(app):
    """The app itself: MPI_ and PMPI_ are the same library's calls without collsched."""
    proc = subprocess.run(mpirun_cmd(3) + [str(app)], capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0 and "calls per rank: OK" in proc.stdout, proc.stdout + proc.stderr
    assert "layout" not in proc.stdout
