"""Case files: ``cases/*.yaml``, one calibration case each.

A case has an id, the model shape, the execution layout, the evidence profile
name, and a separate ``comparison`` section (paper value, oracle record id).
Rule: the estimate path receives only :class:`EstimateInput` (shape, layout,
profile name); the id and the comparison section never reach it.

Input rules: a case file is read by :mod:`harness.inputs` (UTF-8, one YAML
document, bounded nesting, finite numbers, unique keys) and validated
strictly (see :mod:`harness.ir.model` for the size bounds). ``system`` is an
evidence profile *name* (:data:`harness.names.ProfileName`: lower case, never
a path). An id is an :data:`harness.names.Identifier`: no control or format
character (it appears in one-line errors and test ids).
A case directory must exist and hold at least one ``*.yaml``.
"""


import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from harness.errors import InputError, UnsupportedFeatureError
from harness.inputs import MIN_ITERATION_S, Document, read_yaml, validate
from harness.ir.checks import layout_problems, unsupported_features
from harness.ir.model import ExecutionLayout, StrictInput, TransformerShape
from harness.names import Identifier, ProfileName

CASE_SCHEMA = "blueprinting.case.v0"


class PaperValue(StrictInput):
    """A measured iteration time from a publication (the holdout)."""

    iteration_s: float = Field(ge=MIN_ITERATION_S, le=1e9, allow_inf_nan=False,
                               description="Measured seconds per iteration (at least 100 microseconds).")
    citation: str = Field(min_length=1, max_length=1000, description="Where the value was published (paper, table).")


class Comparison(StrictInput):
    """Comparison-only data: never read while lowering or estimating."""

    paper: PaperValue | None = Field(None, description="Paper holdout value, if the case has one.")
    oracle_record: Identifier | None = Field(None,
                                      description="Id of the vendored Calculon record to compare with.")


class EstimateInput(StrictInput):
    """Everything the estimate path may see: anonymous shape, layout, profile."""

    model: TransformerShape = Field(description="Model shape.")
    execution: ExecutionLayout = Field(description="Parallel layout and options.")
    system: ProfileName = Field(description="Evidence profile name (file stem in evidence/).")


class CaseFile(StrictInput):
    """One case YAML."""

    schema_: Literal["blueprinting.case.v0"] = Field(alias="schema", description="Case file schema name and version.")
    id: Identifier = Field(description="Case id, for reports and test ids only.")
    system: ProfileName = Field(description="Evidence profile name (file stem in evidence/).")
    model: TransformerShape = Field(description="Model shape.")
    execution: ExecutionLayout = Field(description="Parallel layout and options.")
    comparison: Comparison = Field(default_factory=Comparison, description="Comparison-only data.")

    def estimate_input(self) -> EstimateInput:
        return EstimateInput(model=self.model, execution=self.execution, system=self.system)


def case_has_field(case_path: str) -> bool:
    """Whether the case format has ``model.X`` / ``execution.X[.Y]`` (read from the case models): the importers
    of other formats (measured runs, Hugging Face configs) ask it before setting an optional feature, so a
    field that lands under its agreed name is picked up without a change to them."""
    section, *rest = case_path.split(".")
    model: type[BaseModel] | None = {"model": TransformerShape, "execution": ExecutionLayout}.get(section)
    for key in rest:
        if model is None or key not in model.model_fields:
            return False
        annotation = model.model_fields[key].annotation
        model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    return bool(rest)


def validate_input(source: str, data: EstimateInput | CaseFile) -> None:
    """Raise the first semantic problem of a parsed input as an InputError."""
    problems = layout_problems(data.model, data.execution)
    if not problems:
        unsupported = unsupported_features(data.model, data.execution)
        if unsupported:
            raise UnsupportedFeatureError(source, *unsupported[0])
    if problems:
        field, message = problems[0]
        raise InputError(source, field, message)


def parse_case(data: Any, source: str, document: Document | None = None) -> CaseFile:
    """Validate plain data as a case; errors name ``source``, the field and (with ``document``) the line."""
    case = validate(CaseFile, data, source, document=document, what="a mapping (a case file)")
    validate_input(source, case)
    return case


def load_case(path: Path | str) -> CaseFile:
    """Load and validate one case YAML (``path``: a str or os.PathLike; another type is an InputError naming
    the argument)."""
    if not isinstance(path, (str, os.PathLike)):
        raise InputError("<input>", "path", f"must be a case file's path (str or os.PathLike), got "
                                            f"{type(path).__name__}")
    document = read_yaml(path)
    return parse_case(document.data, str(path), document)


def case_paths(directory: Path | str, option: str = "--cases") -> list[Path]:
    """The ``*.yaml`` files of a case directory, sorted; a missing, non-directory or empty one is an error."""
    directory = Path(directory)
    if not directory.exists():
        raise InputError(str(directory), option, "no such case directory")
    if not directory.is_dir():
        raise InputError(str(directory), option, "not a directory (give the directory that holds the case files)")
    try:
        paths = sorted(p for p in directory.glob("*.yaml"))
    except OSError as error:
        raise InputError(str(directory), option, f"cannot list the directory: {error.strerror or error}") from None
    if not paths:
        raise InputError(str(directory), option, "no case files (*.yaml) in this directory")
    return paths


def load_cases(directory: Path | str, option: str = "--cases") -> list[CaseFile]:
    """All cases of a directory, sorted by file name; ids must be unique; zero cases is an error."""
    return [case for _, case in load_case_files(directory, option)]


def load_case_files(directory: Path | str, option: str = "--cases") -> list[tuple[Path, CaseFile]]:
    """``(path, case)`` of every case of a directory (see :func:`load_cases`)."""
    out = [(p, load_case(p)) for p in case_paths(directory, option)]
    seen: dict[str, str] = {}
    for path, case in out:
        if case.id in seen:
            raise InputError(str(path), "id", f"duplicate case id {case.id!r} (also in {seen[case.id]})")
        seen[case.id] = str(path)
    return out
