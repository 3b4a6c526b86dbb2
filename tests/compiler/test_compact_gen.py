"""The compact form's generators (runtime/src/compact_gen.c) against the explicit compiler.

Identity: every rank's generated list equals, column by column, what generate + passes
give on the default cluster (compact.identity), and byte for byte the section
compile_schedule writes. Sampled here (hypothesis over algorithm, P up to 1024, segments
and sizes around the FIFO threshold, every rank of each drawn schedule) and exhaustive
for the ring up to P = 160; tools/prove_compact.py runs every algorithm and every P up to
1024 (docs/compact.md records its run). Also: the description's encoding, one-line
refusals from Python and C alike, and counts that stay safe at the format's limits.
"""
from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from collsched import schedfile
from collsched.compact import (ALGORITHMS, REGULAR, NO_FIFO, CompactDesc, count, decode, fifo_min_piece, for_default,
                               generate, schedule)
from collsched.compact.desc import DESC_BYTES, _homogeneous_defaults
from collsched.compact.identity import explicit, first_difference
from collsched.errors import InputError
from collsched.model.policy import fifo_link
from collsched.pipeline import compile_schedule

# The default cluster marks a send FIFO from this piece size on (50 us, 125 MB/s).
THRESHOLD = fifo_min_piece(1 << 40, *_homogeneous_defaults())


def valid(algorithm: str, p: int) -> bool:
    return not ((algorithm == "rd" and p & (p - 1)) or (algorithm == "nex" and p % 2))


def test_threshold_is_fifo_link_boundary():
    lat, bw = _homogeneous_defaults()
    assert THRESHOLD == 6251
    assert fifo_link(np.float64(lat), np.float64(THRESHOLD), np.float64(bw), np.float64(bw))
    assert not fifo_link(np.float64(lat), np.float64(THRESHOLD - 1), np.float64(bw), np.float64(bw))
    assert fifo_min_piece(THRESHOLD - 1, lat, bw) == NO_FIFO
    assert fifo_min_piece(THRESHOLD, lat, bw) == THRESHOLD


@given(st.integers(0, 1 << 44), st.floats(1e-9, 1e-2), st.floats(1e3, 1e12))
@settings(max_examples=200, deadline=None)
def test_threshold_matches_fifo_link_everywhere(m, lat, bw):
    t = fifo_min_piece(1 << 44, lat, bw)
    marked = bool(fifo_link(np.float64(lat), np.float64(m), np.float64(bw), np.float64(bw)))
    assert marked == (t != NO_FIFO and m >= t)


def test_first_difference_finds_a_difference():
    """The check can fail: a description without the FIFO marks the compiler sets."""
    desc = CompactDesc("ring", 8, 1, 0, 65536, NO_FIFO)
    assert first_difference(desc) == f"{desc}: rank 0 op 1: fifo generated 0, explicit 1"


def test_ring_exhaustive_small():
    for p in range(1, 161):
        nseg = 1 + p % 3
        nbytes = (THRESHOLD - 1) * nseg + p % (nseg + 1)  # some segments FIFO, some not
        assert first_difference(for_default("ring", p, nbytes, nseg)) is None


# Sizes around the FIFO threshold for a segment count: none marked, some, all; 0 and large.
def sizes(nseg: int):
    near = (THRESHOLD - 1) * nseg
    return st.one_of(st.sampled_from([0, 1, near, near + 1, near + nseg - 1, THRESHOLD * nseg, 1 << 20]),
                     st.integers(0, 1 << 34))


@st.composite
def cases(draw):
    algorithm = draw(st.sampled_from(sorted(REGULAR)))
    p = draw(st.one_of(st.integers(1, 72), st.integers(1, 72), st.integers(1, 72),
                       st.integers(73, 1024)))
    if algorithm == "rd":
        p = 1 << (p.bit_length() - 1)
    if algorithm == "nex" and p % 2:
        p += 1
    nseg = draw(st.integers(1, 4)) if p <= 128 else 1
    lo_hi = sorted((draw(sizes(nseg)), draw(sizes(nseg))))
    return for_default(algorithm, p, tuple(lo_hi), nseg)


@given(cases())
@settings(max_examples=240, deadline=None)
def test_identity_sampled(desc):
    """Every rank of the drawn schedule: about 40,000 (algorithm, P, nseg, rank) cases a run
    (the mean drawn P is about 160)."""
    assert first_difference(desc) is None


@pytest.mark.parametrize("algorithm", sorted(REGULAR))
def test_identity_with_compile_schedule_bytes(algorithm, tmp_path):
    """The whole pipeline, as `collsched compile` runs it, and the file's own bytes."""
    for p, nseg, nbytes in ((2, 1, 4096), (8, 2, (1024, 3 * THRESHOLD - 1)), (12, 3, 65536)):
        if not valid(algorithm, p):
            continue
        out = tmp_path / f"{algorithm}-{p}.sched"
        # One segment as --segments auto picks it on the default cluster, the others asked.
        compile_schedule(algorithm, p, nbytes, segments=nseg if nseg > 1 else "auto", output=out)
        data = out.read_bytes()
        sched = schedfile.decode(data)
        desc = for_default(algorithm, p, nbytes, nseg)
        assert (sched.bytes_min, sched.bytes_max, sched.nseg) == (desc.bytes_min, desc.bytes_max, nseg)
        base = schedfile.HEADER_BYTES + schedfile.INDEX_ENTRY * p
        for r in range(p):
            lo, hi = (base + schedfile.OP_BYTES * int(sched.offsets[i]) for i in (r, r + 1))
            assert generate(desc, r).tobytes() == data[lo:hi], (algorithm, p, r)


@given(st.sampled_from(sorted(REGULAR)), st.integers(1, 300), st.integers(1, 5),
       st.integers(0, 1 << 40), st.data())
@settings(max_examples=150, deadline=None)
def test_record_round_trip_and_count(algorithm, p, nseg, nbytes, data):
    if not valid(algorithm, p):
        with pytest.raises(InputError):
            for_default(algorithm, p, nbytes, nseg)
        return
    desc = for_default(algorithm, p, nbytes, nseg)
    record = desc.encode()
    assert len(record) == DESC_BYTES and decode(record) == desc
    rank = data.draw(st.integers(0, p - 1))
    ops = generate(record, rank)  # C decodes the record itself
    assert count(desc, rank) == len(ops)
    assert ops.tobytes() == generate(desc, rank).tobytes()
    assert (ops["peer"] != rank).all() and (ops["peer"] < p).all() and (ops["origin"] < p).all()


@pytest.mark.parametrize("fields, expected", [
    (dict(algorithm="rd", nranks=6), "power-of-two rank count, got 6"),
    (dict(algorithm="nex", nranks=5), "even rank count, got 5"),
    (dict(algorithm="ring", nranks=0), "nranks: expected 1.."),
    (dict(algorithm="ring", nranks=4, nseg=0), "nseg: expected 1.."),
    (dict(algorithm="ring", nranks=4, nseg=65536), "nseg: expected 1.."),
    (dict(algorithm="ring", nranks=4, bytes_min=5, bytes_max=4), "bytes_min"),
    (dict(algorithm="ring", nranks=4, full_duplex=False), "half duplex"),
    (dict(algorithm="ring", nranks=4, version=2), "version: expected 1"),
    (dict(algorithm="min3", nranks=4), "algorithm: expected one of"),
])
def test_refusals_are_one_line_in_python_and_c(fields, expected):
    with pytest.raises(InputError) as python:
        CompactDesc(**fields)
    assert expected in python.value.line() and "\n" not in python.value.line()
    # The same description reaches C as a record Python would not write: C refuses it too.
    code = ALGORITHMS.get(fields["algorithm"], 99)
    record = struct.pack("<8sHHIII QQQ II", b"CSCOMPCT", fields.get("version", 1), code,
                         fields["nranks"], fields.get("nseg", 1),
                         0 if fields.get("full_duplex") is False else 1, fields.get("bytes_min", 0),
                         fields.get("bytes_max", 0), NO_FIFO, DESC_BYTES, 0)
    with pytest.raises(InputError) as c_side:
        generate(record, 0)
    line = c_side.value.line()
    assert line.startswith("compact description: ") and "\n" not in line
    if code != 99:
        assert expected.split(":")[-1].strip() in line


# (offset, width) of every field of the record (desc.py), the magic as two words.
FIELDS = ((0, 4), (4, 4), (8, 2), (10, 2), (12, 4), (16, 4), (20, 4), (24, 8), (32, 8), (40, 8),
          (48, 4), (52, 4))


@st.composite
def hostile_records(draw):
    """A valid record with one to three fields overwritten by edge or random values."""
    record = bytearray(for_default(draw(st.sampled_from(sorted(REGULAR))), 4, 65536).encode())
    for _ in range(draw(st.integers(1, 3))):
        offset, width = draw(st.sampled_from(FIELDS))
        top = (1 << (8 * width)) - 1
        value = draw(st.one_of(st.sampled_from([0, 1, 2, 3, 7, 8, 9, 56, 1 << 24, (1 << 24) + 1,
                                                65535 & top, 65536 & top, top, top - 1]),
                               st.integers(0, top)))
        record[offset:offset + width] = (value & top).to_bytes(width, "little")
    return bytes(record)


@given(hostile_records())
@settings(max_examples=400, deadline=None)
def test_hostile_records_python_and_c_agree(record):
    """C accepts exactly the records Python decodes (rank 0 exists in every valid one),
    with one line otherwise, and never crashes."""
    try:
        desc = decode(record)
    except InputError:
        desc = None
    if desc is not None and desc.nranks * desc.nseg > 1 << 22:
        return  # valid but large: test_counts_at_the_format_limits covers those
    try:
        n = count(record, 0)
    except InputError as e:
        assert desc is None and "\n" not in e.line(), e.line()
        return
    assert desc is not None and n == count(desc, 0)


def test_counts_at_the_format_limits():
    """P = 2^24 with 65,535 segments: the count is exact in 64 bits and refused past the
    format's u32 per-rank count, in time O(blocks) (no list is built)."""
    desc = CompactDesc("ring", 1 << 24, 65535, 0, 1 << 40, THRESHOLD)
    with pytest.raises(InputError) as e:
        count(desc, (1 << 24) - 1)
    assert f"{2 * ((1 << 24) - 1) * 65535} operations" in e.value.line()
    assert count(CompactDesc("bruck", 1 << 24, 1), 12345) == 2 * ((1 << 24) - 1)
    assert count(CompactDesc("lnbc", 65536, 1), 0) == (65536 - 1) * 17


def test_rank_out_of_range():
    with pytest.raises(InputError, match="rank: expected 0..3, found 4"):
        generate(for_default("ring", 4, 1), 4)


def test_explicit_reference_is_the_pipelines():
    """identity.explicit is what compile_schedule keeps (a sample: the list, FIFO marks)."""
    desc = for_default("bruck", 6, 65536, 2)
    compiled = compile_schedule("bruck", 6, 65536, segments=2).schedule
    assert compiled.same_ops(explicit(desc))


def test_bench_measures_sampled_ranks():
    from collsched.compact.bench import measure, sample_ranks

    assert sample_ranks(64, 5) == sorted(set(sample_ranks(64, 5)))
    assert {0, 32, 63} <= set(sample_ranks(64, 5))
    row = measure(for_default("lnbc", 64, 1000), ranks=4, repeats=1)
    assert row["max_ops"] == 63 * 7 and row["max_list_bytes"] == 12 * 63 * 7
    assert 0 < row["median_s"] <= row["max_s"] and row["description_bytes"] == 56


# A stand-alone program around compact_gen.c (the runtime's use: no MPI, no other runtime
# file): records on stdin, every rank's list of each on stdout, rank after rank.
DRIVER = r"""
#include "compact_gen.h"
#include <stdio.h>
#include <stdlib.h>
int main(void)
{
    unsigned char rec[CS_COMPACT_DESC_BYTES];
    char err[256];
    cs_compact_desc d;
    while (fread(rec, 1, sizeof rec, stdin) == sizeof rec) {
        if (cs_compact_decode(rec, sizeof rec, &d, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
        for (uint32_t rank = 0; rank < d.nranks; rank++) {
            uint64_t n = 0, m = 0;
            if (cs_compact_generate(&d, rank, NULL, 0, &n, err, sizeof err) != (n ? CS_COMPACT_ECAPACITY : CS_COMPACT_OK))
                return 4;
            cs_compact_op *ops = malloc((n ? n : 1) * sizeof *ops);
            if (!ops || cs_compact_generate(&d, rank, ops, n, &m, err, sizeof err) || m != n) return 5;
            fwrite(ops, sizeof *ops, m, stdout);
            free(ops);
        }
    }
    return 0;
}
"""


def test_standalone_under_sanitizers(tmp_path):
    """compact_gen.c builds alone (no MPI, no other runtime file) with ASan and UBSan, and
    the program's lists are the library's, for every algorithm and rank at a few P."""
    import shutil
    import subprocess

    from collsched.compact.native import sources

    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    cs, h = sources()
    (tmp_path / "driver.c").write_text(DRIVER)
    exe = tmp_path / "driver"
    subprocess.run([cc, "-std=c11", "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                    "-Wall", "-Wextra", "-Werror", f"-I{h.parent}", str(tmp_path / "driver.c"), *map(str, cs),
                    "-o", str(exe)], check=True, capture_output=True)
    descs = [for_default(a, p, (0, 3 * THRESHOLD - 1), 3) for a in sorted(REGULAR)
             for p in (1, 2, 6, 16, 37) if valid(a, p)]
    run = subprocess.run([str(exe)], input=b"".join(d.encode() for d in descs), capture_output=True)
    assert run.returncode == 0, run.stderr.decode()
    assert run.stdout == b"".join(generate(d, r).tobytes() for d in descs for r in range(d.nranks))
    bad = subprocess.run([str(exe)], input=CompactDesc("ring", 4).encode()[:-8] + b"\1" * 8,
                         capture_output=True)
    assert bad.returncode == 1 and bad.stderr.decode().count("\n") == 1


def test_pattern_and_engine_do_not_change_the_lists(tmp_path):
    """compact.refusal's claim: with an imbalanced arrival pattern and every engine, the
    compiled lists are still the generated ones; a topology or half duplex is refused."""
    from collsched.compact import refusal

    pap = tmp_path / "late.yaml"
    pap.write_text("arrivals: [0.0, 0.003, 0.0, 0.001, 0.0, 0.0, 0.002, 0.0]\n")
    for algorithm in ("ring", "mpichg2", "nex"):
        assert refusal(algorithm, duplex="full") is None
        desc = for_default(algorithm, 8, 65536, 2)
        for engine in ("pat", "none", "ahead"):
            compiled = compile_schedule(algorithm, 8, 65536, pap=str(pap), engine=engine, segments=2).schedule
            assert compiled.same_ops(schedule(desc)), (algorithm, engine)
    assert "topology" in refusal("ring", topology="topologies/tryton-48.yaml")
    assert "half duplex" in refusal("ring", duplex="half")
    assert "has no compact form" in refusal("min3")
