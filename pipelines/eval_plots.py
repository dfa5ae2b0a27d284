"""Result plots, drawn server-side by the worker with matplotlib (Agg) to SVG text:
the cumulative distribution of per-OOD-class FPR (NINCO's figure 5), per-class FPR bars, and
AUROC per C-OOD severity level."""
from __future__ import annotations

import io

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


def fpr_cdf_svg(per_detector: dict[str, list[float]], *, title: str) -> str:
    """One step curve per detector: the share of OOD classes whose FPR@95 (ID positive) is at
    most x. Curves further up and left are better."""
    fig, ax = _figure(7.0, 4.2)
    for label, values in per_detector.items():
        v = np.sort(np.asarray([x for x in values if x is not None], dtype=float))
        if not len(v):
            continue
        x = np.concatenate([[0.0], v, [1.0]])
        y = np.concatenate([[0.0], np.arange(1, len(v) + 1) / len(v), [1.0]])
        ax.step(x * 100, y * 100, where="post", label=label, linewidth=1.4)
    ax.set_xlim(0, 100)
    ax.set_ylim(0, 101)
    ax.set_xlabel("FPR@95% TPR, ID positive (NINCO), per OOD class [%]")
    ax.set_ylabel("OOD classes with at most this FPR [%]")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2, loc="lower right")
    return _svg(fig)


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
    for label, aurocs in per_detector.items():
        ax.plot(range(len(aurocs)), [a * 100 if a is not None else np.nan for a in aurocs], marker="o", markersize=3, label=label)
    ax.set_xlabel("C-OOD severity level")
    ax.set_ylabel("AUROC [%]")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
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
