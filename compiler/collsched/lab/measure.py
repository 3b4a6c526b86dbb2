"""`collsched measure`: measure latency, bandwidth, os(m) and g(m) between MPI ranks and
write a topology file (measured-matrix form) that every other command reads.

runtime/measure/collsched_measure.c measures (docs/measure.md); this module launches it
under real MPI (launch.py) or SimGrid SMPI (on a platform from a topology, to check a
measurement against it), then

* fits every measured direction src -> dst: time(m) = c + m / b over the message sizes,
  by least squares on relative errors (small sizes fix c, large ones b), dropping outliers;
  the latency is half the intercept, L = c / 2, because each timed message is answered by
  an empty one (one-way latency needs synchronised clocks; it is taken as symmetric);
* groups ranks into hosts by processor name, and hosts into sites: two hosts are one site
  when their latency is at most `site_factor` x the smaller of their latencies to their
  nearest other host (closed transitively); measures the reduction cost (lab/gamma.py);
* fits the size-dependent costs from the program's dense fit sweep (one pair per link
  class, sizes log-spaced): piecewise lines by size (sizefit.py), written as message_costs
  tables relative to the nominal latency and bandwidth (sizecosts.py);
* writes the topology atomically (temporary file, then rename).
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import runtime_build
from ..inputs import units
from ..errors import InputError
from ..files import write_atomic
from . import capacity, launch, sizecosts
from . import gamma as gamma_mod
from .measured_links import measured_fields, write_links_form
from .sizefit import log_sizes

FORMAT = "collsched-measure/1"
FLOWS_FORMAT = "collsched-flows/1"
FORMS = ("links", "matrix")
DEFAULT_SIZES = "1,1KiB,16KiB,128KiB,1MiB"
DEFAULT_REPEATS = 5
DEFAULT_GAP_BURST = 4
DEFAULT_SITE_FACTOR = 4.0
NETWORK_MODELS = ("CM02", "SMPI", "LV08")
RUN_TIMEOUT_S = 1800
MAX_MESSAGE = 2**31 - 1  # MPI counts are ints
MAX_BURST = 64  # collsched_measure.c: MAX_BURST
DEFAULT_SWEEP = "1:4MiB"
DEFAULT_PER_OCTAVE = 8
DEFAULT_SWEEP_BUDGET_S = 0.25
# Under SMPI a round trip's seconds are simulated and cost next to no wall time: the sweep
# may then reach 4 MiB on any link (at 0.25 s the WAN sweeps stopped before SimGrid's 64 KiB
# factor step, and the measured topology predicted WAN messages at 0.30 of SimGrid's time).
DEFAULT_SMPI_SWEEP_BUDGET_S = 10.0


def default_sweep_budget(backend: str) -> float:
    return DEFAULT_SMPI_SWEEP_BUDGET_S if backend == "smpi" else DEFAULT_SWEEP_BUDGET_S
DEFAULT_REFINE = 4
MAX_REFINE = 20
MAX_FIT_SIZES = 1024  # collsched_measure.c: MAX_FIT_SIZES


class MeasureRunError(RuntimeError):
    """The measurement run failed (crash, time-out, no or unreadable result)."""


@dataclass
class MeasureConfig:
    backend: str  # mpi | smpi
    ranks: int
    sizes: list[int] = field(default_factory=lambda: parse_sizes(DEFAULT_SIZES))
    repeats: int = DEFAULT_REPEATS
    gap_burst: int = DEFAULT_GAP_BURST
    site_factor: float = DEFAULT_SITE_FACTOR
    all_pairs: bool = False
    platform_from: str | None = None  # smpi: the topology the platform is built from
    platform: str | None = None  # smpi: a SimGrid platform XML (with hostfile: its host file)
    network_model: str = "CM02"
    tcp_gamma: int | None = None  # smpi: None = the topology's tcp_window, else 4 MiB
    hostfile: str | None = None  # mpi: the launcher's host file (launch.py)
    launcher: str | None = None  # mpi: a preset (mpirun, mpiexec, srun) or a template; None: mpirun
    bind_to: str | None = None  # mpi: the launcher's binding; None: the launcher's own
    timeout_s: float = RUN_TIMEOUT_S
    # the fit sweep's sizes (0 and log-spaced ones); None = no size-dependent costs
    fit_sizes: list[int] | None = field(
        default_factory=lambda: parse_sweep(DEFAULT_SWEEP, DEFAULT_PER_OCTAVE))
    fit_budget_s: float = DEFAULT_SWEEP_BUDGET_S  # a direction stops past this round trip
    refine: int = DEFAULT_REFINE  # bisection runs that narrow every breakpoint's gap
    fit_only: bool = False  # the program skips the latency/bandwidth sweep (refinement runs)
    capacity: bool = True  # concurrent probes between sites (lab/capacity.py)
    form: str = "links"  # the written topology: links (class form, shared links) or matrix
    gamma: bool = True  # the reduction cost (lab/gamma.py: collsched-gamma) into `reduction:`


def parse_sizes(text: str) -> list[int]:
    """'1,1KiB,1MiB' -> [1, 1024, 1048576]: at least two distinct sizes, the largest > 0."""
    try:
        sizes = [int(units.parse_bytes(x.strip())) for x in str(text).split(",") if x.strip()]
    except ValueError as e:
        raise InputError("--sizes", text, str(e)) from None
    if len(set(sizes)) < 2 or max(sizes) <= 0:
        raise InputError("--sizes", text, "expected at least two different message sizes, "
                         "e.g. 1,1KiB,64KiB,1MiB")
    if min(sizes) < 0 or max(sizes) > MAX_MESSAGE:
        raise InputError("--sizes", text, f"expected sizes from 0 to {MAX_MESSAGE} bytes")
    return sorted(set(sizes))


def parse_sweep(text: str, per_octave: int = DEFAULT_PER_OCTAVE) -> list[int] | None:
    """'1:4MiB' -> [0, 1, 2, ..., 4194304] (per_octave sizes per doubling); 'off' -> None."""
    if str(text).strip().lower() in ("off", "none", "no"):
        return None
    if isinstance(per_octave, bool) or int(per_octave) != per_octave or not 1 <= per_octave <= 64:
        raise InputError("--per-octave", str(per_octave), "expected a whole number from 1 to 64")
    lo_hi = str(text).split(":")
    try:
        if len(lo_hi) != 2:
            raise ValueError("one colon between two sizes")
        lo, hi = (int(units.parse_bytes(x.strip())) for x in lo_hi)
    except ValueError as e:
        raise InputError("--sweep", text, f"expected MIN:MAX sizes (e.g. 1:4MiB) or off: {e}") from None
    if not 1 <= lo < hi <= MAX_MESSAGE:
        raise InputError("--sweep", text, f"expected 1 <= MIN < MAX <= {MAX_MESSAGE} bytes, e.g. 1:4MiB")
    sizes = log_sizes(lo, hi, per_octave)
    if len(sizes) > MAX_FIT_SIZES:
        raise InputError("--sweep", text, f"expected at most {MAX_FIT_SIZES} sizes, got {len(sizes)} "
                         "(fewer --per-octave or a narrower range)")
    if len(sizes) < 8:
        raise InputError("--sweep", text, f"expected at least 8 sizes to fit, got {len(sizes)} "
                         "(more --per-octave or a wider range)")
    return sizes


def check_config(cfg: MeasureConfig) -> None:
    """Bad options as InputError (one line) before anything runs."""
    if cfg.backend not in ("mpi", "smpi"):
        raise InputError("--backend", cfg.backend, "expected mpi or smpi")
    if isinstance(cfg.ranks, bool) or int(cfg.ranks) != cfg.ranks or cfg.ranks < 2:
        raise InputError("--ranks", str(cfg.ranks), "expected at least 2 ranks")
    if cfg.repeats < 1:
        raise InputError("--repeats", str(cfg.repeats), "expected at least 1")
    if cfg.gap_burst < 0 or cfg.gap_burst == 1 or cfg.gap_burst > MAX_BURST:
        raise InputError("--gap-burst", str(cfg.gap_burst),
                         f"expected 0 (gap not measured) or 2 to {MAX_BURST} messages")
    if not cfg.site_factor >= 1.0:
        raise InputError("--site-factor", str(cfg.site_factor), "expected a factor of at least 1")
    if isinstance(cfg.refine, bool) or int(cfg.refine) != cfg.refine or not 0 <= cfg.refine <= MAX_REFINE:
        raise InputError("--refine", str(cfg.refine), f"expected a whole number of runs from 0 to {MAX_REFINE}")
    if not 0 < cfg.fit_budget_s <= RUN_TIMEOUT_S:
        raise InputError("--sweep-budget", str(cfg.fit_budget_s),
                         f"expected seconds, more than 0 and at most {RUN_TIMEOUT_S}")
    if cfg.form not in FORMS:
        raise InputError("--form", cfg.form, f"expected one of {', '.join(FORMS)}")
    if cfg.backend == "smpi":
        _check_smpi_platform(cfg)
        if cfg.network_model not in NETWORK_MODELS:
            raise InputError("--network-model", cfg.network_model, f"expected one of {', '.join(NETWORK_MODELS)}")
        for flag, value in (("--launcher", cfg.launcher), ("--bind-to", cfg.bind_to)):
            if value is not None:
                raise InputError(flag, str(value), "only with --backend mpi (SMPI places ranks "
                                                   "from the platform)")
        if shutil.which("smpirun") is None:
            raise InputError("smpirun", "", "not found: install libsimgrid-dev (make deps)")
    else:
        for flag, value in (("--platform-from", cfg.platform_from), ("--platform", cfg.platform)):
            if value:
                raise InputError(flag, value, "only with --backend smpi")
        if cfg.launcher in (None, launch.DEFAULT) and shutil.which("mpirun") is None:
            raise InputError("mpirun", "", "not found: install openmpi-bin (make deps)")
        launch.make_launcher(cfg.launcher, cfg.hostfile, cfg.bind_to)
    if cfg.form == "links" and not cfg.capacity:
        raise InputError("--form", "links", "needs the capacity probes (drop --capacity off, or write "
                                            "--form matrix)")
    names = ("collsched-measure", "collsched-flows") if cfg.capacity else ("collsched-measure",)
    paths = [_built(cfg.backend, n) for n in names]
    # all at once: an installed package builds what is missing in one first use (gamma is
    # measured when its program is there)
    optional = [_built(cfg.backend, gamma_mod.PROGRAM)] if cfg.gamma else []
    missing = [p for p in paths + optional if not p.exists()]
    if missing and runtime_build.installed():
        runtime_build.build_targets([str(p) for p in missing], [runtime_build.compiler(cfg.backend)],
                                    f"{' and '.join(p.name for p in missing)} ({cfg.backend})")
    for binary in paths:
        if not binary.exists():
            raise InputError(str(binary), "", "not built: run `make` (or `make measure`) first")


def program_path(backend: str, name: str = "collsched-measure") -> Path:
    return runtime_build.program(backend, name)


def _built(backend: str, name: str) -> Path:  # where it is, without building it (program would)
    return runtime_build.build_dir() / ("smpi/bin" if backend == "smpi" else "bin") / name


def _looks_like_xml(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(512).lstrip()
    except OSError:
        return False
    return head.startswith(b"<")


def _check_smpi_platform(cfg: MeasureConfig) -> None:
    """--platform-from TOPOLOGY.yaml, or --platform FILE.xml --hostfile FILE: one of them."""
    if cfg.platform_from and cfg.platform:
        raise InputError("--platform", cfg.platform, "expected either --platform (with --hostfile) or "
                         "--platform-from, not both")
    if cfg.platform:
        if not cfg.hostfile:
            raise InputError("--hostfile", "", "required with --platform: the SimGrid hosts of the "
                             "ranks, one per line (host:count allowed)")
        if Path(cfg.platform).suffix.lower() in (".yaml", ".yml") or (
                Path(cfg.platform).is_file() and not _looks_like_xml(cfg.platform)):
            raise InputError("--platform", cfg.platform, "expected a SimGrid platform XML; a topology "
                             "YAML goes to --platform-from")
        _user_platform(cfg)
        return
    if cfg.hostfile is not None:
        raise InputError("--hostfile", cfg.hostfile, "with --backend smpi only together with --platform "
                                                     "FILE.xml (the generated platform places ranks itself)")
    if not cfg.platform_from:
        raise InputError("--platform-from", "", "required with --backend smpi: the topology "
                         "whose SimGrid platform is measured (or --platform FILE.xml --hostfile FILE)")
    if _looks_like_xml(cfg.platform_from):
        raise InputError("--platform-from", cfg.platform_from, "expected a topology YAML, got XML: "
                         "measure a SimGrid platform with --platform FILE.xml --hostfile FILE")


def _user_platform(cfg: MeasureConfig):
    """The user's platform (lab/simgrid_platform.py): XML and host file checked, absolute."""
    from .simgrid_platform import load_platform

    return load_platform(cfg.platform, cfg.hostfile, cfg.ranks)


# --- running the MPI program ------------------------------------------------------------
def _program(cfg: MeasureConfig, result: Path) -> list[str]:
    """collsched-measure's argv."""
    program = [str(program_path(cfg.backend)), "--sizes", ",".join(map(str, cfg.sizes)),
               "--repeats", str(cfg.repeats), "--gap-burst", str(cfg.gap_burst),
               "--group-factor", repr(float(cfg.site_factor)), "--output", str(result), "--progress"]
    if cfg.all_pairs:
        program.append("--all-pairs")
    if cfg.fit_sizes:
        program += ["--fit-sizes", ",".join(map(str, cfg.fit_sizes)),
                    "--fit-budget", repr(float(cfg.fit_budget_s))]
    if cfg.fit_only:
        program.append("--fit-only")
    return program


def launch_command(cfg: MeasureConfig, workdir: Path, program: list[str]) -> tuple[list[str], dict]:
    """(argv, environment variables to add): smpirun's on the platform (generated from
    --platform-from, or the user's --platform), or the launcher's (launch.py)."""
    if cfg.backend == "smpi":
        from .platform import DEFAULT_TCP_GAMMA, build_platform

        if cfg.platform:
            user = _user_platform(cfg)
            xml, gamma = user.xml, cfg.tcp_gamma or DEFAULT_TCP_GAMMA
            hosts = user.write_hostfile(workdir / "ranks.hosts", cfg.ranks)  # one slot a line
        else:
            from ..pipeline import resolve_topology

            topo = resolve_topology(cfg.ranks, cfg.platform_from, None)
            gamma = cfg.tcp_gamma or int(topo.tcp_window or DEFAULT_TCP_GAMMA)
            xml, hosts = build_platform(topo).write(workdir)
        # The lab's settings (lab/runner.py): CM02 makes times closed-form L + m / b.
        return ["smpirun", "-np", str(cfg.ranks), "-platform", str(xml), "-hostfile", str(hosts),
                f"--cfg=network/model:{cfg.network_model}", f"--cfg=network/TCP-gamma:{gamma}",
                "--cfg=network/crosstraffic:0", "--cfg=smpi/simulate-computation:no",
                "--log=root.thres:error", *program], {}
    return launch.make_launcher(cfg.launcher, cfg.hostfile, cfg.bind_to).command(cfg.ranks, program)


def _launch(cfg: MeasureConfig, make_program, progress, what: str) -> dict:
    """Run one of the programs (make_program(workdir, result) -> argv) and return its JSON
    with "wall_s". progress(phase, done, total) per progress line of the program."""
    with tempfile.TemporaryDirectory(prefix="collsched-measure-") as tmp:
        workdir = Path(tmp)
        result = workdir / "result.json"
        cmd, extra_env = launch_command(cfg, workdir, make_program(workdir, result))
        env = dict(os.environ)
        env.update(extra_env)
        other = []

        def line(text):  # progress lines, everything else kept for errors
            parts = text.split()
            if len(parts) == 5 and parts[0] == "progress" and parts[2].isdigit():
                if progress:
                    progress(parts[1], int(parts[2]), int(parts[3]))
            elif text.strip():
                other.append(text.rstrip())

        try:
            # A session of its own: on time-out the whole group goes, not only mpirun
            # (whose ranks would survive a SIGKILL of mpirun alone).
            proc = launch.run(cmd, env, workdir, cfg.timeout_s, on_stderr=line, capture_stdout=False)
        except launch.LaunchTimeout:
            raise MeasureRunError(f"measure: {cmd[0]} did not finish within {cfg.timeout_s:g} s") from None
        if proc.returncode != 0 or not result.exists():
            # SimGrid ends with "Aborted"/"Execution failed": its first ERROR line says why.
            errors = [ln for ln in other if "ERROR]" in ln or "error:" in ln.lower()
                      or ln.startswith("collsched-")]
            tail = (errors or other or ["(no output)"])[0 if errors else -1]
            raise MeasureRunError(f"measure: {cmd[0]} ({what}) failed (exit {proc.returncode}): {tail}")
        try:
            raw = json.loads(result.read_text())
        except (OSError, ValueError) as e:
            raise MeasureRunError(f"measure: unreadable result from {what}: {e}") from None
    if not isinstance(raw, dict):
        raise MeasureRunError(f"measure: unreadable result from {what}: not a JSON object")
    raw["wall_s"] = proc.wall_s
    return raw


def run_program(cfg: MeasureConfig, progress=None) -> dict:
    """Run collsched-measure and return its JSON. progress(phase, done, total) per round."""
    check_config(cfg)
    raw = _launch(cfg, lambda _workdir, result: _program(cfg, result), progress, "collsched-measure")
    if raw.get("format") != FORMAT or raw.get("ranks") != cfg.ranks:
        raise MeasureRunError(f"measure: unexpected result (format {raw.get('format')!r}, "
                              f"{raw.get('ranks')} ranks; expected {FORMAT}, {cfg.ranks})")
    return raw


def run_flows(cfg: MeasureConfig, tests, progress=None, phase: str = "flows"):
    """Run collsched-flows on `tests` (lists of (src, dst, bytes, in flight)); returns
    (per test the flows' durations in seconds, the program's JSON less "tests")."""
    body = [FLOWS_FORMAT, str(len(tests))]
    for flows in tests:
        body.append(str(len(flows)))
        body += [f"{int(s)} {int(d)} {int(b)} {int(c)}" for s, d, b, c in flows]

    def program(workdir, result):
        spec = workdir / "tests.txt"
        spec.write_text("\n".join(body) + "\n")
        return [str(program_path(cfg.backend, "collsched-flows")), "--tests", str(spec),
                "--output", str(result), "--progress"]

    raw = _launch(cfg, program, progress and (lambda _p, done, total: progress(phase, done, total)),
                  "collsched-flows")
    times = raw.pop("tests", None)
    if (raw.get("format") != FLOWS_FORMAT or not isinstance(times, list) or len(times) != len(tests)
            or any(not isinstance(t, list) or len(t) != len(f) for t, f in zip(times, tests))):
        raise MeasureRunError(f"measure: unexpected result from collsched-flows (format "
                              f"{raw.get('format')!r}, expected {FLOWS_FORMAT} with {len(tests)} tests)")
    return [[float(x) for x in t] for t in times], raw


# --- fitting ------------------------------------------------------------------------------
def fit_linear(sizes, values, floor_s: float = 1e-9) -> tuple[float, float]:
    """(a, per_byte) with values ~ a + m * per_byte, both >= 0.

    Least squares on relative residuals (each point weighted by 1 / value), so a 1-byte
    time and a 1-MiB time count alike; then points whose relative residual is far off the
    rest (5 robust standard deviations and more than 2%) are dropped and the fit repeated.
    Non-finite values (not measured) are ignored.
    """
    m = np.asarray(sizes, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    use = np.isfinite(v)
    if len(np.unique(m[use])) < 2:
        raise ValueError("fit_linear: expected values at two different sizes at least")
    a = per_byte = 0.0
    for _ in range(4):
        w = 1.0 / np.maximum(np.abs(v[use]), floor_s)
        design = np.column_stack([w, m[use] * w])
        (a, per_byte), *_ = np.linalg.lstsq(design, v[use] * w, rcond=None)
        rel = (v - (a + per_byte * m)) / np.maximum(np.abs(v), floor_s)
        spread = 1.4826 * np.median(np.abs(rel[use] - np.median(rel[use])))
        keep = use & (np.abs(rel) <= max(5.0 * spread, 0.02))
        if keep.sum() == use.sum() or len(np.unique(m[keep])) < 2:
            break
        use = keep
    w = 1.0 / np.maximum(np.abs(v[use]), floor_s)
    if per_byte < 0:  # no growth with size: a constant
        a, per_byte = float(np.sum(v[use] * w * w) / np.sum(w * w)), 0.0
    if a < 0:  # refit through the origin
        a, per_byte = 0.0, float(np.sum(m[use] * v[use] * w * w) / np.sum((m[use] * w) ** 2))
    return float(max(a, 0.0)), float(max(per_byte, 0.0))


@dataclass
class PairFit:
    src: int
    dst: int
    latency_s: float  # half the intercept of time(m)
    bandwidth_Bps: float  # 1 / slope of time(m)
    send_overhead: tuple[float, float] | None  # (a, per_byte) of os(m)
    gap: tuple[float, float] | None


def fit_pair(sizes, record: dict) -> PairFit:
    """Fit one measured direction of the program's output (one entry of "pairs")."""
    times = np.array([np.nan if x is None else x for x in record["time_s"]], dtype=np.float64)
    c, per_byte = fit_linear(sizes, times)
    if per_byte <= 0:  # times did not grow with size: the sizes were too small to tell
        raise MeasureRunError(f"measure: rank {record['src']} -> {record['dst']}: transfer time does "
                              "not grow with message size; measure with larger --sizes")
    extra = {}
    for key, name in (("send_overhead_s", "send_overhead"), ("gap_s", "gap")):
        vals = np.array([np.nan if x is None else x for x in record.get(key) or []], dtype=np.float64)
        ok = np.isfinite(vals)
        extra[name] = fit_linear(np.asarray(sizes)[ok], np.maximum(vals[ok], 0.0)) \
            if len(vals) == len(sizes) and len(np.unique(np.asarray(sizes)[ok])) >= 2 else None
    return PairFit(int(record["src"]), int(record["dst"]), c / 2.0, 1.0 / per_byte, **extra)


# --- from measurements to a topology -----------------------------------------------------------
@dataclass
class Measurement:
    hosts: list[str]  # processor names, in order of first appearance by rank
    rank_host: list[int]
    host_site: list[str]
    host_latency: np.ndarray  # (H, H) seconds, diagonal nan
    host_bandwidth: np.ndarray  # (H, H) bytes/s, diagonal nan
    intra_host: tuple[float, float] | None  # (latency_s, Bps) of two ranks on one host
    send_overhead: tuple[float, float] | None  # median (a, per_byte) over host pairs
    gap: tuple[float, float] | None
    pairs: list[PairFit]
    raw: dict
    size_fits: list = field(default_factory=list)  # sizecosts.ClassFit per swept link class
    message_costs: object = None  # msgcosts.MessageCosts from them, or None


def group_sites(host_latency: np.ndarray, factor: float) -> list[int]:
    """Site index of every host: hosts A, B are linked when L(A, B) <= factor x min(nearest
    latency of A, of B); sites are the connected components, numbered by first host."""
    lat = np.asarray(host_latency, dtype=np.float64)
    h = len(lat)
    sym = np.fmax(lat, lat.T)  # the slower direction; nan where unmeasured
    np.fill_diagonal(sym, np.inf)
    nearest = np.min(np.where(np.isfinite(sym), sym, np.inf), axis=1) if h > 1 else np.zeros(h)
    parent = list(range(h))

    def root(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a in range(h):
        for b in range(a + 1, h):
            if np.isfinite(sym[a, b]) and sym[a, b] <= factor * min(nearest[a], nearest[b]):
                parent[root(a)] = root(b)
    label: dict[int, int] = {}
    return [label.setdefault(root(x), len(label)) for x in range(h)]


def _median_pair(values):
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    arr = np.array(vals, dtype=np.float64)
    return float(np.median(arr[:, 0])), float(np.median(arr[:, 1]))


def analyse(raw: dict, site_factor: float = DEFAULT_SITE_FACTOR) -> Measurement:
    """Fits, hosts, sites and host-level matrices from the program's JSON."""
    sizes = raw["sizes"]
    names = [str(n) for n in raw["processor_names"]]
    hosts = list(dict.fromkeys(names))
    rank_host = [hosts.index(n) for n in names]
    h = len(hosts)
    fits = [fit_pair(sizes, rec) for rec in raw["pairs"]]
    lat_lists = [[[] for _ in range(h)] for _ in range(h)]
    bw_lists = [[[] for _ in range(h)] for _ in range(h)]
    intra_l, intra_b = [], []
    for f in fits:
        a, b = rank_host[f.src], rank_host[f.dst]
        if a == b:
            intra_l.append(f.latency_s), intra_b.append(f.bandwidth_Bps)
        else:
            # The intercept holds both directions' latency: it belongs to the unordered pair.
            lat_lists[a][b].append(f.latency_s), lat_lists[b][a].append(f.latency_s)
            bw_lists[a][b].append(f.bandwidth_Bps)
    lat = np.full((h, h), np.nan)
    bw = np.full((h, h), np.nan)
    for a in range(h):
        for b in range(h):
            if a == b:
                continue
            if not lat_lists[a][b] or not bw_lists[a][b]:
                raise MeasureRunError(f"measure: no measurement from host {hosts[a]} to host {hosts[b]}")
            lat[a, b] = float(np.median(lat_lists[a][b]))
            bw[a, b] = float(np.median(bw_lists[a][b]))
    site_of = group_sites(lat, site_factor)
    inter = [f for f in fits if rank_host[f.src] != rank_host[f.dst]] or fits
    meas = Measurement(
        hosts=hosts, rank_host=rank_host, host_site=[f"site{s}" for s in site_of],
        host_latency=lat, host_bandwidth=bw,
        intra_host=(float(np.median(intra_l)), float(np.median(intra_b))) if intra_l else None,
        send_overhead=_median_pair(f.send_overhead for f in inter),
        gap=_median_pair(f.gap for f in inter), pairs=fits, raw=raw)
    if raw.get("fit_pairs"):
        meas.size_fits = sizecosts.fit_classes(raw, meas)
        meas.message_costs = sizecosts.message_costs(meas.size_fits, meas.host_site)
    return meas


def write_measurement(meas: Measurement, path, name: str | None = None, comment: str | None = None,
                      overheads: bool = False) -> None:
    """Write the measured topology (matrix form, explicit placement) atomically."""
    from ..inputs.topology import write_matrix_topology

    path = Path(path)
    extra: dict = {"placement": {"hosts": [meas.hosts[h] for h in meas.rank_host]},
                   **measured_fields(meas, overheads)}
    write_matrix_topology(path, meas.hosts, meas.host_site, np.nan_to_num(meas.host_latency),
                          np.nan_to_num(meas.host_bandwidth, nan=1.0), name=name or path.stem,
                          intra_host=meas.intra_host, comment=comment, extra=extra)


def refine(cfg: MeasureConfig, meas: Measurement, progress=None) -> int:
    """Up to cfg.refine more runs of the program's fit sweep alone, each at the middle of
    every gap between two fitted segments (bisection: each run halves the gaps); the classes
    are refitted with the new sizes, and so is the topology's message_costs. Returns the number
    of runs made (they stop early when every breakpoint is exact)."""
    runs = 0
    for _ in range(cfg.refine if meas.size_fits else 0):
        sizes = sizecosts.refine_sizes(meas.size_fits)
        if not sizes:
            break
        more = run_program(dataclasses.replace(cfg, fit_sizes=sizes, fit_only=True),
                           progress and (lambda phase, done, total: progress(f"refine {phase}", done, total)))
        sizecosts.add_points(meas.size_fits, more, meas)
        meas.raw["wall_s"] += more["wall_s"]
        meas.raw.setdefault("refine", []).append({k: more[k] for k in ("fit_sizes", "fit_pairs")})
        runs += 1
    if runs:
        meas.message_costs = sizecosts.message_costs(meas.size_fits, meas.host_site)
    return runs


def summary(meas: Measurement, cfg: MeasureConfig, output: Path) -> dict:
    """JSON-able report of a measurement (what `collsched measure --json` prints)."""
    raw = meas.raw

    def mat(a):
        return [[None if not np.isfinite(x) else float(x) for x in row] for row in a]

    sites: dict[str, list[str]] = {}
    for host, site in zip(meas.hosts, meas.host_site):
        sites.setdefault(site, []).append(host)
    pair = (lambda v: None if v is None else {"a_s": v[0], "per_byte_s": v[1]})
    return {
        "output": str(output), "backend": cfg.backend, "ranks": cfg.ranks,
        "platform_from": cfg.platform_from, "platform": cfg.platform,
        "hostfile": cfg.hostfile,
        "network_model": cfg.network_model if cfg.backend == "smpi" else None,
        "launch": None if cfg.backend == "smpi" else
        launch.make_launcher(cfg.launcher, cfg.hostfile, cfg.bind_to).describe(),
        "sizes": raw["sizes"], "repeats": raw["repeats"], "gap_burst": raw["gap_burst"],
        "site_factor": cfg.site_factor, "all_pairs": bool(raw["all_pairs"]),
        "hosts": meas.hosts, "rank_host": meas.rank_host, "sites": sites,
        "host_latency_s": mat(meas.host_latency), "host_bandwidth_Bps": mat(meas.host_bandwidth),
        "intra_host": None if meas.intra_host is None else
        {"latency_s": meas.intra_host[0], "bandwidth_Bps": meas.intra_host[1]},
        "send_overhead": pair(meas.send_overhead), "gap": pair(meas.gap),
        "pairs_measured": len(meas.pairs), "rounds": raw["rounds"],
        "measured_time_s": raw["elapsed_s"], "wall_s": raw["wall_s"],
        "fit_sizes": raw.get("fit_sizes") or [], "fit_budget_s": raw.get("fit_budget_s"),
        "refine_runs": raw.get("refine_runs", 0),
        "size_costs": {f.cls: f.to_dict() for f in meas.size_fits},
        "message_costs": None if meas.message_costs is None else meas.message_costs.to_dict(),
    }


def measure(cfg: MeasureConfig, output, progress=None, raw_output=None, overheads=False) -> dict:
    """Run, fit, group and write `output`; returns summary(). Nothing is written on failure."""
    output = Path(output)
    if not output.parent.is_dir():
        raise InputError(str(output), "-o", "expected a file in an existing directory")
    if raw_output is not None and not Path(raw_output).parent.is_dir():
        raise InputError(str(raw_output), "--raw", "expected a file in an existing directory")
    raw = run_program(cfg, progress)
    gamma_exe = _built(cfg.backend, gamma_mod.PROGRAM)  # measured when built (`make measure`)
    gamma_raw = (gamma_mod.run_gamma(cfg, _launch, gamma_exe, progress)
                 if cfg.gamma and gamma_exe.exists() else None)  # before anything is written
    meas = analyse(raw, cfg.site_factor)
    raw["refine_runs"] = refine(cfg, meas, progress)
    how = (f"smpirun on {'the platform ' + cfg.platform if cfg.platform else 'a platform from ' + str(cfg.platform_from)}, "
           f"network/model:{cfg.network_model}"
           if cfg.backend == "smpi" else f"launcher {cfg.launcher or launch.DEFAULT}" +
           (f", host file {cfg.hostfile}" if cfg.hostfile else "") +
           (f", bound to {cfg.bind_to}" if cfg.bind_to else ""))
    comment = (f"Written by `collsched measure` ({how}): {cfg.ranks} ranks, sizes "
               f"{','.join(map(str, raw['sizes']))} B, median of {raw['repeats']} runs each.\n"
               "latency = half the intercept, bandwidth = 1 / slope of a fit of time(m) = c + m / b "
               "(docs/measure.md).\n"
               f"sites: hosts whose latency is within {cfg.site_factor:g}x of their nearest host's.")
    if meas.size_fits:
        fs = raw["fit_sizes"]
        comment += (f"\nmessage_costs: a sweep of {len(fs)} sizes 0..{fs[-1]} B per link class "
                    f"({raw['refine_runs']} bisection run(s) at the breakpoints), time fitted piecewise "
                    "a_i + m / b_i (breakpoints from the data); the factors are a_i / latency and "
                    "b_i / bandwidth of the class's measured pair.")
        for f in meas.size_fits:
            comment += (f"\n  {f.cls}: {len(f.fit.segments)} segment(s), breakpoints "
                        f"{', '.join(map(str, f.fit.breakpoints)) or 'none'} B, rms {f.fit.rms:.2%}")
    if meas.send_overhead is not None:
        comment += (f"\nmedian fits over host pairs: os(m) = {meas.send_overhead[0]:.4g} s + m x "
                    f"{meas.send_overhead[1]:.4g} s/B" +
                    (f", g(m) = {meas.gap[0]:.4g} s + m x {meas.gap[1]:.4g} s/B" if meas.gap else "") +
                    ("" if overheads else " (not applied; --overheads writes them)"))
    cap = probe_capacity(cfg, meas, progress) if cfg.capacity else None
    if cap is not None:
        raw["capacity"] = capacity.summary(cap)
    if cfg.form == "links":
        if cap is not None and len(cap.sites) > 1:
            comment += ("\nlinks: capacity probes (docs/measure.md, Capacity): k concurrent flows per "
                        "ordered site pair until the aggregate stops growing; pairs whose flows slow "
                        f"each other down share a link; {cap.runs} run(s), {cap.tests} tests, "
                        f"{cap.wall_s:.1f} s.")
        write_links_form(meas, cap or capacity.Capacity(list(dict.fromkeys(meas.host_site)),
                                                        capacity.site_lans(meas), {}),
                         output, comment=comment, overheads=overheads)
    else:
        write_measurement(meas, output, comment=comment, overheads=overheads)
    if gamma_raw is not None:
        raw["gamma"] = gamma_mod.add_measured(output, gamma_raw)
    if raw_output is not None:
        write_atomic(raw_output, json.dumps(raw))
    report = summary(meas, cfg, output)
    report["reduction"] = raw.get("gamma")
    report["form"] = cfg.form
    report["capacity"] = raw.get("capacity")
    return report


def probe_capacity(cfg: MeasureConfig, meas: Measurement, progress=None):
    """The capacity probes (lab/capacity.py) between the measured sites, run through
    collsched-flows; None with fewer than two sites (nothing to probe)."""
    if len(set(meas.host_site)) < 2:
        return None
    start = time.monotonic()
    cap = capacity.Prober(meas, lambda tests, phase: run_flows(cfg, tests, progress, phase),
                          share_drop=capacity.SMPI_SHARE_DROP if cfg.backend == "smpi" else capacity.SHARE_DROP).probe()
    cap.wall_s = time.monotonic() - start
    return cap


def _time(s: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"{s / scale:.4g} {unit}"
    return f"{s * 1e9:.4g} ns"


def _rate(bps: float) -> str:
    bits = bps * 8
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bits >= scale:
            return f"{bits / scale:.4g} {unit}"
    return f"{bits:.4g} bit/s"


def _span(values, fmt) -> str:
    lo, hi = min(values), max(values)
    return fmt(lo) if hi <= lo * 1.001 else f"{fmt(lo)}..{fmt(hi)}"


def text_report(report: dict) -> str:
    """A few lines for people: sites, their LAN and WAN figures (ranges over host pairs)."""
    lat, bw = report["host_latency_s"], report["host_bandwidth_Bps"]
    idx = {h: i for i, h in enumerate(report["hosts"])}
    sites = list(report["sites"].items())
    lines = [f"{report['output']}: {len(report['hosts'])} host(s) in {len(sites)} site(s), "
             f"{report['ranks']} ranks; {report['pairs_measured']} directions measured in "
             f"{report['rounds']['sweep']} rounds ({report['wall_s']:.1f} s)"]
    for s, hosts in sites:
        pairs = [(idx[x], idx[y]) for x in hosts for y in hosts if x != y]
        lan = (f"latency {_span([lat[i][j] for i, j in pairs], _time)}, bandwidth "
               f"{_span([bw[i][j] for i, j in pairs], _rate)}") if pairs else "no host pair inside"
        lines.append(f"  {s}: {len(hosts)} host(s) {hosts[0]}{' ...' if len(hosts) > 1 else ''}; {lan}")
    for k, (s, hs) in enumerate(sites):
        for t, ht in sites[k + 1:]:
            pairs = [(idx[x], idx[y]) for x in hs for y in ht]
            lines.append(f"  {s} <-> {t}: latency {_span([lat[i][j] for i, j in pairs], _time)}; "
                         f"bandwidth {s}->{t} {_span([bw[i][j] for i, j in pairs], _rate)}, "
                         f"{t}->{s} {_span([bw[j][i] for i, j in pairs], _rate)}")
    if report["intra_host"]:
        lines.append(f"  intra-host: latency {_time(report['intra_host']['latency_s'])}, "
                     f"bandwidth {_rate(report['intra_host']['bandwidth_Bps'])}")
    lines += capacity.report_lines(report.get("capacity"))
    lines += [report["reduction"]["line"]] if report.get("reduction") else []
    for cls, f in report.get("size_costs", {}).items():
        brk = ", ".join(map(str, f["breakpoints"])) or "none"
        lines.append(f"  size-dependent {cls}: {len(f['segments'])} segment(s), breakpoints {brk} B, "
                     f"fit rms {f['rms']:.2%}")
    return "\n".join(lines)
