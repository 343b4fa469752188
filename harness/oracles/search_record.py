"""Vendored records of Calculon's optimal-execution search (``harness oracle record --search``).

A search record holds the request (Calculon's model JSON, the profile it was
exported from, processors, maximum batch, datatype, top N and the switches),
Calculon's counts (executions, good, bad), its top N as it wrote them
(``execution`` and ``stats``, no layers), its wall-clock time on the recording
machine (for information only), and the oracle identity; the manifest lists
its SHA-256 like every record file.

Rule: Calculon runs with its stock search command, in-process, with its debug
logging switched off (:meth:`CalculonRunner.optimal_execution`); nothing is
taken from it but its output.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from harness.evidence.calculon_export import calculon_system
from harness.interop.calculon_format import MODEL_FIELDS
from harness.ir.base import Frozen
from harness.oracles.record import runner_identity, write_vendored
from harness.oracles.records import OracleIdentity, load_checked
from harness.oracles.runner import CalculonRunner
from harness.search.evaluate import SearchProblem

SEARCH_RECORD_SCHEMA = "blueprinting.calculon-search-record.v0"


class SearchRequestRecord(Frozen):
    """What Calculon's search was asked."""

    calculon_model: dict[str, Any] = Field(description="Model JSON given to Calculon.")
    system: str = Field(description="Evidence profile the system JSON was exported from.")
    num_procs: int = Field(description="Processors.")
    max_batch_size: int = Field(description="Maximum global batch.")
    datatype: str = Field(description="Datatype.")
    top_n: int = Field(description="Calculon's -t.")
    mbs_break: bool = Field(description="Calculon's -m.")
    fused_activation: tuple[bool, ...] = Field(description="Calculon's -f, as the list of values searched.")
    tp_overlap: bool = Field(description="TP overlap searched (not --no-tp-overlap).")
    dp_overlap: bool = Field(description="DP overlap searched (not --no-dp-overlap).")


class SearchCounts(Frozen):
    executions: int = Field(description="Executions Calculon enumerated.")
    good: int = Field(description="Executions it estimated.")
    bad: int = Field(description="Executions it refused (Llm.Error).")


class SearchRecordFile(Frozen):
    schema_: Literal["blueprinting.calculon-search-record.v0"] = Field(alias="schema", description="File schema.")
    oracle: OracleIdentity = Field(description="Oracle identity.")
    evidence_revisions: dict[str, str] = Field(description="Revision of the evidence profile used.")
    request: SearchRequestRecord = Field(description="The search request.")
    counts: SearchCounts = Field(description="Calculon's counts.")
    elapsed_s: float = Field(description="Calculon's wall-clock time when recorded (information only).")
    cpus: int = Field(description="Calculon's -c when recorded.")
    top: tuple[dict[str, Any], ...] = Field(description="Calculon's top N, best first: {execution, stats}.")


def request_record(problem: SearchProblem) -> SearchRequestRecord:
    shape = problem.shape.model_dump()
    o = problem.options
    return SearchRequestRecord(
        calculon_model={theirs: shape[ours] for theirs, ours in MODEL_FIELDS.items()}, system=problem.profile.name,
        num_procs=problem.processors, max_batch_size=problem.max_batch, datatype=problem.datatype,
        top_n=problem.top, mbs_break=o.mbs_break, fused_activation=o.fused_activation, tp_overlap=o.tp_overlap,
        dp_overlap=o.dp_overlap)


def record_search(runner: CalculonRunner, problem: SearchProblem, relative: str, vendor: Path,
                  cpus: int | None = None) -> tuple[Path, dict[str, Any]]:
    """Run Calculon's search for ``problem`` and write ``vendor/relative`` (plus the manifest)."""
    request = request_record(problem)
    cpus = cpus or os.cpu_count() or 1
    result = runner.optimal_execution(
        request.calculon_model, calculon_system(problem.profile), procs=request.num_procs,
        max_batch=request.max_batch_size, datatype=request.datatype, top=request.top_n, mbs_break=request.mbs_break,
        fused_activation=list(request.fused_activation), tp_overlap=request.tp_overlap,
        dp_overlap=request.dp_overlap, cpus=cpus)
    identity = runner_identity(runner)
    data = {"schema": SEARCH_RECORD_SCHEMA, "oracle": identity.model_dump(),
            "evidence_revisions": {problem.profile.name: problem.profile.revision()},
            "request": request.model_dump(mode="json"), "counts": result["counts"],
            "elapsed_s": round(result["elapsed_s"], 3), "cpus": cpus, "top": result["top"]}
    return write_vendored(identity, relative, data, vendor), data


def load_search_record(relative: str, vendor: Path | None = None) -> SearchRecordFile:
    """A vendored search record, digest-checked against the manifest."""
    return load_checked(relative, SearchRecordFile, vendor)
