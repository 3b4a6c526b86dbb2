"""The collectives lab (issue 18): small SMPI runs of alltoall, bcast, reduce and allreduce,
compiled and native, with every byte checked against the driver's closed-form reference;
the driver's check failing on a corrupted result; the native vocabulary; the reports and
the suite's target table built from them; the command line's bad inputs."""
import json
import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from collsched.cli import main
from collsched.errors import InputError
from collsched.lab import coll_natives, coll_report, faraj
from collsched.lab.coll_bench import CollConfig, measured, run_coll, split_name
from collsched.runtime_build import build_dir

SMPI_BENCH = build_dir() / "smpi" / "bin" / "collsched-coll-bench"
TRYTON = "topologies/tryton-48.yaml"


def need_smpi():
    if shutil.which("smpirun") is None or not SMPI_BENCH.exists():
        pytest.skip("SimGrid SMPI or build/smpi/bin/collsched-coll-bench missing (make lab)")


def need_compiler():
    pytest.importorskip("collsched.collectives.compile")


def rows(report):
    return {r["algorithm"]: r for r in report["results"]}


# ---- the driver alone ------------------------------------------------------------------------

def _driver(tmp_path, ranks, *args):
    from collsched.lab.platform import build_platform
    from collsched.pipeline import resolve_topology

    xml, hosts = build_platform(resolve_topology(ranks, None, None)).write(tmp_path)
    done = subprocess.run(["smpirun", "-np", str(ranks), "-platform", str(xml), "-hostfile", str(hosts),
                           "--cfg=network/model:CM02", "--log=root.thres:critical", str(SMPI_BENCH), *args],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("{")), None)
    return done, (json.loads(line) if line else None)


@pytest.mark.smpi
@pytest.mark.parametrize("coll", ["alltoall", "bcast", "reduce", "allreduce"])
def test_driver_checks_every_byte_and_catches_a_flipped_one(tmp_path, coll):
    need_smpi()
    base = ["--collective", coll, "--bytes", "4096", "--iterations", "2", "--root", "2", "--native",
            "--max-delay-ms", "3"]
    done, out = _driver(tmp_path, 5, *base)
    assert done.returncode == 0, done.stderr[-500:]
    assert out["data_ok"] and out["errors"] == 0
    # every byte of every result: alltoall P blocks at every rank, bcast the buffer at every
    # rank, reduce the root's vector, allreduce every rank's
    per = {"alltoall": 5 * 5 * 4096, "bcast": 5 * 4096, "reduce": 4096, "allreduce": 5 * 4096}[coll]
    assert out["checked_bytes"] == 2 * per
    assert np.array(out["arrivals"]).shape == (2, 5)
    done, out = _driver(tmp_path, 5, *base, "--inject-error")
    assert done.returncode == 0
    assert not out["data_ok"] and out["errors"] >= 1


@pytest.mark.smpi
def test_driver_reductions_double_max_and_in_place(tmp_path):
    need_smpi()
    for extra in (["--dtype", "double", "--op", "max"], ["--in-place"], ["--in-place", "--op", "max"]):
        for coll in ("reduce", "allreduce"):
            done, out = _driver(tmp_path, 4, "--collective", coll, "--bytes", "8192", "--iterations", "1",
                                "--native", *extra)
            assert done.returncode == 0 and out["data_ok"], (coll, extra, done.stderr[-300:])
    done, out = _driver(tmp_path, 4, "--collective", "alltoall", "--bytes", "1000", "--iterations", "1",
                        "--native", "--in-place")
    assert out["data_ok"]


@pytest.mark.smpi
def test_driver_refuses_bad_options(tmp_path):
    need_smpi()
    for args in (["--collective", "gather", "--bytes", "8"], ["--collective", "allreduce", "--bytes", "6"],
                 ["--collective", "bcast", "--bytes", "8", "--root", "9"], ["--bytes", "8"]):
        done, out = _driver(tmp_path, 2, *args)
        assert done.returncode != 0 and out is None
        assert "collsched-coll-bench:" in done.stderr


# ---- natives ----------------------------------------------------------------------------------

def test_native_vocabulary_maps_each_backend():
    n = coll_natives.resolve("allreduce", "native:ring", "smpi")
    assert n.smpi_cfg == "--cfg=smpi/allreduce:lr"
    n = coll_natives.resolve("allreduce", "native:ring", "mpi")
    assert n.mca == {"coll_tuned_use_dynamic_rules": "1", "coll_tuned_allreduce_algorithm": "4"}
    assert coll_natives.resolve("alltoall", "native:pair", "smpi").smpi_cfg == "--cfg=smpi/alltoall:pair"
    assert coll_natives.resolve("bcast", "native:ompi", "smpi").smpi_cfg == "--cfg=smpi/coll-selector:ompi"
    assert coll_natives.resolve("reduce", "native:default", "smpi").smpi_cfg == "--cfg=smpi/reduce:default"
    assert coll_natives.resolve("reduce", "native:7", "mpi").mca["coll_tuned_reduce_algorithm"] == "7"
    with pytest.raises(InputError, match="not on --backend mpi"):
        coll_natives.resolve("alltoall", "native:ring", "mpi")
    with pytest.raises(InputError, match="tuned id 0..5"):
        coll_natives.resolve("alltoall", "native:6", "mpi")
    with pytest.raises(InputError, match="power-of-two"):
        coll_natives.check_ranks("alltoall", "native:pairwise", "smpi", 6)
    coll_natives.check_ranks("alltoall", "native:pairwise", "smpi", 8)


@given(st.sampled_from(coll_natives.COLLECTIVES), st.sampled_from(["smpi", "mpi"]))
@settings(max_examples=20, deadline=None)
def test_every_listed_name_resolves_or_is_refused_in_one_line(coll, backend):
    for name, (sg, ompi) in coll_natives.ALGORITHMS[coll].items():
        if (sg if backend == "smpi" else ompi) is None:
            with pytest.raises(InputError) as e:
                coll_natives.resolve(coll, f"native:{name}", backend)
            assert "\n" not in e.value.line()
        else:
            n = coll_natives.resolve(coll, f"native:{name}", backend)
            assert n.smpi_cfg or n.mca


def test_split_name():
    assert split_name("ring") == ("ring", None) and split_name("ring@16") == ("ring", 16)
    for bad in ("ring@0", "ring@x", "ring@70000"):
        with pytest.raises(InputError):
            split_name(bad)


# ---- runs through the lab ---------------------------------------------------------------------

@pytest.mark.smpi
def test_natives_of_every_collective_smpi():
    need_smpi()
    for coll, names in (("alltoall", ["native", "native:ring", "native:pairwise"]),
                        ("bcast", ["native", "native:binomial"]),
                        ("reduce", ["native", "native:ompi"]),
                        ("allreduce", ["native", "native:mpich", "native:ring"])):
        rep = run_coll(CollConfig(coll, topology=TRYTON, ranks=4, nbytes=8192, iterations=2, max_delay_ms=2), names)
        for r in rep["results"]:
            assert r["data_ok"] and r["kind"] == "native" and r["avg_elapsed_s"] > 0, (coll, r["algorithm"])
            assert r["checked_bytes"] > 0
        assert "bound" in rep and rep["bound"]["run_time_s"] > 0
        md = coll_report.markdown([rep])
        assert coll in md and "| native |" in md


@pytest.mark.smpi
@pytest.mark.parametrize("coll,names", [
    ("alltoall", ["pair", "simple", "native"]),
    ("bcast", ["binomial", "native"]),
    ("reduce", ["binomial", "native"]),
    ("allreduce", ["ring", "native"]),
])
def test_compiled_and_native_deliver_every_byte_smpi(coll, names):
    need_smpi()
    need_compiler()
    rep = run_coll(CollConfig(coll, topology=TRYTON, ranks=6, nbytes=16384, iterations=1, root=1), names)
    got = rows(rep)
    for name in names:
        r = got[name]
        assert r["data_ok"], (name, r["errors"], r["fallbacks"], r["fallback_reason"], r["call_errors"])
        if r["kind"] == "compiled":
            # the schedule ran (strict mode: no fallback), and both models predicted it
            assert all(u.endswith(".sched") for u in r["used"]), r["used"]
            assert r["fluid_ratio"] > 0 and r["dag_ratio"] > 0
            assert r["run_time_s"] >= rep["bound"]["run_time_s"] * 0.999
    md = coll_report.markdown([rep])
    assert "fluid/meas" in md


# ---- reports and targets from rows (no runs) -----------------------------------------------

def _fake(coll, topo, p, n, d, rows_, bound=None):
    return {"backend": "smpi", "inputs": {"collective": coll, "topology": topo, "ranks": p, "nbytes": n,
                                          "max_delay_ms": d, "iterations": 1, "seed": 1, "network_model": "CM02"},
            "results": rows_, "bound": bound}


def _r(name, kind, t, ok=True, fluid=None):
    r = {"algorithm": name, "kind": kind, "avg_elapsed_s": t, "run_time_s": t, "data_ok": ok, "imbalance_s": 0.0}
    if fluid is not None:
        r.update(fluid_ratio=fluid, dag_ratio=fluid, compiled=name, nseg=1)
    return r


def test_targets_from_rows():
    ar = _fake("allreduce", TRYTON, 16, 1 << 20, 0,
               [_r("ring", "compiled", 0.0170, fluid=1.01), _r("native", "native", 0.16),
                _r("native:ompi", "native", 0.0161), _r("native:mpich", "native", 0.0337)],
               {"run_time_s": 0.016})
    a2a = [_fake("alltoall", TRYTON, 28, 128 << 10, d,
                 [_r("simple", "compiled", t, fluid=1.2), _r("native", "native", 0.0305)],
                 {"run_time_s": 0.028, "avg_elapsed_s": 0.0284})
           for d, t in ((0.0, 0.0300), (5.0, 0.0290), (50.0, 0.0400))]
    suite = {"network_model": "CM02", "allreduce": [ar], "alltoall": a2a, "grid_allreduce": [], "grid_alltoall": []}
    t = coll_report.targets(suite)

    def met(prefix, case):
        (hit,) = [x["met"] for x in t if x["target"].startswith(prefix) and x["case"] == case]
        return hit

    # ring 17.0 ms against 2*15/16*1 MiB/125 MB/s + 30 * 50 us = 17.23 ms: within 10%
    assert met("ring within 10% of 2(P-1)", "tryton-48 P=16 1 MiB") == "yes"
    # ompi is faster than ring: missed
    assert met("ring at least as fast as n", "tryton-48 P=16 1 MiB") == "**no**"
    assert met("balanced: collsched's bes", "tryton-48 P=28 128 KiB maxDelay 0 ms") == "yes"
    assert met("imbalanced: best robust w", "tryton-48 P=28 128 KiB maxDelay 5 ms") == "yes"
    assert met("imbalanced: best robust f", "tryton-48 P=28 128 KiB maxDelay 50 ms") == "**no**"
    fid = [x for x in t if x["target"].startswith("model fidelity")][0]
    assert fid["measured"] == "1 of 4 within" and fid["met"] == "**no**"
    rows_ = faraj.table_rows(a2a)
    assert [r["winner"] for r in rows_] == ["simple", "simple", "native"]
    md = faraj.table_markdown(rows_)
    assert "55.7%" in md and "Winner changes" in md


def test_cli_refuses_bad_input(capsys):
    assert main(["bench", "--collective", "alltoall", "--algorithms", "native:nosuch"]) == 2
    assert "native:nosuch" in capsys.readouterr().err
    assert main(["bench", "--collective", "allreduce", "--bytes", "6", "--algorithms", "native"]) == 2
    assert "--bytes" in capsys.readouterr().err
    assert main(["bench", "--collective", "bcast", "--suite", "model"]) == 2
    assert main(["bench", "--collective", "reduce", "--ranks", "1", "--algorithms", "native"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "Traceback" not in err


def test_measured_metrics():
    run = {"arrivals": [[0.1, 0.2], [0.1, 0.1]], "exits": [[0.3, 0.3], [0.2, 0.25]], "data_ok": True,
           "errors": 0, "checked_bytes": 8, "fallbacks": 0, "used": ["/x/a.sched", ""]}
    m = measured(run)
    assert m["avg_elapsed_s"] == pytest.approx((0.2 + 0.1 + 0.1 + 0.15) / 4)
    assert m["run_time_s"] == pytest.approx((0.2 + 0.15) / 2)
    assert m["used"] == ["a.sched", ""]


def test_suite_section_and_plots_from_rows(tmp_path):
    a2a = [_fake("alltoall", TRYTON, 28, 128 << 10, d,
                 [_r("simple", "compiled", t, fluid=1.0), _r("native", "native", 0.0305)],
                 {"run_time_s": 0.028, "avg_elapsed_s": 0.0284})
           for d, t in ((0.0, 0.0300), (5.0, 0.0290))]
    ar = _fake("allreduce", TRYTON, 16, 1 << 20, 0, [_r("ring", "compiled", 0.017, fluid=0.99),
                                                    _r("native", "native", 0.16)], {"run_time_s": 0.016})
    suite = {"network_model": "CM02", "started": "2026-11-27 13:00 UTC", "wall_s": 60.0, "allreduce": [ar],
             "alltoall": a2a, "grid_allreduce": [], "grid_alltoall": [], "others": []}
    doc = tmp_path / "bench.md"
    md = coll_report.record_suite(suite, str(doc), str(tmp_path / "img"))
    text = doc.read_text()
    assert "<!-- BEGIN lab-collectives -->" in text and "### Targets" in text and md.strip() in text
    assert "55.7%" in text and "3 of 3 within" in text
    for key in ("allreduce", "faraj"):
        assert (tmp_path / "img" / f"collectives-{key}-cm02.png").stat().st_size > 1000
        assert f"img/collectives-{key}-cm02.png" in text
    # the SMPI model's section is another one, and says the targets are CM02's
    suite["network_model"] = "SMPI"
    coll_report.record_suite(suite, str(doc), None)
    text = doc.read_text()
    assert "<!-- BEGIN lab-collectives-smpi -->" in text and "states its targets for CM02" in text
    assert text.count("<!-- BEGIN lab-collectives -->") == 1


def test_arrival_section_ratios_from_rows():
    """lab/coll_arrival.py's table: each time over the case's average-elapsed bound, and the
    arrival-aware alltoall against the best native of its row."""
    from collsched.lab import coll_arrival

    rows = [{"algorithm": a, "kind": "native" if a.startswith("native") else "compiled",
             "avg_elapsed_s": t, "data_ok": True}
            for a, t in zip(coll_arrival.ALGORITHMS, (0.040, 0.050, 0.050, 0.051, 0.052))]
    rep = {"inputs": {"max_delay_ms": 50.0, "seed": 2}, "results": rows, "bound": {"avg_elapsed_s": 0.032}}
    md = coll_arrival.markdown([rep], "2026-11-27 00:00 UTC", "CM02")
    line = next(l for l in md.splitlines() if l.startswith("| 50 | 2 |"))
    assert "| 32.00 |" in line and "40.00 (1.250)" in line and "50.00 (1.562)" in line
    assert "| 1.250x | ok |" in line
    rows[0]["data_ok"] = False
    assert "WRONG" in coll_arrival.markdown([rep], "x", "CM02")
