"""Human-readable and plotted forms of a lab report (see runner.run_lab)."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ..files import save_figure


def print_report(report: dict) -> None:
    i = report["inputs"]
    title = (f"{report['backend']}: allgather, {i['ranks']} ranks, {i['nbytes']} B/rank, "
             f"maxDelay {i['max_delay_ms']} ms, {i['iterations']} iterations, seed {i['seed']}"
             + (f", {i['network_model']}" if report["backend"] == "smpi" else ""))
    t = Table(title=title)
    for col in ("algorithm", "avg elapsed ms", "run time ms", "absorption ms", "omega/tau",
                "predicted ms", "pred/meas", "data"):
        t.add_column(col, justify="right" if col != "algorithm" else "left")
    for r in report["results"]:
        pred = r.get("predicted_avg_elapsed_s")
        t.add_row(r["algorithm"], f"{r['avg_elapsed_s'] * 1e3:.3f}", f"{r['run_time_s'] * 1e3:.3f}",
                  f"{r['absorption_s'] * 1e3:.3f}", f"{r['imbalance_factor']:.2f}",
                  f"{pred * 1e3:.3f}" if pred is not None else "-",
                  f"{r['model_ratio']:.3f}" if "model_ratio" in r else "-",
                  "ok" if r["data_ok"] else "WRONG")
    Console(width=max(120, Console().width)).print(t)


def plot_report(report: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = report["results"]
    names = [r["algorithm"] for r in rows]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(max(5, 1.1 * len(rows)), 4))
    ax.bar(x - 0.2, [r["avg_elapsed_s"] * 1e3 for r in rows], 0.4, label=f"measured ({report['backend']})")
    ax.bar(x + 0.2, [(r.get("predicted_avg_elapsed_s") or 0) * 1e3 for r in rows], 0.4,
           label="predicted (cost model)")
    ax.set_xticks(x)
    ax.set_xticklabels(names, rotation=30, ha="right")
    ax.set_ylabel("average elapsed time (ms)")
    i = report["inputs"]
    ax.set_title(f"allgather, P={i['ranks']}, {i['nbytes']} B/rank, maxDelay {i['max_delay_ms']} ms", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def markdown(report: dict, plot_rel: str | None = None) -> str:
    """A lab report as a Markdown section for docs/benchmarks.md."""
    import datetime

    i = report["inputs"]
    backend = report["backend"]
    lines = [f"## Lab: mini-benchmark on {backend}", "",
             f"Measured {datetime.date.today().isoformat()} by `collsched bench --backend {backend}` "
             f"(BDR paper Listing 4): topology `{i['topology'] or 'homogeneous'}`, P = {i['ranks']}, "
             f"{i['nbytes']} bytes per rank, maxDelay {i['max_delay_ms']} ms, {i['iterations']} iterations "
             f"(+{i['flat_iterations']} flat for the absorption time), seed {i['seed']}"
             + (f", network model {i['network_model']}, TCP window {i['tcp_gamma']} B" if backend == "smpi" else "")
             + ". Predicted = the cost model for the measured arrivals; every byte checked.", "",
             "| algorithm | avg elapsed ms | run time ms | absorption ms | omega/tau | predicted ms | pred/meas | data |",
             "|:--|--:|--:|--:|--:|--:|--:|:--|"]
    for r in report["results"]:
        pred = r.get("predicted_avg_elapsed_s")
        lines.append(
            f"| {r['algorithm']} | {r['avg_elapsed_s'] * 1e3:.3f} | {r['run_time_s'] * 1e3:.3f} | "
            f"{r['absorption_s'] * 1e3:.3f} | {r['imbalance_factor']:.2f} | "
            + (f"{pred * 1e3:.3f} | {r['model_ratio']:.3f}" if pred is not None else "- | -")
            + f" | {'ok' if r['data_ok'] else 'WRONG'} |")
    if plot_rel:
        lines += ["", f"![mini-benchmark]({plot_rel})"]
    return "\n".join(lines) + "\n"
