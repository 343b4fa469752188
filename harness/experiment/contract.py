"""The baseline regression contract: ``goldens/baseline_regression_contract.json``.

The contract freezes, together: the report schema, the oracle identity and
source digest, the input provenance digests, the oracle-isolation policy,
the budgets (Calculon equivalence 1e-9 %, memory 1 byte, paper MAPE and max),
the evidence revisions, the case identities, the aggregate goldens (with a
tolerance written in the contract) and every PortablePlanIR digest.

Rule: :func:`evaluate` returns *every* broken entry with expected, obtained
and budget; the gate fails when the list is not empty, the report's own
budget violations included. The contract changes only by ``harness contract
write`` (``tox -e goldens``) in a reviewed commit; CI never writes it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness import locations
from harness.experiment.isolation import POLICY
from harness.experiment.report import REPORT_SCHEMA, Report

CONTRACT_SCHEMA = "blueprinting.baseline-regression-contract.v0"
AGGREGATES = ("peak_only_vs_calculon_mape_pct", "peak_only_vs_calculon_max_abs_pct", "evidence_vs_paper_mape_pct",
              "evidence_vs_paper_max_abs_pct", "peak_only_vs_paper_mape_pct")
AGGREGATE_TOLERANCE_PCT = 1e-9  # absolute, in percentage points


def build_contract(report: Report) -> dict[str, Any]:
    """The contract that ``report`` satisfies."""
    s = report.summary
    return {
        "schema": CONTRACT_SCHEMA,
        "report_schema": REPORT_SCHEMA,
        "oracle": {"name": report.provenance.oracle.name, "version": report.provenance.oracle.version,
                   "source_tree_sha256": report.provenance.oracle.source_tree_sha256},
        "isolation_policy": POLICY,
        "budgets": s.budgets.model_dump(),
        "evidence_revisions": {p.name: p.revision for p in report.provenance.evidence},
        "cases": [c.id for c in report.cases],
        "input_provenance": {c.id: c.inputs.model_dump() for c in report.cases},
        "aggregates": {name: {"value": getattr(s, name), "tolerance_pct": AGGREGATE_TOLERANCE_PCT}
                       for name in AGGREGATES} | {"workload_comparisons": {"value": s.workload_comparisons,
                                                                           "tolerance_pct": 0}},
        "portable_plan_digests": {c.id: c.digests["portable_plan_ir"] for c in report.cases},
    }


def evaluate(contract: dict[str, Any], report: Report) -> list[str]:
    """Every broken entry (empty: the report honours the contract)."""
    obtained = build_contract(report)
    broken = [f"report budget: {v}" for v in report.violations]
    for key in ("schema", "report_schema", "oracle", "isolation_policy", "budgets", "evidence_revisions", "cases"):
        if contract.get(key) != obtained[key]:
            broken.append(f"{key}: expected {json.dumps(contract.get(key))}, obtained {json.dumps(obtained[key])}")
    for key in ("input_provenance", "portable_plan_digests"):
        expected, got = contract.get(key, {}), obtained[key]
        for case_id in sorted(set(expected) | set(got)):
            if expected.get(case_id) != got.get(case_id):
                broken.append(f"{key}[{case_id}]: expected {json.dumps(expected.get(case_id))}, "
                              f"obtained {json.dumps(got.get(case_id))}")
    for name, entry in contract.get("aggregates", {}).items():
        value = obtained["aggregates"].get(name, {}).get("value")
        tolerance = entry.get("tolerance_pct", 0)
        if value is None or entry.get("value") is None or abs(value - entry["value"]) > tolerance:
            broken.append(f"aggregates.{name}: expected {entry.get('value')!r}, obtained {value!r}, "
                          f"budget +-{tolerance} percentage points")
    missing = set(obtained["aggregates"]) - set(contract.get("aggregates", {}))
    broken += [f"aggregates.{name}: missing from the contract" for name in sorted(missing)]
    return broken


def load_contract(path: Path | None = None) -> dict[str, Any]:
    """The contract at ``path``, default the current locations' (the project's, else the packaged one)."""
    from harness.errors import HarnessError

    path = locations.current().contract_path() if path is None else path
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise HarnessError(f"{path}: cannot read the baseline contract ({error})") from None


def write_contract(report: Report, path: Path | None = None) -> Path:
    """Write the contract to ``path``, default the project's (never the installed package's)."""
    path = locations.current().writable(locations.CONTRACT_FILE, "the baseline contract") if path is None else path
    path.write_text(json.dumps(build_contract(report), indent=1, sort_keys=True) + "\n")
    return path
