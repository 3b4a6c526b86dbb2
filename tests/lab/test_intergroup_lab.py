"""The intergroup lab (issue 19): small SMPI runs of every implementation with every byte
checked, the driver's check failing on a corrupted buffer, SMPI shared buffers with
sampled checks, the command line's bad inputs, and a real-MPI run on a true
intercommunicator."""
import json
import shutil
import subprocess

import pytest
from hypothesis import given, settings, strategies as st

from collsched.cli import main
from collsched.intergroup import Groups, sizes
from collsched.lab.intergroup_run import InterConfig, measured, run_intergroup
from collsched.lab.intergroup_suite import setting_groups, targets
from collsched.runtime_build import build_dir

SMPI_BENCH = build_dir() / "smpi" / "bin" / "collsched-inter-bench"
MPI_BENCH = build_dir() / "bin" / "collsched-inter-bench"
COMPILED = ["kang", "root-gather", "root-gather-mpich"]


def need_smpi():
    if shutil.which("smpirun") is None or not SMPI_BENCH.exists():
        pytest.skip("SimGrid SMPI or build/smpi/bin/collsched-inter-bench missing (make lab)")


def need_mpi():
    if shutil.which("mpirun") is None or not MPI_BENCH.exists():
        pytest.skip("mpirun or build/bin/collsched-inter-bench missing (make lab)")


def rows(report):
    return {r["algorithm"]: r for r in report["results"]}


# ---- SMPI ------------------------------------------------------------------------------------

@pytest.mark.smpi
def test_every_implementation_delivers_every_byte_smpi():
    need_smpi()
    # allgather with different block sizes in the two groups (3:2), allgatherv with
    # arithmetic blocks (4:4): every byte checked, every schedule run by the runtime
    cases = [(InterConfig(Groups.equal(3, 2, 64 << 10, 40000)), COMPILED + ["native"]),
             (InterConfig(Groups(sizes.arithmetic_sizes(4, 16 << 10), sizes.arithmetic_sizes(4, 9000)),
                          "inter-allgatherv"), ["kang-v", "root-gather", "root-gather-mpich", "native"])]
    for cfg, algs in cases:
        report = run_intergroup(cfg, algs)
        got = rows(report)
        assert list(got) == algs
        for name, r in got.items():
            assert r["data_ok"], (name, r["errors"], r["fallbacks"], r["fallback_reason"])
            assert r["fallbacks"] == 0 and r["errors"] == 0
            g = cfg.groups
            assert r["checked_bytes_per_iteration"] == g.p * g.total(1) + g.q * g.total(0)
            assert r["time_s"] > 0
        # the bound each compiled algorithm is held to, and its predictions, are there
        for name in algs[:-1]:
            assert got[name]["bound_ratio"] > 0 and got[name]["dag_ratio"] > 0
            # the fluid model replays what SimGrid does (the suite judges the issue's +-15%;
            # MPICH's plan is 1.18 here, 3:2 at 64 KiB)
            assert 0.75 <= got[name]["fluid_ratio"] <= 1.25, (name, got[name]["fluid_ratio"])
        assert report["bounds"]["M"] > 0


@pytest.mark.smpi
def test_the_check_fails_on_a_corrupted_buffer_smpi():
    need_smpi()
    cfg = InterConfig(Groups.equal(3, 2, 8192, 8192), iterations=1, inject_error=True)
    got = rows(run_intergroup(cfg, ["kang", "native"]))
    for r in got.values():  # one flipped byte at rank 1 after the first call: found
        assert not r["data_ok"] and r["errors"] == 1


@pytest.mark.smpi
def test_shared_buffers_with_sampled_checks_smpi():
    need_smpi()
    g = Groups.equal(3, 2, 3 << 20, 1 << 20)
    report = run_intergroup(InterConfig(g, shared_data="yes", iterations=1), ["kang", "native"])
    for r in report["results"]:
        assert r["data_ok"], r
        # one byte per MiB of every receive buffer and its last page: not every byte
        assert 0 < r["checked_bytes_per_iteration"] < g.p * g.total(1) + g.q * g.total(0)
    bad = run_intergroup(InterConfig(g, shared_data="yes", iterations=1, inject_error=True), ["native"])
    assert bad["results"][0]["errors"] == 1


@pytest.mark.smpi
def test_driver_refuses_bad_arguments_in_one_line(tmp_path):
    need_smpi()
    from collsched.inputs.topology import homogeneous
    from collsched.lab.platform import build_platform

    xml, hosts = build_platform(homogeneous(4)).write(tmp_path)
    base = ["smpirun", "-np", "4", "-platform", str(xml), "-hostfile", str(hosts), "--log=root.thres:error",
            str(SMPI_BENCH), "--collective", "allgather"]
    for args, why in ((["--p", "4", "--sizes-a", "1,1,1,1", "--sizes-b", "1", "--impls", "native"], "--p"),
                      (["--p", "2", "--sizes-a", "1,1", "--sizes-b", "1", "--impls", "native"], "--sizes-b"),
                      (["--p", "2", "--sizes-a", "1,2", "--sizes-b", "1,1", "--impls", "native"], "one block size"),
                      (["--p", "2", "--sizes-a", "1,1", "--sizes-b", "1,1", "--impls", "sched"], "--schedule"),
                      (["--p", "2", "--sizes-a", "1,1", "--sizes-b", "1,1", "--impls", "native,native"], "--impls")):
        out = subprocess.run(base + args, capture_output=True, text=True, timeout=60)
        lines = [ln for ln in out.stderr.splitlines() if ln.startswith("collsched-inter-bench")]
        assert out.returncode != 0 and len(lines) == 1 and why in lines[0], (args, out.stderr)


# ---- real MPI --------------------------------------------------------------------------------

@pytest.mark.mpi
def test_true_intercommunicator_sched_against_native_mpi():
    need_mpi()
    for cfg, alg in ((InterConfig(Groups.equal(2, 2, 64 << 10, 32 << 10), backend="mpi", iterations=2,
                                  models=()), "kang"),
                     (InterConfig(Groups((1000, 70000, 5), (64 << 10, 3)), "inter-allgatherv", backend="mpi",
                                  iterations=2, models=()), "kang-v")):
        report = run_intergroup(cfg, [alg, "native"])
        got = rows(report)
        r = got[alg]
        assert r["data_ok"] and r["native_data_ok"], r
        assert r["fallbacks"] == 0  # the runtime served the intercommunicator with the schedule
        assert r["speedup_over_native"] > 0 and len(r["speedup_per_iteration"]) == 2
        assert got["native"]["measured_with"] == alg  # native's row: the interleaved run's
        assert "bounds" not in report  # the default cluster does not describe this machine


# ---- the command line ------------------------------------------------------------------------

BAD = [
    (["--collective", "inter-allgather"], "--groups: expected P:Q"),
    (["--collective", "inter-allgather", "--groups", "5"], "--groups: 5: expected P:Q"),
    (["--collective", "inter-allgather", "--groups", "0:3"], "--groups: 0:3: expected P:Q"),
    (["--collective", "inter-allgather", "--groups", "a:b"], "--groups: a:b"),
    (["--collective", "inter-allgather", "--groups", "3:2", "--sizes", "arithmetic"],
     "--sizes: arithmetic: expected only with --collective inter-allgatherv"),
    (["--collective", "inter-allgather", "--groups", "3:2", "--ranks", "5"], "--ranks: 5: expected no --ranks"),
    (["--collective", "inter-allgather", "--groups", "3:2", "--bytes", "1KiB:2KiB"], "--bytes: 1KiB:2KiB"),
    (["--collective", "inter-allgather", "--groups", "3:2", "--algorithms", "kang,ring"],
     "--algorithms: ring: expected"),
    (["--collective", "inter-allgather", "--groups", "3:2", "--algorithms", "kang,kang"],
     "expected each algorithm once"),
    (["--collective", "inter-gather", "--groups", "3:2"], "--collective: inter-gather"),
    (["--collective", "inter-allgather", "--groups", "3:2", "--suite", "model"], "--suite: model"),
    (["--suite", "intergroup", "--groups", "3:2"], "--groups: 3:2: expected no such option"),
    (["--suite", "intergroup", "--collective", "inter-allgatherv"], "--collective: inter-allgatherv"),
    (["--collective", "inter-allgather", "--groups", "3:2", "--launcher", "mpirun"], "--launcher: mpirun: only"),
]


@pytest.mark.parametrize("args, line", BAD)
def test_bad_inputs_are_one_line_and_exit_2(args, line, capsys):
    assert main(["bench", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and line in err, err


def test_sizes_file_gives_every_block(tmp_path, capsys):
    bad = tmp_path / "sizes.yaml"
    bad.write_text("a: [1, 2]\nb: [3]\n")
    assert main(["bench", "--collective", "inter-allgatherv", "--groups", "3:1", "--sizes", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "expected 3 byte counts" in err


@pytest.mark.smpi
def test_cli_json_and_doc(tmp_path, capsys):
    need_smpi()
    doc = tmp_path / "bench.md"
    assert main(["bench", "--collective", "inter-allgather", "--groups", "2:3", "--bytes", "4KiB",
                 "--bytes-b", "1KiB", "--algorithms", "kang,native", "--json", "--doc", str(doc),
                 "--plot", str(tmp_path / "case.png")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["inputs"]["sizes_a"] == 4096 and report["inputs"]["sizes_b"] == 1024
    assert [r["algorithm"] for r in report["results"]] == ["kang", "native"]
    assert "<!-- BEGIN lab-intergroup-run -->" in doc.read_text()
    assert (tmp_path / "case.png").stat().st_size > 0


# ---- pure functions --------------------------------------------------------------------------

def test_measured_takes_the_largest_elapsed_time_per_iteration():
    run = {"arrivals": [[0, 1, 0], [0, 0, 2]], "exits": [[3, 2, 1], [1, 5, 4]], "data_ok": True,
           "errors": 0, "fallbacks": 0}
    m = measured(run)
    assert m["time_per_iteration_s"] == [3, 5] and m["time_s"] == 4
    assert m["run_time_s"] == pytest.approx((3 + 5) / 2)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 8), st.integers(64 << 10, 8 << 20))
def test_setting_groups_largest_block_is_at_most_asked(number, largest):
    g = setting_groups(number, largest)
    unit = sizes.setting(number, 1)
    step = max(unit.sizes_a + unit.sizes_b)
    assert largest - step < max(g.sizes_a + g.sizes_b) <= largest
    assert (g.p, g.q) == sizes.setting_shape(number)


def test_targets_judge_what_was_measured():
    def case(block, alg_time, ratio, mpich):
        return {"inputs": {"largest_block": block},
                "results": [{"algorithm": "kang", "time_s": alg_time, "bound_ratio": ratio, "data_ok": True,
                             "dag_ratio": 1.1, "fluid_ratio": 0.8,
                             "speedup_over_root_gather_mpich": mpich / alg_time},
                            {"algorithm": "root-gather-mpich", "time_s": mpich, "data_ok": True}]}
    report = {"settings": [{"setting": 1, "algorithm": "kang", "eq5": 7.0,
                            "cases": [case(64 << 10, 1, 1.5, 3), case(1 << 20, 1, 1.05, 6)]},
                           {"setting": 2, "algorithm": "kang", "eq5": 4.84,
                            "cases": [case(1 << 20, 1, 1.2, 3.8)]}]}
    t = targets(report)
    assert t[0]["bound_met"] and t[0]["bound_ratio_max"] == 1.05  # 64 KiB is below the target's range
    assert t[0]["speedup_met"] and not t[1]["speedup_met"] and not t[1]["bound_met"]
    assert t[0]["fidelity_met"] == {"dag": True, "fluid": False}
