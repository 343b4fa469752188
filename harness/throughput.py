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

Every figure is per processor (GPU): the iteration's total divided by the processors (TP x CP x PP x DP).

The model FLOPs are the model's, whatever the layout: they are read off the plan of the model on the convention's
own layout (:func:`reference_input`, the FLOP oracle's: one processor, one microbatch of the case's size, the
materialized attention kernel, no recomputation; a mixture of experts balanced and dropless), times the blocks
and the samples of the global batch. So no layout changes them: not a flash kernel (which skips the causal tiles
and recomputes the scores in its backward: the executed work the plan prices), not TP beyond the key/value heads
(whose replicated K and V projections every TP rank computes), not CP, EP or PP, not the experts' load imbalance
or capacity (``tests/test_throughput.py`` counts them by hand over those layouts).
"""

from __future__ import annotations

import math

from pydantic import Field

from harness.cases import EstimateInput
from harness.ir.base import Frozen
from harness.ir.model import MAX_BATCH, ExecutionLayout, TransformerShape
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


#: What the convention's layout (:func:`reference_input`) sets; every other field is the case's (the model, the
#: microbatch, the datatype and precision recipe, training or inference, the attention form).
REFERENCE_LAYOUT = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=1, context_parallel=None,
                        expert_parallel=None, expert_tensor_parallel=None, pipeline_interleaving=1, recompute="none",
                        recompute_modules=None, recompute_blocks=None, tp_communication="ar", seq_par_ag_redo=False,
                        optimizer_sharding=False, tp_overlap="none", dp_overlap=False, attention_kernel="materialized",
                        moe_dispatcher=None, cp_comm=None, fsdp=None, expert_overlap=None)


def reference_input(data: EstimateInput) -> EstimateInput:
    """``data``'s model on the FLOP convention's layout (module rules; the FLOP oracle's): one processor (TP, CP,
    PP, DP, EP and ETP 1), a global batch of one microbatch, no recomputation, no overlap or offload, the
    materialized attention kernel (the full s x s scores, a backward of twice the forward). A mixture of experts
    is routed as the oracle routes it: balanced (no ``load_imbalance``) and dropless (no ``capacity_factor``),
    the microbatch the smallest multiple of the case's whose routed tokens (tokens x top-k) split evenly over the
    experts, so that no expert's token count is rounded up (within the batch bound; beyond it the case's)."""
    e, model = data.execution, data.model
    microbatch = e.microbatch
    if model.moe is not None:
        model = model.model_copy(update={"moe": model.moe.model_copy(update={"load_imbalance": None,
                                                                             "capacity_factor": None})})
        routed = e.microbatch * model.sequence_length * model.moe.top_k
        even = e.microbatch * (model.moe.experts // math.gcd(model.moe.experts, routed))
        microbatch = even if even <= MAX_BATCH else microbatch
    tiers = {**e.network_tiers.model_dump(), "context": None, "expert": None, "expert_tensor": None}
    layout = ExecutionLayout.model_validate({**e.model_dump(), **REFERENCE_LAYOUT, "microbatch": microbatch,
                                             "global_batch": microbatch, "network_tiers": tiers, "offload": {}})
    return EstimateInput(model=TransformerShape.model_validate(model.model_dump()), execution=layout,
                         system=data.system)


def throughput(reference: PortablePlanIR, data: EstimateInput, total_s: float, peak_flops_per_s: float,
               block_kinds: tuple[tuple[PortablePlanIR, int], ...] | None = None) -> Throughput:
    """The figures of ``data``'s iteration of ``total_s`` seconds; ``reference``: the PortablePlanIR of
    :func:`reference_input` (``data``'s model on the convention's layout), whose block's matrix work is the
    model FLOPs of one block and one microbatch.

    ``block_kinds``: a model priced stage by stage (:mod:`harness.ir.blocks`: dense and MoE blocks, MTP layers)
    as ``(reference plan of one kind of block, blocks of that kind in the model)`` pairs, each kind's model FLOPs
    summed (an MTP layer counts as the block it holds); None: every one of the model's blocks is of its kind."""
    e = data.execution
    kinds = ((reference, reference.schedule.blocks),) if block_kinds is None else block_kinds
    # the reference's samples (one microbatch) per the batch's, over every DP replica: FLOPs are linear in samples
    batches = e.global_batch / reference.schedule.global_batch
    model_flops = sum(block_matrix_flops(kind) * count * batches for kind, count in kinds)
    per_processor = model_flops / total_s / e.processors if total_s else 0.0
    tokens = e.global_batch * data.model.sequence_length
    return Throughput(
        tokens_per_s_per_processor=tokens / total_s / e.processors if total_s else 0.0,
        model_flops_per_iteration=model_flops, model_flops_per_s_per_processor=per_processor,
        peak_flops_per_s_per_processor=peak_flops_per_s, model_flops_utilization=per_processor / peak_flops_per_s)
