"""Measurement corpora: measured runs and microbenchmarks that no model here produced.

Format ``blueprinting.measurement-corpus`` v0: JSON lines (``.gz`` allowed).
The first non-blank line is the header (``"kind": "corpus"``: name, source
with citation and licence, environment notes, how the layouts were placed on
the network tiers); every other line is one record, discriminated by
``kind``:

- ``iteration``: one training configuration (the case schema's ``model`` and
  ``execution``) and its measured seconds per iteration;
- ``layer_pass``: one configuration and the measured seconds of ONE
  Transformer block's forward and backward pass (backward including its
  recomputation) for one microbatch (component-level data);
- ``collective_sweep``: a collective (nccl-tests ``*_perf``) on one network
  tier with a participant count: message sizes (bytes per processor, as
  nccl-tests' ``size``) and measured seconds;
- ``gemm``: one ``[m, n] x [n, k]`` matrix multiplication and its seconds;
- ``memory_transfer``: a streaming kernel moving ``bytes`` (read + written)
  and its seconds.

Rules:

- records are anonymous: an ``id`` is a label for reports (a file and line),
  never a model name, and no fit reads it; the fit sees configurations and
  seconds only;
- every number is finite and every time positive; the configuration is
  validated as a case is (strict types, size bounds, layout rules);
- a bad line is one :class:`~harness.errors.InputError` naming the file, the
  line and the field (``corpus.jsonl: records.execution.microbatch: ... (line 12)``);
- a corpus's identity is the SHA-256 of its file's bytes (what a fitted
  revision records as its provenance).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Annotated, Iterable, Literal

from pydantic import ConfigDict, Field, ValidationError, model_validator

from harness.cases import validate_input, EstimateInput
from harness.digest import canonical_json
from harness.errors import InputError
from harness.inputs import MIN_ITERATION_S, JsonLine, read_bytes, read_jsonl, validation_error
from harness.ir.base import Frozen
from harness.ir.distributed import CollectiveOp
from harness.ir.model import Datatype, ExecutionLayout, TransformerShape
from harness.outputs import write_text

SCHEMA_NAME = "blueprinting.measurement-corpus"
SCHEMA_VERSION = 0
MAX_TEXT = 10_000
MAX_SECONDS = 1e7
MAX_SWEEP_POINTS = 1 << 16


class _Strict(Frozen):
    model_config = ConfigDict(strict=True)


Seconds = Annotated[float, Field(gt=0, le=MAX_SECONDS, allow_inf_nan=False)]
Text = Annotated[str, Field(max_length=MAX_TEXT)]


class Source(_Strict):
    """Where the numbers were published."""

    citation: Text = Field(min_length=1, description="Publication or repository the numbers come from.")
    url: Text | None = Field(None, description="Where to find it.")
    licence: Text = Field(min_length=1, description="Licence of the numbers (and its notice, if it needs one).")
    revision: Text | None = Field(None, description="Commit or version of the source.")


class Environment(_Strict):
    """What the runs were measured on."""

    hardware: Text = Field(min_length=1, description="Processors, nodes, interconnect.")
    software: Text = Field(min_length=1, description="Training software and settings.")
    notes: Text = Field("", description="Anything else that matters for the numbers.")


class CorpusHeader(_Strict):
    """The first line of a corpus file."""

    kind: Literal["corpus"] = Field(description="Marks the header line.")
    schema_name: Literal["blueprinting.measurement-corpus"] = Field(description="Format name.")
    schema_version: int = Field(ge=SCHEMA_VERSION, le=SCHEMA_VERSION, strict=True,  # Literal[0] takes false, 0.0
                                description="Format version.")
    name: Text = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="Corpus name.")
    description: Text = Field(description="What the corpus holds.")
    source: Source = Field(description="Where the numbers come from.")
    environment: Environment = Field(description="What they were measured on.")
    placement: Text = Field("", description="How the layouts were placed on the network tiers (the rule the "
                                            "importer applied).")


class _Record(_Strict):
    id: Text = Field(min_length=1, description="Anonymous label (file and line); never read by a fit.")
    note: Text = Field("", description="Free text about this record.")


class _Configured(_Record):
    model: TransformerShape = Field(description="Model shape (the case schema's).")
    execution: ExecutionLayout = Field(description="Parallel layout and options (the case schema's).")

    def check_layout(self, source: str, line: int | None = None) -> None:
        """The case rules (divisibility, tiers, unsupported features): an InputError naming the field."""
        try:
            validate_input(source, EstimateInput(model=self.model, execution=self.execution, system="a"))
        except InputError as error:
            raise InputError(source, error.field, error.message, line=line) from None

    def estimate_input(self, system: str) -> EstimateInput:
        return EstimateInput(model=self.model, execution=self.execution, system=system)


class IterationRecord(_Configured):
    """A measured training iteration."""

    kind: Literal["iteration"] = Field(description="Record kind.")
    measured_iteration_s: Seconds = Field(ge=MIN_ITERATION_S, description="Measured seconds per iteration.")


class LayerPassRecord(_Configured):
    """Measured seconds of one Transformer block, one microbatch, forward and backward."""

    kind: Literal["layer_pass"] = Field(description="Record kind.")
    measured_forward_s: Seconds = Field(description="Forward pass of one block, one microbatch, seconds.")
    measured_backward_s: Seconds = Field(description="Backward pass (with its recomputation), seconds.")


class CollectiveSweepRecord(_Record):
    """A collective benchmark (nccl-tests) on one tier: sizes and measured seconds."""

    kind: Literal["collective_sweep"] = Field(description="Record kind.")
    collective: CollectiveOp = Field(description="Collective operation.")
    participants: int = Field(ge=2, le=2**24, description="Processors taking part.")
    network_tier: int = Field(ge=0, le=1024, description="Network tier the processors share.")
    sizes_bytes: tuple[Annotated[float, Field(gt=0, le=1e18, allow_inf_nan=False)], ...] = Field(
        min_length=1, max_length=MAX_SWEEP_POINTS, strict=False,
        description="Message size per processor (nccl-tests 'size'), bytes, strictly increasing.")
    measured_s: tuple[Seconds, ...] = Field(min_length=1, max_length=MAX_SWEEP_POINTS, strict=False,
                                            description="Measured seconds per size.")

    @model_validator(mode="after")
    def _aligned(self):
        if len(self.sizes_bytes) != len(self.measured_s):
            raise ValueError(f"measured_s: {len(self.measured_s)} times for {len(self.sizes_bytes)} sizes")
        if any(not a < b for a, b in zip(self.sizes_bytes, self.sizes_bytes[1:])):
            raise ValueError("sizes_bytes: sizes must strictly increase")
        return self


class GemmRecord(_Record):
    """One matrix multiplication ``[m, n] x [n, k]`` (2mnk operations)."""

    kind: Literal["gemm"] = Field(description="Record kind.")
    m: int = Field(gt=0, le=2**31, description="Rows of the left operand and of the result.")
    n: int = Field(gt=0, le=2**31, description="Contraction width.")
    k: int = Field(gt=0, le=2**31, description="Columns of the right operand and of the result.")
    datatype: Datatype = Field(description="Element datatype.")
    measured_s: Seconds = Field(description="Measured seconds of one multiplication.")


class MemoryTransferRecord(_Record):
    """A streaming kernel moving ``bytes`` through memory tier 1 (read + written)."""

    kind: Literal["memory_transfer"] = Field(description="Record kind.")
    bytes: float = Field(gt=0, le=1e18, allow_inf_nan=False, description="Bytes read plus bytes written.")
    measured_s: Seconds = Field(description="Measured seconds.")


RECORD_MODELS = {"iteration": IterationRecord, "layer_pass": LayerPassRecord, "collective_sweep": CollectiveSweepRecord,
                 "gemm": GemmRecord, "memory_transfer": MemoryTransferRecord}
RECORD_KINDS = tuple(RECORD_MODELS)


@dataclasses.dataclass(frozen=True)
class Corpus:
    """A read corpus: its header, records, file and SHA-256 of the file's bytes."""

    path: str
    sha256: str
    header: CorpusHeader
    records: tuple[IterationRecord | LayerPassRecord | CollectiveSweepRecord | GemmRecord | MemoryTransferRecord, ...]

    def of_kind(self, kind: str) -> tuple:
        return tuple(r for r in self.records if r.kind == kind)


def _validated(model, data, source: str, line: int):
    if not isinstance(data, dict):
        raise InputError(source, f"line {line}", "a corpus line must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as error:
        found = validation_error(source, error)
        raise InputError(source, found.field, found.message, line=line) from None


def _corpus_lines(source: str, items: Iterable[JsonLine]) -> tuple[CorpusHeader, tuple]:
    """The corpus rules over parsed lines (header first, known record kinds, valid records and layouts, unique
    ids): the header and the records, else one InputError naming ``source``, the line and the field. Both
    :func:`read_corpus` and :func:`write_corpus` apply them: what is written can be read back."""
    header = None
    records = []
    ids: dict[str, int] = {}
    for item in items:
        if item.error is not None:
            raise item.error
        if header is None:
            if not isinstance(item.data, dict) or item.data.get("kind") != "corpus":
                raise InputError(source, "kind", "the first line of a corpus must be its header "
                                                 '({"kind": "corpus", "schema_name": ...})', line=item.number)
            header = _validated(CorpusHeader, item.data, source, item.number)
            continue
        if isinstance(item.data, dict) and item.data.get("kind") not in RECORD_KINDS:
            raise InputError(source, "kind", f"{item.data.get('kind')!r} is not a record kind "
                                             f"({', '.join(RECORD_KINDS)})", line=item.number)
        record = _validated(RECORD_MODELS[item.data["kind"]] if isinstance(item.data, dict) else None, item.data,
                            source, item.number)
        if isinstance(record, _Configured):
            record.check_layout(source, item.number)
        if record.id in ids:
            raise InputError(source, "id", f"duplicate id {record.id!r} (also on line {ids[record.id]})",
                             line=item.number)
        ids[record.id] = item.number
        records.append(record)
    if header is None:
        raise InputError(source, "<file>", "an empty corpus (no header line)")
    return header, tuple(records)


def read_corpus(path: Path | str) -> Corpus:
    """Read and validate a corpus file (see the module rules); every problem is one InputError."""
    path = Path(path)
    source = str(path)
    sha256 = hashlib.sha256(read_bytes(path)).hexdigest()
    header, records = _corpus_lines(source, read_jsonl(path))
    return Corpus(source, sha256, header, records)


def corpus_text(header: CorpusHeader, records: Iterable) -> str:
    """The corpus file's text: one canonical JSON object per line (header first)."""
    lines = [canonical_json(header.model_dump(mode="json", exclude_none=True))]
    lines += [canonical_json(r.model_dump(mode="json", exclude_none=True, exclude_defaults=True)) for r in records]
    return "\n".join(lines) + "\n"


def write_corpus(path: Path | str, header: CorpusHeader, records: Iterable, *, option: str = "--output") -> Path:
    """Write a corpus atomically, after checking its text under the reader's rules (:func:`_corpus_lines`): a
    corpus the reader would refuse (a repeated id, ...) is an InputError naming ``path``, ``option`` and the
    record, and nothing is written."""
    text = corpus_text(header, records)
    lines = (JsonLine(number, json.loads(line)) for number, line in enumerate(text.splitlines(), 1))
    try:
        _corpus_lines(str(path), lines)
    except InputError as error:
        raise InputError(str(path), option, f"refused to write a corpus the reader would refuse: {error.field}: "
                                            f"{error.message} (line {error.line})") from None
    return write_text(path, text, option=option)
