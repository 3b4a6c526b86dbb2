"""Gantt chart of a simulated schedule (in the manner of Fig. 4 of the BDR paper).

One lane per rank: the arrival (black tick), every transfer the rank receives (a bar from
start to end, background pre-steps in orange, foreground in blue, labelled with the
piece's origin when there is room) and its exit (red tick).
"""
from __future__ import annotations

import os
import warnings

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from .files import save_figure  # noqa: E402
from .ir import BACKGROUND  # noqa: E402
from .model.dag import Timeline  # noqa: E402

MAX_LABELLED_BARS = 400


def gantt(tl: Timeline, title: str, path: str | os.PathLike, max_ranks: int = 64) -> None:
    p = len(tl.arrivals)
    shown = min(p, max_ranks)
    scale, unit = _time_unit(float(tl.exits.max() - tl.arrivals.min()))
    t0 = float(tl.arrivals.min())
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.32 * shown))
    sel = tl.dst < shown
    colors = np.where(tl.phase[sel] == BACKGROUND, "tab:orange", "tab:blue")
    starts = (tl.start[sel] - t0) * scale
    widths = (tl.end[sel] - tl.start[sel]) * scale
    ax.barh(tl.dst[sel], widths, left=starts, height=0.6, color=colors, edgecolor="white",
            linewidth=0.3)
    if sel.sum() <= MAX_LABELLED_BARS:
        span = float(widths.max()) if len(widths) else 0.0
        for y, x, w, o in zip(tl.dst[sel], starts, widths, tl.origin[sel]):
            if w > 0.04 * span:
                ax.text(x + w / 2, y, str(int(o)), ha="center", va="center", fontsize=6, color="white")
    lanes = np.arange(shown)
    ax.scatter((tl.arrivals[:shown] - t0) * scale, lanes, marker="|", s=180, color="black", zorder=3)
    ax.scatter((tl.exits[:shown] - t0) * scale, lanes, marker="|", s=180, color="red", zorder=3)
    ax.set_yticks(lanes)
    ax.set_yticklabels([str(r) for r in lanes], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(f"time since first arrival ({unit})")
    ax.set_ylabel("rank (receiving)")
    more = f" (first {shown} of {p} ranks)" if shown < p else ""
    ax.set_title(title + more, fontsize=10)
    ax.legend(handles=[Patch(color="tab:orange", label="background pre-step"),
                       Patch(color="tab:blue", label="foreground"),
                       Patch(color="black", label="arrival"), Patch(color="red", label="exit")],
              loc="upper center", bbox_to_anchor=(0.5, -0.12 - 1.5 / (1.2 + 0.32 * shown)),
              fontsize=7, ncol=4, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    with warnings.catch_warnings():  # a chart of one lane has no room for the margins: say nothing
        warnings.simplefilter("ignore", UserWarning)
        fig.tight_layout()
    _save(fig, path)


def _time_unit(span_s: float) -> tuple[float, str]:
    if span_s >= 1:
        return 1.0, "s"
    if span_s >= 1e-3:
        return 1e3, "ms"
    return 1e6, "us"


def _save(fig, path) -> None:
    """Atomic write: a failed plot never leaves a half-written PNG."""
    try:
        save_figure(fig, path, dpi=120)
    finally:
        plt.close(fig)
