"""The bundled multi-site platforms and the `platforms` suite (issue 21; lab/platforms.py,
docs/platforms.md).

Fast: the hand-written SimGrid XML of each bundled platform and its topology YAML describe
the same network (sites, hosts, NICs, TCP window, per site pair the route's latency and
capacities, which site pairs share which resource), read with xml.etree; a changed XML is
caught; the fluid expectation the SimGrid check uses. Under SMPI (skipped without smpirun
and the programs): SimGrid on the XML runs the YAML's formulas, and the suite's small case
(tests/data/platforms/mini-hub: measure, compare, three algorithms, one size) has the
report's structure and right data.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from collsched import runtime_build
from collsched.errors import InputError
from collsched.lab.simgrid_platform import load_platform
from collsched.inputs.topology import load_topology
from collsched.lab import platforms, platforms_check, platforms_xml

ROOT = Path(__file__).resolve().parents[2]
TOPOS = ROOT / "topologies"
DATA = ROOT / "tests" / "data" / "platforms"
BUNDLED = [("four-site", 48), ("hub-3site", 36)]
GBIT = 1e9 / 8


def _files(name, d=TOPOS):
    return d / f"{name}.yaml", d / f"{name}.xml", d / f"{name}.hosts"


@pytest.mark.parametrize("name,ranks", BUNDLED + [("mini-hub", 8)])
def test_xml_and_yaml_describe_the_same_network(name, ranks):
    y, x, h = _files(name, DATA if name == "mini-hub" else TOPOS)
    topo = load_topology(y)
    assert topo.nranks == ranks
    assert platforms_check.compare_files(x, h, topo) == []
    plat = platforms_xml.read_platform(x)
    assert sorted(plat.host_site()) == sorted(topo.hosts)
    assert load_platform(str(x), str(h)).hosts == [topo.hosts[int(r)] for r in topo.rank_host]
    assert plat.tcp_gamma == topo.tcp_window == 4 << 20


def test_four_site_has_what_the_issue_asks_for():
    plat = platforms_xml.read_platform(TOPOS / "four-site.xml")
    sizes = sorted(len(s.hosts) for s in plat.sites.values())
    assert sum(sizes) == 48 and len(sizes) == 4 and len(set(sizes)) > 1
    assert {s.nic_bandwidth / GBIT for s in plat.sites.values()} == {10, 25}
    wan = plat.links.values()
    assert min(lk.bandwidth for lk in wan) / GBIT == 2.5 and max(lk.bandwidth for lk in wan) / GBIT == 100
    assert min(lk.latency for lk in wan) == pytest.approx(5e-3) and max(lk.latency for lk in wan) == pytest.approx(0.11)
    users = plat.users()
    # a link shared by both directions: one resource crossed a -> b and b -> a
    assert any(plat.links[r.rstrip("<>")].sharing == "SHARED" and any((b, a) in p for a, b in p)
               for r, p in users.items())
    # several sites behind one link: one resource crossed from two source sites to one site
    assert any(len({a for a, _ in p if _ == dst}) >= 2 for p in users.values() for dst in plat.sites)
    assert any(len(hops) > 1 for hops in plat.routes.values())


def test_hub_3site_is_a_star_of_shared_uplinks():
    plat = platforms_xml.read_platform(TOPOS / "hub-3site.xml")
    assert all(lk.sharing == "SHARED" for lk in plat.links.values())
    assert all(len(hops) == 2 for hops in plat.routes.values()) and len(plat.routes) == 6
    for r, pairs in plat.users().items():  # every uplink carries two site pairs, both ways
        assert len(pairs) == 4, r


@pytest.mark.parametrize("edit,expect", [
    ('id="atlantic" bandwidth="10Gbps"', 'id="atlantic" bandwidth="20Gbps"'),
    ('id="atlantic" bandwidth="10Gbps" latency="45ms" sharing_policy="SHARED"',
     'id="atlantic" bandwidth="10Gbps" latency="45ms" sharing_policy="SPLITDUPLEX"'),
    ('latency="110ms"', 'latency="100ms"'),
    ('radical="0-7"', 'radical="0-6"'),
    ('bw="10Gbps" lat="5us" sharing_policy="SPLITDUPLEX" router_id="tokyo-gw"',
     'bw="25Gbps" lat="5us" sharing_policy="SPLITDUPLEX" router_id="tokyo-gw"'),
])
def test_a_changed_xml_is_caught(tmp_path, edit, expect):
    text = (TOPOS / "four-site.xml").read_text()
    assert edit in text
    bad = tmp_path / "bad.xml"
    bad.write_text(text.replace(edit, expect, 1))
    topo = load_topology(TOPOS / "four-site.yaml")
    if expect.startswith('id="atlantic"') and "SPLITDUPLEX" in expect:  # routes must say UP or DOWN
        with pytest.raises(InputError, match="direction UP or DOWN"):
            platforms_check.compare_files(bad, TOPOS / "four-site.hosts", topo)
        return
    if expect == 'radical="0-6"':  # the host file names a host the platform no longer has
        with pytest.raises(InputError, match="declares no host"):
            platforms_check.compare_files(bad, TOPOS / "four-site.hosts", topo)
        return
    assert platforms_check.compare_files(bad, TOPOS / "four-site.hosts", topo) != []


def test_split_direction_swapped_is_caught(tmp_path):
    text = (TOPOS / "four-site.xml").read_text()
    swapped = text.replace('<link_ctn id="pacific-east"/>', '<link_ctn id="pacific-tmp"/>') \
                  .replace('<link_ctn id="pacific-west"/>', '<link_ctn id="pacific-east"/>') \
                  .replace('<link_ctn id="pacific-tmp"/>', '<link_ctn id="pacific-west"/>')
    bad = tmp_path / "bad.xml"
    bad.write_text(swapped)
    diffs = platforms_check.compare_files(bad, TOPOS / "four-site.hosts", load_topology(TOPOS / "four-site.yaml"))
    assert any("chicago -> tokyo" in d for d in diffs)


def test_expected_flows_share_by_rtt():
    """Two flows alone on a link: each its window; enough of them: the link, split by 1 / L."""
    topo = load_topology(DATA / "mini-hub.yaml")
    # a -> b (15 ms) alone: latency + bytes at the window's rate
    [t] = platforms_check.expect_flows(topo, [(0, 3, 1 << 20, 1)])
    assert t == pytest.approx(platforms_check.expect_single(topo, 0, 3, 1 << 20), rel=1e-9)
    # 40 messages a -> c and 40 b -> c: c-up (2.5 Gbit/s) shared, rates in proportion 1 / L
    flows = [(0, 6, 8 << 20, 40), (3, 7, 8 << 20, 40)]
    ta, tb = platforms_check.expect_flows(topo, flows)
    assert tb > ta  # b -> c has the longer round trip: the smaller share
    total = 2 * 40 * (8 << 20)
    assert total / max(ta, tb) == pytest.approx(2.5 * GBIT, rel=0.05)


def _have_smpi(program="collsched-minibench"):
    return shutil.which("smpirun") is not None and runtime_build.program("smpi", program).exists()


@pytest.mark.skipif(not _have_smpi("collsched-flows"), reason="needs smpirun and collsched-flows (make measure)")
def test_simgrid_runs_the_yaml_formulas():
    y, x, h = _files("four-site")
    topo = load_topology(y)
    pairs = [(0, 1), (0, 16), (16, 0), (0, 28), (28, 0), (0, 40), (40, 0), (28, 40), (40, 28), (20, 44)]
    out = platforms_check.check_smpi(x, h, topo, runtime_build.program("smpi", "collsched-flows"), pairs=pairs)
    assert out["single_max_error"] < platforms.CHECK_TOLERANCE  # SMPI adds ~15 ns to 10 us
    assert {f["resource"] for f in out["fill"]} == {"rhine>", "rhine<", "atlantic", "pacific>", "pacific<", "eurasia"}
    assert out["fill_max_error"] < platforms.FILL_TOLERANCE
    atlantic = next(f for f in out["fill"] if f["resource"] == "atlantic")
    assert atlantic["aggregate_Bps"] == pytest.approx(10 * GBIT, rel=0.05)  # filled, both directions together


@pytest.mark.skipif(not (_have_smpi() and _have_smpi("collsched-flows") and _have_smpi("collsched-measure")),
                    reason="needs smpirun and the SMPI programs (make lab measure)")
def test_the_suite_small_case(tmp_path):
    y, x, h = _files("mini-hub", DATA)
    b = platforms.Bundle("mini-hub", y, x, h)
    report, text = platforms.run_platforms_suite([b], sizes=[64 << 10], names=["min3", "ring", "native"],
                                                 workdir=tmp_path)
    assert report["suite"] == "platforms" and report["sizes"] == [64 << 10]
    [p] = report["platforms"]
    assert p["platform"] == "mini-hub" and p["ranks"] == 8 and p["sites"] == 3
    assert p["file_differences"] == []
    assert p["smpi_check"]["single_max_error"] < platforms.CHECK_TOLERANCE and p["smpi_check"]["fill_max_error"] < platforms.FILL_TOLERANCE
    assert p["measure"]["wall_s"] > 0 and "links:" in p["measured_topology"]
    c = p["comparison"]
    assert c["site_grouping_exact"] and c["pairs_met"] and c["capacities_met"], c
    assert c["bottleneck_grouping_exact"]
    [case] = p["cases"]
    rows = {r["algorithm"]: r for r in case["results"]}
    assert set(rows) == {"min3", "ring", "native"}
    assert all(r["data_ok"] for r in rows.values()) and case["min3_true"]["data_ok"]
    t = case["targets"]
    assert t["min3_ratio"] == pytest.approx(rows["min3"]["avg_elapsed_s"] / case["min3_true"]["avg_elapsed_s"])
    assert t["bound_s"] == case["bound"]["avg_elapsed_s"] > 0
    assert t["bound_met"] == (t["bound_s"] <= min(r["avg_elapsed_s"] for r in rows.values()) * (1 + 1e-9))
    assert t["dag_ratio"] == pytest.approx(rows["min3"]["predicted_avg_elapsed_s"] / rows["min3"]["avg_elapsed_s"])
    assert t["min3_fastest"] == (rows["min3"]["avg_elapsed_s"] < min(rows["ring"]["avg_elapsed_s"],
                                                                     rows["native"]["avg_elapsed_s"]))
    assert set(report["summary"]) >= {"data_ok", "pairs_met", "capacities_met", "min3_ratio_met", "bound_met",
                                      "dag_met", "fluid_met", "min3_fastest", "files_agree", "smpi_check_ok"}
    assert "mini-hub" in text and "min3 (true description)" in text
    doc = tmp_path / "benchmarks.md"
    platforms.write_doc(report, doc, tmp_path / "img.png")
    page = doc.read_text()
    assert "<!-- BEGIN lab-platforms -->" in page and "![platforms suite](img.png)" in page
    assert (tmp_path / "img.png").stat().st_size > 1000
    # combine: two runs' reports in one
    both = platforms.combine([report, report])
    assert len(both["platforms"]) == 2 and both["summary"]["data_ok"] == report["summary"]["data_ok"]
    assert np.isfinite(t["bound_over_fastest"])


def _row(name, t, dag=None, fluid=None, ok=True):
    r = {"algorithm": name, "avg_elapsed_s": t, "data_ok": ok}
    if dag is not None:
        r["predicted_avg_elapsed_s"] = dag
    if fluid is not None:
        r["fluid_avg_elapsed_s"] = fluid
    return r


def test_case_targets_from_rows():
    case = {"results": [_row("min3", 1.0, dag=0.8, fluid=1.1), _row("ring", 2.0), _row("native", 1.5),
                        {"algorithm": "rd", "refused": "--algorithm: rd: needs a power of two"}],
            "min3_true": _row("min3", 0.95), "bound": {"avg_elapsed_s": 0.5, "method": "lp"}}
    t = platforms.case_targets(case)
    assert t["data_ok"] and t["failed"] == [] and t["refused"] == ["rd"]
    assert t["min3_ratio"] == pytest.approx(1.0 / 0.95) and t["min3_ratio_met"]
    assert t["bound_met"] and t["bound_over_fastest"] == pytest.approx(0.5 / 0.95)
    assert t["dag_ratio"] == pytest.approx(0.8) and not t["dag_met"]
    assert t["fluid_ratio"] == pytest.approx(1.1) and t["fluid_met"]
    assert t["min3_fastest"] and t["best_other"] == "native" and t["speedup_over_best_other"] == pytest.approx(1.5)
    # a run below the bound, a faster algorithm, wrong data
    case["bound"]["avg_elapsed_s"] = 1.2
    case["results"][2] = _row("native", 0.9)
    case["results"][1] = _row("ring", 2.0, ok=False)
    t = platforms.case_targets(case)
    assert not t["bound_met"] and not t["min3_fastest"] and not t["data_ok"] and t["failed"] == ["ring"]
