"""`collsched build-runtime`: build the runtime's C programs and libraries (the MPI runtime,
the lab's mini-benchmark, the measurement program) where collsched.runtime_build finds them.

A thin layer over collsched.runtime_build; registered by cli.py (add_parsers, COMMANDS)."""
from __future__ import annotations

import subprocess

from . import runtime_build
from .errors import InputError

EXIT_OK = 0


def add_parsers(sub) -> None:
    """Adds this module's commands to the `collsched` parser."""
    sub.add_parser(
        "build-runtime", help="build the runtime's C programs and libraries (needs mpicc, smpicc)",
        description="Build libcollsched, the preload library, collsched-run, collsched-minibench and "
                    "collsched-measure (Open MPI and SimGrid builds) into the build directory the "
                    "lab and measure use (COLLSCHED_BUILD, else the checkout's build/). "
                    "Example: collsched build-runtime")


def cmd_build_runtime(a) -> int:
    root = runtime_build.SOURCE_ROOT
    if not (root / "runtime" / "runtime.mk").is_file():
        raise InputError(str(root), "", "a source checkout with runtime/ (this installation has none)")
    status = subprocess.call(["make", "-C", str(root), "--no-print-directory", "runtime", "lab", "measure"])
    if status != 0:
        raise InputError("make", "", f"a successful runtime build (make exited {status})")
    print(f"build-runtime: built in {runtime_build.build_dir()}")
    return EXIT_OK


COMMANDS = {"build-runtime": cmd_build_runtime}
