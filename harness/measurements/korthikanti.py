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
"""

from __future__ import annotations

from pathlib import Path

from harness.cases import load_cases
from harness.errors import InputError
from harness.inputs import finite_number, read_json, validate
from harness.interop.calculon_format import EXECUTION_FIELDS, MODEL_FIELDS
from harness.ir.model import ExecutionLayout, TransformerShape
from harness.measurements.corpus import (
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
    model = data["model"]
    execution = data["execution"]
    if not isinstance(model, dict) or not isinstance(execution, dict) or not isinstance(data["rows"], list):
        raise InputError(source, "model", "model and execution must be objects, rows a list")
    shape = validate(TransformerShape, {ours: model.get(theirs) for theirs, ours in MODEL_FIELDS.items()}, source,
                     prefix=("model",))
    ours = {o: execution.get(t) for t, o in EXECUTION_FIELDS.items() if t in execution}
    records = []
    for index, row in enumerate(data["rows"]):
        where = f"rows.{index}"
        if not isinstance(row, dict):
            raise InputError(source, where, "must be an object")
        for key in ("sequence_parallel", "recompute", "forward_ms", "backward_ms"):
            if key not in row:
                raise InputError(source, f"{where}.{key}", "required field is missing")
        if row["recompute"] not in RECOMPUTE or not isinstance(row["sequence_parallel"], bool):
            raise InputError(source, f"{where}.recompute", f"{row['recompute']!r}: one of {', '.join(RECOMPUTE)}, "
                                                           "with a boolean sequence_parallel")
        layout = validate(ExecutionLayout, {
            **ours, "datatype": "float16", "recompute": RECOMPUTE[row["recompute"]],
            "tp_communication": "rs_ag" if row["sequence_parallel"] else "ar",
            "network_tiers": {"tensor": 0, "pipeline": 1, "data": 1}}, source, prefix=(where,))
        forward = finite_number(row["forward_ms"], source, f"{where}.forward_ms", minimum=1e-9) / 1000
        backward = finite_number(row["backward_ms"], source, f"{where}.backward_ms", minimum=1e-9) / 1000
        record = LayerPassRecord(kind="layer_pass", id=f"table4-row-{index + 1}", model=shape, execution=layout,
                                 measured_forward_s=forward, measured_backward_s=backward,
                                 note=str(row.get("experiment", "")))
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
