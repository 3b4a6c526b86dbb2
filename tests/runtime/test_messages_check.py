"""The C proof of a whole schedule with multi-piece messages (runtime/src/whole_check.c,
run on rank 0 at a schedule's first use) against the Python verifier
(compiler/collsched/verify.py): the same first violation, in the same words, on schedules
with messages - the algorithms' transfers joined per step, random joins of adjacent
matched transfers, pieces permuted within messages, serial and dataflow - and on their
mutations (join bits flipped, split or merged messages, pieces swapped on one side, a
piece twice in a message, forwards of pieces received after the message's head, FIFO
marks on joined ops, cycles that exist only through messages). No MPI: the checker is
linked alone (tests/runtime/apps/whole_check_main.c) with ASan and UBSan."""
from __future__ import annotations

import random
import subprocess

import numpy as np

from collsched import ir
from collsched.algorithms import Request, generate
from collsched.verify import match, verify
from rt_helpers import TIMEOUT, build_c_tool
from test_messages_runtime import aggregate, deadlocking_messages, joined_by_step, shuffle_messages


def as_text(s: ir.Schedule) -> str:
    """whole_check_main's input: per op "kind peer origin segment flags" (flags: bit 0
    phase, bit 1 FIFO, bits 2.. join)."""
    out = [f"{s.nranks} {s.nseg}"]
    for r in range(s.nranks):
        lo, hi = int(s.offsets[r]), int(s.offsets[r + 1])
        out.append(str(hi - lo))
        out += [f"{int(s.kind[i])} {int(s.peer[i])} {int(s.origin[i])} {int(s.segment[i])} "
                f"{int(s.phase[i]) | int(s.fifo[i]) << 1 | int(s.join[i]) << 2}" for i in range(lo, hi)]
    return "\n".join(out) + "\n"


def python_reason(s: ir.Schedule, serial: bool) -> str:
    found = verify(s, serial=serial)
    if not found:
        return "ok"
    text = str(found[0])
    return text[: text.rindex(" [")]


def base_cases(rng: random.Random) -> list[ir.Schedule]:
    out = [deadlocking_messages()]
    for p in (2, 3, 5, 8):
        for alg in ("bruck", "ring"):
            out.append(joined_by_step(p, rng.choice([1, 2, 3]), alg))
            out.append(shuffle_messages(joined_by_step(p, 2, alg), rng))
        names = ["lnbc", "spreading", "bruck", "ring"] + (["nex"] if p % 2 == 0 else [])
        for alg in names:
            s = aggregate(generate(alg, Request(p, nseg=rng.choice([1, 2]))), rng, rng.choice([0.3, 0.7, 1.0]))
            if rng.random() < 0.4:  # FIFO marks on every head, as on a LAN
                s.fifo = ((s.kind == 0) & (s.join == 0)).astype(np.uint8)
            out.append(s)
    return out


def shifted_boundary(p: int) -> ir.Schedule:
    """Ring of three segments, messages [s0 s1][s2] at both ends but for one receiver, which
    takes [s0][s1 s2]: as many messages on the pair, of other sizes."""
    s = joined_by_step(p, 3, "ring")
    s.join[(s.segment == 2)] = 0
    r = int(np.nonzero((s.kind == 1) & (s.segment == 1))[0][-1])
    s.join[r], s.join[r + 1] = 0, 1
    return s


def mutate(s: ir.Schedule, rng: random.Random) -> ir.Schedule:
    """One to three random edits aimed at messages (any pass may then fail)."""
    s = ir.Schedule(nranks=s.nranks, nseg=s.nseg, offsets=s.offsets.copy(), kind=s.kind.copy(),
                    peer=s.peer.copy(), origin=s.origin.copy(), segment=s.segment.copy(),
                    phase=s.phase.copy(), fifo=s.fifo.copy(), join=s.join.copy(), algorithm=s.algorithm)
    n = s.total_ops
    joined = np.nonzero(s.join)[0]
    for _ in range(rng.choice([1, 1, 2, 3])):
        i = rng.randrange(n)
        j = int(rng.choice(joined)) if len(joined) else i
        edit = rng.randrange(10)
        if edit == 0:  # a join bit flipped anywhere (a first op, across peers, split/merged messages)
            s.join[i] ^= 1
        elif edit == 1:  # a message split on one side only, or its boundary moved by one op
            s.join[j] = 0
            k = j + 1
            if (rng.random() < 0.6 and k < n and s.join[k] == 0 and s.rank_of_op[k] == s.rank_of_op[j]
                    and (s.kind[k], s.peer[k], s.phase[k]) == (s.kind[j], s.peer[j], s.phase[j])):
                s.join[k] = 1
        elif edit == 2:  # two pieces of one message swapped on one side: same pieces, another order
            for col in (s.origin, s.segment):
                col[j], col[j - 1] = col[j - 1], col[j]
        elif edit == 3:  # a joined op's piece changed on one side
            s.origin[j] = rng.randrange(s.nranks)
        elif edit == 4:  # a piece twice in a message (one side)
            s.origin[j], s.segment[j] = s.origin[j - 1], s.segment[j - 1]
        elif edit == 5:  # FIFO on a joined op, or on a head
            s.fifo[j if rng.random() < 0.5 else i] = 1 if s.kind[i] == 0 or rng.random() < 0.2 else 0
        elif edit == 6:  # a joined op's phase or peer differs
            if rng.random() < 0.5:
                s.phase[j] ^= 1
            else:
                s.peer[j] = rng.randrange(s.nranks)
        elif edit == 7:  # two ops swapped (all columns): holding, shape, matching
            for col in (s.kind, s.peer, s.origin, s.segment, s.phase, s.fifo, s.join):
                col[i], col[j] = col[j], col[i]
        elif edit == 8:  # a join flag of 2
            s.join[j] = 2 if rng.random() < 0.3 else s.join[j]
        else:  # one transfer of a message moves another piece, both ends alike: holding, delivery
            try:
                m = match(s)
            except ValueError:
                continue
            t = rng.randrange(len(m.send_op))
            piece = (rng.randrange(s.nranks), rng.randrange(s.nseg))
            s.origin[m.send_op[t]], s.segment[m.send_op[t]] = piece
            s.origin[m.recv_op[t]], s.segment[m.recv_op[t]] = piece
    return s


def test_whole_check_agrees_with_python_verifier_on_messages(tmp_path):
    exe = build_c_tool(tmp_path / "whole_check_main", ["whole_check.c"], "whole_check_main.c", "-O1", "-g",
                       "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined")
    rng = random.Random(20261127)
    bases = base_cases(rng)
    cases = bases + [shifted_boundary(4)] + [mutate(rng.choice(bases), rng) for _ in range(500)]
    text = "".join(as_text(s) for s in cases)
    seen = set()
    for serial in (False, True):
        proc = subprocess.run([str(exe)] + (["--serial"] if serial else []), input=text, capture_output=True,
                              text=True, timeout=TIMEOUT)
        assert proc.returncode == 0, proc.stderr[-3000:]
        got = proc.stdout.splitlines()
        assert len(got) == len(cases), proc.stderr[-3000:]
        expected = [python_reason(s, serial) for s in cases]
        wrong = [(i, e, g) for i, (e, g) in enumerate(zip(expected, got)) if e != g]
        assert not wrong, wrong[:4]
        seen |= {str(verify(s, serial=serial)[0]).rsplit("[", 1)[1] for s in cases if verify(s, serial=serial)}
        assert expected.count("ok") >= 40, expected.count("ok")
        assert sum("deadlock" in e and "message at op" in e for e in expected) >= 1
    # every pass failed somewhere, and the message words were exercised
    assert seen >= {"shape]", "matching]", "holding]", "delivery]", "progress]"}, seen
    words = " ".join(python_reason(s, False) for s in cases)
    for w in ("twice in the message", "pieces in another order", "matched by a message of",
              "joined op is the rank's first op", "FIFO flag on a joined op", "in its send message"):
        assert w in words, w


def test_the_message_cycle_is_found_by_both(tmp_path):
    """The 3-rank cycle through messages: both say deadlock, at the same op, in the same
    words; one piece per message, both say ok in dataflow (serially the in-order walk of
    the proof refuses it too)."""
    exe = build_c_tool(tmp_path / "whole_check_main", ["whole_check.c"], "whole_check_main.c", "-O1")
    s = deadlocking_messages()
    plain = deadlocking_messages()
    plain.join[:] = 0
    for serial in (False, True):
        proc = subprocess.run([str(exe)] + (["--serial"] if serial else []), input=as_text(s) + as_text(plain),
                              capture_output=True, text=True, timeout=TIMEOUT)
        got = proc.stdout.splitlines()
        assert got[0] == python_reason(s, serial) and "deadlock" in got[0] and "(2 pieces)" in got[0], got
        assert got[1] == python_reason(plain, serial) and (got[1] == "ok") == (not serial), got
