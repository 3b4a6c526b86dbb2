"""The recurring suite's report (recurring.py runs it): the issue's targets per cache
variant with met / not met (`summarise`), docs/benchmarks.md's section (`markdown`), the
figures (`plot`), writing both (`record`), and `python -m collsched.lab.recurring_report
REPORT.json [--doc D] [--section S] [--plot P]` (`main`): a run's report.json rendered
again with this code.

A report has, per variant (report["variants"]: "in-call" and, under SMPI, "pat"), the
names of its cache and oracle rows in report["evaluation"], its cache build, entries,
hits and COLLSCHED_STATS text; summarise() adds report["summary"]["targets"][variant].
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..errors import InputError

WARMUP_CYCLES = 2
TARGET_HIT, TARGET_ORACLE, TARGET_REGULAR, TARGET_UNSEEN, TARGET_ERROR_T = 0.90, 1.05, 1.2, 1.05, 0.5
TARGET_NAMES = {"hit_rate": "hit rate after warm-up", "cache_vs_oracle": "cache / its oracle",
                "best_regular_vs_cache": "best regular / cache", "bdr_vs_cache": "bdr / cache",
                "unseen_cache_vs_best_regular": "unseen: cache / best regular",
                "prediction_error_t": "best predictor's error", "real_mpi_cache_use": "real MPI: cache use"}


def avg_elapsed(row: dict, start: int = 0) -> float:
    """A row's average elapsed time over its iterations from `start` on."""
    return float(np.mean(row["elapsed_per_iteration_s"][start:]))


def jsonable(x):
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if hasattr(x, "tolist"):
        return x.tolist()
    if hasattr(x, "__dataclass_fields__"):
        return jsonable(dict(x.__dict__))
    return x


def finite(x):
    """NaN and infinities as null (JSON has none)."""
    if isinstance(x, float):
        return x if np.isfinite(x) else None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    return x


def best_error_t(pred: dict) -> tuple[str | None, float | None]:
    """(predictor, mean absolute error in units of T) of the best predictor of
    predict.evaluate's report (a dict of predictors, each with mae_t)."""
    rows = pred.get("predictors", pred) if isinstance(pred, dict) else {}
    best = None
    for name, r in (rows.items() if isinstance(rows, dict) else []):
        v = r.get("mae_t") if isinstance(r, dict) else None
        if isinstance(v, (int, float)) and (best is None or v < best[1]):
            best = (name, float(v))
    return best if best else (None, None)


def stats_use(text: str | None, entries: dict) -> tuple[int, int]:
    """From COLLSCHED_STATS (runtime/src/cache.c's YAML): (calls that ran one of the
    cache's entries, calls), over every site of the stats."""
    import yaml

    try:
        doc = yaml.safe_load(text or "") or {}
    except yaml.YAMLError:
        return 0, 0
    served = calls = 0
    for site in doc.get("sites") or []:
        calls += int(site.get("calls", 0))
        served += sum(int(u.get("calls", 0)) for u in site.get("used") or []
                      if Path(str(u.get("file", ""))).name in entries)
    return served, calls


def _variant_targets(report: dict, v: dict, after: dict, data_ok: bool) -> dict:
    """One variant's targets: its hit rate, cache vs its oracle, vs the best regular
    algorithm (native included), vs bdr (both data-checked), the unseen class, the
    prediction error, and under real MPI the stats' cache use."""
    ev, un, best = report["evaluation"], report["unseen"], report["best_regular"]
    cache, c = v["cache"], after[v["cache"]]
    targets = {}
    hits = v.get("hits")
    if hits and hits["hit_rate"] is not None:
        targets["hit_rate"] = {"value": hits["hit_rate"], "target": f">= {TARGET_HIT:.0%}",
                               "met": hits["hit_rate"] >= TARGET_HIT}
    if v.get("oracle") in after:
        r = c / after[v["oracle"]]
        targets["cache_vs_oracle"] = {"value": r, "target": f"<= {TARGET_ORACLE}", "met": r <= TARGET_ORACLE,
                                      "oracle": v["oracle"]}
    r = after[best] / c
    targets["best_regular_vs_cache"] = {"value": r, "target": f">= {TARGET_REGULAR}", "met": r >= TARGET_REGULAR,
                                        "best_regular": best}
    if "bdr" in after:
        r = after["bdr"] / c  # a comparison only where both moved the right bytes
        ok = bool(ev["bdr"]["data_ok"] and ev[cache]["data_ok"])
        targets["bdr_vs_cache"] = {"value": r, "target": "> 1, data checked", "met": r > 1.0 and ok, "data_ok": ok}
    if cache in un and best in un:
        r = avg_elapsed(un[cache]) / avg_elapsed(un[best])
        targets["unseen_cache_vs_best_regular"] = {
            "value": r, "target": f"<= {TARGET_UNSEEN}, data checked", "data_ok": bool(un[cache]["data_ok"]),
            "met": r <= TARGET_UNSEEN and bool(un[cache]["data_ok"])}
    name, err = best_error_t(report.get("prediction") or {})
    if err is not None:
        targets["prediction_error_t"] = {"value": err, "predictor": name, "target": f"< {TARGET_ERROR_T} T",
                                         "met": err < TARGET_ERROR_T}
    if report["backend"] == "mpi":
        served, calls = stats_use((v.get("stats") or {}).get("evaluation"), v["entries"])
        targets["real_mpi_cache_use"] = {"value": f"{served} of {calls} calls ran a cache entry",
                                         "target": "stats show cache use, data checked",
                                         "met": served > 0 and data_ok}
    return targets


def summarise(report: dict) -> dict:
    """The figures of the issue's targets, per variant, each with met / not met."""
    ev, warm = report["evaluation"], report["inputs"]["warmup_iterations"]
    after = {n: avg_elapsed(r, warm) for n, r in ev.items()}
    best = report["best_regular"]
    rows = [*ev.values(), *report["unseen"].values(), report["training"]]
    out = {"avg_elapsed_s": {n: avg_elapsed(r) for n, r in ev.items()}, "avg_elapsed_after_warmup_s": after,
           "data_ok": all(r["data_ok"] for r in rows), "targets": {}, "stats_served": {}}
    for label, v in report["variants"].items():
        out["targets"][label] = _variant_targets(report, v, after, out["data_ok"])
        served, calls = stats_use((v.get("stats") or {}).get("evaluation"), v["entries"])
        out["stats_served"][label] = {"served": served, "calls": calls}
    name, err = best_error_t(report.get("prediction_gaussian") or {})
    if err is not None:
        out["prediction_error_gaussian_t"] = {"value": err, "predictor": name}
    lp = (report.get("bound") or {}).get("lp_avg_elapsed_s")
    if lp:
        out["lp_bound_s"] = lp
        out["notes"] = [
            f"Lower bound (cost model, LP, any schedule) on the average elapsed time over the "
            f"{report['inputs']['classes']} class patterns: {lp * 1e3:.3f} ms; the best regular "
            f"algorithm ({best}) measured {after[best] * 1e3:.3f} ms after warm-up: no schedule can be "
            f"more than {after[best] / lp:.3f}x faster than it here (imbalance factor of the classes: "
            f"spread / T = {report['inputs']['spread_s'] / report['inputs']['t_message_s']:.2f})."]
    return out


def _ms(x) -> str:
    return "-" if x is None else f"{x * 1e3:.3f}"


def _label(report: dict, name: str) -> str:
    """A row's name in tables and legends: caches without their directory."""
    for label, v in report["variants"].items():
        if name == v["cache"]:
            return f"cache ({label})"
        if name == v.get("oracle"):
            return f"{name} ({label})"
    return name


def _head(report: dict) -> list[str]:
    i = report["inputs"]
    model = f", network model {report['network_model']}" if report["network_model"] else ""
    rule = f" = {i['bytes_rule']}" if i.get("bytes_rule") else ""
    noise = ("uniform in [-{0:.0%}, +{0:.0%}] x spread" if i.get("noise_kind") == "uniform"
             else "Gaussian, sigma {0:.0%} of the spread").format(i["noise"])
    return [f"### Recurring load patterns: trace -> cache -> selection ({report['backend'].upper()}{model})", "",
            f"`collsched bench --suite recurring --backend {report['backend']}"
            f"{' --network-model ' + report['network_model'] if report['network_model'] else ''}`, "
            f"{report['date']}. "
            f"Topology {Path(i['topology']).name if i['topology'] else 'the default'}, P = {i['ranks']}, "
            f"{i['bytes']} B per rank{rule} (T = {_ms(i['t_message_s'])} ms per message), {i['iterations']} "
            f"iterations cycling through {i['classes']} classes (late groups of {i['late_group']} ranks, "
            f"spread {i['spread_s'] * 1e3:g} ms, noise {noise}, seed {i['seed']}); "
            f"training and evaluation with different noise; warm-up {i['warmup_iterations']} iterations "
            f"({i['warmup_iterations'] // max(1, i['classes'])} cycles); the unseen class: "
            f"{i['unseen_iterations']} iterations. Cache variants: "
            + "; ".join(f"{lb} (cache built with engine {v['engine']}"
                        f"{', oracle ' + v['oracle'] if v.get('oracle') else ''})"
                        for lb, v in report["variants"].items()) + ".", ""]


def _tables(report: dict) -> list[str]:
    s, ev = report["summary"], report["evaluation"]
    lines = ["| algorithm | avg elapsed (ms) | after warm-up (ms) | predicted (ms) | data |",
             "|---|---|---|---|---|"]
    for n, r in ev.items():
        lines.append(f"| {_label(report, n)} | {_ms(s['avg_elapsed_s'][n])} | "
                     f"{_ms(s['avg_elapsed_after_warmup_s'][n])} | {_ms(r.get('predicted_avg_elapsed_s'))} | "
                     f"{'ok' if r['data_ok'] else 'WRONG'} |")
    lines += ["", "Unseen class (never in the trace):", "", "| algorithm | avg elapsed (ms) | data |", "|---|---|---|"]
    for n, r in report["unseen"].items():
        lines.append(f"| {_label(report, n)} | {_ms(avg_elapsed(r))} | {'ok' if r['data_ok'] else 'WRONG'} |")
    return lines


def _variant_lines(report: dict) -> list[str]:
    lines = []
    for label, v in report["variants"].items():
        lines += ["", f"Cache build, {label} (engine {v['engine']}, from the training trace):", ""]
        for g in v["build"]["groups"]:
            lines.append(f"- {g['group']}: {g['calls']} calls, T = {_ms(g['t_message_s'])} ms, regular entry "
                         f"{g['regular']}; " + "; ".join(
                             f"class {c['class']} ({c['calls']} calls, spread {_ms(c['spread_s'])} ms): "
                             f"{'kept (' + str(c['algorithm']) + ')' if c['kept'] else 'not kept'}, {c['why']}"
                             for c in g["classes"]))
        hits = v.get("hits")
        if hits:
            lines += ["", f"Hits, {label}, after warm-up (the entry of the true class, or the regular entry "
                          f"for a class without one): {hits['hits']} of {hits['calls']} ({hits['hit_rate']:.1%}); "
                          f"class entries of the true class: {hits['class_hits']} (classes with an entry: "
                          f"{hits['classes_with_entry'] or 'none'}); entries used: " + ", ".join(
                              f"{m}: {list(map(str, hits['mapped'])).count(m)}" for m in sorted(set(map(str, hits['mapped']))))]
        oracle = report["evaluation"].get(v.get("oracle") or "")
        if oracle and oracle.get("oracle_picked"):
            lines += ["", f"{v['oracle']}'s picks (auto, engine {v['engine']}, per iteration): " + ", ".join(
                f"{a} {n}" for a, n in sorted(oracle["oracle_picked"].items()))]
        st = report["summary"]["stats_served"].get(label) or {}
        if st.get("calls"):
            lines += ["", f"COLLSCHED_STATS of the {label} cache's evaluation run: {st['served']} of "
                          f"{st['calls']} calls ran a cache entry."]
    return lines


def _shown(name: str, t: dict) -> str:
    v = t["value"]
    shown = f"{v:.1%}" if name == "hit_rate" else (f"{v:.3f}" if isinstance(v, float) else str(v))
    if name == "prediction_error_t":
        shown += f" T ({t['predictor']})"
    return f"{shown}, {'met' if t['met'] else 'not met'}"


def _target_table(report: dict) -> list[str]:
    s = report["summary"]
    labels = list(s["targets"])
    names = [n for n in TARGET_NAMES if any(n in s["targets"][lb] for lb in labels)]
    lines = ["", "| target | wanted | " + " | ".join(labels) + " |", "|---|---|" + "---|" * len(labels)]
    for n in names:
        want = next(s["targets"][lb][n]["target"] for lb in labels if n in s["targets"][lb])
        lines.append(f"| {TARGET_NAMES[n]} | {want} | " + " | ".join(
            _shown(n, s["targets"][lb][n]) if n in s["targets"][lb] else "-" for lb in labels) + " |")
    g = s.get("prediction_error_gaussian_t")
    if g:
        sigma = report["inputs"]["noise"] * report["inputs"]["spread_s"]
        lines += ["", f"The same classes under Gaussian noise of sigma {sigma * 1e3:g} ms (5% of the spread, "
                      f"= {sigma / report['inputs']['t_message_s']:.2f} T) instead of the bounded noise: best "
                      f"predictor {g['predictor']} at {g['value']:.3f} T (a figure, not a target: no predictor "
                      f"gets below about 0.8 sigma there)."]
    return lines


def markdown(report: dict, plot_rel: str | None = None, strip_rel: str | None = None) -> str:
    """docs/benchmarks.md's section: date, backend, network model, inputs, tables, targets."""
    lines = _head(report) + _tables(report) + _variant_lines(report) + _target_table(report)
    for note in report["summary"].get("notes", []):
        lines += ["", note]
    if plot_rel:
        lines += ["", f"![per-iteration elapsed time by algorithm]({plot_rel})"]
    if strip_rel:
        lines += ["", f"![cache hits and misses per iteration, per variant]({strip_rel})"]
    return "\n".join(lines) + "\n"


def _title(report: dict) -> str:
    from .charts import backend_text, topology_name

    i = report["inputs"]
    where = (f"on {topology_name(i.get('topology'))}" if report["backend"] == "smpi"
             else f"(predictions for {topology_name(i.get('topology'))})")
    return (f"recurring patterns {where}: P = {i['ranks']}, {i['bytes']} B/rank, "
            f"{i['iterations']} iterations\n{backend_text(report['backend'], report.get('network_model'))}")


def strip_figure(report: dict):
    """One hit/miss strip per variant with hits (green: the true class's entry, orange:
    the regular entry, red: another entry, the library or a schedule not in the cache);
    a Figure, or None without hits."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    with_hits = [(lb, v["hits"]) for lb, v in report["variants"].items() if v.get("hits")]
    if not with_hits:
        return None
    labels = report["scenario"]["labels"]
    fig, axes = plt.subplots(len(with_hits), 1, figsize=(10, 1.5 + 1.0 * len(with_hits)), squeeze=False,
                             sharex=True)
    for ax, (lb, hits) in zip(axes[:, 0], with_hits):
        for k, (m, want) in enumerate(zip(hits["mapped"], labels)):
            color = "tab:green" if m == want else ("tab:orange" if m == "regular" else "tab:red")
            ax.bar(k, 1, width=1, color=color)
        ax.set_yticks([])
        ax.set_ylabel(lb, rotation=0, ha="right", va="center")
        ax.axvline(report["inputs"]["warmup_iterations"] - 0.5, color="black", ls=":", lw=1)
        ax.set_xlim(-0.5, len(labels) - 0.5)
    axes[-1, 0].set_xlabel("iteration")
    axes[0, 0].set_title("cache entry each call ran, per variant: " + _title(report).replace("\n", "; "),
                         fontsize=9, pad=22)
    axes[0, 0].legend(handles=[Patch(color="tab:green", label="the true class's entry"),
                               Patch(color="tab:orange", label="the regular entry"),
                               Patch(color="tab:red", label="another entry or the library"),
                               Line2D([], [], color="black", ls=":", label="end of warm-up")],
                      loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=4, fontsize=8, frameon=False,
                      borderaxespad=0.1)
    fig.tight_layout()
    return fig


def elapsed_figure(report: dict):
    """Per-iteration elapsed time by algorithm, one line style each (equal curves stay
    visible), the warm-up's end marked; a Figure."""
    import matplotlib.pyplot as plt

    from .charts import time_unit

    ev = report["evaluation"]
    k, unit = time_unit([x for r in ev.values() for x in r["elapsed_per_iteration_s"]])
    fig, ax = plt.subplots(figsize=(11, 4.5))
    for j, (n, r) in enumerate(ev.items()):
        ax.plot(np.array(r["elapsed_per_iteration_s"]) * k, label=_label(report, n), lw=1.2,
                ls=("-", "--", ":", "-.")[j % 4])
    ax.axvline(report["inputs"]["warmup_iterations"] - 0.5, color="grey", ls=":", lw=1,
               label="end of warm-up")
    ax.set_xlabel("iteration")
    ax.set_ylabel(f"average elapsed time ({unit})")
    ax.set_title(_title(report), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def plot(report: dict, path: str) -> tuple[str, str | None]:
    """Per-iteration elapsed time by algorithm (PNG `path`) and, with cache hits, the
    hit/miss strips (`path` with -hits before .png). Returns the two paths."""
    from .charts import save

    save(elapsed_figure(report), path)
    strips = strip_figure(report)
    if strips is None:
        return path, None
    strip = str(Path(path).with_name(Path(path).stem + "-hits.png"))
    save(strips, strip)
    return path, strip


def record(report: dict, doc: str | None, plot_path: str | None, section: str | None) -> None:
    """The plots and the --doc section of a report (recurring.run_and_record; main renders
    a run's report.json again)."""
    import os

    from .benchdoc import replace_section

    figs = plot(report, plot_path) if plot_path else (None, None)
    if doc:
        base = os.path.dirname(os.path.abspath(doc))
        rel = [os.path.relpath(f, base) if f else None for f in figs]
        replace_section(doc, section or f"lab-recurring-{report['backend']}", markdown(report, *rel))


def main(argv=None) -> int:
    """python -m collsched.lab.recurring_report REPORT.json [--doc D] [--section S] [--plot P]:
    the summary, plots and section of a run's report.json, with this module's code."""
    import argparse

    from ..files import read_input

    ap = argparse.ArgumentParser(prog="python -m collsched.lab.recurring_report")
    ap.add_argument("report")
    ap.add_argument("--doc")
    ap.add_argument("--section")
    ap.add_argument("--plot")
    a = ap.parse_args(argv)
    try:
        report = json.loads(read_input(a.report, "report"))
    except (ValueError, UnicodeDecodeError):
        raise InputError(a.report, "", "expected the JSON report of collsched bench --suite recurring") from None
    if "variants" not in report:
        raise InputError(a.report, "", "expected a report with per-variant caches (\"variants\"): "
                                       "run the suite again")
    report["summary"] = summarise(report)
    record(report, a.doc, a.plot, a.section)
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
