"""Calculon-format interop: Calculon model/execution JSON <-> our inputs.

Only field names are translated; every value is validated by the case schema.
Rule: an error about a Calculon-format input names the field in Calculon's
terms (``execution.tensor_par``, not ``execution.tensor_parallel``), see
:func:`calculon_field`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator, Literal

from pydantic import BaseModel, ValidationError

from harness.cases import EstimateInput, validate_input
from harness.errors import InputError, UnsupportedFeatureError
from harness.inputs import describe, validation_error
from harness.ir.model import TransformerShape

#: Marks a Calculon field without a default (absent is an error).
REQUIRED = object()


@dataclasses.dataclass(frozen=True)
class CalculonField:
    """One field of Calculon 0.1.0's model or execution JSON and where it lives in our input."""

    section: Literal["model", "execution"] = dataclasses.field(metadata={"doc": "Which Calculon JSON object."})
    calculon: str = dataclasses.field(metadata={"doc": "Calculon's key."})
    ours: tuple[str, ...] = dataclasses.field(metadata={"doc": "Path in our section (() = derived, num_procs)."})
    default: Any = dataclasses.field(default=REQUIRED, metadata={"doc": "Value when absent (REQUIRED: none)."})


#: THE mapping: every field of Calculon 0.1.0's model and execution JSON, in the order the export writes them.
#: Import (:func:`input_from_calculon`), export (:func:`calculon_from_input`), error renaming
#: (:func:`calculon_field`) and the case import (``harness import calculon``) all read this table and nothing else.
#: ``num_procs`` is derived (TP x PP x DP): optional on import, checked when given, always exported.
#: The tier fields have no default but are read through the schema, which names the missing one.
CALCULON_FIELDS: tuple[CalculonField, ...] = (
    *(CalculonField("model", theirs, (ours,)) for theirs, ours in (
        ("hidden", "hidden"), ("feedforward", "feedforward"), ("seq_size", "sequence_length"),
        ("attn_heads", "attention_heads"), ("attn_size", "head_size"), ("num_blocks", "blocks"))),
    *(CalculonField("execution", theirs, (ours,)) for theirs, ours in (
        ("tensor_par", "tensor_parallel"), ("pipeline_par", "pipeline_parallel"), ("data_par", "data_parallel"),
        ("batch_size", "global_batch"), ("microbatch_size", "microbatch"),
        ("pipeline_interleaving", "pipeline_interleaving"), ("datatype", "datatype"),
        ("activation_recompute", "recompute"), ("tensor_par_comm_type", "tp_communication"),
        ("seq_par_ag_redo", "seq_par_ag_redo"), ("optimizer_sharding", "optimizer_sharding"),
        ("fused_activation", "fused_activation"), ("attention_type", "attention"), ("training", "training"),
        ("tensor_par_overlap", "tp_overlap"), ("data_par_overlap", "dp_overlap"))),
    *(CalculonField("execution", theirs, ("network_tiers", ours), None) for theirs, ours in (
        ("tensor_par_net", "tensor"), ("pipeline_par_net", "pipeline"), ("data_par_net", "data"))),
    *(CalculonField("execution", theirs, ("offload", ours), False) for theirs, ours in (
        ("weight_offload", "weights"), ("activations_offload", "activations"), ("optimizer_offload", "optimizer"))),
    CalculonField("execution", "num_procs", (), None),
)

#: Views of the table kept for callers that need one section's flat fields (``{calculon name: our name}``).
MODEL_FIELDS = {f.calculon: f.ours[0] for f in CALCULON_FIELDS if f.section == "model"}
EXECUTION_FIELDS = {f.calculon: f.ours[0] for f in CALCULON_FIELDS
                    if f.section == "execution" and len(f.ours) == 1}
TIER_FIELDS = {f.calculon: f.ours[1] for f in CALCULON_FIELDS if f.ours[:1] == ("network_tiers",)}
OFFLOAD_FIELDS = {f.calculon: f.ours[1] for f in CALCULON_FIELDS if f.ours[:1] == ("offload",)}


def calculon_names(section: str) -> tuple[str, ...]:
    """Every Calculon key of ``section`` (``model`` or ``execution``), in the table's order."""
    return tuple(f.calculon for f in CALCULON_FIELDS if f.section == section)


def calculon_field(field: str) -> str:
    """Our dotted field path (``execution.network_tiers.tensor``) in Calculon's names (``execution.tensor_par_net``).

    Paths without a Calculon counterpart (``system``, ``<root>``, ``model.vocabulary``) are returned unchanged;
    a path below a mapped field keeps its tail (``execution.tensor_parallel.x`` -> ``execution.tensor_par.x``).
    """
    parts = tuple(field.split("."))
    for f in CALCULON_FIELDS:
        size = len(f.ours)
        if size and parts[:1] == (f.section,) and parts[1:1 + size] == f.ours:
            return ".".join((f.section, f.calculon, *parts[1 + size:]))
    return field


def calculon_error(error: InputError) -> InputError:
    """The same error with its field renamed to Calculon's terms (class kept)."""
    field = calculon_field(error.field)
    if isinstance(error, UnsupportedFeatureError):
        return UnsupportedFeatureError(error.source, field, error.message)
    return InputError(error.source, field, error.message)


class _SectionTable:
    """One section's view of :data:`CALCULON_FIELDS`, derived once (a batch translates every line through
    it): Calculon's keys, the required ones in sorted order, and each mapped field as (our group path, our
    name, Calculon's key, default) in the table's order."""

    def __init__(self, section: str) -> None:
        fields = [f for f in CALCULON_FIELDS if f.section == section]
        self.names = frozenset(f.calculon for f in fields)
        self.required = tuple(sorted(f.calculon for f in fields if f.default is REQUIRED))
        self.mapped = tuple((tuple(f.ours[:-1]), f.ours[-1], f.calculon, f.default) for f in fields if f.ours)


_SECTIONS = {"model": _SectionTable("model"), "execution": _SectionTable("execution")}


def _section(data: Any, section: str, source: str) -> dict[str, Any]:
    """Our nested section from Calculon's flat object: unknown keys and missing required ones are errors (the
    first in sorted order)."""
    if not isinstance(data, dict):
        raise InputError(source, section, "must be a JSON object")
    table = _SECTIONS[section]
    unknown = data.keys() - table.names
    if unknown:
        raise InputError(source, f"{section}.{min(unknown)}", "unknown Calculon field")
    missing = [name for name in table.required if name not in data]
    if missing:
        raise InputError(source, f"{section}.{missing[0]}", "required Calculon field is missing")
    out: dict[str, Any] = {}
    for groups, name, calculon, default in table.mapped:
        target = out
        for group in groups:
            target = target.setdefault(group, {})
        target[name] = data.get(calculon, default)
    return out


def input_from_calculon(model: Any, execution: Any, system: str, source: str = "<calculon>") -> EstimateInput:
    """Translate Calculon's model and execution JSON into an EstimateInput.

    Raises InputError naming the offending field in Calculon's terms.
    """
    try:
        return _input_from_calculon(model, execution, system, source)
    except InputError as error:
        raise calculon_error(error) from None


def _input_from_calculon(model: Any, execution: Any, system: str, source: str) -> EstimateInput:
    shape = _section(model, "model", source)
    layout = _section(execution, "execution", source)
    procs = execution.get("num_procs")
    try:
        data = EstimateInput.model_validate({"model": shape, "execution": layout, "system": system})
    except ValidationError as error:
        raise validation_error(source, error) from None
    if procs is not None and (type(procs) is not int):
        raise InputError(source, "execution.num_procs", f"Input should be a valid integer, got {describe(procs)}")
    if procs is not None and procs != data.execution.processors:
        raise InputError(source, "execution.num_procs", f"{procs} != TP x PP x DP = {data.execution.processors}")
    validate_input(source, data)
    return data


def input_from_calculon_execution(shape: TransformerShape, execution: Any, system: str,
                                  source: str = "<calculon>", beyond: dict[str, Any] | None = None) -> EstimateInput:
    """A shape of ours (any of its fields) with a layout from Calculon's execution JSON: what the search's results
    are (its executions are Calculon's; its model may be a case's shape), with ``beyond``: layout fields of ours
    outside Calculon's format (the search's context parallelism and precision; ``network_tiers`` entries are
    added to the tiers). Errors as :func:`input_from_calculon`."""
    try:
        layout = _section(execution, "execution", source)
        for name, value in (beyond or {}).items():
            layout[name] = {**layout[name], **value} if name == "network_tiers" else value
        try:
            data = EstimateInput.model_validate({"model": shape.model_dump(exclude_none=True), "execution": layout,
                                                 "system": system})
        except ValidationError as error:
            raise validation_error(source, error) from None
        validate_input(source, data)
        return data
    except InputError as error:
        raise calculon_error(error) from None


def _unmapped(section: str, value: BaseModel) -> Iterator[tuple[str, Any]]:
    """``(our dotted path, value)`` of every field of ``value`` that holds something other than its default and has
    no Calculon counterpart (fields other engineers add to the schema are covered without a change here)."""
    mapped = {f.ours for f in CALCULON_FIELDS if f.section == section}
    for name, info in type(value).model_fields.items():
        current = getattr(value, name)
        if isinstance(current, BaseModel):
            for sub, sub_info in type(current).model_fields.items():
                if (name, sub) not in mapped and getattr(current, sub) != sub_info.get_default(call_default_factory=True):
                    yield f"{section}.{name}.{sub}", getattr(current, sub)
        elif (name,) not in mapped and current != info.get_default(call_default_factory=True):
            yield f"{section}.{name}", current


def calculon_from_input(data: EstimateInput, source: str = "configuration") -> tuple[dict[str, Any], dict[str, Any]]:
    """The inverse translation: (model JSON, execution JSON) in Calculon's names, every field of the format.

    A field of ours that Calculon 0.1.0 has no counterpart for (``model.vocabulary``: Calculon's model has no
    output layer) is refused when it holds anything but its default (an InputError naming ``source`` and the
    field), never translated without it."""
    for field, value in (*_unmapped("model", data.model), *_unmapped("execution", data.execution)):
        if field == "model.vocabulary":
            raise InputError(source, field, "Calculon's model has no vocabulary (no output layer); a "
                                            "configuration that states one cannot be compared with Calculon")
        raise InputError(source, field, f"Calculon 0.1.0 has no counterpart of this field (value {value!r}); a "
                                        "configuration that states it cannot be compared with Calculon")
    sections: dict[str, dict[str, Any]] = {"model": {}, "execution": {}}
    for f in CALCULON_FIELDS:
        value: Any = data.execution.processors if not f.ours else getattr(data, f.section)
        for name in f.ours:
            value = getattr(value, name)
        sections[f.section][f.calculon] = value
    return sections["model"], sections["execution"]
