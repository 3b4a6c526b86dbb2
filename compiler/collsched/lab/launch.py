"""Launching real MPI jobs: a launcher template, host files, binding, and one way to run and
stop a launch (docs/lab.md, "Launchers").

`bench --backend mpi` (lab/runner.py, the recurring suite through it) and `measure
--backend mpi` (lab/measure.py) build every real-MPI command here.

* A launcher is a preset (`mpirun`, `mpiexec`, `srun`) or a template: a command line, split
  as a shell would (shlex), whose words may hold the placeholders `{ranks}` (P), `{program}`
  (the program and its arguments: a word of its own, exactly once) and `{hostfile}` (the
  absolute path of --hostfile); `{{` and `}}` are literal braces. Presets are templates:
  mpirun = `mpirun -np {ranks} {program}`, mpiexec = `mpiexec -n {ranks} {program}`, srun =
  `srun -n {ranks} {program}`.
* The launcher's family comes from its executable's `--version`: Open MPI's mpirun/mpiexec
  (`openmpi`), SLURM's srun (`slurm`), anything else (`other`). What collsched adds goes
  right before `{program}`, in the family's own syntax: Open MPI: `--allow-run-as-root` when
  root, `--oversubscribe` (and OMPI_MCA_rmaps_base_oversubscribe=1) only when P exceeds the
  slots (the host file's, else this machine's cores) and the template does not say it
  already, `--hostfile FILE` (presets), `--bind-to X` when asked, `--mca K V` (native:NAME),
  `-x NAME` for the run's own environment variables (remote hosts get them too); srun:
  `--cpu-bind=X` when asked (core -> cores, ...), native:NAME through OMPI_MCA_ variables in
  the environment (srun passes its environment on). `other` gets nothing added: its
  template says everything; --bind-to is refused for it, native:NAME goes through the
  environment.
* run() starts the command in a session of its own and, at the time-out or an interrupt,
  stops the whole process group (SIGTERM, SIGKILL 5 s later): the launcher's ranks go too.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import string
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError

PRESETS = {"mpirun": "mpirun -np {ranks} {program}",
           "mpiexec": "mpiexec -n {ranks} {program}",
           "srun": "srun -n {ranks} {program}"}
DEFAULT = "mpirun"
PLACEHOLDERS = ("ranks", "program", "hostfile")
# Open MPI's --bind-to targets; srun's --cpu-bind names for those it has.
BIND_TO = ("none", "hwthread", "core", "l1cache", "l2cache", "l3cache", "socket", "numa", "board")
SRUN_BIND = {"none": "none", "hwthread": "threads", "core": "cores", "socket": "sockets", "numa": "ldoms"}
MAX_HOSTFILE_BYTES = 1 << 20
# The suites that run a user's SimGrid platform (--platform FILE.xml --hostfile FILE; the
# intergroup cases check theirs in intergroup_run.py).
PLATFORM_SUITES = ("lab", "model", "recurring", "intergroup", "platforms")
_HOST = re.compile(r"[A-Za-z0-9_.:\[\]-]{1,255}", re.ASCII)
_SLOTS = re.compile(r"(slots|max_slots|max-slots)=([0-9]{1,9})", re.ASCII)


@dataclass(frozen=True)
class HostFile:
    """A validated host file: `host [slots=N] [max_slots=N]` lines, `#` comments."""

    path: str  # absolute
    hosts: tuple  # ((name, slots or None), ...) in file order

    def slots(self) -> int:
        """The slots Open MPI sees: slots=N, else this machine's cores for a line naming
        this machine (Open MPI counts the host's cores), else 1 (a lower bound: collsched
        cannot count a remote host's cores; write slots=N)."""
        local = _local_names()
        return sum(n if n is not None else (local_cores() if h in local else 1) for h, n in self.hosts)


def require_map_count(need: int, what: str, make_target: str | None = None) -> None:
    """InputError (one line) when vm.max_map_count is below `need`, the memory maps an SMPI
    run with shared-malloc buffers will ask for (`what`: for what, in the message);
    nothing where the limit cannot be read (not Linux)."""
    try:
        have = int(Path("/proc/sys/vm/max_map_count").read_text())
    except (OSError, ValueError):
        return
    if have < need:
        does = f"; `make {make_target}` does it" if make_target else ""
        raise InputError("vm.max_map_count", str(have), f"expected at least {need} for {what} "
                         f"(as root: sysctl -w vm.max_map_count={need}{does})")


def used_mib() -> float:
    """Memory in use on the machine (MemTotal - MemAvailable, /proc/meminfo), MiB: what the
    scale suites sample (getrusage counts SMPI's shared pages once per mapping)."""
    info = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, value = line.split(":", 1)
            info[key] = int(value.split()[0])
    return (info["MemTotal"] - info["MemAvailable"]) / 1024


def local_cores() -> int:
    """Physical cores of this machine (what Open MPI counts as slots without a host file)."""
    try:
        pairs, phys = set(), "0"
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, val = line.partition(":")
            key = key.strip()
            if key == "physical id":
                phys = val.strip()
            elif key == "core id":
                pairs.add((phys, val.strip()))
        if pairs:
            return len(pairs)
    except OSError:
        pass
    return os.cpu_count() or 1


def _local_names() -> set[str]:
    names = {"localhost", "127.0.0.1", "::1"}
    try:
        host = socket.gethostname()
        names |= {host, host.split(".")[0]}
    except OSError:
        pass
    return names


def parse_hostfile(path: str, flag: str = "--hostfile") -> HostFile:
    """Read and validate a host file; one InputError naming the file (and line) else."""
    p = Path(path)
    try:
        if not p.is_file():
            raise InputError(str(path), flag, "expected an existing host file (lines `host [slots=N]`)")
        if p.stat().st_size > MAX_HOSTFILE_BYTES:
            raise InputError(str(path), flag, f"expected a host file of at most {MAX_HOSTFILE_BYTES} bytes")
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(str(path), flag, "expected a text host file (UTF-8)") from None
    except OSError as e:
        raise InputError(str(path), flag, f"cannot read it: {e.strerror}") from None
    hosts = []
    for n, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        host, slots = words[0], None
        ok = bool(_HOST.fullmatch(host)) and "=" not in host
        for w in words[1:]:
            m = _SLOTS.fullmatch(w)
            if m is None or int(m.group(2)) < 1:
                ok = False
            elif m.group(1) == "slots":
                slots = int(m.group(2))
        if not ok:
            raise InputError(str(path), f"line {n}", "expected `host [slots=N] [max_slots=N]` "
                                                     "(N a whole number of at least 1)")
        hosts.append((host, slots))
    if not hosts:
        raise InputError(str(path), flag, "expected at least one line `host [slots=N]`")
    return HostFile(str(p.resolve()), tuple(hosts))


_FLAVORS: dict[str, str] = {}


def _flavor(executable: str) -> str:
    """openmpi, slurm or other, from `EXECUTABLE --version` (cached per path)."""
    if executable not in _FLAVORS:
        try:
            proc = subprocess.run([executable, "--version"], capture_output=True, text=True, timeout=20,
                                  stdin=subprocess.DEVNULL)
            out = (proc.stdout + proc.stderr).lower()
        except (OSError, subprocess.SubprocessError):
            out = ""
        _FLAVORS[executable] = ("openmpi" if "open mpi" in out or "openrte" in out
                                else "slurm" if "slurm" in out else "other")
    return _FLAVORS[executable]


@dataclass(frozen=True)
class Launcher:
    """A validated launcher: template words, its family, host file, binding."""

    template: str  # as given: a preset name or a template
    words: tuple  # the template, shlex-split (placeholders unexpanded)
    executable: str  # the resolved path of words[0]
    flavor: str  # openmpi | slurm | other
    hostfile: HostFile | None = None
    bind_to: str | None = None

    def describe(self) -> dict:
        """What a report records of it (JSON)."""
        return {"launcher": self.template, "flavor": self.flavor,
                "hostfile": self.hostfile.path if self.hostfile else None, "bind_to": self.bind_to}

    def command(self, ranks: int, program: list[str], mca: dict | None = None,
                forward: tuple = ()) -> tuple[list[str], dict]:
        """(argv, environment variables to add) that start `program` on `ranks` ranks.
        mca: Open MPI MCA parameters (native:NAME); forward: names of environment variables
        the ranks must see on every host (Open MPI: -x NAME)."""
        mca = dict(mca or {})
        extra, env = [], {}
        preset = self.template in PRESETS
        if self.flavor == "openmpi":
            if os.geteuid() == 0 and "--allow-run-as-root" not in self.words:
                extra.append("--allow-run-as-root")
            slots = self.hostfile.slots() if self.hostfile else local_cores()
            asked = "--oversubscribe" in self.words or "-oversubscribe" in self.words
            if ranks > slots and not asked:
                extra.append("--oversubscribe")
            if ranks > slots or asked:
                env["OMPI_MCA_rmaps_base_oversubscribe"] = "1"
            if self.hostfile and preset:
                extra += ["--hostfile", self.hostfile.path]
            if self.bind_to:
                extra += ["--bind-to", self.bind_to]
            for k, v in mca.items():
                extra += ["--mca", k, str(v)]
            for name in forward:
                extra += ["-x", name]
        else:
            if self.bind_to:  # make_launcher refused it for `other`
                extra.append(f"--cpu-bind={SRUN_BIND[self.bind_to]}")
            env.update({f"OMPI_MCA_{k}": str(v) for k, v in mca.items()})
        argv = []
        for word in self.words:
            if word == "{program}":
                argv += extra + [str(x) for x in program]
            else:
                argv.append(word.format(ranks=ranks, hostfile=self.hostfile.path if self.hostfile else ""))
        return argv, env


def _fields(word: str, template: str) -> list[str]:
    try:
        parsed = list(string.Formatter().parse(word))
    except ValueError as e:  # a lone { or }
        raise InputError("--launcher", template, f"expected placeholders as {{ranks}}, {{program}}, "
                                                 f"{{hostfile}} ({{{{ and }}}} for braces): {e}") from None
    names = []
    for _, name, spec, conv in parsed:
        if name is None:
            continue
        if name in PLACEHOLDERS and (spec or conv):
            raise InputError("--launcher", template, f"expected {{{name}}} as it is, without a format "
                                                     f"or conversion")
        if name not in PLACEHOLDERS:
            raise InputError("--launcher", template, f"unknown placeholder {{{name}}}: expected "
                                                     f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)}")
        names.append(name)
    return names


def make_launcher(template: str | None = None, hostfile: str | None = None,
                  bind_to: str | None = None) -> Launcher:
    """Validate a launcher (a preset name or a template), its host file and binding; one
    InputError naming the option at fault else. Nothing runs but `EXE --version`."""
    given = DEFAULT if template is None else str(template)
    text = PRESETS.get(given.strip(), given)
    try:
        words = shlex.split(text)
    except ValueError as e:
        raise InputError("--launcher", given, f"expected a command line a shell could split: {e}") from None
    if not words:
        raise InputError("--launcher", given, f"expected {', '.join(PRESETS)} or a template such as "
                                              "'mpirun -np {ranks} {program}'")
    used = {w: _fields(w, given) for w in words}
    names = [n for w in words for n in used[w]]
    if words.count("{program}") != 1 or names.count("program") != 1:
        raise InputError("--launcher", given, "expected {program} exactly once, as a word of its own "
                                              "(e.g. 'mpiexec -n {ranks} {program}')")
    if "ranks" not in names:
        raise InputError("--launcher", given, "expected {ranks} (the number of ranks), e.g. "
                                              "'mpiexec -n {ranks} {program}'")
    if used[words[0]]:
        raise InputError("--launcher", given, "expected the launcher's executable first, not a placeholder")
    exe = shutil.which(words[0])
    if exe is None:
        raise InputError("--launcher", given, f"{words[0]}: executable not found")
    flavor = _flavor(exe)
    preset = given.strip() in PRESETS
    if preset and given.strip() in ("mpirun", "mpiexec") and flavor != "openmpi":
        raise InputError("--launcher", given, f"{exe} is not Open MPI's (the runtime is built with Open "
                                              "MPI); give a template for another launcher")
    hf = None
    if hostfile is not None:
        hf = parse_hostfile(hostfile)
        if flavor == "slurm":
            raise InputError("--hostfile", str(hostfile), "not with srun: SLURM places ranks from its "
                             "allocation (salloc/sbatch --nodelist, or SLURM_HOSTFILE with "
                             "--distribution=arbitrary in a template)")
        if not preset and "hostfile" not in names:
            raise InputError("--hostfile", str(hostfile), "the --launcher template does not name "
                                                          "{hostfile}: put it where the launcher takes it")
    elif "hostfile" in names:
        raise InputError("--launcher", given, "names {hostfile}: expected --hostfile FILE too")
    if bind_to is not None:
        if bind_to not in BIND_TO:
            raise InputError("--bind-to", str(bind_to), f"expected one of {', '.join(BIND_TO)}")
        if flavor == "other":
            raise InputError("--bind-to", bind_to, f"{Path(exe).name} is neither Open MPI's nor srun: "
                                                   "write its binding option in the --launcher template")
        if flavor == "slurm" and bind_to not in SRUN_BIND:
            raise InputError("--bind-to", bind_to, f"srun has no such binding; it offers "
                                                   f"{', '.join(SRUN_BIND)}")
        if any(w.startswith(("--bind-to", "--cpu-bind", "--map-by")) for w in words):
            raise InputError("--bind-to", bind_to, "the --launcher template binds already")
    return Launcher(given, tuple(words), exe, flavor, hf, bind_to)


def check_options(suite: str, backend: str, launcher: str | None, hostfile: str | None,
                  bind_to: str | None, platform: str | None = None) -> None:
    """The command line's --launcher, --hostfile, --bind-to (real MPI's, for the suites that
    launch it: lab, recurring) and --platform with --hostfile (SMPI's: a user's SimGrid
    platform, for the suites that run SMPI on one: PLATFORM_SUITES); checked whole
    (template, host file, binding; the platform and its host file) before anything runs.
    One InputError naming the first option at fault else."""
    from .simgrid_platform import check_options as check_platform, load_platform

    if check_platform(backend, platform, hostfile):
        if suite not in PLATFORM_SUITES:
            runs = "no SimGrid" if suite in ("compiler", "compile-grid") else "its own platforms"
            raise InputError("--platform", platform, f"expected only with --suite "
                                                     f"{', '.join(PLATFORM_SUITES)}: {suite} runs {runs}")
        load_platform(platform, hostfile)
        hostfile = None  # the platform's; what is left is real MPI's
    given = [(f, v) for f, v in (("--launcher", launcher), ("--hostfile", hostfile), ("--bind-to", bind_to))
             if v is not None]
    if not given:
        return
    flag, value = given[0]
    if suite not in ("lab", "recurring"):
        raise InputError(flag, value, "expected only with --suite lab or recurring (--backend mpi)")
    if backend != "mpi":
        raise InputError(flag, value, "only with --backend mpi (SMPI places ranks from the platform)")
    make_launcher(launcher, hostfile, bind_to)


# --- running one launch ---------------------------------------------------------------------

class LaunchTimeout(RuntimeError):
    """The launch did not finish within its time-out (its process group was stopped)."""


class LabRunError(RuntimeError):
    """A benchmark launch failed (crash, time-out, no result line)."""


@dataclass
class Finished:
    returncode: int
    stdout: str
    stderr: list  # lines, without their newline
    wall_s: float


def run(cmd: list[str], env: dict, cwd, timeout_s: float, on_stderr=None, capture_stdout: bool = True) -> Finished:
    """Run `cmd` in a session of its own; on_stderr(line) sees every stderr line as it comes
    (progress). At timeout_s, or if interrupted, the whole process group is stopped (the
    launcher's ranks with it); a time-out raises LaunchTimeout."""
    timed_out = threading.Event()
    out_parts: list[str] = []
    err: list[str] = []
    start = time.perf_counter()
    with subprocess.Popen(cmd, cwd=cwd, env=env, text=True, errors="replace", stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE if capture_stdout else subprocess.DEVNULL,
                          stderr=subprocess.PIPE, start_new_session=True) as proc:
        reader = None
        if capture_stdout:
            reader = threading.Thread(target=lambda: out_parts.append(proc.stdout.read()), daemon=True)
            reader.start()

        def kill():
            timed_out.set()
            stop_group(proc)

        watchdog = threading.Timer(timeout_s, kill)
        watchdog.daemon = True
        watchdog.start()
        try:
            for line in proc.stderr:
                line = line.rstrip("\n")
                if on_stderr is not None:
                    on_stderr(line)
                err.append(line)
            proc.wait()
            if reader is not None:
                reader.join()
        finally:
            watchdog.cancel()
            if proc.poll() is None:  # interrupted (e.g. Ctrl-C): do not leave MPI behind
                stop_group(proc)
                proc.wait()
    wall = time.perf_counter() - start
    if timed_out.is_set():
        raise LaunchTimeout(f"{Path(cmd[0]).name} did not finish within {timeout_s:g} s")
    return Finished(proc.returncode, "".join(out_parts), err, wall)


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the launcher's process group (mpirun then stops its ranks), SIGKILL after 5 s."""
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def run_driver(cmd: list[str], env: dict, cwd, timeout_s: float, label: str, driver: str = "the driver") -> dict:
    """Run a lab driver (minibench, inter-bench, coll-bench) and return its JSON result line
    (the first stdout line starting with "{") with wall_s and the command; LabRunError, one
    line naming `label`, on a time-out, a failure or a missing result line."""
    try:
        done = run(cmd, env, cwd, timeout_s)
    except LaunchTimeout:
        raise LabRunError(f"{label}: {cmd[0]} did not finish within {timeout_s:g} s") from None
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("{")), None)
    if done.returncode == 0 and line is None:
        raise LabRunError(f"{label}: {cmd[0]} exited 0 without {driver}'s result line on stdout "
                          "(a launcher option that rewrites the program's output?)")
    if done.returncode != 0 or line is None:
        # the last line that says something (Open MPI frames its messages with dashes)
        tail = ([ln for ln in done.stderr if any(c.isalnum() for c in ln)] or ["(no output)"])[-1].strip()
        raise LabRunError(f"{label}: {cmd[0]} failed (exit {done.returncode}): {tail}")
    out = json.loads(line)
    out["wall_s"] = done.wall_s
    out["command"] = cmd
    return out
