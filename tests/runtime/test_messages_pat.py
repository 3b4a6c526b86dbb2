"""Multi-piece messages through the PAT engine (runtime/src/pat.c, docs/pat.md "Messages
in the background"): background receive messages land in staging (a message in the slots
of its ops, contiguous from its head's), a serial schedule's background relays send whole
messages from staging (contiguous bytes, else a derived datatype over the pieces), the
send chain stops at a message carrying an own piece, and the call takes over counts that
end on message boundaries. Each run compiles one schedule per iteration (ranks' roles
rotated), runs the engine with PAT_UseSchedule under real Open MPI (progress thread and
explicit driver) and SimGrid SMPI (explicit driver, as the lab's minibench), late ranks
really late, and compares every byte with MPI_Allgather's in every iteration."""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import numpy as np
import pytest

from collsched import ir, schedfile
from rt_helpers import BUILD, ROOT, TIMEOUT, mpirun_cmd

TRYTON = str(ROOT / "topologies" / "tryton-48.yaml")
# tau given to the engine under SMPI: while background work is pending the explicit driver
# advances every tau/32 of simulated time, and each slice costs simulation time
SMPI_TAU = "1e-3"

APP = r"""
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE
#endif
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "collsched.h"

/* pat_msg_app BYTES ITERATIONS SCHED_PATTERN TAU DELAYS_FILE: one compiled schedule per
 * iteration through the PAT engine; every byte compared with MPI_Allgather's. The delays
 * file: ITERATIONS lines of one computation time (s) per rank. */
static uint8_t value(uint64_t rank, uint64_t j, uint64_t k)
{
    uint64_t x = (rank + 1) * 0x9E3779B97F4A7C15ull ^ (j + 7) * 0xBF58476D1CE4E5B9ull ^ (k + 3) * 0x94D049BB133111EBull;
    return (uint8_t)(x >> 29);
}

int main(int argc, char **argv)
{
    int provided = 0, rank = 0, size = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 6) { if (!rank) fprintf(stderr, "usage\n"); MPI_Abort(MPI_COMM_WORLD, 2); }
    int bytes = atoi(argv[1]), iters = atoi(argv[2]);
    double tau = atof(argv[4]);
    double *delay = malloc((size_t)iters * size * sizeof *delay);
    FILE *f = fopen(argv[5], "r");
    for (int i = 0; f && i < iters * size; i++)
        if (fscanf(f, "%lf", &delay[i]) != 1) { fclose(f); f = NULL; }
    if (!f) { fprintf(stderr, "bad delays file\n"); MPI_Abort(MPI_COMM_WORLD, 2); }
    fclose(f);
    size_t total = (size_t)bytes * size;
    uint8_t *send = malloc(bytes + 1), *recv = malloc(total + 1), *ref = malloc(total + 1);
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    collsched_allgather(send, bytes, MPI_BYTE, recv, bytes, MPI_BYTE, comm); /* set-up */
    PAT_Init();
    PAT_UseAlg("files");
    PAT_Declare(comm, bytes, tau);
    long long errors = 0;
    int fallbacks = 0;
    char reason[256] = "";
    for (int k = 0; k < iters; k++) {
        char path[4096];
        snprintf(path, sizeof path, argv[3], k);
        PAT_UseSchedule(path);
        for (int j = 0; j < bytes; j++) send[j] = value((uint64_t)rank, (uint64_t)j, (uint64_t)k);
        memset(recv, 0, total);
        memset(ref, 0xA5, total);
        MPI_Barrier(MPI_COMM_WORLD);
        double d = delay[k * size + rank];
        PAT_ProcessingStart();
        PAT_Sleep(d / 2);
        PAT_Edge(50.0);
        PAT_Sleep(d / 2);
        PAT_ProcessingEnd();
        collsched_allgather(send, bytes, MPI_BYTE, recv, bytes, MPI_BYTE, comm);
        collsched_call_info info;
        collsched_last_call(comm, &info);
        if (!info.used_schedule) { fallbacks++; snprintf(reason, sizeof reason, "%s", info.reason); }
        MPI_Allgather(send, bytes, MPI_BYTE, ref, bytes, MPI_BYTE, MPI_COMM_WORLD);
        for (size_t j = 0; j < total; j++) errors += recv[j] != ref[j];
    }
    long long all_errors = 0;
    int all_fallbacks = 0;
    MPI_Reduce(&errors, &all_errors, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&fallbacks, &all_fallbacks, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("{\"errors\": %lld, \"fallbacks\": %d, \"reason\": \"%s\"}\n", all_errors, all_fallbacks,
               fallbacks ? "see stderr" : "");
    if (fallbacks) fprintf(stderr, "pat_msg_app rank %d fell back: %s\n", rank, reason);
    PAT_Finalize();
    MPI_Comm_free(&comm);
    collsched_finalize();
    MPI_Finalize();
    free(send); free(recv); free(ref); free(delay);
    return 0;
}
"""


# ---- schedules with messages ----

def two_late(p: int, perm, serial: bool = True, joined: bool = True) -> ir.Schedule:
    """A hand-made schedule, nseg 2, for two late ranks L1 = perm[-2], L2 = perm[-1] and
    early ranks E (hub perm[0]). Early ranks send their block (one message) to the hub;
    the hub sends L1 every early segment 0 as one message R0, every segment 1 as R1. L1
    relays in the background to L2: A = segment 0 of all early ranks but the last (a
    contiguous run of R0's staging), B = segment 1 of the early ranks in reverse, then the
    last's segment 0 (pieces from both of R0 and R1, out of order: a derived datatype).
    Then L1 sends its own block to L2 (the send chain stops there) and to the hub; L2
    sends its block to L1 and the hub; the hub sends every early rank what it misses in
    one message (own and forwarded pieces). L2 receives A, B and L1's block in the
    background. joined=False: the same with one piece per message."""
    E, L1, L2 = list(perm[:-2]), perm[-2], perm[-1]
    hub = E[0]
    lists = {r: [] for r in range(p)}
    j = 1 if joined else 0

    def msg(rank, kind, peer, pieces, phase):
        for n, (o, s) in enumerate(pieces):
            lists[rank].append((kind, peer, o, s, phase, 0, j if n else 0))

    block = lambda o: [(o, 0), (o, 1)]
    for e in E[1:]:
        msg(e, "send", hub, block(e), "fg")
        msg(hub, "recv", e, block(e), "fg")
    R0, R1 = [(o, 0) for o in E], [(o, 1) for o in E]
    A = [(o, 0) for o in E[:-1]]
    B = [(o, 1) for o in reversed(E)] + [(E[-1], 0)]
    for pieces in (R0, R1):
        msg(hub, "send", L1, pieces, "fg")
        msg(L1, "recv", hub, pieces, "bg")
    for pieces in (A, B):
        msg(L1, "send", L2, pieces, "bg")
        msg(L2, "recv", L1, pieces, "bg")
    msg(L2, "recv", L1, block(L1), "bg")
    msg(L1, "send", L2, block(L1), "fg")
    msg(L1, "send", hub, block(L1), "fg")
    msg(hub, "recv", L1, block(L1), "fg")
    msg(L2, "send", L1, block(L2), "fg")
    msg(L1, "recv", L2, block(L2), "fg")
    msg(L2, "send", hub, block(L2), "fg")
    msg(hub, "recv", L2, block(L2), "fg")
    for e in E[1:]:
        missing = [(o, s) for o in perm if o != e for s in (0, 1)]
        msg(hub, "send", e, missing, "fg")
        msg(e, "recv", hub, missing, "fg")
    # background ops lead every list (stable: the order within each phase is kept)
    ordered = [sorted(lists[r], key=lambda op: op[4] != "bg") for r in range(p)]
    s = ir.from_op_lists(p, 2, ordered, algorithm="two-late")
    s.serial = serial
    return s


def _messages(lists):
    """Per rank: its messages as [kind, peer, [(origin, segment), ...], phase]."""
    out = []
    for ops in lists:
        msgs = []
        for kind, peer, o, g, phase, _fifo, join in ops:
            if join:
                msgs[-1][2].append((o, g))
            else:
                msgs.append([kind, peer, [(o, g)], phase])
        out.append(msgs)
    return out


def _op_lists(msgs):
    return [[(kind, peer, o, g, phase, 0, int(n > 0)) for kind, peer, pieces, phase in rank
             for n, (o, g) in enumerate(pieces)] for rank in msgs]


def completes(msgs, nseg: int) -> bool:
    """Serial execution with messages under the verifier's stricter rules (docs/semantics.md):
    one in-order walk per rank; a receive message is posted once the previous one has
    completed, the first op after the leading background receives waits for them, a send
    message is issued once the previous one has completed and every piece is held; sends
    are synchronous (rendezvous with the k-th receive message from that peer). Waits only
    grow more satisfiable, so reaching the end here means no deadlock there, nor under the
    looser chains of the runtime."""
    p = len(msgs)
    held = [{(r, g) for g in range(nseg)} for r in range(p)]
    walk, cur_s, cur_r = [0] * p, [None] * p, [None] * p
    lead = [next((i for i, m in enumerate(rank) if not (m[0] == "recv" and m[3] == "bg")), len(rank))
            for rank in msgs]
    nth = []  # per rank, per message: its index among the messages of its kind to/from its peer
    for rank in msgs:
        seen, k = {}, []
        for kind, peer, _, _ in rank:
            k.append(seen.get((kind, peer), 0))
            seen[(kind, peer)] = k[-1] + 1
        nth.append(k)
    moved = True
    while moved:
        moved = False
        for r in range(p):
            while walk[r] < len(msgs[r]):
                kind, peer, pieces, _ = msgs[r][walk[r]]
                if walk[r] == lead[r] and lead[r] and cur_r[r] is not None:
                    break
                if kind == "recv" and cur_r[r] is None:
                    cur_r[r] = walk[r]
                elif kind == "send" and cur_s[r] is None and all(x in held[r] for x in pieces):
                    cur_s[r] = walk[r]
                else:
                    break
                walk[r] += 1
                moved = True
        for a in range(p):
            if cur_s[a] is None:
                continue
            _, b, pieces, _ = msgs[a][cur_s[a]]
            m = cur_r[b]
            if m is not None and msgs[b][m][1] == a and nth[b][m] == nth[a][cur_s[a]]:
                assert msgs[b][m][2] == pieces, (a, b, pieces, msgs[b][m][2])
                held[b].update(pieces)
                cur_s[a] = cur_r[b] = None
                moved = True
    return all(w == len(rank) for w, rank in zip(walk, msgs)) and cur_s == [None] * p and cur_r == [None] * p


def aggregate(s: ir.Schedule) -> ir.Schedule:
    """Joins a rank's consecutive background receive messages from one peer whose matching
    send messages are consecutive at the sender (same phase there): the receive moves up to
    the previous one, the send down to the previous send (only ops of the other kind lie
    between: each chain keeps its order). Kept where completes() still proves it."""
    lists = [[(int(s.kind[i]) and "recv" or "send", int(s.peer[i]), int(s.origin[i]), int(s.segment[i]),
               "bg" if s.phase[i] else "fg", 0, 0) for i in range(s.offsets[r], s.offsets[r + 1])]
             for r in range(s.nranks)]
    msgs = _messages(lists)
    for b in range(s.nranks):
        i = 0
        while i < len(msgs[b]):
            nxt = next((j for j in range(i + 1, len(msgs[b])) if msgs[b][j][0] == "recv"), None)
            m = msgs[b][i]
            if m[0] != "recv" or m[3] != "bg" or nxt is None or msgs[b][nxt][1] != m[1] or msgs[b][nxt][3] != "bg":
                i += 1
                continue
            a = m[1]
            k = sum(1 for x in msgs[b][:i] if x[0] == "recv" and x[1] == a)
            sends = [j for j, x in enumerate(msgs[a]) if x[0] == "send" and x[1] == b]
            s1, s2 = sends[k], sends[k + 1]
            between = [x for x in msgs[a][s1 + 1:s2] if x[0] == "send"]
            if between or msgs[a][s1][3] != msgs[a][s2][3]:
                i += 1
                continue
            trial = [list(map(list, rank)) for rank in msgs]
            for x in trial:
                for y in x:
                    y[2] = list(y[2])
            trial[b][i][2] += trial[b][nxt][2]
            del trial[b][nxt]
            trial[a][s2][2] = trial[a][s1][2] + trial[a][s2][2]
            del trial[a][s1]
            if completes(trial, s.nseg):
                msgs = trial  # and try to join the next one into the same message
            else:
                i += 1
    out = ir.from_op_lists(s.nranks, s.nseg, _op_lists(msgs), algorithm="min3-joined")
    out.serial = s.serial
    return out


def write(s: ir.Schedule, path) -> None:
    s.bytes_min, s.bytes_max = 0, 1 << 30
    schedfile.write(s, path)


# ---- runs ----

def _app(tmp_path, smpi: bool):
    cc = "smpicc" if smpi else "mpicc"
    lib = BUILD / ("smpi/lib" if smpi else "lib") / "libcollsched.a"
    if not shutil.which(cc) or not lib.exists():
        pytest.skip(f"{cc} or {lib} missing (make runtime)")
    src = tmp_path / "pat_msg_app.c"
    src.write_text(APP)
    exe = tmp_path / ("pat_msg_app_smpi" if smpi else "pat_msg_app")
    subprocess.run([cc, "-std=c11", "-O1", "-Wall", "-Werror", f"-I{ROOT / 'runtime' / 'include'}",
                    *os.environ.get("COLLSCHED_SANFLAGS", "").split() * (not smpi),
                    "-o", str(exe), str(src), str(lib), "-lm", "-lpthread"],
                   check=True, timeout=120, capture_output=True)
    return exe


def _delays(tmp_path, p, perms, late_s, seed):
    """Per iteration: early ranks compute 10 ms plus up to 1 ms, the two late ones
    (perm[-2], perm[-1]) late_s and 1.5 * late_s more."""
    rng = np.random.default_rng(seed)
    rows = []
    for perm in perms:
        d = 0.010 + rng.uniform(0, 0.001, p)
        d[perm[-2]] += late_s
        d[perm[-1]] += 1.5 * late_s
        rows.append(" ".join(f"{x:.9f}" for x in d))
    path = tmp_path / "delays.txt"
    path.write_text("\n".join(rows) + "\n")
    return path


def _perms(p, iters, seed):
    rng = np.random.default_rng(seed)
    return [list(rng.permutation(p)) for _ in range(iters)]


def _run(cmd, env=None):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT,
                          env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    out = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("{")))
    return out, proc.stderr


def _smpi_cmd(tmp_path, p):
    if not shutil.which("smpirun"):
        pytest.skip("smpirun not installed")
    from collsched.lab.platform import build_platform
    from collsched.pipeline import resolve_topology
    xml, hosts = build_platform(resolve_topology(p, TRYTON, None)).write(tmp_path)
    return ["smpirun", "-np", str(p), "-platform", str(xml), "-hostfile", str(hosts),
            "--cfg=network/model:CM02", "--cfg=smpi/simulate-computation:no", "--cfg=smpi/test:0",
            "--log=root.thres:error"]


def background_ops(stderr: str) -> int:
    import re
    return sum(int(n) for n in re.findall(r"(\d+) of \d+ ops in the background", stderr))


def _compile(tmp_path, p, iters, seed, **kw):
    perms = _perms(p, iters, seed)
    for k, perm in enumerate(perms):
        write(two_late(p, perm, **kw), tmp_path / f"two-late-{k}.sched")
    return perms, str(tmp_path / "two-late-%d.sched")


@pytest.mark.smpi
@pytest.mark.parametrize("p,nbytes", [(5, 3001), (8, 40000)])
@pytest.mark.parametrize("serial", [True, False])
@pytest.mark.parametrize("joined", [True, False])
def test_messages_in_the_background_smpi(tmp_path, p, nbytes, serial, joined):
    """SMPI, explicit driver: late ranks receive messages and relay them in the background
    (joined=False: the same pieces one per message, the engine's old path)."""
    exe = _app(tmp_path, smpi=True)
    perms, pattern = _compile(tmp_path, p, 3, seed=p, serial=serial, joined=joined)
    delays = _delays(tmp_path, p, perms, 0.005, seed=p)
    out, err = _run(_smpi_cmd(tmp_path, p) + [str(exe), str(nbytes), "3", pattern, SMPI_TAU, str(delays)],
                    env={"COLLSCHED_VERBOSE": "1"})
    assert out["errors"] == 0 and out["fallbacks"] == 0, err[-3000:]
    assert "(explicit driver)" in err and background_ops(err) == 3 * (6 * p - 10), err[-2000:]  # L1 4p - 8, L2 2p - 2


@pytest.mark.mpi
@pytest.mark.parametrize("p,driver,serial,joined", [
    (4, "thread", True, True), (7, "thread", True, True), (7, "thread", False, True),
    (6, "explicit", True, True), (5, "explicit", True, True), (5, "explicit", False, True),
    (7, "thread", True, False), (6, "explicit", False, False)])
def test_messages_in_the_background_real_mpi(tmp_path, p, driver, serial, joined):
    """Open MPI: the progress thread (MPI_THREAD_MULTIPLE) or explicit progress drives the
    background messages; odd and even P, bytes that do not split evenly."""
    exe = _app(tmp_path, smpi=False)
    perms, pattern = _compile(tmp_path, p, 3, seed=10 + p, serial=serial, joined=joined)
    delays = _delays(tmp_path, p, perms, 0.01, seed=p)
    out, err = _run(mpirun_cmd(p) + [str(exe), "20011", "3", pattern, "1e-4", str(delays)],
                    env={"COLLSCHED_VERBOSE": "1", "COLLSCHED_PAT_DRIVER": driver})
    assert out["errors"] == 0 and out["fallbacks"] == 0, err[-3000:]
    assert f"({driver} driver)" in err and background_ops(err) == 3 * (6 * p - 10), err[-2000:]


def _min3_joined(tmp_path, p, seed, iters=3, nbytes=30011):
    """Arrival-aware min3 (serial on tryton-48) per iteration, then aggregate(): the
    schedules and the delays (10 ms + the pattern) of the run."""
    from collsched.pipeline import compile_schedule
    from collsched.inputs.arrivals import write_pap
    from collsched.lab.arrivals import arrival_pattern
    pattern = arrival_pattern(seed, iters, p, 0.005)
    joins = relays = 0
    for k in range(iters):
        pap = tmp_path / f"it{k}.yaml"
        write_pap(pap, pattern[k:k + 1] - pattern[k].min(), unit="s")
        s = compile_schedule("min3", p, nbytes, topology=TRYTON, pap=str(pap)).schedule
        assert s.serial
        g = aggregate(s)
        joins += int(g.join.sum())
        relays += int(((g.join == 1) & (g.phase == ir.BACKGROUND) & (g.kind == ir.SEND)).sum())
        write(g, tmp_path / f"min3-joined-{k}.sched")
    delays = tmp_path / "delays.txt"
    delays.write_text("\n".join(" ".join(f"{0.010 + x:.9f}" for x in row) for row in pattern) + "\n")
    return str(tmp_path / "min3-joined-%d.sched"), delays, joins, relays


@pytest.mark.smpi
@pytest.mark.parametrize("p,seed", [(7, 1), (8, 2), (9, 4)])
def test_min3_with_messages_smpi(tmp_path, p, seed):
    """Arrival-aware min3 with background messages joined (receives, and relays of several
    pieces), explicit driver under SMPI: every byte right, no fallback."""
    exe = _app(tmp_path, smpi=True)
    pattern, delays, joins, relays = _min3_joined(tmp_path, p, seed)
    assert joins > 0 and (relays > 0 or p == 8)
    out, err = _run(_smpi_cmd(tmp_path, p) + [str(exe), "30011", "3", pattern, SMPI_TAU, str(delays)],
                    env={"COLLSCHED_VERBOSE": "1"})
    assert out["errors"] == 0 and out["fallbacks"] == 0, err[-3000:]
    assert background_ops(err) > 0


@pytest.mark.mpi
@pytest.mark.parametrize("p,seed,driver", [(7, 1, "thread"), (9, 4, "explicit")])
def test_min3_with_messages_real_mpi(tmp_path, p, seed, driver):
    exe = _app(tmp_path, smpi=False)
    pattern, delays, joins, relays = _min3_joined(tmp_path, p, seed)
    assert joins > 0 and relays > 0
    out, err = _run(mpirun_cmd(p) + [str(exe), "30011", "3", pattern, "1e-4", str(delays)],
                    env={"COLLSCHED_VERBOSE": "1", "COLLSCHED_PAT_DRIVER": driver})
    assert out["errors"] == 0 and out["fallbacks"] == 0, err[-3000:]
    assert f"({driver} driver)" in err and background_ops(err) > 0


def test_the_progress_check_finds_serial_deadlocks():
    """completes() (which aggregate() relies on) agrees with the verifier: bruck, nex and rd
    deadlock under serial rules, the ring and the hand-made schedules do not."""
    from collsched.algorithms import Request, generate

    def msgs(s):
        return _messages([[(int(s.kind[i]) and "recv" or "send", int(s.peer[i]), int(s.origin[i]),
                            int(s.segment[i]), "bg" if s.phase[i] else "fg", 0, int(s.join[i]))
                           for i in range(s.offsets[r], s.offsets[r + 1])] for r in range(s.nranks)])
    verdicts = {alg: completes(msgs(generate(alg, Request(8))), 1) for alg in ("bruck", "nex", "rd", "ring")}
    assert verdicts == {"bruck": False, "nex": False, "rd": False, "ring": True}
    for p in (4, 5, 8):
        assert completes(msgs(two_late(p, list(range(p))[::-1])), 2)


def _agg(tmp_path, p, seed, nbytes, iters=3):
    """The arrival-aware planner agg (multi-piece messages), one schedule per iteration of
    the seeded pattern (maxDelay 5 ms on tryton-48); the delays of the run: 10 ms + it."""
    from collsched.pipeline import compile_schedule
    from collsched.inputs.arrivals import write_pap
    from collsched.lab.arrivals import arrival_pattern
    pattern = arrival_pattern(seed, iters, p, 0.005)
    bg_joined = 0
    for k in range(iters):
        pap = tmp_path / f"it{k}.yaml"
        write_pap(pap, pattern[k:k + 1] - pattern[k].min(), unit="s")
        s = compile_schedule("agg", p, nbytes, topology=TRYTON, pap=str(pap),
                             output=tmp_path / f"agg-{k}.sched").schedule
        assert s.algorithm == "agg" and s.serial
        bg_joined += int(((s.join == 1) & (s.phase == ir.BACKGROUND)).sum())
    delays = tmp_path / "delays.txt"
    delays.write_text("\n".join(" ".join(f"{0.010 + x:.9f}" for x in row) for row in pattern) + "\n")
    return str(tmp_path / "agg-%d.sched"), delays, bg_joined


@pytest.mark.smpi
@pytest.mark.parametrize("p,nbytes", [(13, 30011), (16, 20000)])
def test_agg_through_the_engine_smpi(tmp_path, p, nbytes):
    """The planner's own schedules (background receive messages, relays of several pieces
    at P = 16) through the engine under SMPI, explicit driver: every byte, no fallback."""
    exe = _app(tmp_path, smpi=True)
    pattern, delays, bg_joined = _agg(tmp_path, p, 3, nbytes)
    assert bg_joined > 0
    out, err = _run(_smpi_cmd(tmp_path, p) + [str(exe), str(nbytes), "3", pattern, SMPI_TAU, str(delays)],
                    env={"COLLSCHED_VERBOSE": "1"})
    assert out["errors"] == 0 and out["fallbacks"] == 0, err[-3000:]
    assert background_ops(err) > 0


@pytest.mark.mpi
@pytest.mark.parametrize("p,nbytes,driver", [(13, 30011, "thread"), (16, 20000, "thread"), (10, 4001, "explicit")])
def test_agg_through_the_engine_real_mpi(tmp_path, p, nbytes, driver):
    exe = _app(tmp_path, smpi=False)
    pattern, delays, bg_joined = _agg(tmp_path, p, 3, nbytes)
    assert bg_joined > 0
    out, err = _run(mpirun_cmd(p) + [str(exe), str(nbytes), "3", pattern, "1e-4", str(delays)],
                    env={"COLLSCHED_VERBOSE": "1", "COLLSCHED_PAT_DRIVER": driver})
    assert out["errors"] == 0 and out["fallbacks"] == 0, err[-3000:]
    assert f"({driver} driver)" in err and background_ops(err) > 0
