"""Calibration plots: totals per case, stacked components, the evidence-gap waterfall.

Input: one :class:`PlotRow` per case (or a plain mapping with the same keys),
built e.g. by :func:`plot_row` from an :class:`~harness.estimate.Estimate`
and an :class:`~harness.explain.Attribution`. Calculon and paper values are
optional (None: the bar is left out). ``write_plots`` writes, in order:

- ``totals.png``: per case, grouped bars of peak_only, system_evidence,
  Calculon and paper (log scale), and below them each bar's ratio to the
  paper value (to Calculon when there is no paper value);
- ``components.png``: per case, one stacked bar of the nine timing
  components per view;
- ``gap_waterfall.png`` (only if some row has an attribution): per case,
  peak_only, the Shapley part of each curve family, system_evidence.

Every figure names its cases, units and views; it reads without the report.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from pydantic import Field, ValidationError

from harness.errors import HarnessError, InputError
from harness.estimate import Estimate
from harness.explain import Attribution
from harness.ir.base import Frozen
from harness.outputs import atomic_output, check_output_dir
from harness.vocabulary import COMPONENTS, CURVE_FAMILIES, PEAK_ONLY, SYSTEM_EVIDENCE

PLOT_FILES = ("totals.png", "components.png", "gap_waterfall.png")
SERIES = (("peak_only_total_s", PEAK_ONLY, "#9ecae1"), ("system_evidence_total_s", SYSTEM_EVIDENCE, "#3182bd"),
          ("calculon_total_s", "Calculon 0.1.0", "#fd8d3c"), ("paper_s", "paper", "#31a354"))


def palette(names: Sequence[str], colours: Sequence[Any]) -> dict[str, Any]:
    """One colour per name, in order; past the end of ``colours`` they repeat (a new vocabulary entry gets a
    colour, never an import error; distinct while there are at most ``len(colours)`` names)."""
    return {name: colours[i % len(colours)] for i, name in enumerate(names)}


# Qualitative palettes: 17 family colours (Set1 then Dark2), 20 component colours.
FAMILY_COLORS = palette(CURVE_FAMILIES, colormaps["Set1"].colors + colormaps["Dark2"].colors)
COMPONENT_COLORS = palette(COMPONENTS, colormaps["tab20"].colors[::2] + colormaps["tab20"].colors[1::2])


class PlotRow(Frozen):
    """One case of the calibration plots."""

    id: str = Field(description="Case id (labels only).")
    peak_only_total_s: float = Field(description="peak_only iteration time, seconds.")
    system_evidence_total_s: float = Field(description="system_evidence iteration time, seconds.")
    calculon_total_s: float | None = Field(None, description="Calculon 0.1.0 iteration time, seconds, if known.")
    paper_s: float | None = Field(None, description="Published measured iteration time, seconds, if known.")
    components_s: dict[str, dict[str, float]] = Field(description="View name -> timing component -> seconds.")
    attribution_s: dict[str, float] | None = Field(None, description="Curve family -> Shapley part of the gap, "
                                                                     "seconds (None: no waterfall for this case).")


def plot_row(case_id: str, est: Estimate, attribution: Attribution | None = None,
             calculon_total_s: float | None = None, paper_s: float | None = None) -> PlotRow:
    """A plot row from library results (the estimate must hold both default views)."""
    return PlotRow(id=case_id, peak_only_total_s=est.views[PEAK_ONLY].total_s,
                   system_evidence_total_s=est.views[SYSTEM_EVIDENCE].total_s,
                   calculon_total_s=calculon_total_s, paper_s=paper_s,
                   components_s={n: v.components_s.model_dump() for n, v in est.views.items()},
                   attribution_s=dict(attribution.attribution_s) if attribution else None)


def _rows(rows: Iterable[PlotRow | Mapping[str, Any]]) -> list[PlotRow]:
    out = []
    for i, row in enumerate(rows):
        if isinstance(row, PlotRow):
            out.append(row)
            continue
        try:
            out.append(PlotRow.model_validate(row))
        except ValidationError as error:
            first = error.errors()[0]
            raise InputError(f"plot rows[{i}]", ".".join(map(str, first["loc"])) or "<row>", first["msg"]) from None
    if not out:
        raise HarnessError("write_plots: no rows to plot")
    return out


def _grid(n: int) -> tuple[Figure, list]:
    """A figure of small panels, four per row, with fixed margins in inches (no slow auto-layout)."""
    cols, rows = min(4, n), math.ceil(n / min(4, n))
    width, height = 3.7 * cols + 0.4, 3.1 * rows + 1.0
    fig = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(fig)
    fig.subplots_adjust(left=0.65 / width, right=1 - 0.15 / width, top=1 - 0.95 / height, bottom=0.9 / height,
                        wspace=0.32, hspace=0.75)
    return fig, [fig.add_subplot(rows, cols, i + 1) for i in range(n)]


def _save(fig: Figure, path: Path, layout: bool = False) -> Path:
    if layout:
        fig.tight_layout()
    with atomic_output(path, "wb", option="--plots") as handle:
        fig.savefig(handle, format="png")
    return path


def plot_totals(rows: list[PlotRow], path: Path) -> Path:
    """Grouped bars of the four totals per case, and their ratios to the reference."""
    with_reference = any(r.paper_s or r.calculon_total_s for r in rows)
    fig = Figure(figsize=(max(10.0, 0.75 * len(rows) + 2), 8.5 if with_reference else 5.5), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(2 if with_reference else 1, 1, 1)
    width = 0.2
    for k, (field, label, color) in enumerate(SERIES):
        xs = [i + (k - 1.5) * width for i, r in enumerate(rows) if getattr(r, field)]
        ys = [getattr(r, field) for r in rows if getattr(r, field)]
        if not xs:
            continue
        ax.bar(xs, ys, width, color=color, label=label)
        for x, y in zip(xs, ys):
            ax.text(x, y * 1.06, f"{y:.3g}", ha="center", va="bottom", fontsize=6, rotation=90)
    ax.set_yscale("log")
    ax.set_ylim(min(r.peak_only_total_s for r in rows) / 2, max(
        max(getattr(r, f) or 0 for f, _, _ in SERIES) for r in rows) * 4)
    ax.set_ylabel("iteration time (s, log scale)")
    ax.set_xticks(range(len(rows)), [r.id for r in rows], rotation=35, ha="right", fontsize=8)
    ax.legend(ncol=4, fontsize=8, loc="upper left")
    ax.set_title("Iteration time per case: estimates (peak_only, system_evidence) vs Calculon vs paper", fontsize=10)
    ax.grid(axis="y", color="0.9", which="both")
    ax.set_axisbelow(True)
    if with_reference:
        rax = fig.add_subplot(2, 1, 2)
        ratios = []
        for k, (field, label, color) in enumerate(SERIES[:3]):
            points = [(i + (k - 1.5) * width, getattr(r, field) / (r.paper_s or r.calculon_total_s))
                      for i, r in enumerate(rows) if getattr(r, field) and (r.paper_s or r.calculon_total_s)
                      and not (field == "calculon_total_s" and not r.paper_s)]
            if points:
                rax.bar([x for x, _ in points], [y - 1 for _, y in points], width, bottom=1, color=color, label=label)
                for x, y in points:
                    rax.text(x, y, f"{y:.2f}", ha="center", va="bottom" if y >= 1 else "top", fontsize=6.5,
                             rotation=90)  # side by side, horizontal labels of neighbouring bars overlapped
                ratios += [y for _, y in points]
        rax.axhline(1.0, color="black", linewidth=0.8)
        rax.set_ylim(min(ratios + [1.0]) - 0.1, max(ratios + [1.0]) + 0.1)
        rax.set_ylabel("ratio to paper\n(to Calculon if no paper value)")
        rax.set_title("Estimate (and Calculon) / paper; 1.0 = the measured iteration time", fontsize=10)
        rax.set_xticks(range(len(rows)), [r.id for r in rows], rotation=35, ha="right", fontsize=8)
        rax.set_xlim(ax.get_xlim())
        rax.grid(axis="y", color="0.9")
        rax.set_axisbelow(True)
        rax.legend(ncol=3, fontsize=8, loc="lower left")
    return _save(fig, path, layout=True)


def plot_components(rows: list[PlotRow], path: Path) -> Path:
    """One panel per case: a stacked bar of the timing components per view."""
    fig, axes = _grid(len(rows))
    for ax, row in zip(axes, rows):
        views = list(row.components_s)
        for x, view in enumerate(views):
            bottom = 0.0
            for name in COMPONENTS:
                value = row.components_s[view].get(name, 0.0)
                if value:
                    ax.bar(x, value, 0.6, bottom=bottom, color=COMPONENT_COLORS[name])
                    bottom += value
            ax.text(x, bottom, f"{bottom:.4g} s", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(views)), views, fontsize=7)
        ax.set_ylim(0, max(sum(c.values()) for c in row.components_s.values()) * 1.15)
        ax.set_title(f"{row.id}\nsystem_evidence / peak_only = "
                     f"{row.system_evidence_total_s / row.peak_only_total_s:.3f}", fontsize=9)
        ax.set_ylabel("seconds", fontsize=7)
        ax.tick_params(axis="y", labelsize=7)
    fig.suptitle("Timing components of one iteration per case and cost view (first pipeline stage)", fontsize=11,
                 y=1 - 0.25 / fig.get_figheight())
    handles = [Patch(color=COMPONENT_COLORS[n], label=n) for n in COMPONENTS]
    fig.legend(handles=handles, loc="lower center", ncol=len(COMPONENTS), fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, 0.05 / fig.get_figheight()))
    return _save(fig, path)


def plot_waterfall(rows: list[PlotRow], path: Path) -> Path:
    """One panel per case: peak_only, plus each family's Shapley part, equals system_evidence."""
    rows = [r for r in rows if r.attribution_s is not None]
    fig, axes = _grid(len(rows))
    for ax, row in zip(axes, rows):
        gap = row.system_evidence_total_s - row.peak_only_total_s
        floor = max(0.0, row.peak_only_total_s - 1.2 * abs(gap))
        families = [f for f in CURVE_FAMILIES if f in row.attribution_s]  # the families the profile defines
        labels = [PEAK_ONLY, *families, SYSTEM_EVIDENCE]
        level = row.peak_only_total_s
        ax.bar(0, level - floor, 0.7, bottom=floor, color="#9ecae1")
        for x, family in enumerate(families, start=1):
            part = row.attribution_s.get(family, 0.0)
            ax.bar(x, part, 0.7, bottom=level, color=FAMILY_COLORS[family])
            ax.text(x, max(level, level + part), f"{part:+.3g}", ha="center", va="bottom", fontsize=7)
            level += part
        ax.bar(len(labels) - 1, row.system_evidence_total_s - floor, 0.7, bottom=floor, color="#3182bd")
        for x, value in ((0, row.peak_only_total_s), (len(labels) - 1, row.system_evidence_total_s)):
            ax.text(x, value, f"{value:.4g}", ha="center", va="bottom", fontsize=7)
        ax.set_ylim(floor, max(row.peak_only_total_s, row.system_evidence_total_s) + 0.45 * abs(gap) + 1e-12)
        ax.set_xticks(range(len(labels)), ["peak\nonly", *(f.replace("_", "\n") for f in families),
                                           "system\nevidence"], fontsize=7)
        share = gap / row.peak_only_total_s if row.peak_only_total_s else 0.0
        ax.set_title(f"{row.id}\ngap {gap:+.3g} s ({share:+.1%} of peak_only)", fontsize=9)
        ax.set_ylabel("seconds (axis not from 0)", fontsize=7)
        ax.tick_params(axis="y", labelsize=7)
    fig.suptitle("Evidence gap (system_evidence - peak_only) split over the curve families by exact Shapley values",
                 fontsize=11, y=1 - 0.25 / fig.get_figheight())
    shown = [f for f in CURVE_FAMILIES if any(f in r.attribution_s for r in rows)]
    handles = [Patch(color=FAMILY_COLORS[f], label=f"{f} curve") for f in shown]
    fig.legend(handles=handles, loc="lower center", ncol=len(shown), fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, 0.05 / fig.get_figheight()))
    return _save(fig, path)


def write_plots(rows: Iterable[PlotRow | Mapping[str, Any]], directory: Path | str) -> list[Path]:
    """Write the calibration PNGs for ``rows`` into ``directory`` (created if missing; each PNG written
    atomically, :mod:`harness.outputs`); return their paths."""
    checked = _rows(rows)
    directory = check_output_dir(directory, option="--plots")
    totals, components, waterfall = (directory / name for name in PLOT_FILES)
    paths = [plot_totals(checked, totals), plot_components(checked, components)]
    if any(r.attribution_s is not None for r in checked):
        paths.append(plot_waterfall(checked, waterfall))
    return paths
