"""The reduction cost gamma: collsched-gamma (runtime/measure/collsched_gamma.c) under real MPI
and SMPI, lab/gamma.py writing `reduction:` into a topology, and `collsched measure --gamma`.

Expectations: real MPI on one host measures a positive gamma of a plausible size (0.01 to
100 ns per byte: memory bandwidth); SMPI charges MPI_Reduce_local no simulated time, so the
measured gamma is 0 there (docs/measure.md, "Reduction cost (gamma)")."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from collsched.cli import main
from collsched.inputs.compute import reduction_gamma
from collsched.inputs.topology import load_topology, write_topology
from collsched.lab import gamma as gamma_mod
from collsched.lab import launch
from collsched.lab import measure as measure_mod
from collsched.lab.measure import MeasureConfig

ROOT = Path(__file__).resolve().parents[2]


def _need(launcher: str, backend: str) -> Path:
    if shutil.which(launcher) is None:
        pytest.skip(f"{launcher} is not installed")
    exe = measure_mod.program_path(backend, gamma_mod.PROGRAM)
    if not exe.exists():
        subprocess.run(["make", "-s", "measure"], cwd=ROOT, check=True, capture_output=True)
    return exe


def _run(backend, ranks, **kw):
    cfg = MeasureConfig(backend=backend, ranks=ranks, platform_from="tryton-48" if backend == "smpi" else None)
    exe = _need("smpirun" if backend == "smpi" else "mpirun", backend)
    return gamma_mod.run_gamma(cfg, measure_mod._launch, exe, sizes=(4096, 65536, 1048576), repeats=3, **kw)


@pytest.mark.mpi
def test_real_mpi_gamma_is_positive_and_plausible():
    raw = _run("mpi", 2)
    g = raw["gamma_s_per_byte"]
    assert 1e-11 < g < 1e-7, raw
    assert len(raw["gamma_s_per_byte_rank"]) == 2 and len(raw["time_s"][0]) == 3
    assert raw["smpi"] == 0


def test_smpi_charges_reductions_nothing():
    raw = _run("smpi", 4)
    assert raw["gamma_s_per_byte"] == 0.0 and raw["smpi"] == 1
    assert all(t < 1e-6 for row in raw["time_s"] for t in row)


def test_program_rejects_bad_arguments_one_line():
    exe = _need("mpirun", "mpi")
    cmd, extra = launch.make_launcher(None, None, None).command(1, [str(exe), "--sizes", "5"])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                          env={**os.environ, **extra})
    assert proc.returncode != 0
    lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.startswith("collsched-gamma:")]
    assert lines == ["collsched-gamma: --sizes: expected 2 to 32 comma-separated byte counts, "
                     "8 to 2^30, found 5"]


def test_check_result_refuses_what_the_program_did_not_write():
    good = {"format": gamma_mod.FORMAT, "ranks": 2, "gamma_median_s_per_byte": 2e-10}
    assert gamma_mod.check_result(good, 2) == 2e-10
    for raw, ranks in (({**good, "format": "other"}, 2), (good, 3), ([], 2),
                       ({**good, "gamma_median_s_per_byte": -1.0}, 2),
                       ({**good, "gamma_median_s_per_byte": True}, 2)):
        with pytest.raises(gamma_mod.GammaRunError):
            gamma_mod.check_result(raw, ranks)


def test_add_to_topology_replaces_and_loads(tmp_path):
    path = tmp_path / "t.yaml"
    write_topology(load_topology("tryton-48", 4), path)
    before = load_topology(path).digest()
    gamma_mod.add_to_topology(path, 3e-10, comment="first")
    gamma_mod.add_to_topology(path, 4e-10, comment="second")
    text = path.read_text()
    assert text.count("reduction:") == 1 and "# second" in text
    t = load_topology(path)
    assert reduction_gamma(t) == 4e-10 and t.digest() != before
    gamma_mod.add_to_topology(path, 0.0)
    assert reduction_gamma(load_topology(path)) == 0.0 and load_topology(path).digest() == before


def test_add_to_a_broken_topology_changes_nothing(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: [\n")
    with pytest.raises(Exception):
        gamma_mod.add_to_topology(path, 1e-10)
    assert path.read_text() == "name: [\n"


def test_measure_writes_the_reduction_section(tmp_path, capsys):
    _need("smpirun", "smpi")
    if not measure_mod.program_path("smpi").exists():
        pytest.skip("collsched-measure (smpi) is not built")
    out = tmp_path / "m.yaml"
    rc = main(["measure", "--backend", "smpi", "--ranks", "3", "--platform-from", "tryton-48",
               "--capacity", "off", "--sweep", "off", "--sizes", "1,64KiB", "--repeats", "1",
               "-o", str(out), "--json"])
    assert rc == 0, capsys.readouterr().err
    report = json.loads(capsys.readouterr().out)
    assert report["reduction"]["gamma_s_per_byte"] == 0.0
    assert "reduction: {gamma_s_per_byte: 0.0}" in out.read_text()
    assert reduction_gamma(load_topology(out)) == 0.0
    out2 = tmp_path / "n.yaml"
    assert main(["measure", "--backend", "smpi", "--ranks", "3", "--platform-from", "tryton-48",
                 "--capacity", "off", "--sweep", "off", "--sizes", "1,64KiB", "--repeats", "1",
                 "--gamma", "off", "-o", str(out2)]) == 0
    assert "reduction" not in out2.read_text()
