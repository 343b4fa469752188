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

Schema (:class:`ContractFile`, checked by :func:`load_contract` before any
comparison): the file is read by :mod:`harness.inputs` (strict JSON: no
``NaN``, no repeated key); every key is known, every value has its type
(strict: a string or a list where a number belongs is an error), every
number is finite, digests are 64 hex digits, and no tolerance or budget is
looser than its frozen value in the code (:data:`AGGREGATE_TOLERANCE_PCT`
for the percentage aggregates, 0 for ``workload_comparisons``, the
:class:`~harness.experiment.report.Budgets` defaults). A contract that
breaks the schema is one error line naming the file and the field, never an
"honoured" gate.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StringConstraints, model_validator

from harness import locations
from harness.experiment.isolation import POLICY
from harness.experiment.report import REPORT_SCHEMA, Budgets, Report
from harness.inputs import read_json, validate
from harness.ir.base import Frozen
from harness.outputs import write_text

CONTRACT_SCHEMA = "blueprinting.baseline-regression-contract.v0"
AGGREGATES = ("peak_only_vs_calculon_mape_pct", "peak_only_vs_calculon_max_abs_pct", "evidence_vs_paper_mape_pct",
              "evidence_vs_paper_max_abs_pct", "peak_only_vs_paper_mape_pct")
AGGREGATE_TOLERANCE_PCT = 1e-9  # absolute, in percentage points
#: The frozen budget of each aggregate's tolerance: a contract may tighten it, never loosen it.
FROZEN_TOLERANCES = {name: AGGREGATE_TOLERANCE_PCT for name in AGGREGATES} | {"workload_comparisons": 0}
SHA256_PATTERN = r"^[0-9a-f]{64}$"
Sha256 = Annotated[str, StringConstraints(pattern=SHA256_PATTERN)]


class _Strict(Frozen):
    model_config = ConfigDict(strict=True)


class ContractOracle(_Strict):
    name: str = Field(description="Oracle name.")
    version: str = Field(description="Oracle version.")
    source_tree_sha256: str = Field(pattern=SHA256_PATTERN, description="Digest of the oracle's source tree.")


class ContractBudgets(_Strict):
    calculon_pct: float = Field(ge=0, allow_inf_nan=False, description="Budget vs Calculon, percent.")
    memory_bytes: float = Field(ge=0, allow_inf_nan=False, description="Memory budget vs Calculon, bytes.")
    paper_mape_pct: float = Field(ge=0, allow_inf_nan=False, description="Evidence vs paper MAPE pin, percent.")
    paper_max_abs_pct: float = Field(ge=0, allow_inf_nan=False, description="Evidence vs paper max pin, percent.")

    @model_validator(mode="after")
    def _not_looser(self):
        frozen = Budgets()
        for name in type(self).model_fields:
            if getattr(self, name) > getattr(frozen, name):
                raise ValueError(f"{name} {getattr(self, name)!r} is looser than the frozen budget "
                                 f"{getattr(frozen, name)!r}")
        return self


class ContractAggregate(_Strict):
    value: float = Field(allow_inf_nan=False, description="The aggregate's golden value.")
    tolerance_pct: float = Field(ge=0, allow_inf_nan=False, description="Absolute tolerance, percentage points.")


class ContractInputs(_Strict):
    case_file_sha256: str = Field(pattern=SHA256_PATTERN, description="SHA-256 of the case YAML.")
    execution_sha256: str = Field(pattern=SHA256_PATTERN, description="Digest of the canonical layout.")
    model_sha256: str = Field(pattern=SHA256_PATTERN, description="Digest of the canonical shape.")
    system_sha256: str = Field(pattern=SHA256_PATTERN, description="SHA-256 of the evidence profile file.")


class ContractFile(_Strict):
    """The schema of ``goldens/baseline_regression_contract.json``."""

    schema_: Literal["blueprinting.baseline-regression-contract.v0"] = Field(alias="schema",
                                                                              description="Contract schema.")
    report_schema: str = Field(description="Report schema the contract was written from.")
    oracle: ContractOracle = Field(description="Oracle identity.")
    isolation_policy: str = Field(description="The oracle-isolation policy text.")
    budgets: ContractBudgets = Field(description="The report budgets.")
    evidence_revisions: dict[str, Sha256] = Field(description="Evidence profile -> revision.")
    cases: list[str] = Field(description="Case ids.")
    input_provenance: dict[str, ContractInputs] = Field(description="Case id -> input digests.")
    aggregates: dict[Literal[AGGREGATES + ("workload_comparisons",)], ContractAggregate] = Field(
        description="Aggregate goldens with their tolerances.")
    portable_plan_digests: dict[str, Sha256] = Field(description="Case id -> PortablePlanIR digest.")

    @model_validator(mode="after")
    def _frozen_tolerances(self):
        for name, entry in self.aggregates.items():
            if entry.tolerance_pct > FROZEN_TOLERANCES[name]:
                raise ValueError(f"aggregates.{name}.tolerance_pct {entry.tolerance_pct!r} is above its frozen "
                                 f"budget {FROZEN_TOLERANCES[name]!r}")
        return self


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
    """The contract as plain data, after the schema check (see the module rules); default: the current
    locations' (the project's, else the packaged one)."""
    path = locations.current().contract_path() if path is None else path
    document = read_json(path, what="--contract")
    contract = validate(ContractFile, document.data, str(path), what="a JSON object (the baseline contract)")
    return contract.model_dump(mode="json", by_alias=True)


def write_contract(report: Report, path: Path | None = None) -> Path:
    """Write the contract ``report`` satisfies, atomically (strict JSON); default: the project's (never the
    installed package's)."""
    path = locations.current().writable(locations.CONTRACT_FILE, "the baseline contract") if path is None else path
    return write_text(path, json.dumps(build_contract(report), indent=1, sort_keys=True, allow_nan=False) + "\n",
                      option="--contract", replaces_data=("contract",))
