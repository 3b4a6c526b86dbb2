"""Helpers of the runtime tests (imported by the test modules; not a conftest, so that it
cannot collide with tests/conftest.py): schedules from the Python library, mpirun/smpirun launches
of build/bin/collsched-run (or of the build named by COLLSCHED_BUILD, e.g. the ASan one)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from collsched import schedfile
from collsched.algorithms import Request, generate

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("COLLSCHED_BUILD", ROOT / "build"))
DATA = Path(__file__).parent / "data"
TIMEOUT = 240  # a hang fails the test instead of stalling the suite


def driver() -> Path:
    exe = BUILD / "bin" / "collsched-run"
    if not exe.exists():
        pytest.skip(f"{exe} not built (make runtime)")
    return exe


def mpirun_cmd(nranks: int) -> list[str]:
    if not shutil.which("mpirun"):
        pytest.skip("mpirun not installed")
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(nranks)]
    if os.geteuid() == 0:
        cmd.insert(1, "--allow-run-as-root")
    return cmd


def make_schedule(path: Path, algorithm: str, nranks: int, nseg: int = 1,
                  bytes_min: int = 0, bytes_max: int = 1 << 30) -> Path:
    s = generate(algorithm, Request(nranks, nseg=nseg))
    s.bytes_min, s.bytes_max = bytes_min, bytes_max
    schedfile.write(s, path)
    return path


def baseline_algorithms(nranks: int) -> list[str]:
    algs = ["ring", "lnbc", "bruck", "spreading"]
    if nranks % 2 == 0:
        algs.append("nex")
    if nranks & (nranks - 1) == 0:
        algs.append("rd")
    return algs


class Run:
    def __init__(self, proc: subprocess.CompletedProcess):
        self.returncode = proc.returncode
        self.stdout, self.stderr = proc.stdout, proc.stderr
        self.rows = [json.loads(line) for line in proc.stdout.splitlines()
                     if line.startswith("{")]

    def __repr__(self) -> str:
        return f"rc={self.returncode}\nstdout:\n{self.stdout[-3000:]}\nstderr:\n{self.stderr[-3000:]}"


def run_driver(nranks: int, files, *args: str, env: dict | None = None,
               launcher: list[str] | None = None, exe: Path | None = None) -> Run:
    cmd = (launcher or mpirun_cmd(nranks)) + [str(exe or driver())] + [str(f) for f in files]
    cmd += ["--json", *args]
    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=full_env)
    return Run(proc)


APPS = Path(__file__).parent / "apps"


def build_mpi_app(out: Path, main: str, *flags: str, linked: bool = False) -> Path:
    """Compile an MPI test program from tests/runtime/apps with mpicc (skips without it).
    Plain: an unmodified MPI program, for the preload library. linked=True: linked against
    the build's libcollsched.a (its collsched_* and PAT_* calls, its internal symbols), with
    the sanitizer flags of that build (COLLSCHED_SANFLAGS, set for the ASan/TSan builds)."""
    if not shutil.which("mpicc"):
        pytest.skip("mpicc not installed")
    lib = BUILD / "lib" / "libcollsched.a"
    if linked and not lib.exists():
        pytest.skip(f"{lib} not built")
    extra = ([*os.environ.get("COLLSCHED_SANFLAGS", "").split(), f"-I{ROOT / 'runtime' / 'include'}"]
             if linked else [])
    subprocess.run(["mpicc", "-O1", "-Wall", *flags, *extra, "-o", str(out), str(APPS / main),
                    *([str(lib), "-lm", "-lpthread"] if linked else [])], check=True, timeout=120)
    return out


def build_c_tool(out: Path, runtime_sources: list[str], main: str, *flags: str) -> Path:
    """Compile a no-MPI test tool from runtime/src modules and a main in tests/runtime/apps."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    src = ROOT / "runtime" / "src"
    subprocess.run([cc, "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-Wall", "-Wextra", "-Werror", *flags,
                    f"-I{ROOT / 'runtime' / 'include'}", f"-I{src}",
                    *(str(src / s) for s in runtime_sources),
                    str(Path(__file__).parent / "apps" / main), "-o", str(out), "-lm"],
                   check=True, timeout=120)
    return out


def run_compact_app(app: Path, nranks: int, source: Path, *args: str, strict: bool = False,
                    nbytes: int = 1000):
    """apps/compact_app.c on `source` (COLLSCHED_SCHEDULES): (exit code, its one JSON row,
    the runtime's `collsched:` lines)."""
    env = {"COLLSCHED_SCHEDULES": str(source), "COLLSCHED_STRICT": "1" if strict else "0"}
    proc = subprocess.run(mpirun_cmd(nranks) + [str(app), str(nbytes), "3", *args], capture_output=True,
                          text=True, timeout=TIMEOUT, env={**os.environ, **env})
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 1, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("collsched:")]
    return proc.returncode, rows[0], lines
