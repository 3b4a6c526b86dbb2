"""The scale suite with compact schedules (lab/scale_compact.py) at P = 64: sampled shared
buffers (collsched-run --shared-sample) check real data, a wrong byte fails the run, the
simulated times do not depend on the sampling, the ring meets its model, the records and
the docs section are written. About 15 s."""
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from collsched.lab import scale_compact as sc
from collsched.lab.benchdoc import replace_section
from collsched.runtime_build import build_dir

BUILD = build_dir()
RUN = BUILD / "smpi" / "bin" / "collsched-run"
P = 64

pytestmark = [pytest.mark.smpi]


@pytest.fixture(autouse=True)
def _need_smpi():
    if shutil.which("smpirun") is None or not RUN.exists():
        pytest.skip("SimGrid SMPI or build/smpi/bin/collsched-run missing (make runtime-smpi)")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The cluster's platform and a compact ring record at P = 64."""
    d = tmp_path_factory.mktemp("scale-compact")
    case = sc.Case(P, "cluster", "ring", "native:ompi")
    files = sc.platform_files(case, None, d, "CM02")
    sched = sc.compile_compact(case, None, d / "ring.sched")
    return d, case, files, sched


def _run(setup, *extra, sample=8, shared=True):
    d, case, files, sched = setup
    cmd = sc.smpi_command(case, sched, files, "native:ompi", sample)
    cmd = cmd[:cmd.index(str(sched)) + 1] + ["--bytes", "65536", "--iterations", "2", "--warmup", "0",
                                              "--json", "--samples", *extra]
    if shared:
        cmd += ["--shared-sample", str(sample)]
    out = subprocess.run(cmd, cwd=d, capture_output=True, text=True, timeout=120)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("{")), None)
    return out.returncode, (json.loads(line) if line else None), out.stderr


def test_sampled_origins_are_checked_and_the_same_time_as_private_buffers(setup):
    rc, res, err = _run(setup)
    assert rc == 0, err
    assert res["data_ok"] and res["used_schedule"]
    s = res["sampled_origins"]
    assert len(s) == 8 and s == sorted(set(s)) and s[0] == 0 and s[-1] == P - 1
    assert res["checked_bytes_per_block"] == 4096
    # Every byte private and checked: the same simulated times (SimGrid's timing does not
    # see which bytes are shared).
    rc2, full, err2 = _run(setup, shared=False)
    assert rc2 == 0 and full["data_ok"], err2
    assert "sampled_origins" not in full
    assert full["samples_s"] == res["samples_s"]


def test_a_wrong_sampled_byte_fails_the_run(setup):
    # --inject-error flips the first byte of origin 0's block (always sampled) on the last rank.
    rc, res, _ = _run(setup, "--inject-error")
    assert rc == 1 and res is not None and res["data_ok"] is False


def test_every_origin_sampled_when_k_reaches_p(setup):
    rc, res, err = _run(setup, sample=P + 5)
    assert rc == 0 and res["data_ok"], err
    assert res["sampled_origins"] == list(range(P))


@pytest.mark.parametrize("bad", [["--in-place"], ["--allgatherv"], ["--all-modes"]])
def test_sampling_refuses_other_layouts(setup, bad):
    rc, res, err = _run(setup, *bad)
    assert rc == 2 and res is None and "--shared-sample" in err


def test_unaligned_bytes_refused(setup):
    d, case, files, sched = setup
    cmd = sc.smpi_command(case, sched, files, "native:ompi", 8)
    cmd[cmd.index("--bytes") + 1] = "65000"
    out = subprocess.run(cmd, cwd=d, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "expected a positive multiple of 4096" in out.stderr


def test_suite_records_cluster_and_grid(tmp_path):
    records = tmp_path / "records.json"
    pairs = {"cluster": (("ring", "native:ompi"),), "grid": (("hier", "native:mpich"),)}
    rows, failures = sc.run_suite([P], records, sample=8, pairs=pairs, workdir=str(tmp_path / "wd"))
    assert failures == []
    by = {r["topology"]: r for r in rows}
    ring, hier = by["cluster"], by["grid"]
    for r in rows:
        assert r["data_ok"] and r["used_schedule"] and r["sampled_origins"] == 8
        assert r["warmup"] == 1 and r["cpu_s"] > 0 and r["wall_s"] > 0
        assert r["messages"] == P * (P - 1)  # ring and hier: one message per block and receiver
    # The ring on the homogeneous cluster: within 2% of its (exact) class-DAG model once
    # the setup is outside the timed call.
    assert 0.98 < ring["ratio"] < 1.02
    assert ring["record_bytes"] == 56
    # hier on the grid beats the library's ring-like allgather across the WAN.
    assert hier["simulated_s"] < hier["native_simulated_s"]
    assert hier["predicted_s"] > 0 and hier["record_bytes"] > 56
    # The records merge by key; the section is written between its markers only.
    again = sc.save_records(records, [dict(ring, simulated_s=1.0)])
    assert len(again) == 2 and {r["simulated_s"] for r in again if r["topology"] == "cluster"} == {1.0}
    doc = tmp_path / "bench.md"
    doc.write_text("# Benchmarks\n\n<!-- BEGIN other -->\nkeep\n<!-- END other -->\n")
    md = sc.markdown(rows, ["P = 4096 ...: did not finish"])
    replace_section(doc, sc.SECTION, md)
    text = doc.read_text()
    assert "keep" in text and f"<!-- BEGIN {sc.SECTION} -->" in text and "did not finish" in text
    assert "| 64 | cluster | compact ring | 56 |" in text


def test_grid_topology_scales_the_sites(tmp_path):
    path = sc.grid_topology(64, tmp_path)
    text = path.read_text()
    assert text.count("hosts: 8,") == 8 and "name: grid-8x8" in text
    assert sc.grid_topology(4096, tmp_path) == sc.GRID_FILE
    with pytest.raises(sc.InputError):
        sc.grid_topology(60, tmp_path)


def test_a_launch_past_its_time_out_is_stopped_and_says_what_it_used(tmp_path):
    with pytest.raises(sc.ScaleRunError, match=r"did not finish within 0.5 s \(stopped after"):
        sc.launch(["sleep", "30"], tmp_path, timeout_s=0.5, period_s=0.1)
    failed = {"ranks": 4096, "topology": "cluster", "algorithm": "ring", "native": "native:ompi",
              "warmup": 1, "failed": "P = 4096, cluster, ring with native:ompi: did not finish"}
    rows = sc.save_records(tmp_path / "r.json", [failed])
    md = sc.markdown(rows)
    assert "No records yet." in md and "- P = 4096, cluster, ring with native:ompi: did not finish" in md
