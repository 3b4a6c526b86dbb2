"""`collsched build-runtime`: build the runtime's C programs and libraries (the MPI runtime,
the lab's mini-benchmark, the measurement program) where collsched.runtime_build finds them.

In a source checkout: `make runtime lab measure` in the checkout (its build/). In an
installed package: the same make targets from the sources the package ships, into the
build directory runtime_build uses (COLLSCHED_BUILD, else the user cache directory), what
the lab and `measure` would otherwise build on first use (docs/install.md). Whatever the
present compilers allow is built; runtime.mk says in one line what is not.

A thin layer over collsched.runtime_build; registered by cli.py (add_parsers, COMMANDS)."""
from __future__ import annotations

import os
import shutil
import subprocess

from . import resources, runtime_build
from .errors import InputError

EXIT_OK = 0
TARGETS = ["runtime", "lab", "measure"]


def add_parsers(sub) -> None:
    """Adds this module's commands to the `collsched` parser."""
    sub.add_parser(
        "build-runtime", help="build the runtime's C programs and libraries (needs mpicc, smpicc)",
        description="Build libcollsched, the preload library, collsched-run, collsched-minibench and "
                    "collsched-measure (Open MPI and SimGrid builds, as far as mpicc and smpicc are "
                    "present) into the build directory the lab and measure use: in a source checkout "
                    "its build/ (make); in an installed package COLLSCHED_BUILD, else "
                    "${XDG_CACHE_HOME:-~/.cache}/collsched/VERSION/build (built there on first use "
                    "otherwise). Example: collsched build-runtime")


def cmd_build_runtime(a) -> int:
    root = resources.source_root()
    if root is not None:
        if shutil.which("make") is None:
            raise InputError("make", "", "not found: install make to build the runtime")
        status = subprocess.call(["make", "-C", str(root), "--no-print-directory", *TARGETS])
        if status != 0:
            raise InputError("make", "", f"a successful runtime build (make exited {status})")
        where = root / "build"
        note = ""
        if os.environ.get("COLLSCHED_BUILD"):
            note = f" (the lab and measure use COLLSCHED_BUILD={os.environ['COLLSCHED_BUILD']} instead)"
        print(f"build-runtime: built in {where}{note}")
        return EXIT_OK
    present = [cc for cc in (runtime_build.compiler("mpi"), runtime_build.compiler("smpi"))
               if shutil.which(cc.split()[0] if cc.split() else cc)]
    if not present:
        raise InputError("mpicc, smpicc", "", "neither found: install openmpi-bin libopenmpi-dev "
                                              "(Open MPI) or libsimgrid-dev (SimGrid) to build the runtime")
    runtime_build.build_targets(TARGETS, present, "the runtime", log=False)
    print(f"build-runtime: built in {runtime_build.build_dir()}")
    return EXIT_OK


COMMANDS = {"build-runtime": cmd_build_runtime}
