"""Human-readable tables of a measured-evidence report (rich)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

CLASSES = ("one_node", "multi_node")


def _cell(m: dict[str, Any]) -> str:
    """A metrics cell; no record: "not enough data" (never a figure)."""
    if not m or not m["count"]:
        return "not enough data"
    return f"{m['mape_pct']:.2f} / {m['bias_pct']:+.2f} / {m['max_abs_pct']:.1f}"


def metrics_table(report: dict[str, Any]) -> Table:
    table = Table(title="Iteration time error, MAPE / bias / max |error| (%)")
    table.add_column("What")
    for c in CLASSES:
        table.add_column(c, justify="right")
    labels = {"peak_only": "peak_only view (fitted profile), in sample",
              "base": f"base {report['profile']['base']} system_evidence, in sample",
              "fitted": f"fitted {report['profile']['name']} system_evidence, in sample"}
    for label, per in report["in_sample"].items():
        table.add_row(labels[label], *(_cell(per.get(c)) for c in CLASSES))
    names = {"shape": "leave one shape out (cross-validated)", "processors": "leave one GPU count out (cross-validated)",
             "hidden": "leave one hidden size out (no budget)", "blocks": "leave one block count out (no budget)",
             "tensor_parallel": "leave one TP degree out (no budget)",
             "microbatch": "leave one microbatch size out (no budget)",
             "multi_node": "fit one node only, predict multi-node (no budget)"}
    for grouping, data in report["cross_validation"].items():
        table.add_row(names.get(grouping, grouping), *(_cell(data["classes"].get(c)) for c in CLASSES))
    return table


def groups_table(report: dict[str, Any]) -> Table:
    table = Table(title="Held-out groups: MAPE / bias / max |error| (%)")
    for name in ("Grouping", "Held-out group", "Class", "Rows", "Error"):
        table.add_column(name, justify="right" if name in ("Rows",) else "left")
    for grouping, data in report["cross_validation"].items():
        for group, per in data["groups"].items():
            for c, m in per.items():
                table.add_row(grouping, group, c, str(m["count"]), _cell(m))
        for group, reason in data.get("not_enough_data", {}).items():
            table.add_row(grouping, group, "-", "0", reason)
    return table


def parameters_table(report: dict[str, Any]) -> Table:
    table = Table(title="Fitted parameters (bounds are the physically plausible range)")
    for name in ("Parameter", "Value", "Std. error", "Unit", "Bounds"):
        table.add_column(name)
    for p in report["fit"]["parameters"]:
        error = "-" if p.get("standard_error") is None else f"{p['standard_error']:g}"
        table.add_row(p["name"], f"{p['value']:g}", error, p["unit"], f"{p['lower']:g} .. {p['upper']:g}")
    return table


def attribution_table(report: dict[str, Any]) -> Table:
    table = Table(title=f"Move {report['profile']['base']} -> {report['profile']['name']}: Shapley share per "
                        "family (percentage points)")
    table.add_column("Family / switch")
    columns = [(c, metric) for c in CLASSES if c in report["attribution_base_to_fitted"]
               for metric in ("bias_pct", "mape_pct")]
    for c, metric in columns:
        table.add_column(f"{c} {metric.split('_')[0]}", justify="right")
    moves = next(iter(report["attribution_base_to_fitted"].values()))["bias_pct"] if columns else {}
    for move in moves:
        table.add_row(move, *(f"{report['attribution_base_to_fitted'][c][metric][move]:+.2f}" for c, metric in columns))
    return table


def print_measured_report(report: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console(width=150)
    p = report["profile"]
    console.print(f"{p['name']} revision {p['revision'][:16]} (refit {p['refit_revision'][:16]}: "
                  f"{'reproduces' if p['refit_reproduces_shipped'] else 'DIFFERS FROM'} the shipped revision)")
    console.print(parameters_table(report))
    console.print(metrics_table(report))
    console.print(groups_table(report))
    console.print(attribution_table(report))
    for grouping, data in report["cross_validation"].items():
        if grouping not in ("shape", "processors"):
            continue
        console.print(f"worst held-out rows ({grouping}):")
        for row in data["worst_rows"][:5]:
            console.print(f"  {row['error_pct']:+7.1f} %  {row['configuration']}  measured {row['measured_s']:.3f} s")
    if report["checks"]:
        console.print("checks, never fitted (layer passes: one layer, one microbatch):")
        for row in report["checks"]:
            console.print(f"  {row['id']:15s} {row['what']:15s} measured {row['measured_s']:.4g} s, fitted "
                          f"{row['fitted_s']:.4g} s ({row['fitted_error_pct']:+.1f} %), base "
                          f"{row['base_s']:.4g} s ({row['base_error_pct']:+.1f} %)  {row['note'][:60]}")
    if report["violations"]:
        console.print("[bold red]budgets broken:[/]")
        for v in report["violations"]:
            console.print(f"  - {v}")
    else:
        console.print("budgets: all met")
