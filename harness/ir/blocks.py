"""Models whose blocks are not all identical: a mixture of experts with dense blocks (issue 21).

A MoE model with ``model.moe.dense_layers`` or ``layer_frequency`` has two kinds of block: MoE blocks (the
``mlp`` slot is the routed experts) and dense blocks (the dense MLP of ``model.feedforward``). Each kind is
lowered as a uniform model of its own (:func:`variants`: the MoE variant keeps every field but the two that mix
the blocks; the dense variant drops ``model.moe``, the expert layout and the ``moe_act`` recompute module), and
the estimate composes the stages from the blocks each one really holds (:mod:`harness.estimate`,
``estimate_mixed``).

Rules:

- block ``i`` (from 0) is a MoE block by :meth:`harness.ir.model.MixtureOfExperts.is_moe_block`;
- with PP stages and ``v`` model chunks per stage (pipeline interleaving) the blocks form ``PP x v`` virtual
  stages of consecutive blocks, and virtual stage ``c x PP + j`` is chunk ``c`` of stage ``j`` (Megatron-Core's
  interleaved layer assignment). Each virtual stage holds ``blocks / (PP x v)`` blocks when that divides; else
  each holds ``ceil(blocks / (PP x v))`` and the last the rest (:func:`virtual_stage_blocks`: Megatron-Bridge's
  DeepSeek-V3 layouts, ``set_deepseek_v3_pipeline_model_parallel_layout`` in
  ``megatron/bridge/recipes/deepseek/deepseek_v3.py``, 61 blocks as 16 x 4 - 3 for PP 16, PP 8 x 2 and PP 4 x 4,
  8 x 8 - 3 for PP 8 and PP 4 x 2, 4 x 16 - 3 for PP 4; Megatron-Core itself needs an explicit layout there).
  A last virtual stage that would hold no block is refused (:func:`stage_problems`). The composition prices
  every stage as the slowest one (its per-block average over the schedule's ``blocks_per_stage``,
  ``harness.estimate.MixedBlocks.per_stage``), with the schedule's bubble reduction for the blocks the
  stages lack (Calculon's rule for uneven stages: the same count, ``PP x blocks_per_stage - blocks``, when
  ``v = 1``);
- :func:`stage_blocks` counts, per stage, its MoE and its dense blocks;
- multi-token prediction (``model.mtp_layers``, Megatron-Core's MTP: the layers sit after the decoder on the
  last pipeline stage) adds ``mtp_layers`` blocks of the model's last block's kind to the last stage
  (:func:`stage_blocks`), whose blocks then number its virtual stages' blocks plus ``mtp_layers``; the rest of
  each MTP layer (its norms, projection and output layer) is :mod:`harness.passes.multi_token`'s. A MoE model with MTP
  is priced through these stages even when every block is MoE (:func:`has_stages`);
- a model whose chunks recompute only their first ``execution.recompute_blocks`` blocks (Megatron-Core's
  ``recompute_method: block``; :func:`is_partially_recomputed`) has blocks of two kinds too: the ones not
  recomputed (the main kind, ``recompute: none``) and the ones recomputed whole (``recompute: full``), each
  lowered as a uniform model (:func:`recompute_variants`); the first stage holds ``v x (per chunk - N)`` and
  ``v x N`` (:func:`recompute_stage_blocks`), and the composition prices every stage as it, as the uniform
  composition prices every stage as the first. With dense and MoE blocks, MTP or offload it is refused
  (:func:`stage_problems`);
- TP and DP overlap are priced through both kinds' ConcretePlanIRs (the stage's per-block averages of their
  block sums, ``harness.estimate.mixed_concrete_iteration``); offload is refused (:func:`stage_problems`).
"""

from __future__ import annotations

from harness.ir.model import ExecutionLayout, TransformerShape

Problem = tuple[str, str]

#: The layout fields of the expert layout (a dense variant has none of them).
EXPERT_LAYOUT_FIELDS = ("expert_parallel", "expert_tensor_parallel", "moe_dispatcher", "expert_overlap")


def is_mixed(shape: TransformerShape) -> bool:
    """Whether the model has MoE and dense blocks (``dense_layers`` or a ``layer_frequency`` other than 1)."""
    moe = shape.moe
    return moe is not None and (moe.dense_blocks > 0 or moe.frequency != 1)


def mixing_field(shape: TransformerShape) -> str:
    """The case field that makes ``shape``'s blocks of two kinds (:func:`is_mixed`), for an error to name: the one
    the case sets (``dense_layers`` when it has leading dense blocks, else ``layer_frequency``)."""
    moe = shape.moe
    return "model.moe.dense_layers" if moe is None or moe.dense_blocks else "model.moe.layer_frequency"


def blocks_per_stage(blocks: int, pipeline_parallel: int) -> int:
    """Blocks on the first (fullest) stage: blocks / PP rounded up."""
    return -(-blocks // pipeline_parallel)


def short_stages(blocks: int, pipeline_parallel: int) -> int:
    """The stages holding one block fewer than the first when PP does not divide the blocks (the last ones): the
    schedule's ``bubble_reduction_blocks``, ``PP x blocks_per_stage - blocks``."""
    return pipeline_parallel * blocks_per_stage(blocks, pipeline_parallel) - blocks


def blocks_per_chunk(shape: TransformerShape, execution: ExecutionLayout) -> int:
    """Blocks of one model chunk of the first stage: ``ceil(blocks / PP) / v`` (the layout checks that ``v``
    divides the first stage's blocks)."""
    return blocks_per_stage(shape.blocks, execution.pipeline_parallel) // execution.pipeline_interleaving


def is_partially_recomputed(shape: TransformerShape, execution: ExecutionLayout) -> bool:
    """Whether ``recompute_blocks`` leaves some blocks of a model chunk (:func:`blocks_per_chunk`) not recomputed;
    naming at least all of them is plain full recomputation (Megatron-Core's block method recomputes layer ``l``
    of a chunk when ``l < recompute_num_layers``)."""
    n = execution.recompute_blocks
    return n is not None and execution.recompute == "full" and n < blocks_per_chunk(shape, execution)


def priced_by_stages(shape: TransformerShape, execution: ExecutionLayout) -> bool:
    """Whether the estimate prices the model from two kinds of block (:func:`has_stages`, or
    :func:`is_partially_recomputed`) instead of one plan."""
    return has_stages(shape) or is_partially_recomputed(shape, execution)


def recompute_variants(shape: TransformerShape, execution: ExecutionLayout
                       ) -> tuple[tuple[TransformerShape, ExecutionLayout], tuple[TransformerShape, ExecutionLayout]]:
    """``((shape, the layout recomputing nothing), (shape, the layout recomputing every block))``."""
    plain = execution.model_copy(update={"recompute": "none", "recompute_blocks": None})
    return (shape, plain), (shape, execution.model_copy(update={"recompute_blocks": None}))


def recompute_stage_blocks(shape: TransformerShape, execution: ExecutionLayout) -> list[tuple[int, int]]:
    """``(blocks not recomputed, blocks recomputed)`` of each stage (module rules): the first stage holds ``v``
    chunks of ``ceil(blocks / PP) / v`` blocks with their first ``recompute_blocks`` recomputed; when PP does not
    divide the blocks, the last ``PP - blocks mod PP`` stages hold one block fewer (the uniform schedule's rule),
    as many of them recomputed (at most all). The counts add up to the blocks; the first stage is the slowest and
    the fullest."""
    n, chunks, pp = execution.recompute_blocks or 0, execution.pipeline_interleaving, execution.pipeline_parallel
    per_stage = blocks_per_stage(shape.blocks, pp)
    short = short_stages(shape.blocks, pp)
    held = [per_stage - (stage >= pp - short) for stage in range(pp)]
    return [(h - min(chunks * n, h), min(chunks * n, h)) for h in held]


def has_stages(shape: TransformerShape) -> bool:
    """Whether the estimate prices the model stage by stage: dense and MoE blocks, or MTP layers on the last
    stage."""
    return is_mixed(shape) or (shape.moe is not None and shape.mtp_layers is not None)


def variants(shape: TransformerShape, execution: ExecutionLayout
             ) -> tuple[tuple[TransformerShape, ExecutionLayout], tuple[TransformerShape, ExecutionLayout]]:
    """``((MoE shape, layout), (dense shape, layout))``: the uniform model of each kind of block."""
    moe = shape.moe
    assert moe is not None
    moe_shape = shape.model_copy(update={"moe": moe.model_copy(update={"dense_layers": None,
                                                                       "layer_frequency": None}),
                                         "mtp_layers": None})
    tiers = execution.network_tiers.model_copy(update={"expert": None, "expert_tensor": None})
    dense_layout = execution.model_copy(update={**{f: None for f in EXPERT_LAYOUT_FIELDS}, "network_tiers": tiers,
                                                **_dense_recompute(execution)})
    return (moe_shape, execution), (shape.model_copy(update={"moe": None, "mtp_layers": None}), dense_layout)


def _dense_recompute(execution: ExecutionLayout) -> dict:
    """The dense variant's recompute fields: the routed experts' module (``moe_act``) left out, ``recompute:
    none`` when no module is left (a dense block has nothing else of it)."""
    modules = execution.recompute_modules
    if modules is None or "moe_act" not in modules:
        return {}
    kept = tuple(m for m in modules if m != "moe_act")
    return {"recompute_modules": kept} if kept else {"recompute_modules": None, "recompute": "none"}


def stage_problems(shape: TransformerShape, execution: ExecutionLayout) -> list[Problem]:
    """What a mixed model's stages need (module rules); empty for a uniform model."""
    e = execution
    if is_partially_recomputed(shape, e):
        if has_stages(shape):
            return [("execution.recompute_blocks", "recomputing some blocks of each chunk with dense and MoE blocks or "
                                                   "MTP layers is not modelled yet")]
        if e.offload.weights or e.offload.activations or e.offload.optimizer:
            return [("execution.recompute_blocks", "recomputing some blocks of each chunk with offload is not "
                                                   "modelled yet (the offload transfers are one kind of block's)")]
        return []
    if not has_stages(shape):
        return []
    virtual = execution.pipeline_parallel * execution.pipeline_interleaving
    problems: list[Problem] = []
    if is_uneven(shape, execution) and virtual_stage_blocks(shape.blocks, virtual)[-1] < 1:
        per = blocks_per_stage(shape.blocks, virtual)
        problems.append(("execution.pipeline_parallel", f"PP x interleaving = {virtual} virtual stages of "
                                                        f"ceil({shape.blocks} / {virtual}) = {per} blocks leave none "
                                                        f"for the last: other layouts of the {shape.blocks} blocks "
                                                        "are not modelled yet"))
    if e.offload.weights or e.offload.activations or e.offload.optimizer:
        if is_mixed(shape):
            problems.append((mixing_field(shape), "dense and MoE blocks with offload are not modelled yet (the "
                                                       "offload transfers are one kind of block's)"))
        else:
            problems.append(("model.mtp_layers", "multi-token prediction with offload is not modelled yet (the "
                                                 "offload transfers hold no MTP layer)"))
    return problems


def one_plan_problem(shape: TransformerShape, execution: ExecutionLayout) -> Problem | None:
    """Why ``shape`` has no single plan (dense and MoE blocks, MTP layers on the last stage, or some blocks of each
    chunk recomputed: the estimate prices it stage by stage, :func:`priced_by_stages`), or None. What shows one plan (``harness lower``, ``explain``,
    ``trace``) refuses such a model with it."""
    if is_partially_recomputed(shape, execution):
        return ("execution.recompute_blocks", "recomputing some blocks of each chunk lowers to two plans, the blocks "
                                              "recomputed and the others: `harness estimate` prices the model; a view "
                                              "of one plan (lower, explain, trace) does not show it yet")
    if is_mixed(shape):
        return (mixing_field(shape), "dense and MoE blocks (dense_layers, layer_frequency) lower to two plans, "
                                          "one per kind of block: `harness estimate` prices the model; a view of one "
                                          "plan (lower, explain, trace) does not show it yet")
    if has_stages(shape):
        return ("model.mtp_layers", "multi-token-prediction layers are priced on the last stage beside the plan: "
                                    "`harness estimate` prices the model; a view of one plan (lower, explain, "
                                    "trace) does not show it yet")
    return None


def virtual_stage_blocks(blocks: int, virtual_stages: int) -> list[int]:
    """The blocks each virtual stage holds, in virtual stage order: ``blocks / virtual_stages`` each when that
    divides, else ``ceil(blocks / virtual_stages)`` each and the rest on the last, which may then hold none or
    fewer (module rules; :func:`stage_problems` refuses a last stage without a block)."""
    per = blocks_per_stage(blocks, virtual_stages)
    return [per] * (virtual_stages - 1) + [blocks - per * (virtual_stages - 1)]


def is_uneven(shape: TransformerShape, execution: ExecutionLayout) -> bool:
    """Whether the virtual stages hold different numbers of blocks (``PP x v`` does not divide the blocks)."""
    return shape.blocks % (execution.pipeline_parallel * execution.pipeline_interleaving) != 0


def stage_blocks(shape: TransformerShape, execution: ExecutionLayout) -> list[tuple[int, int]]:
    """``(MoE blocks, dense blocks)`` of each pipeline stage, in stage order (module rules)."""
    moe = shape.moe
    pp, chunks = execution.pipeline_parallel, execution.pipeline_interleaving
    sizes = virtual_stage_blocks(shape.blocks, pp * chunks)
    starts = [sum(sizes[:k]) for k in range(len(sizes))]
    out = []
    for stage in range(pp):
        virtual = [c * pp + stage for c in range(chunks)]  # the stage's virtual stages
        held = [i for v in virtual for i in range(starts[v], starts[v] + sizes[v])]
        experts = sum(1 for i in held if moe is not None and moe.is_moe_block(i))
        out.append((experts, len(held) - experts))
    if shape.mtp_layers:  # the MTP layers' blocks, of the last block's kind, on the last stage
        experts, dense = out[-1]
        last_moe = moe is not None and moe.is_moe_block(shape.blocks - 1)
        out[-1] = (experts + shape.mtp_layers, dense) if last_moe else (experts, dense + shape.mtp_layers)
    return out
