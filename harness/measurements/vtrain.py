"""Importer: the vTrain measurement CSVs (Megatron-DeepSpeed on A100 nodes) as a corpus.

Source: VIA-Research/vTrain (commit f8dda84, MIT licence), files
``single-node-train.csv`` and ``multi-node-train.csv``: one row per run with
GPUs, global batch, micro batch, hidden size, attention heads, layers,
sequence length, TP, DP, PP and the iteration time in milliseconds (the
multi-node file also has the parameter count, which names the model and is
dropped).

Mapping (the one the measurements README prescribes for blind rows too):
GPT blocks with feedforward 4 x hidden and head size hidden / heads; float16;
full recomputation; tensor-parallel all-reduce (``ar``); no interleaving,
overlap, offload or optimizer sharding; ``tensor`` on tier 0, ``pipeline`` on
tier 0 when TP x PP <= 8 (one node) else tier 1, ``data`` on tier 0 when all
GPUs sit in one node (at most 8) else tier 1.

Rules: every row becomes one ``iteration`` record whose id is the file name
and line; a row that is not a valid run (a missing or non-integer column,
TP x PP x DP != GPUs, a layout the case rules refuse) is one InputError naming
the file, line and column.
"""

from __future__ import annotations

from pathlib import Path

from harness.errors import InputError
from pydantic import ValidationError

from harness.inputs import MIN_ITERATION_S, finite_number, read_csv_rows, validation_error
from harness.ir.model import ExecutionLayout, TransformerShape
from harness.measurements.corpus import CorpusHeader, Environment, IterationRecord, Source

NODE_PROCESSORS = 8
COLUMNS = {"gpus": "# GPUs", "global_batch": "global batch", "microbatch": "micro batch", "hidden": "hidden size",
           "heads": "attention heads", "layers": "# layers", "sequence": "sequence length",
           "tp": "tensor parallelism", "dp": "data parallelism", "pp": "pipeline parallelism",
           "iteration_ms": "iteration time (ms)"}
#: The CSV column of each schema field a row sets (for errors in the file's own terms).
COLUMN_OF_FIELD = {"hidden": COLUMNS["hidden"], "feedforward": COLUMNS["hidden"], "head_size": COLUMNS["heads"],
                   "sequence_length": COLUMNS["sequence"], "attention_heads": COLUMNS["heads"],
                   "blocks": COLUMNS["layers"], "tensor_parallel": COLUMNS["tp"], "pipeline_parallel": COLUMNS["pp"],
                   "data_parallel": COLUMNS["dp"], "global_batch": COLUMNS["global_batch"],
                   "microbatch": COLUMNS["microbatch"], "measured_iteration_s": COLUMNS["iteration_ms"]}
LICENCE = ("MIT (Copyright (c) 2024, VIA Research Group at KAIST); the notice and permission text are in "
           "measurements/vtrain/LICENSE")
PLACEMENT = ("tensor on tier 0; pipeline on tier 0 when TP x PP <= 8 (one node) else tier 1; data on tier 0 when "
             "all GPUs sit in one node (<= 8) else tier 1")


def header() -> CorpusHeader:
    return CorpusHeader(
        kind="corpus", schema_name="blueprinting.measurement-corpus", schema_version=0, name="vtrain-a100",
        description="Measured Megatron-DeepSpeed training iterations on A100 nodes (the training split shared "
                    "with the project; the dataset's other model shapes are withheld as a blind test).",
        source=Source(citation="vTrain (VIA-Research/vTrain), single-node-train.csv and multi-node-train.csv",
                      url="https://github.com/VIA-Research/vTrain", licence=LICENCE, revision="f8dda84"),
        environment=Environment(
            hardware="A100 nodes of 8 GPUs, NVLink inside a node, 800 Gb/s between nodes",
            software="Megatron-DeepSpeed; GPT blocks (feedforward 4 x hidden), full activation recomputation, "
                     "1F1B without interleaving, no sequence parallelism, mixed precision float16, no gradient "
                     "buckets",
            notes="Iteration times as published (milliseconds, converted to seconds)."),
        placement=PLACEMENT)


def _integer(row, column: str, source: str) -> int:
    value = finite_number(row.values[column], source, column, line=row.line, minimum=1)
    if value != int(value):
        raise InputError(source, column, f"must be an integer, got {row.values[column]!r}", line=row.line)
    return int(value)


def import_vtrain(paths: list[Path | str]) -> list[IterationRecord]:
    """The iteration records of the given vTrain CSV files, in file and row order. A file without a data row is
    an InputError naming it (an import of nothing is not a success)."""
    records = []
    for path in paths:
        source = str(path)
        before = len(records)
        for row in read_csv_rows(path, required=tuple(COLUMNS.values())):
            v = {key: _integer(row, column, source) for key, column in COLUMNS.items() if key != "iteration_ms"}
            ms = finite_number(row.values[COLUMNS["iteration_ms"]], source, COLUMNS["iteration_ms"], line=row.line,
                               minimum=MIN_ITERATION_S * 1000)
            if v["tp"] * v["pp"] * v["dp"] != v["gpus"]:
                raise InputError(source, COLUMNS["gpus"], f"{v['gpus']} != TP x PP x DP = "
                                                          f"{v['tp'] * v['pp'] * v['dp']}", line=row.line)
            if v["hidden"] % v["heads"]:
                raise InputError(source, COLUMNS["heads"], f"{v['heads']} heads do not divide hidden "
                                                           f"{v['hidden']}", line=row.line)
            one_node = v["gpus"] <= NODE_PROCESSORS
            try:
                record = IterationRecord(
                    kind="iteration", id=f"{Path(source).name}:{row.line}",
                    model=TransformerShape(hidden=v["hidden"], feedforward=4 * v["hidden"],
                                           sequence_length=v["sequence"], attention_heads=v["heads"],
                                           head_size=v["hidden"] // v["heads"], blocks=v["layers"]),
                    execution=ExecutionLayout(
                        tensor_parallel=v["tp"], pipeline_parallel=v["pp"], data_parallel=v["dp"],
                        global_batch=v["global_batch"], microbatch=v["microbatch"], datatype="float16",
                        recompute="full", tp_communication="ar",
                        network_tiers={"tensor": 0, "pipeline": 0 if v["tp"] * v["pp"] <= NODE_PROCESSORS else 1,
                                       "data": 0 if one_node else 1}),
                    measured_iteration_s=ms / 1000)
            except ValidationError as error:  # a value the schema refuses (bounds): the column, plain words
                found = validation_error(source, error)
                column = COLUMN_OF_FIELD.get(found.field.rpartition(".")[2], found.field)
                raise InputError(source, column, found.message, line=row.line) from None
            record.check_layout(source, row.line)
            records.append(record)
        if len(records) == before:
            raise InputError(source, "<rows>", "no data row (only a header, or empty)")
    return records
