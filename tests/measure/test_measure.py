"""`collsched measure`: the measured topology recovers the topology SimGrid simulated (CM02,
so that times are closed-form), the real-MPI run gives a file the compiler accepts, and bad
inputs or failed runs give one line and exit status 2 or 3 without touching the output.

Tolerances (SMPI, CM02): bandwidth within 0.1% of the topology's one-flow bandwidth
(b capped by the TCP window, Topology.flow_bandwidth); latency within 1% + 2 us. SMPI
charges every message about 16 bytes more than its payload, which shows up in the latency
as 16 B / b per direction: 1.6 us on a 10 MB/s LAN, 0.1 ms on a 1.4 Mbit/s WAN link.

Size-dependent costs (the fit sweep, docs/measure.md): under SimGrid's SMPI network model
the written topology's L * lf(m) + m / (b * bf(m)) is within 3% of SimGrid's own one-message
time (route latency x smpi/lat-factor(m) + m / (min(link bw, TCP-gamma / 2L) x
smpi/bw-factor(m))) at sizes inside every segment, and the breakpoints are within one sweep
step of SimGrid's thresholds; under CM02 there is one segment with factors 1.
"""
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from collsched.lab import measure as measure_mod
from collsched.cli import main
from collsched.lab.measure import MeasureConfig, fit_linear, group_sites, measure
from collsched.inputs.msgcosts import SIMGRID_SMPI
from collsched.inputs.topology import load_topology

ROOT = Path(__file__).resolve().parents[2]
TOPO = ROOT / "topologies"
BW_RTOL = 1e-3
LAT_RTOL, LAT_ATOL = 0.01, 2e-6

HOMOGENEOUS = """name: small-cluster
sites:
  - {name: C, hosts: 3, lan: {latency: 50us, bandwidth: 1Gbit/s}}
intra_host: {latency: 2us, bandwidth: 5GB/s}
placement: {ranks_per_host: 2}
"""
# A long fat WAN: one flow is capped by the TCP window at 4 MiB / (2 x 20 ms) = 105 MB/s.
TWO_SITES_WINDOW = """name: two-sites-window
tcp_window: 4MiB
sites:
  - {name: A, hosts: 3, lan: {latency: 5us, bandwidth: 10Gbit/s}}
  - {name: B, hosts: 2, lan: {latency: 8us, bandwidth: 10Gbit/s}}
wan:
  - {between: [A, B], latency: 20ms, bandwidth: 10Gbit/s}
"""


def _need(launcher: str, backend: str) -> None:
    if shutil.which(launcher) is None:
        pytest.skip(f"{launcher} is not installed")
    if not measure_mod.program_path(backend).exists():
        subprocess.run(["make", "-s", "measure"], cwd=ROOT, check=True, capture_output=True)


@pytest.fixture
def smpi():
    _need("smpirun", "smpi")


@pytest.fixture
def mpi():
    _need("mpirun", "mpi")


def _partition(labels):
    groups = {}
    for i, s in enumerate(labels):
        groups.setdefault(s, set()).add(i)
    return sorted(map(sorted, groups.values()))


def _check_recovers(topology_path, ranks, tmp_path, **options):
    truth = load_topology(topology_path, ranks)
    out = tmp_path / "measured.yaml"
    report = measure(MeasureConfig(backend="smpi", ranks=ranks, platform_from=str(topology_path),
                                   repeats=3, **options), out)
    got = load_topology(out)  # every command reads the file through load_topology
    assert got.nranks == ranks
    off = ~np.eye(ranks, dtype=bool)
    want_bw = truth.flow_bandwidth()
    # one flow's bandwidth: the matrix form's measured one; the links form's link capacity
    # capped by its measured TCP window
    np.testing.assert_allclose(got.flow_bandwidth()[off], want_bw[off], rtol=BW_RTOL)
    lat_err = np.abs(got.latency - truth.latency)[off]
    assert np.all(lat_err <= LAT_RTOL * truth.latency[off] + LAT_ATOL), lat_err.max()
    assert _partition(got.rank_site()) == _partition(truth.rank_site())
    # ranks that share a host in the topology share one in the measurement, and only they
    assert _partition(got.rank_host) == _partition(truth.rank_host)
    return report, got, truth


@pytest.mark.smpi
def test_smpi_recovers_three_site_grid(smpi, tmp_path):
    report, got, truth = _check_recovers(TOPO / "three-site-grid.yaml", 20, tmp_path)
    assert len(report["sites"]) == 3
    assert report["pairs_measured"] == 20 * 19  # one rank per host: every direction swept
    # the asymmetric WAN (UT -> UK 1.44 Mbit/s, back 1.28 Mbit/s) comes out per direction
    assert got.bandwidth[0, 8] == pytest.approx(1.44e6 / 8, rel=BW_RTOL)
    assert got.bandwidth[8, 0] == pytest.approx(1.28e6 / 8, rel=BW_RTOL)


@pytest.mark.smpi
def test_smpi_recovers_small_homogeneous_cluster_with_intra_host_class(smpi, tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(HOMOGENEOUS)
    report, got, truth = _check_recovers(path, 5, tmp_path)  # odd P: byes in the tournament
    assert list(report["sites"]) == ["site0"]
    intra = report["intra_host"]
    assert intra["bandwidth_Bps"] == pytest.approx(5e9, rel=BW_RTOL)
    assert abs(intra["latency_s"] - 2e-6) <= LAT_RTOL * 2e-6 + LAT_ATOL
    # one rank pair per host pair (+ one inside each host with two ranks), both directions
    assert report["pairs_measured"] == 2 * (3 + 2)


@pytest.mark.smpi
def test_smpi_window_capped_wan_and_all_pairs(smpi, tmp_path):
    path = tmp_path / "two.yaml"
    path.write_text(TWO_SITES_WINDOW)
    report, got, truth = _check_recovers(path, 5, tmp_path, all_pairs=True, gap_burst=0,
                                         fit_sizes=None)
    assert got.flow_bandwidth()[0, 3] == pytest.approx(4 * 2**20 / 0.04, rel=BW_RTOL)
    assert report["pairs_measured"] == 5 * 4
    assert report["gap"] is None
    # --sweep off: constant costs, as before the fit sweep
    assert got.message_costs is None and report["size_costs"] == {} and report["rounds"]["fit"] == 0


@pytest.mark.smpi
def test_smpi_measuring_a_measured_topology_gives_it_back(smpi, tmp_path):
    first = tmp_path / "first.yaml"
    measure(MeasureConfig(backend="smpi", ranks=20, platform_from=str(TOPO / "three-site-grid.yaml"),
                          repeats=3, gap_burst=0), first)
    _check_recovers(first, 20, tmp_path)


@pytest.mark.mpi
def test_real_mpi_topology_is_accepted_by_compile(mpi, tmp_path, capsys):
    out = tmp_path / "local.yaml"
    rc = main(["measure", "--backend", "mpi", "--ranks", "4", "--sizes", "1,1KiB,64KiB,1MiB",
               "--repeats", "3", "--overheads", "-o", str(out), "--json"])
    assert rc == 0, capsys.readouterr().err
    topo = load_topology(out)
    assert topo.nranks == 4 and topo.os_a is not None
    assert np.all(topo.bandwidth[~np.eye(4, dtype=bool)] > 0)
    # the fit sweep: one host here, so the intra-host class, as a table of positive factors
    assert "intra_host" in topo.message_costs.to_dict()
    t = topo.transfer_time(64 * 1024)
    assert np.all(np.isfinite(t)) and np.all(t[~np.eye(4, dtype=bool)] > 0)
    sched = tmp_path / "ring.sched"
    proc = subprocess.run([sys.executable, "-m", "collsched", "compile", "--algorithm", "ring",
                           "--topology", str(out), "--ranks", "4", "--bytes", "64KiB", "-o", str(sched)],
                          capture_output=True, text=True, cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT / "compiler"), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert sched.exists()


BAD = [
    (["--backend", "smpi", "--ranks", "4"], "--platform-from"),
    (["--backend", "mpi", "--ranks", "1"], "--ranks"),
    (["--backend", "mpi", "--ranks", "4", "--sizes", "1024"], "--sizes"),
    (["--backend", "mpi", "--ranks", "4", "--sizes", "1,2 parsecs"], "--sizes"),
    (["--backend", "mpi", "--ranks", "4", "--gap-burst", "1"], "--gap-burst"),
    (["--backend", "mpi", "--ranks", "4", "--platform-from", "x.yaml"], "--platform-from"),
    (["--backend", "smpi", "--ranks", "4", "--platform-from", "no-such.yaml"], "no-such.yaml"),
    (["--backend", "smpi", "--ranks", "30", "--platform-from", str(TOPO / "three-site-grid.yaml")],
     "placement"),
    (["--backend", "tcp", "--ranks", "4"], "--backend"),
    (["--backend", "mpi", "--ranks", "4", "--sweep", "4MiB:1"], "--sweep"),
    (["--backend", "mpi", "--ranks", "4", "--sweep", "1-4MiB"], "--sweep"),
    (["--backend", "mpi", "--ranks", "4", "--per-octave", "0"], "--per-octave"),
    (["--backend", "mpi", "--ranks", "4", "--per-octave", "64", "--sweep", "1:1GiB"], "--sweep"),
    (["--backend", "mpi", "--ranks", "4", "--sweep-budget", "0"], "--sweep-budget"),
    (["--backend", "mpi", "--ranks", "4", "--refine", "-1"], "--refine"),
    # --platform FILE.xml --hostfile FILE (smpi), and the wrong file to the wrong option
    (["--backend", "smpi", "--ranks", "4", "--platform", str(TOPO / "wan-3x16.yaml"), "--hostfile", "h"],
     "--platform-from"),
    (["--backend", "smpi", "--ranks", "4", "--platform-from", str(TOPO / "four-site.xml")], "--platform FILE.xml"),
    (["--backend", "smpi", "--ranks", "4", "--platform", str(TOPO / "four-site.xml")], "--hostfile"),
    (["--backend", "smpi", "--ranks", "4", "--platform-from", str(TOPO / "wan-3x16.yaml"), "--hostfile",
      str(TOPO / "four-site.hosts")], "--hostfile"),
    (["--backend", "smpi", "--ranks", "4", "--platform", str(TOPO / "four-site.xml"), "--hostfile",
      str(TOPO / "no-such.hosts")], "no-such.hosts"),
    (["--backend", "smpi", "--ranks", "4", "--platform", str(TOPO / "four-site.xml"), "--platform-from",
      str(TOPO / "wan-3x16.yaml"), "--hostfile", str(TOPO / "four-site.hosts")], "not both"),
    (["--backend", "mpi", "--ranks", "4", "--platform", "x.xml"], "--platform"),
    (["--backend", "mpi", "--ranks", "4", "--capacity", "off", "--form", "links"], "--form"),
]


@pytest.mark.parametrize("args, mention", BAD)
def test_bad_input_one_line_exit_2(args, mention, tmp_path, capsys):
    out = tmp_path / "out.yaml"
    assert main(["measure", *args, "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("collsched: error:") and mention in err
    assert not out.exists()


def test_output_directory_must_exist(tmp_path, capsys):
    out = tmp_path / "missing" / "out.yaml"
    assert main(["measure", "--backend", "mpi", "--ranks", "2", "-o", str(out)]) == 2
    assert "existing directory" in capsys.readouterr().err


def test_failed_run_exit_3_keeps_old_output(tmp_path, capsys, monkeypatch):
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun is not installed")
    fake = tmp_path / "build" / "bin" / "collsched-measure"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\necho 'boom: no network' >&2\nexit 1\n")
    fake.chmod(0o755)
    shutil.copy(fake, fake.parent / "collsched-flows")
    monkeypatch.setenv("COLLSCHED_BUILD", str(tmp_path / "build"))
    out = tmp_path / "out.yaml"
    out.write_text("old\n")
    assert main(["measure", "--backend", "mpi", "--ranks", "2", "-o", str(out)]) == 3
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "failed" in err
    assert out.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_run_that_hangs_is_stopped(tmp_path, monkeypatch):
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun is not installed")
    fake = tmp_path / "build" / "bin" / "collsched-measure"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\nsleep 60\n")
    fake.chmod(0o755)
    shutil.copy(fake, fake.parent / "collsched-flows")
    monkeypatch.setenv("COLLSCHED_BUILD", str(tmp_path / "build"))
    with pytest.raises(measure_mod.MeasureRunError, match="did not finish"):
        measure_mod.run_program(MeasureConfig(backend="mpi", ranks=2, timeout_s=1))


# --- the fit and the grouping, without MPI ------------------------------------------------

def test_fit_recovers_line_and_drops_an_outlier():
    sizes = np.array([1, 1024, 16384, 131072, 1048576], float)
    times = 2 * 50e-6 + sizes / 125e6
    assert fit_linear(sizes, times) == pytest.approx((100e-6, 1 / 125e6), rel=1e-9)
    noisy = times.copy()
    noisy[2] *= 3  # one disturbed size
    a, per_byte = fit_linear(sizes, noisy)
    assert a == pytest.approx(100e-6, rel=1e-3) and per_byte == pytest.approx(1 / 125e6, rel=1e-3)


def test_group_sites_rules():
    us, ms = 1e-6, 1e-3
    # two LANs (6 us and 60 us) 50 ms apart, and a lone host 80 ms from everyone
    lat = np.full((6, 6), 50 * ms)
    lat[np.ix_([0, 1, 2], [0, 1, 2])] = 60 * us
    lat[np.ix_([3, 4], [3, 4])] = 6 * us
    lat[5, :] = lat[:, 5] = 80 * ms
    np.fill_diagonal(lat, np.nan)
    assert group_sites(lat, 4.0) == [0, 0, 0, 1, 1, 2]
    # racks 2x apart stay one site with factor 4, split with factor 1.5
    racks = np.full((4, 4), 20 * us)
    racks[0, 1] = racks[1, 0] = racks[2, 3] = racks[3, 2] = 10 * us
    np.fill_diagonal(racks, np.nan)
    assert group_sites(racks, 4.0) == [0, 0, 0, 0]
    assert group_sites(racks, 1.5) == [0, 0, 1, 1]


# --- size-dependent costs under SimGrid's SMPI network model ----------------------------------

# Two sites: A has two hosts (a LAN class), B one; two ranks per host (the intra-host class);
# a 10 Gbit/s wide-area link (5 ms host to host): A -> B is limited by A's 1 Gbit/s NICs,
# B -> A by the TCP window (4 MiB / 2 x 5 ms = 419 MB/s).
SMPI_SITES = """name: smpi-sites
tcp_window: 4MiB
sites:
  - {name: A, hosts: 2, lan: {latency: 20us, bandwidth: 1Gbit/s}}
  - {name: B, hosts: 1, lan: {latency: 20us, bandwidth: 10Gbit/s}}
links:
  - {name: ab, between: [A, B], latency: 4.98ms, bandwidth: 10Gbit/s}
intra_host: {latency: 1us, bandwidth: 10GB/s}
placement: {ranks_per_host: 2}
"""
SIMGRID_THRESHOLDS = (257, 732, 1426, 3484, 5776, 9376, 15424, 65472)
# inside every segment of SimGrid's table (away from its thresholds), and beyond
PROBE_SIZES = (1, 100, 420, 1000, 2200, 4500, 7400, 12000, 30000, 200000, 1 << 20, 4 << 20)
# (src, dst) ranks of each class in SMPI_SITES: intra-host, A's LAN, A -> B, B -> A
CLASS_PAIRS = {"intra_host": (0, 1), "lan:site0": (0, 2), "wan:site0:site1": (0, 4),
               "wan:site1:site0": (4, 0)}


def _measure_sizes(tmp_path, model):
    path = tmp_path / "sites.yaml"
    path.write_text(SMPI_SITES)
    out = tmp_path / f"measured-{model}.yaml"
    report = measure(MeasureConfig(backend="smpi", ranks=6, platform_from=str(path), repeats=3,
                                   gap_burst=0, network_model=model), out)
    return report, load_topology(out), load_topology(path, 6)


@pytest.mark.smpi
def test_smpi_model_size_dependent_costs_recovered(smpi, tmp_path):
    report, got, truth = _measure_sizes(tmp_path, "SMPI")
    assert set(report["size_costs"]) == set(CLASS_PAIRS)
    want_bw = truth.flow_bandwidth()
    for cls, (i, j) in CLASS_PAIRS.items():
        for m in PROBE_SIZES:
            lf, bf = SIMGRID_SMPI.at(m)
            simgrid = truth.latency[i, j] * lf + m / (want_bw[i, j] * bf)
            assert got.transfer_time(m)[i, j] == pytest.approx(simgrid, rel=0.03), (cls, m)
        # every SimGrid threshold t (sizes > t) has a breakpoint within one sweep step
        found = report["size_costs"][cls]["breakpoints"]
        assert len(found) == len(SIMGRID_THRESHOLDS), (cls, found)
        for f, t in zip(found, SIMGRID_THRESHOLDS):
            assert abs(math.log2(f / (t + 1))) <= 1 / 8, (cls, f, t)
            # after the bisection runs, within 0.5% of where SMPI switches: it compares t with
            # the payload + 16 bytes, so the new factor applies from t - 15 bytes of payload
            assert abs(f / (t - 15) - 1) <= 0.005, (cls, f, t)
    assert report["refine_runs"] == 4


@pytest.mark.smpi
def test_cm02_size_costs_are_one_segment_of_factors_one(smpi, tmp_path):
    report, got, truth = _measure_sizes(tmp_path, "CM02")
    for cls in ("lan:site0", "wan:site0:site1", "wan:site1:site0"):
        table = report["size_costs"][cls]["table"]
        assert len(table) == 1, (cls, table)
        assert table[0]["latency_factor"] == pytest.approx(1, rel=0.01)
        assert table[0]["bandwidth_factor"] == pytest.approx(1, rel=0.01)
    # intra-host: a 10 ns latency step of SMPI's own at 64 KiB (detached sends below?); ~1 all the same
    for seg in report["size_costs"]["intra_host"]["table"]:
        assert seg["latency_factor"] == pytest.approx(1, rel=0.02)
        assert seg["bandwidth_factor"] == pytest.approx(1, rel=0.02)
