"""`make install PREFIX=... DESTDIR=...` lays out the versioned shared libraries (soname
symlinks), headers, the pkg-config and CMake package files and the driver; the libraries
export only the public API; a program built against the staged copy once with pkg-config
and once with CMake (find_package(collsched)) links and runs under mpirun with every byte
checked; `make uninstall` removes every file install put."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from rt_helpers import ROOT, TIMEOUT, make_schedule, mpirun_cmd

PREFIX = "/opt/collsched"
VERSION = re.search(r'^__version__ = "(.*)"$',
                    (ROOT / "compiler" / "collsched" / "__init__.py").read_text(), re.M).group(1)
SOMAJOR = VERSION.split(".")[0]
SOLIBS = ("libcollsched", "libcollsched-preload")

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

CMAKELISTS = """cmake_minimum_required(VERSION 3.10)
project(collsched_consumer C)
find_package(collsched {version} REQUIRED)
add_executable(prog prog.c)
target_link_libraries(prog PRIVATE collsched::collsched)
"""


# The routines whose Fortran bindings the preload library takes over (preload_fortran.c),
# under every name Open MPI 4.1 gives them (docs/runtime.md, "Fortran"; test_fortran.py
# checks these against the names Open MPI's own Fortran libraries export).
FORTRAN_ROUTINES = ("allgather", "allgatherv", "init", "init_thread", "finalize")


def fortran_names(routine: str) -> set[str]:
    camel = "MPI_" + routine.capitalize()
    return {f"mpi_{routine}", f"mpi_{routine}_", f"mpi_{routine}__", f"MPI_{routine.upper()}",
            f"{camel}_f", f"{camel}_f08", f"mpi_{routine}_f08_"}


def public_symbols() -> tuple[set[str], set[str]]:
    """What the headers declare COLLSCHED_API, and the preload library's wrappers: preload.c's
    exported MPI_* functions and the Fortran names."""
    decl = re.compile(r"^COLLSCHED_API\s+[\w\s\*]+?\b(\w+)\s*\(", re.M)
    api = set()
    for h in ("collsched.h", "collsched_schedfile.h"):
        api |= set(decl.findall((ROOT / "runtime" / "include" / h).read_text()))
    wrappers = set(decl.findall((ROOT / "runtime" / "src" / "preload.c").read_text()))
    assert api and wrappers and all(w.startswith("MPI_") for w in wrappers)
    for routine in FORTRAN_ROUTINES:
        wrappers |= fortran_names(routine)
    return api, wrappers


def install(destdir: Path) -> Path:
    subprocess.run(["make", "-s", "install", f"PREFIX={PREFIX}", f"DESTDIR={destdir}"], cwd=ROOT,
                   check=True, timeout=TIMEOUT, capture_output=True)
    return destdir / PREFIX.lstrip("/")


def files_under(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file() or p.is_symlink())


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    if not shutil.which("mpicc"):
        pytest.skip("mpicc missing")
    destdir = tmp_path_factory.mktemp("stage")
    return destdir, install(destdir)


def run_program(exe: Path, tmp_path: Path) -> None:
    sched = make_schedule(tmp_path / "ring2.sched", "ring", 2)
    proc = subprocess.run(mpirun_cmd(2) + [str(exe)], capture_output=True, text=True,
                          timeout=TIMEOUT, env=dict(os.environ, COLLSCHED_SCHEDULES=str(sched)))
    assert proc.returncode == 0 and "ok=1 used=1" in proc.stdout, proc.stdout + proc.stderr
    needed = subprocess.run(["readelf", "-d", str(exe)], capture_output=True, text=True,
                            check=True).stdout
    assert f"[libcollsched.so.{SOMAJOR}]" in needed, needed


@pytest.mark.mpi
def test_layout_and_sonames(staged):
    _, prefix = staged
    for rel in ("lib/libcollsched.a", "include/collsched.h", "include/collsched_schedfile.h",
                "lib/pkgconfig/collsched.pc", "bin/collsched-run",
                "lib/cmake/collsched/collschedConfig.cmake",
                "lib/cmake/collsched/collschedConfigVersion.cmake"):
        assert (prefix / rel).is_file(), rel
    lib = prefix / "lib"
    for name in SOLIBS:
        real = lib / f"{name}.so.{VERSION}"
        assert real.is_file() and not real.is_symlink()
        assert os.readlink(lib / f"{name}.so.{SOMAJOR}") == real.name
        assert os.readlink(lib / f"{name}.so") == f"{name}.so.{SOMAJOR}"
        dyn = subprocess.run(["readelf", "-d", str(real)], capture_output=True, text=True,
                             check=True).stdout
        assert f"Library soname: [{name}.so.{SOMAJOR}]" in dyn, dyn
    pc = (lib / "pkgconfig" / "collsched.pc").read_text()
    assert f"prefix={PREFIX}\n" in pc and f"Version: {VERSION}" in pc


@pytest.mark.mpi
def test_only_public_symbols_exported(staged):
    if not shutil.which("nm"):
        pytest.skip("nm missing")
    _, prefix = staged
    api, wrappers = public_symbols()
    for name, want in (("libcollsched", api), ("libcollsched-preload", api | wrappers)):
        out = subprocess.run(["nm", "-D", "--defined-only", str(prefix / "lib" / f"{name}.so")],
                             capture_output=True, text=True, check=True).stdout
        got = {line.split()[-1] for line in out.splitlines() if line.strip()}
        assert got == want, (name, sorted(got - want), sorted(want - got))


@pytest.mark.mpi
def test_pkg_config_build_links_and_runs(staged, tmp_path):
    if not shutil.which("pkg-config"):
        pytest.skip("pkg-config missing")
    destdir, prefix = staged
    env = dict(os.environ, PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig"),
               PKG_CONFIG_SYSROOT_DIR=str(destdir))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "collsched"], env=env,
                           capture_output=True, text=True, check=True).stdout.split()
    assert f"-I{prefix}/include" in flags and "-lcollsched" in flags, flags
    assert subprocess.run(["pkg-config", "--modversion", "collsched"], env=env, capture_output=True,
                          text=True, check=True).stdout.strip() == VERSION
    src = tmp_path / "prog.c"
    src.write_text(PROGRAM)
    exe = tmp_path / "prog"
    subprocess.run(["mpicc", "-o", str(exe), str(src), *flags, f"-Wl,-rpath,{prefix / 'lib'}"],
                   check=True, timeout=TIMEOUT)
    run_program(exe, tmp_path)


@pytest.mark.mpi
def test_cmake_build_links_and_runs(staged, tmp_path):
    if not shutil.which("cmake"):
        pytest.skip("cmake not installed: the CMake package config is not exercised")
    _, prefix = staged
    src = tmp_path / "src"
    src.mkdir()
    (src / "prog.c").write_text(PROGRAM)
    (src / "CMakeLists.txt").write_text(CMAKELISTS.format(version=VERSION))
    build = tmp_path / "build"
    cfg = subprocess.run(["cmake", "-S", str(src), "-B", str(build),
                          f"-DCMAKE_PREFIX_PATH={prefix}"], capture_output=True, text=True,
                         timeout=TIMEOUT)
    assert cfg.returncode == 0, cfg.stdout + cfg.stderr
    bld = subprocess.run(["cmake", "--build", str(build)], capture_output=True, text=True,
                         timeout=TIMEOUT)
    assert bld.returncode == 0, bld.stdout + bld.stderr
    run_program(build / "prog", tmp_path)
    # A newer major version than the installed one is refused.
    (src / "CMakeLists.txt").write_text(CMAKELISTS.format(version=f"{int(SOMAJOR) + 1}.0"))
    cfg = subprocess.run(["cmake", "-S", str(src), "-B", str(tmp_path / "build2"),
                          f"-DCMAKE_PREFIX_PATH={prefix}"], capture_output=True, text=True,
                         timeout=TIMEOUT)
    assert cfg.returncode != 0


@pytest.mark.mpi
@pytest.mark.parametrize("program", ["collsched-run", "collsched-minibench", "collsched-measure"])
def test_version(program):
    exe = ROOT / "build" / "bin" / program
    if not exe.exists():
        pytest.skip(f"{exe} not built")
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, check=True,
                         timeout=TIMEOUT).stdout
    assert out == f"{program} {VERSION}\n"


@pytest.mark.mpi
def test_uninstall_removes_everything(tmp_path):
    if not shutil.which("mpicc"):
        pytest.skip("mpicc missing")
    prefix = install(tmp_path)
    assert files_under(prefix)
    (prefix / "share").mkdir()
    (prefix / "share" / "other").write_text("not ours")
    subprocess.run(["make", "-s", "uninstall", f"PREFIX={PREFIX}", f"DESTDIR={tmp_path}"],
                   cwd=ROOT, check=True, timeout=TIMEOUT, capture_output=True)
    assert files_under(prefix) == ["share/other"]
    assert not (prefix / "lib" / "cmake" / "collsched").exists()


def fake_path(tmp_path: Path, tools: tuple[str, ...]) -> str:
    """A PATH holding only `tools` (symlinks to the real ones)."""
    d = tmp_path / "bin"
    d.mkdir()
    for t in tools:
        real = shutil.which(t)
        if real:
            (d / t).symlink_to(real)
    return str(d)


BASIC_TOOLS = ("bash", "python3", "id", "dirname", "sed", "cat", "env", "make", "sh", "rm")


@pytest.mark.parametrize("case", ["opt-out", "no-apt"])
def test_ensure_deps_without_system_packages(tmp_path, case):
    """No Debian packages: one line says what is not installed and what is not built."""
    stamp = ROOT / ".venv" / ".collsched-deps"
    if not stamp.exists() or (ROOT / "pyproject.toml").stat().st_mtime > stamp.stat().st_mtime:
        pytest.skip(".venv not up to date: the script would install Python packages")
    env = {"HOME": str(tmp_path), "PATH": fake_path(tmp_path, BASIC_TOOLS)}
    if case == "opt-out":
        env["COLLSCHED_NO_SYSTEM_PACKAGES"] = "1"
    proc = subprocess.run(["bash", str(ROOT / "tools" / "ensure-deps.sh")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    why = "COLLSCHED_NO_SYSTEM_PACKAGES is set" if case == "opt-out" else "apt-get not found"
    assert len(lines) == 1 and lines[0].startswith(f"ensure-deps: {why}: not installing "), lines
    assert "openmpi-bin libopenmpi-dev libsimgrid-dev" in lines[0] and "not built: " in lines[0]


def test_make_without_mpi_compilers_says_what_it_skips():
    proc = subprocess.run(["make", "--no-print-directory", "runtime", "lab", "MPICC=no-such-mpicc",
                           "SMPICC=no-such-smpicc"], cwd=ROOT, capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "runtime: no-such-mpicc not found: " in proc.stdout
    assert "runtime: no-such-smpicc not found: " in proc.stdout
    proc = subprocess.run(["make", "--no-print-directory", "install", "MPICC=no-such-mpicc",
                           "PREFIX=/nonexistent"], cwd=ROOT, capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert proc.returncode != 0 and "install: no-such-mpicc not found" in proc.stdout
