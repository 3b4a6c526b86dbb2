"""Intergroup commands end to end (cli_inter.py over intergroup/compile.py): compile every
algorithm, show, simulate, plot and verify the file; every bad input is one line on
stderr, exit status 2, and no file written."""
import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from collsched import schedfile
from collsched.cli import main
from collsched.intergroup import PLANS, Groups
from collsched.intergroup.compile import algorithms, compile_intergroup
from collsched.intergroup.inputs import MAX_GROUP, groups_from_options, parse_groups
from collsched.intergroup.schedule import InterSchedule
from collsched.intergroup.verify import verify

INTER = ["compile", "--collective", "inter-allgather", "--groups", "5:3", "--bytes", "64KiB"]


def run(capsys, *argv):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize("algorithm", algorithms() + ["auto"])
def test_compile_each_algorithm(tmp_path, capsys, algorithm):
    out = tmp_path / "k.sched"
    status, text, err = run(capsys, *INTER, "--algorithm", algorithm, "-o", out, "--json")
    assert (status, err) == (0, "")
    d = json.loads(text)
    s = schedfile.read(out)
    assert isinstance(s, InterSchedule) and verify(s) == []
    assert (d["p"], d["q"], d["collective"], d["total_ops"]) == (5, 3, "inter-allgather", s.total_ops)
    assert d["file_bytes"] == out.stat().st_size
    # The header's algorithm field has 16 bytes: "root-gather-mpich" is stored cut.
    assert s.algorithm == d["algorithm"] and (algorithm == "auto" or d["algorithm"] == algorithm)
    assert d["blocks_a"] == {"ranks": 5, "min": 65536, "max": 65536, "total": 5 * 65536, "equal": True}
    b = d["bounds"]
    assert b["M"] == pytest.approx(50e-6 + 5 * 65536 * 8e-9)  # the default cluster: 50 us, 125 MB/s
    assert all(b[k] > 0 for k in b)
    assert d["gap_to_M"] == pytest.approx(d["predicted_run_time_s"] / b["M"] - 1)
    assert d["predicted_run_time_s"] >= b["lower_bound"] * (1 - 1e-12)
    assert d["single_port"]["predicted_s"] >= b["M_paper"] * (1 - 1e-12)
    if algorithm == "auto":
        tried = d["auto"]["predicted_run_time_s"]
        assert set(tried) == set(PLANS) and min(tried.values()) == d["predicted_run_time_s"]
        # (one site: kang-grid is Kang's exchange again, not a candidate)


def test_compile_text_show_simulate_plot_verify(tmp_path, capsys):
    out = tmp_path / "kv.sched"
    status, text, _ = run(capsys, "compile", "--collective", "inter-allgatherv", "--groups", "4:3",
                          "--bytes", "1KiB", "--bytes-b", "2KiB", "--sizes", "arithmetic",
                          "--algorithm", "kang-v", "-o", out, "--lower-bound")
    assert status == 0
    line, bounds = text.splitlines()
    assert line.startswith(f"{out}: kang-v, inter-allgatherv 4:3 ranks, A 1024..4096 B") and "verified" in line
    assert bounds.startswith("bounds (the paper's at t_s = 5e-05 s, t_w = 8e-09 s/B): M ")
    assert "Theorem 1" not in bounds and "Eq. 4" in bounds

    status, text, _ = run(capsys, "show", out)
    assert status == 0
    assert "groups      A 4 ranks (0..3), B 3 ranks (4..6)" in text
    assert "blocks      A 1024..4096 B (total 10240), B 2048..6144 B (total 12288)" in text
    assert "rank 4 (b_0):" in text
    assert any(ln.split()[1:3] == ["send", "->"] and "A[" in ln for ln in text.splitlines())
    status, one, _ = run(capsys, "show", out, "--rank", 0)
    assert status == 0 and "rank 0 (a_0)" in one and "rank 1 " not in one

    status, text, _ = run(capsys, "simulate", out)
    assert status == 0 and "run time" in text and "fluid model" in text
    status, text, _ = run(capsys, "simulate", out, "--json", "--model", "fluid")
    d = json.loads(text)
    assert status == 0 and d["model"] == "fluid" and len(d["exit_times_s"]) == 7
    assert d["run_time_s"] == pytest.approx(max(d["exit_times_s"]))

    png = tmp_path / "kv.png"
    status, text, _ = run(capsys, "plot", out, "-o", png)
    assert status == 0 and png.stat().st_size > 1000 and png.read_bytes()[:4] == b"\x89PNG"


def test_verify_command(tmp_path, capsys):
    out = tmp_path / "k.sched"
    assert run(capsys, *INTER, "--algorithm", "kang", "-o", out)[0] == 0
    status, text, err = run(capsys, "verify", out)
    assert (status, err) == (0, "") and "valid (kang, 8 ranks" in text


def test_duplex_is_recorded_and_simulated_by_default(tmp_path, capsys):
    out = tmp_path / "h.sched"
    status, text, _ = run(capsys, *INTER, "--algorithm", "kang", "-o", out, "--duplex", "half", "--json")
    assert status == 0 and not schedfile.read(out).full_duplex
    compiled = json.loads(text)["predicted_run_time_s"]
    status, text, _ = run(capsys, "simulate", out, "--json")
    assert status == 0 and json.loads(text)["run_time_s"] == pytest.approx(compiled)
    status, text, _ = run(capsys, "simulate", out, "--json", "--duplex", "full")
    assert status == 0 and json.loads(text)["run_time_s"] < compiled


def test_ls_does_not_break_on_intergroup_files(tmp_path, capsys):
    assert run(capsys, *INTER, "--algorithm", "kang", "-o", tmp_path / "k.sched")[0] == 0
    status, text, err = run(capsys, "ls", tmp_path)
    assert status == 0 and err == "" and "k.sched" in text


def test_size_file(tmp_path, capsys):
    sizes = tmp_path / "sizes.yaml"
    sizes.write_text("a: [0, 100, 1KiB]\nb: [7, 300]\n")
    out = tmp_path / "f.sched"
    status, text, err = run(capsys, "compile", "--collective", "inter-allgatherv", "--groups", "3:2",
                            "--bytes", "1024", "--sizes", sizes, "--algorithm", "auto", "-o", out, "--json")
    assert status == 0, err
    s = schedfile.read(out)
    assert s.groups == Groups((0, 100, 1024), (7, 300)) and verify(s) == []


BAD = [
    (["--bytes", "1KiB:2KiB"], "--bytes: 1KiB:2KiB: expected one size"),
    (["--groups", "5"], "--groups: 5: expected P:Q"),
    (["--groups", "0:3"], "--groups: 0:3"),
    (["--groups", "5:3:1"], "--groups"),
    (["--groups", "a:b"], "--groups"),
    (["--groups", f"{MAX_GROUP + 1}:1"], "--groups"),
    (["--groups", "+5:3"], "--groups"),
    (["--sizes", "arithmetic"], "--sizes: arithmetic: expected equal"),
    (["--bytes-b", "1KiB:4KiB"], "--bytes-b"),
    (["--bytes-b", "-3"], "--bytes-b"),
    (["--ranks", "8"], "--ranks: 8: expected --groups"),
    (["--segments", "4"], "--segments"),
    (["--algorithm", "ring"], "--algorithm: ring: expected one of"),
]


@pytest.mark.parametrize("extra, message", BAD, ids=[" ".join(b[0]) for b in BAD])
def test_bad_compile_input(tmp_path, capsys, extra, message):
    argv = INTER + ["--algorithm", "kang", "-o", tmp_path / "x.sched"]
    for flag, value in zip(extra[::2], extra[1::2]):
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    status, out, err = run(capsys, *argv)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and message in err, err
    assert list(tmp_path.iterdir()) == []


def test_unknown_size_rule(tmp_path, capsys):
    status, _, err = run(capsys, "compile", "--collective", "inter-allgatherv", "--groups", "3:2",
                         "--bytes", "1KiB", "--sizes", "arithmetc", "--algorithm", "kang-v",
                         "-o", tmp_path / "x.sched")
    assert status == 2 and "--sizes: arithmetc: expected equal, arithmetic or a YAML file" in err
    assert list(tmp_path.iterdir()) == []


def test_missing_groups(tmp_path, capsys):
    status, _, err = run(capsys, "compile", "--collective", "inter-allgather", "--bytes", "1KiB",
                         "--algorithm", "kang", "-o", tmp_path / "x.sched")
    assert status == 2 and err.startswith("collsched: error: --groups: expected P:Q")
    assert list(tmp_path.iterdir()) == []


SIZE_FILES = [
    ("a: [1, 2]\nb: [3, 4]\n", "a: expected 3 byte counts (--groups 3:2), got 2"),
    ("a: [1, 2, 3]\nb: [3]\n", "b: expected 2 byte counts"),
    ("a: [1, -2, 3]\nb: [3, 4]\n", "a[1]: expected a byte count"),
    ("a: [1, 2.5, 3]\nb: [3, 4]\n", "a[1]"),
    ("a: [1, 2, 3]\nb: [3, lots]\n", "b[1]: expected a byte count"),
    ("a: [1, 2, 3]\n", "b: missing required field"),
    ("a: [1, 2, 3]\nb: [3, 4]\nc: 1\n", "c: unknown field"),
    ("a: [1, 2\n", "sizes.yaml"),
    ("", "file is empty"),
]


@pytest.mark.parametrize("text, message", SIZE_FILES, ids=[s[1][:20] for s in SIZE_FILES])
def test_bad_size_file(tmp_path, capsys, text, message):
    sizes = tmp_path / "sizes.yaml"
    sizes.write_text(text)
    status, out, err = run(capsys, "compile", "--collective", "inter-allgatherv", "--groups", "3:2",
                           "--bytes", "3", "--sizes", sizes, "--algorithm", "kang-v",
                           "-o", tmp_path / "x.sched")
    assert status == 2 and out == "" and err.count("\n") == 1
    assert f"{sizes}: " in err and message in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sizes.yaml"]


def test_size_file_with_byte_options(tmp_path, capsys):
    sizes = tmp_path / "sizes.yaml"
    sizes.write_text("a: [1, 2, 3]\nb: [3, 4]\n")
    base = ["compile", "--collective", "inter-allgatherv", "--groups", "3:2", "--sizes", sizes,
            "--algorithm", "kang-v", "-o", tmp_path / "x.sched"]
    status, _, err = run(capsys, *base, "--bytes", "3")
    assert status == 2 and "--bytes: 3: expected the largest block" in err and "4 bytes" in err
    status, _, err = run(capsys, *base, "--bytes", "4", "--bytes-b", "4")
    assert status == 2 and "--bytes-b: 4: expected no --bytes-b with a size file" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sizes.yaml"]


def test_bad_simulate_and_plot_input(tmp_path, capsys):
    out = tmp_path / "k.sched"
    assert run(capsys, *INTER, "--algorithm", "kang", "-o", out)[0] == 0
    for argv, message in [(["simulate", out, "--bytes", "1KiB"], "--bytes: 1KiB: expected nothing"),
                          (["plot", out, "-o", tmp_path / "k.png", "--bytes", "1KiB"], "--bytes"),
                          (["show", out, "--rank", "8"], "--rank: 8: expected 0..7"),
                          (["simulate", out, "--topology", tmp_path / "none.yaml"], "none.yaml")]:
        status, text, err = run(capsys, *argv)
        assert status == 2 and text == "" and err.count("\n") == 1 and message in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.sched"]


def test_invalid_file_is_refused_by_simulate(tmp_path, capsys):
    """A file that decodes but does not verify (a receive dropped, checksums right)."""
    from collsched.intergroup.schedule import from_plan

    s = from_plan(PLANS["kang"](Groups.equal(2, 2, 8, 8)))
    keep = [i for i in range(s.total_ops) if i != int(s.offsets[1]) - 1]
    counts = [sum(1 for i in keep if s.offsets[r] <= i < s.offsets[r + 1]) for r in range(4)]
    s.offsets = __import__("numpy").concatenate([[0], __import__("numpy").cumsum(counts)])
    for col in ("kind", "peer", "group", "lo", "hi", "fifo", "step"):
        setattr(s, col, getattr(s, col)[keep])
    path = tmp_path / "bad.sched"
    schedfile.write(s, path)
    status, out, err = run(capsys, "simulate", path)
    assert status == 1 and out == "" and err.startswith(f"{path}: invalid: rank") and "[matching]" in err


def test_parse_groups_strict():
    assert parse_groups("25:7") == (25, 7) and parse_groups(f"{MAX_GROUP}:1") == (MAX_GROUP, 1)
    for bad in ("", "7", "1:0", "1:-1", "1.0:2", "٣:2", "1 :2x", None):
        with pytest.raises(Exception) as e:
            parse_groups(bad)
        assert e.value.source == "--groups"


def test_sizes_rules():
    assert groups_from_options("3:2", "10", None, "arithmetic", "inter-allgatherv") == \
        Groups((10, 20, 30), (10, 20))
    assert groups_from_options("3:2", "10", "4", None, "inter-allgather") == Groups((10,) * 3, (4, 4))


HYP = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@HYP
@given(st.integers(1, 8), st.integers(1, 8), st.integers(0, 1 << 22), st.integers(0, 1 << 22))
def test_auto_compiles_a_verified_file_within_the_models(tmp_path_factory, p, q, ka, kb):
    out = tmp_path_factory.mktemp("auto") / "a.sched"
    res = compile_intergroup("auto", Groups.equal(p, q, ka, kb), output=out)
    s = schedfile.read(out)
    assert s.same_ops(res.schedule) and verify(s) == [] and s.input_hash == res.schedule.input_hash
    b = res.bounds
    if max(ka, kb) > 0:
        assert res.single_port_s >= b["M_paper"] * (1 - 1e-12)
        assert res.timing.run_time_s >= b["lower_bound"] * (1 - 1e-12)
    assert res.timing.run_time_s == min(v for v in res.algorithms_tried.values())


def test_auto_on_a_grid_tries_the_grid_plan(tmp_path):
    """wan-3x16: three sites of 16 hosts; A on the first 10 ranks, B on the next 14."""
    res = compile_intergroup("auto", Groups.equal(10, 14, 1 << 16, 1 << 16),
                             topology="topologies/wan-3x16.yaml", output=tmp_path / "g.sched")
    assert set(res.algorithms_tried) == set(PLANS) | {"kang-grid"}
    assert res.timing.run_time_s == min(res.algorithms_tried.values())
    grid = compile_intergroup("kang-grid", Groups.equal(10, 14, 1 << 16, 1 << 16),
                              topology="topologies/wan-3x16.yaml")
    assert verify(grid.schedule) == [] and grid.schedule.algorithm == "kang-grid"
    assert set(compile_intergroup("auto", Groups.equal(2, 2, 8, 8)).algorithms_tried) == set(PLANS)


def test_input_hash_names_the_inputs():
    g = Groups.equal(3, 2, 100, 100)
    h = [compile_intergroup("kang", x).schedule.input_hash
         for x in (g, g, Groups.equal(3, 2, 100, 101))]
    assert h[0] == h[1] != h[2]
    assert compile_intergroup("kang", g, model="dag").schedule.input_hash != h[0]


def test_ls_lists_intergroup_files_and_who_wins(tmp_path, capsys):
    """`collsched ls` reads intergroup headers (groups extension checked) and says which
    file the runtime takes when two serve the same calls (either group being A)."""
    d = tmp_path / "s"
    d.mkdir()
    assert run(capsys, *INTER, "--algorithm", "kang", "-o", d / "a.sched")[0] == 0
    status, _, err = run(capsys, "compile", "--collective", "inter-allgather", "--groups", "3:5",
                         "--bytes", "64KiB", "--algorithm", "kang-v", "-o", d / "b.sched")
    assert status == 0 and "overlaps other schedules" in err and "a.sched (kang)" in err
    status, text, _ = run(capsys, "ls", d)
    assert status == 0 and "a.sched  inter-allgather 5:3 ranks" in text
    assert "never used: earlier files serve its whole range (a.sched)" in text
    raw = bytearray((d / "b.sched").read_bytes())
    raw[140] ^= 1  # a block size in the groups extension
    (d / "b.sched").write_bytes(bytes(raw))
    assert "skipped b.sched: groups_crc32" in run(capsys, "ls", d)[1]
