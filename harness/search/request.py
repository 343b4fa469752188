"""A search request from the command line: the model, the profile, the bounds.

Rules:

- the model is a Calculon-format model JSON (``hidden``, ``feedforward``,
  ``seq_size``, ``attn_heads``, ``attn_size``, ``num_blocks``) or a case YAML
  (its ``model`` section); errors name the file and the field;
- the system is an evidence profile name (``evidence/NAME.yaml``) or the path
  of a profile YAML (a fitted profile anywhere); the result names the
  profile and its revision;
- the datatype must have matrix and vector engines in the profile; the
  processor count and maximum batch must be positive; a space without any
  layout (no TP, PP and DP combination fits the processors and the batch) is
  an error naming ``--procs``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from harness.errors import EvidenceError, InputError
from harness.evidence.profile import EvidenceProfile, load_profile
from harness.interop.calculon_format import MODEL_FIELDS
from harness.ir.model import BYTES_PER_ELEMENT, TransformerShape
from harness.search.evaluate import SearchProblem
from harness.search.space import SpaceOptions, groups


def _read(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(str(path), "<file>", getattr(error, "strerror", None) or str(error)) from None
    if path.suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as error:
            raise InputError(str(path), f"line {error.lineno}", f"not valid JSON: {error.msg}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "<yaml>"
        raise InputError(str(path), where, f"not valid YAML: {getattr(error, 'problem', error)}") from None


def load_model(path: Path | str) -> TransformerShape:
    """The model shape of a Calculon model JSON or of a case YAML's ``model`` section."""
    path = Path(path)
    data = _read(path)
    if not isinstance(data, dict):
        raise InputError(str(path), "<root>", "a model file must be a mapping")
    if "model" in data and isinstance(data["model"], dict):
        prefix, values = "model", data["model"]
    elif set(MODEL_FIELDS) & set(data):
        unknown = sorted(set(data) - set(MODEL_FIELDS))
        if unknown:
            raise InputError(str(path), unknown[0], "unknown Calculon model field")
        missing = sorted(set(MODEL_FIELDS) - set(data))
        if missing:
            raise InputError(str(path), missing[0], "required Calculon model field is missing")
        prefix, values = None, {ours: data[theirs] for theirs, ours in MODEL_FIELDS.items()}
    else:
        raise InputError(str(path), "<root>", "neither a Calculon model JSON nor a case YAML with a model section")
    try:
        return TransformerShape.model_validate(values)
    except ValidationError as error:
        first = error.errors()[0]
        name = str(first["loc"][0]) if first["loc"] else "<root>"
        if prefix is None:
            name = {ours: theirs for theirs, ours in MODEL_FIELDS.items()}.get(name, name)
        message = "unknown field" if first["type"] == "extra_forbidden" else first["msg"]
        raise InputError(str(path), f"{prefix}.{name}" if prefix else name, message) from None


def resolve_profile(system: str) -> EvidenceProfile:
    """An evidence profile by name, or by the path of its YAML file."""
    path = Path(system)
    if path.suffix in (".yaml", ".yml") or path.parent != Path("."):
        if not path.is_file():
            raise EvidenceError(f"{path}: no evidence profile file")
        return load_profile(path.stem, path.parent)
    return load_profile(system)


def search_problem(model: Path | str, system: str, processors: int, max_batch: int, datatype: str, *, top: int = 1,
                   options: SpaceOptions = SpaceOptions(), prune: bool = True, collect_rows: bool = False,
                   collect_points: bool = False) -> SearchProblem:
    """Validate a request (see the module rules) and build the problem."""
    shape = load_model(model)
    profile = resolve_profile(system)
    for flag, value in (("--procs", processors), ("--max-batch", max_batch), ("--top", top)):
        if value < 1:
            raise InputError("<command line>", flag, f"must be a positive integer, not {value}")
    if datatype not in BYTES_PER_ELEMENT:
        raise InputError("<command line>", "--datatype", f"{datatype!r} is not one of {', '.join(BYTES_PER_ELEMENT)}")
    for family, engines in (("matrix", profile.matrix), ("vector", profile.vector)):
        if datatype not in engines:
            raise InputError("<command line>", "--datatype",
                             f"evidence profile {profile.name} has no {datatype} {family} engine")
    if not groups(shape, processors, max_batch):
        raise InputError("<command line>", "--procs",
                         f"no layout of {Path(model).name} fits {processors} processors with batch <= {max_batch} "
                         f"(TP must divide hidden={shape.hidden} and heads={shape.attention_heads}, PP the "
                         f"{shape.blocks} blocks, and DP must not exceed the batch)")
    return SearchProblem(shape, processors, max_batch, datatype, profile, options, top, prune=prune,
                         collect_rows=collect_rows, collect_points=collect_points)
