"""The row schema ``blueprinting.measured-runs.v0``: measured training steps with their exact configurations.

A file is ``{"schema": "blueprinting.measured-runs.v0", "rows": [...]}``; the
fields are documented in ``../shared/reference/measurements/modern/README.md``
(and in docs/modern-runs.md). This module only reads and validates: which
fields the harness can price, and how, is :mod:`harness.measurements.runs`.

Input rules (those of :mod:`harness.inputs`): one JSON document, strict types
(``true`` is not 1, ``"8"`` is not 8; a JSON integer is a number, ``13`` for
``13.0``, but a boolean or a string never is: ``iteration_s: true`` was read as
1.0 s), every section closed (an unknown field
is an error naming it: a new fact must be mapped, or refused, never dropped
unseen), finite numbers, unique keys, row ids unique. A bad file is one
:class:`~harness.errors.InputError` naming the file, the row (``rows.12``) and
the field. The free-text sections (``source``, ``software``, ``notes``,
``extra``, ``measured.as_reported``, ``consistency``) are kept for display and
never reach the estimate path; neither do ``id`` and ``model.name`` (which must
hold a letter or digit and no control, format or line-separator character: the summary prints its first word,
the model family).
A mixture of experts routes a token to at most ``experts`` experts and has a shared-expert width only with
shared experts.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import ConfigDict, Field, field_validator, model_validator

from harness.errors import InputError
from harness.inputs import MIN_ITERATION_S, read_json, validate
from harness.ir.base import Frozen
from harness.ir.model import MAX_EXPERTS
from harness.names import UNPRINTED_CATEGORIES, Identifier

SCHEMA = "blueprinting.measured-runs.v0"
MAX_ROWS = 100_000
MAX_TEXT = 10_000

Gpu = Literal["a100_sxm_80g", "h100_sxm_80g", "b200", "b300", "gb200", "gb300"]
GPUS: tuple[str, ...] = get_args(Gpu)  # the values of ``system.gpu``
Precision = Literal["bf16", "fp16", "fp8_delayed", "fp8_current", "mxfp8", "nvfp4"]


class _Closed(Frozen):
    """A section of a row: strict types, unknown fields refused."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")


Count = Field(ge=0, le=2**31)
Positive = Field(gt=0, le=2**31)


class RowSource(_Closed):
    where: str = Field(min_length=1, max_length=MAX_TEXT, description="repo@commit path, or paper and table.")
    row: str = Field(max_length=MAX_TEXT, description="The row's label as printed.")
    quality: str = Field(max_length=MAX_TEXT, description="Transcription quality note.")


class RowSystem(_Closed):
    gpu: Gpu = Field(description="The GPU the run used.")
    num_gpus: int = Field(gt=0, le=2**24, description="GPUs of the run.")
    gpus_per_nvlink_domain: int = Field(gt=0, le=2**24, description="GPUs sharing one NVLink domain (8 or 72).")


class RowMoE(_Closed):
    experts: int = Positive
    top_k: int = Positive
    expert_ffn_hidden: int = Positive
    shared_experts: int = Count
    shared_expert_ffn_hidden: int = Count
    dense_layers: int = Count
    layer_freq: int = Positive
    capacity_factor: float | None = Field(None, gt=0, le=MAX_EXPERTS, allow_inf_nan=False,  # the case format's bounds
                                          description="Expert capacity (token dropping); null: none stated.")
    token_dropping: bool
    router: str | None = Field(None, max_length=MAX_TEXT)

    @model_validator(mode="after")
    def _possible(self):
        """What no mixture of experts is: a token routed to more experts than there are, a shared-expert width
        without shared experts (the row is malformed, not a case the harness cannot price yet)."""
        if self.top_k > self.experts:
            raise ValueError(f"top_k {self.top_k} exceeds experts {self.experts} (a token picks distinct experts)")
        if self.shared_expert_ffn_hidden and not self.shared_experts:
            raise ValueError(f"shared_expert_ffn_hidden {self.shared_expert_ffn_hidden} without shared experts "
                             "(shared_experts 0)")
        return self


class RowMLA(_Closed):
    q_lora_rank: int | None = Count
    kv_lora_rank: int = Positive
    qk_head_dim: int = Positive
    qk_pos_emb_head_dim: int = Positive
    v_head_dim: int = Positive


class RowModel(_Closed):
    name: str = Field(min_length=1, max_length=MAX_TEXT, description="Display only: never reaches the estimate.")
    layers: int = Positive
    hidden: int = Positive
    ffn_hidden: int = Positive
    heads: int = Positive
    kv_heads: int | None = Field(None, gt=0, le=2**31, description="Key/value heads (null under MLA).")
    head_dim: int = Positive
    vocab: int = Positive
    seq_len: int = Positive
    mlp: str = Field(min_length=1, max_length=100)
    norm: str = Field(min_length=1, max_length=100)
    attention: str = Field(min_length=1, max_length=100)
    sliding_window: int | None = Field(None, gt=0, le=2**31)
    tied_embeddings: bool
    position_embedding: str = Field(min_length=1, max_length=200)
    moe: RowMoE | None = None
    mla: RowMLA | None = None
    mtp_layers: int | None = Field(None, ge=0, le=2**16)
    truncated_from: int | None = Field(None, gt=0, le=2**31,
                                       description="The full model's layers when the run used a proxy of `layers`.")

    @field_validator("name")
    @classmethod
    def _named(cls, name: str) -> str:
        words = name.split()
        if not words:  # the summary's model family is the name's first word
            raise ValueError(f"must hold a word (the family is its first word), got {len(name)} blank character(s)")
        if not any(char.isalnum() for char in name):
            raise ValueError(f"{name[:40]!r} holds no letter or digit (the family is its first word)")
        for at, char in enumerate(name):  # the summary prints the family on the terminal (a no-break space is fine)
            if unicodedata.category(char) in UNPRINTED_CATEGORIES:
                raise ValueError(f"must be text the summary can print: {char!r} at character {at} (category "
                                 f"{unicodedata.category(char)})")
        return name


class RowParallel(_Closed):
    tp: int = Positive
    pp: int = Positive
    vp: int | None = Field(None, gt=0, le=2**16)
    cp: int = Positive
    ep: int = Positive
    etp: int | None = Field(None, gt=0, le=2**31)
    dp: int = Positive
    fsdp: bool
    sequence_parallel: bool
    distributed_optimizer: bool
    tp_comm_overlap: bool | None


class RowBatch(_Closed):
    global_batch: int = Positive
    micro_batch: int = Positive
    gradient_accumulation: int = Positive


class RowRecompute(_Closed):
    granularity: Literal["none", "selective", "full"] | None
    modules: list[str] | None = Field(None, max_length=100)
    layers: int | None = Field(None, ge=0, le=2**16)


class RowMeasured(_Closed):
    iteration_s: float = Field(ge=MIN_ITERATION_S, le=1e7, allow_inf_nan=False,
                               description="Seconds per step (at least 100 microseconds).")
    derived_from: Literal["step_time", "tokens_per_s_per_gpu", "tokens_per_s_total", "tflops"]
    as_reported: dict[str, Any] = Field(description="The printed figures, verbatim (display only).")


class MeasuredRun(_Closed):
    """One measured training step and its configuration."""

    id: Identifier = Field(description="Unique label; display only, never a fact to fit or estimate on.")
    source: RowSource
    software: str | None = Field(max_length=MAX_TEXT)
    system: RowSystem
    model: RowModel
    parallel: RowParallel
    batch: RowBatch
    precision: Precision
    recompute: RowRecompute
    measured: RowMeasured
    consistency: list[str] = Field(max_length=1000)
    notes: str = Field(max_length=MAX_TEXT)
    extra: dict[str, Any]

    @model_validator(mode="after")
    def _consistent(self):
        p, b = self.parallel, self.batch
        product = p.tp * p.pp * p.cp * p.dp
        if product != self.system.num_gpus:
            raise ValueError(f"parallel: TP x PP x CP x DP = {product} != system.num_gpus = {self.system.num_gpus}")
        if b.global_batch != p.dp * b.micro_batch * b.gradient_accumulation:
            raise ValueError(f"batch: global_batch {b.global_batch} != DP x micro_batch x gradient_accumulation = "
                             f"{p.dp * b.micro_batch * b.gradient_accumulation}")
        return self


class MeasuredRunsFile(_Closed):
    schema_: Literal["blueprinting.measured-runs.v0"] = Field(alias="schema")
    rows: list[MeasuredRun] = Field(min_length=1, max_length=MAX_ROWS)


def read_runs(path: Path | str) -> list[MeasuredRun]:
    """The rows of a measured-runs file, validated; ids unique. Errors: one InputError naming file, row, field."""
    source = str(path)
    document = read_json(path)
    runs = validate(MeasuredRunsFile, document.data, source, document=document,
                    what=f'a JSON object {{"schema": "{SCHEMA}", "rows": [...]}}')
    seen: dict[str, int] = {}
    for index, run in enumerate(runs.rows):
        if run.id in seen:
            raise InputError(source, f"rows.{index}.id", f"duplicate id {run.id!r} (also rows.{seen[run.id]})")
        seen[run.id] = index
    return runs.rows
