"""The lab at scale with compact schedules (issue 24 part 5): SMPI runs of compact ring,
bruck and hierarchical (hier) schedules against the MPI library's selectors at 1024 and
4096 ranks, on one machine.

What one launch is: `collsched-run FILE --compare --iterations 1 --warmup 1
--shared-sample K` (SMPI build) under smpirun: an untimed warm-up call of both (the first
call of a compact record holds the ranks' agreement and every rank's list generation),
then the compact schedule's call and the MPI library's MPI_Allgather (selector
`native:ompi` or `native:mpich`, SimGrid's `smpi/coll-selector`) on the same buffers, each
after a barrier. P x 64 KiB x P bytes of
receive buffers (1 TiB at P = 4096) fit because they are SMPI's partial shared malloc: one
physical copy for all ranks except the first 4 KiB of K sampled origins' blocks (the same
origins on every rank: 0, P-1 and K-2 drawn with a fixed seed) and the guard after the last
block, which are private and checked on every rank against the pattern the driver computes
for (origin, iteration). SimGrid copies only private bytes, so a sampled block is real data
all along its way through forwarding ranks. Both calls of a launch are checked; the launch
fails if either is wrong or if the compact call fell back to the library.

Beside the simulated times, each launch records its wall time, CPU time (the simulator's
user + system, getrusage of the waited launch), the simulator's peak private memory
(RssAnon + page tables from /proc/PID/status, sampled: shared pages counted once, unlike
RSS, which counts the shared file once per mapping) and, as lab/scale.py does, the
machine's peak memory in use beyond the start (/proc/meminfo; on a shared machine it also
sees other jobs). The model is the compact schedules' per-level cost model
(compact.model.summary, fast at any P); measured / predicted is reported.

Records accumulate in out/scale-compact/records.json (one per (P, topology, algorithm,
native), the latest kept) and the docs section is written from all of them:
`collsched bench --suite scale-compact --ranks 1024,4096 --doc docs/benchmarks.md`.

Topologies: `cluster` is the default homogeneous cluster (1 Gbit/s, 50 us: what compact
version-1 records describe); `grid` is topologies/grid-8x512.yaml with P / 8 hosts per
site (the file itself at P = 4096).
"""
from __future__ import annotations

import datetime
import json
import os
import platform as pyplatform
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .. import runtime_build
from ..errors import InputError
from ..files import write_atomic
from .launch import require_map_count, used_mib

SECTION = "lab-scale-compact"
GRID_FILE = Path(__file__).resolve().parents[3] / "topologies" / "grid-8x512.yaml"
GRID_SITES = 8
# (algorithm, native selector) per launch: each native runs beside one compact schedule.
DEFAULT_PAIRS = {"cluster": (("ring", "native:ompi"), ("bruck", "native:mpich")),
                 "grid": (("hier", "native:ompi"),)}
# One untimed call of both first (--warmup 1): the first call of a compact record holds the
# ranks' agreement and list generation, a one-off cost (under SMPI's selectors on the
# grid's WAN: seconds at P = 64) that the model does not time.
WARMUP = 1
SAMPLE_ORIGINS = 32  # sampled origins per rank (collsched-run --shared-sample)
# SMPI maps the shared parts in blocks of this size (smpi/shared-malloc-blocksize): with
# the default 1 MiB a 256 MiB receive buffer is 256 maps per rank, over a million at P =
# 4096; at 64 MiB each shared range between two samples is one or two maps.
SHARED_BLOCK = 64 << 20
DEFAULT_TIMEOUT_S = 3600
SAMPLE_PERIOD_S = 2.0


class ScaleRunError(RuntimeError):
    """A launch failed (exit status, time-out, no result line)."""


@dataclass
class Case:
    ranks: int
    topology: str  # cluster | grid
    algorithm: str
    native: str
    nbytes: int = 64 << 10


# ---- inputs --------------------------------------------------------------------------------

def grid_topology(ranks: int, directory: Path) -> Path:
    """grid-8x512.yaml with ranks / 8 hosts per site (the file itself at 4096 ranks)."""
    if ranks % GRID_SITES:
        raise InputError("--ranks", str(ranks), f"expected a multiple of {GRID_SITES} for the grid")
    per = ranks // GRID_SITES
    if per == 512:
        return GRID_FILE
    text = GRID_FILE.read_text()
    text, n = re.subn(r"hosts: 512,", f"hosts: {per},", text)
    if n != GRID_SITES:
        raise InputError(str(GRID_FILE), "sites", f"expected {GRID_SITES} sites of 512 hosts")
    text = text.replace("name: grid-8x512", f"name: grid-8x{per}")
    path = directory / f"grid-8x{per}.yaml"
    write_atomic(path, text)
    return path


def topology_path(case: Case, directory: Path) -> str | None:
    return None if case.topology == "cluster" else str(grid_topology(case.ranks, directory))


def compile_compact(case: Case, topo: str | None, out: Path) -> Path:
    """The compact record `collsched compile --form compact` writes for the case, through
    the same library calls (compact.for_topology; hier.for_topology over the sites)."""
    from ..compact import for_topology, write_compact
    from ..compact import hier as compact_hier

    if case.algorithm == "hier":
        desc = compact_hier.for_topology(topo, case.ranks, case.nbytes)
    else:
        desc = for_topology(case.algorithm, case.ranks, case.nbytes, topology=topo)
    write_compact(desc, out)
    return out


def predict(sched: Path, topo: str | None, nbytes: int) -> dict:
    """The compact model's prediction and lower bound (None where it does not apply)."""
    from ..compact import model
    from ..compact.files import read_compact

    try:
        s = model.summary(read_compact(sched), topo, nbytes)
    except InputError as e:
        return {"predicted_s": None, "lower_bound_s": None, "model_note": e.line()}
    return {"predicted_s": s["predicted_s"], "lower_bound_s": s["lower_bound_s"],
            "model_method": s.get("method"), "model_compute_s": s["compute_s"]}


def platform_files(case: Case, topo: str | None, directory: Path, network_model: str):
    """(platform.xml, hostfile, SimGrid network options, TCP gamma) as the lab builds them."""
    import dataclasses

    from ..pipeline import resolve_topology
    from .netmodel import network_setup
    from .platform import DEFAULT_TCP_GAMMA, build_platform

    loaded = resolve_topology(case.ranks, topo, None)
    gamma = int(loaded.tcp_window or DEFAULT_TCP_GAMMA)
    t = dataclasses.replace(loaded, tcp_window=float(gamma))
    net = network_setup(network_model, t)
    xml, hosts = build_platform(net.topology).write(directory, f"platform-{case.topology}-{case.ranks}")
    return xml, hosts, tuple(net.simgrid_cfg), gamma


# ---- one launch ----------------------------------------------------------------------------

def _status(pid: int) -> dict:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("RssAnon", "VmPTE", "VmRSS"):
                    out[k] = int(v.split()[0])  # kB
    except (OSError, ValueError):
        pass
    return out


def _simulator(session: int) -> int | None:
    """The smpimain process of a launch's session."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        if comm == "smpimain" and int(fields[3]) == session:  # fields[3]: session id
            return int(d)
    return None


def _maps(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    except OSError:
        return 0


def _stop(pid: int) -> None:
    """SIGTERM to the launch's process group, SIGKILL if anything of it is left 5 s later."""
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        end = time.monotonic() + grace
        while time.monotonic() < end:
            time.sleep(0.1)
            try:
                os.killpg(pid, 0)
            except ProcessLookupError:
                return


def launch(cmd: list[str], cwd: Path, timeout_s: float, period_s: float = SAMPLE_PERIOD_S) -> dict:
    """Run one smpirun command in a session of its own; returns stdout, stderr tail, wall,
    CPU (user + system of the waited launch and its children), memory peaks."""
    base = used_mib()
    peak = {"anon_kib": 0, "pte_kib": 0, "maps": 0, "used_mib": base, "cpu_s": 0.0}
    proc = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True)
    out, err = [], []
    readers = [threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True),
               threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)]
    for r in readers:
        r.start()
    done = threading.Event()
    timed_out = threading.Event()

    def sample():
        sim, n = None, 0
        while not done.wait(period_s):
            peak["used_mib"] = max(peak["used_mib"], used_mib())
            sim = sim or _simulator(proc.pid)
            if sim is None:
                continue
            st = _status(sim)
            try:  # the simulator's own CPU: a stopped launch's shell does not reap it
                with open(f"/proc/{sim}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                peak["cpu_s"] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            except (OSError, ValueError, IndexError):
                pass
            peak["anon_kib"] = max(peak["anon_kib"], st.get("RssAnon", 0))
            peak["pte_kib"] = max(peak["pte_kib"], st.get("VmPTE", 0))
            n += 1
            if n % 5 == 1:  # the maps file is long: now and then
                peak["maps"] = max(peak["maps"], _maps(sim))

    def watchdog():
        if not done.wait(timeout_s):
            timed_out.set()
            _stop(proc.pid)
    threads = [threading.Thread(target=sample, daemon=True), threading.Thread(target=watchdog, daemon=True)]
    for t in threads:
        t.start()
    start = time.perf_counter()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    except BaseException:
        _stop(proc.pid)
        raise
    finally:
        wall = time.perf_counter() - start
        done.set()
    proc.returncode = os.waitstatus_to_exitcode(status)
    for r in readers:
        r.join()
    for t in threads:
        t.join()
    res = {"returncode": proc.returncode, "stdout": "".join(out), "stderr": "".join(err),
            "wall_s": wall, "cpu_s": max(usage.ru_utime + usage.ru_stime, peak["cpu_s"]),
            "max_rss_mib": usage.ru_maxrss / 1024,
            "sim_private_peak_mib": (peak["anon_kib"] + peak["pte_kib"]) / 1024,
            "sim_page_tables_peak_mib": peak["pte_kib"] / 1024, "maps_peak": peak["maps"],
            "machine_used_peak_mib": peak["used_mib"] - base}
    if timed_out.is_set():  # what it had used by then: the measured part of a failed attempt
        raise ScaleRunError(f"{Path(cmd[0]).name} did not finish within {timeout_s:g} s (stopped after "
                            f"{wall:.0f} s of wall time, {res['cpu_s']:.0f} s of CPU; peaks: simulator "
                            f"private memory {res['sim_private_peak_mib']:.0f} MiB, of which page tables "
                            f"{res['sim_page_tables_peak_mib']:.0f} MiB, {res['maps_peak']:,} maps, machine "
                            f"{res['machine_used_peak_mib']:.0f} MiB)")
    return res


def smpi_command(case: Case, sched: Path, files, native: str, sample: int, warmup: int = WARMUP) -> list[str]:
    from . import native as natives

    xml, hosts, net_cfg, gamma = files
    exe = runtime_build.require(runtime_build.program("smpi", "collsched-run"))
    chosen = natives.resolve(native, "smpi")
    return ["smpirun", "-np", str(case.ranks), "-platform", str(xml), "-hostfile", str(hosts),
            *net_cfg, f"--cfg=network/TCP-gamma:{gamma}", "--cfg=network/crosstraffic:0",
            "--cfg=smpi/simulate-computation:no", "--cfg=smpi/test:0",
            f"--cfg=smpi/shared-malloc-blocksize:{SHARED_BLOCK}", "--log=root.thres:error",
            chosen.smpi_cfg, str(exe), str(sched), "--bytes", str(case.nbytes), "--iterations", "1",
            "--warmup", str(warmup), "--compare", "--json", "--shared-sample", str(sample)]


def check_map_count(ranks: int, sample: int) -> None:
    """Each rank maps about 2 K + 4 regions for its receive buffer (K sampled origins) and
    a few for its stack; SimGrid and the libraries a few thousand."""
    need = ranks * (3 * sample + 16) + 8192
    require_map_count(need, f"{ranks} ranks with {sample} sampled origins", "bench-scale-compact")


def run_case(case: Case, workdir: Path, network_model: str = "CM02", sample: int = SAMPLE_ORIGINS,
             timeout_s: float = DEFAULT_TIMEOUT_S, files_cache: dict | None = None, warmup: int = WARMUP) -> dict:
    """Compile, launch, check, predict: one record."""
    check_map_count(case.ranks, sample)
    topo = topology_path(case, workdir)
    key = (case.topology, case.ranks)
    cache = files_cache if files_cache is not None else {}
    if key not in cache:
        cache[key] = platform_files(case, topo, workdir, network_model)
    sched = compile_compact(case, topo, workdir / f"{case.algorithm}-{case.topology}-{case.ranks}.sched")
    cmd = smpi_command(case, sched, cache[key], case.native, sample, warmup)
    load0 = os.getloadavg()
    started = datetime.datetime.now(datetime.timezone.utc)
    ran = launch(cmd, workdir, timeout_s, period_s=max(SAMPLE_PERIOD_S, case.ranks / 512))
    load1 = os.getloadavg()
    line = next((ln for ln in ran["stdout"].splitlines() if ln.startswith("{")), None)
    if ran["returncode"] not in (0, 1) or line is None:
        tail = [ln for ln in ran["stderr"].splitlines() if ln.strip()] or ["(no output)"]
        raise ScaleRunError(f"{case.algorithm} P={case.ranks} {case.topology}: smpirun exit "
                            f"{ran['returncode']}: {tail[-1].strip()[:300]}")
    res = json.loads(line)
    rec = {"ranks": case.ranks, "topology": case.topology,
           "topology_file": "default cluster (1 Gbit/s, 50 us)" if topo is None else
           f"{Path(topo).name} (grid-8x512's sites and links, {case.ranks // GRID_SITES} hosts per site)",
           "algorithm": case.algorithm, "native": case.native, "bytes": case.nbytes, "warmup": warmup,
           "network_model": network_model, "record_bytes": sched.stat().st_size,
           "simulated_s": res["avg_s"], "native_simulated_s": res["ref_avg_s"],
           "data_ok": bool(res["data_ok"]) and ran["returncode"] == 0, "used_schedule": bool(res["used_schedule"]),
           "fallback_reason": res.get("reason", ""), "mpi_error": res.get("mpi_error", 0),
           "sampled_origins": len(res.get("sampled_origins", [])),
           "checked_bytes_per_block": res.get("checked_bytes_per_block"),
           "started_utc": started.strftime("%Y-%m-%d %H:%M"), "load_before": load0[0], "load_after": load1[0],
           "machine": f"{os.cpu_count()} CPUs, {_mem_total_gib():.0f} GiB, {pyplatform.system()} "
                      f"{pyplatform.release()}",
           "command": " ".join(Path(c).name if i == 0 else c for i, c in enumerate(cmd))}
    for k in ("wall_s", "cpu_s", "sim_private_peak_mib", "sim_page_tables_peak_mib", "maps_peak",
              "machine_used_peak_mib", "max_rss_mib"):
        rec[k] = ran[k]
    rec["messages"] = _messages(sched)
    rec.update(predict(sched, topo, case.nbytes))
    if rec.get("predicted_s"):
        rec["ratio"] = rec["simulated_s"] / rec["predicted_s"]
    return rec


def _messages(sched: Path) -> int | None:
    """Point-to-point messages of one call: the sum of every rank's receives (the C
    generator's counts, O(blocks) per rank)."""
    from ..compact import native
    from ..compact.files import read_compact

    try:
        d = read_compact(sched)
        return int(sum(native.count(d, r) for r in range(d.nranks)) // 2)
    except Exception:  # the count is informative; a generator that refuses is reported by the run
        return None


def _mem_total_gib() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    return 0.0


# ---- records and the section ---------------------------------------------------------------

def _key(r: dict) -> tuple:
    return (r["ranks"], r["topology"], r["algorithm"], r["native"], r.get("warmup", 0))


def load_records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return json.loads(path.read_text())


def save_records(path: Path, new: list[dict]) -> list[dict]:
    """Merge new records into the file (the latest per key); returns all of them."""
    keep = {_key(r): r for r in load_records(path)}
    for r in new:
        keep[_key(r)] = r
    rows = sorted(keep.values(), key=_key)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(rows, indent=1) + "\n")
    return rows


def _f(x, fmt="{:.3f}", none="-"):
    return none if x is None else fmt.format(x)


def native_messages(native: str, ranks: int, nbytes: int) -> int:
    """Point-to-point messages of SimGrid 3.32's allgather under the selectors the suite
    uses, at P >= 8 and P x nbytes beyond their small-message thresholds (50,000 B for
    ompi, 524,288 B for mpich): ompi picks the ring for odd P and the neighbour exchange
    for even P (P / 2 steps, one message per rank and step), mpich the ring (P - 1 steps)."""
    if native == "native:ompi" and ranks * nbytes >= 50000:
        return ranks * (ranks - 1) if ranks % 2 else ranks * (ranks // 2)
    if native == "native:mpich" and ranks * nbytes >= 524288:
        return ranks * (ranks - 1)
    raise ValueError(f"no message count for {native} at {ranks} x {nbytes} bytes")


def launch_messages(r: dict) -> int | None:
    """Messages of a whole launch: (warm-up + timed) x (compact call + native call)."""
    if not r.get("messages"):
        return None
    try:
        nat = native_messages(r["native"], r["ranks"], r["bytes"])
    except ValueError:
        return None
    return (1 + r.get("warmup", 0)) * (r["messages"] + nat)


def _projection(records: list[dict]) -> list[str]:
    """CPU per message of every launch, and what the largest measured P says about P = 4096."""
    per = [(r, r["cpu_s"] / launch_messages(r)) for r in records if launch_messages(r)]
    if not per:
        return []
    out = [f"- Simulator CPU per point-to-point message (a launch's CPU over its messages: warm-up and "
           f"timed calls of the compact schedule and of the native one): "
           f"{min(c for _, c in per) * 1e6:.0f}-{max(c for _, c in per) * 1e6:.0f} us."]
    below = [(r, c) for r, c in per if r["ranks"] < 4096]
    if below:
        top = max(r["ranks"] for r, _ in below)
        for r, c in below:
            if r["ranks"] != top:
                continue
            at = dict(r, ranks=4096)
            at["messages"] = r["messages"] * (4096 * 4095) // (top * (top - 1)) if r["algorithm"] != "bruck" else None
            m = launch_messages(at) if at["messages"] else None
            if m is None:
                continue
            share = r["cpu_s"] / r["wall_s"]
            alone = at["messages"] * c  # one call of the compact schedule, no warm-up, no native
            out.append(f"- Projection from P = {top} to 4096 ({r['topology']}, compact {r['algorithm']} alone, "
                       f"one call, setup included): {at['messages']:,} messages, {alone:.0f} s of CPU, "
                       f"{alone / share / 60:.0f} minutes at this launch's CPU share, {alone / 60:.0f} at a "
                       f"whole core.")
            mem = r["sim_private_peak_mib"] / launch_messages(r)  # MiB per message, the fixed part included
            out.append(f"- Projection from P = {top} to 4096 ({r['topology']}, compact {r['algorithm']} + "
                       f"{r['native']}): {m:,} messages per launch, {m * c:.0f} s of simulator CPU at "
                       f"{c * 1e6:.0f} us per message; {m * c / share / 60:.0f} minutes of wall time at this "
                       f"launch's CPU share ({share:.2f} of a core), {m * c / 60:.0f} at a whole core; "
                       f"{m * mem / 1024:.1f} GiB of simulator private memory if it grows with the messages "
                       f"as here ({mem * 2**20:.0f} B per message, the fixed part included; the compact call "
                       f"alone: {at['messages'] * mem / 1024:.1f} GiB).")
    return out


def markdown(records: list[dict], failures: list[str] = ()) -> str:
    failures = list(dict.fromkeys([r["failed"] for r in records if "failed" in r] + list(failures)))
    records = [r for r in records if "failed" not in r]
    lines = ["## Lab: scale with compact schedules", "",
             "Written by `collsched bench --suite scale-compact --ranks P[,P...] --doc docs/benchmarks.md` "
             "(`make bench-scale-compact`; lab/scale_compact.py) from its records "
             "(out/scale-compact/records.json, one per row, the latest kept). SimGrid 3.32 SMPI, 64 KiB "
             "per rank, one launch per row: `collsched-run RECORD --compare --iterations 1 --warmup 1 "
             "--shared-sample K`, i.e. an untimed warm-up call of the compact schedule (the ranks' "
             "agreement on the record and every rank's list generation) and of MPI_Allgather under the "
             "native selector, then the timed call of each, each call after a barrier. Receive buffers are SMPI's partial shared malloc: "
             "private, and checked on every rank against the driver's pattern, are the first 4 KiB of "
             "K sampled origins' blocks (the same origins on every rank: 0, P-1 and K-2 drawn with a "
             "fixed seed) and the guard after the last block; the rest is one shared copy. "
             "`data` covers both calls of the launch; `compact` means the record's schedule ran (no "
             "fallback).", "",
             "Model: the compact per-level model (`compact.model.summary`); ratio = simulated / "
             "predicted. CPU: user + system time of the simulator; private memory: its peak RssAnon + "
             "page tables (sampled from /proc/PID/status; shared pages once); machine: peak "
             "MemTotal - MemAvailable beyond the start (/proc/meminfo, as `--suite scale`; other jobs "
             "on this shared machine show in it). Network model CM02 (SMPI's default model, `SMPI`, adds "
             "its piecewise size factors; the lab's rule for each model: docs/lab.md).", ""]
    if not records:
        lines.append("No records yet.")
    else:
        lines += ["| P | topology | schedule | record bytes | messages | simulated s | model s | ratio | "
                  "native | native simulated s | compact / native | data (sampled) | wall s | CPU s | "
                  "private MiB | machine MiB | started (UTC), load |",
                  "|--:|:--|:--|--:|--:|--:|--:|--:|:--|--:|--:|:--|--:|--:|--:|--:|:--|"]
        for r in records:
            data = ("ok" if r["data_ok"] else "WRONG") + ("" if r["used_schedule"] else " (fallback)")
            data += f", {r['sampled_origins']} origins x {r['checked_bytes_per_block']} B"
            ratio = r["simulated_s"] / r["native_simulated_s"] if r.get("native_simulated_s") else None
            lines.append(
                f"| {r['ranks']} | {r['topology']} | compact {r['algorithm']} | {r['record_bytes']} | "
                f"{_f(r.get('messages'), '{:,}')} | {r['simulated_s']:.4f} | {_f(r.get('predicted_s'), '{:.4f}')} | "
                f"{_f(r.get('ratio'))} | {r['native']} | {_f(r.get('native_simulated_s'), '{:.4f}')} | "
                f"{_f(ratio)} | {data} | {r['wall_s']:.0f} | {r['cpu_s']:.0f} | "
                f"{r['sim_private_peak_mib']:.0f} | {r['machine_used_peak_mib']:.0f} | "
                f"{r['started_utc']}, {r['load_before']:.1f}-{r['load_after']:.1f} |")
        topos = sorted({(r["topology"], r["topology_file"]) for r in records})
        lines += [""] + [f"- `{t}`: {f}." for t, f in topos]
        machines = sorted({r["machine"] for r in records})
        lines.append(f"- Machine: {'; '.join(machines)}, shared with other jobs (load: the 1-minute "
                     "load average before and after the launch).")
        lines += _projection(records)
    lines += ["", "How, and what bounds it:", "",
              "- Buffers: P receive buffers of P x 64 KiB are 1 TiB at P = 4096, and the lab's existing "
              "scheme (the first 4 KiB of every block private) maps two regions per block and rank, 2 P^2 "
              "in all (33.5 million at 4096). Sampling K origins keeps about 3 K maps per rank; SMPI maps "
              "its shared parts in blocks of `smpi/shared-malloc-blocksize`, raised to 64 MiB so that each "
              "shared range is one or two maps; `vm.max_map_count` is raised to 1,048,576 by the make "
              "target. The sampling does not change simulated times (a test compares it with every byte "
              "private at P = 64).",
              "- SimGrid settings: `smpi/simulate-computation:no` (no benchmarking of the code between MPI "
              "calls), `smpi/test:0`, CM02. The simulator's CPU per message is SimGrid's own (a flat "
              "profile: context switches, request matching, the max-min solver; the largest single "
              "item a list walk inside SimGrid), and a launch's messages grow as P^2 (the ring, the hier schedule and "
              "the native ring or neighbour exchange); its private memory grew steadily during the "
              "1024-rank launches, with the messages. Not usable here: turning smpirun's "
              "privatization off (the runtime keeps per-process state in globals) and parallel contexts "
              "(they need dlopen privatization, one copy of the program per rank).",
              "- Timing: the row's call is the second one (the first is an untimed warm-up of both), each "
              "after MPI_Barrier, timed per rank from its own barrier exit, the slowest rank's time. On the "
              "grid ranks leave the barrier up to a WAN latency apart, which the model (all ranks start "
              "together) does not see: there the ratio includes that skew. The lab's mini-benchmark, which "
              "predicts from each rank's measured arrival, is the check of the model on the grid "
              "(`collsched bench --topology ... --algorithms hier`)."]
    if failures:
        lines += ["", "Launches that did not finish (the latest attempt of each; what they had used when "
                      "stopped):", ""] + [f"- {f}" for f in failures]
    return "\n".join(lines) + "\n"


# ---- the suite ------------------------------------------------------------------------------

def cases_for(ranks: list[int], topologies=("cluster", "grid"), pairs=None) -> list[Case]:
    pairs = pairs or DEFAULT_PAIRS
    return [Case(p, t, a, n) for p in ranks for t in topologies for a, n in pairs[t]]


def run_suite(ranks: list[int], records_path: Path, network_model: str = "CM02",
              sample: int = SAMPLE_ORIGINS, timeout_s: float = DEFAULT_TIMEOUT_S,
              topologies=("cluster", "grid"), pairs=None, workdir: str | None = None,
              progress=None, warmup: int = WARMUP) -> tuple[list[dict], list[str]]:
    """Every case; each record is saved as soon as it is measured. Returns (all records,
    failures of this invocation)."""
    if shutil.which("smpirun") is None:
        raise InputError("smpirun", "", "not found: install libsimgrid-dev (make deps)")
    failures, rows = [], load_records(records_path)
    tmp = Path(workdir or tempfile.mkdtemp(prefix="collsched-scale-compact-")).resolve()
    tmp.mkdir(parents=True, exist_ok=True)
    cache: dict = {}
    try:
        for case in cases_for(ranks, topologies, pairs):
            if progress:
                progress(case)
            try:
                rec = run_case(case, tmp, network_model, sample, timeout_s, cache, warmup)
            except ScaleRunError as e:
                failures.append(f"P = {case.ranks}, {case.topology}, {case.algorithm} with {case.native}: {e} "
                                f"(ended {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
                                f"load {os.getloadavg()[0]:.1f})")
                rows = save_records(records_path, [{
                    "ranks": case.ranks, "topology": case.topology, "algorithm": case.algorithm,
                    "native": case.native, "warmup": warmup, "failed": failures[-1]}])
                continue
            rows = save_records(records_path, [rec])
    finally:
        if workdir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    return rows, failures


def bench_cli(a) -> int:
    """`collsched bench --suite scale-compact`: --ranks (default 1024), --algorithms as
    ALG:NATIVE pairs (default: ring:native:ompi,bruck:native:mpich on the cluster,
    hier twice on the grid), --topology cluster|grid|cluster,grid, --doc."""
    EXIT_OK, EXIT_INVALID = 0, 1  # cli.py's

    text = a.ranks or "1024"
    if not all(x.isascii() and x.isdigit() for x in text.split(",")):
        raise InputError("--ranks", text[:40], "expected comma-separated rank counts, e.g. 1024,4096")
    ranks = [int(x) for x in text.split(",")]
    for p in ranks:
        if p < 8 or p % GRID_SITES:
            raise InputError("--ranks", str(p), f"expected rank counts of at least 8, multiples of {GRID_SITES}")
    topologies = tuple((a.topology or "cluster,grid").split(","))
    for t in topologies:
        if t not in DEFAULT_PAIRS:
            raise InputError("--topology", t, "expected cluster, grid or both (comma-separated) "
                                              "for --suite scale-compact")
    pairs = None
    if a.algorithms:
        chosen = []
        for item in a.algorithms.split(","):
            alg, _, nat = item.partition(":")
            if not nat.startswith("native"):
                raise InputError("--algorithms", item, "expected ALGORITHM:native:SELECTOR pairs, "
                                                       "e.g. ring:native:ompi")
            chosen.append((alg, nat))
        pairs = {t: tuple(chosen) for t in topologies}
    out = Path(getattr(a, "out", None) or "out") / "scale-compact" / "records.json"
    records, failures = run_suite(ranks, out, a.network_model, topologies=topologies, pairs=pairs,
                                  progress=lambda c: print(f"scale-compact: P = {c.ranks} {c.topology} "
                                                           f"{c.algorithm} + {c.native}", flush=True))
    md = markdown(records, failures)
    if a.doc:
        from .benchdoc import replace_section

        replace_section(a.doc, SECTION, md)
    print(md)
    fresh = [r for r in records if r["ranks"] in ranks and r["topology"] in topologies and "failed" not in r]
    ok = not failures and all(r["data_ok"] and r["used_schedule"] for r in fresh)
    return EXIT_OK if ok else EXIT_INVALID


if __name__ == "__main__":  # the section again from the records, without running anything
    import argparse

    ap = argparse.ArgumentParser(description="write the lab-scale-compact section from its records")
    ap.add_argument("--records", default="out/scale-compact/records.json")
    ap.add_argument("--doc", default="docs/benchmarks.md")
    opt = ap.parse_args()
    from .benchdoc import replace_section

    replace_section(opt.doc, SECTION, markdown(load_records(Path(opt.records))))
