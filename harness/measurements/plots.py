"""PNG plots of a measured-evidence report.

- ``predicted_vs_measured.png``: predicted against measured iteration time
  (log-log, diagonal = exact, dotted = +-10 %), one panel each for the
  peak-only view, the base revision, the fitted revision in sample, and the
  fitted structure held out (leave one shape out);
- ``error_by_group.png``: the held-out errors per left-out group (shape, and
  GPU count), one dot per run, with the group's MAPE and bias;
- ``attribution.png``: the Shapley share of each family in the move from the
  base to the fitted revision (mean signed error and MAPE, per node class).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from harness.outputs import atomic_output

FILES = ("predicted_vs_measured.png", "error_by_group.png", "attribution.png")
COLORS = {"one_node": "#1f77b4", "multi_node": "#d62728"}


def _save(fig: Figure, path: Path) -> Path:
    fig.tight_layout()
    with atomic_output(path, "wb", option="--plots") as handle:
        fig.savefig(handle, format="png")
    return path


def class_errors(rows: list[dict[str, Any]], key: str) -> str:
    """MAPE and bias of ``key`` per node class (one-node and multi-node apart, as in the report's tables; pooled
    they hid a multi-node error behind many one-node records)."""
    parts = []
    for c in COLORS:
        errors = np.array([100 * (r[key] - r["measured_s"]) / r["measured_s"] for r in rows
                           if r["class"] == c and np.isfinite(r.get(key, np.nan))])
        if len(errors):
            parts.append(f"{c}: MAPE {np.mean(np.abs(errors)):.1f} %, bias {np.mean(errors):+.1f} %")
    return "\n".join(parts)


def plot_predicted_vs_measured(report: dict[str, Any], path: Path) -> Path:
    rows = report["rows"]
    panels = [("peak_only_s", "peak_only view"), ("base_s", f"base {report['profile']['base']}"),
              ("fitted_s", f"{report['profile']['name']} (in sample)"),
              ("cv_shape_s", f"{report['profile']['name']} structure, shape held out")]
    fig = Figure(figsize=(16, 4.8), dpi=110)
    FigureCanvasAgg(fig)
    measured = np.array([r["measured_s"] for r in rows])
    lo, hi = measured.min() / 3, measured.max() * 2
    for k, (key, title) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), k + 1)
        for c, color in COLORS.items():
            sel = [r for r in rows if r["class"] == c and np.isfinite(r.get(key, np.nan))]
            if sel:
                ax.scatter([r["measured_s"] for r in sel], [r[key] for r in sel], s=7, alpha=0.6, color=color,
                           label=f"{c} ({len(sel)})")
        ax.plot([lo, hi], [lo, hi], color="black", linewidth=0.8)
        for f in (0.9, 1.1):
            ax.plot([lo, hi], [lo * f, hi * f], color="gray", linewidth=0.6, linestyle=":")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_title(f"{title}\n{class_errors(rows, key)}", fontsize=9)
        ax.set_xlabel("measured (s)", fontsize=8)
        ax.set_ylabel("predicted (s)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=7, loc="upper left")
    return _save(fig, path)


def plot_error_by_group(report: dict[str, Any], path: Path) -> Path:
    rows = report["rows"]
    fig = Figure(figsize=(14, 5.5), dpi=110)
    FigureCanvasAgg(fig)
    for k, (grouping, key, label) in enumerate((("shape", "shape", "left-out shape"),
                                                ("processors", "processors", "left-out GPU count"))):
        ax = fig.add_subplot(1, 2, k + 1)
        column = f"cv_{grouping}_s"
        groups = sorted({r[key] for r in rows}, key=lambda g: (isinstance(g, str), g))
        for x, g in enumerate(groups):
            sel = [r for r in rows if r[key] == g and np.isfinite(r.get(column, np.nan))]
            e = np.array([100 * (r[column] - r["measured_s"]) / r["measured_s"] for r in sel])
            jitter = (np.arange(len(e)) % 17 - 8) / 40
            ax.scatter(x + jitter, e, s=5, alpha=0.5, color=[COLORS[r["class"]] for r in sel])
            if len(e):
                ax.text(x, max(e.max(), 0) + 3, f"{np.mean(np.abs(e)):.1f}\n"
                        f"{np.mean(e):+.1f}", ha="center", va="bottom", fontsize=7)
        ax.axhline(0, color="black", linewidth=0.8)
        for limit in (-10, 10):
            ax.axhline(limit, color="gray", linewidth=0.6, linestyle=":")
        labels = [" ".join(w for w in str(g).split() if w.startswith(("h", "blocks"))) or str(g) for g in groups]
        ax.set_xticks(range(len(groups)), [label.replace(" ", "\n") for label in labels], fontsize=7)
        low, high = ax.get_ylim()
        ax.set_ylim(low, high + 0.12 * (high - low))
        ax.set_ylabel("held-out error (%)", fontsize=8)
        ax.set_title(f"Cross-validated error by {label} (MAPE / bias above each group)", fontsize=9)
        ax.tick_params(axis="y", labelsize=7)
    return _save(fig, path)


def plot_attribution(report: dict[str, Any], path: Path) -> Path:
    moves = report["attribution_base_to_fitted"]
    fig = Figure(figsize=(12, 4.8), dpi=110)
    FigureCanvasAgg(fig)
    for k, metric in enumerate(("bias_pct", "mape_pct")):
        ax = fig.add_subplot(1, 2, k + 1)
        names = list(next(iter(moves.values()))[metric]) if moves else []
        width = 0.8 / max(len(moves), 1)
        for j, (c, data) in enumerate(moves.items()):
            ax.bar(np.arange(len(names)) + j * width, [data[metric][n] for n in names], width, color=COLORS[c],
                   label=c)
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_xticks(np.arange(len(names)) + width * (len(moves) - 1) / 2, names, fontsize=7, rotation=90,
                      ha="center")  # family names are long single words: horizontal, neighbours ran together
        ax.set_ylabel("percentage points", fontsize=8)
        ax.set_title(f"Shapley share of the move {report['profile']['base']} -> {report['profile']['name']}: "
                     f"{'mean signed error' if metric == 'bias_pct' else 'MAPE'}", fontsize=9)
        ax.legend(fontsize=7)
    return _save(fig, path)


def write_measured_plots(report: dict[str, Any], directory: Path | str) -> list[Path]:
    directory = Path(directory)
    return [plot_predicted_vs_measured(report, directory / FILES[0]), plot_error_by_group(report, directory / FILES[1]),
            plot_attribution(report, directory / FILES[2])]
