"""The C reader of format 1.2 files and the C whole-program proof (runtime/src/coll_file.c,
coll_check.c) against the Python writer and verifier (collsched.collectives.schedfile,
collectives.verify): files written in Python load in C with the same ops; every
corruption - truncation at every offset, each header field, each CRC, each op and piece
field, oversized counts - is refused with one line naming the field; the C check's
verdict and first violation equal verify()'s on good programs and on mutated ones.
No MPI: the tool (tests/runtime/apps/coll_file_main.c) is built with the C compiler,
under ASan and UBSan."""
from __future__ import annotations

import dataclasses
import random
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from collsched.collectives import schedfile
from collsched.collectives.algorithms import CollRequest, generate, names
from collsched.collectives.algorithms.registry import REGISTRY
from collsched.collectives.program import (COLLECTIVES, RECV, RECV_REDUCE, REDUCING, ROOTED,
                                           SEND, Builder, Op, Piece, Program, from_op_lists)
from collsched.collectives.verify import verify
from collsched.inputs.topology import load_topology
from rt_helpers import TIMEOUT, build_c_tool

SOURCES = ["coll_file.c", "coll_check.c", "schedfile.c", "crc32.c"]


@pytest.fixture(scope="module")
def tool(tmp_path_factory) -> Path:
    return build_c_tool(tmp_path_factory.mktemp("coll") / "coll_file_main", SOURCES, "coll_file_main.c",
                        "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined")


def run(tool: Path, *args, stdin: str | None = None) -> subprocess.CompletedProcess:
    """The tool under ASan (leaks included: nothing may stay allocated after a refusal) and UBSan."""
    proc = subprocess.run([str(tool), *map(str, args)], input=stdin, capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert "Sanitizer" not in proc.stderr and "runtime error" not in proc.stderr, proc.stderr[-3000:]
    return proc


# --- programs -------------------------------------------------------------------------------

def registered(P: int, nseg: int, collectives=tuple(COLLECTIVES)) -> list[Program]:
    """Every registered algorithm that serves (P, nseg) without a topology."""
    out = []
    for coll in collectives:
        for name in names(coll):
            if REGISTRY[(coll, name)].needs_topology:
                continue
            req = CollRequest(coll, P, nbytes=1 << 12, nseg=nseg, root=P // 2 if coll in ROOTED else 0,
                              arrivals=np.linspace(0.0, 2e-3, P)[::-1].copy())
            try:
                prog = generate(name, req)
            except Exception:  # noqa: BLE001 - the algorithm refuses this request
                continue
            prog.algorithm = prog.algorithm[:16]
            out.append(prog)
    return out


def grid_programs() -> list[Program]:
    topo = load_topology("three-site-grid")
    out = []
    for coll in COLLECTIVES:
        for name in names(coll):
            if REGISTRY[(coll, name)].needs_topology:
                out.append(generate(name, CollRequest(coll, topo.nranks, nbytes=1 << 16, nseg=1, topology=topo)))
    return out


def hand_built() -> list[Program]:
    """Small programs of every collective, independent of the algorithm modules."""
    progs = []
    for P, nseg in ((1, 1), (2, 1), (3, 2), (5, 3)):
        b = Builder("alltoall", P, nseg, algorithm="ring")
        for k in range(1, P):
            for r in range(P):
                b.add(k, r, (r + k) % P, [(r, (r + k) % P, g) for g in range(nseg)], fifo=k % 2 == 1)
        progs.append(b.build())
        root = P // 2
        b = Builder("bcast", P, nseg, root=root, algorithm="chain")
        for i in range(P - 1):
            for g in range(nseg):
                b.add(i + g, (root + i) % P, (root + i + 1) % P, [(0, 0, g)], fence_recv=g == 0)
        progs.append(b.build())
        b = Builder("reduce", P, nseg, root=root, algorithm="chain")
        for g in range(nseg):
            for i in range(P - 1, root, -1):
                b.add(P - 1 - i + g, i, i - 1, [(0, 0, g)], reduce=True, local_first=True)
            for i in range(root):
                b.add(i + g, i, i + 1, [(0, 0, g)], reduce=True)
        progs.append(b.build())
        b = Builder("allreduce", P, P, algorithm="ring")  # reduce-scatter + allgather on a ring
        for t in range(P - 1):
            for r in range(P):
                b.add(t, r, (r + 1) % P, [(0, 0, (r - t - 1) % P)], reduce=True)
        for t in range(P - 1):
            for r in range(P):
                b.add(P - 1 + t, r, (r + 1) % P, [(0, 0, (r - t) % P)])
        ring = b.build()
        ring.commutative_only = P > 2
        progs.append(ring)
    return progs


def flags_of(op: Op) -> int:
    return (1 if op.fifo else 0) | (2 if op.fence else 0) | (4 if op.local_first else 0) | (8 if op.chain else 0)


def as_text(prog: Program) -> str:
    """coll_file_main --text's input for a program (any fields, checked by neither side)."""
    flags = (1 if prog.full_duplex else 0) | (8 if prog.commutative_only else 0)
    out = [f"{COLLECTIVES[prog.collective]} {prog.nranks} {prog.nseg} {prog.root} {flags}"]
    for lst in prog.ops:
        out.append(str(len(lst)))
        for op in lst:
            out.append(f"{op.kind} {op.peer} {flags_of(op)} {len(op.pieces)} "
                       + " ".join(f"{p[0]} {p[1]} {p[2]}" for p in op.pieces))
    return "\n".join(out) + "\n"


def python_reason(prog: Program) -> str:
    found = verify(prog)
    if not found:
        return "ok"
    text = str(found[0])
    return text[: text.rindex(" [")]  # without the " [check]" tag, as the C check says it


def expected_listing(prog: Program) -> list[str]:
    flags = (1 if prog.full_duplex else 0) | (8 if prog.commutative_only else 0)
    head = (f"collective {COLLECTIVES[prog.collective]} nranks {prog.nranks} nseg {prog.nseg} "
            f"root {prog.root} flags {flags}")
    out = []
    for r in range(prog.nranks):
        npieces = sum(len(op.pieces) for op in prog.ops[r])
        out += [f"rank {r}", f"{head} nops {len(prog.ops[r])} npieces {npieces}", *prog.ops_of(r)]
    return out


# --- Python files load in C, op for op ---------------------------------------------------------

def test_python_files_load_in_c_with_the_same_ops(tool, tmp_path):
    progs = hand_built() + registered(5, 2) + registered(8, 1) + grid_programs()
    assert {p.collective for p in progs} == set(COLLECTIVES)
    assert len({(p.collective, p.algorithm) for p in progs}) >= 20
    for k, prog in enumerate(progs):
        path = tmp_path / f"p{k}.sched"
        path.write_bytes(schedfile.encode(prog))
        proc = run(tool, "--all", path)
        assert proc.returncode == 0, (prog.collective, prog.algorithm, proc.stderr)
        lines = proc.stdout.splitlines()
        assert lines[:-1] == expected_listing(prog), (prog.collective, prog.algorithm)
        want = python_reason(prog)
        assert lines[-1] == (f"check: ok" if want == "ok" else f"check: {path}: whole schedule: {want}")
    proc = run(tool, "--header", path)
    assert proc.stdout.startswith(f"collective {COLLECTIVES[progs[-1].collective]} nranks {progs[-1].nranks}")


def test_one_rank_and_a_single_section(tool, tmp_path):
    path = tmp_path / "one.sched"
    path.write_bytes(schedfile.encode(Builder("bcast", 1, 1).build()))
    assert run(tool, "--check", path).stdout == "ok\n"
    prog = hand_built()[4]  # alltoall, 2 ranks
    path.write_bytes(schedfile.encode(prog))
    proc = run(tool, path, 1)
    assert proc.returncode == 0 and proc.stdout.splitlines()[1:] == prog.ops_of(1)
    proc = run(tool, path, 2)  # no such rank
    assert proc.returncode == 1 and proc.stderr == f"{path}: rank: expected below 2, found 2\n"


def test_the_allgather_reader_refuses_a_version_1_2_file(tool, tmp_path):
    path = tmp_path / "a.sched"
    path.write_bytes(schedfile.encode(hand_built()[4]))
    proc = run(tool, "--v10", path)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    assert field_of(proc.stderr, path) == "collective", proc.stderr


# --- corruption ---------------------------------------------------------------------------------

FIELD_NAMES = ("header", "magic", "version_major", "version_minor", "header_bytes", "header_crc32",
               "collective", "nranks", "nseg", "flags", "bytes_min", "ext_crc32", "ext.reserved", "root",
               "index", "index_crc32", "index.section_offset", "index.nops", "total_ops", "total_pieces",
               "sections", "section", "section_crc32", "rank ", "file", "rank")


def field_of(line: str, path) -> str:
    assert line.startswith(f"{path}: "), line
    return line[len(f"{path}: "):].split(": ")[0]


def small_file() -> bytes:
    b = Builder("alltoall", 3, 2, algorithm="relay")
    b.add(0, 1, 0, [(1, 2, 0), (1, 0, 1)])
    b.add(0, 2, 0, [(2, 1, 0), (2, 0, 0), (2, 0, 1)])
    b.add(1, 0, 1, [(0, 1, 0), (2, 1, 0)], fifo=True)
    b.add(1, 0, 2, [(0, 2, 1), (1, 2, 0)], fence_send=True)
    b.add(2, 1, 0, [])
    return schedfile.encode(b.build())


def test_truncation_at_every_offset_is_one_line(tool, tmp_path):
    data = small_file()
    path = tmp_path / "t.sched"
    path.write_bytes(data)
    lines = run(tool, "--prefixes", path).stdout.splitlines()
    assert len(lines) == len(data)
    fields = [field_of(line, path) for line in lines]
    assert all(f in FIELD_NAMES for f in fields), set(fields)
    assert set(fields[:152]) == {"header"}
    assert {"index", "index.section_offset", "sections"} <= set(fields)
    # From the file too (pread), at a few offsets of every region
    cut = []
    for n in (0, 7, 127, 151, 152 + 20, 152 + 48, len(data) - 13, len(data) - 1):
        cut.append(tmp_path / f"cut{n}.sched")
        cut[-1].write_bytes(data[:n])
    got = run(tool, "--each", *cut).stdout.splitlines()
    assert [field_of(line, p) for line, p in zip(got, cut)] == [
        "header", "header", "header", "header", "index", "index.section_offset", "sections", "sections"]
    assert "(truncated)" in got[-1]


def refresh(data: bytearray, sections=True, index=True) -> bytes:
    """Recompute the CRCs of an edited file (sections, index, extension, header)."""
    nranks = struct.unpack_from("<I", data, 20)[0]
    index_end = 152 + 16 * nranks
    if nranks < 100:
        for r in range(nranks if sections else 0):
            off = struct.unpack_from("<Q", data, 152 + 16 * r)[0]
            end = struct.unpack_from("<Q", data, 152 + 16 * (r + 1))[0] if r + 1 < nranks else len(data)
            if index_end <= off <= end <= len(data):
                struct.pack_into("<I", data, 152 + 16 * r + 12, zlib.crc32(bytes(data[off:end])))
        if index and index_end <= len(data):
            struct.pack_into("<I", data, 120, zlib.crc32(bytes(data[152:index_end])))
    struct.pack_into("<I", data, 144, zlib.crc32(bytes(data[128:144])))
    struct.pack_into("<I", data, 124, zlib.crc32(bytes(data[:124])))
    return bytes(data)


def edit(data: bytes, off: int, fmt: str, value, crcs=True, **keep) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, off, value)
    return refresh(out, **keep) if crcs else bytes(out)


def test_each_field_and_crc_is_named(tool, tmp_path):
    data = small_file()
    sec0 = 152 + 16 * 3  # rank 0's section: op 0 = send to 1 with 2 pieces
    op1 = sec0 + 12 + 24  # rank 0's op 1 (recv from 1, 2 pieces)
    total_pieces = struct.unpack_from("<Q", data, 136)[0]
    cases = [
        (edit(data, 0, "<8s", b"COLLSCHX"), "magic"),
        (edit(data, 8, "<H", 2), "version_major"),
        (edit(data, 10, "<H", 1), "version_minor"),
        (edit(data, 12, "<I", 128), "header_bytes"),
        (edit(data, 16, "<I", 1), "collective"),
        (edit(data, 16, "<I", 9), "collective"),
        (edit(data, 20, "<I", 0), "nranks"),
        (edit(data, 20, "<I", (1 << 24) + 1), "nranks"),
        (edit(data, 20, "<I", 1 << 24), "index"),
        (edit(data, 24, "<I", 0), "nseg"),
        (edit(data, 24, "<I", 65536), "nseg"),
        (edit(data, 28, "<I", 2), "flags"),
        (edit(data, 32, "<Q", (1 << 20) + 1), "bytes_min"),
        (edit(data, 132, "<I", 1), "ext.reserved"),
        (edit(data, 148, "<I", 1), "ext.reserved"),
        (edit(data, 128, "<I", 3), "root"),
        (edit(data, 128, "<I", 1), "root"),  # alltoall has no root
        (edit(data, 136, "<Q", 1 << 63), "total_pieces"),
        (edit(data, 136, "<Q", 2), "sections"),
        (edit(data, 112, "<Q", 99), "total_ops"),
        (edit(data, 152, "<Q", 0), "index.section_offset"),
        (edit(data, 152 + 16, "<Q", sec0 + 1), "index.section_offset"),
        (edit(data, 152 + 16, "<Q", 1 << 40), "index.section_offset"),
        (edit(data, 152 + 32 + 8, "<I", 1 << 30), "index.nops"),
        (edit(data, 152 + 8, "<I", 0xFFFFFFFF), "index.section_offset"),
        (edit(data, 124, "<I", 0, crcs=False), "header_crc32"),
        (edit(data, 144, "<I", 0, crcs=False), "ext_crc32"),
        (edit(data, 120, "<I", 0, sections=False, index=False), "index_crc32"),
        (edit(data, 152 + 12, "<I", 0, sections=False), "section_crc32"),
        (edit(data, sec0, "<I", 3), "rank 0 op 0 peer"),
        (edit(data, sec0, "<I", 0), "rank 0 op 0 peer"),
        (edit(data, sec0 + 4, "<B", 3), "rank 0 op 0 kind"),
        (edit(data, sec0 + 4, "<B", 2), "rank 0 op 0 kind"),  # recv-reduce in an alltoall
        (edit(data, sec0 + 5, "<B", 16), "rank 0 op 0 flags"),
        (edit(data, op1 + 5, "<B", 8), "rank 0 op 1 flags"),  # CHAIN on a recv
        (edit(data, sec0 + 5, "<B", 4), "rank 0 op 0 flags"),  # local-first on a send
        (edit(data, op1 + 5, "<B", 1), "rank 0 op 1 flags"),  # FIFO on a recv
        (edit(data, sec0 + 6, "<H", 1), "rank 0 op 0 reserved"),
        (edit(data, sec0 + 8, "<I", 1000), "rank 0 op 0 npieces"),
        (edit(data, sec0 + 8, "<I", (1 << 24) + 1), "rank 0 op 0 npieces"),
        (edit(data + bytes(12), 136, "<Q", total_pieces + 1), "section"),  # 12 bytes left at the end
        (edit(data, sec0 + 12, "<I", 3), "rank 0 op 0 piece 0 src"),
        (edit(data, sec0 + 16, "<I", 7), "rank 0 op 0 piece 0 dst"),
        (edit(data, sec0 + 20 + 12, "<I", 2), "rank 0 op 0 piece 1 seg"),
    ]
    paths = []
    for k, (blob, _field) in enumerate(cases):
        paths.append(tmp_path / f"c{k}.sched")
        paths[-1].write_bytes(blob)
    got = run(tool, "--each", *paths).stdout.splitlines()
    assert len(got) == len(cases)
    for line, path, (_blob, field) in zip(got, paths, cases):
        assert field_of(line, path) == field, line
        assert ": expected" in line or "checksum mismatch" in line, line
    # a bcast file: a piece with src != 0
    b = Builder("bcast", 2, 1)
    b.add(0, 0, 1, [(0, 0, 0)])
    data = schedfile.encode(b.build())
    path = tmp_path / "b.sched"
    path.write_bytes(edit(data, 152 + 32 + 12, "<I", 1))
    assert field_of(run(tool, "--check", path).stderr, path) == "rank 0 op 0 piece 0 src"


def test_not_a_regular_file(tool, tmp_path):
    proc = run(tool, "--check", tmp_path)
    assert proc.returncode == 1 and proc.stderr == f"{tmp_path}: file: expected a regular file\n"
    proc = run(tool, "--check", tmp_path / "missing")
    assert proc.returncode == 1 and field_of(proc.stderr, tmp_path / "missing") == "file"


# --- the C check against verify() ---------------------------------------------------------------

def check_text(tool: Path, progs: list[Program]) -> list[str]:
    proc = run(tool, "--text", stdin="".join(as_text(p) for p in progs))
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = proc.stdout.splitlines()
    assert len(got) == len(progs), proc.stderr[-3000:]
    return got


def rand_piece(rng: random.Random, prog: Program, wild: bool = False) -> Piece:
    P, S = prog.nranks, prog.nseg
    hi = 2 if wild else 1
    if prog.collective == "alltoall" or wild and rng.random() < 0.3:
        return Piece(rng.randrange(P * hi), rng.randrange(P * hi), rng.randrange(S * hi))
    return Piece(0, 0, rng.randrange(S * hi))


def partner(ops, r: int, i: int):
    op = ops[r][i]
    if not 0 <= op.peer < len(ops) or op.peer == r:
        return None
    k = sum(1 for o in ops[r][:i] if (o.kind == SEND) == (op.kind == SEND) and o.peer == op.peer)
    other = [j for j, o in enumerate(ops[op.peer]) if (o.kind == SEND) != (op.kind == SEND) and o.peer == r]
    return other[k] if k < len(other) else None


def mutate(rng: random.Random, prog: Program) -> Program:
    """One edit: of one op (its kind, peer, flags, pieces; dropped, copied, moved), or of both
    ends of a transfer (dropped, copied, a piece renamed, one end moved), or a new transfer."""
    ops = [list(lst) for lst in prog.ops]
    P = prog.nranks
    where = [(r, i) for r in range(P) for i in range(len(ops[r]))]
    e = rng.randrange(16)
    if e >= 9 or not where:
        return mutate_pair(rng, prog, ops, e)
    r, i = rng.choice(where)
    op = ops[r][i]
    if e == 0:
        ops[r].pop(i)
    elif e == 1:
        ops[r].insert(rng.randrange(len(ops[r]) + 1), op)
    elif e == 2:
        j = rng.randrange(len(ops[r]))
        ops[r][i], ops[r][j] = ops[r][j], ops[r][i]
    elif e == 3:
        ops[r][i] = dataclasses.replace(op, fence=not op.fence)
    elif e == 4 and rng.random() < 0.5:
        ops[r][i] = dataclasses.replace(op, fifo=not op.fifo)
    elif e == 4:
        ops[r][i] = dataclasses.replace(op, chain=not op.chain)
    elif e == 5:
        ops[r][i] = dataclasses.replace(op, local_first=not op.local_first)
    elif e == 6:
        ops[r][i] = dataclasses.replace(op, kind=rng.choice([SEND, RECV, RECV_REDUCE, RECV_REDUCE, 3]))
    elif e == 7 and op.pieces:
        ps = list(op.pieces)
        ps[rng.randrange(len(ps))] = rand_piece(rng, prog, wild=rng.random() < 0.2)
        ops[r][i] = dataclasses.replace(op, pieces=tuple(ps))
    else:
        ops[r][i] = dataclasses.replace(op, peer=rng.randrange(P + 1))
    return dataclasses.replace(prog, ops=ops)


def mutate_pair(rng: random.Random, prog: Program, ops, e: int) -> Program:
    P = prog.nranks
    sends = [(r, i) for r in range(P) for i, o in enumerate(ops[r]) if o.kind == SEND]
    if e == 9 or not sends:  # a new transfer
        if P < 2:
            return prog
        a = rng.randrange(P)
        b = rng.choice([x for x in range(P) if x != a])
        ps = tuple(rand_piece(rng, prog) for _ in range(rng.choice([0, 1, 1, 2])))
        red = prog.collective in REDUCING and rng.random() < 0.6
        ops[a].insert(rng.randrange(len(ops[a]) + 1), Op(SEND, b, ps, fifo=rng.random() < 0.3,
                                                          fence=rng.random() < 0.2,
                                                          chain=rng.random() < 0.3))
        ops[b].insert(rng.randrange(len(ops[b]) + 1), Op(RECV_REDUCE if red else RECV, a, ps,
                                                          fence=rng.random() < 0.2,
                                                          local_first=red and rng.random() < 0.5))
        return dataclasses.replace(prog, ops=ops)
    r, i = rng.choice(sends)
    j = partner(ops, r, i)
    q = ops[r][i].peer
    if j is None:
        return prog
    if e == 10:
        ops[r].pop(i)
        ops[q].pop(j)
    elif e == 11 and ops[r][i].pieces:
        ps = list(ops[r][i].pieces)
        ps[rng.randrange(len(ps))] = rand_piece(rng, prog)
        ops[r][i] = dataclasses.replace(ops[r][i], pieces=tuple(ps))
        ops[q][j] = dataclasses.replace(ops[q][j], pieces=tuple(ps))
    elif e == 12:
        ops[r].insert(rng.randrange(len(ops[r])), ops[r].pop(i))
    elif e == 13:
        ops[q].insert(rng.randrange(len(ops[q])), ops[q].pop(j))
    elif e == 14:
        ops[r].insert(i + 1, ops[r][i])
        ops[q].insert(j + 1, ops[q][j])
    else:  # both ends fenced / the send FIFO: new ways to deadlock
        ops[r][i] = dataclasses.replace(ops[r][i], fifo=True, fence=rng.random() < 0.5)
        ops[q][j] = dataclasses.replace(ops[q][j], fence=rng.random() < 0.5)
    return dataclasses.replace(prog, ops=ops)


def deadlocks() -> list[Program]:
    """Hand-made deadlocks: a fence cycle, a data cycle, FIFO sends behind a fenced receive."""
    x = [(0, 0, 0)]
    fence = from_op_lists("allreduce", 2, 1, [
        [("recv", 1, []), ("send", 1, [], "fence"), ("send", 1, x), ("recv-reduce", 1, x)],
        [("recv", 0, []), ("send", 0, [], "fence"), ("send", 0, x), ("recv-reduce", 0, x, "local-first")]])
    data = from_op_lists("reduce", 2, 1, [
        [("recv", 1, x), ("send", 1, x)], [("recv", 0, x), ("send", 0, x)]])
    fifo = from_op_lists("bcast", 3, 1, [
        [("send", 1, [], "fifo"), ("send", 1, x, "fifo"), ("send", 2, x)],
        [("recv", 2, []), ("recv", 0, [], "fence"), ("recv", 0, x)],
        [("recv", 0, x), ("send", 1, [], "fence")]])
    return [fence, data, fifo, chained(True), chained(False)]


def chained(chain: bool) -> Program:
    """Alltoall, P = 3: rank 0's chained send to 2 waits for its send to 1, whose receive
    rank 1 posts behind a fence on the block from 2, which rank 2 sends (fenced) only once
    it holds rank 0's block: a deadlock with the chain, none without."""
    c = ("chain",) if chain else ()
    return from_op_lists("alltoall", 3, 1, [
        [("send", 1, [(0, 1, 0)]), ("send", 2, [(0, 2, 0)], *c), ("recv", 1, [(1, 0, 0)]),
         ("recv", 2, [(2, 0, 0)])],
        [("recv", 2, [(2, 1, 0)]), ("recv", 0, [(0, 1, 0)], "fence"), ("send", 0, [(1, 0, 0)]),
         ("send", 2, [(1, 2, 0)])],
        [("recv", 0, [(0, 2, 0)]), ("send", 1, [(2, 1, 0)], "fence"), ("send", 0, [(2, 0, 0)]),
         ("recv", 1, [(1, 2, 0)])]])


def test_chain_flag_in_c(tool, tmp_path):
    """The CHAIN bit: read from files on sends (the whole check then sees the chained
    deadlock verify() sees, with the same words), refused on receives; the C check's
    verdicts equal verify()'s on chained programs (every arrival alltoall chains)."""
    good, bad = chained(False), chained(True)
    assert python_reason(good) == "ok"
    want = python_reason(bad)
    assert want == ("rank 0, op 1: deadlock: send to/from 2 is never issued: waits for rank 1 to "
                    "post its receive (op 1)")
    paths = [tmp_path / "good.sched", tmp_path / "bad.sched", tmp_path / "recv.sched"]
    paths[0].write_bytes(schedfile.encode(good))
    paths[1].write_bytes(schedfile.encode(bad))
    data = schedfile.encode(good)
    sec0 = 152 + 16 * 3
    assert struct.unpack_from("<IBBHI", data, sec0 + 48)[1:3] == (RECV, 0)  # rank 0 op 2: a recv
    paths[2].write_bytes(edit(data, sec0 + 48 + 5, "<B", 8))
    got = run(tool, "--each", *paths).stdout.splitlines()
    assert got[:2] == ["ok", f"{paths[1]}: whole schedule: {want}"]
    assert field_of(got[2], paths[2]) == "rank 0 op 2 flags" and "CHAIN bit on sends only" in got[2], got[2]
    arrival = [generate("arrival", CollRequest("alltoall", P, nbytes=1 << 12, nseg=nseg, options={"batch": 2},
                                               arrivals=np.linspace(0.0, 2e-3, P)[::-1].copy()))
               for P, nseg in ((4, 1), (6, 1), (5, 2))]
    assert arrival and all(any(o.chain for lst in p.ops for o in lst) for p in arrival)
    rng = random.Random(18)
    cases = [good, bad] + arrival
    for _ in range(300):
        prog = rng.choice(cases[:4])
        ops = [[dataclasses.replace(o, chain=o.kind == SEND and rng.random() < 0.5,
                                    fence=rng.random() < 0.2) for o in lst] for lst in prog.ops]
        cases.append(dataclasses.replace(prog, ops=ops))
    expected = [python_reason(p) for p in cases]
    assert check_text(tool, cases) == expected
    assert sum("deadlock" in e for e in expected) >= 20 and expected.count("ok") >= 20


def test_c_check_agrees_with_verify(tool):
    rng = random.Random(20261127)
    base = hand_built() + registered(4, 2) + registered(5, 1) + deadlocks()
    cases = list(base)
    while len(cases) < 1500:
        prog = rng.choice(base)
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            prog = mutate(rng, prog)
        if prog.collective in REDUCING and rng.random() < 0.2:
            prog = dataclasses.replace(prog, commutative_only=not prog.commutative_only)
        cases.append(prog)
    got = check_text(tool, cases)
    expected = [python_reason(p) for p in cases]
    wrong = [(e, g) for e, g in zip(expected, got) if e != g]
    assert not wrong, wrong[:5]
    passes = {verify(p)[0].check for p in cases if verify(p)}
    assert passes == {"shape", "matching", "holding", "progress", "delivery", "order"}, passes
    assert sum("doubled" in e for e in expected) >= 5
    assert sum("deadlock" in e for e in expected) >= 10
    assert expected.count("ok") >= 200


programs = st.sampled_from(range(len(hand_built()))).flatmap(
    lambda k: st.tuples(st.just(k), st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=4)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs)
def test_c_check_agrees_on_hypothesis_mutations(tool, case):
    k, seeds = case
    prog = hand_built()[k]
    for s in seeds:
        prog = mutate(random.Random(s), prog)
    assert check_text(tool, [prog]) == [python_reason(prog)]


def test_c_check_of_written_files_agrees(tool, tmp_path):
    """Mutated programs that the writer can store: the file's whole check says what verify says."""
    rng = random.Random(7)
    base = hand_built()
    paths, want = [], []
    while len(paths) < 150:
        prog = mutate(rng, rng.choice(base))
        try:
            data = schedfile.encode(prog)
        except (ValueError, struct.error):
            continue
        if any(v.check == "shape" for v in verify(prog)):
            continue  # the reader refuses these first, with its own line
        paths.append(tmp_path / f"m{len(paths)}.sched")
        paths[-1].write_bytes(data)
        reason = python_reason(prog)
        want.append("ok" if reason == "ok" else f"{paths[-1]}: whole schedule: {reason}")
    assert run(tool, "--each", *paths).stdout.splitlines() == want
    assert sum(w == "ok" for w in want) >= 10 and sum(w != "ok" for w in want) >= 50


def test_check_refuses_above_its_memory_cap(tool):
    """Contribution sets of 16384 ranks x 8 segments: 270 MB, above the 256 MiB cap."""
    prog = Program("allreduce", 16384, 8, [[] for _ in range(16384)])
    (line,) = check_text(tool, [prog])
    assert line.startswith("nomem: whole-program check: ") and "256 MiB" in line, line


def test_c_check_agrees_beyond_64_ranks(tool):
    """Contribution sets over several 64-bit words: intervals, doubles and missing ranks
    named past bit 63."""
    rng = random.Random(67)
    base = registered(67, 1, REDUCING) + registered(130, 1, ("reduce",))
    cases = list(base)
    while len(cases) < 120:
        prog = mutate(rng, rng.choice(base))
        if rng.random() < 0.3:
            prog = dataclasses.replace(prog, commutative_only=not prog.commutative_only)
        cases.append(prog)
    expected = [python_reason(p) for p in cases]
    assert check_text(tool, cases) == expected
    assert sum("doubled" in e for e in expected) >= 5 and sum("ends without" in e for e in expected) >= 5
    assert any(int(e.split("contribution ")[1].split()[0]) >= 64 for e in expected if "doubled" in e)
