"""The compact form of bdr and bslb (compact/bdr.py, runtime/src/compact_bdr.c;
docs/compact-bdr.md): the generated lists against the explicit compiler's for random
patterns (balanced, one late rank, random, ties on tau's grid), tau, engines, segments and
sizes around the FIFO threshold; whole files written by `collsched compile` in both forms;
the tails' checks in C and Python against hostile records. About 40 s."""
from __future__ import annotations

import json
import struct
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from collsched import schedfile
from collsched.cli import main
from collsched.compact import bdr, native, read_compact
from collsched.compact.desc import DESC_BYTES, CompactDesc, decode
from collsched.errors import InputError
from collsched.pipeline import ENGINES

THRESHOLD = 6251  # fifo_min_piece on the default cluster (docs/compact.md)
TAU = 1e-4


def pattern(kind: str, p: int, m: int, seed: int) -> np.ndarray:
    """Arrival times (s) of P ranks with about m pre-steps of tau = TAU."""
    rng = np.random.default_rng(seed)
    if kind == "balanced":
        return np.zeros(p)
    if kind == "one_late":
        a = np.zeros(p)
        a[rng.integers(p)] = m * TAU
        return a
    if kind == "ties":  # on tau's grid: equal arrivals, and quotients at integers
        return rng.integers(0, m + 1, p) * TAU
    if kind == "late_few":  # a few late ranks, the rest on time (the measured pattern)
        return np.where(rng.random(p) < 0.1, rng.random(p) * m * TAU, 0.0)
    return rng.random(p) * m * TAU  # random


KINDS = ("balanced", "one_late", "ties", "late_few", "random")


def check(desc: CompactDesc, arrivals, tau=None):
    why = bdr.first_difference(desc, arrivals, tau)
    assert why is None, why
    # the description alone (pattern_of) gives the same lists
    assert bdr.first_difference(desc) is None


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=st.integers(2, 90), m=st.integers(0, 40), kind=st.sampled_from(KINDS),
       engine=st.sampled_from(ENGINES), nbytes=st.sampled_from([1, THRESHOLD - 1, THRESHOLD, 65536]),
       tau=st.sampled_from([TAU, 3e-5, 7.3e-4, 1e-3 / 3]), seed=st.integers(0, 2**32 - 1))
def test_bdr_lists_are_the_compilers(p, m, kind, engine, nbytes, tau, seed):
    """P small against M (the whole ring is replayed) and large (a window of 2M+3); tau on
    and off the pattern's grid (quotients at and between integers)."""
    a = pattern(kind, p, m, seed)
    check(bdr.bdr_desc(a, tau, (nbytes // 2, nbytes), engine), a, tau)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=st.integers(200, 360), m=st.integers(1, 12), kind=st.sampled_from(KINDS[1:]),
       seed=st.integers(0, 2**32 - 1))
def test_bdr_window_far_below_the_ring(p, m, kind, seed):
    """Few pre-steps on many ranks: each rank replays 2M+3 of them, sampled ranks only."""
    a = pattern(kind, p, m, seed)
    desc = bdr.bdr_desc(a, TAU, 65536)
    rng = np.random.default_rng(seed)
    ranks = sorted({0, p - 1, *rng.integers(0, p, 40).tolist()})
    assert bdr.first_difference(desc, a, TAU, ranks=ranks) is None


@pytest.mark.parametrize("m,extra", [(5, 0), (5, 1), (17, 0), (17, 1), (40, 1)])
def test_bdr_at_the_window_switch(m, extra):
    """P = 2M + 3 replays the whole ring, P = 2M + 4 a window: both the compiler's."""
    p = 2 * m + 3 + extra
    for seed in range(3):
        a = pattern("random" if seed else "late_few", p, m, seed)
        a[seed] = m * TAU
        check(bdr.bdr_desc(a, TAU, 65536), a, TAU)


def test_bdr_window_at_the_pre_step_limit():
    """M = 512 on 1100 ranks: the largest window, far from the whole ring (sampled ranks)."""
    a = pattern("late_few", 1100, 512, 9)
    a[7] = 512 * TAU
    desc = bdr.bdr_desc(a, TAU, 65536)
    assert bdr.read_bdr_tail(desc)["max_ps"] == 512
    ranks = sorted({0, 6, 7, 8, 550, 1099, *np.random.default_rng(9).integers(0, 1100, 14).tolist()})
    assert bdr.first_difference(desc, a, TAU, ranks=ranks) is None


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=st.integers(1, 70), kind=st.sampled_from(KINDS), engine=st.sampled_from(ENGINES),
       nseg=st.integers(1, 4), near=st.sampled_from([-1, 0, 1]), seed=st.integers(0, 2**32 - 1))
def test_bslb_lists_are_the_compilers(p, kind, engine, nseg, near, seed):
    """Byte sizes put the FIFO threshold between, at and beside the segments' sizes."""
    a = pattern(kind, p, 10, seed)
    if kind != "balanced" and p > 1 and seed % 2:
        a[0] = a.max() + TAU  # the root late: its gather in the background (pat)
    nbytes = THRESHOLD * nseg + near
    desc = bdr.bslb_desc(a, (0, nbytes), nseg, engine)
    if p > 1:
        check(desc, a)
    else:
        assert len(native.generate(desc, 0)) == 0


def test_bdr_one_rank_and_max_pre_steps():
    assert len(native.generate(bdr.bdr_desc(np.zeros(1), TAU, 100), 0)) == 0
    a = np.zeros(7)
    a[3] = bdr.MAX_PRE_STEPS * TAU  # exactly the limit: served (the whole ring)
    desc = bdr.bdr_desc(a, TAU, 100)
    assert bdr.read_bdr_tail(desc)["max_ps"] == bdr.MAX_PRE_STEPS
    check(desc, a, TAU)
    a[3] = (bdr.MAX_PRE_STEPS + 1) * TAU
    with pytest.raises(InputError, match="at most 512 pre-steps"):
        bdr.bdr_desc(a, TAU, 100)


def test_default_tau_is_the_explicit_compiles():
    from collsched.algorithms.bdr import default_tau
    from collsched.algorithms.registry import Request
    from collsched.inputs.topology import homogeneous

    for p in (2, 3, 17, 256):
        for nbytes in (0, 1, 6251, 1 << 20, (1 << 40) + 3):
            want = default_tau(Request(nranks=p, nbytes=nbytes, nseg=1, topology=homogeneous(p)))
            assert bdr.default_tau(nbytes) == want


def write_pap(path, a) -> str:
    path.write_text("unit: s\narrivals: [" + ", ".join(repr(float(x)) for x in a) + "]\n")
    return str(path)


def cli(capsys, *argv):
    status = main([str(x) for x in argv])
    out, err = capsys.readouterr()
    return status, out, err


def generated_file_columns(desc):
    lists = [native.generate(desc, r) for r in range(desc.nranks)]
    return np.concatenate(lists)


@pytest.mark.parametrize("algorithm,p,extra", [
    ("bdr", 9, []), ("bdr", 12, ["--tau", "300us", "--engine", "none"]),
    ("bslb", 10, ["--segments", "3"]), ("bslb", 7, ["--engine", "ahead"]),
])
def test_cli_compact_equals_the_explicit_file(tmp_path, capsys, algorithm, p, extra):
    """`collsched compile` in both forms (the pipeline with its verifier, the file as
    written) from one PAP file: the generated lists are the file's sections."""
    a = np.random.default_rng(p).random(p) * 2e-3 + 0.5
    a[p // 2] += 1e-3  # a late rank
    pap = write_pap(tmp_path / "pap.yaml", a)
    base = ["compile", "--algorithm", algorithm, "--ranks", p, "--bytes", "4000:20000", "--pap", pap, *extra]
    status, out, err = cli(capsys, *base, "--form", "compact", "-o", tmp_path / "c.sched", "--json")
    assert status == 0 and json.loads(out)["form"] == "compact", err
    assert cli(capsys, *base, "-o", tmp_path / "e.sched")[0] == 0
    desc, sched = read_compact(tmp_path / "c.sched"), schedfile.read(tmp_path / "e.sched")
    assert (desc.nseg, desc.bytes_min, desc.bytes_max) == (sched.nseg, sched.bytes_min, sched.bytes_max)
    got = generated_file_columns(desc)
    assert np.array_equal(np.diff(sched.offsets), [len(native.generate(desc, r)) for r in range(p)])
    for col, mine in (("peer", got["peer"]), ("origin", got["origin"]), ("segment", got["segment"]),
                      ("kind", got["kind"]), ("phase", got["flags"] & 1), ("fifo", got["flags"] >> 1)):
        assert np.array_equal(getattr(sched, col), mine), col
    if algorithm == "bdr" and "none" not in extra:
        assert sched.has_background  # the comparison covered background phases
    # what `collsched verify` should run for these (identity.first_difference compiles
    # with flat arrivals: docs/compact-bdr.md, "What remains")
    assert bdr.first_difference(desc) is None


def test_cli_refusals_and_auto(tmp_path, capsys):
    a = np.zeros(8)
    a[2] = 5e-3
    pap = write_pap(tmp_path / "pap.yaml", a)
    f = tmp_path / "x.sched"
    base = ["compile", "--ranks", 8, "--bytes", "1KiB", "--pap", pap, "-o", f]
    for alg, extra, why in (("bdr", ["--duplex", "half"], "half duplex"),
                            ("bslb", ["--topology", "tryton-48"], "a topology file"),
                            ("bdr", ["--segments", "2"], "whole blocks"),
                            ("bdr", ["--tau", "1us"], "pre-steps (the compact generator replays at most 512)")):
        status, _, err = cli(capsys, *base, "--algorithm", alg, *extra, "--form", "compact")
        assert status == 2 and why in err and len(err.strip().splitlines()) == 1, err
    # auto: explicit where there is no description (and below 1024 ranks anyway)
    assert cli(capsys, *base, "--algorithm", "bdr", "--tau", "1us", "--form", "auto")[0] == 0
    assert f.read_bytes()[:8] == b"COLLSCHD"


def retail(desc: CompactDesc, tail: bytes) -> bytes:
    """desc's record with another tail (the CRC made right, so the tail's checks speak)."""
    head = bytearray(desc.encode()[:DESC_BYTES])
    head[48:52] = struct.pack("<I", DESC_BYTES + len(tail) + 4)
    body = bytes(head) + tail
    return body + struct.pack("<I", zlib.crc32(body))


def refused_by_both(record: bytes) -> tuple[str, str]:
    with pytest.raises(InputError) as c_side:
        native.generate(record, 0)
    with pytest.raises(InputError) as py_side:
        decode(record)
    return c_side.value.line(), py_side.value.line()


def test_hostile_tails_are_refused_in_one_line():
    a = pattern("ties", 6, 5, 1)
    d = bdr.bdr_desc(a, TAU, 100)
    t = d.tail
    cases = [
        (t[:10], "length"),
        (struct.pack("<I", 1025) + t[4:], "max_ps"),
        (t[:4] + struct.pack("<I", 0) + t[8:], "nclass"),
        (t[:4] + struct.pack("<I", 7) + t[8:], "nclass"),
        (t[:8] + struct.pack("<I", 0) + t[12:], "nruns"),
        (t[:12] + b"\x03" + t[13:], "engine"),
        (t[:13] + b"\x05" + t[14:], "width"),
        (t[:14] + b"\x01\x00" + t[16:], "width"),
        (t + b"\x00", "length"),
        (t[:16] + struct.pack("<I", 1) + t[20:], "runs"),
        (t[:-1] + b"\xff", "class"),
    ]
    for tail, field in cases:
        c_line, py_line = refused_by_both(retail(d, tail))
        assert f"tail: {field}" in c_line and field in py_line, (field, c_line, py_line)
        assert "\n" not in c_line
    s = bdr.bslb_desc(a, 100)
    for tail, field in [(s.tail[:3], "length"), (b"\x03" + s.tail[1:], "engine"),
                        (s.tail[:1] + b"\x02" + s.tail[2:], "root_late"),
                        (s.tail[:4] + b"\x00" + s.tail[5:], "order"), (s.tail[:4] + b"\x06" + s.tail[5:], "order")]:
        c_line, py_line = refused_by_both(retail(s, tail))
        assert f"tail: {field}" in c_line and field in py_line, (field, c_line, py_line)
    wrong_seg = bytearray(d.encode())
    wrong_seg[16:20] = struct.pack("<I", 2)
    wrong_seg[-4:] = struct.pack("<I", zlib.crc32(bytes(wrong_seg[:-4])))
    assert "nseg: expected 1 for bdr" in refused_by_both(bytes(wrong_seg))[0]


@settings(max_examples=60, deadline=None)
@given(alg=st.sampled_from(["bdr", "bslb"]), at=st.integers(0, 10_000), value=st.integers(0, 255),
       seed=st.integers(0, 1000))
def test_corrupt_tails_never_read_out_of_bounds(alg, at, value, seed):
    """Any byte of the tail overwritten (CRC made right): refused in one line, or lists
    whose every field is in range (ASan builds of the runtime run the same C)."""
    a = pattern("random", 12, 6, seed)
    d = bdr.bdr_desc(a, TAU, 100) if alg == "bdr" else bdr.bslb_desc(a, 100, 2)
    tail = bytearray(d.tail)
    tail[at % len(tail)] = value
    record = retail(d, bytes(tail))
    for r in range(d.nranks):
        try:
            ops = native.generate(record, r)
        except InputError as e:
            assert "\n" not in e.line()
            return
        assert np.all(ops["peer"] < d.nranks) and np.all(ops["origin"] < d.nranks)
        assert np.all(ops["segment"] < d.nseg) and np.all(ops["flags"] <= 3)


# --- under MPI: the runtime's loader takes the records ---------------------------------

def _runtime_helpers():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "runtime"))
    import rt_helpers

    return rt_helpers


@pytest.fixture(scope="module")
def compact_app(tmp_path_factory):
    rt = _runtime_helpers()
    return rt.build_mpi_app(tmp_path_factory.mktemp("compact_bdr") / "compact_app", "compact_app.c",
                            linked=True)


def mpi_record(path, algorithm: str, p: int, seed: int):
    """A record for P ranks serving up to 1 MiB per rank (every send FIFO-marked), from a
    pattern with late ranks: bdr with pre-steps and background receives, bslb late root."""
    a = pattern("late_few", p, 8, seed)
    a[seed % p] = 8 * TAU
    desc = bdr.bdr_desc(a, TAU, (0, 1 << 20)) if algorithm == "bdr" else bdr.bslb_desc(a, (0, 1 << 20), 2)
    path.write_bytes(desc.encode())
    return path


@pytest.mark.mpi
@pytest.mark.parametrize("algorithm", ["bdr", "bslb"])
@pytest.mark.parametrize("p,imbalance", [(3, True), (4, False), (5, True)])
def test_records_run_under_mpi(compact_app, tmp_path, algorithm, p, imbalance):
    """compact_app: collsched_allgather with the record against PMPI_Allgather, byte for
    byte, the ranks entering at different times or together."""
    import os
    import subprocess

    rt = _runtime_helpers()
    path = mpi_record(tmp_path / f"{algorithm}.sched", algorithm, p, seed=p)
    env = {**os.environ, "COLLSCHED_SCHEDULES": str(path), "COLLSCHED_STRICT": "1"}
    proc = subprocess.run(rt.mpirun_cmd(p) + [str(compact_app), "1000", "3", *(["imbalance"] if imbalance else [])],
                          capture_output=True, text=True, timeout=rt.TIMEOUT, env=env)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and len(rows) == 1, proc.stdout + proc.stderr
    assert rows[0]["ok"] and rows[0]["errors"] == 0 and rows[0]["used"] == 1, rows[0]


@pytest.mark.mpi
def test_collsched_run_takes_the_records(tmp_path):
    rt = _runtime_helpers()
    files = [mpi_record(tmp_path / "bdr.sched", "bdr", 5, 2), mpi_record(tmp_path / "bslb.sched", "bslb", 5, 3)]
    run = rt.run_driver(5, files, "--bytes", "777,65536", "--iterations", "2")
    assert run.returncode == 0 and len(run.rows) == 4, run
    assert all(r["used_schedule"] and r["data_ok"] for r in run.rows), run


HARNESS = r"""
#include "compact_gen.h"
#include <stdio.h>
#include <stdlib.h>
/* Each argument: a record file. Generates every rank's list (count, then into an exact
 * buffer); prints one line per record: the refusal or the total of ops. */
int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        static unsigned char buf[1 << 20];
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        unsigned char *rec = malloc(n ? n : 1); /* exact size: ASan sees any read past it */
        for (size_t k = 0; k < n; k++) rec[k] = buf[k];
        cs_compact_desc d;
        char err[256];
        if (cs_compact_decode(rec, n, &d, err, sizeof err)) { printf("refused: %s\n", err); free(rec); continue; }
        unsigned long long total = 0;
        for (uint32_t r = 0; r < d.nranks; r++) {
            uint64_t k = 0;
            if (cs_compact_generate(&d, r, NULL, 0, &k, err, sizeof err) == CS_COMPACT_EDESC) break;
            cs_compact_op *ops = malloc((k ? k : 1) * sizeof *ops);
            cs_compact_generate(&d, r, ops, k, &k, err, sizeof err);
            total += k;
            free(ops);
        }
        printf("ops: %llu\n", total);
        free(rec);
    }
    return 0;
}
"""


def test_hostile_tails_under_asan(tmp_path):
    """The generators built with AddressSanitizer and UBSan (no recovery) over corrupt
    records: every byte of small bdr and bslb tails set to 0, 1, 0xff and a random value."""
    import shutil
    import subprocess

    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    src = native.sources()[1].parent
    (tmp_path / "harness.c").write_text(HARNESS)
    exe = tmp_path / "harness"
    build = subprocess.run([cc, "-std=c11", "-g", "-O1", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                            f"-I{src}", *(str(src / c) for c in native.C_FILES), str(tmp_path / "harness.c"),
                            "-o", str(exe)], capture_output=True, text=True)
    if build.returncode != 0:
        pytest.skip(f"no sanitizer build here: {build.stderr.strip()[:200]}")
    a = pattern("random", 9, 6, 4)
    rng = np.random.default_rng(5)
    files = []
    for d in (bdr.bdr_desc(a, TAU, 100), bdr.bslb_desc(a, 100, 2)):
        for at in range(len(d.tail)):
            for value in (0, 1, 0xFF, int(rng.integers(256))):
                tail = bytearray(d.tail)
                tail[at] = value
                f = tmp_path / f"r{len(files)}"
                f.write_bytes(retail(d, bytes(tail)))
                files.append(f)
    run = subprocess.run([str(exe), *map(str, files)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    assert len(lines) == len(files) and any(x.startswith("ops") for x in lines) and any(
        x.startswith("refused") for x in lines)


@pytest.mark.mpi
def test_pat_engine_runs_the_records(tmp_path):
    """The PAT engine (collsched-minibench --pat bdr-files, PAT_UseSchedule): a compact bdr
    record per iteration, made for that iteration's arrivals; the background receives run
    before the late ranks arrive, every byte right, no fallback."""
    import os
    import subprocess

    from collsched.lab.arrivals import arrival_pattern

    rt = _runtime_helpers()
    exe = rt.BUILD / "bin" / "collsched-minibench"
    if not exe.exists():
        pytest.skip(f"{exe} not built (make lab)")
    p, nbytes, iters = 6, 20000, 3
    pat = arrival_pattern(5, iters, p, 0.005)
    for k in range(iters):
        a = pat[k] - pat[k].min()
        desc = bdr.bdr_desc(a, bdr.default_tau(nbytes), nbytes)
        assert bdr.read_bdr_tail(desc)["max_ps"] > 0  # pre-steps, background receives
        (tmp_path / f"bdr-it{k}.sched").write_bytes(desc.encode())
    proc = subprocess.run(rt.mpirun_cmd(p) + [str(exe), "--bytes", str(nbytes), "--iterations", str(iters),
                                              "--flat-iterations", "0", "--max-delay-ms", "5", "--seed", "5",
                                              "--pat", "bdr-files", "--pat-schedules", str(tmp_path / "bdr-it%d.sched")],
                          capture_output=True, text=True, timeout=rt.TIMEOUT,
                          env={**os.environ, "COLLSCHED_VERBOSE": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("{")))
    assert out["errors"] == 0 and out["fallbacks"] == 0, (out, proc.stderr[-2000:])
    assert all(proc.stderr.count(f"bdr-it{k}.sched") >= p for k in range(iters)), proc.stderr[-2000:]
    import re
    background = sum(int(n) for n in re.findall(r"(\d+) of \d+ ops in the background", proc.stderr))
    assert background > 0, proc.stderr[-2000:]  # the records' phase bits reached the engine


@pytest.mark.mpi
def test_repeated_rank_in_a_bslb_order_falls_back(compact_app, tmp_path):
    """C checks the order's range only; a repeated rank (CRC made right) is refused at
    adoption by the runtime's dataflow check, and the call falls back with the right data."""
    import os
    import subprocess

    rt = _runtime_helpers()
    d = bdr.bslb_desc(np.zeros(4), (0, 1 << 20))
    tail = bytearray(d.tail)
    tail[5] = tail[4]  # order [1, 1, 3]: rank 2 missing
    path = tmp_path / "dup.sched"
    path.write_bytes(retail(d, bytes(tail)))
    env = {**os.environ, "COLLSCHED_SCHEDULES": str(path), "COLLSCHED_STRICT": "0"}
    proc = subprocess.run(rt.mpirun_cmd(4) + [str(compact_app), "1000", "2"], capture_output=True, text=True,
                          timeout=rt.TIMEOUT, env=env)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and len(rows) == 1, proc.stdout + proc.stderr
    assert rows[0]["ok"] and rows[0]["used"] == 0 and str(path) in rows[0]["reason"], rows[0]
