"""The package build of collsched (pyproject.toml holds the metadata): what `pip install .`,
`pip wheel .` and an sdist's build add to setuptools' defaults (docs/install.md).

1. The compiler's C kernels (compiler/collsched/kernels/*.c) are compiled into
   collsched/kernels/libcollsched_kernels.so with the flags of the Makefile's `kernels`
   target (a plain shared library loaded with ctypes, not a CPython extension). Without a
   C compiler (or when it fails) the build still succeeds, with a warning: the compiler
   then runs its Python paths (same results, slower). CC chooses the compiler (default cc).
   An editable install (`pip install -e .`) builds it in place, as `make kernels` does.
2. Package data the wheel needs and the source tree keeps elsewhere: the bundled topologies
   (topologies/*.yaml) and the runtime's sources (runtime/...: what the C programs of the
   lab, `measure` and the runtime are built from on first use, collsched/runtime_build.py)
   are copied into collsched/data/ of the build. An editable install copies nothing: the
   package finds them in the checkout (collsched/resources.py).
3. setuptools builds under build/python, never build/lib: that is the runtime's (make), and
   whatever stands in setuptools' build/lib lands in the root of site-packages.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
KERNELS_DIR = "compiler/collsched/kernels"
KERNELS_EXT = "collsched.kernels.libcollsched_kernels"
# As the Makefile's `kernels` target (less -g and -Werror: a newer compiler's new warning
# must not fail an install). -ffp-contract=off: the kernels give the Python references'
# bits (no fused multiply-add).
KERNEL_FLAGS = ["-std=c11", "-O2", "-fPIC", "-shared", "-ffp-contract=off", "-Wall", "-Wextra"]
# An editable install (a checkout: `make deps`) builds exactly as `make kernels` does, so the
# Makefile's -Werror gate still holds there (the in-place library it leaves, make keeps).
EDITABLE_FLAGS = ["-g", "-Werror"]
# What collsched/data/ holds, as globs relative to the source tree (a file added to one of
# these directories later is shipped without a change here).
DATA = {
    "topologies": ["topologies/*.yaml", "topologies/*.xml", "topologies/*.hosts"],
    # Everything of runtime/ (make files, templates, src/, include/, lab/, measure/, the
    # Fortran test programs...) but what needs the checkout: the benchmark scripts (they
    # write docs/benchmarks.md) and the fuzzer (clang, its corpus).
    "runtime": ["runtime/**/*"],
}
SKIP_DIRS = {"runtime/bench", "runtime/fuzz", "__pycache__"}
# Never shipped: build products and caches that may sit in those directories.
SKIP_SUFFIXES = (".o", ".a", ".so", ".pyc", ".tmp")


def _shipped(f: Path) -> bool:
    rel = f.relative_to(HERE).as_posix()
    return (f.is_file() and not f.name.endswith(SKIP_SUFFIXES)
            and not any(rel.startswith(d + "/") or f"/{d}/" in f"/{rel}" for d in SKIP_DIRS))


def warn(text: str) -> None:
    print(f"collsched build: WARNING: {text}", file=sys.stderr, flush=True)


class BuildKernels(build_ext):
    """Compiles the kernels into one shared library (no Python ABI: the name carries no
    extension suffix); a failure is a warning, not a failed build."""

    def get_ext_filename(self, fullname):
        # Called with the full name or its last part only (distutils' get_ext_fullpath).
        parts = fullname.split(".")
        if parts[-1] == KERNELS_EXT.rpartition(".")[2]:
            return os.path.join(*parts) + ".so"
        return super().get_ext_filename(fullname)

    def _inplace(self) -> Path:
        """Where the library stands in the source tree (`make kernels` writes it there too)."""
        return HERE / KERNELS_DIR / "libcollsched_kernels.so"

    def build_extension(self, ext):
        if ext.name != KERNELS_EXT:
            return super().build_extension(ext)
        out = Path(self.get_ext_fullpath(ext.name))
        sources = [HERE / s for s in ext.sources]
        inputs = sources + list((HERE / KERNELS_DIR).glob("*.h"))
        if self.force:
            pass
        elif (self.editable_mode or self.inplace) and _newer_than(self._inplace(), inputs):
            return  # an editable install with a current in-place build (make kernels): keep it
        elif _newer_than(out, inputs):
            return
        cc = shlex.split(os.environ.get("CC") or "cc")
        if not cc or shutil.which(cc[0]) is None:
            warn(f"no C compiler ({' '.join(cc) or 'CC is empty'} not found): the compiler's C kernels are "
                 "not built; collsched runs its Python paths (same results, slower; compile --json "
                 "says \"kernels\")")
            return
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        flags = KERNEL_FLAGS + (EDITABLE_FLAGS if self.editable_mode or self.inplace else [])
        cmd = [*cc, *flags, "-o", str(tmp), *map(str, sources), "-lm"]
        print(" ".join(cmd), flush=True)
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.stdout:
            print(done.stdout, end="", file=sys.stderr)
        if done.returncode != 0 or not tmp.is_file():
            tmp.unlink(missing_ok=True)
            warn(f"{cc[0]} failed (exit {done.returncode}): the compiler's C kernels are not built; "
                 "collsched runs its Python paths (same results, slower)")
            return
        os.replace(tmp, out)

    def copy_extensions_to_source(self):
        # An editable install: the library into the source tree, replaced whole (a process
        # loading it meanwhile sees the old file or the new one); nothing when the build
        # above was skipped or only warned.
        others = [e for e in self.extensions if e.name != KERNELS_EXT]
        inplace, self.inplace = self.inplace, 0
        try:
            built = Path(self.get_ext_fullpath(KERNELS_EXT))  # in the build directory
        finally:
            self.inplace = inplace
        target = self._inplace()
        if len(others) < len(self.extensions) and built.is_file() and built.resolve() != target.resolve():
            tmp = target.with_name(target.name + ".tmp")
            shutil.copy2(built, tmp)
            os.replace(tmp, target)
        kept, self.extensions = self.extensions, others
        try:
            super().copy_extensions_to_source()
        finally:
            self.extensions = kept


def _newer_than(path: Path, inputs) -> bool:
    """`path` exists and no input is newer."""
    return path.is_file() and all(i.stat().st_mtime <= path.stat().st_mtime for i in inputs)


class BuildPy(build_py):
    """build_py, then the package data kept outside the package (DATA) into collsched/data/."""

    def run(self):
        editable = getattr(self, "editable_mode", False)
        if not editable:
            # Nothing stale from an earlier build (a module removed since, an old library)
            # reaches the wheel: the package is laid out anew (build_ext runs after this).
            shutil.rmtree(Path(self.build_lib) / "collsched", ignore_errors=True)
        super().run()
        if editable:
            return  # the checkout itself serves them (collsched/resources.py)
        data = Path(self.build_lib) / "collsched" / "data"
        for name, patterns in DATA.items():
            files = sorted({f for p in patterns for f in HERE.glob(p) if _shipped(f)})
            if not files:
                raise SystemExit(f"collsched build: {', '.join(patterns)}: no files found in {HERE} "
                                 "(build from a source checkout or an sdist)")
            for f in files:
                rel = f.relative_to(HERE)
                target = data / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(f, target)


kernel_sources = sorted(str(p.relative_to(HERE)) for p in (HERE / KERNELS_DIR).glob("*.c"))

setup(
    ext_modules=[Extension(KERNELS_EXT, sources=kernel_sources)] if kernel_sources else [],
    cmdclass={"build_ext": BuildKernels, "build_py": BuildPy},
    options={"build": {"build_base": "build/python"}},
)
