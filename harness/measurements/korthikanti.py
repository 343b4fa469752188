"""Importers: Korthikanti et al. 2022 (arXiv 2205.05198), Tables 4 and 5, as corpus records.

- Table 4: ONE Transformer layer of the 22B model (hidden 6144, feedforward
  24576, 64 heads of 96, sequence 2048; TP 8, microbatch 4) on A100 80GB,
  forward and backward milliseconds under five settings (no recompute,
  sequence parallelism, full recompute, selective recompute, selective
  recompute with sequence parallelism): five ``layer_pass`` records
  (component-level truth; the backward includes the recomputation). Read
  from a JSON file with the table's rows (``rows``: ``sequence_parallel``,
  ``recompute``, ``forward_ms``, ``backward_ms``) and the model/execution in
  Calculon's names.
- Table 5: the paper's iteration times of the eight calibration cases
  (``cases/*.yaml`` with a ``comparison.paper`` value): eight ``iteration``
  records with the cases' shapes and layouts; the ids are anonymous
  (``table5-row-N``), the case id stays out.

Sequence parallelism is ``rs_ag`` TP communication; selective recompute is
``attn_only``. Tier placement follows the cases (TP on tier 0).

Rules: the file is read strictly (the descriptive ``source``, ``what``,
``hardware`` and ``note`` are strings, not imported; a row's ``total_ms`` must
be its forward plus backward, its ``overhead_pct`` a number or null), under
:mod:`harness.inputs`: an unknown key anywhere, a key the importer sets itself (``datatype``,
``activation_recompute``, ``tensor_par_comm_type``), a string where a number
is due (no coercion), a time outside [:data:`MIN_PASS_MS`, ``MAX_SECONDS``]
or an empty ``rows`` is one InputError naming the file and the field, before
anything is written.
"""

from __future__ import annotations

from pathlib import Path

from harness.cases import load_cases
from harness.errors import InputError
from harness.inputs import describe, json_number, only_keys, read_json, validate
from harness.interop.calculon_format import EXECUTION_FIELDS, MODEL_FIELDS
from harness.ir.model import ExecutionLayout, TransformerShape
from harness.measurements.corpus import (
    MAX_SECONDS,
    CorpusHeader,
    Environment,
    IterationRecord,
    LayerPassRecord,
    Source,
)

CITATION = ("Korthikanti et al. 2022, Reducing Activation Recomputation in Large Transformer Models "
            "(arXiv 2205.05198)")
LICENCE = "Numbers published in the paper (facts), carried into this format with their citation."
RECOMPUTE = {"none": "none", "full": "full", "attn_only": "attn_only"}
ROW_FIELDS = ("sequence_parallel", "recompute", "forward_ms", "backward_ms", "experiment", "total_ms", "overhead_pct")
#: Descriptive keys of the file (strings, not imported: the corpus header carries the citation).
ABOUT_FIELDS = ("source", "what", "hardware", "note")
#: ``total_ms`` (when given) is the row's forward plus backward, as the paper rounds them (0.1 ms each).
TOTAL_TOLERANCE_MS = 0.1
#: Execution fields each row (or the paper) decides: a file that sets them is refused, not overridden.
#: The shortest pass of one Transformer block a row may state (1 microsecond: a block launches tens of kernels).
MIN_PASS_MS = 1e-3
IMPORTER_SET = {"datatype": "float16, the paper's mixed precision", "activation_recompute": "each row's recompute",
                "tensor_par_comm_type": "each row's sequence_parallel"}


def header() -> CorpusHeader:
    return CorpusHeader(
        kind="corpus", schema_name="blueprinting.measurement-corpus", schema_version=0, name="korthikanti22",
        description="Table 4 (per-layer forward and backward times of the 22B model under five recompute and "
                    "sequence-parallel settings) and Table 5 (iteration times of the calibration cases).",
        source=Source(citation=CITATION, url="https://arxiv.org/abs/2205.05198", licence=LICENCE),
        environment=Environment(hardware="A100 80GB (Selene), NVLink/NVSwitch inside a node, InfiniBand between "
                                         "nodes", software="Megatron-LM, mixed precision",
                                notes="Section 6.3 of the paper is a blind test and is not imported."),
        placement="tensor on tier 0; pipeline and data on tier 1 (as the calibration cases)")


def import_table4(path: Path | str) -> list[LayerPassRecord]:
    """The Table 4 rows of ``path`` as layer_pass records (see the module rules)."""
    source = str(path)
    document = read_json(path)
    data = document.data
    if not isinstance(data, dict):
        raise InputError(source, "<root>", "must be a JSON object with model, execution and rows")
    for key in ("model", "execution", "rows"):
        if key not in data:
            raise InputError(source, key, "required field is missing")
    only_keys(data, ("model", "execution", "rows", *ABOUT_FIELDS), source, "")
    for key in ABOUT_FIELDS:
        if key in data and not isinstance(data[key], str):
            raise InputError(source, key, f"must be a string, got {describe(data[key])}")
    model = data["model"]
    execution = data["execution"]
    for key, value, kind in (("model", model, dict), ("execution", execution, dict), ("rows", data["rows"], list)):
        if not isinstance(value, kind):
            raise InputError(source, key, f"must be {'an object' if kind is dict else 'a list'}, got "
                                          f"{describe(value)}")
    if not data["rows"]:
        raise InputError(source, "rows", "no row (an import of nothing is not a success)")
    only_keys(model, MODEL_FIELDS, source, "model")
    for key in execution:
        if key in IMPORTER_SET:
            raise InputError(source, f"execution.{key}", f"set by the importer ({IMPORTER_SET[key]}): remove it")
    only_keys(execution, set(EXECUTION_FIELDS) - set(IMPORTER_SET), source, "execution",
              "not read by this importer: tiers and offload follow the paper's runs")
    shape = validate(TransformerShape, {ours: model.get(theirs) for theirs, ours in MODEL_FIELDS.items()}, source,
                     prefix=("model",))
    ours = {o: execution.get(t) for t, o in EXECUTION_FIELDS.items() if t in execution}
    records = []
    for index, row in enumerate(data["rows"]):
        where = f"rows.{index}"
        if not isinstance(row, dict):
            raise InputError(source, where, "must be an object")
        for key in ROW_FIELDS[:4]:
            if key not in row:
                raise InputError(source, f"{where}.{key}", "required field is missing")
        only_keys(row, ROW_FIELDS, source, where)
        if not isinstance(row["recompute"], str) or row["recompute"] not in RECOMPUTE:
            raise InputError(source, f"{where}.recompute", f"must be one of {', '.join(RECOMPUTE)}, got "
                                                           f"{describe(row['recompute'])}")
        if not isinstance(row["sequence_parallel"], bool):
            raise InputError(source, f"{where}.sequence_parallel", f"must be a boolean, got "
                                                                   f"{describe(row['sequence_parallel'])}")
        if not isinstance(row.get("experiment", ""), str):
            raise InputError(source, f"{where}.experiment", f"must be a string, got {describe(row['experiment'])}")
        layout = validate(ExecutionLayout, {
            **ours, "datatype": "float16", "recompute": RECOMPUTE[row["recompute"]],
            "tp_communication": "rs_ag" if row["sequence_parallel"] else "ar",
            "network_tiers": {"tensor": 0, "pipeline": 1, "data": 1}}, source, prefix=(where,))
        forward, backward = (json_number(row[key], source, f"{where}.{key}", minimum=MIN_PASS_MS,
                                         maximum=MAX_SECONDS * 1000) / 1000 for key in ("forward_ms", "backward_ms"))
        if "total_ms" in row:
            total = json_number(row["total_ms"], source, f"{where}.total_ms", minimum=0)
            if not abs(total - (forward + backward) * 1000) <= TOTAL_TOLERANCE_MS:
                raise InputError(source, f"{where}.total_ms", f"{total:g} is not forward_ms + backward_ms = "
                                                              f"{(forward + backward) * 1000:g}")
        if row.get("overhead_pct") is not None:
            json_number(row["overhead_pct"], source, f"{where}.overhead_pct")
        record = validate(LayerPassRecord, {
            "kind": "layer_pass", "id": f"table4-row-{index + 1}", "model": shape, "execution": layout,
            "measured_forward_s": forward, "measured_backward_s": backward, "note": row.get("experiment", "")},
            source, prefix=(where,))
        record.check_layout(source)
        records.append(record)
    return records


def import_table5(cases_dir: Path | str) -> list[IterationRecord]:
    """The paper's iteration times of the cases with a paper value, as anonymous iteration records."""
    records = []
    for case in load_cases(cases_dir):
        paper = case.comparison.paper
        if paper is None:
            continue
        records.append(IterationRecord(kind="iteration", id=f"table5-row-{len(records) + 1}", model=case.model,
                                       execution=case.execution, measured_iteration_s=paper.iteration_s,
                                       note=paper.citation))
    return records
