"""Case files: ``cases/*.yaml``, one calibration case each.

A case has an id, the model shape, the execution layout, the evidence profile
name, and a separate ``comparison`` section (paper value, oracle record id).
Rule: the estimate path receives only :class:`EstimateInput` (shape, layout,
profile name); the id and the comparison section never reach it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError

from harness.errors import InputError, UnsupportedFeatureError
from harness.ir.base import Frozen
from harness.ir.checks import layout_problems, unsupported_features
from harness.ir.model import ExecutionLayout, TransformerShape

CASE_SCHEMA = "blueprinting.case.v0"


class PaperValue(Frozen):
    """A measured iteration time from a publication (the holdout)."""

    iteration_s: float = Field(gt=0, description="Measured seconds per iteration.")
    citation: str = Field(min_length=1, description="Where the value was published (paper, table).")


class Comparison(Frozen):
    """Comparison-only data: never read while lowering or estimating."""

    paper: PaperValue | None = Field(None, description="Paper holdout value, if the case has one.")
    oracle_record: str | None = Field(None, description="Id of the vendored Calculon record to compare with.")


class EstimateInput(Frozen):
    """Everything the estimate path may see: anonymous shape, layout, profile."""

    model: TransformerShape = Field(description="Model shape.")
    execution: ExecutionLayout = Field(description="Parallel layout and options.")
    system: str = Field(min_length=1, description="Evidence profile name (file stem in evidence/).")


class CaseFile(Frozen):
    """One case YAML."""

    schema_: Literal["blueprinting.case.v0"] = Field(alias="schema", description="Case file schema name and version.")
    id: str = Field(min_length=1, description="Case id, for reports and test ids only.")
    system: str = Field(min_length=1, description="Evidence profile name (file stem in evidence/).")
    model: TransformerShape = Field(description="Model shape.")
    execution: ExecutionLayout = Field(description="Parallel layout and options.")
    comparison: Comparison = Field(default_factory=Comparison, description="Comparison-only data.")

    def estimate_input(self) -> EstimateInput:
        return EstimateInput(model=self.model, execution=self.execution, system=self.system)


def _pydantic_error(source: str, error: ValidationError) -> InputError:
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "<root>"
    message = first["msg"]
    if first["type"] == "extra_forbidden":
        message = "unknown field"
    elif first["type"] == "missing":
        message = "required field is missing"
    return InputError(source, field, message)


def validate_input(source: str, data: EstimateInput | CaseFile) -> None:
    """Raise the first semantic problem of a parsed input as an InputError."""
    unsupported = unsupported_features(data.execution)
    if unsupported:
        raise UnsupportedFeatureError(source, unsupported[0])
    problems = layout_problems(data.model, data.execution)
    if problems:
        field, message = problems[0]
        raise InputError(source, field, message)


def parse_case(data: Any, source: str) -> CaseFile:
    """Validate plain data as a case; errors name ``source`` and the field."""
    if not isinstance(data, dict):
        raise InputError(source, "<root>", "a case file must be a mapping")
    try:
        case = CaseFile.model_validate(data)
    except ValidationError as error:
        raise _pydantic_error(source, error) from None
    validate_input(source, case)
    return case


def load_case(path: Path | str) -> CaseFile:
    """Load and validate one case YAML."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as error:
        raise InputError(str(path), "<file>", error.strerror or str(error)) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "<yaml>"
        raise InputError(str(path), where, f"not valid YAML: {getattr(error, 'problem', error)}") from None
    return parse_case(data, str(path))


def load_cases(directory: Path | str) -> list[CaseFile]:
    """All cases of a directory, sorted by file name; ids must be unique."""
    directory = Path(directory)
    cases = [load_case(p) for p in sorted(directory.glob("*.yaml"))]
    seen: dict[str, str] = {}
    for case, path in zip(cases, sorted(directory.glob("*.yaml"))):
        if case.id in seen:
            raise InputError(str(path), "id", f"duplicate case id {case.id!r} (also in {seen[case.id]})")
        seen[case.id] = str(path)
    return cases
