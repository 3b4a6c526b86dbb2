"""Text, Markdown and plot of a `platforms` suite report (lab/platforms.py)."""
from __future__ import annotations

from . import charts


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _met(x) -> str:
    return "-" if x is None else ("met" if x else "**missed**")


def _gbit(bps) -> str:
    return "-" if bps is None else f"{bps * 8 / 1e9:.3g}"


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def _ok(row) -> bool:
    return row is not None and "error" not in row and "refused" not in row and row.get("data_ok", False)


def platform_lines(p: dict, tol: dict) -> list[str]:
    """What one platform's measurement and checks gave, as Markdown bullets."""
    c = p["comparison"]
    out = [f"- Files: {'the XML and the YAML describe the same network' if not p['file_differences'] else 'differ: ' + '; '.join(p['file_differences'][:4])}."]
    sc = p.get("smpi_check")
    if sc and "skipped" not in sc:
        worst = max(sc["fill"], key=lambda f: f["max_error"], default=None)
        out.append(f"- SimGrid on the XML against the YAML's formulas: {sc['pairs']} ordered rank pairs alone "
                   f"(1 B and 4 MiB), worst error {_pct(sc['single_max_error'])}; "
                   f"{len(sc['fill'])} wide-area resources filled by concurrent flows, worst error "
                   f"{_pct(sc['fill_max_error'])}" + (f" ({worst['resource']})" if worst else "")
                   + f"; {sc['wall_s']:.0f} s of wall time.")
    elif sc:
        out.append(f"- SimGrid check skipped: {sc['skipped']}.")
    m = p["measure"]
    if "wall_s" in m:
        budget = "" if m.get("within_budget") is None else \
            f" (target under {tol['measure_s'] / 60:.0f} minutes: {_met(m['within_budget'])})"
        out.append(f"- `{m['command']}`: {m['wall_s']:.0f} s of wall time{budget}.")
    else:
        out.append(f"- Measured topology given: {m['given']} (not measured in this run).")
    fw = c["flow_bandwidth_worst"]
    out.append(f"- Measured vs true, every rank pair: latency within {_pct(c['latency_max_error'])}, one flow's "
               f"bandwidth (capped by the TCP window) within {_pct(c['flow_bandwidth_max_error'])} "
               f"(worst rank {fw['src']} -> {fw['dst']}: {_gbit(fw['measured_Bps'])} vs {_gbit(fw['true_Bps'])} "
               f"Gbit/s); target {_pct(tol['pairs'])}: {_met(c['pairs_met'])}. Sites: {c['sites_measured']} "
               f"measured, {c['sites_true']} true, grouping {'exact' if c['site_grouping_exact'] else '**not exact**'}.")
    caps = "; ".join(f"{x['pair']} {_gbit(x['measured_Bps'])}/{_gbit(x['true_Bps'])}" for x in c["capacities"])
    out.append(f"- Wide-area capacity per ordered site pair (the route's bottleneck, measured/true Gbit/s): {caps}; "
               f"worst error {_pct(c['capacity_max_error'])}, target {_pct(tol['capacities'])}: "
               f"{_met(c['capacities_met'])}. Site pairs grouped by shared bottleneck: "
               f"{'exact' if c['bottleneck_grouping_exact'] else '**not exact**'}"
               + ("" if c["measured_has_links"] else " (the measured topology has no wide-area links)") + ".")
    return out


def case_table(p: dict, case: dict, tol: dict) -> list[str]:
    rows = [r for r in case["results"]]
    m3t = case["min3_true"]
    lines = [f"#### {p['platform']}, {_size(case['nbytes'])} per rank", "",
             "| algorithm | avg elapsed s | DAG predicted s | pred/meas | fluid predicted s | fluid/meas | data |",
             "|:--|--:|--:|--:|--:|--:|:--|"]

    def num(x, fmt="{:.4f}"):
        return "-" if x is None else fmt.format(x)

    def line(name, r):
        if "error" in r or "refused" in r:
            why = f"failed: {r['error']}" if "error" in r else f"refused: {r['refused']}"
            return f"| {name} | {why[:140]} | | | | | |"
        meas = r["avg_elapsed_s"]
        d, f = r.get("predicted_avg_elapsed_s"), r.get("fluid_avg_elapsed_s")
        return (f"| {name} | {meas:.4f} | {num(d)} | {num(None if d is None else d / meas, '{:.3f}')} | "
                f"{num(f)} | {num(None if f is None else f / meas, '{:.3f}')} | "
                f"{'ok' if r.get('data_ok') else 'WRONG'} |")

    for r in sorted(rows, key=lambda r: ("avg_elapsed_s" not in r, r.get("avg_elapsed_s", 0))):
        lines.append(line(r["algorithm"] + (" (measured)" if r["algorithm"] == "min3" else ""), r))
    lines.append(line("min3 (true description)", m3t))
    t = case["targets"]
    ratio = num(t.get("min3_ratio"), "{:.3f}")
    over = num(t["bound_over_fastest"], "{:.3f}")
    dag, fluid = num(t.get("dag_ratio"), "{:.3f}"), num(t.get("fluid_ratio"), "{:.3f}")
    nxt = (f" (next: {t['best_other']}, {t['speedup_over_best_other']:.2f}x min3's time)"
           if t.get("best_other") else "")
    lines += ["", f"- min3 compiled from the measured topology / from the true description: {ratio} "
                  f"(target at most {1 + tol['min3']:.2f}: {_met(t.get('min3_ratio_met'))}).",
              f"- Lower bound from the measured topology: {t['bound_s']:.4f} s ({case['bound']['method']}), "
              f"{over} of the fastest run (never above a run: {_met(t['bound_met'])}).",
              f"- min3 predicted / SMPI: DAG {dag} ({_met(t.get('dag_met'))}), fluid {fluid} "
              f"({_met(t.get('fluid_met'))}); target within {_pct(tol['fidelity'])}.",
              f"- min3 faster than every other algorithm and native selector: {_met(t.get('min3_fastest'))}{nxt}."]
    if t["failed"]:
        lines.append(f"- Failed or wrong data: {', '.join(t['failed'])}.")
    if t.get("refused"):
        lines.append(f"- Refused at {p['ranks']} ranks (not run): {', '.join(t['refused'])}.")
    return lines + [""]


def markdown(report: dict, plot_rel: str | None = None) -> str:
    s = report["summary"]
    out = ["## Lab: bundled multi-site platforms (issue 21)", "",
           f"Measured {report['started'][:16].replace('T', ' ')} to {report['finished'][11:16]} UTC by `collsched bench --suite platforms` "
           f"(lab/platforms.py): SimGrid SMPI, network model {report['network_model']}, on each bundled "
           f"platform's hand-written XML and host file; every algorithm compiled and predicted from the "
           f"topology `collsched measure` wrote on that platform (planned with the compiler's model "
           f"{report.get('compile_model', 'dag')}), {report['iterations']} iteration"
           f"{'s' if report['iterations'] != 1 else ''} each, flat "
           f"arrivals, every byte checked. Load average {report['load_before']:.1f} at the start, "
           f"{report['load_after']:.1f} at the end (2 cores, shared).", "",
           "| target | met |", "|:--|:--|",
           f"| files (XML and YAML) describe the same network | {_met(s['files_agree'])} |",
           f"| SimGrid runs the YAML's formulas (pairs alone, links filled) | {_met(s['smpi_check_ok'])} |",
           f"| measured latency and bandwidth within 5% | {_met(s['pairs_met'])} |",
           f"| wide-area capacities within 10% | {_met(s['capacities_met'])} |",
           f"| site grouping exact | {_met(s['site_grouping_exact'])} |",
           f"| min3(measured) within 10% of min3(true) | {_met(s['min3_ratio_met'])} |",
           f"| lower bound (measured) never above a run | {_met(s['bound_met'])} |",
           f"| min3 predicted within 15% of SMPI: DAG / fluid | {_met(s['dag_met'])} / {_met(s['fluid_met'])} |",
           f"| min3 faster than every other algorithm and native selector | {_met(s['min3_fastest'])} |",
           f"| measure under 10 minutes (48 hosts) | {_met(s['measure_within_budget'])} |", ""]
    for p in report["platforms"]:
        out += [f"### {p['platform']}: {p['ranks']} ranks, {p['sites']} sites (`{p['xml']}`, `{p['hosts']}`, "
                f"true description `{p['yaml']}`)", ""]
        out += platform_lines(p, report["tolerances"]) + [""]
        for case in p["cases"]:
            out += case_table(p, case, report["tolerances"])
    if plot_rel:
        out += [f"![platforms suite]({plot_rel})", ""]
    return "\n".join(out)


def text_report(report: dict) -> str:
    """The same as plain text (the CLI prints it)."""
    return markdown(report).replace("**", "")


def plot_report(report: dict, path) -> None:
    """Measured time per algorithm, one panel per platform and size; min3 (measured and
    true) in colour, the lower bound as a line."""
    import numpy as np

    panels = [(p, c) for p in report["platforms"] for c in p["cases"]]
    n = max(len(c["results"]) + 1 for _, c in panels)
    fig, axes = charts.plt.subplots(len(panels), 1, figsize=(charts.category_width(n), 3.2 * len(panels)),
                                    squeeze=False)
    for ax, (p, c) in zip(axes[:, 0], panels):
        rows = sorted([r for r in c["results"] if _ok(r)], key=lambda r: r["avg_elapsed_s"])
        if _ok(c["min3_true"]):
            rows.append(dict(c["min3_true"], algorithm="min3 (true)"))
        vals = [r["avg_elapsed_s"] for r in rows]
        if not vals:
            continue
        colors = ["tab:red" if r["algorithm"].startswith("min3") else
                  "tab:gray" if r["algorithm"].startswith("native") else "tab:blue" for r in rows]
        ax.bar(np.arange(len(rows)), vals, color=colors)
        lb = c["bound"]["avg_elapsed_s"]
        charts.value_axis(ax, min(vals + [lb]), max(vals), "s", "avg elapsed")
        ax.axhline(lb, color="k", ls="--", lw=0.8, label="lower bound (measured topology)")
        charts.rotate_labels(ax, [r["algorithm"] for r in rows])
        ax.set_title(f"{p['platform']} ({p['ranks']} ranks), {_size(c['nbytes'])} per rank", fontsize=9)
        ax.legend(fontsize=7, loc="upper left")
    charts.caption(fig, ["SimGrid SMPI CM02 on the hand-written platform XML; compiled from the measured "
                         "topology (min3 (true): from the YAML)."])
    charts.finish(fig, notes=1)
    charts.save(fig, path)
