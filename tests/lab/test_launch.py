"""Launchers, host files, binding and the native:NAME vocabulary (lab/launch.py, lab/native.py).

First without MPI: template expansion and validation (templates whose executable is not an
MPI launcher: `env`), host files, the srun family's syntax, native:NAME on both backends,
and the command line's one-line refusals. Then real runs: `bench --backend mpi` under
Open MPI's mpirun and mpiexec (a preset and a template), with a host file (slots=2: P = 2
without oversubscription, P = 3 oversubscribed automatically), `measure --backend mpi`
with a template, and native:NAME under SMPI and real MPI selecting what it names. Every
run's data is checked byte for byte by the minibench (data_ok).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from collsched import runtime_build
from collsched.cli import main
from collsched.cli_args import BIND_TO as CLI_BIND_TO
from collsched.errors import InputError
from collsched.lab import launch, native
from collsched.lab.launch import Launcher, local_cores, make_launcher, parse_hostfile
from collsched.lab.runner import LabConfig, run_lab

ROOT = Path(__file__).resolve().parents[2]
TOPO = ROOT / "topologies"


# --- templates, without MPI -------------------------------------------------------------------

def test_template_expands_placeholders_and_keeps_program_words(tmp_path):
    hf = tmp_path / "hosts"
    hf.write_text("localhost slots=4\n")
    lau = make_launcher("env -n{ranks} --hosts={hostfile} X={{literal}} {program}", hostfile=str(hf))
    assert lau.flavor == "other" and lau.executable == shutil.which("env")
    argv, env = lau.command(3, ["prog", "a b", 7])
    assert argv == ["env", "-n3", f"--hosts={hf.resolve()}", "X={literal}", "prog", "a b", "7"]
    assert env == {}
    # native:NAME reaches a launcher of another family through Open MPI's environment variables
    argv, env = lau.command(2, ["prog"], mca={"coll_tuned_allgather_algorithm": "3"}, forward=("A",))
    assert argv == ["env", "-n2", f"--hosts={hf.resolve()}", "X={literal}", "prog"]
    assert env == {"OMPI_MCA_coll_tuned_allgather_algorithm": "3"}
    assert lau.describe() == {"launcher": lau.template, "flavor": "other", "hostfile": str(hf.resolve()),
                              "bind_to": None}


BAD_TEMPLATES = [
    ("", "expected mpirun, mpiexec, srun"),
    ("   ", "expected mpirun, mpiexec, srun"),
    ("env -n {ranks}", "{program} exactly once"),
    ("env -n {ranks} {program} {program}", "{program} exactly once"),
    ("env -n {ranks} --run={program}", "{program} exactly once"),
    ("env {program}", "expected {ranks}"),
    ("env -n {rank} {program}", "unknown placeholder {rank}"),
    ("env -n {ranks} {nodes} {program}", "unknown placeholder {nodes}"),
    ("env -n {ranks:3} {program}", "without a format"),
    ("env -n {ranks!r} {program}", "without a format"),
    ("env -n {0} {program}", "unknown placeholder {0}"),
    ("env -n {ranks} { {program}", "placeholders as"),
    ("env -n {ranks} } {program}", "placeholders as"),
    ("env 'unclosed {ranks} {program}", "shell could split"),
    ("{program} -n {ranks}", "executable first"),
    ("no-such-launcher-xyz -n {ranks} {program}", "no-such-launcher-xyz: executable not found"),
    ("env -n {ranks} -f {hostfile} {program}", "expected --hostfile FILE too"),
]


@pytest.mark.parametrize("template, says", BAD_TEMPLATES)
def test_bad_templates_one_input_error_naming_launcher(template, says):
    with pytest.raises(InputError) as e:
        make_launcher(template)
    line = e.value.line()
    assert line.startswith("--launcher") and says in line and "\n" not in line


def test_hostfile_with_a_template_must_be_named_in_it(tmp_path):
    hf = tmp_path / "hosts"
    hf.write_text("localhost\n")
    with pytest.raises(InputError, match=r"--hostfile.*does not name \{hostfile\}"):
        make_launcher("env -n {ranks} {program}", hostfile=str(hf))


def test_binding_needs_a_launcher_that_has_it():
    with pytest.raises(InputError, match="--bind-to: core: env is neither"):
        make_launcher("env -n {ranks} {program}", bind_to="core")
    with pytest.raises(InputError, match="--bind-to: sideways: expected one of none, hwthread, core"):
        make_launcher("env -n {ranks} {program}", bind_to="sideways")
    assert launch.BIND_TO == CLI_BIND_TO  # the command line offers what launch.py passes on


def test_srun_family_syntax():
    """srun's own words: -n P, --cpu-bind (core -> cores), native:NAME in the environment,
    never --oversubscribe or --allow-run-as-root, whatever the slots."""
    lau = Launcher("srun", tuple(launch.PRESETS["srun"].split()), "/usr/bin/srun", "slurm", None, "core")
    argv, env = lau.command(64, ["prog", "x"], mca={"coll_tuned_use_dynamic_rules": "1"}, forward=("A",))
    assert argv == ["srun", "-n", "64", "--cpu-bind=cores", "prog", "x"]
    assert env == {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1"}
    assert set(launch.SRUN_BIND) < set(launch.BIND_TO)


@pytest.mark.skipif(shutil.which("srun") is not None, reason="srun is installed here")
def test_srun_missing_is_one_line():
    with pytest.raises(InputError, match="--launcher: srun: srun: executable not found"):
        make_launcher("srun")


# --- host files ---------------------------------------------------------------------------------

def test_hostfile_parsed_and_slots_counted(tmp_path):
    hf = tmp_path / "hosts"
    hf.write_text("# a cluster\nlocalhost slots=2   # this machine\n\nnode-7.example.org slots=4 max_slots=8\n"
                  "10.0.0.3\n")
    h = parse_hostfile(str(hf))
    assert h.path == str(hf.resolve())
    assert h.hosts == (("localhost", 2), ("node-7.example.org", 4), ("10.0.0.3", None))
    assert h.slots() == 2 + 4 + 1  # a remote host without slots= counts 1
    hf.write_text("localhost\n")
    assert parse_hostfile(str(hf)).slots() == local_cores()  # Open MPI counts this host's cores


@pytest.mark.parametrize("text, says", [
    ("", "at least one line"),
    ("# only a comment\n\n", "at least one line"),
    ("localhost slots=0\n", "line 1"),
    ("localhost\nnode slots=two\n", "line 2"),
    ("localhost cpus=2\n", "line 1"),
    ("slots=2\n", "line 1"),
    ("host;rm -rf /\n", "line 1"),
    ("localhost slots=99999999999\n", "line 1"),
])
def test_bad_hostfiles_one_line(tmp_path, text, says):
    hf = tmp_path / "hosts"
    hf.write_text(text)
    with pytest.raises(InputError) as e:
        parse_hostfile(str(hf))
    assert e.value.line().startswith(str(hf)) and says in e.value.line()


def test_hostfile_missing_directory_or_binary(tmp_path):
    for path, says in ((tmp_path / "missing", "expected an existing host file"),
                       (tmp_path, "expected an existing host file")):
        with pytest.raises(InputError, match=says):
            parse_hostfile(str(path))
    binary = tmp_path / "bin"
    binary.write_bytes(b"\xff\xfe\x00host\n")
    with pytest.raises(InputError, match="expected a text host file"):
        parse_hostfile(str(binary))


# --- native:NAME, one vocabulary -------------------------------------------------------------

@pytest.mark.parametrize("name, smpi, mpi", [
    ("ring", "smpi/allgather:ring", "4"),
    ("bruck", "smpi/allgather:bruck", "2"),
    ("recursive_doubling", "smpi/allgather:rdb", "3"),
    ("rdb", "smpi/allgather:rdb", "3"),
    ("neighbor", "smpi/allgather:ompi_neighborexchange", "5"),
    ("ompi_neighborexchange", "smpi/allgather:ompi_neighborexchange", "5"),
    ("linear", "smpi/allgather:GB", "1"),
    ("GB", "smpi/allgather:GB", "1"),
])
def test_native_names_mean_one_algorithm_on_both_backends(name, smpi, mpi):
    s, m = native.resolve(f"native:{name}", "smpi"), native.resolve(f"native:{name}", "mpi")
    assert s.smpi_cfg == f"--cfg={smpi}" and s.describe() == smpi and not s.mca
    assert m.mca == {"coll_tuned_use_dynamic_rules": "1", "coll_tuned_allgather_algorithm": mpi}
    assert m.smpi_cfg is None and s.canonical == m.canonical


def test_native_selectors_and_ids():
    for sel in ("ompi", "mpich", "mvapich2", "impi"):
        assert native.resolve(f"native:{sel}", "smpi").smpi_cfg == f"--cfg=smpi/coll-selector:{sel}"
    ompi = native.resolve("native:ompi", "mpi")  # Open MPI's own tuned decision, as `native`
    assert ompi.mca == {} and ompi.smpi_cfg is None and "tuned decision" in ompi.describe()
    assert native.resolve("native:6", "mpi").mca["coll_tuned_allgather_algorithm"] == "6"
    # every SimGrid name accepted before stays accepted under SMPI
    for old in ("2dmesh", "3dmesh", "bruck", "GB", "loosely_lr", "NTSLR", "NTSLR_NB", "pair", "rdb", "rhv",
                "ring", "SMP_NTS", "smp_simple", "spreading_simple", "ompi_neighborexchange", "mvapich2",
                "mvapich2_smp", "impi", "default"):
        assert native.resolve(f"native:{old}", "smpi").smpi_cfg.endswith(f":{old}")
    for old in ("linear", "bruck", "recursive_doubling", "ring", "neighbor", "two_proc", "3"):
        assert native.resolve(f"native:{old}", "mpi").mca


@pytest.mark.parametrize("name, backend, why", [
    ("2dmesh", "mpi", "not on --backend mpi"),
    ("pair", "mpi", "not on --backend mpi"),
    ("two_proc", "smpi", "not on --backend smpi"),
    ("mpich", "mpi", "a selector of --backend smpi"),
    ("3", "smpi", "not a native:NAME either backend knows"),
    ("nope", "mpi", "not a native:NAME either backend knows"),
    ("1234", "mpi", "expected a tuned id 0..6"),
    ("7", "mpi", "expected a tuned id 0..6"),
])
def test_native_refusal_lists_what_each_backend_offers(name, backend, why):
    with pytest.raises(InputError) as e:
        native.resolve(f"native:{name}", backend)
    line = e.value.line()
    assert line.startswith(f"--algorithms: native:{name}: {why}")
    assert "mpi offers linear/GB, bruck, recursive_doubling/rdb, ring, neighbor/ompi_neighborexchange, " \
           "two_proc, 0..6; selector ompi;" in line
    assert "smpi offers linear/GB, bruck, recursive_doubling/rdb" in line and "2dmesh" in line
    assert line.endswith("selectors ompi, mpich, mvapich2, impi")  # whole: not cut to an excerpt


# --- the command line's refusals (nothing runs) ---------------------------------------------

@pytest.mark.parametrize("argv, says", [
    (["bench", "--launcher", "mpirun"], "--launcher: mpirun: only with --backend mpi"),
    (["bench", "--backend", "smpi", "--hostfile", "h"], "--hostfile: h: only with --backend mpi"),
    (["bench", "--bind-to", "core"], "--bind-to: core: only with --backend mpi"),
    (["bench", "--suite", "compiler", "--backend", "mpi", "--launcher", "mpirun"], "only with --suite lab or"),
    (["bench", "--suite", "model", "--bind-to", "core"], "only with --suite lab or"),
    (["bench", "--suite", "recurring", "--launcher", "srun"], "only with --backend mpi"),
    (["bench", "--backend", "mpi", "--launcher", "env {program}"], "expected {ranks}"),
    (["bench", "--backend", "mpi", "--launcher", "env -n {ranks} {program}", "--bind-to", "core"],
     "--bind-to: core: env is neither"),
    (["bench", "--backend", "mpi", "--hostfile", "/no/such/hosts"], "/no/such/hosts: --hostfile"),
    (["bench", "--backend", "mpi", "--bind-to", "left"], "--bind-to"),
    (["bench", "--backend", "mpi", "--algorithms", "ring,native:2dmesh"], "native:2dmesh: not on --backend mpi"),
    (["bench", "--backend", "smpi", "--algorithms", "native:two_proc"], "native:two_proc: not on --backend smpi"),
    (["measure", "--backend", "smpi", "--ranks", "2", "--platform-from", str(TOPO / "tryton-48.yaml"),
      "--launcher", "mpirun"], "--launcher: mpirun: only with --backend mpi"),
    (["measure", "--backend", "mpi", "--ranks", "2", "--launcher", "mpirun -np 2 {program}"], "expected {ranks}"),
    (["measure", "--backend", "mpi", "--ranks", "2", "--hostfile", "/no/such/hosts"], "/no/such/hosts"),
])
def test_cli_refusals_one_line_exit_2(argv, says, tmp_path, capsys):
    if argv[0] == "measure":
        argv = argv + ["-o", str(tmp_path / "m.yaml")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("collsched: error:") and "\n" not in err and says in err, err
    assert list(tmp_path.iterdir()) == []


# --- real runs --------------------------------------------------------------------------------

def _need_mpi():
    if shutil.which("mpirun") is None or shutil.which("mpiexec") is None:
        pytest.skip("Open MPI's mpirun/mpiexec missing")
    if not runtime_build.program("mpi", "collsched-minibench").exists():
        pytest.skip("build/bin/collsched-minibench missing (make lab)")


def _bench(capsys, *argv) -> dict:
    rc = main(["bench", "--backend", "mpi", "--bytes", "4099", "--iterations", "2", "--flat-iterations", "1",
               "--json", *argv])
    out = capsys.readouterr()
    assert rc == 0, out.err
    report = json.loads(out.out)
    assert report["results"] and all(r["data_ok"] for r in report["results"])
    return report


def _oversubscribed(cmd) -> bool:
    return "--oversubscribe" in cmd


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3])
def test_bench_mpirun_oversubscribes_only_past_the_cores(ranks, capsys):
    _need_mpi()
    rep = _bench(capsys, "--ranks", str(ranks), "--launcher", "mpirun", "--algorithms", "ring,native:rdb,native:ompi")
    rows = {r["algorithm"]: r for r in rep["results"]}
    assert rep["inputs"]["launch"] == {"launcher": "mpirun", "flavor": "openmpi", "hostfile": None, "bind_to": None}
    for row in rows.values():
        cmd = row["command"]
        assert cmd[:3] == ["mpirun", "-np", str(ranks)]
        assert _oversubscribed(cmd) == (ranks > local_cores())
        assert "--bind-to" not in cmd  # binding left to the launcher
        assert ("--allow-run-as-root" in cmd) == (os.geteuid() == 0)
    mca = rows["native:rdb"]["command"]
    assert mca[mca.index("coll_tuned_allgather_algorithm") + 1] == "3"
    assert rows["native:rdb"]["native"] == "coll_tuned_use_dynamic_rules=1 coll_tuned_allgather_algorithm=3"
    assert "--mca" not in rows["native:ompi"]["command"] and "--mca" not in rows["ring"]["command"]


@pytest.mark.mpi
def test_bench_mpiexec_template_and_binding(capsys):
    _need_mpi()
    rep = _bench(capsys, "--ranks", "3", "--launcher", "mpiexec -n {ranks} --map-by slot {program}",
                 "--algorithms", "bruck,native:neighbor")
    for row in rep["results"]:
        cmd = row["command"]
        assert cmd[:5] == ["mpiexec", "-n", "3", "--map-by", "slot"]
        assert _oversubscribed(cmd) == (3 > local_cores())
    assert rep["results"][1]["command"][-len(["--native"]):] == ["--native"]
    # a launcher option that rewrites the program's output: one line saying so, exit 3
    assert main(["bench", "--backend", "mpi", "--ranks", "2", "--bytes", "64", "--iterations", "1",
                 "--algorithms", "ring", "--launcher", "mpiexec -n {ranks} --tag-output {program}"]) == 3
    assert "without the minibench's result line" in capsys.readouterr().err
    bound = _bench(capsys, "--ranks", "2", "--bind-to", "none", "--algorithms", "ring")
    cmd = bound["results"][0]["command"]
    assert cmd[cmd.index("--bind-to") + 1] == "none" and bound["inputs"]["launch"]["bind_to"] == "none"


@pytest.mark.mpi
def test_bench_hostfile_slots_decide_oversubscription(tmp_path, capsys):
    _need_mpi()
    hf = tmp_path / "hosts"
    hf.write_text("localhost slots=2\n")
    for ranks, over in ((2, False), (3, True)):
        rep = _bench(capsys, "--ranks", str(ranks), "--hostfile", str(hf), "--algorithms", "ring")
        cmd = rep["results"][0]["command"]
        assert cmd[cmd.index("--hostfile") + 1] == str(hf.resolve())
        assert _oversubscribed(cmd) == over
        assert rep["inputs"]["launch"]["hostfile"] == str(hf.resolve())
    # the same P = 3 without oversubscription is refused by Open MPI itself: the flag mattered
    lau = make_launcher("mpirun", str(hf))
    cmd, env = lau.command(3, [str(runtime_build.program("mpi", "collsched-minibench")), "--bytes", "64",
                               "--iterations", "1", "--native"])
    assert env == {"OMPI_MCA_rmaps_base_oversubscribe": "1"}
    cmd.remove("--oversubscribe")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OMPI_MCA_rmaps")}
    done = launch.run(cmd, clean, tmp_path, 120)
    assert done.returncode != 0 and any("not enough slots" in ln for ln in done.stderr)


@pytest.mark.mpi
def test_recurring_suite_through_a_launcher(tmp_path, capsys):
    """bench --suite recurring --backend mpi: every launch of the suite (training, cache build's
    evaluation under the preload library, regular picks) through the template and host file;
    the preload library's variables reach the ranks with -x."""
    _need_mpi()
    if not runtime_build.library("libcollsched-preload.so").exists():
        pytest.skip("the preload library missing (make runtime)")
    hf = tmp_path / "hosts"
    hf.write_text("localhost slots=2\n")
    rc = main(["bench", "--suite", "recurring", "--backend", "mpi", "--ranks", "4", "--bytes", "4KiB",
               "--iterations", "12", "--launcher", "mpiexec -n {ranks} --hostfile {hostfile} {program}",
               "--hostfile", str(hf), "--keep", str(tmp_path / "run"), "--json"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    rep = json.loads(cap.out)
    assert rep["summary"]["data_ok"]
    assert rep["inputs"]["launch"]["hostfile"] == str(hf)
    rows = [rep["training"], *rep["evaluation"].values(), *rep["unseen"].values()]
    for row in rows:
        cmd = row["command"]
        assert cmd[:5] == ["mpiexec", "-n", "4", "--hostfile", str(hf.resolve())]
        assert "--oversubscribe" in cmd  # 4 ranks, 2 slots
    cache_rows = [r for name, r in rep["evaluation"].items() if name.startswith("cache:")]
    assert cache_rows and all(r["command"][r["command"].index("LD_PRELOAD") - 1] == "-x" for r in cache_rows)


@pytest.mark.mpi
def test_measure_with_a_template(tmp_path, capsys):
    _need_mpi()
    if not runtime_build.program("mpi", "collsched-measure").exists():
        pytest.skip("build/bin/collsched-measure missing (make measure)")
    out = tmp_path / "m.yaml"
    rc = main(["measure", "--backend", "mpi", "--ranks", "2", "--launcher", "mpiexec -n {ranks} {program}",
               "--sizes", "1,1KiB,64KiB,1MiB", "--repeats", "3", "--sweep", "off", "--refine", "0",
               "-o", str(out), "--json"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    rep = json.loads(cap.out)
    assert rep["launch"]["launcher"] == "mpiexec -n {ranks} {program}" and rep["launch"]["flavor"] == "openmpi"
    assert "launcher mpiexec -n {ranks} {program}" in out.read_text()


@pytest.mark.mpi
def test_launch_run_stops_the_whole_group_at_the_time_out(tmp_path):
    _need_mpi()
    lau = make_launcher("mpirun")
    cmd, env = lau.command(2, ["sh", "-c", f"echo $$ >> {tmp_path}/pids; sleep 60"])
    with pytest.raises(launch.LaunchTimeout, match="did not finish within 3 s"):
        launch.run(cmd, {**os.environ, **env}, tmp_path, 3)
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    assert len(pids) == 2
    for pid in pids:  # the ranks went with mpirun
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


@pytest.mark.smpi
def test_native_names_select_on_smpi(tmp_path):
    """native:recursive_doubling and native:rdb are SimGrid's rdb (the same simulated times,
    deterministic), native:ring another algorithm (other times)."""
    if shutil.which("smpirun") is None or not runtime_build.program("smpi", "collsched-minibench").exists():
        pytest.skip("SimGrid SMPI or build/smpi/bin/collsched-minibench missing (make)")
    cfg = LabConfig("smpi", str(TOPO / "tryton-48.yaml"), 4, 65536, iterations=1, flat_iterations=0)
    rep = run_lab(cfg, ["native:recursive_doubling", "native:rdb", "native:ring"])
    rows = {r["algorithm"]: r for r in rep["results"]}
    assert all(r["data_ok"] for r in rows.values())
    assert "--cfg=smpi/allgather:rdb" in rows["native:recursive_doubling"]["command"]
    assert rows["native:rdb"]["native"] == "smpi/allgather:rdb"
    assert rows["native:recursive_doubling"]["avg_elapsed_s"] == rows["native:rdb"]["avg_elapsed_s"]
    assert rows["native:ring"]["avg_elapsed_s"] != rows["native:rdb"]["avg_elapsed_s"]
    assert [r["algorithm"] for r in rep["results"]] == ["native:recursive_doubling", "native:rdb", "native:ring"]
