"""The lab's chart style, shared by its plots (report.py, bench_compiler.py, sweep.py,
modelcheck.py, recurring_report.py): time units chosen from the values (seconds for
wide-area runs), a value axis that shows the differences between bars, tick labels that
never overlap, titles that name what ran where. Only presentation: every function takes
numbers already computed.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ..files import save_figure  # noqa: E402

# A value axis from zero hides a few % of difference; when every value lies within this
# fraction of the largest, the axis starts near the smallest instead (and says so).
NEAR = 0.25
# Values spread over more than this factor go on a log axis (else the small bars vanish).
SPREAD = 10.0


def time_unit(values_s) -> tuple[float, str]:
    """(factor, unit) for times in seconds: s from 1 s up, ms from 1 ms, else us."""
    v = [abs(float(x)) for x in np.ravel(values_s) if x is not None and np.isfinite(x)]
    top = max(v) if v else 0.0
    if top >= 1:
        return 1.0, "s"
    if top >= 1e-3:
        return 1e3, "ms"
    return 1e6, "us"


def topology_name(topology: str | None) -> str:
    """`topologies/tryton-48.yaml` -> `tryton-48`; None -> the default cluster."""
    return Path(topology).stem if topology else "homogeneous cluster (default topology)"


def backend_text(backend: str, network_model: str | None) -> str:
    if backend == "smpi":
        return f"SimGrid SMPI, network model {network_model or 'CM02'}"
    return "real MPI"


def value_axis(ax, lo: float, hi: float, unit: str, label: str) -> str:
    """Sets the value axis for data between lo and hi (> 0): from zero, log when the values
    spread over more than SPREAD, starting near lo when all lie within NEAR of hi. Returns
    how it was chosen ("zero", "log" or "cut"); the label says so for the last two."""
    if lo > 0 and hi / lo > SPREAD:
        log_axis(ax.yaxis, lo, hi)
        ax.set_ylim(lo / 1.6, hi * 1.6)
        ax.set_ylabel(f"{label} ({unit}, log scale)")
        return "log"
    if lo > 0 and lo >= (1 - NEAR) * hi:
        pad = max(hi - lo, 0.01 * hi) * 0.25
        bottom = max(0.0, lo - pad)
        ax.set_ylim(bottom, hi + pad)
        ax.set_ylabel(f"{label} ({unit}, axis not from 0)")
        return "cut"
    ax.set_ylim(0, hi * 1.08)
    ax.set_ylabel(f"{label} ({unit})")
    return "zero"


def log_axis(axis, lo: float | None = None, hi: float | None = None) -> None:
    """A log axis whose ticks are plain numbers at 1, 2 and 5 times the powers of ten, or
    only at the powers when the data (lo..hi) span more than three decades."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    (axis.axes.set_yscale if axis is axis.axes.yaxis else axis.axes.set_xscale)("log")
    wide = lo is not None and hi is not None and lo > 0 and hi / lo > 1e3
    axis.set_major_locator(LogLocator(base=10, subs=(1.0,) if wide else (1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def category_width(n: int, per: float = 0.75, base: float = 2.5, least: float = 6.0) -> float:
    """A figure width (inches) that gives n categories room for their labels."""
    return max(least, base + per * n)


def rotate_labels(ax, labels, rotation: float = 35, fontsize: float = 8) -> None:
    """Category labels slanted and anchored at their tick, so long names never collide."""
    ax.set_xticks(np.arange(len(labels)))
    ax.set_xticklabels(labels, rotation=rotation, ha="right", rotation_mode="anchor",
                       fontsize=fontsize)


def caption(fig, lines: list[str], fontsize: float = 7.5) -> None:
    """Notes under the plot (what the error bars are, why the axis is cut)."""
    if lines:
        fig.text(0.01, 0.01, "\n".join(lines), fontsize=fontsize, ha="left", va="bottom",
                 color="0.25")


def finish(fig, notes: int = 0) -> None:
    """tight_layout leaving room at the bottom for `notes` caption lines."""
    h = fig.get_size_inches()[1]
    fig.tight_layout(rect=(0, min(0.4, (0.04 + 0.14 * notes) / h) if notes else 0, 1, 1))


def save(fig, path, dpi: int = 110) -> None:
    """Writes the figure atomically and closes it."""
    try:
        save_figure(fig, path, dpi=dpi)
    finally:
        plt.close(fig)
