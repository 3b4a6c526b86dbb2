"""The command line for alltoall, bcast, reduce and allreduce (cli_coll.py, compile.py):
compile writes a verified 1.2 file and says what it predicts; show, verify and simulate
read 1.2 files; bad input is one line and a non-zero status; allgather is untouched."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from collsched import schedfile
from collsched.cli import main
from collsched.collectives.compile import CollResult, compile_collective
from collsched.collectives.program import Op, Program, from_op_lists
from collsched.collectives.verify import verify

pytestmark = pytest.mark.filterwarnings("ignore")
ROOT = Path(__file__).resolve().parents[2]


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err
    return lines[0]


CASES = [("alltoall", "pair", []), ("bcast", "chain", ["--root", "2"]), ("reduce", "binomial", ["--root", "1"]),
         ("allreduce", "ring", [])]


@pytest.mark.parametrize("coll,alg,extra", CASES)
def test_compile_writes_a_verified_file(capsys, tmp_path, coll, alg, extra):
    out = tmp_path / f"{coll}.sched"
    code, stdout, err = run(capsys, "compile", "--collective", coll, "--algorithm", alg, "--ranks", "5",
                            "--bytes", "64KiB", "--segments", "2", *extra, "-o", str(out), "--json")
    assert code == 0, err
    d = json.loads(stdout)
    assert d["collective"] == coll and d["algorithm"] == alg and d["file"] == str(out)
    assert d["default_topology"] and "homogeneous" in d["topology"]
    for key in ("run_time_s", "avg_elapsed_s", "lower_bound_s", "gap"):
        assert isinstance(d[key], float), key
    assert d["run_time_s"] > 0 and d["lower_bound_s"] <= d["run_time_s"] * (1 + 1e-9)
    assert d["gap"] == pytest.approx(d["run_time_s"] / d["lower_bound_s"] - 1)
    prog = schedfile.read(out)
    assert isinstance(prog, Program) and prog.algorithm == alg and prog.collective == coll
    assert verify(prog) == [] and (prog.bytes_min, prog.bytes_max) == (65536, 65536)
    assert d["file_bytes"] == out.stat().st_size == prog.file_bytes
    if extra:
        assert prog.root == int(extra[1])
    code, stdout, _ = run(capsys, "verify", str(out))
    assert code == 0 and "valid" in stdout and coll in stdout
    code, stdout, _ = run(capsys, "show", str(out), "--rank", "1")
    assert code == 0 and "format 1.2" in stdout and "rank 1:" in stdout and "rank 0:" not in stdout
    code, stdout, _ = run(capsys, "simulate", str(out), "--json")
    assert code == 0
    sim = json.loads(stdout)
    assert sim["run_time_s"] == pytest.approx(d["run_time_s"]) and sim["model"] == "fluid"


def test_auto_picks_the_fastest_candidate(capsys, tmp_path):
    out = tmp_path / "a.sched"
    code, stdout, err = run(capsys, "compile", "--collective", "allreduce", "--algorithm", "auto",
                            "--ranks", "8", "--bytes", "1MiB", "-o", str(out), "--json")
    assert code == 0, err
    d = json.loads(stdout)
    timed = [c for c in d["candidates"] if "run_time_s" in c]
    assert len({c["algorithm"] for c in timed}) >= 2
    # model auto: the fluid model re-times the finalists and has the last word
    assert d["model_choice"]["by"] == d["model"] == "fluid"
    assert d["run_time_s"] == pytest.approx(min(c["run_time_s"] for c in timed if c["model"] == "fluid"))
    assert d["auto"] and d["model_choice"]["requested"] == "auto"
    code, stdout, _ = run(capsys, "compile", "--collective", "allreduce", "--algorithm", "auto",
                          "--ranks", "8", "--bytes", "1MiB", "-o", str(out))
    assert code == 0 and "auto: the fastest predicted of" in stdout and "verified" in stdout
    assert "no --topology" in stdout


def test_compile_collective_api(tmp_path):
    res = compile_collective("bcast", "binomial", nranks=6, nbytes=(1024, 8192), nseg=1, root=5,
                             out=tmp_path / "b.sched", model="dag")
    assert isinstance(res, CollResult) and res.model == "dag"
    assert res.program.root == 5 and (res.program.bytes_min, res.program.bytes_max) == (1024, 8192)
    assert res.timing.run_time_s > 0 and res.bound.seconds > 0
    back = schedfile.read(tmp_path / "b.sched")
    assert back.same_ops(res.program) and back.input_hash == res.program.input_hash != b"\0" * 32
    fluid = compile_collective("bcast", "binomial", nranks=6, nbytes=8192, nseg=1, root=5, model="fluid")
    assert fluid.model == "fluid" and fluid.file_bytes is None


def test_commutative_only_is_cleared_where_the_order_is_proven():
    """An algorithm may mark a program commutative-only; compile clears the flag when the
    verifier proves MPI's order (the runtime then serves non-commutative operations too)."""
    from collsched.collectives.algorithms.registry import REGISTRY, register

    @register("reduce", "zz-flagged", "test: an ordered chain marked commutative-only")
    def build(req):
        lists = [[] for _ in range(req.nranks)]
        for i in range(req.nranks - 1, 0, -1):  # i -> i - 1, acc (op) in at the receiver
            lists[i].append(("send", i - 1, [(0, 0, 0)]))
            lists[i - 1].insert(0, ("recv-reduce", i, [(0, 0, 0)], "local-first"))
        prog = from_op_lists("reduce", req.nranks, 1, lists)
        prog.commutative_only = True
        return prog
    try:
        res = compile_collective("reduce", "zz-flagged", nranks=4, nbytes=64, nseg=1, model="dag")
        assert res.program.commutative_only is False and res.summary()["notes"] == {}
    finally:
        del REGISTRY[("reduce", "zz-flagged")]


def test_model_auto_retimes_with_fluid_on_shared_wan_links(tmp_path):
    res = compile_collective("allreduce", "rd", nranks=8, nbytes=1 << 16, nseg=1,
                             topology=ROOT / "topologies" / "wan-3x16.yaml", model="auto")
    assert res.model == "fluid" and res.model_choice["by"] == "fluid"


@pytest.mark.parametrize("argv,needle", [
    (["--collective", "alltoall", "--algorithm", "nope"], "--algorithm: nope: expected one of"),
    (["--collective", "alltoall", "--algorithm", "pair", "--root", "1"], "--root: 1: expected none"),
    (["--collective", "bcast", "--algorithm", "chain", "--root", "9"], "--root: 9: expected a rank in 0..4"),
    (["--collective", "reduce", "--algorithm", "chain", "--tau", "1ms"], "--tau"),
    (["--collective", "reduce", "--algorithm", "chain", "--engine", "none"], "--engine"),
    (["--collective", "reduce", "--algorithm", "chain", "--segments", "0"], "--segments"),
    (["--collective", "reduce", "--algorithm", "chain", "--elem-bytes", "0"], "--elem-bytes"),
    (["--collective", "allreduce", "--algorithm", "ring", "--topology", "/nonexistent.yaml"], "nonexistent"),
    (["--collective", "alltoall", "--algorithm", "pair", "--ranks", "300000"], "of memory"),
    (["--collective", "bcast", "--algorithm", "chain", "--elem-bytes", "8"], "--elem-bytes: 8: expected nothing"),
    (["--algorithm", "ring", "--root", "1"], "--root: 1: expected nothing for allgather"),
    (["--algorithm", "ring", "--elem-bytes", "8"], "--elem-bytes: 8: expected nothing for allgather"),
])
def test_bad_input_is_one_line_and_writes_nothing(capsys, tmp_path, argv, needle):
    out = tmp_path / "x.sched"
    code, _, err = run(capsys, "compile", "--ranks", "5", "--bytes", "4KiB", *argv, "-o", str(out))
    assert code == 2
    assert needle in one_line(err)
    assert list(tmp_path.iterdir()) == []


def test_verify_names_the_violation_and_exits_1(capsys, tmp_path):
    bad = from_op_lists("bcast", 2, 1, [[("send", 1, [(0, 0, 0)])], [("recv", 0, [(0, 0, 0)]),
                                                                       ("recv", 0, [])]])
    bad.bytes_min = bad.bytes_max = 8
    path = tmp_path / "bad.sched"
    schedfile.write(bad, path)
    code, out, err = run(capsys, "verify", str(path))
    assert code == 1 and out == ""
    assert "rank 1, op 1" in err and "[matching]" in err
    good = tmp_path / "good.sched"
    schedfile.write(from_op_lists("bcast", 2, 1, [[("send", 1, [(0, 0, 0)])], [("recv", 0, [(0, 0, 0)])]]), good)
    corrupt = tmp_path / "corrupt.sched"
    corrupt.write_bytes(good.read_bytes()[:-3])
    code, out, err = run(capsys, "verify", str(good), str(path), str(corrupt))
    assert code == 1  # invalid beats unreadable
    assert "good.sched: valid" in out
    assert "bad.sched: invalid" in err and "corrupt.sched" in err
    code, _, err = run(capsys, "simulate", str(path))
    assert code == 1 and "invalid" in err
    code, _, err = run(capsys, "show", str(corrupt))
    assert code == 2 and "corrupt.sched" in one_line(err)


def test_simulate_options(capsys, tmp_path):
    out = tmp_path / "r.sched"
    assert run(capsys, "compile", "--collective", "reduce", "--algorithm", "binomial", "--ranks", "4",
               "--bytes", "1KiB:64KiB", "--segments", "1", "-o", str(out))[0] == 0
    code, stdout, _ = run(capsys, "simulate", str(out), "--bytes", "2KiB", "--elem-bytes", "8", "--json")
    assert code == 0 and json.loads(stdout)["nbytes"] == 2048 and json.loads(stdout)["elem_bytes"] == 8
    code, _, err = run(capsys, "simulate", str(out), "--bytes", "1MiB")
    assert code == 2 and "1024..65536" in one_line(err)
    code, stdout, _ = run(capsys, "simulate", str(out), "--model", "fluid")
    assert code == 0 and "fluid model" in stdout
    code, _, err = run(capsys, "plot", str(out), "-o", str(tmp_path / "p.png"))
    assert code == 2 and "simulate" in one_line(err)


def test_algorithms_command(capsys):
    code, stdout, _ = run(capsys, "algorithms", "--json")
    assert code == 0
    rows = json.loads(stdout)
    colls = {r["collective"] for r in rows}
    assert {"allgather", "alltoall", "bcast", "reduce", "allreduce"} <= colls
    assert any(r["collective"] == "allgather" and r["algorithm"] == "ring" for r in rows)
    code, stdout, _ = run(capsys, "algorithms", "--collective", "allreduce")
    assert code == 0 and stdout.startswith("allreduce: ") and "ring" in stdout and "bcast" not in stdout


def test_allgather_compile_is_unchanged(capsys, tmp_path):
    out = tmp_path / "ring.sched"
    code, stdout, _ = run(capsys, "compile", "--algorithm", "ring", "--ranks", "4", "--bytes", "8",
                          "-o", str(out))
    assert code == 0 and stdout.startswith(f"{out}: ring, 4 ranks")
    s = schedfile.read(out)
    assert s.format_version == "1.0" and not isinstance(s, Program)


def test_hand_written_program_with_every_flag_round_trips_through_the_cli(capsys, tmp_path):
    prog = from_op_lists("allreduce", 2, 1, [
        [("send", 1, [(0, 0, 0)], "fifo"), ("recv-reduce", 1, [(0, 0, 0)], "local-first", "fence")],
        [("send", 0, [(0, 0, 0)], "fifo"), ("recv-reduce", 0, [(0, 0, 0)])]])
    assert verify(prog) == []
    path = tmp_path / "h.sched"
    schedfile.write(prog, path)
    code, stdout, _ = run(capsys, "show", str(path))
    assert code == 0 and "recv-reduce peer 1 [0>0:0] fence local-first" in stdout
    back = schedfile.read(path)
    assert back.same_ops(prog) and back.file_bytes == os.path.getsize(path)
    assert back.ops[0][1] == Op(2, 1, ((0, 0, 0),), fence=True, local_first=True)


@pytest.fixture
def broken_bcast():
    """A registered bcast that never reaches the last rank: fast, timeable, invalid."""
    from collsched.collectives.algorithms.registry import REGISTRY, register

    @register("bcast", "zz-broken", "test: misses the last rank")
    def build(req):
        lists = [[] for _ in range(req.nranks)]
        for r in range(1, req.nranks - 1):
            lists[req.root].append(("send", r, [(0, 0, g) for g in range(req.nseg)]))
            lists[r].append(("recv", req.root, [(0, 0, g) for g in range(req.nseg)]))
        return from_op_lists("bcast", req.nranks, req.nseg, lists, root=req.root)
    yield "zz-broken"
    del REGISTRY[("bcast", "zz-broken")]


def test_an_invalid_candidate_is_never_written(capsys, tmp_path, broken_bcast):
    res = compile_collective("bcast", "auto", nranks=5, nbytes=4096, nseg=1, model="dag")
    assert res.program.algorithm != broken_bcast and verify(res.program) == []
    bad = [c for c in res.candidates if c["algorithm"] == broken_bcast and "invalid" in c]
    assert bad and "never receives" in bad[0]["invalid"]
    timed = [c for c in res.candidates if c["algorithm"] == broken_bcast and "run_time_s" in c]
    assert timed and timed[0]["run_time_s"] < res.timing.run_time_s  # it was the fastest
    out = tmp_path / "b.sched"
    code, _, err = run(capsys, "compile", "--collective", "bcast", "--algorithm", broken_bcast,
                       "--ranks", "5", "--bytes", "4KiB", "--segments", "1", "-o", str(out))
    assert code == 1 and "compiler bug" in one_line(err) and "never receives" in err
    assert not out.exists()
