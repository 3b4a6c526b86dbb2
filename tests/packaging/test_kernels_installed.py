"""The kernels' loader in an installed package: the library stands next to kernels.h and no
C source (a wheel ships none), and the files' times are the install's: the staleness
check, which compares the library with its sources, must not refuse it. In a checkout (C
sources beside it) a library older than a source is still refused."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "compiler" / "collsched" / "kernels"


def _cc() -> str | None:
    return shutil.which(os.environ.get("CC") or "cc")


@pytest.fixture
def package(tmp_path):
    """A copy of the kernels package with a freshly built library, as a wheel lays it out."""
    cc = _cc()
    if cc is None:
        pytest.skip("no C compiler: the library cannot be built")
    d = tmp_path / "kernels"
    d.mkdir()
    shutil.copy(KERNELS / "__init__.py", d / "__init__.py")
    shutil.copy(KERNELS / "kernels.h", d / "kernels.h")
    subprocess.run([cc, "-std=c11", "-O2", "-fPIC", "-shared", "-ffp-contract=off", "-o",
                    str(d / "libcollsched_kernels.so"), *map(str, sorted(KERNELS.glob("*.c"))), "-lm"],
                   check=True)
    return d


def _status(d: Path, monkeypatch) -> str:
    monkeypatch.delenv("COLLSCHED_KERNELS", raising=False)
    monkeypatch.delenv("COLLSCHED_KERNELS_LIB", raising=False)
    spec = importlib.util.spec_from_file_location(f"kernels_copy_{id(d)}", d / "__init__.py")
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, mod)  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod.status()


def _age(path: Path, seconds: int):
    t = path.stat().st_mtime - seconds
    os.utime(path, (t, t))


def test_installed_library_is_used_whatever_the_header_time(package, monkeypatch):
    _age(package / "libcollsched_kernels.so", 100)  # installed before the header
    assert _status(package, monkeypatch) == "c"


def test_checkout_library_older_than_a_source_is_refused(package, monkeypatch):
    shutil.copy(KERNELS / "ring.c", package / "ring.c")
    _age(package / "libcollsched_kernels.so", 100)
    status = _status(package, monkeypatch)
    assert status.startswith("python (") and "is older than" in status, status


def test_missing_library_in_an_installation_says_why(package, monkeypatch):
    (package / "libcollsched_kernels.so").unlink()
    status = _status(package, monkeypatch)
    assert "built without a C compiler" in status, status
