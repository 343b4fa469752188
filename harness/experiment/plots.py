"""Plots of a calibration report (PNG), through :func:`harness.report.plots.write_plots`."""

from __future__ import annotations

from pathlib import Path

from harness.experiment.report import Report
from harness.report.plots import PlotRow, write_plots
from harness.vocabulary import PEAK_ONLY, SYSTEM_EVIDENCE


def report_rows(report: Report) -> list[PlotRow]:
    """One plot row per case: both views, Calculon, the paper and the Shapley split."""
    rows = []
    for r in report.cases:
        rows.append(PlotRow(
            id=r.id,
            peak_only_total_s=r.views[PEAK_ONLY]["total_s"],
            system_evidence_total_s=r.views[SYSTEM_EVIDENCE]["total_s"],
            calculon_total_s=r.calculon[SYSTEM_EVIDENCE].get("total_s"),
            paper_s=r.paper.iteration_s if r.paper else None,
            components_s={view: data["components_s"] for view, data in r.views.items()},
            attribution_s=r.attribution.get("attribution_s"),
        ))
    return rows


def write_report_plots(report: Report, directory: Path | str) -> list[Path]:
    return write_plots(report_rows(report), Path(directory))
