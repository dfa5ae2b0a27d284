"""Result plots, drawn server-side by the worker with matplotlib (Agg) to SVG text:
the cumulative distribution of per-OOD-class FPR (NINCO's figure 5), per-class FPR bars, and
AUROC per C-OOD severity level."""
from __future__ import annotations

import io
from typing import Any

import numpy as np


def _svg(fig) -> str:
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _figure(width: float, height: float):
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(width, height))


# Line styles for many series (14 detectors and more): ten colours (matplotlib's tab10, which
# colour-blind readers tell apart best among the defaults), then the same colours dashed, dotted
# and dash-dotted, each series with its own marker as well.
_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
_LINES = ("-", "--", ":", "-.")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p")


def series_styles(n: int) -> list[dict]:
    """Keyword arguments for ``ax.plot`` / ``ax.step`` of ``n`` series, no two alike (up to 40)."""
    return [{"color": _COLOURS[i % len(_COLOURS)], "linestyle": _LINES[(i // len(_COLOURS)) % len(_LINES)],
             "marker": _MARKERS[i % len(_MARKERS)]} for i in range(n)]


def _legend_outside(ax) -> None:
    """The legend to the right of the axes, never over the data."""
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False)


def fpr_cdf_figure(per_detector: dict[str, list[float]], *, title: str) -> Any:
    """One step curve per detector: the share of OOD classes whose FPR@95 (ID positive) is at
    most x. Curves further up and left are better. Returns the matplotlib figure."""
    fig, ax = _figure(7.0, 4.2)
    for (label, values), style in zip(per_detector.items(), series_styles(len(per_detector))):
        v = np.sort(np.asarray([x for x in values if x is not None], dtype=float))
        if not len(v):
            continue
        x = np.concatenate([[0.0], v, [1.0]])
        y = np.concatenate([[0.0], np.arange(1, len(v) + 1) / len(v), [1.0]])
        ax.step(x * 100, y * 100, where="post", label=label, linewidth=1.4, markersize=3.5, markevery=max(1, len(x) // 8), **style)
    ax.set_xlim(0, 100)
    ax.set_ylim(0, 101)
    ax.set_xlabel("FPR@95% TPR, ID positive (NINCO), per OOD class [%]")
    ax.set_ylabel("OOD classes with at most this FPR [%]")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    _legend_outside(ax)
    return fig


def fpr_cdf_svg(per_detector: dict[str, list[float]], *, title: str) -> str:
    return _svg(fpr_cdf_figure(per_detector, title=title))


def class_bars_svg(names: list[str], values: list[float | None], *, title: str) -> str:
    """Horizontal bars of per-class FPR@95 (ID positive), worst class first."""
    pairs = sorted(((n, v) for n, v in zip(names, values) if v is not None), key=lambda p: -p[1])
    fig, ax = _figure(7.0, max(1.6, 0.28 * len(pairs) + 1.0))
    ys = np.arange(len(pairs))
    ax.barh(ys, [v * 100 for _, v in pairs], color="#4c72b0")
    ax.set_yticks(ys, [n for n, _ in pairs], fontsize=7)
    ax.invert_yaxis()
    ax.axvline(10, color="#c44e52", linewidth=0.8, linestyle="--")
    ax.set_xlim(0, 100)
    ax.set_xlabel("FPR@95% TPR, ID positive [%]")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    return _svg(fig)


def severity_svg(per_detector: dict[str, list[float | None]], *, title: str) -> str:
    fig, ax = _figure(7.0, 4.0)
    for (label, aurocs), style in zip(per_detector.items(), series_styles(len(per_detector))):
        ax.plot(range(len(aurocs)), [a * 100 if a is not None else np.nan for a in aurocs], markersize=3, label=label, **style)
    ax.set_xlabel("C-OOD severity level")
    ax.set_ylabel("AUROC [%]")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    _legend_outside(ax)
    return _svg(fig)


def full_spectrum_svg(labels: list[str], standard: list[float], full: list[float], shift: list[float], *, title: str) -> str:
    """Per detector, AUROC in the standard setting (ID test vs OOD), in the full-spectrum one
    (ID test + covariate-shifted ID vs OOD; ImageNet-FS-X) and for the shift alone (ID test vs
    shifted ID: 50% means the detector ignores the shift). Horizontal grouped bars, the legend
    below the plot so it never covers a bar."""
    fig, ax = _figure(7.0, max(2.0, 0.42 * len(labels) + 1.4))
    ys = np.arange(len(labels))
    h = 0.27
    for k, (values, name, colour, hatch) in enumerate((
            (standard, "standard: ID vs OOD", "#4c72b0", ""),
            (full, "full spectrum: ID + shifted ID vs OOD", "#dd8452", "//"),
            (shift, "shift: ID vs shifted ID", "#8c8c8c", ".."))):
        ax.barh(ys + (k - 1) * h, [v * 100 for v in values], height=h, color=colour, hatch=hatch, label=name)
    ax.axvline(50, color="#333333", linewidth=0.8, linestyle=":")
    ax.set_yticks(ys, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("AUROC [%]")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3, frameon=False)
    return _svg(fig)
