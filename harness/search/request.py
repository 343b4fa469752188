"""A search request from the command line: the model, the profile, the bounds.

Rules:

- the model is a Calculon-format model JSON (``hidden``, ``feedforward``,
  ``seq_size``, ``attn_heads``, ``attn_size``, ``num_blocks``) or a case YAML
  (its ``model`` section); errors name the file and the field;
- the system is an evidence profile NAME (``evidence/NAME.yaml`` of the
  project, else the packaged one), never a path, as everywhere else
  (:func:`harness.evidence.profile.check_profile_name`): a profile elsewhere
  is reached with ``--project DIR`` (``DIR/evidence/NAME.yaml``); the result
  names the profile and its revision;
- the datatype must have matrix and vector engines in the profile;
  ``--precision all`` tries the quantizing recipes the profile has the GEMM
  datatype of (:func:`precision_choices`); the
  processor count and maximum batch must be positive and within the input
  bounds of :mod:`harness.ir.model` (2^24 each), ``--top`` at most 10^6; a space without any
  layout (no TP, PP and DP combination fits the processors and the batch) is
  an error naming ``--procs``.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from harness import inputs
from harness.errors import InputError, UnsupportedFeatureError
from harness.evidence.profile import EvidenceProfile, load_profile
from harness.interop.calculon_format import MODEL_FIELDS
from harness.ir.blocks import is_mixed, mixing_field
from harness.ir.model import BYTES_PER_ELEMENT, MAX_BATCH, MAX_DEGREE, TransformerShape
from harness.passes.precision import RECIPES
from harness.search.evaluate import SearchProblem
from harness.search.space import SpaceOptions, groups


MAX_TOP = 10**6  # executions reported (each is a JSON entry)
#: Worker processes one command may start (search --workers, oracle record --cpus), per core of the machine:
#: more only compete for the cores, and 100 000 would fork 100 000 processes and exhaust the machine.
MAX_WORKERS_PER_CORE = 4


def check_workers(value: int | None, flag: str) -> int | None:
    """A worker-process count from the command line: None (the default), or 1 to
    :data:`MAX_WORKERS_PER_CORE` x the cores; checked before anything starts."""
    if value is None:
        return None
    if value < 1:
        raise InputError("<command line>", flag, f"must be a positive integer, not {value}")
    bound = MAX_WORKERS_PER_CORE * (os.cpu_count() or 1)
    if value > bound:
        raise InputError("<command line>", flag, f"must be at most {bound} ({MAX_WORKERS_PER_CORE} per core of this "
                                                 f"machine: more processes only compete for the cores), not {value}")
    return value


def load_model(path: Path | str) -> TransformerShape:
    """The model shape of a Calculon model JSON or of a case YAML's ``model`` section (strict input rules)."""
    path = Path(path)
    document = inputs.read_json(path) if path.suffix == ".json" else inputs.read_yaml(path)
    data = document.data
    if not isinstance(data, dict):
        raise InputError(str(path), "<root>", f"a model file must be a mapping, got {inputs.describe(data)}")
    if "model" in data and isinstance(data["model"], dict):
        shape = inputs.validate(TransformerShape, data["model"], str(path), document=document, prefix=("model",))
        if shape.moe is not None and is_mixed(shape):  # the estimate prices it stage by stage (estimate_mixed)
            raise UnsupportedFeatureError(str(path), mixing_field(shape), "the search covers models whose "
                                          "blocks are all MoE; dense and MoE blocks (dense_layers, layer_frequency) "
                                          "are estimated by `harness estimate` only")
        if shape.mtp_layers is not None:  # the MTP layers are priced stage by stage too
            raise UnsupportedFeatureError(str(path), "model.mtp_layers", "the search does not cover "
                                          "multi-token-prediction layers; `harness estimate` prices them")
        return shape
    if not set(MODEL_FIELDS) & set(data):
        raise InputError(str(path), "<root>", "neither a Calculon model JSON nor a case YAML with a model section")
    unknown = sorted(set(data) - set(MODEL_FIELDS))
    if unknown:
        raise InputError(str(path), unknown[0], "unknown Calculon model field")
    missing = sorted(set(MODEL_FIELDS) - set(data))
    if missing:
        raise InputError(str(path), missing[0], "required Calculon model field is missing")
    try:
        return inputs.validate(TransformerShape, {ours: data[theirs] for theirs, ours in MODEL_FIELDS.items()},
                               str(path), document=document)
    except InputError as error:  # name the field in Calculon's terms
        ours = error.field.split(".")[0]
        theirs = {o: t for t, o in MODEL_FIELDS.items()}.get(ours, ours)
        raise InputError(error.source, theirs, error.message, error.line) from None


def precision_choices(profile: EvidenceProfile, datatype: str) -> tuple[str | None, ...]:
    """The precisions ``search --precision all`` tries: None (everything in the datatype), then every quantizing
    recipe whose layout datatype is ``datatype`` and whose GEMM datatype the profile's matrix engine has (fp16
    and bf16 are spellings of None: the same plan)."""
    return (None, *(name for name, recipe in RECIPES.items() if recipe.gemm_datatype is not None
                    and recipe.layout_datatype == datatype and recipe.gemm_datatype in profile.matrix))


def resolve_profile(system: str) -> EvidenceProfile:
    """The evidence profile named ``system`` (``--system``): a name, never a path."""
    return load_profile(system, referrer="<command line>", field="--system")


def search_problem(model: Path | str, system: str, processors: int, max_batch: int, datatype: str, *, top: int = 1,
                   options: SpaceOptions = SpaceOptions(), prune: bool = True, collect_rows: bool = False,
                   collect_points: bool = False, precision: str = "none") -> SearchProblem:
    """Validate a request (see the module rules) and build the problem; ``precision`` ``all`` widens
    ``options.precisions`` to :func:`precision_choices`."""
    shape = load_model(model)
    profile = resolve_profile(system)
    for flag, value, bound in (("--procs", processors, MAX_DEGREE), ("--max-batch", max_batch, MAX_BATCH),
                               ("--top", top, MAX_TOP)):
        if value < 1:
            raise InputError("<command line>", flag, f"must be a positive integer, not {value}")
        if value > bound:
            raise InputError("<command line>", flag, f"must be at most {bound}, not {value}")
    if datatype not in BYTES_PER_ELEMENT:
        raise InputError("<command line>", "--datatype", f"{datatype!r} is not one of {', '.join(BYTES_PER_ELEMENT)}")
    for family, engines in (("matrix", profile.matrix), ("vector", profile.vector)):
        if datatype not in engines:
            raise InputError("<command line>", "--datatype",
                             f"evidence profile {profile.name} has no {datatype} {family} engine")
    if precision == "all":
        options = dataclasses.replace(options, precisions=precision_choices(profile, datatype))
    if not groups(shape, processors, max_batch, options, datatype):
        raise InputError("<command line>", "--procs",
                         f"no layout of {Path(model).name} fits {processors} processors with batch <= {max_batch} "
                         f"(TP must divide hidden={shape.hidden} and heads={shape.attention_heads}, PP the "
                         f"{shape.blocks} blocks, and DP must not exceed the batch)")
    return SearchProblem(shape, processors, max_batch, datatype, profile, options, top, prune=prune,
                         collect_rows=collect_rows, collect_points=collect_points)
