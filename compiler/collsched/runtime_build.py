"""Where the runtime's C programs and libraries live (collsched-minibench, collsched-measure,
collsched-run, libcollsched-preload.so), for the lab, `measure` and the recurring suite.

One place answers "which build do I run": COLLSCHED_BUILD when set (the sanitizer builds
point it at build/asan or build/tsan), else the source checkout's build/ (what `make`
writes). Every caller asks here instead of composing build paths itself.
"""
from __future__ import annotations

import os
from pathlib import Path

from .errors import InputError

# The repository root of a source checkout (compiler/collsched/ is two levels down).
SOURCE_ROOT = Path(__file__).resolve().parents[2]


def build_dir() -> Path:
    """The directory holding bin/, lib/ and smpi/ of the runtime build in use."""
    env = os.environ.get("COLLSCHED_BUILD")
    return Path(env) if env else SOURCE_ROOT / "build"


def program(backend: str, name: str) -> Path:
    """The path of program `name` built for `backend` (mpi: Open MPI, smpi: SimGrid)."""
    return build_dir() / ("smpi/bin" if backend == "smpi" else "bin") / name


def library(name: str) -> Path:
    """The path of the Open MPI build's shared library `name` (e.g. libcollsched-preload.so)."""
    return build_dir() / "lib" / name


def require(path: Path, what: str = "make") -> Path:
    """`path` if it exists, else one InputError saying how to build it."""
    if not path.exists():
        raise InputError(str(path), "", f"not built: run `{what}` first")
    return path
