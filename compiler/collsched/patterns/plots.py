"""Plots of the arrival report: per call site, a heat map of arrival offsets (rank by
iteration) and the distribution of the imbalance factor omega / T; one figure, a row
per call site (the sites with the most calls first, at most MAX_SITES)."""
from __future__ import annotations

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ..files import save_figure  # noqa: E402

MAX_SITES = 8
# Columns of the heat map: a longer series is shown in bins of consecutive calls (their
# mean offset), so a 100,000-call trace still draws in a second.
MAX_COLUMNS = 2000


def _binned(a: np.ndarray) -> tuple[np.ndarray, int]:
    """(P, columns) offsets, a column per call or per bin of `step` calls."""
    n = a.shape[0]
    step = max(1, -(-n // MAX_COLUMNS))
    cols = -(-n // step)
    pad = np.full((cols * step - n, a.shape[1]), np.nan)
    b = np.vstack([a, pad]).reshape(cols, step, a.shape[1])
    return np.nanmean(b, axis=1).T, step


def plot_report(reports, path: str | os.PathLike, title: str = "") -> int:
    """Writes the figure; returns how many call sites it shows."""
    fig, shown = report_figure(reports, title)
    try:
        save_figure(fig, path)
    finally:
        plt.close(fig)
    return shown


def report_figure(reports, title: str = ""):
    """(Figure, how many call sites it shows)."""
    shown = sorted(reports, key=lambda r: -r.series.ncalls)[:MAX_SITES]
    fig, axes = plt.subplots(len(shown), 2, figsize=(13, 0.8 + 3.2 * len(shown)),
                             gridspec_kw={"width_ratios": [3, 1]}, squeeze=False)
    for (heat, hist), r in zip(axes, shown):
        a = r.series.arrivals
        img, step = _binned(a)
        scale, unit = (1e3, "ms") if float(np.nanmax(img, initial=0)) >= 1e-3 else (1e6, "us")
        im = heat.imshow(img * scale, aspect="auto", origin="lower", cmap="viridis",
                         interpolation="nearest",
                         extent=(-0.5, a.shape[0] - 0.5, -0.5, a.shape[1] - 0.5))
        fig.colorbar(im, ax=heat, label=f"arrival after the call's first ({unit})", pad=0.01)
        heat.set_ylabel("rank")
        heat.set_xlabel("call" + (f" (bins of {step}: their mean)" if step > 1 else ""))
        heat.set_title(f"{r.series.label()}: {r.series.ncalls} calls", fontsize=9)
        f = r.factor[np.isfinite(r.factor)]
        hist.hist(f, bins=min(40, max(5, int(np.sqrt(len(f))) + 1)), color="tab:blue", label="calls")
        hist.axvline(1.0, color="tab:red", linewidth=1, label="omega = T (above: imbalanced)")
        hist.set_xlabel("imbalance factor omega / T")
        hist.set_ylabel("calls")
        hist.set_title("omega: last - first arrival; T: one message", fontsize=8)
        hist.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig, len(shown)
