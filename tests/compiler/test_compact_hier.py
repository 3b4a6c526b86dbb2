"""The compact form of hier (compact/hier.py, runtime/src/compact_hier.c; docs/hier.md):
the C generator's lists are the explicit compiler's on random multi-site topologies (site
splits, classes, TCP windows, sizes around the FIFO thresholds, both plans), whole files
written by compile_schedule equal the generated sections, the site-level reader gives the
P x P Topology's values, Python and C refuse the same hostile tails in one line, and the
command line writes a record end to end."""
import json
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from collsched import schedfile
from collsched.algorithms import Request, hier as hier_alg
from collsched.compact import count, decode, generate, hier, identity, schedule
from collsched.compact.desc import DESC_BYTES, NO_FIFO, fifo_min_piece
from collsched.errors import InputError
from collsched.inputs.topology import load_topology
from collsched.pipeline import compile_schedule

ROOT = Path(__file__).resolve().parents[2]
WAN = str(ROOT / "topologies" / "wan-3x16.yaml")
SLOW = dict(suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture], deadline=None)


@st.composite
def site_topologies(draw, max_sites=6, max_ranks=120):
    """(sizes, lan, wan, window) of a random class-form topology: unequal sites, LAN and
    WAN latencies from microseconds to 100 ms (so WAN pieces are FIFO-marked at some sizes
    and not at others), optional asymmetric links and TCP window."""
    s = draw(st.integers(1, max_sites), label="sites")
    sizes = draw(st.lists(st.integers(1, max(1, max_ranks // s)), min_size=s, max_size=s), label="sizes")
    lat = st.sampled_from([0.0, 1e-6, 5e-6, 5e-5, 1e-3, 2e-2, 8e-2])
    bw = st.sampled_from([1.25e6, 1.25e8, 1.25e9, 1.0e10])
    lan = [(draw(lat), draw(bw)) for _ in range(s)]
    wan = {}
    for i in range(s):
        for j in range(i + 1, s):
            # a wan: class is one host pair's: no faster than both NICs, no shorter than the
            # two LAN halves (docs/inputs.md)
            halves, nic = (lan[i][0] + lan[j][0]) / 2, min(lan[i][1], lan[j][1])
            a, b = max(draw(lat), halves), min(draw(bw), nic)
            wan[i, j] = (a, b) + ((max(draw(lat), halves), min(draw(bw), nic)) if draw(st.booleans()) else (a, b))
    window = draw(st.sampled_from([None, None, 65536, 4 << 20]), label="window")
    return sizes, lan, wan, window


def write(tmp_path, topo, name="t.yaml") -> str:
    sizes, lan, wan, window = topo
    path = tmp_path / name
    hier.write_sites_topology(path, sizes, lan, wan, tcp_window=window)
    return str(path)


def near_threshold(draw, sites: hier.Sites, nseg: int) -> int:
    """A block size whose pieces fall at, just below or above one site pair's FIFO
    threshold (or any size)."""
    x, y = draw(st.integers(0, len(sites.sizes) - 1)), draw(st.integers(0, len(sites.sizes) - 1))
    t = fifo_min_piece(1 << 30, float(sites.latency[x, y]), float(sites.bandwidth[x, y]), float(sites.flow[x, y]))
    if t == NO_FIFO or draw(st.booleans()):
        return draw(st.integers(0, 1 << 22), label="bytes")
    return max(0, t * nseg + draw(st.integers(-nseg - 1, nseg + 1), label="offset"))


def same(want, got) -> str | None:
    """None when the two schedules' lists are equal, column by column."""
    if not np.array_equal(want.offsets, got.offsets):
        return "counts differ"
    for col in identity.COLUMNS:
        if not np.array_equal(getattr(want, col), getattr(got, col)):
            return f"column {col} differs"
    return None


@given(site_topologies(), st.integers(1, 4), st.sampled_from([None, "direct", "relay"]), st.data())
@settings(max_examples=60, **SLOW)
def test_generated_lists_are_the_explicit_compilers(tmp_path, topo, nseg, kind, data):
    path = write(tmp_path, topo)
    p = data.draw(st.integers(1, sum(topo[0])), label="ranks")  # the first p hosts, maybe fewer sites
    sites = hier.read_sites(path, p)
    hi = near_threshold(data.draw, sites, nseg)
    lo = data.draw(st.integers(0, hi), label="bytes_min")
    desc = hier.for_topology(path, p, (lo, hi), nseg, kind=kind)
    assert decode(desc.encode()) == desc
    if kind is None:  # the plan the explicit compile chooses: through the algorithm registry
        assert identity.first_difference(desc, path) is None
    else:
        assert same(hier.explicit(desc, path), schedule(desc)) is None
    assert hier.check_record(desc) is None


@given(site_topologies(max_sites=8, max_ranks=64), st.data())
@settings(max_examples=40, **SLOW)
def test_site_reader_gives_the_topologys_values_and_plan(tmp_path, topo, data):
    """read_sites (no P x P matrices) and hier.site_costs (from load_topology) agree on
    every value the plan and the FIFO marks use, so both choose the same plan."""
    path = write(tmp_path, topo)
    p = data.draw(st.integers(1, sum(topo[0])), label="ranks")
    nbytes = data.draw(st.integers(0, 1 << 24), label="bytes")
    sites = hier.read_sites(path, p)
    req = Request(p, nbytes=nbytes, topology=load_topology(path, p))
    groups = hier_alg.site_groups(req)
    explicit = hier_alg.site_costs(req, groups)
    assert sites.sizes == explicit.sizes == tuple(len(g) for g in groups)
    for x in range(len(groups)):
        for y in range(len(groups)):
            if x != y or len(groups[x]) > 1:
                for a, b in ((sites.latency, explicit.latency), (sites.bandwidth, explicit.bandwidth),
                             (sites.flow, explicit.flow)):
                    assert a[x, y] == b[x, y]
    assert hier.for_topology(path, p, nbytes).tail == hier.for_topology(path, p, nbytes).tail
    tail = hier.decode_tail(hier.for_topology(path, p, nbytes).tail)
    assert tail.entries == hier_alg.plan_for(req).entries


@pytest.mark.parametrize("topology, p, nbytes, nseg", [
    (WAN, 48, 65536, 1), (WAN, 29, 1 << 20, 3), (str(ROOT / "topologies" / "three-site-grid.yaml"), 20, 4096, 2),
])
def test_whole_files_equal_the_generated_sections(tmp_path, topology, p, nbytes, nseg):
    """compile_schedule (generate, passes, verifier) writes what the generator produces."""
    out = tmp_path / "h.sched"
    compile_schedule("hier", p, nbytes, topology=topology, segments=nseg, output=out)
    desc = hier.for_topology(topology, p, nbytes, nseg)
    assert same(schedfile.read(out), schedule(desc)) is None


def test_both_plans_are_chosen_where_the_model_says():
    """wan-3x16's B-C link is 80 ms against 20 and 40 via A: relaying through A is chosen;
    on grid-8x128 (all pairs alike) the direct plan."""
    wan = hier.read_sites(WAN, 48)
    relay = hier.decode_tail(hier.for_sites(wan, 48, 1 << 20).tail)
    assert relay.plan == hier.PLAN_CODES["relay"]
    assert any(e.src != e.origin for e in relay.entries)  # some site relays another's blocks
    grid = hier.read_sites(str(ROOT / "topologies" / "grid-8x128.yaml"), 1024)
    assert hier.decode_tail(hier.for_sites(grid, 1024, 1 << 20).tail).plan == hier.PLAN_CODES["direct"]


def test_record_grows_with_sites_not_ranks(tmp_path):
    """At 8 sites the record is 1,516 bytes for 64 ranks and for 65,536."""
    for per_site in (8, 8192):
        path = tmp_path / f"s{per_site}.yaml"
        hier.write_sites_topology(path, [per_site] * 8, [(5e-6, 1.25e9)] * 8,
                                  {(i, j): (0.01 * (1 + (i + j) % 3), 1.25e9) * 2
                                   for i in range(8) for j in range(i + 1, 8)}, tcp_window=4 << 20)
        desc = hier.for_topology(str(path), 8 * per_site, 65536)
        assert desc.size == hier.record_bytes(8) == 1516
    # the last rank's list at P = 65,536: counted by C in O(blocks)
    assert count(desc, 65535) == len(generate(desc, 65535))


def _records(draw):
    path_sizes = draw(st.lists(st.integers(1, 5), min_size=1, max_size=4), label="sizes")
    s = len(path_sizes)
    sites = hier.Sites("x", tuple(f"S{i}" for i in range(s)), tuple(path_sizes), np.full((s, s), 1e-3),
                       np.full((s, s), 1e8), np.full((s, s), 1e8), True)
    return hier.for_sites(sites, sum(path_sizes), 4096, draw(st.integers(1, 2)),
                          draw(st.sampled_from(["direct", "relay"])))


@st.composite
def hostile_tails(draw):
    """A valid hier record with one to three u32 words of its tail (or the head's
    fifo_min_piece) overwritten by edge or random values, the CRC-32 recomputed."""
    record = bytearray(_records(draw).encode())
    words = (len(record) - DESC_BYTES - 4) // 4
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.integers(0, 9)) == 0:
            record[40:48] = draw(st.sampled_from([0, 1, NO_FIFO - 1])).to_bytes(8, "little")
            continue
        at = DESC_BYTES + 4 * draw(st.integers(0, words - 1))
        value = draw(st.one_of(st.sampled_from([0, 1, 2, 3, 4, 5, 255, 256, 257, (1 << 32) - 1]),
                               st.integers(0, (1 << 32) - 1)))
        record[at:at + 4] = value.to_bytes(4, "little")
    if draw(st.booleans()):  # a truncated or extended tail
        cut = draw(st.integers(-12, 12))
        body = bytes(record[:-4])
        body = body[:len(body) + cut] if cut < 0 else body + bytes(cut)
        record = bytearray(body[:48] + struct.pack("<I", len(body) + 4) + body[52:] + b"\0\0\0\0")
    record[-4:] = struct.pack("<I", zlib.crc32(bytes(record[:-4])))
    return bytes(record)


@given(hostile_tails())
@settings(max_examples=300, deadline=None)
def test_hostile_tails_python_and_c_agree(record):
    """C accepts exactly the tails Python accepts, refuses the others with the same one
    line, never crashes; an accepted tail's lists pass the verifier and are the tail's."""
    try:
        desc, py_line = decode(record), None
    except InputError as e:
        desc, py_line = None, e.line()
    try:
        n, c_line = count(record, 0), None
    except InputError as e:
        n, c_line = None, e.line()
    assert (desc is None) == (n is None)
    if desc is None:
        assert py_line == c_line and "\n" not in c_line
    else:
        assert hier.check_record(desc) is None


@pytest.mark.parametrize("patch, expected", [
    (lambda t: t[:8], "tail: expected at least 16 bytes"),
    (lambda t: struct.pack("<I", 0) + t[4:], "tail.nsites: expected 1..256, found 0"),
    (lambda t: struct.pack("<I", 257) + t[4:], "tail.nsites: expected 1..256, found 257"),
    (lambda t: t[:12] + struct.pack("<I", 1) + t[16:], "tail.reserved: expected 0, found 1"),
    (lambda t: t[:8] + struct.pack("<I", 2) + t[12:], "tail.plan: expected 0 (direct) or 1 (relay)"),
    (lambda t: t[:16] + struct.pack("<I", 0) + t[20:], "tail.sizes[0]: expected at least 1 member"),
    (lambda t: t[:16] + struct.pack("<I", 7) + t[20:], "tail.sizes: expected members summing to nranks 9"),
])
def test_named_refusals(patch, expected):
    sites = hier.Sites("x", ("A", "B", "C"), (2, 3, 4), np.full((3, 3), 1e-3), np.full((3, 3), 1e8),
                       np.full((3, 3), 1e8), True)
    desc = hier.for_sites(sites, 9, 4096)
    body = desc.encode()[:-4]
    tail = patch(body[DESC_BYTES:])
    body = body[:48] + struct.pack("<I", DESC_BYTES + len(tail) + 4) + body[52:DESC_BYTES] + tail
    record = body + struct.pack("<I", zlib.crc32(body))
    for side in (lambda: decode(record), lambda: count(record, 0)):
        with pytest.raises(InputError) as e:
            side()
        assert expected in e.value.line() and "\n" not in e.value.line()


def test_plan_refusals_name_the_entry():
    """An entry relaying blocks its site does not hold yet, a site receiving twice."""
    sites = hier.Sites("x", ("A", "B", "C"), (1, 1, 1), np.full((3, 3), 1e-3), np.full((3, 3), 1e8),
                       np.full((3, 3), 1e8), True)
    desc = hier.for_sites(sites, 3, 0, kind="direct")
    tail = hier.decode_tail(desc.tail)
    bad = list(tail.entries)
    bad[0] = type(bad[0])(0, 1, 2, 0)  # site 1 forwards site 0's blocks in step 0
    with pytest.raises(InputError, match=r"tail.entries\[0\]: expected site 1 to hold origin site 0"):
        hier.CompactDesc("hier", 3, tail=hier.HierTail(tail.sizes, 0, tail.fifo, tuple(bad)).encode())


def test_refusals_of_the_compile(tmp_path):
    ns = type("Args", (), {})
    a = ns()
    a.topology, a.ranks, a.duplex, a.bytes, a.segments = None, 8, None, "64KiB", "auto"
    assert "no topology" in hier.refusal(a)
    a.topology, a.duplex = WAN, "half"
    assert "half duplex" in hier.refusal(a)
    a.duplex, a.ranks = None, 49
    assert "49 ranks requested" in hier.refusal(a)
    matrix = tmp_path / "m.yaml"
    matrix.write_text("hosts: [{name: a, site: A}, {name: b, site: B}]\nmatrix: {latency: [[null, 1], "
                      "[1, null]], bandwidth: [[null, 1e9], [1e9, null]]}\n")
    a.topology, a.ranks = str(matrix), 2
    assert "measured matrix" in hier.refusal(a)
    mixed = tmp_path / "x.yaml"
    mixed.write_text("hosts: [{name: a, site: A}, {name: b, site: B}, {name: c, site: A}]\n"
                     "sites: [{name: A, lan: {latency: 1us, bandwidth: 1GB/s}}, "
                     "{name: B, lan: {latency: 1us, bandwidth: 1GB/s}}]\n"
                     "wan: [{between: [A, B], latency: 1ms, bandwidth: 1GB/s}]\n")
    a.topology, a.ranks = str(mixed), 3
    assert "not one contiguous range" in hier.refusal(a)
    a.ranks = 2  # the first two hosts: contiguous
    assert hier.refusal(a) is None


def test_cli_compile_show_end_to_end(tmp_path):
    out = tmp_path / "h.sched"
    run = subprocess.run([sys.executable, "-m", "collsched", "compile", "--algorithm", "hier",
                          "--topology", WAN, "--ranks", "40", "--bytes", "64KiB", "--segments", "2",
                          "--form", "compact", "--json", "-o", str(out)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["file_bytes"] == out.stat().st_size == hier.record_bytes(3)
    desc = decode(out.read_bytes())
    assert desc == hier.for_topology(WAN, 40, 65536, 2)
    assert identity.first_difference(desc, WAN) is None
    refused = subprocess.run([sys.executable, "-m", "collsched", "compile", "--algorithm", "hier",
                              "--ranks", "8", "--bytes", "1KiB", "--form", "compact", "-o", str(out)],
                             capture_output=True, text=True)
    assert refused.returncode == 2 and "no topology" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def test_show_lines_and_record_check():
    """summary_lines names the sites, the plan and the thresholds; check_record (verify
    without the topology file) holds for a record and sees a tampered threshold."""
    desc = hier.for_topology(WAN, 48, 65536)
    lines = hier.summary_lines(desc)
    assert lines[0].endswith("3: 16, 16, 16 ranks") and "relay: 6 entries in 2 steps" in lines[1]
    assert lines[2].endswith(">= 6251 bytes per piece") and lines[3].endswith("none")
    assert hier.check_record(desc) is None
    tail = hier.decode_tail(desc.tail)
    fifo = tuple(tuple(0 if (x, y) == (0, 1) else v for y, v in enumerate(row)) for x, row in enumerate(tail.fifo))
    changed = hier.CompactDesc("hier", 48, tail=hier.HierTail(tail.sizes, tail.plan, fifo, tail.entries).encode(),
                               bytes_min=65536, bytes_max=65536)
    assert hier.check_record(changed) is None  # still valid lists (other marks) ...
    assert identity.first_difference(changed, WAN) is not None  # ... but not wan-3x16's


def test_form_auto_takes_the_record_from_1024_ranks():
    """--form auto: the hier record where it applies from AUTO_MIN_RANKS ranks, explicit
    below it and where the compact form refuses (no topology)."""
    from collsched.compact import AUTO_MIN_RANKS, choose_form

    grid = str(ROOT / "topologies" / "grid-8x128.yaml")
    a = type("Args", (), {"topology": grid, "ranks": AUTO_MIN_RANKS, "duplex": None,
                          "bytes": "64KiB", "segments": "auto"})()
    assert choose_form("auto", "hier", AUTO_MIN_RANKS, topology=grid, args=a) == "compact"
    a.ranks = 1000
    assert choose_form("auto", "hier", 1000, topology=grid, args=a) == "explicit"
    a.topology = None
    assert choose_form("auto", "hier", AUTO_MIN_RANKS, args=a) == "explicit"
