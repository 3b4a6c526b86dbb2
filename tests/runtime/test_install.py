"""`make install PREFIX=...` lays out library, header, pkg-config file and driver, and a
program built against the installed copy with pkg-config flags links and runs."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from rt_helpers import ROOT, TIMEOUT, make_schedule, mpirun_cmd

PROGRAM = r"""
#include <collsched.h>
#include <stdio.h>
int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, P;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    int mine = rank * 10 + 1, all[64];
    collsched_allgather(&mine, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
    collsched_call_info info;
    collsched_last_call(MPI_COMM_WORLD, &info);
    int ok = 1;
    for (int o = 0; o < P; o++) ok &= all[o] == o * 10 + 1;
    if (rank == 0) printf("ok=%d used=%d\n", ok, info.used_schedule);
    MPI_Finalize();
    return !ok;
}
"""


@pytest.mark.mpi
def test_install_and_pkg_config(tmp_path):
    if not shutil.which("pkg-config") or not shutil.which("mpicc"):
        pytest.skip("pkg-config or mpicc missing")
    prefix = tmp_path / "prefix"
    subprocess.run(["make", "-s", "install", f"PREFIX={prefix}"], cwd=ROOT, check=True,
                   timeout=TIMEOUT, capture_output=True)
    for rel in ("lib/libcollsched.so", "lib/libcollsched.a", "lib/libcollsched-preload.so",
                "include/collsched.h", "include/collsched_schedfile.h",
                "lib/pkgconfig/collsched.pc", "bin/collsched-run"):
        assert (prefix / rel).exists(), rel
    env = dict(os.environ, PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig"))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "collsched"], env=env,
                           capture_output=True, text=True, check=True).stdout.split()
    assert f"-I{prefix}/include" in flags and "-lcollsched" in flags
    src = tmp_path / "prog.c"
    src.write_text(PROGRAM)
    exe = tmp_path / "prog"
    subprocess.run(["mpicc", "-o", str(exe), str(src), *flags,
                    f"-Wl,-rpath,{prefix / 'lib'}"], check=True, timeout=TIMEOUT)
    sched = make_schedule(tmp_path / "ring3.sched", "ring", 3)
    proc = subprocess.run(mpirun_cmd(3) + [str(exe)], capture_output=True, text=True,
                          timeout=TIMEOUT, env=dict(os.environ, COLLSCHED_SCHEDULES=str(sched)))
    assert proc.returncode == 0 and "ok=1 used=1" in proc.stdout, proc.stdout + proc.stderr
