"""Where the runtime's C programs and libraries live (collsched-minibench, collsched-measure,
collsched-run, libcollsched-preload.so), for the lab, `measure` and the recurring suite.

One place answers "which build do I run" (docs/install.md):

- COLLSCHED_BUILD when set (the sanitizer builds point it at build/asan or build/tsan);
- else, in a source checkout, its build/ (what `make` writes);
- else (an installed package: a wheel, `pip install .`), a user cache directory,
  ${XDG_CACHE_HOME:-~/.cache}/collsched/VERSION/build.

Every caller asks here instead of composing build paths itself. In a source checkout a
missing program is an error that says which `make` target builds it. In an installed
package there is no Makefile to run: a missing program is built on first use from the
runtime's sources the package ships (collsched/data/runtime), with one line on stderr and
under a file lock (two first uses at once build once); `collsched build-runtime` builds
everything ahead (cli_build.py).
"""
from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

from . import __version__, resources
from .errors import InputError

# What provides each compiler wrapper (Debian), for the error that says it is missing.
PROVIDERS = {"mpicc": "openmpi-bin libopenmpi-dev (Open MPI)", "smpicc": "libsimgrid-dev (SimGrid)"}
LOG = "build.log"


def installed() -> bool:
    """True in an installed package (no source checkout around it)."""
    return resources.source_root() is None


def build_dir() -> Path:
    """The directory holding bin/, lib/ and smpi/ of the runtime build in use."""
    env = os.environ.get("COLLSCHED_BUILD")
    if env:
        return Path(env)
    root = resources.source_root()
    return root / "build" if root is not None else resources.cache_dir() / "build"


def program(backend: str, name: str) -> Path:
    """The path of program `name` built for `backend` (mpi: Open MPI, smpi: SimGrid); in
    an installed package built first if missing."""
    path = build_dir() / ("smpi/bin" if backend == "smpi" else "bin") / name
    return _first_use(path) if installed() else path


def library(name: str) -> Path:
    """The path of the Open MPI build's shared library `name` (e.g. libcollsched-preload.so);
    in an installed package built first if missing."""
    path = build_dir() / "lib" / name
    return _first_use(path) if installed() else path


def require(path: Path, what: str = "make") -> Path:
    """`path` if it exists (in an installed package: once built), else one InputError
    saying how to build it."""
    if installed():
        _first_use(path)
    if not path.exists():
        raise InputError(str(path), "", f"not built: run `{what}` first")
    return path


# --- building in an installed package ----------------------------------------------------

def compiler(backend: str) -> str:
    """The compiler wrapper the runtime's make files use for `backend` (MPICC / SMPICC
    override them, as in runtime.mk)."""
    return os.environ.get("SMPICC" if backend == "smpi" else "MPICC") or (
        "smpicc" if backend == "smpi" else "mpicc")


def _missing_tool(tool: str, what: str) -> InputError:
    base = os.path.basename(tool.split()[0]) if tool.split() else tool
    kind = "smpicc" if "smpicc" in base else "mpicc" if "mpicc" in base else base
    install = PROVIDERS.get(kind, kind)
    return InputError(tool, "", f"not found: install {install} to build {what}")


def _first_use(path: Path) -> Path:
    """`path`, built first (with what it needs) if it is missing."""
    if path.exists():
        return path
    build = build_dir()
    try:
        rel = path.resolve().relative_to(build.resolve())
    except (ValueError, OSError):
        return path  # not a build product: the caller says what is missing
    backend = "smpi" if rel.parts[:1] == ("smpi",) else "mpi"
    build_targets([str(path)], [compiler(backend)], f"{path.name} ({backend})")
    return path


def _make_tree(build: Path) -> Path:
    """build/src: a Makefile that includes the shipped runtime/*.mk (their paths are
    relative to make's directory), and runtime/, a link to the shipped sources."""
    sources = resources.runtime_sources()
    if sources is None:
        raise InputError(str(resources.DATA / "runtime"), "",
                         "the runtime's sources, missing from this installation (reinstall collsched)")
    src = build / "src"
    src.mkdir(parents=True, exist_ok=True)
    link = src / "runtime"
    if not link.is_symlink() or os.readlink(link) != str(sources):
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(sources, target_is_directory=True)
    text = ("# Written by collsched (runtime_build.py): the runtime's build from the sources\n"
            "# the package ships. make RT_BUILD=DIR [targets]\n"
            f"VERSION := {__version__}\n"
            ".DELETE_ON_ERROR:\n.PHONY: all\nall: runtime lab measure\n"
            "include runtime/runtime.mk\ninclude runtime/lab/lab.mk\ninclude runtime/measure/measure.mk\n")
    makefile = src / "Makefile"
    if not makefile.is_file() or makefile.read_text() != text:
        tmp = makefile.with_name(f"Makefile.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, makefile)
    return src


def make_command(build: Path, targets: list[str]) -> list[str]:
    """The make command line that builds `targets` into `build` from the shipped sources."""
    return ["make", "--no-print-directory", "-C", str(_make_tree(build)), f"-j{os.cpu_count() or 1}",
            f"RT_BUILD={build.resolve()}", f"VERSION={__version__}", *targets]


def build_targets(targets: list[str], compilers: list[str], what: str, log: bool = True) -> None:
    """Builds make `targets` into build_dir() from the shipped sources, under a lock; one
    line on stderr first. log=True: make's output goes to build_dir()/build.log (a failure
    names it), else to the terminal. One InputError for any failure."""
    if shutil.which("make") is None:
        raise _missing_tool("make", what)
    for cc in compilers:
        if shutil.which(cc.split()[0] if cc.split() else cc) is None:
            raise _missing_tool(cc, what)
    build = build_dir()
    try:
        build.mkdir(parents=True, exist_ok=True)
        lock = open(build / ".build.lock", "w")
    except OSError as e:
        raise InputError(str(build), "", f"a writable build directory (set COLLSCHED_BUILD): {e.strerror}") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when closed
        if log and all(Path(t).exists() for t in targets):
            return  # another process built them while this one waited
        cmd = make_command(build, targets)
        needs = " / ".join(sorted({os.path.basename(c.split()[0]) for c in compilers})) or "mpicc / smpicc"
        print(f"collsched: building {what} into {build} (first use; needs {needs}) ..."
              if log else f"collsched: building the runtime into {build} (needs {needs})",
              file=sys.stderr, flush=True)
        if log:
            with open(build / LOG, "w") as out:
                status = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT)
        else:
            status = subprocess.call(cmd)
    missing = [t for t in targets if "/" in t and not Path(t).exists()]
    if status != 0 or missing:
        where = f": see {build / LOG}" if log else ""
        raise InputError("make", "", f"a successful build of {what} into {build} "
                                     f"(make exited {status}{', nothing built' if missing else ''}){where}")
