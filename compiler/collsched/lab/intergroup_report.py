"""Tables, Markdown sections and plots of the intergroup lab (intergroup.py, intergroup_suite.py).

Times are shown in ms; "time" is, per iteration, the largest elapsed time over the ranks
(averaged over the iterations); "bound" the paper's bound each algorithm is held to
(intergroup.ALGORITHM_BOUND); dag/fluid the predictions over the measured time.
"""
from __future__ import annotations

import datetime
import statistics

from rich.console import Console
from rich.table import Table

from ..intergroup import sizes
from .intergroup_suite import BOUND_FROM, BOUND_TOLERANCE, FIDELITY, SPEEDUP_FRACTION


def _ms(x) -> str:
    return "-" if x is None else f"{x * 1e3:.3f}"


def _f(x, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _size(b: int) -> str:
    if b >= 1 << 20 and b % (1 << 20) == 0:
        return f"{b >> 20} MiB"
    if b >= 1 << 10 and b % (1 << 10) == 0:
        return f"{b >> 10} KiB"
    return f"{b} B"


def case_title(report: dict) -> str:
    i = report["inputs"]
    net = f", {i['network_model']}" if report["backend"] == "smpi" else ""
    return (f"{report['backend']}{net}: {i['collective']}, {i['p']}:{i['q']} ranks, blocks A {i['sizes_a']} "
            f"B {i['sizes_b']} bytes, {i['iterations']} iteration(s)")


COLUMNS = ("algorithm", "time ms", "avg elapsed ms", "bound", "meas/bound", "dag/meas", "fluid/meas",
           "vs mpich", "vs native", "data")


def _cells(r: dict) -> list[str]:
    vs_native = r.get("speedup_over_native")
    return [r["algorithm"], _ms(r["time_s"]), _ms(r["avg_elapsed_s"]), r.get("bound", "-"),
            _f(r.get("bound_ratio")), _f(r.get("dag_ratio")), _f(r.get("fluid_ratio")),
            _f(r.get("speedup_over_root_gather_mpich"), 2), _f(vs_native, 2),
            "ok" if r["data_ok"] else f"WRONG ({r['errors']} bytes, {r['fallbacks']} fallbacks"
                                      f"{': ' + r['fallback_reason'] if r.get('fallback_reason') else ''})"]


def print_case(report: dict) -> None:
    t = Table(title=case_title(report))
    for col in COLUMNS:
        t.add_column(col, justify="left" if col in ("algorithm", "bound", "data") else "right")
    for r in report["results"]:
        t.add_row(*_cells(r))
    console = Console(width=max(120, Console().width))
    console.print(t)
    b = report.get("bounds")
    if b is None:
        return
    console.print(f"M = {_ms(b['M'])} ms, Eq. 1 {_ms(b['eq1'])} ms, Eq. 2 {_ms(b['eq2'])} ms, "
                  f"Eq. 5 ratio {b['eq5_ratio']:.2f} (t_s {b['t_s'] * 1e6:.1f} us, 1/t_w "
                  f"{1 / b['t_w'] / 1e6:.1f} MB/s)")


def case_markdown(report: dict, command: str) -> str:
    """One case as a Markdown section (bench --collective inter-* --doc)."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"### Intergroup: {case_title(report)}", "", f"`{command}` ({now}).", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_cells(r)) + " |" for r in report["results"]]
    return "\n".join(lines) + "\n"


# ---- the settings suite -----------------------------------------------------------------

def _yes(x: bool) -> str:
    return "**met**" if x else "not met"


def targets_markdown(report: dict) -> list[str]:
    out = ["| setting | alg | Eq. 5 | goal (80%) | vs mpich @ largest | speedup | vs root-gather | vs native "
           f"| meas/bound max (>= {_size(BOUND_FROM)}) | bound (<= {BOUND_TOLERANCE:.2f}) | dag/meas "
           "| fluid/meas | fidelity (+-15%) | data |", "|" + "---|" * 14]
    for t in report["targets"]:
        fid = t["fidelity"]
        rng = {m: f"{lo:.3f} .. {hi:.3f}" for m, (lo, hi) in fid.items()}
        met = t["fidelity_met"]
        out.append(f"| {t['setting']} | {t['algorithm']} | {sizes.EQ5[t['setting']]:.2f} | {t['speedup_goal']:.2f} "
                   f"| {_f(t['speedup_mpich'], 2)} | {_yes(t['speedup_met'])} | {_f(t['speedup_root_gather'], 2)} "
                   f"| {_f(t['speedup_native'], 2)} | {_f(t['bound_ratio_max'])} | {_yes(t['bound_met'])} "
                   f"| {rng.get('dag', '-')} | {rng.get('fluid', '-')} "
                   f"| {', '.join(f'{m} ' + ('met' if ok else 'not met') for m, ok in met.items()) or '-'} "
                   f"| {'ok' if t['data_ok'] else 'WRONG'} |")
    return out


# The bound the planning core proves for each new algorithm where the paper's theorem can
# fail (docs/intergroup.md: Theorem 1 needs q | p, Eq. 4 misses the ring's wait):
# cost.kang_bound and cost.kang_v_bound with their startup terms (intergroup/bounds.py).
PROVEN_BOUND = {"kang": "kang", "kang-v": "kang_v"}


def proven_ratio(case: dict, name: str) -> float | None:
    """Measured time of `name` over its proven bound in one case report, or None."""
    row = next((r for r in case["results"] if r["algorithm"] == name), None)
    bound = (case.get("bounds") or {}).get(PROVEN_BOUND.get(name, ""))
    return row["time_s"] / bound if row and bound else None


def settings_table(report: dict) -> list[str]:
    cols = ["setting", "p:q", "largest block", "alg", "alg ms", "root-gather ms", "mpich ms", "native ms",
            "vs mpich", "vs root-gather", "vs native", "bound", "meas/bound", "meas/proven bound", "dag/meas",
            "fluid/meas"]
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for st in report["settings"]:
        for c in st["cases"]:
            rows = {r["algorithm"]: r for r in c["results"]}
            k = rows.get(st["algorithm"], {})
            out.append(" | ".join([
                f"| {st['setting']}", f"{st['p']}:{st['q']}", _size(c["inputs"]["largest_block"]), st["algorithm"],
                _ms(k.get("time_s")), *(_ms(rows.get(b, {}).get("time_s")) for b in ("root-gather", "root-gather-mpich",
                                                                                     "native")),
                _f(k.get("speedup_over_root_gather_mpich"), 2), _f(k.get("speedup_over_root_gather"), 2),
                _f(k.get("speedup_over_native"), 2), k.get("bound", "-"), _f(k.get("bound_ratio")),
                _f(proven_ratio(c, st["algorithm"])), _f(k.get("dag_ratio")), _f(k.get("fluid_ratio"))]) + " |")
    return out


def fidelity_table(report: dict) -> list[str]:
    """Predicted over measured of every compiled algorithm, per setting: min .. max over sizes."""
    out = ["| setting | algorithm | dag/meas | fluid/meas |", "|---|---|---|---|"]
    for st in report["settings"]:
        names = [st["algorithm"], "root-gather", "root-gather-mpich"]
        for name in names:
            rows = [r for c in st["cases"] for r in c["results"] if r["algorithm"] == name]
            cells = []
            for m in ("dag", "fluid"):
                v = [r[f"{m}_ratio"] for r in rows if f"{m}_ratio" in r]
                cells.append(f"{min(v):.3f} .. {max(v):.3f}" if v else "-")
            out.append(f"| {st['setting']} | {name} | {cells[0]} | {cells[1]} |")
    return out


def settings_markdown(report: dict, command: str, plots: dict[str, str] | None = None) -> str:
    sizes_text = ", ".join(_size(b) for b in report["block_sizes"])
    lines = [
        f"### Intergroup allgather(v): the paper's settings 1-8 (SMPI, {report['network_model']})", "",
        f"`{command}`: {report['started']} to {report['finished']}, load {report['load']:.2f} (the 1-minute "
        f"average at the start). {report['ranks']} ranks, {report['topology']}, one rank per host; largest "
        f"block {sizes_text} (intergroup/sizes.py; the setting's unit rounded down); "
        f"{report['iterations']} timed iteration(s) after an untimed one (SimGrid is deterministic). "
        "Time: per iteration the largest elapsed time over the ranks. Compiled schedules run in "
        "libcollsched through collsched_inter_allgather(v)_merged (SMPI has no MPI_Intercomm_create); "
        "native: root gathering from SMPI's own MPI_Gather(v), MPI_Sendrecv and MPI_Bcast. Bound: "
        "Theorem 1 (kang), Theorem 3 / Eq. 4 (kang-v), Eq. 1 / Eq. 2 (root gathering) with the "
        "cluster's t_s = 50 us and t_w = 1 / (125 MB/s). Every received byte is checked at small sizes, "
        "one byte per MiB above 2 GiB of receive buffers in all (SMPI shared malloc).", "",
        "**Targets** (the issue's; met or not as measured):", ""]
    lines += targets_markdown(report)
    lines += ["", f"Goal: speedup over root-gather-mpich at the largest size >= {SPEEDUP_FRACTION:.0%} of Eq. 5; "
              f"kang / kang-v within {BOUND_TOLERANCE - 1:.0%} of their theorem's bound from {_size(BOUND_FROM)}; "
              f"dag and fluid predictions within +-{FIDELITY:.0%} of SMPI for the compiled algorithms "
              "(every size; the table below per algorithm).", ""]
    if plots:
        lines += [f"![{name}]({path})" for name, path in plots.items()] + [""]
    lines += ["**Model fidelity** (predicted / measured, smallest .. largest over the sizes):", ""]
    lines += fidelity_table(report)
    lines += ["", "**All cases:**", ""]
    lines += settings_table(report)
    return "\n".join(lines) + "\n"


def print_settings(report: dict) -> None:
    console = Console(width=max(160, Console().width))
    t = Table(title=f"intergroup settings, SMPI {report['network_model']}, {report['ranks']} ranks")
    for col in ("setting", "alg", "vs mpich @ largest", "goal", "met", "vs root-gather", "vs native",
                "meas/bound max", "met", "dag/meas", "fluid/meas", "data"):
        t.add_column(col)
    for x in report["targets"]:
        fid = {m: f"{lo:.3f}..{hi:.3f}" for m, (lo, hi) in x["fidelity"].items()}
        t.add_row(str(x["setting"]), x["algorithm"], _f(x["speedup_mpich"], 2), _f(x["speedup_goal"], 2),
                  "yes" if x["speedup_met"] else "no", _f(x["speedup_root_gather"], 2), _f(x["speedup_native"], 2),
                  _f(x["bound_ratio_max"]), "yes" if x["bound_met"] else "no", fid.get("dag", "-"),
                  fid.get("fluid", "-"), "ok" if x["data_ok"] else "WRONG")
    console.print(t)


def plot_speedups(report: dict, path) -> None:
    """Per setting, the compiled algorithm's speedup over root-gather-mpich (and root-gather,
    native) against the largest block, with Eq. 5's asymptote and 80% of it."""
    import matplotlib.pyplot as plt

    from .charts import caption, finish, save

    settings = report["settings"]
    cols = 4
    rows = (len(settings) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.9 * rows + 0.6), squeeze=False)
    for ax, st in zip(axes.flat, settings):
        x = [c["inputs"]["largest_block"] / (1 << 20) for c in st["cases"]]
        for base, style in (("root-gather-mpich", "o-"), ("root-gather", "s--"), ("native", "^:")):
            key = f"speedup_over_{base.replace('-', '_')}"
            y = [next((r.get(key) for r in c["results"] if r["algorithm"] == st["algorithm"]), None)
                 for c in st["cases"]]
            pts = [(a, b) for a, b in zip(x, y) if b is not None]
            if pts:
                ax.plot(*zip(*pts), style, ms=3.5, lw=1.2, label=f"over {base}")
        ax.axhline(st["eq5"], color="0.3", lw=1, label="Eq. 5")
        ax.axhline(SPEEDUP_FRACTION * st["eq5"], color="0.3", lw=0.8, ls="--", label="80% of Eq. 5")
        ax.set_xscale("log", base=2)
        # the suite's nominal sizes (a setting's unit rounds its largest block down a little)
        ax.set_xticks(x, [_size(b).replace(" ", "") for b in report["block_sizes"][:len(x)]], rotation=45)
        ax.minorticks_off()
        ax.set_ylim(bottom=0)
        ax.set_title(f"setting {st['setting']}: {st['algorithm']}, {st['p']}:{st['q']}", fontsize=9)
        ax.set_xlabel("largest block", fontsize=8)
        ax.set_ylabel("speedup", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(settings):]:
        ax.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.suptitle(f"Intergroup allgather(v), SMPI {report['network_model']}, {report['ranks']} ranks: "
                 "speedup of kang / kang-v", fontsize=10, y=0.995)
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.965), ncol=5, fontsize=8,
               frameon=False)
    caption(fig, ["Speedup: the baseline's time over the compiled algorithm's (per iteration the largest "
                  "elapsed time over the ranks); x: the setting's largest block."])
    finish(fig, 1)
    fig.subplots_adjust(top=0.85, hspace=0.55)
    save(fig, path)


def plot_bound_ratios(report: dict, path) -> None:
    """Measured time over the theorem's bound (Theorem 1 for kang, Theorem 3 for kang-v)
    against the largest block, one line per setting."""
    import matplotlib.pyplot as plt

    from .charts import caption, finish, save

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for st in report["settings"]:
        pts = []
        for c in st["cases"]:
            r = next((r for r in c["results"] if r["algorithm"] == st["algorithm"]), None)
            if r and r.get("bound_ratio") is not None:
                pts.append((c["inputs"]["largest_block"] / (1 << 20), r["bound_ratio"]))
        if pts:
            ax.plot(*zip(*pts), "o-" if st["algorithm"] == "kang" else "s--", ms=3.5, lw=1.1,
                    label=f"{st['setting']}: {st['algorithm']}")
    ax.axhline(1.0, color="0.3", lw=0.8)
    ax.axhline(BOUND_TOLERANCE, color="tab:red", lw=0.8, ls="--", label=f"{BOUND_TOLERANCE:.2f}")
    ax.axvline(BOUND_FROM / (1 << 20), color="0.6", lw=0.8, ls=":")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("largest block (MiB)")
    ax.set_ylabel("measured / bound")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=3)
    ax.set_title(f"kang / kang-v against their theorem's bound, SMPI {report['network_model']}, "
                 f"{report['ranks']} ranks", fontsize=9.5)
    caption(fig, ["Bound: Theorem 1 ((M + k_B) t_w + startup) for kang, Theorem 3 / Eq. 4 for kang-v;",
                  "the target: <= 1.10 from 1 MiB (dotted line)."])
    finish(fig, 1)
    save(fig, path)


# ---- the real-MPI comparison ------------------------------------------------------------

def _median(v: list[float]) -> float | None:
    return statistics.median(v) if v else None


def mpi_markdown(report: dict, command: str) -> str:
    lines = [
        "### Intergroup allgather(v) under real MPI: collsched against Open MPI's intercommunicator collectives",
        "", f"`{command}`: {report['started']} to {report['finished']}, load (1/5/15 min) before "
        f"{', '.join(f'{x:.2f}' for x in report['load_before'])}, after "
        f"{', '.join(f'{x:.2f}' for x in report['load_after'])}; {report['cpus']} cores, so P = 8 is "
        "oversubscribed, and other jobs shared them. True intercommunicators (MPI_Comm_split + "
        "MPI_Intercomm_create); sched: MPI_Allgather(v) through collsched_allgather(v) with the compiled "
        "schedule (strict: no fallback); native: Open MPI's own intercommunicator MPI_Allgather(v). "
        f"{report['iterations']} iterations per case, the two interleaved (each first in turn) in one launch, "
        "every received byte checked. Allgather: equal blocks; allgatherv: arithmetic blocks (rank i of a "
        "group (i + 1) k, the largest block about the size shown). Time: per iteration the largest elapsed "
        "time over the ranks. Speedup: native's time over sched's in the same iteration, the median over "
        "the iterations [quartiles]; beside it the ratio of the mean times.", "",
        "| groups | collective | largest block | alg | sched ms (median) | native ms (median) "
        "| speedup, median [quartiles] | ratio of means | data |", "|---|---|---|---|---|---|---|---|---|"]
    for c in report["cases"]:
        i = c["inputs"]
        r, nat = c["results"][0], c["results"][1]
        per = r.get("speedup_per_iteration") or []
        q = statistics.quantiles(per, n=4) if len(per) > 1 else [None, None, None]
        lines.append(f"| {i['p']}:{i['q']} | {i['collective']} | {_size(i['largest_block'])} | {r['algorithm']} "
                     f"| {_ms(_median(r['time_per_iteration_s']))} | {_ms(_median(nat['time_per_iteration_s']))} "
                     f"| {_f(_median(per), 2)} [{_f(q[0], 2)}, {_f(q[2], 2)}] "
                     f"| {_f(r.get('speedup_over_native'), 2)} "
                     f"| {'ok' if r['data_ok'] and r.get('native_data_ok', True) else 'WRONG'} |")
    return "\n".join(lines) + "\n"


def plot_case(report: dict, path) -> None:
    """One case: measured time per algorithm beside the dag and fluid predictions."""
    import matplotlib.pyplot as plt
    import numpy as np

    from .charts import caption, category_width, finish, rotate_labels, save, time_unit, value_axis

    rows = report["results"]
    meas = np.array([r["time_s"] for r in rows])
    preds = {m: np.array([r.get(f"predicted_{m}_s") or np.nan for r in rows]) for m in ("dag", "fluid")}
    values = np.concatenate([meas, *[v[np.isfinite(v)] for v in preds.values()]])
    k, unit = time_unit(values)
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(category_width(len(rows)), 4.4))
    ax.bar(x - 0.27, meas * k, 0.27, label=f"measured ({report['backend']})", color="tab:blue")
    for off, (m, v), color in zip((0.0, 0.27), preds.items(), ("tab:orange", "tab:green")):
        ok = np.isfinite(v)
        if ok.any():
            ax.bar(x[ok] + off, v[ok] * k, 0.27, label=f"predicted ({m})", color=color)
    value_axis(ax, float(values.min() * k), float(values.max() * k), unit, "time (largest elapsed over ranks)")
    rotate_labels(ax, [r["algorithm"] for r in rows])
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.set_title(case_title(report), fontsize=8.5, pad=22)
    ax.legend(fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, frameon=False)
    notes = ["native has no prediction (the MPI library's own collectives)."] if any(
        r["algorithm"] == "native" for r in rows) else []
    caption(fig, notes)
    finish(fig, len(notes))
    save(fig, path)
