"""The compact form's generators (runtime/src/compact_gen.c) against the explicit compiler.

Identity: every rank's generated list equals, column by column, what generate + passes
give on the default cluster or a homogeneous topology file, in full or half duplex
(compact.identity), and byte for byte the section compile_schedule writes. Sampled here
(hypothesis over algorithm, P up to 1024, segments, sizes around the FIFO threshold,
duplex, and random homogeneous topology files; every rank of each drawn schedule) and
exhaustive for the ring up to P = 160 and every algorithm in half duplex up to P = 40;
tools/prove_compact.py runs every algorithm and every P up to 1024 (docs/compact.md and
docs/compact-regular.md record its runs). Also: the description's encoding, one-line
refusals from Python and C alike, the topologies refused, and counts that stay safe at
the format's limits.
"""
from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from collsched import schedfile
from collsched.compact import (ALGORITHMS, REGULAR, NO_FIFO, CompactDesc, count, decode, fifo_min_piece, for_default,
                               generate, schedule)
from collsched.compact.desc import DESC_BYTES, _homogeneous_defaults, for_topology, refusal
from collsched.compact.files import check
from collsched.compact.identity import explicit, first_difference
from collsched.errors import InputError
from collsched.model.policy import fifo_link
from collsched.pipeline import compile_schedule

# The default cluster marks a send FIFO from this piece size on (50 us, 125 MB/s).
THRESHOLD = fifo_min_piece(1 << 40, *_homogeneous_defaults())


def valid(algorithm: str, p: int) -> bool:
    return not ((algorithm == "rd" and p & (p - 1)) or (algorithm == "nex" and p % 2))


def write_topology(path, latency, bandwidth, *, window=None, duplex="full", hosts=64, per_host=1,
                   intra=None, matrix=False, sites=1, extra=""):
    """A topology file: `sites` sites of `hosts` hosts in all (class form: one LAN each and
    WANs of the same cost between them; matrix form: every pair listed), `per_host` ranks
    per host, an intra-host class where given."""
    lines = ["name: t", f"duplex: {duplex}"]
    if window is not None:
        lines.append(f"tcp_window: {window}")
    if matrix:  # latency/bandwidth: a value, or a function of (i, j)
        def rows(v):
            return [f"    - [{', '.join('null' if i == j else repr(v(i, j) if callable(v) else v) for j in range(hosts))}]"
                    for i in range(hosts)]
        lines.append("hosts:")
        lines += [f"  - {{name: h{i}, site: s{i * sites // hosts}}}" for i in range(hosts)]
        lines += ["matrix:", "  latency_unit: s", "  bandwidth_unit: B/s", "  latency:", *rows(latency),
                  "  bandwidth:", *rows(bandwidth)]
    else:
        lines.append("sites:")
        for k in range(sites):
            n = hosts // sites + (k < hosts % sites)
            lines += [f"  - name: s{k}", f"    hosts: {n}", f"    lan: {{latency: {latency!r} s, bandwidth: {bandwidth!r} B/s}}"]
        if sites > 1:
            lines.append("wan:")
            lines += [f"  - {{between: [s{a}, s{b}], latency: {latency!r} s, bandwidth: {bandwidth!r} B/s}}"
                      for a in range(sites) for b in range(a + 1, sites)]
    if per_host > 1:
        lines.append(f"placement: {{ranks_per_host: {per_host}}}")
    if intra is not None:
        lines.append(f"intra_host: {{latency: {intra[0]!r} s, bandwidth: {intra[1]!r} B/s}}")
    path.write_text("\n".join(lines) + "\n" + extra)
    return str(path)


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
    return for_default(algorithm, p, tuple(lo_hi), nseg, duplex=draw(st.sampled_from(["full", "half"])))


@given(cases())
@settings(max_examples=240, deadline=None)
def test_identity_sampled(desc):
    """Every rank of the drawn schedule: about 40,000 (algorithm, P, nseg, rank, duplex)
    cases a run (the mean drawn P is about 160)."""
    assert first_difference(desc) is None


def test_half_duplex_exhaustive_small():
    """Every algorithm, every P up to 40, in half duplex (the greedy sub-step colouring):
    with segments, so that a group of one sender is several transfers."""
    for algorithm in sorted(REGULAR):
        for p in range(1, 41):
            if valid(algorithm, p):
                nseg = 1 + p % 2
                desc = for_default(algorithm, p, (THRESHOLD - 1) * nseg + p % (nseg + 1), nseg, duplex="half")
                assert first_difference(desc) is None, (algorithm, p)


def test_half_duplex_changes_the_order():
    """The half-duplex check can fail: the full-duplex lists differ from the half-duplex
    compile (a rank that sends first), and lnbc's do not (no rank sends and receives in one
    step)."""
    import dataclasses

    full = for_default("ring", 6, 1000)
    half = dataclasses.replace(full, full_duplex=False)
    assert not explicit(half).same_ops(explicit(full))
    assert first_difference(half) is None and first_difference(full) is None
    lnbc = for_default("lnbc", 13, 1000)
    assert explicit(lnbc).same_ops(explicit(dataclasses.replace(lnbc, full_duplex=False)))


@pytest.mark.parametrize("algorithm", sorted(REGULAR))
@pytest.mark.parametrize("duplex, topology", [(None, None), ("half", None), (None, "tryton-48"),
                                              ("half", "lan-capped")])
def test_identity_with_compile_schedule_bytes(algorithm, duplex, topology, tmp_path):
    """The whole pipeline, as `collsched compile` runs it, and the file's own bytes: on the
    default cluster and topology files, in either duplex."""
    if topology == "lan-capped":  # the TCP window caps every pair: no FIFO marks
        topology = write_topology(tmp_path / "capped.yaml", 200e-6, 1.25e9, window=65536, duplex="full")
    for p, nseg, nbytes in ((2, 1, 4096), (8, 2, (1024, 3 * THRESHOLD - 1)), (12, 3, 65536)):
        if not valid(algorithm, p):
            continue
        out = tmp_path / f"{algorithm}-{p}.sched"
        # One segment as --segments auto picks it on the default cluster, the others asked.
        compile_schedule(algorithm, p, nbytes, segments=nseg if nseg > 1 else "auto", output=out,
                         topology=topology, duplex=duplex)
        data = out.read_bytes()
        sched = schedfile.decode(data)
        desc = for_topology(algorithm, p, nbytes, nseg, topology=topology, duplex=duplex)
        assert sched.full_duplex == desc.full_duplex
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
    the program's lists are the library's, for every algorithm and rank at a few P, in
    either duplex."""
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
    descs = [for_default(a, p, (0, 3 * THRESHOLD - 1), 3, duplex=duplex) for a in sorted(REGULAR)
             for p in (1, 2, 6, 16, 37) if valid(a, p) for duplex in ("full", "half")]
    run = subprocess.run([str(exe)], input=b"".join(d.encode() for d in descs), capture_output=True)
    assert run.returncode == 0, run.stderr.decode()
    assert run.stdout == b"".join(generate(d, r).tobytes() for d in descs for r in range(d.nranks))
    bad = subprocess.run([str(exe)], input=CompactDesc("ring", 4).encode()[:-8] + b"\1" * 8,
                         capture_output=True)
    assert bad.returncode == 1 and bad.stderr.decode().count("\n") == 1


def test_pattern_and_engine_do_not_change_the_lists(tmp_path):
    """compact.refusal's claim: with an imbalanced arrival pattern and every engine, the
    compiled lists are still the generated ones (in either duplex); a multi-site topology
    is refused, a homogeneous one and half duplex are not."""
    from collsched.compact import refusal

    pap = tmp_path / "late.yaml"
    pap.write_text("arrivals: [0.0, 0.003, 0.0, 0.001, 0.0, 0.0, 0.002, 0.0]\n")
    for algorithm in ("ring", "mpichg2", "nex"):
        assert refusal(algorithm, duplex="full") is None
        desc = for_default(algorithm, 8, 65536, 2)
        for engine in ("pat", "none", "ahead"):
            compiled = compile_schedule(algorithm, 8, 65536, pap=str(pap), engine=engine, segments=2).schedule
            assert compiled.same_ops(schedule(desc)), (algorithm, engine)
    for engine in ("pat", "none", "ahead"):  # and in half duplex
        compiled = compile_schedule("bruck", 8, 65536, pap=str(pap), engine=engine, segments=2,
                                    duplex="half").schedule
        assert compiled.same_ops(schedule(for_default("bruck", 8, 65536, 2, duplex="half"))), engine
    assert refusal("ring", topology="topologies/tryton-48.yaml", nranks=48) is None
    assert "3 sites" in refusal("ring", topology="topologies/wan-3x16.yaml", nranks=48)
    assert refusal("ring", duplex="half") is None
    assert "has no compact form" in refusal("min3")


# --- homogeneous topology files (compact/cluster.py) ---------------------------------

@st.composite
def topologies(draw):
    """A homogeneous one-site topology file's parameters: latency (0 included), bandwidth,
    a TCP window that caps the pairs, does not, or is absent, duplex, form, placement."""
    latency = draw(st.sampled_from([0.0, 1e-6, 50e-6, 2e-3]) | st.floats(1e-7, 1e-2))
    bandwidth = draw(st.sampled_from([1.25e8, 1.25e9, 1e7]) | st.floats(1e5, 1e11))
    window = draw(st.sampled_from([None, 4 << 20, 65536, 1 << 30]))
    per_host = draw(st.sampled_from([1, 1, 2]))
    return dict(latency=latency, bandwidth=bandwidth, window=window, per_host=per_host,
                duplex=draw(st.sampled_from(["full", "half"])), matrix=draw(st.booleans()) and per_host == 1,
                # several ranks per host: homogeneous only where the intra-host class is the LAN's
                intra=(latency, bandwidth) if per_host > 1 else None)


@given(topologies(), st.sampled_from(sorted(REGULAR)), st.integers(1, 40), st.integers(1, 3),
       st.data())
@settings(max_examples=60, deadline=None)
def test_identity_on_homogeneous_topologies(tmp_path_factory, params, algorithm, p, nseg, data):
    """for_topology's lists are the explicit compiler's on the file (FIFO threshold from
    its latency, bandwidth and window; its duplex, or --duplex over it)."""
    if not valid(algorithm, p):
        return
    path = write_topology(tmp_path_factory.mktemp("t") / "t.yaml", params["latency"], params["bandwidth"],
                          window=params["window"], duplex=params["duplex"], hosts=40,
                          per_host=params["per_host"], intra=params["intra"], matrix=params["matrix"])
    duplex = data.draw(st.sampled_from([None, "full", "half"]))
    lo_hi = tuple(sorted((data.draw(sizes(nseg)), data.draw(sizes(nseg)))))
    assert refusal(algorithm, topology=path, duplex=duplex, nranks=p) is None
    desc = for_topology(algorithm, p, lo_hi, nseg, topology=path, duplex=duplex)
    assert desc.full_duplex == ((duplex or params["duplex"]) == "full")
    assert first_difference(desc, path) is None
    assert check(desc) is None  # verify without the file: a stand-in cluster, same marks


def test_topologies_refused_in_one_line(tmp_path):
    """A topology whose pairs do not all cost the same, several sites, size-dependent costs:
    one line each, and compile --form auto falls back (refusal's reason); an unreadable
    file is a reason too."""
    cases = {
        "sites": write_topology(tmp_path / "a.yaml", 50e-6, 1.25e8, sites=2, hosts=8),
        "intra-host": write_topology(tmp_path / "b.yaml", 50e-6, 1.25e8, per_host=2),
        "matrix": write_topology(tmp_path / "c.yaml", lambda i, j: 50e-6 if (i, j) != (3, 5) else 51e-6,
                                 1.25e8, matrix=True, hosts=8),
        "costs": write_topology(tmp_path / "d.yaml", 50e-6, 1.25e8,
                                extra="message_costs: {preset: simgrid-smpi}\n"),
    }
    why = {k: refusal("ring", topology=v, nranks=8) for k, v in cases.items()}
    assert "2 sites" in why["sites"] and "hier" in why["sites"]
    assert "different latencies" in why["intra-host"]
    assert "different latencies (5e-05 to 5.1e-05" in why["matrix"]
    assert "size-dependent" in why["costs"]
    assert "cannot be used: " in refusal("ring", topology=str(tmp_path / "none.yaml"), nranks=8)
    assert "8192" in refusal("ring", topology="topologies/tryton-48.yaml", nranks=65536)
    for line in why.values():
        assert "\n" not in line
    with pytest.raises(InputError, match="a homogeneous one-site cluster for the compact form"):
        for_topology("ring", 8, 1000, topology=cases["sites"])
    # the same files at one rank per host on the first hosts of one site: accepted
    assert refusal("ring", topology=write_topology(tmp_path / "e.yaml", 50e-6, 1.25e8, sites=2, hosts=64),
                   nranks=32) is None
    assert refusal("magpie", topology="topologies/wan-3x16.yaml", nranks=48).startswith(
        "the topology topologies/wan-3x16.yaml: 3 sites")


def test_threshold_with_the_window_cap():
    """A window that caps one flow marks nothing; one above the bandwidth leaves the
    threshold as without it (policy.fifo_link)."""
    lat, bw = 50e-6, 1.25e9
    capped = 65536 / (2 * lat)  # 6.5e8 < bw
    assert fifo_min_piece(1 << 40, lat, bw, capped) == NO_FIFO
    assert fifo_min_piece(1 << 40, lat, bw, bw) == fifo_min_piece(1 << 40, lat, bw)
    assert fifo_min_piece(1 << 40, 0.0, bw) == 1


def test_check_without_a_stand_in():
    """A record whose marks no cluster gives (a size-0 piece marked FIFO: latency < 0)."""
    desc = CompactDesc("ring", 4, 1, 0, 0, 0)
    assert "no homogeneous cluster marks FIFO" in check(desc)
