"""Input layer: units, topology files, arrival-pattern files, and the malformed-input corpus.

Run: PYTHONPATH=compiler python3 -m pytest -q tests/compiler/test_inputs.py
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collsched.inputs import units
from collsched.inputs.links import shared_links
from collsched.inputs.arrivals import flat, load_pap, write_pap
from collsched.errors import InputError
from collsched.inputs.topology import (INTRA_HOST_BANDWIDTH, INTRA_HOST_LATENCY, Topology, homogeneous,
                                load_topology, write_matrix_topology, write_topology)

ROOT = Path(__file__).resolve().parents[2]
TOPOS = ROOT / "topologies"
BAD = ROOT / "tests" / "data" / "bad"
MBIT = 1e6 / 8

HYP = settings(max_examples=60, deadline=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture])


def write(tmp_path, text, name="t.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def off_diag(a):
    return a[~np.eye(len(a), dtype=bool)]


# --- units --------------------------------------------------------------------------------

@pytest.mark.parametrize("text,seconds", [
    ("50us", 50e-6), ("50 ms", 0.05), ("0.05s", 0.05), ("1e-6", 1e-6), (0.5, 0.5), (2, 2.0),
    ("3 ns", 3e-9), ("7µs", 7e-6), ("1.5e3us", 1.5e-3), ("0", 0.0)])
def test_parse_time(text, seconds):
    assert units.parse_time(text) == pytest.approx(seconds, rel=1e-12)


@pytest.mark.parametrize("text,bps", [
    ("1Gbit/s", 125e6), ("85.19 Mbit/s", 85.19 * MBIT), ("10Gb/s", 1.25e9), ("125MB/s", 125e6),
    ("1.5GiB/s", 1.5 * 2**30), ("100Mbps", 12.5e6), ("1e6", 1e6), (1000, 1000.0),
    ("8 bit/s", 1.0), ("1 kbit/s", 125.0), ("2 KiB/s", 2048.0), ("3 B/s", 3.0)])
def test_parse_bandwidth(text, bps):
    assert units.parse_bandwidth(text) == pytest.approx(bps, rel=1e-12)


@pytest.mark.parametrize("text,n", [("64KiB", 65536), ("4MiB", 4 << 20), ("1000", 1000),
                                    (1000, 1000), ("1.5KiB", 1536), ("2 KB", 2000), ("1GiB", 1 << 30)])
def test_parse_bytes(text, n):
    assert units.parse_bytes(text) == n
    assert isinstance(units.parse_bytes(text), int)


@pytest.mark.parametrize("fn,text,needle", [
    (units.parse_time, "5 fortnights", "unknown time unit"),
    (units.parse_time, "fast", "cannot read"),
    (units.parse_time, "inf", "cannot read"),
    (units.parse_time, float("nan"), "finite"),
    (units.parse_time, True, "expected a time"),
    (units.parse_time, None, "expected a time"),
    (units.parse_bandwidth, "1 Gbits", "unknown bandwidth unit"),
    (units.parse_bandwidth, "1 GB", "unknown bandwidth unit"),
    (units.parse_bytes, "1.3B", "whole number"),
    (units.parse_bytes, "-4KiB", "non-negative"),
    (units.parse_bytes, "4 KiB/s", "unknown size unit")])
def test_unit_errors(fn, text, needle):
    with pytest.raises(ValueError, match=needle):
        fn(text)


FINITE = st.floats(min_value=1e-12, max_value=1e12, allow_nan=False, allow_infinity=False)


@HYP
@given(FINITE)
def test_units_format_round_trip(x):
    assert units.parse_time(units.format_time(x)) == x
    assert units.parse_bandwidth(units.format_bandwidth(x)) == x


@HYP
@given(st.integers(min_value=0, max_value=1 << 40))
def test_bytes_format_round_trip(n):
    assert units.parse_bytes(units.format_bytes(n)) == n


@HYP
@given(FINITE, st.sampled_from(sorted(units.TIME_UNITS)), st.sampled_from(["", " "]))
def test_time_with_unit(v, unit, sep):
    assert units.parse_time(f"{v!r}{sep}{unit}") == pytest.approx(v * units.TIME_UNITS[unit], rel=1e-12)


@HYP
@given(FINITE, st.sampled_from(["bit/s", "Mbit/s", "Gb/s", "Mbps", "B/s", "KB/s", "MiB/s", "GiB/s"]))
def test_bandwidth_with_unit(v, unit):
    assert units.parse_bandwidth(f"{v!r} {unit}") == pytest.approx(
        v * units.bandwidth_unit_factor(unit), rel=1e-12)


def test_bits_are_not_bytes():
    assert units.parse_bandwidth("1Mbit/s") == 125000.0
    assert units.parse_bandwidth("1MB/s") == 1e6
    assert units.parse_bandwidth("1Mb/s") == units.parse_bandwidth("1 Mbps") == 125000.0


# --- bundled topologies -------------------------------------------------------------------

@pytest.mark.parametrize("name", ["tryton-48", "three-site-grid", "wan-3x16"])
def test_bundled_topologies_load(name):
    t = load_topology(TOPOS / f"{name}.yaml")
    P = t.nranks
    assert t.name == name and t.source.endswith(f"{name}.yaml")
    assert t.rank_host.dtype == np.int64 and len(set(t.hosts)) == len(t.hosts)
    for a in (t.latency, t.bandwidth):
        assert a.shape == (P, P) and a.dtype == np.float64
    assert np.all(np.diag(t.latency) == 0) and np.all(np.isinf(np.diag(t.bandwidth)))
    assert np.all(off_diag(t.latency) > 0) and np.all(np.isfinite(off_diag(t.bandwidth)))
    assert t.full_duplex
    json.dumps(t.to_dict())


def test_tryton():
    t = load_topology(TOPOS / "tryton-48.yaml")
    assert t.nranks == 48 and t.sites() == ["tryton"]
    assert np.all(off_diag(t.latency) == 50e-6) and np.all(off_diag(t.bandwidth) == 125e6)
    assert t.os_a is None and t.g_a is None
    t28 = load_topology(TOPOS / "tryton-48.yaml", nranks=28)
    assert t28.nranks == 28 and list(t28.rank_host) == list(range(28))
    # the homogeneous helper builds the same matrices
    h = homogeneous(28)
    assert np.array_equal(h.latency, t28.latency) and np.array_equal(h.bandwidth, t28.bandwidth)


def test_three_site_grid_matches_min3_tables():
    t = load_topology(TOPOS / "three-site-grid.yaml")
    sites = t.rank_site()
    assert [sites.count(s) for s in ("UT", "UK", "NTH")] == [8, 4, 8]
    assert t.sites() == ["UT", "UK", "NTH"]
    ut, uk, nth = sites.index("UT"), sites.index("UK"), sites.index("NTH")
    bw = lambda a, b: t.bandwidth[a, b] / MBIT  # noqa: E731
    assert bw(ut, uk) == pytest.approx(1.44) and bw(uk, ut) == pytest.approx(1.28)
    assert bw(ut, nth) == pytest.approx(1.25) and bw(nth, ut) == pytest.approx(1.16)
    assert bw(uk, nth) == pytest.approx(4.75) and bw(nth, uk) == pytest.approx(4.75)
    assert bw(ut, ut + 1) == pytest.approx(85.19)
    assert bw(uk, uk + 1) == pytest.approx(289.33)
    assert bw(nth, nth + 1) == pytest.approx(81.86)
    assert t.latency[ut, uk] == t.latency[uk, ut] == pytest.approx(0.05)
    assert t.latency[ut, nth] == pytest.approx(0.05)
    assert t.latency[uk, nth] == t.latency[nth, uk] == pytest.approx(0.076)
    assert t.latency[ut, ut + 1] == pytest.approx(60e-6)
    assert t.site_of_rank(nth) == "NTH" and t.host_of_rank(0) == "UT-0"


def test_wan_3x16():
    t = load_topology(TOPOS / "wan-3x16.yaml")
    a, b, c = 0, 16, 32
    assert t.nranks == 48 and t.sites() == ["A", "B", "C"]
    assert (t.latency[a, b], t.latency[a, c], t.latency[b, c]) == pytest.approx((0.02, 0.04, 0.08))
    assert np.array_equal(t.latency, t.latency.T) and np.array_equal(t.bandwidth, t.bandwidth.T)
    assert np.all(off_diag(t.bandwidth) == 1.25e9)
    assert t.latency[a, a + 1] == pytest.approx(5e-6)


# --- class form: placement, asymmetry, duplex, os/g -----------------------------------------

TWO_SITES = """\
name: two
sites:
  - name: A
    hosts: [a0, a1, a2]
    lan: {latency: 10us, bandwidth: 1Gbit/s}
  - name: B
    hosts: 2
    lan: {latency: 20us, bandwidth: 100MB/s}
wan:
  - between: [A, B]
    latency: 30ms
    bandwidth: 10Mbit/s
    bandwidth_back: 5Mbit/s
    latency_back: 35ms
"""


def test_default_placement_first_hosts(tmp_path):
    p = write(tmp_path, TWO_SITES)
    t = load_topology(p)
    assert t.hosts == ["a0", "a1", "a2", "B-0", "B-1"] and list(t.rank_host) == [0, 1, 2, 3, 4]
    t3 = load_topology(p, 3)
    assert t3.rank_site() == ["A"] * 3
    with pytest.raises(InputError, match=r"placement: 6 ranks requested"):
        load_topology(p, 6)
    with pytest.raises(InputError, match="nranks"):
        load_topology(p, 0)


def test_asymmetric_wan(tmp_path):
    t = load_topology(write(tmp_path, TWO_SITES))
    assert t.bandwidth[0, 3] == 10 * MBIT and t.bandwidth[3, 0] == 5 * MBIT
    assert t.latency[0, 3] == pytest.approx(0.03) and t.latency[3, 0] == pytest.approx(0.035)
    assert t.bandwidth[3, 4] == 100e6 and t.latency[3, 4] == pytest.approx(20e-6)
    tt = t.transfer_time(1000)
    assert tt[0, 3] == pytest.approx(0.03 + 1000 / (10 * MBIT))
    assert tt[3, 0] == pytest.approx(0.035 + 1000 / (5 * MBIT))
    assert np.all(np.diag(tt) == 0)


def test_ranks_per_host_and_intra_host(tmp_path):
    p = write(tmp_path, TWO_SITES + "placement: {ranks_per_host: 2}\n")
    t = load_topology(p)
    assert t.nranks == 10 and list(t.rank_host) == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert t.latency[0, 1] == INTRA_HOST_LATENCY and t.bandwidth[0, 1] == INTRA_HOST_BANDWIDTH
    assert t.latency[0, 2] == pytest.approx(10e-6)
    assert load_topology(p, 3).rank_host.tolist() == [0, 0, 1]
    with pytest.raises(InputError, match=r"placement\.ranks_per_host: 11 ranks"):
        load_topology(p, 11)
    t = load_topology(write(tmp_path, TWO_SITES + "placement: {ranks_per_host: 2, order: cyclic}\n"
                            "intra_host: {latency: 0.5us, bandwidth: 20GB/s}\n", "c.yaml"))
    assert t.rank_host.tolist() == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]
    assert t.latency[0, 5] == pytest.approx(0.5e-6) and t.bandwidth[0, 5] == 20e9


def test_explicit_placement(tmp_path):
    p = write(tmp_path, TWO_SITES + "placement:\n  hosts: [B-1, a0, a0, B-0]\n")
    t = load_topology(p)
    assert t.rank_host.tolist() == [4, 0, 0, 3]
    assert t.rank_site() == ["B", "A", "A", "B"]
    assert t.latency[1, 2] == INTRA_HOST_LATENCY
    assert load_topology(p, 2).rank_host.tolist() == [4, 0]
    with pytest.raises(InputError) as e:
        load_topology(p, 5)
    assert "placement.hosts" in e.value.line() and "expected at least 5" in e.value.line()


def test_duplex(tmp_path):
    t = load_topology(write(tmp_path, TWO_SITES))
    assert t.full_duplex
    h = load_topology(write(tmp_path, TWO_SITES + "duplex: half\n", "h.yaml"))
    assert not h.full_duplex
    f = h.with_duplex(True)
    assert f.full_duplex and not h.full_duplex and isinstance(f, Topology)
    assert np.array_equal(f.latency, h.latency)


def test_os_g_default_is_serialization_time(tmp_path):
    t = load_topology(write(tmp_path, TWO_SITES))
    assert t.os_a is None and t.g_a is None
    m = 4096
    # A flow occupies the sender's port for its bytes at the port's rate: the pair's
    # bandwidth within a site, the sender's LAN rate across a shared WAN link (links.py).
    wan = shared_links(t).link_of >= 0
    assert wan.any() and not wan[np.eye(t.nranks, dtype=bool)].any()
    os_ = t.send_overhead(m)
    assert np.array_equal(os_[~wan], (m / t.bandwidth)[~wan])
    same_site = np.array([[a == b for b in t.rank_site()] for a in t.rank_site()])
    for s_, r in zip(*np.nonzero(wan)):
        peer = next(x for x in range(t.nranks) if same_site[s_, x] and x != s_)
        assert os_[s_, r] == pytest.approx(m / t.bandwidth[s_, peer])
    assert np.array_equal(t.gap(m), m / t.bandwidth)


def test_os_g_global_and_per_class(tmp_path):
    text = TWO_SITES.replace(
        "    latency_back: 35ms\n",
        "    latency_back: 35ms\n    send_overhead: {a: 100us, per_byte: 1us}\n") + \
        "send_overhead: {a: 2us, per_byte: 1ns}\ngap: {a: 3us, per_byte: 2ns}\n"
    t = load_topology(write(tmp_path, text))
    m = 1000
    os_, g = t.send_overhead(m), t.gap(m)
    assert os_[0, 1] == pytest.approx(2e-6 + m * 1e-9)  # LAN: global
    assert os_[0, 3] == pytest.approx(100e-6 + m * 1e-6)  # WAN class overrides
    assert os_[3, 0] == pytest.approx(100e-6 + m * 1e-6)  # both directions
    assert g[0, 3] == pytest.approx(3e-6 + m * 2e-9)
    assert os_[0, 0] == 0 and g[0, 0] == 0


def test_os_per_class_only_falls_back_to_serialization(tmp_path):
    text = TWO_SITES.replace("lan: {latency: 10us, bandwidth: 1Gbit/s}",
                             "lan: {latency: 10us, bandwidth: 1Gbit/s, gap: {a: 1us, per_byte: 0}}")
    t = load_topology(write(tmp_path, text))
    assert t.os_a is None  # no os anywhere
    g = t.gap(500)
    assert g[0, 1] == pytest.approx(1e-6)
    assert g[3, 4] == pytest.approx(500 / 100e6) and g[0, 3] == pytest.approx(500 / (10 * MBIT))


def test_top_level_hosts_with_classes(tmp_path):
    text = """\
sites:
  - {name: X, lan: {latency: 1us, bandwidth: 1GB/s}}
  - {name: Y, lan: {latency: 2us, bandwidth: 2GB/s}}
  - {name: unused, lan: {latency: 2us, bandwidth: 2GB/s}}
hosts:
  - {name: x0, site: X}
  - {name: y0, site: Y}
  - {name: x1, site: X}
wan:
  - {between: [X, Y], latency: 1ms, bandwidth: 1MB/s}
"""
    t = load_topology(write(tmp_path, text))
    assert t.rank_site() == ["X", "Y", "X"]
    assert t.bandwidth[0, 2] == 1e9 and t.bandwidth[0, 1] == 1e6 and t.latency[2, 1] == 1e-3


# --- matrix form --------------------------------------------------------------------------

MATRIX = """\
name: measured
hosts:
  - {name: n0, site: east}
  - {name: n1, site: east}
  - {name: n2, site: west}
matrix:
  latency_unit: us
  bandwidth_unit: Mbit/s
  latency:
    - [0, 10, 2ms]
    - [11, 0, 2100]
    - [1900us, 2000, null]
  bandwidth:
    - [null, 940, 80]
    - [930, null, 75]
    - [90, 1Gbit/s, null]
"""


def test_matrix_form(tmp_path):
    t = load_topology(write(tmp_path, MATRIX))
    assert t.hosts == ["n0", "n1", "n2"] and t.rank_site() == ["east", "east", "west"]
    assert t.latency[0, 1] == pytest.approx(10e-6) and t.latency[1, 0] == pytest.approx(11e-6)
    assert t.latency[0, 2] == pytest.approx(2e-3) and t.latency[2, 0] == pytest.approx(1.9e-3)
    assert t.bandwidth[0, 2] == pytest.approx(80 * MBIT) and t.bandwidth[2, 1] == 125e6
    assert np.all(np.diag(t.latency) == 0) and np.all(np.isinf(np.diag(t.bandwidth)))


def test_matrix_topology_round_trip(tmp_path):
    rng = np.random.default_rng(1)
    H = 5
    lat = rng.uniform(1e-6, 1e-2, (H, H))
    bw = rng.uniform(1e6, 1e10, (H, H))
    hosts = [f"node{i}" for i in range(H)]
    sites = ["a", "b", "a", "c", "b"]
    p = tmp_path / "m.yaml"
    write_matrix_topology(p, hosts, sites, lat, bw, name="rt", duplex="half", comment="test\nrun")
    t = load_topology(p)
    assert t.name == "rt" and not t.full_duplex and t.host_site == sites
    assert np.array_equal(off_diag(t.latency), off_diag(lat))
    assert np.array_equal(off_diag(t.bandwidth), off_diag(bw))


@pytest.mark.parametrize("name,n", [("three-site-grid", None), ("tryton-48", 7)])
def test_write_topology_round_trip(tmp_path, name, n):
    t = load_topology(TOPOS / f"{name}.yaml", n)
    p = tmp_path / "out.yaml"
    write_topology(t, p)
    u = load_topology(p)
    for f in ("latency", "bandwidth", "rank_host"):
        assert np.array_equal(getattr(t, f), getattr(u, f)), f
    assert u.hosts == t.hosts and u.host_site == t.host_site
    assert u.to_dict() == t.to_dict()


def test_to_dict_canonical():
    t = load_topology(TOPOS / "three-site-grid.yaml", 6)
    d = t.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["bandwidth"][0][0] is None and d["rank_host"] == list(range(6))
    assert t.digest() == load_topology(TOPOS / "three-site-grid.yaml", 6).digest()
    assert t.digest() != t.with_duplex(False).digest()


def test_homogeneous():
    h = homogeneous(4, latency_s=1e-5, bandwidth_Bps=1e9, full_duplex=False)
    assert h.nranks == 4 and h.source == "<homogeneous>" and not h.full_duplex
    assert np.all(off_diag(h.latency) == 1e-5) and np.all(off_diag(h.bandwidth) == 1e9)
    assert h.transfer_time(1e9)[0, 1] == pytest.approx(1 + 1e-5)
    with pytest.raises(InputError):
        homogeneous(0)


# --- random valid topologies --------------------------------------------------------------

TIME_TEXT = st.builds(lambda v, u: f"{v}{u}", st.integers(0, 5000), st.sampled_from(["us", "ms", " ns", "s"]))
BW_TEXT = st.builds(lambda v, u: f"{v} {u}", st.integers(1, 5000),
                    st.sampled_from(["Mbit/s", "Gbit/s", "MB/s", "KiB/s", "Gb/s", "Mbps"]))


@st.composite
def class_topologies(draw):
    nsites = draw(st.integers(1, 4))
    sites = [{"name": f"s{i}", "hosts": draw(st.integers(1, 4)),
              "lan": {"latency": draw(TIME_TEXT), "bandwidth": draw(BW_TEXT)}} for i in range(nsites)]
    wan = []
    lan = [(units.parse_time(s["lan"]["latency"]), units.parse_bandwidth(s["lan"]["bandwidth"]))
           for s in sites]
    for i in range(nsites):
        for j in range(i + 1, nsites):
            # a wan: class no faster than either NIC and no shorter than the two LAN halves
            # (anything else is an error that points to links:, test_wan_shape_errors)
            nic = min(lan[i][1], lan[j][1])
            w = {"between": [f"s{i}", f"s{j}"],
                 "latency": (lan[i][0] + lan[j][0]) / 2 + units.parse_time(draw(TIME_TEXT)),
                 "bandwidth": min(nic, units.parse_bandwidth(draw(BW_TEXT)))}
            if draw(st.booleans()):
                w["bandwidth_back"] = min(nic, units.parse_bandwidth(draw(BW_TEXT)))
            wan.append(w)
    doc = {"name": "rand", "duplex": draw(st.sampled_from(["half", "full"])), "sites": sites}
    if wan:
        doc["wan"] = wan
    if draw(st.booleans()):
        doc["placement"] = {"ranks_per_host": draw(st.integers(1, 3)),
                            "order": draw(st.sampled_from(["block", "cyclic"]))}
    return doc


@HYP
@given(class_topologies())
def test_random_valid_topologies_load(tmp_path, doc):
    p = tmp_path / "rand.yaml"
    p.write_text(yaml.safe_dump(doc))
    t = load_topology(p)
    H = sum(s["hosts"] for s in doc["sites"])
    k = doc.get("placement", {}).get("ranks_per_host", 1)
    assert len(t.hosts) == H and t.nranks == H * k
    assert t.full_duplex == (doc["duplex"] == "full")
    site_of = t.rank_site()
    for s in range(t.nranks):
        for r in range(t.nranks):
            if s == r:
                continue
            a, b = site_of[s], site_of[r]
            if t.rank_host[s] == t.rank_host[r]:
                assert t.bandwidth[s, r] == INTRA_HOST_BANDWIDTH
                continue
            if a == b:
                lan = doc["sites"][int(a[1:])]["lan"]
                assert t.bandwidth[s, r] == units.parse_bandwidth(lan["bandwidth"])
                assert t.latency[s, r] == units.parse_time(lan["latency"])
            else:
                w = next(w for w in doc["wan"] if set(w["between"]) == {a, b})
                fwd = w["between"][0] == a
                want = w["bandwidth"] if fwd else w.get("bandwidth_back", w["bandwidth"])
                assert t.bandwidth[s, r] == units.parse_bandwidth(want)


# Anything at all in a topology or PAP file gives a Topology / array or one InputError.
JUNK = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 50) | st.floats(allow_nan=True)
    | st.sampled_from(["50us", "1Gbit/s", "A", "B", "x", "full", "-1 ms", "", "block"]),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(
        st.sampled_from(["name", "sites", "hosts", "lan", "wan", "latency", "bandwidth", "between",
                         "matrix", "placement", "ranks_per_host", "duplex", "site", "a", "per_byte",
                         "send_overhead", "unit", "arrivals", "iterations", "bandwidth_back"]),
        kids, max_size=5),
    max_leaves=25)


@HYP
@given(JUNK, st.none() | st.integers(1, 6))
def test_junk_gives_input_error_only(tmp_path, doc, n):
    p = tmp_path / "junk.yaml"
    p.write_text(yaml.safe_dump(doc))
    for loader in (load_topology, load_pap):
        try:
            loader(p, n)
        except InputError as e:
            assert "\n" not in e.line() and "junk.yaml" in e.line()


# --- arrival patterns ---------------------------------------------------------------------

def test_pap_single(tmp_path):
    a = load_pap(write(tmp_path, "unit: ms\narrivals: [0, 1.5, 250us, 3]\n"))
    assert a.shape == (1, 4)
    assert a[0] == pytest.approx([0, 1.5e-3, 250e-6, 3e-3])
    assert load_pap(write(tmp_path, "arrivals: [0, 2]\n", "s.yaml"))[0].tolist() == [0.0, 2.0]


def test_pap_iterations(tmp_path):
    p = write(tmp_path, "unit: us\niterations:\n  - [0, 10, 20]\n  - [5, 0, 1ms]\n")
    a = load_pap(p, nranks=3)
    assert a.shape == (2, 3) and a[1, 2] == pytest.approx(1e-3) and a[0, 1] == pytest.approx(1e-5)
    with pytest.raises(InputError, match=r"iterations\[0\]: expected 4 arrival times"):
        load_pap(p, nranks=4)


@HYP
@given(st.lists(st.lists(st.floats(0, 10, allow_nan=False), min_size=3, max_size=3),
                min_size=1, max_size=4),
       st.sampled_from(["s", "ms", "us"]))
def test_pap_round_trip(tmp_path, rows, unit):
    a = np.array(rows)
    p = tmp_path / "pap.yaml"
    write_pap(p, a, unit=unit)
    b = load_pap(p, nranks=3)
    assert b.shape == a.shape
    assert np.allclose(a, b, rtol=1e-12, atol=1e-300)


def test_write_pap_1d_and_flat(tmp_path):
    p = tmp_path / "one.yaml"
    write_pap(p, [0.0, 0.001, 0.002], unit="ms")
    assert "arrivals" in yaml.safe_load(p.read_text())
    assert load_pap(p)[0] == pytest.approx([0, 1e-3, 2e-3])
    assert flat(5).shape == (5,) and not flat(5).any()
    with pytest.raises(ValueError):
        write_pap(p, [0, -1])


# --- the malformed-input corpus -------------------------------------------------------------

MANIFEST = yaml.safe_load((BAD / "expected.yaml").read_text())
LOADERS = {"topology": load_topology, "pap": load_pap}
CASES = sorted(k for k, v in MANIFEST.items() if v["kind"] in LOADERS)


def test_corpus_size():
    kinds = [MANIFEST[k]["kind"] for k in CASES]
    assert kinds.count("topology") >= 14 and kinds.count("pap") >= 6
    for rel in CASES:
        assert (BAD / rel).is_file(), rel
    listed = {str(p.relative_to(BAD)) for kind in LOADERS for p in (BAD / kind).iterdir()}
    assert listed == set(CASES), "every file in the corpus has an entry in expected.yaml"


@pytest.mark.parametrize("rel", CASES)
def test_malformed_input(rel):
    entry = MANIFEST[rel]
    with pytest.raises(InputError) as e:
        LOADERS[entry["kind"]](BAD / rel, entry.get("nranks"))
    line = e.value.line()
    assert "\n" not in line and str(e.value) == line
    assert Path(rel).name in line
    assert entry["expect"] in line, line


# --- hostile inputs at the loader level ----------------------------------------------------

from collsched.inputs import schemas  # noqa: E402
from collsched.errors import ScheduleFileError, excerpt  # noqa: E402
from collsched.inputs.topology import MAX_HOSTS, MAX_RANKS  # noqa: E402

SITE4 = "sites:\n  - {name: A, hosts: 4, lan: {latency: 50us, bandwidth: 1Gbit/s}}\n"


def one_error(loader, path, *args) -> str:
    with pytest.raises(InputError) as e:
        loader(path, *args)
    line = e.value.line()
    assert "\n" not in line and path.name in line and len(line) < 1000, line
    return line


def test_aliases_are_refused_before_expansion(tmp_path):
    bomb = ["a: &a [0, 0, 0, 0, 0, 0, 0, 0, 0, 0]"]
    bomb += [f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]" for p, c in zip("abcdefgh", "bcdefghi")]
    p = write(tmp_path, "\n".join(bomb) + "\narrivals: *i\n")  # 10^9 zeros once expanded
    assert "line 2: aliases (*a) are not allowed" in one_error(load_pap, p)
    p = write(tmp_path, "name: &n x\n" + SITE4 + "description: *n\n", "t.yaml")
    assert "line 4: aliases (*n)" in one_error(load_topology, p)
    # an anchor without an alias is harmless
    assert load_pap(write(tmp_path, "arrivals: &x [0, 1]\n", "ok.yaml")).shape == (1, 2)


def test_value_count_depth_and_duplicate_keys(tmp_path):
    p = write(tmp_path, "arrivals: [" + "0," * schemas.MAX_NODES + "0]\n")
    assert "too many values" in one_error(load_pap, p)
    deep = "arrivals: " + "[" * (schemas.MAX_DEPTH + 1) + "]" * (schemas.MAX_DEPTH + 1) + "\n"
    assert "nested too deeply" in one_error(load_pap, write(tmp_path, deep, "d.yaml"))
    p = write(tmp_path, SITE4 + "name: a\nname: b\n", "dup.yaml")
    assert "line 4: key 'name' appears twice" in one_error(load_topology, p)
    # the same key in two different mappings is fine
    p = write(tmp_path, "sites:\n  - {name: A, hosts: 2, lan: {latency: 1us, bandwidth: 1Gbit/s}}\n"
                        "  - {name: B, hosts: 2, lan: {latency: 1us, bandwidth: 1Gbit/s}}\n"
                        "wan: [{between: [A, B], latency: 1ms, bandwidth: 1Gbit/s}]\n", "two.yaml")
    assert load_topology(p).nranks == 4


def test_no_whole_value_in_messages(tmp_path):
    huge = "x" * 1_000_000
    p = write(tmp_path, f"unit: ms\narrivals: [0, '{huge}']\n")
    assert len(one_error(load_pap, p)) < 600
    p = write(tmp_path, f"name: [{', '.join(['1'] * 10000)}]\n" + SITE4, "t.yaml")
    assert "name: expected a non-empty name (a string), got a list of 10000" in one_error(load_topology, p)
    p = write(tmp_path, f"description: {'9' * 4000}\n" + SITE4, "n.yaml")
    assert "description: expected a string, got an integer of 4000 digits" in one_error(load_topology, p)
    assert excerpt("a\nb\x1b[0m" + "z" * 500, 40).startswith("a b?[0m") and len(excerpt("z" * 500, 40)) == 40
    assert len(InputError("f" * 5000, "g" * 5000, "h" * 5000).line()) < 1700


@pytest.mark.parametrize("value", [str(10 ** 400), '"1e999999999 s"', "1e999999999", ".nan", "-.inf",
                                   "-1", "1e308", "0x" + "f" * 500])
def test_numeric_extremes(tmp_path, value):
    p = write(tmp_path, f"arrivals: [0, {value}]\n")
    assert "arrivals[1]: " in one_error(load_pap, p)
    p = write(tmp_path, f"sites:\n  - {{name: A, hosts: 4, lan: {{latency: {value}, bandwidth: 1Gbit/s}}}}\n",
              "t.yaml")
    assert "sites[0].lan.latency: " in one_error(load_topology, p)
    p = write(tmp_path, f"sites:\n  - {{name: A, hosts: 4, lan: {{latency: 1us, bandwidth: {value}}}}}\n",
              "b.yaml")
    assert "sites[0].lan.bandwidth:" in one_error(load_topology, p)


def test_bandwidth_and_time_ranges(tmp_path):
    for bw in ("1e-320", "0.1", "9Pbit/s" if False else "2e15"):
        p = write(tmp_path, f"sites:\n  - {{name: A, hosts: 2, lan: {{latency: 1us, bandwidth: {bw}}}}}\n")
        assert "expected a positive bandwidth, 1bit/s to 8Pbit/s" in one_error(load_topology, p)
    p = write(tmp_path, "sites:\n  - {name: A, hosts: 2, lan: {latency: 1e-320, bandwidth: 1bit/s}}\n")
    assert load_topology(p).bandwidth[0, 1] == 0.125
    p = write(tmp_path, "arrivals: [0, 1000001]\n", "p.yaml")
    assert "at most 1e+06 s" in one_error(load_pap, p)


def test_host_and_rank_bounds(tmp_path):
    """hosts: 50000 with --ranks 4 allocated 18.6 GiB of host matrices."""
    p = write(tmp_path, SITE4.replace("hosts: 4", "hosts: 50000"))
    assert f"at most {MAX_HOSTS} hosts" in one_error(load_topology, p, 4)
    names_ = ", ".join(f"h{i}" for i in range(MAX_HOSTS + 1))
    p = write(tmp_path, f"sites:\n  - {{name: A, hosts: [{names_}], lan: {{latency: 1us, bandwidth: 1Gbit/s}}}}\n",
              "l.yaml")
    assert f"at most {MAX_HOSTS} hosts" in one_error(load_topology, p)
    p = write(tmp_path, SITE4 + f"placement: {{ranks_per_host: {10 ** 30}}}\n", "r.yaml")
    assert f"placement.ranks_per_host: places" in one_error(load_topology, p)
    assert load_topology(p, 4).nranks == 4  # an explicit rank count needs only 4
    with pytest.raises(InputError, match=f"expected 1 to {MAX_RANKS} ranks"):
        load_topology(p, MAX_RANKS + 1)
    with pytest.raises(InputError, match=f"expected 1 to {MAX_RANKS} ranks"):
        homogeneous(MAX_RANKS + 1)


def test_hosts_given_as_a_whole_float(tmp_path):
    """hosts: 4.0 passes the schema (JSON integers include 4.0); it was a TypeError."""
    t = load_topology(write(tmp_path, SITE4.replace("hosts: 4", "hosts: 4.0")))
    assert t.hosts == ["A-0", "A-1", "A-2", "A-3"]


def test_encodings(tmp_path):
    p = tmp_path / "bom.yaml"
    p.write_bytes(b"\xef\xbb\xbf" + SITE4.encode())
    assert load_topology(p).nranks == 4
    p.write_bytes("arrivals: [0, 1]\n".encode("utf-16"))
    assert "found UTF-16" in one_error(load_pap, p)
    p.write_bytes(b"arrivals: [0, 1]\nname: \xff\n")
    assert "line 2: expected UTF-8 text, found byte 0xff" in one_error(load_pap, p)
    p.write_bytes(b"arrivals: [0, 1]\nname: a\x00\n")
    assert "line 2: expected text, found a NUL byte" in one_error(load_pap, p)


def test_special_files_as_inputs(tmp_path):
    import os
    os.mkfifo(tmp_path / "fifo")
    for loader in (load_topology, load_pap):
        assert "found a FIFO" in one_error(loader, tmp_path / "fifo")
        assert "found a directory" in one_error(loader, tmp_path)
    from collsched import schedfile
    with pytest.raises(ScheduleFileError, match="expected a regular schedule file, found a FIFO"):
        schedfile.read(tmp_path / "fifo")
    with pytest.raises(ScheduleFileError, match="character device"):
        schedfile.read("/dev/zero")


def _line_by_compose(text, parts):
    """The reference: the line of a path found on the composed node tree."""
    node, line = yaml.compose(text, Loader=schemas._SafeLoader), None
    for p in parts:
        nxt = None
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if k.value == p:
                    nxt, line = v, k.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode) and isinstance(p, int) and 0 <= p < len(node.value):
            nxt = node.value[p]
            line = nxt.start_mark.line + 1
        if nxt is None:
            return None
        node = nxt
    return line


def _paths(data, prefix=()):
    yield list(prefix)
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _paths(v, prefix + (k,))
        yield list(prefix) + ["no-such-key"]
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _paths(v, prefix + (i,))
        yield list(prefix) + [len(data)]


@pytest.mark.parametrize("path", sorted(TOPOS.glob("*.yaml")) + sorted((BAD / "topology").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_line_of_walks_events_as_the_tree_says(path):
    """Doc.line_of walks parser events (fast on a million values); it finds the same line
    as a walk of the composed tree, for every path in the file and some that are not."""
    try:
        doc = schemas.parse_yaml(path)
    except InputError:
        return
    for parts in _paths(doc.data):
        want = _line_by_compose(doc.text, parts) if parts else None
        assert doc.line_of(parts) == want, parts


def test_a_late_error_in_a_large_file_is_fast(tmp_path):
    import time
    n = schemas.MAX_NODES - 10
    p = write(tmp_path, "arrivals: [" + "0, " * (n - 1) + "-1]\n")
    t0 = time.process_time()  # CPU seconds: a loaded machine does not make it fail
    assert f"arrivals[{n - 1}]: expected a non-negative" in one_error(load_pap, p)
    assert time.process_time() - t0 < 5
