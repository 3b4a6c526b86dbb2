"""Intercommunicator MPI_Allgather / MPI_Allgatherv by intergroup schedules (issue 19 item 3).

Real intercommunicators under Open MPI (MPI_Comm_split + MPI_Intercomm_create from
MPI_COMM_WORLD, tests/runtime/apps/inter_app.c), every compiled algorithm at several group
shapes, each call's receive buffer compared byte for byte with Open MPI's own
intercommunicator collective on the same inputs: through collsched_allgather(v), the
preload library and the merged entries (collsched_inter_allgather(v)_merged); fallback,
strict mode, corrupt and hostile files. The reader and the whole-schedule proof are also
run without MPI (tests/runtime/apps/inter_check_main.c), against the Python reader and
the plans of collsched.intergroup. The merged entries run under SimGrid SMPI too."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from collsched import schedfile
from collsched.errors import ScheduleFileError
from collsched.intergroup import PLANS, Groups
from collsched.intergroup.compile import FIFO_PLANS
from collsched.intergroup.schedule import from_plan, mark_fifo_links
from rt_helpers import APPS, BUILD, DATA, ROOT, TIMEOUT, build_c_tool, build_mpi_app, mpirun_cmd
from test_preload_mpi import preload_env

ALGORITHMS = list(PLANS)  # kang, kang-v, root-gather, root-gather-mpich
ITERS = 3


def write(path: Path, algorithm: str, a: list[int], b: list[int], collective: str | None = None) -> Path:
    """The plan's schedule as the compiler writes it: the paper's algorithms with FIFO sends
    per link (synchronous, each waiting for the previous one to the same peer)."""
    s = from_plan(PLANS[algorithm](Groups(a, b)), collective)
    if algorithm in FIFO_PLANS:
        mark_fifo_links(s)
    schedfile.write(s, path)
    return path


@pytest.fixture(scope="module")
def linked(tmp_path_factory) -> Path:
    return build_mpi_app(tmp_path_factory.mktemp("inter") / "inter_linked", "inter_app.c", "-DLINKED",
                         linked=True)


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Path:
    return build_mpi_app(tmp_path_factory.mktemp("inter") / "inter_plain", "inter_app.c")


@pytest.fixture(scope="module")
def checker(tmp_path_factory) -> Path:
    return build_c_tool(tmp_path_factory.mktemp("inter") / "inter_check",
                        ["schedfile.c", "crc32.c", "inter_file.c", "inter_check.c"], "inter_check_main.c")


def launch(app: Path, nranks: int, cases: list[list[str]], env: dict) -> subprocess.CompletedProcess:
    args: list[str] = []
    for i, case in enumerate(cases):
        args += (["+"] if i else []) + case
    return subprocess.run(mpirun_cmd(nranks) + [str(app), *args], capture_output=True, text=True,
                          timeout=TIMEOUT, env=env)


def linked_env(schedules: Path | None, **extra: str) -> dict:
    env = preload_env(schedules)  # COLLSCHED_SCHEDULES and VERBOSE, without the preload
    env.pop("LD_PRELOAD")
    env.update(extra)
    return env


def csv(v: list[int]) -> str:
    return ",".join(map(str, v))


def case_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stdout.splitlines() if line.startswith("inter_app: case")]


def assert_cases(proc, n: int, used: int | None):
    """Every case OK (its data equal to Open MPI's); `used`: calls that ran a schedule."""
    lines = case_lines(proc)
    assert proc.returncode == 0 and len(lines) == n, proc.stdout + proc.stderr
    for line in lines:
        assert " OK " in line, proc.stdout + proc.stderr
        if used is not None:
            assert f"used {used} of {ITERS} calls" in line, proc.stdout + proc.stderr


def matrix(d: Path, p: int, q: int) -> list[tuple[Path, list[str]]]:
    """Per algorithm an allgather and an allgatherv case, each with its own sizes (so each
    selects exactly its file): equal blocks, arithmetic, zero-size blocks, a datatype that
    is not a run of bytes, allgatherv blocks in reverse order with gaps."""
    cases = []
    for i, alg in enumerate(ALGORITHMS):
        gappy = i == 3  # 8 bytes per element: two ints and holes
        ka, kb = 40 + i, 70 + 3 * i
        a, b = [ka] * p, [kb] * q
        scale = 8 if gappy else 1
        f = write(d / f"ag-{alg}.sched", alg, [k * scale for k in a], [k * scale for k in b])
        cases.append((f, ["--a", csv(a), "--b", csv(b), "--type", "gappy" if gappy else "byte"]))
        if i == 0:
            a, b = [5 * (r + 1) for r in range(p)], [3 * (r + 1) for r in range(q)]
        elif i == 1:
            a, b = [(r % 2) * 11 for r in range(p)], [(r + 1) % 2 * 13 + 2 * r for r in range(q)]
        elif i == 2:
            a, b = [17] * p, [17] * q
        else:
            a, b = [2 * r + 1 for r in range(p)], [4 * (q - r) for r in range(q)]
        f = write(d / f"v-{alg}.sched", alg, [k * scale for k in a], [k * scale for k in b],
                  "inter-allgatherv")
        cases.append((f, ["--v", "--a", csv(a), "--b", csv(b), "--type", "gappy" if gappy else "byte",
                          "--displs", "reversed" if i % 2 else "packed"]))
    return cases


SHAPES = [(1, 1), (2, 1), (3, 2), (1, 3), (2, 3)]


@pytest.mark.mpi
@pytest.mark.parametrize("p,q", SHAPES)
def test_every_algorithm_on_intercommunicators(linked, tmp_path, p, q):
    """collsched_allgather(v) on a true intercommunicator, ranks arriving apart."""
    cases = matrix(tmp_path, p, q)
    proc = launch(linked, p + q, [c + ["--api", "collsched", "--sleep", "--iters", str(ITERS)]
                                  for _, c in cases], linked_env(tmp_path))
    assert_cases(proc, len(cases), used=ITERS)
    for f, _ in cases:  # each case ran its own file, proven once
        assert proc.stderr.count(f"selected {f} ") == 1, proc.stderr
        assert f"{f}: whole intergroup schedule checked on rank 0: correct" in proc.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("p,q", [(2, 1), (2, 3)])
def test_preload_serves_intercommunicators(plain, tmp_path, p, q):
    """An unmodified program's MPI_Allgather(v) on an intercommunicator, LD_PRELOAD."""
    cases = matrix(tmp_path, p, q)
    proc = launch(plain, p + q, [c + ["--iters", str(ITERS)] for _, c in cases], preload_env(tmp_path))
    assert_cases(proc, len(cases), used=None)
    for f, _ in cases:
        assert proc.stderr.count(f"selected {f} ") == 1, proc.stderr
    assert "falling back" not in proc.stderr, proc.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("p,q", [(3, 2), (1, 3)])
def test_merged_entries_match_the_intercommunicator(linked, tmp_path, p, q):
    """collsched_inter_allgather(v)_merged on MPI_COMM_WORLD split at p: the same bytes as
    Open MPI's intercommunicator collective of the same two groups."""
    cases = matrix(tmp_path, p, q)
    proc = launch(linked, p + q, [c + ["--api", "merged", "--iters", str(ITERS)] for _, c in cases],
                  linked_env(tmp_path))
    assert_cases(proc, len(cases), used=ITERS)


@pytest.mark.mpi
def test_groups_swapped_and_symmetric(linked, tmp_path):
    """A schedule whose A is the communicator's second group (p and q swapped, also in the
    merged form), and p = q with equal blocks (both mappings fit: the low group is A)."""
    write(tmp_path / "swapped-ag.sched", "kang", [9] * 3, [21])         # the app's groups: 1 | 3
    write(tmp_path / "swapped-v.sched", "kang-v", [4, 0, 6], [12], "inter-allgatherv")
    write(tmp_path / "sym.sched", "root-gather", [30, 30], [30, 30])
    one_three = [["--a", "21", "--b", "9,9,9"], ["--v", "--a", "12", "--b", "4,0,6", "--displs", "reversed"]]
    cases = ([c + ["--api", api] for api in ("collsched", "merged") for c in one_three])
    proc = launch(linked, 4, cases, linked_env(tmp_path))
    assert_cases(proc, len(cases), used=ITERS)
    proc = launch(linked, 4, [["--a", "30,30", "--b", "30,30", "--api", api] for api in ("collsched", "merged")],
                  linked_env(tmp_path / "sym.sched"))
    assert_cases(proc, 2, used=ITERS)


@pytest.mark.mpi
def test_mismatched_calls_fall_back(linked, tmp_path):
    """Sizes or group shapes the file does not have: the MPI library's collective (the
    merged form: its root gathering), correct data, one line."""
    f = write(tmp_path / "kang.sched", "kang", [50, 50], [20, 20, 20])
    cases = [["--a", "50,50", "--b", "21,21,21"], ["--v", "--a", "50,51", "--b", "20,20,20"],
             ["--a", "50", "--b", "20,20,20,20"]]
    runs = [c + ["--api", api] for c in cases for api in ("collsched", "merged")]
    proc = launch(linked, 5, runs[:4], linked_env(f))
    assert_cases(proc, 4, used=0)
    # once per communicator: each case's intercommunicator is a new one, MPI_COMM_WORLD says it once
    assert proc.stderr.count("falling back to the MPI library") == 3, proc.stderr
    assert f"{f}: groups: expected 2:3 ranks" in proc.stderr
    proc = launch(linked, 5, runs[4:], linked_env(f))  # 1:4 groups of a 2:3 file
    assert_cases(proc, 2, used=0)


@pytest.mark.mpi
@pytest.mark.parametrize("api,call", [("collsched", "MPI_Allgather"), ("merged", "MPI_Allgatherv")])
def test_strict_mode_refuses(linked, tmp_path, api, call):
    f = write(tmp_path / "kang.sched", "kang", [50, 50], [20])
    case = ["--a", "50,50", "--b", "21", "--api", api] + (["--v"] if call.endswith("v") else [])
    proc = launch(linked, 3, [case], linked_env(f, COLLSCHED_STRICT="1"))
    assert proc.returncode != 0 and "case 0 OK" not in proc.stdout, proc.stdout + proc.stderr
    assert f"COLLSCHED_STRICT=1: {call} refused between groups of 2 and 1 ranks" in proc.stderr, proc.stderr
    assert f"{f}: groups: expected 2:1 ranks" in proc.stderr


def corrupt(src: Path, dst: Path, offset: int) -> Path:
    data = bytearray(src.read_bytes())
    data[offset] ^= 0x5A
    dst.write_bytes(bytes(data))
    return dst


def edited(path: Path, edit) -> Path:
    """A file with valid checksums whose operations `edit` changed (kang-v, 2:3 groups)."""
    s = from_plan(PLANS["kang-v"](Groups([10, 20], [5, 0, 7])), "inter-allgatherv")
    edit(s)
    path.write_bytes(schedfile.encode(s))
    return path


def recvs_of(s, rank: int) -> list[int]:
    return [i for i in range(int(s.offsets[rank]), int(s.offsets[rank + 1])) if s.kind[i] == 1]


def shift_recv(s):
    """Rank 0's first receive expects a range one byte later than the send carries."""
    i = recvs_of(s, 0)[0]
    s.lo[i] += 1
    s.hi[i] += 1


def swap_recvs(s):
    """Rank 2 (b_0) takes its two receives from b_2 in the other order: its list is fine
    alone, the pair does not match."""
    i, j = [k for k in recvs_of(s, 2) if s.peer[k] == 4][:2]
    for col in (s.peer, s.group, s.lo, s.hi):
        col[i], col[j] = col[j], col[i]


def partly_duplicate(s):
    """Rank 3 (b_1, an empty block) receives [5, 15) of A after [10, 20)."""
    j = recvs_of(s, 3)[1]
    s.lo[j], s.hi[j] = 5, 15


@pytest.mark.mpi
def test_corrupt_and_hostile_files_fall_back(linked, checker, tmp_path):
    good = write(tmp_path / "good.sched", "kang-v", [10, 20], [5, 0, 7], "inter-allgatherv")
    section = len(good.read_bytes()) - 10  # inside the last rank's section
    files = {"section_crc32": corrupt(good, tmp_path / "crc.sched", section),
             "header_crc32": corrupt(good, tmp_path / "head.sched", 60),
             "whole schedule": edited(tmp_path / "matching.sched", swap_recvs)}
    for field, f in files.items():
        proc = launch(linked, 5, [["--v", "--a", "10,20", "--b", "5,0,7", "--api", api] for api in ("collsched", "merged")],
                      linked_env(f))
        assert_cases(proc, 2, used=0)
        lines = [line for line in proc.stderr.splitlines() if f"{f}: {field}" in line]
        assert len(lines) == 2, proc.stderr  # one line per communicator: the intercommunicator, MPI_COMM_WORLD
        assert "inter_check" not in proc.stderr


def c_check(checker: Path, *files: Path) -> list[str]:
    return subprocess.run([str(checker), *map(str, files)], capture_output=True, text=True,
                          timeout=TIMEOUT).stdout.splitlines()


def test_checker_refuses_what_the_rules_forbid(checker, tmp_path):
    lines = c_check(checker, edited(tmp_path / "a.sched", shift_recv), edited(tmp_path / "b.sched", swap_recvs),
                    edited(tmp_path / "c.sched", partly_duplicate))
    assert "rank 0, op" in lines[0] and ("matching" in lines[0] or "delivery" in lines[0]
                                         or "partly held" in lines[0]), lines
    assert "whole schedule: rank 2, op" in lines[1] and "matching send" in lines[1], lines
    assert "rank 3, op 1: receives [5, 15) of A's data from 2, partly held" in lines[2], lines


def test_checker_finds_deadlock(checker, tmp_path):
    """Each list is valid alone (holding, delivery, a duplicate at b_0) and the pairs match,
    but the walks wait on each other: a_0 forwards B[0,4) from b_1, which forwards it from
    b_0, which sends it only after forwarding A's block, which a_0 sends after its forward."""
    g = Groups([4], [4, 4])
    lists = [  # (kind, peer, group, lo, hi); a_0 = 0, b_0 = 1, b_1 = 2
        [("recv", 2, 1, 0, 4), ("send", 1, 1, 0, 4), ("send", 1, 0, 0, 4), ("recv", 2, 1, 4, 8)],
        [("recv", 0, 1, 0, 4), ("recv", 0, 0, 0, 4), ("send", 2, 0, 0, 4), ("send", 2, 1, 0, 4)],
        [("recv", 1, 0, 0, 4), ("recv", 1, 1, 0, 4), ("send", 0, 1, 0, 4), ("send", 0, 1, 4, 8)],
    ]
    from collsched.intergroup.schedule import InterSchedule
    rows = [(r, *op) for r, ops in enumerate(lists) for op in ops]  # (rank, kind, peer, group, lo, hi)
    offsets = np.cumsum([0] + [len(x) for x in lists])
    s = InterSchedule(groups=g, offsets=offsets,
                      kind=np.array([1 if k == "recv" else 0 for _, k, *_ in rows], np.uint8),
                      peer=np.array([x[2] for x in rows], np.int32),
                      group=np.array([x[3] for x in rows], np.uint8),
                      lo=np.array([x[4] for x in rows], np.int64), hi=np.array([x[5] for x in rows], np.int64),
                      collective="inter-allgatherv")
    path = tmp_path / "cycle.sched"
    path.write_bytes(schedfile.encode(s))
    line = c_check(checker, path)[0]
    assert "whole schedule: rank 0, op 1: never issued" in line and "(progress)" in line, line
    # a_0 sends its own block first (and b_0 receives in that order): no cycle
    s.group[[1, 2, 4, 5]] = s.group[[2, 1, 5, 4]]
    path.write_bytes(schedfile.encode(s))
    assert c_check(checker, path) == ["OK"]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(p=st.integers(1, 5), q=st.integers(1, 5), data=st.data())
def test_checker_accepts_every_plan_and_refuses_a_moved_range(checker, tmp_path_factory, p, q, data):
    """Property: every plan of every algorithm passes the C proof (it runs them all above);
    moving one receive's range by a byte makes it refuse, as the Python reader never does
    (the file is well formed)."""
    sizes = st.lists(st.integers(0, 40), min_size=p + q, max_size=p + q).filter(lambda v: sum(v[:p]) and sum(v[p:]))
    v = data.draw(sizes)
    d = tmp_path_factory.mktemp("prop")
    files = [write(d / f"{alg}.sched", alg, v[:p], v[p:], "inter-allgatherv") for alg in ALGORITHMS]
    assert c_check(checker, *files) == ["OK"] * len(files)
    s = schedfile.read(files[0])
    i = data.draw(st.sampled_from([k for k in range(s.total_ops) if s.kind[k] == 1]))
    if s.lo[i] > 0:
        s.lo[i] -= 1
    else:
        s.hi[i] -= 1
        if s.hi[i] == s.lo[i]:
            return
    moved = d / "moved.sched"
    moved.write_bytes(schedfile.encode(s))
    schedfile.read(moved)
    assert c_check(checker, moved)[0] != "OK"


@pytest.mark.parametrize("field,edit", [
    ("kind", lambda s: s.kind.__setitem__(0, 2)),
    ("group", lambda s: s.group.__setitem__(1, 2)),
    ("peer", lambda s: s.peer.__setitem__(2, 9)),
    ("lo", lambda s: s.lo.__setitem__(0, s.hi[0])),
    ("hi", lambda s: s.hi.__setitem__(0, 10 ** 6)),
])
def test_reader_fields_as_the_python_reader(checker, tmp_path, field, edit):
    """Per-op field checks: the C reader names the same op and field as collsched.schedfile."""
    f = edited(tmp_path / "bad.sched", edit)
    with pytest.raises(ScheduleFileError) as py:
        schedfile.read(f)
    line = c_check(checker, f)[0]
    assert py.value.field in line and line.startswith(f"{f}: "), (line, py.value.field)


def test_section_as_the_runtime_walks_it(checker, tmp_path):
    """root-gather at 2:2: b_0 (rank 2) receives b_1's block (its own group's data: a scratch
    copy) and forwards it only after that receive; MPICH's plan has duplicate receives."""
    f = write(tmp_path / "rg.sched", "root-gather", [6, 6], [5, 5])
    out = subprocess.run([str(checker), "--rank", "2", str(f)], capture_output=True, text=True).stdout
    assert "own_scratch=1" in out, out
    ops = out.splitlines()[:-1]
    for k, op in enumerate(ops):
        if op.startswith("send") and " B " in op:
            deps = op.split("deps=")[1]
            assert deps and all(ops[int(d)].startswith("recv") and int(d) < k for d in deps.split(",")), out
    f = write(tmp_path / "mpich.sched", "root-gather-mpich", [8] * 4, [8] * 4)
    dups = [subprocess.run([str(checker), "--rank", str(r), str(f)], capture_output=True, text=True).stdout
            for r in range(8)]
    assert any("dup=1" in d for d in dups)


@pytest.mark.mpi
@pytest.mark.smpi
def test_smpi_merged_entries(tmp_path):
    """The lab's entries under SimGrid SMPI (no MPI_Intercomm_create there): every algorithm
    on the 4-host platform, 3:1 groups, allgather and allgatherv, plus a fallback."""
    if not shutil.which("smpirun") or not shutil.which("smpicc"):
        pytest.skip("SimGrid SMPI not installed")
    lib = ROOT / "build" / "smpi" / "lib" / "libcollsched.a"
    if not lib.exists():
        pytest.skip(f"{lib} not built (make runtime)")
    exe = tmp_path / "inter_smpi"
    subprocess.run(["smpicc", f"-I{ROOT / 'runtime' / 'include'}", str(APPS / "inter_smpi.c"), str(lib),
                    "-lm", "-lpthread", "-o", str(exe)], check=True, capture_output=True, timeout=TIMEOUT)
    d = tmp_path / "s"
    d.mkdir()
    runs = []
    for i, alg in enumerate(ALGORITHMS):
        write(d / f"ag-{alg}.sched", alg, [1000 + i] * 3, [3000 + i])
        runs.append(["0", str(1000 + i), str(3000 + i)])
        write(d / f"v-{alg}.sched", alg, [100 * (i + 1), 0, 7], [5000 + i], "inter-allgatherv")
        runs.append(["1", f"{100 * (i + 1)},0,7", str(5000 + i)])
    runs.append(["1", "1,2,3", "4"])  # no file: root gathering
    cmd = ["smpirun", "-np", "4", "-platform", str(DATA / "platform-4.xml"), "-hostfile", str(DATA / "hostfile-4.txt"),
           "--cfg=smpi/display-timing:no", "--log=root.thr:warning", str(exe), "3"]
    env = dict(os.environ, COLLSCHED_SCHEDULES=str(d))
    proc = subprocess.run(cmd + [x for r in runs for x in r], capture_output=True, text=True, timeout=TIMEOUT,
                          env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("inter_smpi:")]
    assert len(lines) == len(runs), proc.stdout + proc.stderr
    assert all("data_ok 1" in line for line in lines), proc.stdout
    assert all("used 1" in line for line in lines[:-1]) and "used 0" in lines[-1], proc.stdout


def one_off(sizes: list[int], r: int) -> list[int]:
    return [k + (j == r) for j, k in enumerate(sizes)]


@pytest.mark.mpi
@pytest.mark.parametrize("p,q", [(3, 2), (2, 3), (4, 1), (1, 4)])
def test_allgatherv_agreement_one_rank_off(linked, tmp_path, p, q):
    """Allgatherv's agreement (one message from a rank of the other group, inter_state.c):
    a correct program in which exactly one rank's block differs from the file's (every rank
    knows it: the remote group through its counts) falls back on every rank, whichever rank
    it is, in either group, whichever rank of the other group it sends its flags to; with
    the file's own sizes every call uses it. Data equal to Open MPI's in every case."""
    a, b = [3 * r + 2 for r in range(p)], [5 * r + 1 for r in range(q)]
    f = write(tmp_path / "v.sched", "kang-v", a, b, "inter-allgatherv")
    off = [(one_off(a, r), b) for r in range(p)] + [(a, one_off(b, r)) for r in range(q)]
    for api in ("collsched", "merged"):
        cases = [["--v", "--a", csv(x), "--b", csv(y), "--api", api] for x, y in off]
        proc = launch(linked, p + q, cases, linked_env(f))
        assert_cases(proc, len(cases), used=0)
        proc = launch(linked, p + q, [["--v", "--a", csv(a), "--b", csv(b), "--api", api, "--sleep"]], linked_env(f))
        assert_cases(proc, 1, used=ITERS)


@pytest.mark.mpi
def test_allgatherv_agreement_symmetric_mappings(linked, tmp_path):
    """p = q: a file fits with the low group as A, or with the high one (its sizes the other
    way round), or both (equal sides: the low group is A); one rank off under the swapped
    mapping falls back. Several calls in one run: each case's intercommunicator is new."""
    write(tmp_path / "v-ab.sched", "kang-v", [4, 6, 0], [8, 10, 2], "inter-allgatherv")
    write(tmp_path / "v-sym.sched", "kang-v", [7, 3, 5], [7, 3, 5], "inter-allgatherv")
    used = [["--a", "4,6,0", "--b", "8,10,2"], ["--a", "8,10,2", "--b", "4,6,0", "--displs", "reversed"],
            ["--a", "7,3,5", "--b", "7,3,5"]]
    unused = [["--a", "8,10,3", "--b", "4,6,0"], ["--a", "8,10,2", "--b", "4,7,0"], ["--a", "7,3,5", "--b", "7,3,6"]]
    for api in ("collsched", "merged"):
        proc = launch(linked, 6, [["--v", *c, "--api", api] for c in used], linked_env(tmp_path))
        assert_cases(proc, len(used), used=ITERS)
        proc = launch(linked, 6, [["--v", *c, "--api", api] for c in unused], linked_env(tmp_path))
        assert_cases(proc, len(unused), used=0)
