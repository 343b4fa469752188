"""Semantic rules a shape and layout must satisfy before lowering.

Each problem is ``(field, message)`` with ``field`` a dotted path in the case
file (``execution.tensor_parallel``). TP/DP overlap and offload are lowered
to the ConcretePlanIR; the options are valid only where they mean something
(Calculon 0.1.0 asserts the same): TP overlap with TP > 1, DP overlap in
training with DP > 1, optimizer offload in training.
"""

from __future__ import annotations

from harness.ir.model import MAX_DEGREE, ExecutionLayout, TransformerShape

Problem = tuple[str, str]


def unsupported_features(execution: ExecutionLayout) -> list[str]:
    """Fields that request semantics the estimate cannot represent: none since
    the ConcretePlanIR carries TP/DP overlap and offload (kept so that callers
    that classify inputs keep one place to ask)."""
    return []


def blocks_per_stage(blocks: int, pipeline_parallel: int) -> int:
    """Blocks on the first (fullest) stage: blocks / PP rounded up."""
    return -(-blocks // pipeline_parallel)


def layout_problems(shape: TransformerShape, execution: ExecutionLayout) -> list[Problem]:
    """All violated rules, in a stable order; empty when the layout is valid."""
    e, s = execution, shape
    tp = e.tensor_parallel
    problems: list[Problem] = []
    if e.processors > MAX_DEGREE:
        problems.append(("execution", f"TP x PP x DP = {e.processors} processors exceeds the bound {MAX_DEGREE} (2^24)"))
    for name, value in (("hidden", s.hidden), ("feedforward", s.feedforward), ("attention_heads", s.attention_heads)):
        if value % tp:
            problems.append(("execution.tensor_parallel", f"TP={tp} does not divide model.{name}={value}"))
    if e.global_batch % e.data_parallel:
        problems.append(("execution.global_batch", f"{e.global_batch} is not divisible by data_parallel={e.data_parallel}"))
    elif (e.global_batch // e.data_parallel) % e.microbatch:
        problems.append(
            ("execution.microbatch", f"local batch {e.global_batch // e.data_parallel} is not divisible into microbatches of {e.microbatch}")
        )
    if e.tp_communication in ("rs_ag", "p2p_rs_ag") and (e.microbatch * s.sequence_length) % tp:
        problems.append(
            ("execution.tp_communication", f"{e.tp_communication} splits microbatch x sequence = {e.microbatch * s.sequence_length} over TP={tp}, which does not divide it")
        )
    if e.seq_par_ag_redo and e.tp_communication != "rs_ag":
        problems.append(("execution.seq_par_ag_redo", "all-gather redo needs sequence parallelism (tp_communication: rs_ag)"))
    if e.seq_par_ag_redo and e.recompute == "full":
        problems.append(("execution.seq_par_ag_redo", "all-gather redo is meaningless with full recompute (it already recommunicates)"))
    if e.recompute != "none" and not e.training:
        problems.append(("execution.recompute", "recomputation needs training: true"))
    if e.tp_overlap != "none" and tp == 1:
        problems.append(("execution.tp_overlap", f"TP overlap ({e.tp_overlap}) needs tensor_parallel > 1"))
    if e.dp_overlap and not e.training:
        problems.append(("execution.dp_overlap", "DP overlap needs training: true"))
    elif e.dp_overlap and e.data_parallel == 1:
        problems.append(("execution.dp_overlap", "DP overlap needs data_parallel > 1"))
    if e.offload.optimizer and not e.training:
        problems.append(("execution.offload.optimizer", "optimizer offload needs training: true"))
    if e.optimizer_sharding and e.data_parallel == 1:
        problems.append(("execution.optimizer_sharding", "optimizer sharding needs data_parallel > 1"))
    if e.pipeline_parallel == 1 and e.pipeline_interleaving != 1:
        problems.append(("execution.pipeline_interleaving", "interleaving needs pipeline_parallel > 1"))
    if e.pipeline_parallel > s.blocks:  # stages beyond the blocks would hold nothing and still be priced
        problems.append(("execution.pipeline_parallel", f"PP={e.pipeline_parallel} exceeds the {s.blocks} blocks "
                                                        "(every stage needs at least one block)"))
    per_stage = blocks_per_stage(s.blocks, e.pipeline_parallel)
    if per_stage % e.pipeline_interleaving:
        problems.append(
            ("execution.pipeline_interleaving", f"{e.pipeline_interleaving} does not divide the {per_stage} blocks per stage")
        )
    return problems
