"""Human-readable tables of a calibration report (rich).

Two tables as in the seed: per-case totals (peak-only, evidence, Calculon,
paper, evidence vs paper) and component-level parity (evidence view vs
Calculon), then the summary lines and every budget violation.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from harness.experiment.report import Report
from harness.vocabulary import PEAK_ONLY, SYSTEM_EVIDENCE


def _fmt(value: float | None, spec: str = ".4f") -> str:
    return "-" if value is None else format(value, spec)


def results_table(report: Report) -> Table:
    table = Table(title="Calibration results (seconds per iteration)")
    for name in ("Case", "Peak-only (s)", "Evidence (s)", "Calculon (s)", "Paper (s)", "Evidence vs paper"):
        table.add_column(name, justify="left" if name == "Case" else "right")
    for r in report.cases:
        calculon = r.calculon[SYSTEM_EVIDENCE].get("total_s")
        paper = r.paper
        table.add_row(r.id + ("" if r.status == "ok" else f" [{r.status}]"),
                      _fmt(r.views[PEAK_ONLY]["total_s"]), _fmt(r.views[SYSTEM_EVIDENCE]["total_s"]),
                      _fmt(calculon), _fmt(paper.iteration_s if paper else None, ".2f"),
                      f"{paper.system_evidence_error_pct:+.2f}%" if paper else "-")
    return table


def parity_table(report: Report) -> Table:
    s = report.summary
    table = Table(title=f"Component-level parity, evidence view vs Calculon ({s.scope})")
    for name in ("Timing component", "MAPE", "Max |error|", "Max |time error|"):
        table.add_column(name, justify="left" if name == "Timing component" else "right")
    for comp, p in s.component_parity.items():
        table.add_row(comp, f"{p.mape_pct:.3g}%", f"{p.max_abs_pct:.3g}%", f"{p.max_abs_s:.3g} s")
    return table


def comparison_tables(report: Report) -> list[Table]:
    tables = []
    for c in report.comparisons:
        table = Table(title=f"Comparison, not a budget: the paper cases on {c.profile} (revision {c.revision[:12]})")
        for name in ("Case", "Peak-only (s)", "Evidence (s)", "Paper (s)", "Evidence vs paper"):
            table.add_column(name, justify="left" if name == "Case" else "right")
        for r in c.cases:
            table.add_row(r.id + ("" if r.status == "ok" else f" [{r.status}]"), _fmt(r.peak_only_total_s),
                          _fmt(r.system_evidence_total_s), _fmt(r.paper_s, ".2f"),
                          "-" if r.error_pct is None else f"{r.error_pct:+.2f}%")
        if c.paper_mape_pct is not None:
            table.caption = f"{c.profile} vs paper: MAPE {c.paper_mape_pct:.2f}%, max |error| {c.paper_max_abs_pct:.2f}%"
        tables.append(table)
    return tables


def summary_lines(report: Report) -> list[str]:
    s, a = report.summary, report.all_cases
    lines = [
        f"peak-only vs Calculon MAPE: {s.peak_only_vs_calculon_mape_pct:.2f}%",
        f"system-evidence vs Calculon: max |error| {s.evidence_vs_calculon_max_abs_pct:.3g}% over every component, "
        f"total and workload metric ({s.workload_comparisons} workload comparisons); "
        f"all {a.cases} cases: {a.evidence_vs_calculon_max_abs_pct:.3g}%, memory {a.memory_max_abs_bytes:.0f} bytes",
    ]
    if s.evidence_vs_paper_mape_pct is not None:
        lines.append(f"system-evidence vs paper MAPE: {s.evidence_vs_paper_mape_pct:.2f}%, "
                     f"max |error|: {s.evidence_vs_paper_max_abs_pct:.2f}%")
    lines.append(f"oracle: {report.provenance.oracle.name} {report.provenance.oracle.version} "
                 f"({report.provenance.oracle.mode}), evidence: "
                 + ", ".join(f"{p.name}@{p.revision[:12]}" for p in report.provenance.evidence))
    violations = report.violations
    lines.append("budgets: all met" if not violations else f"budgets: {len(violations)} violation(s)")
    lines += [f"  VIOLATION {v}" for v in violations]
    return lines


def print_report(report: Report, console: Console | None = None) -> None:
    console = console or Console(width=120)
    console.print(results_table(report))
    console.print(parity_table(report))
    for table in comparison_tables(report):
        console.print(table)
    for line in summary_lines(report):
        console.print(line, highlight=False, markup=False)
