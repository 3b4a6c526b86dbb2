"""The reduction cost gamma (seconds per reduced byte), measured the way `collsched measure`
measures links: runtime/measure/collsched_gamma.c under real MPI or SimGrid SMPI, with the
same launchers and platforms (lab/measure.py passes its _launch in; this module does not
import it: measure.py calls this one).

Every rank times MPI_Reduce_local(MPI_DOUBLE, MPI_SUM) over a few sizes at once, fits
time = a + gamma * bytes on relative residuals, and the median gamma over ranks is what
the topology's `reduction: {gamma_s_per_byte: ...}` section gets (inputs/compute.py,
docs/inputs.md "Reduction cost"). docs/measure.md, "Reduction cost (gamma)", has the
figures and what SMPI makes of it: MPI_Reduce_local takes no simulated time there (with
smpi/simulate-computation off, the lab's setting, and on: SimGrid benchmarks the code
between MPI calls, not inside them), so gamma measures 0, which is what the models must
assume to match SMPI runs.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..errors import InputError
from ..files import write_atomic

FORMAT = "collsched-gamma/1"
PROGRAM = "collsched-gamma"
DEFAULT_SIZES = (4096, 16384, 65536, 262144, 1048576, 4194304)
# Below this (100 TB/s) a fit measures only the clock: SMPI, whose MPI_Reduce_local takes
# no simulated time (MPI_Wtime's own 10 ns of smpi/wtime is all a run sees).
NO_COST_S_PER_BYTE = 1e-14


class GammaRunError(RuntimeError):
    """The gamma program failed or wrote something unexpected (one line)."""


def program_argv(path, result, sizes=DEFAULT_SIZES, repeats: int = 5) -> list[str]:
    return [str(path), "--sizes", ",".join(str(int(s)) for s in sizes), "--repeats",
            str(int(repeats)), "--output", str(result)]


def check_result(raw, ranks: int) -> float:
    """gamma (s/byte) from the program's JSON; GammaRunError when it is not what it wrote."""
    if not isinstance(raw, dict) or raw.get("format") != FORMAT or raw.get("ranks") != ranks:
        got = raw.get("format") if isinstance(raw, dict) else type(raw).__name__
        raise GammaRunError(f"gamma: unexpected result (format {got!r}; expected {FORMAT} "
                            f"with {ranks} ranks)")
    g = raw.get("gamma_median_s_per_byte")
    if isinstance(g, bool) or not isinstance(g, (int, float)) or not 0 <= g < 1:
        raise GammaRunError(f"gamma: unexpected gamma_median_s_per_byte {g!r}")
    return float(g)


def run_gamma(cfg, launch, path, progress=None, *, sizes=DEFAULT_SIZES, repeats: int = 5) -> dict:
    """Run collsched-gamma (at `path`) as `collsched measure` runs its programs: launch is
    lab.measure._launch (cfg: its MeasureConfig; its MeasureRunError passes through).
    Returns the program's JSON with "gamma_s_per_byte" (the median over ranks, 0 below
    NO_COST_S_PER_BYTE), "gamma_s_per_byte_rank" (per rank) and "wall_s"."""
    if not Path(path).exists():
        raise InputError(str(path), "", "not built: run `make` (or `make measure`) first")
    raw = launch(cfg, lambda _w, result: program_argv(path, result, sizes, repeats),
                 progress and (lambda _p, d, t: progress("gamma", d, t)), PROGRAM)
    raw["gamma_s_per_byte_rank"] = raw.get("gamma_s_per_byte")
    g = check_result(raw, cfg.ranks)
    raw["gamma_s_per_byte"] = g if g >= NO_COST_S_PER_BYTE else 0.0
    return raw


def add_to_topology(path, gamma: float, comment: str | None = None) -> None:
    """Write `reduction: {gamma_s_per_byte: gamma}` into the topology file at `path`
    (replacing one that is there), atomically; the file must load before and after."""
    from ..inputs.topology import load_topology

    path = Path(path)
    load_topology(path)  # a broken file is reported as it is, not rewritten
    lines = path.read_text().splitlines(keepends=True)
    out, skip = [], False
    for line in lines:
        if line.startswith("reduction:"):
            skip = True  # the old section (a flow mapping or an indented block)
            continue
        if skip and (line.startswith((" ", "\t")) or not line.strip()):
            continue
        skip = False
        out.append(line)
    text = "".join(out)
    if text and not text.endswith("\n"):
        text += "\n"
    if comment:
        text += "".join(f"# {c}\n" for c in comment.splitlines())
    text += f"reduction: {{gamma_s_per_byte: {float(gamma)!r}}}\n"
    write_atomic(path, text)
    try:
        load_topology(path)
    except InputError as e:  # cannot happen with a file that loaded: say so plainly
        raise GammaRunError(f"gamma: the topology no longer loads after adding reduction: {e}") from None


def summary_line(raw: dict, backend: str) -> str:
    g = raw["gamma_s_per_byte"]
    what = "SMPI" if backend == "smpi" else "real MPI"
    return (f"reduction: gamma {g * 1e9:.4g} ns/byte ({1 / g / 1e9:.3g} GB/s) over "
            f"{raw['ranks']} ranks ({what})" if g > 0 else
            f"reduction: gamma 0 ({what}: MPI_Reduce_local takes no measured time)")


def measure_gamma(cfg, launch, path, output=None, progress=None, **kw) -> dict:
    """run_gamma, then (output given) the topology file's reduction section; returns
    add_measured's report."""
    raw = run_gamma(cfg, launch, path, progress, **kw)
    return add_measured(output, raw, cfg.backend) if output is not None else report_of(raw, cfg.backend)


def add_measured(output, raw: dict, backend: str | None = None) -> dict:
    """The measured gamma into the topology file `output` (a reduction: section with a
    comment saying how it was measured); returns a JSON-able report."""
    backend = backend or ("smpi" if raw.get("smpi") else "mpi")
    add_to_topology(output, raw["gamma_s_per_byte"],
                    comment=f"reduction cost: collsched-gamma (MPI_Reduce_local, double, sum) on "
                            f"{'SMPI' if backend == 'smpi' else 'real MPI'}, median over "
                            f"{raw['ranks']} ranks of a fit a + gamma * bytes (docs/measure.md)")
    return report_of(raw, backend)


def report_of(raw: dict, backend: str) -> dict:
    return {"gamma_s_per_byte": raw["gamma_s_per_byte"], "ranks": raw["ranks"],
            "sizes": raw.get("sizes"), "per_rank_s_per_byte": raw.get("gamma_s_per_byte_rank"),
            "time_s": raw.get("time_s"), "hosts": raw.get("hosts"), "backend": backend,
            "wall_s": raw.get("wall_s"), "line": summary_line(raw, backend)}
