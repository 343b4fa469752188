"""``harness evidence import runs ROWS.json --gpu GPU --output CORPUS.jsonl``: measured runs as a corpus.

The rows of one GPU (``system.gpu``) of a ``blueprinting.measured-runs.v0`` file become ``iteration``
records (:mod:`harness.measurements.corpus`): the case of each row is the one ``estimate --runs`` prices
(:func:`harness.measurements.runs.run_case`, the same table), its measured seconds the row's
``measured.iteration_s``.

Rules:

- a record's id is ``<file name>:rows.<index>`` (a label, never the row's id or model name); its note
  names the row's precision, source (``source.where``) and software release (``software: ...``, last: the
  release a leave-one-release-out cross-validation groups by);
- a row the harness cannot price (``unsupported``, with its fields) or that describes no valid case is
  not a record: the import prints the count by first field refused, so nothing is dropped unseen; nor is
  a row whose case is estimated but never fitted (``RunCase.unfitted``, e.g. ``stack.moe_execution``:
  counted under that field);
- zero records is an error (an import of nothing is not a success); a bad file is one line naming the
  file, row and field, before anything is written; the corpus is written atomically.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from harness.errors import InputError
from harness.measurements.corpus import CorpusHeader, Environment, IterationRecord, Source
from harness.measurements.runs import STACKS, run_case, source_repository
from harness.measurements.runs_schema import SCHEMA, MeasuredRun

PLACEMENT = ("Megatron-Core rank order (TP fastest, then CP, DP, PP): a group whose rank span fits in one NVLink "
             "domain (system.gpus_per_nvlink_domain) is on tier 0, else tier 1 (harness.measurements.runs)")


def header(path: Path | str, gpu: str, runs: list[MeasuredRun], name: str) -> CorpusHeader:
    stacks = sorted({source_repository(run) for run in runs})
    return CorpusHeader(
        kind="corpus", schema_name="blueprinting.measurement-corpus", schema_version=0, name=name,
        description=f"Measured training steps on {gpu} from the {SCHEMA} file {Path(path).name}, as cases "
                    "(harness.measurements.runs).",
        source=Source(citation=f"{Path(path).name} ({SCHEMA}); each record's note names its row's source: "
                               + ", ".join(stacks),
                      licence="numbers transcribed from public tables (facts); see each source"),
        environment=Environment(hardware=f"{gpu}, NVLink domains of "
                                         f"{', '.join(sorted({str(r.system.gpus_per_nvlink_domain) for r in runs}))}",
                                software="; ".join(f"{s}: {STACKS[s].citation}" for s in stacks if s in STACKS)),
        placement=PLACEMENT)


def import_runs(path: Path | str, runs: list[MeasuredRun], gpu: str) -> tuple[list[IterationRecord], Counter]:
    """The records of the rows of ``gpu`` and the count of rows left out, by reason (first field refused,
    ``invalid``, or ``other GPU``)."""
    records: list[IterationRecord] = []
    left_out: Counter[str] = Counter()
    for index, run in enumerate(runs):
        if run.system.gpu != gpu:
            left_out["other GPU"] += 1
            continue
        case = run_case(run, gpu, str(path))
        if case.input is None:
            left_out[case.unsupported[0][0] if case.unsupported else f"invalid: {case.reason}"] += 1
            continue
        if case.unfitted:  # estimable, but its measurement is not evidence of the hardware (runs.Stack)
            left_out[case.unfitted[0][0]] += 1
            continue
        records.append(IterationRecord(
            kind="iteration", id=f"{Path(path).name}:rows.{index}",
            note=f"{run.precision}; {run.source.where}; software: {run.software}",
            model=case.input.model, execution=case.input.execution,
            measured_iteration_s=run.measured.iteration_s))
    if not records:
        reasons = ", ".join(f"{reason} {count}" for reason, count in left_out.most_common())
        raise InputError(str(path), "rows", f"no row of {gpu} can be a record ({reasons}): nothing to import")
    return records, left_out
