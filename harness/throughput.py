"""The figures people compare across tools: tokens/s per GPU, model FLOP/s per GPU, MFU.

FLOP convention (:data:`FLOP_CONVENTION`, stated wherever the figures are printed): the *model FLOPs* of an
iteration are the matrix-engine operations (a multiply-add counts 2) of the forward pass, the activation
gradient and the weight gradient of every Transformer block, read off the PortablePlanIR; recomputation is not
counted, attention products are counted over the full s x s scores, the output layer (logits) and the embedding
are not counted, nor the vector operations (softmax, norms, activations) or the optimizer. For a GPT block
(feedforward 4h, heads x head size = h) this is Narayanan et al. 2021's 72 B s l h^2 (1 + s/(6h)) per iteration
of B samples; for inference (forward only) a third of it. MFU = model FLOP/s per GPU / the matrix engine's peak
for the layout's datatype (the evidence profile's ``matrix.<datatype>.peak_flops_per_s``), also under a
low-precision recipe (``execution.precision``: fp8, fp4 GEMMs), so that MFUs of one layout compare across
recipes: such a recipe's GEMMs run at their own, higher peak, so its MFU can pass 100 % (``harness estimate
CASE`` prints the model FLOP/s against that GEMM peak beside it: ``commands.estimate.quantized_gemm_peak``).

Every figure is per processor (GPU): the iteration's total divided by the processors (TP x CP x PP x DP). A
block's model FLOPs on one processor are its 1/(TP x CP) share (context parallelism splits the sequence: each
rank's queries against all keys), so the iteration's are that share x TP x CP x blocks x microbatches x DP.
"""

from __future__ import annotations

from pydantic import Field

from harness.cases import EstimateInput
from harness.ir.base import Frozen
from harness.ir.portable import PortablePlanIR

FLOP_CONVENTION = ("model FLOPs = matrix operations (multiply-add = 2) of forward + activation gradient + weight "
                   "gradient of every Transformer block, no recomputation, attention over the full s x s scores, "
                   "output layer, vector operations and optimizer excluded (72 B s l h^2 (1 + s/6h) for a GPT "
                   "block); MFU = model FLOP/s per GPU / the matrix engine's peak for the datatype")


class Throughput(Frozen):
    """Per-processor throughput of one iteration under one cost view (see the module's FLOP convention)."""

    tokens_per_s_per_processor: float = Field(description="Tokens (samples x sequence length) per second per GPU.")
    model_flops_per_iteration: float = Field(description="Model FLOPs of one iteration, all processors.")
    model_flops_per_s_per_processor: float = Field(description="Model FLOPs per second per GPU.")
    peak_flops_per_s_per_processor: float = Field(description="The matrix engine's peak for the datatype.")
    model_flops_utilization: float = Field(description="MFU: model FLOP/s per GPU / peak (a fraction, not %).")


def block_matrix_flops(plan: PortablePlanIR) -> float:
    """Matrix operations of one block on one processor for one microbatch: forward, activation gradient and
    weight gradient of the block's forward-phase tasks (recompute clones and recommunication excluded)."""
    total = 0.0
    for task in plan.tasks:
        if task.phase != "forward":
            continue
        for work in (task.forward, task.activation_grad, task.weight_grad):
            if work.engine == "matrix":
                total += work.operations
    return total


def throughput(plan: PortablePlanIR, data: EstimateInput, total_s: float, peak_flops_per_s: float,
               block_kinds: tuple[tuple[PortablePlanIR, int], ...] | None = None) -> Throughput:
    """The figures of ``data``'s iteration of ``total_s`` seconds (``plan``: its PortablePlanIR).

    ``block_kinds``: a model priced stage by stage (:mod:`harness.ir.blocks`: dense and MoE blocks, MTP layers)
    as ``(plan of one kind of block, blocks of that kind in the model's stages)`` pairs, each kind's model FLOPs
    summed (an MTP layer counts as the block it holds); None: every one of ``plan``'s blocks is of its kind."""
    e, s = data.execution, plan.schedule
    kinds = ((plan, s.blocks),) if block_kinds is None else block_kinds
    model_flops = sum(block_matrix_flops(kind) * e.tensor_parallel * count * s.microbatches * e.data_parallel
                      * e.context_degree for kind, count in kinds)
    per_processor = model_flops / total_s / e.processors if total_s else 0.0
    tokens = s.global_batch * data.model.sequence_length
    return Throughput(
        tokens_per_s_per_processor=tokens / total_s / e.processors if total_s else 0.0,
        model_flops_per_iteration=model_flops, model_flops_per_s_per_processor=per_processor,
        peak_flops_per_s_per_processor=peak_flops_per_s, model_flops_utilization=per_processor / peak_flops_per_s)
