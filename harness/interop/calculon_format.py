"""Calculon-format interop: Calculon model/execution JSON <-> our inputs.

Only field names are translated; every value is validated by the case schema.
Rule: an error about a Calculon-format input names the field in Calculon's
terms (``execution.tensor_par``, not ``execution.tensor_parallel``), see
:func:`calculon_field`.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from harness.cases import EstimateInput, validate_input
from harness.errors import InputError, UnsupportedFeatureError
from harness.inputs import describe, validation_error

MODEL_FIELDS = {"hidden": "hidden", "feedforward": "feedforward", "seq_size": "sequence_length",
                "attn_heads": "attention_heads", "attn_size": "head_size", "num_blocks": "blocks"}
EXECUTION_FIELDS = {
    "tensor_par": "tensor_parallel", "pipeline_par": "pipeline_parallel", "data_par": "data_parallel",
    "batch_size": "global_batch", "microbatch_size": "microbatch", "pipeline_interleaving": "pipeline_interleaving",
    "datatype": "datatype", "activation_recompute": "recompute", "tensor_par_comm_type": "tp_communication",
    "seq_par_ag_redo": "seq_par_ag_redo", "optimizer_sharding": "optimizer_sharding",
    "fused_activation": "fused_activation", "attention_type": "attention", "training": "training",
    "tensor_par_overlap": "tp_overlap", "data_par_overlap": "dp_overlap",
}
TIER_FIELDS = {"tensor_par_net": "tensor", "pipeline_par_net": "pipeline", "data_par_net": "data"}
OFFLOAD_FIELDS = {"weight_offload": "weights", "activations_offload": "activations", "optimizer_offload": "optimizer"}


def calculon_field(field: str) -> str:
    """Our dotted field path (``execution.network_tiers.tensor``) in Calculon's names (``execution.tensor_par_net``).

    Paths without a Calculon counterpart (``system``, ``<root>``) are returned unchanged.
    """
    parts = field.split(".")
    if parts[0] == "model" and len(parts) == 2:
        names = {ours: theirs for theirs, ours in MODEL_FIELDS.items()}
        return f"model.{names.get(parts[1], parts[1])}"
    if parts[0] != "execution" or len(parts) < 2:
        return field
    groups = {"network_tiers": TIER_FIELDS, "offload": OFFLOAD_FIELDS}
    if parts[1] in groups and len(parts) == 3:
        names = {ours: theirs for theirs, ours in groups[parts[1]].items()}
        return f"execution.{names.get(parts[2], parts[2])}"
    names = {ours: theirs for theirs, ours in EXECUTION_FIELDS.items()}
    return ".".join(["execution", names.get(parts[1], parts[1]), *parts[2:]])


def calculon_error(error: InputError) -> InputError:
    """The same error with its field renamed to Calculon's terms (class kept)."""
    field = calculon_field(error.field)
    if isinstance(error, UnsupportedFeatureError):
        return UnsupportedFeatureError(error.source, field, error.message)
    return InputError(error.source, field, error.message)


def _translate(data: Any, fields: dict[str, str], source: str, part: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise InputError(source, part, "must be a JSON object")
    known = set(fields) | (set(TIER_FIELDS) | set(OFFLOAD_FIELDS) | {"num_procs"} if part == "execution" else set())
    unknown = sorted(set(data) - known)
    if unknown:
        raise InputError(source, f"{part}.{unknown[0]}", "unknown Calculon field")
    missing = sorted(set(fields) - set(data))
    if missing:
        raise InputError(source, f"{part}.{missing[0]}", "required Calculon field is missing")
    return {ours: data[theirs] for theirs, ours in fields.items()}


def input_from_calculon(model: Any, execution: Any, system: str, source: str = "<calculon>") -> EstimateInput:
    """Translate Calculon's model and execution JSON into an EstimateInput.

    Raises InputError (UnsupportedFeatureError for overlap/offload) naming the
    offending field in Calculon's terms.
    """
    try:
        return _input_from_calculon(model, execution, system, source)
    except InputError as error:
        raise calculon_error(error) from None


def _input_from_calculon(model: Any, execution: Any, system: str, source: str) -> EstimateInput:
    shape = _translate(model, MODEL_FIELDS, source, "model")
    layout = _translate(execution, EXECUTION_FIELDS, source, "execution")
    layout["network_tiers"] = {ours: execution.get(theirs) for theirs, ours in TIER_FIELDS.items()}
    layout["offload"] = {ours: execution.get(theirs, False) for theirs, ours in OFFLOAD_FIELDS.items()}
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


def calculon_from_input(data: EstimateInput, source: str = "configuration") -> tuple[dict[str, Any], dict[str, Any]]:
    """The inverse translation: (model JSON, execution JSON) in Calculon's names.

    Calculon's model has no vocabulary: a shape that states one (its plan holds the output layer) has no
    Calculon counterpart and is refused (an InputError naming ``source`` and ``model.vocabulary``), never
    translated without it."""
    if data.model.vocabulary is not None:
        raise InputError(source, "model.vocabulary", "Calculon's model has no vocabulary (no output layer); a "
                                                     "configuration that states one cannot be compared with Calculon")
    for section, value in (("model", data.model), ("execution", data.execution)):
        for name in sorted(type(value).ABSENT_IF_NONE - {"vocabulary"}):
            if getattr(value, name) is not None:
                raise InputError(source, f"{section}.{name}", "Calculon's model has no such field; a configuration "
                                                              "that states it cannot be compared with Calculon")
    shape = data.model.model_dump()
    e = data.execution
    layout = e.model_dump()
    model = {theirs: shape[ours] for theirs, ours in MODEL_FIELDS.items()}
    execution = {theirs: layout[ours] for theirs, ours in EXECUTION_FIELDS.items()}
    execution.update({theirs: getattr(e.network_tiers, ours) for theirs, ours in TIER_FIELDS.items()})
    execution.update({theirs: getattr(e.offload, ours) for theirs, ours in OFFLOAD_FIELDS.items()})
    execution["num_procs"] = e.processors
    return model, execution
