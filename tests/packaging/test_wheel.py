"""The wheel and the sdist are the whole tool (issue 23, item 1; docs/install.md).

The wheel is built from this checkout (pip wheel --no-build-isolation: no download) and
installed with --no-deps into a fresh venv; every command then runs from a directory
outside the checkout, with XDG_CACHE_HOME in tmp and COLLSCHED_BUILD unset: compile (the
wheel's C kernels in use), verify, simulate (the bundled topology found by its
`topologies/NAME.yaml` name), bench and measure under SimGrid (the C programs built on
first use into the user cache). The site-packages root gains the package's own files only.

The dependencies (numpy, networkx, ...) come from the dev venv without a download: a .pth
file in the fresh venv names a directory of links to the dev venv's site-packages entries,
all but collsched's own (its editable .pth and dist-info) and pip/setuptools. A .pth adds
that directory to sys.path, it does not run the .pth files in it, and the entries linked
leave the dev venv's collsched out: what `import collsched` finds can only be the wheel's
(asserted: collsched.__file__ is inside the fresh venv, the checkout's compiler/ is not on
sys.path).

The builds write into the checkout (setuptools' build/python, its egg-info, the sdist's
release tree): they run under a lock (build/packaging-test.lock), so two test runs at once
do not build over each other.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEV_SITE = Path(sysconfig.get_paths()["purelib"])
VERSION = next(line.split('"')[1] for line in (ROOT / "compiler/collsched/__init__.py").read_text().splitlines()
               if line.startswith("__version__ = "))
TIMEOUT = 300
HAVE_SMPI = shutil.which("smpicc") is not None and shutil.which("smpirun") is not None
NO_SMPI = "smpicc/smpirun not found (install libsimgrid-dev): the SimGrid programs cannot be built"
KERNEL_SOURCES = sorted(p.name for p in (ROOT / "compiler/collsched/kernels").glob("*.c"))
# What the dev venv lends the fresh one: not collsched, not the installers.
NOT_LENT = ("collsched", "__editable__", "pip", "setuptools", "_distutils_hack", "pkg_resources",
            "wheel", "__pycache__")


def run(cmd, **kw):
    kw.setdefault("timeout", TIMEOUT)
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)


def ok(done):
    assert done.returncode == 0, f"{' '.join(done.args)}\nexit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


class _BuildLock:
    """Serializes this module's builds in the checkout across processes."""

    def __enter__(self):
        (ROOT / "build").mkdir(exist_ok=True)
        self.f = open(ROOT / "build" / "packaging-test.lock", "w")
        fcntl.flock(self.f, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        self.f.close()


def _build_sdist(out: Path, cwd: Path = ROOT) -> Path:
    # PEP 517's build_sdist hook, as `python -m build --sdist --no-isolation` calls it.
    code = "import sys; from setuptools import build_meta; print(build_meta.build_sdist(sys.argv[1]))"
    done = ok(run([sys.executable, "-c", code, out], cwd=cwd))
    return out / done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The wheel and the sdist, built from the checkout."""
    tmp = tmp_path_factory.mktemp("packaging")
    with _BuildLock():
        done = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w",
                    tmp / "wheel", ROOT], cwd=ROOT)
        assert done.returncode == 0, ("pip wheel failed (the dev venv needs setuptools>=70.1: make deps)\n"
                                      + done.stdout[-3000:] + done.stderr[-3000:])
        sdist = _build_sdist(tmp / "sdist")
    wheel = next((tmp / "wheel").glob("collsched-*.whl"))
    return {"tmp": tmp, "wheel": wheel, "sdist": sdist}


def _fresh_venv(tmp: Path) -> tuple[Path, Path]:
    """A venv without pip (the dev venv's pip installs into it), its dependencies lent."""
    venv = tmp / "venv"
    ok(run([sys.executable, "-m", "venv", "--without-pip", venv]))
    py = venv / "bin" / "python"
    site = Path(ok(run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])).stdout.strip())
    lent = tmp / "lent-site-packages"
    lent.mkdir()
    for entry in DEV_SITE.iterdir():
        if not entry.name.startswith(NOT_LENT) and not entry.name.endswith(".pth"):
            (lent / entry.name).symlink_to(entry)
    (site / "collsched-test-deps.pth").write_text(f"{lent}\n")
    return venv, site


@pytest.fixture(scope="module")
def installed(built):
    tmp = built["tmp"]
    venv, site = _fresh_venv(tmp)
    before = {p.name for p in site.iterdir()}
    ok(run([sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "--no-deps",
            "--no-index", built["wheel"]]))
    work = tmp / "work"  # outside the checkout
    work.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("COLLSCHED_BUILD", "COLLSCHED_KERNELS", "COLLSCHED_KERNELS_LIB", "PYTHONPATH")}
    env["XDG_CACHE_HOME"] = str(tmp / "cache")
    return {"venv": venv, "site": site, "before": before, "work": work, "env": env,
            "cli": venv / "bin" / "collsched", "py": venv / "bin" / "python",
            "build": tmp / "cache" / "collsched" / VERSION / "build"}


def cli(inst, *args, env=None):
    return run([inst["cli"], *args], cwd=inst["work"], env=env or inst["env"])


# --- what was built ------------------------------------------------------------------------

def test_wheel_holds_the_package_only(built):
    names = zipfile.ZipFile(built["wheel"]).namelist()
    top = {n.split("/")[0] for n in names}
    assert top == {"collsched", f"collsched-{VERSION}.dist-info"}, top
    assert "collsched/kernels/libcollsched_kernels.so" in names
    assert "collsched/kernels/kernels.h" in names
    assert not [n for n in names if n.startswith("collsched/kernels/") and n.endswith(".c")]
    for pattern in ("*.yaml", "*.xml", "*.hosts"):  # the topologies and the platforms' files
        for topo in (ROOT / "topologies").glob(pattern):
            assert f"collsched/data/topologies/{topo.name}" in names
    for src in [*(ROOT / "runtime/src").glob("*.c"), ROOT / "runtime/runtime.mk",
                ROOT / "runtime/lab/lab.mk", ROOT / "runtime/measure/measure.mk"]:
        assert f"collsched/data/{src.relative_to(ROOT).as_posix()}" in names
    # After `make runtime`, build/lib holds the runtime's libraries: none is in the wheel.
    runtime_lib = {p.name for p in (ROOT / "build" / "lib").glob("*")} if (ROOT / "build/lib").is_dir() else set()
    assert not [n for n in names if n.rsplit("/", 1)[-1] in runtime_lib and "/data/" not in n]
    assert not [n for n in names if n.endswith((".o", ".a")) or ".so." in n]


def test_sdist_holds_the_sources_and_builds_the_wheel(built, tmp_path):
    with tarfile.open(built["sdist"]) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
        tar.extractall(tmp_path, filter="data")
    for c in KERNEL_SOURCES + ["kernels.h"]:
        assert f"compiler/collsched/kernels/{c}" in names
    for pattern in ("*.yaml", "*.xml", "*.hosts"):
        for topo in (ROOT / "topologies").glob(pattern):
            assert f"topologies/{topo.name}" in names
    for src in [*(ROOT / "runtime/src").glob("*"), *(ROOT / "runtime/include").glob("*.h"),
                ROOT / "runtime/runtime.mk", ROOT / "runtime/lab/minibench.c",
                ROOT / "runtime/measure/collsched_measure.c", ROOT / "runtime/collsched.pc.in"]:
        assert src.relative_to(ROOT).as_posix() in names
    assert "setup.py" in names and "MANIFEST.in" in names
    assert not [n for n in names if n.endswith((".so", ".o", ".a"))]
    # pip install of the sdist: its wheel, built from the unpacked tree alone; first
    # without a C compiler (a warning, the Python paths), then with one (the kernels).
    tree = tmp_path / built["sdist"].name.removesuffix(".tar.gz")
    for cc, out in (("no-such-cc", "wheel-nocc"), (os.environ.get("CC", "cc"), "wheel")):
        done = ok(run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation",
                       "-w", tmp_path / out, f"./{tree.name}"], cwd=tmp_path, env=dict(os.environ, CC=cc)))
        wheel = zipfile.ZipFile(next((tmp_path / out).glob("*.whl"))).namelist()
        has_kernels = "collsched/kernels/libcollsched_kernels.so" in wheel
        assert has_kernels == (out == "wheel"), (cc, out)
        assert ("WARNING: no C compiler (no-such-cc not found)" in done.stdout + done.stderr) == (out != "wheel")
        assert "collsched/data/topologies/tryton-48.yaml" in wheel
        assert "collsched/data/runtime/runtime.mk" in wheel


# --- the installed tool ---------------------------------------------------------------------

def test_site_packages_gains_only_the_package(installed):
    added = {p.name for p in installed["site"].iterdir()} - installed["before"]
    assert added == {"collsched", f"collsched-{VERSION}.dist-info"}, added


def test_the_wheels_package_is_imported(installed):
    code = ("import sys, collsched, collsched.kernels as k, collsched.resources as r; "
            "print(collsched.__file__); print(k.status()); print(r.topology_path('topologies/tryton-48.yaml')); "
            f"print({str(ROOT / 'compiler')!r} in sys.path)")
    out = ok(run([installed["py"], "-c", code], cwd=installed["work"], env=installed["env"])).stdout.split("\n")
    assert Path(out[0]).is_relative_to(installed["venv"]), out[0]
    assert out[1] == "c", out[1]
    assert Path(out[2]) == installed["site"] / "collsched/data/topologies/tryton-48.yaml"
    assert out[3] == "False"


def test_compile_verify_simulate(installed):
    done = ok(cli(installed, "compile", "--algorithm", "min3", "--ranks", "48", "--bytes", "64KiB",
                  "--topology", "topologies/tryton-48.yaml", "-o", "min3.sched", "--json"))
    res = json.loads(done.stdout)
    assert res["kernels"] == "c", res["kernels"]
    assert res["ranks"] == 48
    assert "valid" in ok(cli(installed, "verify", "min3.sched")).stdout
    sim = ok(cli(installed, "simulate", "min3.sched", "--topology", "topologies/tryton-48.yaml", "--json"))
    assert json.loads(sim.stdout)
    # Not a bundled name: the one error line names the path as given.
    bad = cli(installed, "simulate", "min3.sched", "--topology", "topologies/no-such.yaml")
    assert bad.returncode == 2 and "topologies/no-such.yaml" in bad.stderr


@pytest.mark.smpi
@pytest.mark.skipif(not HAVE_SMPI, reason=NO_SMPI)
def test_bench_smpi_builds_on_first_use(installed):
    assert not (installed["build"] / "smpi/bin/collsched-minibench").exists()
    done = ok(cli(installed, "bench", "--backend", "smpi", "--ranks", "4", "--bytes", "4KiB", "--iterations", "1", "--algorithms", "ring,native", "--json"))
    first = [line for line in done.stderr.splitlines() if "first use" in line]
    assert len(first) == 1 and str(installed["build"]) in first[0], done.stderr
    results = {r["algorithm"]: r for r in json.loads(done.stdout)["results"]}
    assert results["ring"]["data_ok"] and results["native"]["data_ok"]
    assert Path(results["ring"]["command"][0]).name == "smpirun"
    assert str(installed["build"] / "smpi/bin/collsched-minibench") in results["ring"]["command"]
    # Built once: a second run says nothing about building.
    again = ok(cli(installed, "bench", "--backend", "smpi", "--ranks", "4", "--bytes", "4KiB",
                   "--iterations", "1", "--algorithms", "ring"))
    assert "first use" not in again.stderr
    # A bundled topology by its checkout path, from outside the checkout (the lab's network
    # setup rewrites it for SimGrid, so it is read there too).
    grid = ok(cli(installed, "bench", "--backend", "smpi", "--topology", "topologies/tryton-48.yaml",
                  "--ranks", "4", "--bytes", "4KiB", "--iterations", "1", "--algorithms", "ring", "--json"))
    row = json.loads(grid.stdout)["results"][0]
    assert row["data_ok"] and "tryton" in json.dumps(json.loads(grid.stdout)["inputs"])


@pytest.mark.smpi
@pytest.mark.skipif(not HAVE_SMPI, reason=NO_SMPI)
def test_measure_smpi_two_first_uses_build_once(installed, tmp_path):
    env = dict(installed["env"], XDG_CACHE_HOME=str(tmp_path / "cache"))
    args = ["measure", "--backend", "smpi", "--ranks", "2", "--platform-from", "topologies/tryton-48.yaml",
            "--sweep", "off", "--sizes", "1,64KiB"]
    procs = [subprocess.Popen([str(installed["cli"]), *args, "-o", f"m{i}.yaml"], cwd=installed["work"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    outs = [p.communicate(timeout=TIMEOUT) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    assert sum("first use" in err for _, err in outs) == 1, [err for _, err in outs]
    for i in range(2):
        text = (installed["work"] / f"m{i}.yaml").read_text()
        assert "latency" in text
    assert (tmp_path / "cache" / "collsched" / VERSION / "build/smpi/bin/collsched-measure").is_file()


@pytest.mark.smpi
@pytest.mark.skipif(not HAVE_SMPI, reason=NO_SMPI)
def test_first_use_without_the_compiler_is_one_error(installed, tmp_path):
    env = dict(installed["env"], XDG_CACHE_HOME=str(tmp_path / "cache"), SMPICC="no-such-smpicc")
    done = run([installed["cli"], "measure", "--backend", "smpi", "--ranks", "2", "--platform-from",
                "tryton-48", "--sweep", "off", "-o", "x.yaml"], cwd=installed["work"], env=env)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "no-such-smpicc" in lines[0] and "libsimgrid-dev" in lines[0], done.stderr
    assert not (installed["work"] / "x.yaml").exists()


@pytest.mark.mpi
@pytest.mark.skipif(shutil.which("mpicc") is None, reason="mpicc not found (install libopenmpi-dev)")
def test_build_runtime_builds_everything_into_the_cache(installed):
    done = ok(cli(installed, "build-runtime"))
    assert f"build-runtime: built in {installed['build']}" in done.stdout
    for built in ("bin/collsched-run", "bin/collsched-minibench", "bin/collsched-measure",
                  "lib/libcollsched-preload.so", "lib/libcollsched.a", "include/collsched.h"):
        assert (installed["build"] / built).exists(), built
    # Once built, nothing is compiled again.
    again = ok(cli(installed, "build-runtime")).stdout.splitlines()
    assert not [line for line in again if line.startswith(("mpicc ", "smpicc ", "mpifort "))], again
