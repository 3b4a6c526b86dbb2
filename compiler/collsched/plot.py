"""Gantt chart of a simulated schedule (in the manner of Fig. 4 of the BDR paper).

One lane per rank: the arrival (black tick), every transfer the rank receives (a bar from
start to end, background pre-steps in orange, foreground in blue, labelled with the rank
the piece comes from, its origin, when there is room) and its exit (red tick). A
multi-piece message (docs/semantics.md) is one transfer, so one bar, labelled with its
number of pieces (x3: three pieces). The time
axis spans the schedule (first arrival to last exit, 1% margin) and the legend, above the
lanes, names only what the chart draws.
"""
from __future__ import annotations

import os
import warnings

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from .files import save_figure  # noqa: E402
from .ir import BACKGROUND  # noqa: E402
from .model.dag import Timeline  # noqa: E402

MAX_LABELLED_BARS = 400
MARGIN = 0.01  # of the span, either side of the time axis
BACKGROUND_COLOR, FOREGROUND_COLOR = "tab:orange", "tab:blue"
ARRIVAL_COLOR, EXIT_COLOR = "black", "red"


def gantt(tl: Timeline, title: str, path: str | os.PathLike, max_ranks: int = 64) -> None:
    """Writes the chart to `path` (the format its suffix names)."""
    _save(gantt_figure(tl, title, max_ranks), path)


def gantt_figure(tl: Timeline, title: str, max_ranks: int = 64):
    """The chart as a matplotlib Figure (the caller saves or closes it)."""
    p = len(tl.arrivals)
    shown = min(p, max_ranks)
    t0 = float(tl.arrivals.min())
    t1 = float(max(tl.exits.max(), tl.end.max() if len(tl.end) else t0))
    scale, unit = _time_unit(t1 - t0)
    fig, ax = plt.subplots(figsize=(11, 1.6 + 0.3 * shown))
    sel = tl.dst < shown
    background = tl.phase[sel] == BACKGROUND
    starts = (tl.start[sel] - t0) * scale
    widths = (tl.end[sel] - tl.start[sel]) * scale
    ax.barh(tl.dst[sel], widths, left=starts, height=0.6,
            color=np.where(background, BACKGROUND_COLOR, FOREGROUND_COLOR), edgecolor="white",
            linewidth=0.3)
    pieces = tl.pieces[sel] if tl.pieces is not None else None
    labelled = _label_bars(ax, tl.dst[sel], starts, widths, tl.origin[sel], (t1 - t0) * scale,
                           pieces)
    lanes = np.arange(shown)
    ax.scatter((tl.arrivals[:shown] - t0) * scale, lanes, marker="|", s=180, color=ARRIVAL_COLOR,
               zorder=3)
    ax.scatter((tl.exits[:shown] - t0) * scale, lanes, marker="|", s=180, color=EXIT_COLOR, zorder=3)
    span = (t1 - t0) * scale or 1.0
    ax.set_xlim(-MARGIN * span, span * (1 + MARGIN))
    ax.set_ylim(shown - 0.5, -0.5)  # rank 0 on top, no empty lane either side
    ax.set_yticks(lanes)
    ax.set_yticklabels([str(r) for r in lanes], fontsize=7 if shown <= 32 else 5)
    ax.set_xlabel(f"time since first arrival ({unit})")
    ax.set_ylabel("receiving rank")
    more = f" (first {shown} of {p} ranks)" if shown < p else ""
    ax.set_title(title + more, fontsize=10, pad=24)
    ax.legend(handles=legend_handles(bool(background.any()), bool((~background).any()), *labelled),
              loc="lower center", bbox_to_anchor=(0.5, 1.0), fontsize=7, ncol=5, frameon=False,
              borderaxespad=0.2)
    ax.grid(axis="x", alpha=0.3)
    with warnings.catch_warnings():  # a chart of one lane has no room for the margins: say nothing
        warnings.simplefilter("ignore", UserWarning)
        fig.tight_layout()
    return fig


def legend_handles(background: bool, foreground: bool, labelled: bool,
                   messages: bool = False) -> list:
    """What the chart draws, in words: the bar kinds present, the ticks, the bar labels
    (messages: some label is a multi-piece message's piece count)."""
    handles = []
    if background:
        handles.append(Patch(color=BACKGROUND_COLOR, label="receive, background pre-step"))
    if foreground:
        handles.append(Patch(color=FOREGROUND_COLOR, label="receive" if not background
                             else "receive, foreground"))
    handles += [Line2D([], [], color=ARRIVAL_COLOR, marker="|", linestyle="none", markersize=10,
                       label="rank arrives"),
                Line2D([], [], color=EXIT_COLOR, marker="|", linestyle="none", markersize=10,
                       label="rank exits")]
    if labelled:
        handles.append(Patch(facecolor="none", edgecolor="none",
                             label="number on a bar: the rank whose piece it carries"))
    if messages:
        handles.append(Patch(facecolor="none", edgecolor="none",
                             label="xk on a bar: one message of k pieces"))
    return handles


def _label_bars(ax, lanes, starts, widths, origins, span: float, pieces=None) -> tuple[bool, bool]:
    """Writes the piece's origin inside the bars wide enough for it, or for a message of k
    > 1 pieces "xk"; (whether an origin was written, whether a piece count was)."""
    if len(lanes) > MAX_LABELLED_BARS or not len(lanes):
        return False, False
    counts = np.ones(len(lanes), np.int64) if pieces is None else pieces
    origin_, count_ = False, False
    for y, x, w, o, k in zip(lanes, starts, widths, origins, counts):
        if w > 0.025 * span:
            text = str(int(o)) if k == 1 else f"x{int(k)}"
            ax.text(x + w / 2, y, text, ha="center", va="center", fontsize=6, color="white")
            origin_ |= k == 1
            count_ |= k != 1
    return bool(origin_), bool(count_)


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
