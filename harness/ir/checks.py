"""Semantic rules a shape and layout must satisfy before lowering.

Each problem is ``(field, message)`` with ``field`` a dotted path in the case
file (``execution.tensor_parallel``). TP/DP overlap and offload are lowered
to the ConcretePlanIR; the options are valid only where they mean something
(Calculon 0.1.0 asserts the same): TP overlap with TP > 1, DP overlap in
training with DP > 1, optimizer offload in training.
"""

from __future__ import annotations

from harness.ir.blocks import (blocks_per_stage, has_stages, is_partially_recomputed, recompute_variants, stage_problems,
                               variants)
from harness.ir.experts import expert_layout_problems
from harness.ir.model import MAX_DEGREE, PRICED_RECOMPUTE_MODULES, ExecutionLayout, TransformerShape, key_value_heads
from harness.passes.patterns import unpriceable
from harness.passes.precision import RECIPES

Problem = tuple[str, str]


def recompute_module_problems(shape: TransformerShape, execution: ExecutionLayout) -> list[Problem]:
    """``recompute: selective`` names its modules, and only it does; each module once, each one the model has
    (``mla_up_proj``: ``model.mla``; ``moe_act``: ``model.moe``)."""
    modules, field = execution.recompute_modules, "execution.recompute_modules"
    if execution.recompute == "selective" and not modules:
        return [(field, "recompute: selective needs the modules it recomputes (Megatron-Core's recompute_modules, "
                        "e.g. [core_attn, layernorm])")]
    if modules is None:
        return []
    if execution.recompute != "selective":
        return [(field, f"needs recompute: selective (recompute is {execution.recompute})")]
    problems = [(field, f"{m!r} is named twice") for m in sorted(set(modules)) if modules.count(m) > 1]
    for module, present, what in (("mla_up_proj", shape.mla is not None, "model.mla (latent attention)"),
                                  ("moe_act", shape.moe is not None, "model.moe (routed experts)")):
        if module in modules and not present:
            problems.append((field, f"{module!r} needs {what}"))
    return problems


def recompute_blocks_problems(shape: TransformerShape, execution: ExecutionLayout) -> list[Problem]:
    """``recompute_blocks`` needs ``recompute: full`` (at least the blocks of a model chunk is every block, as in
    Megatron-Core's block method: :func:`harness.ir.blocks.is_partially_recomputed`)."""
    if execution.recompute_blocks is not None and execution.recompute != "full":
        return [("execution.recompute_blocks", f"needs recompute: full (recompute is {execution.recompute})")]
    return []


def unsupported_features(shape: TransformerShape, execution: ExecutionLayout) -> list[Problem]:
    """What the estimate cannot price: each ``(field, message)`` names a part of the model or layout that no
    registered sub-graph pattern lowers (:func:`harness.passes.patterns.unpriceable`: a core slot, the norm
    or the attention kernel matched by no pattern, or refused by the one selected, e.g. a QKV bias under TP
    overlap). TP/DP overlap and offload are priced through the ConcretePlanIR."""
    unpriced = [m for m in execution.recompute_modules or () if m not in PRICED_RECOMPUTE_MODULES]
    if unpriced:
        return [("execution.recompute_modules", f"recomputing {', '.join(map(repr, unpriced))} (a whole submodule) "
                                                f"is not modelled yet (priced: {', '.join(PRICED_RECOMPUTE_MODULES)})")]
    if shape.mtp_layers is not None and shape.moe is None:
        return [("model.mtp_layers", "multi-token prediction on a dense model is not modelled yet (it is priced "
                                     "for MoE models, DeepSeek-V3's, through the stages of harness.ir.blocks)")]
    if has_stages(shape):  # dense and MoE blocks, or MTP: each kind lowered as a uniform model of its own
        (moe_shape, moe_layout), (dense_shape, dense_layout) = variants(shape, execution)
        return (stage_problems(shape, execution) + unpriceable(moe_shape, moe_layout)
                + unpriceable(dense_shape, dense_layout))
    if is_partially_recomputed(shape, execution):  # the blocks recomputed and the others, each lowered on its own
        (plain_shape, plain), (full_shape, full) = recompute_variants(shape, execution)
        return stage_problems(shape, execution) + unpriceable(plain_shape, plain) + unpriceable(full_shape, full)
    return unpriceable(shape, execution)


def context_problems(s: TransformerShape, e: ExecutionLayout) -> list[Problem]:
    """Context parallelism's rules: CP splits each sequence into 2 x CP chunks (causal load balancing), its
    group needs a network tier; TP and DP overlap are priced through the ConcretePlanIR (the ring's exposed time
    by the portable rule, harness.schedule.block.ring_exposure), offload not yet."""
    cp = e.context_degree
    if cp == 1:
        return [("execution.cp_comm", "cp_comm needs context_parallel > 1")] if e.cp_comm is not None else []
    problems: list[Problem] = []
    if s.sequence_length % (2 * cp):
        problems.append(("execution.context_parallel", f"CP={cp} splits model.sequence_length={s.sequence_length} "
                                                       f"into 2 x CP = {2 * cp} chunks, which does not divide it"))
    if e.network_tiers.context is None:
        problems.append(("execution.network_tiers.context", f"context_parallel={cp} needs the tier of its group"))
    windowed = s.sliding_window is not None and s.sliding_window < s.sequence_length
    if e.attention_kernel == "flash" and e.cp_comm != "a2a" and windowed:
        problems.append(("model.sliding_window", "a sliding window with flash attention and context_parallel > 1 "
                                                 "is not modelled yet (the ring's chunk pairs assume the causal "
                                                 "mask)"))
    if e.cp_comm == "a2a":  # Ulysses splits each TP rank's heads over the context ranks
        tp = e.tensor_parallel
        heads, kv = s.attention_heads // tp, max(1, key_value_heads(s, e) // tp)
        if heads % cp or kv % cp:
            problems.append(("execution.cp_comm", f"a2a (Ulysses) splits the {heads} query and {kv} key/value heads "
                                                  f"of a TP rank over CP={cp} ranks: CP must divide both"))
        if s.mla is not None:
            problems.append(("execution.cp_comm", "a2a (Ulysses) with multi-head latent attention (model.mla) is "
                                                  "not modelled yet: use p2p"))
    if e.offload.weights or e.offload.activations or e.offload.optimizer:  # no shared measured row runs it
        problems.append(("execution.offload", "offload with context_parallel > 1 is not modelled yet"))
    return problems


def fsdp_problems(s: TransformerShape, e: ExecutionLayout) -> list[Problem]:
    """Fully sharded data parallelism's rules: training, its weights sharded with the optimizer state
    (optimizer_sharding) over data x context ranks (DP x CP > 1); priced by the portable plan only (its gathers
    overlap the blocks' compute by their own rule, harness.schedule.block.fsdp_exposure, not by the
    ConcretePlanIR's once-per-iteration DP sync: no TP/DP overlap or offload with it); dense models only."""
    if not e.fsdp:
        return []
    problems: list[Problem] = []
    if not e.training:
        problems.append(("execution.fsdp", "fully sharded data parallelism needs training: true"))
    if not e.optimizer_sharding or e.data_parallel * e.context_degree == 1:
        problems.append(("execution.fsdp", "fully sharded data parallelism needs optimizer_sharding: true and "
                                           "data_parallel x context_parallel > 1"))
    for name, on in (("tp_overlap", e.tp_overlap != "none"), ("dp_overlap", e.dp_overlap),
                     ("offload", e.offload.any_offloaded)):
        if on:
            problems.append((f"execution.{name}", f"{name} with fsdp is not modelled yet (FSDP's own prefetch "
                                                  "overlaps its gathers with the blocks' compute)"))
    if s.moe is not None:
        problems.append(("execution.fsdp", "fsdp with model.moe is not modelled yet"))
    return problems


def expert_overlap_problems(s: TransformerShape, e: ExecutionLayout) -> list[Problem]:
    """The expert all-to-all overlap's rules (``execution.expert_overlap``, Megatron-Core's
    overlap_moe_expert_parallel_comm): a MoE model whose all-to-alls exist (EP > 1, the alltoall dispatcher),
    in training (a forward overlaps another microbatch's backward), with virtual stages when pipelined
    (Megatron-Core's TransformerConfig asserts it). Priced with selective recomputation or none, in the
    ConcretePlanIR's projection (:func:`harness.schedule.block.expert_overlap_hidden_s`); with full
    recomputation, TP overlap, context parallelism or offload it is not modelled yet. An MTP layer's block is a
    MoE block of the last stage like the others (Megatron-Core schedules it in the same plan); its head stays
    outside the merged steps."""
    if not e.expert_overlap:
        return []
    field = "execution.expert_overlap"
    if s.moe is None:
        return [(field, "needs model.moe (a dense model has no expert all-to-all)")]
    problems: list[Problem] = []
    if e.expert_degree == 1:
        problems.append((field, "needs expert_parallel > 1 (no all-to-all to overlap)"))
    if e.moe_dispatcher == "allgather":
        problems.append((field, "needs moe_dispatcher: alltoall (Megatron-Core overlaps the all-to-all dispatcher's "
                                "exchanges)"))
    if not e.training:
        problems.append((field, "needs training: true (a microbatch's forward overlaps another's backward)"))
    if e.pipeline_parallel > 1 and e.pipeline_interleaving == 1:
        problems.append((field, "needs pipeline_interleaving > 1 with pipeline_parallel > 1 (Megatron-Core asserts "
                                "it: the overlap merges the steps of its interleaved schedule)"))
    unmodelled = (("recompute: full", e.recompute == "full"),
                  ("tp_overlap", e.tp_overlap != "none"), ("context_parallel > 1", e.context_degree > 1),
                  ("offload", e.offload.weights or e.offload.activations or e.offload.optimizer))
    problems += [(field, f"expert_overlap with {what} is not modelled yet") for what, on in unmodelled if on]
    return problems


def vocabulary_problems(s: TransformerShape) -> list[Problem]:
    """Stating ``tied_embeddings`` counts the embedding and output-layer weights (harness.passes.output_layer):
    their rows are the vocabulary's, which the shape must then state."""
    if s.tied_embeddings is not None and s.vocabulary is None:
        return [("model.tied_embeddings", "counts the embedding and output-layer weights, whose rows are the "
                                          "vocabulary's: it needs model.vocabulary")]
    return []


def expert_problems(s: TransformerShape, e: ExecutionLayout) -> list[Problem]:
    """The expert layout's rules: the expert fields need model.moe; the model has at least one MoE block;
    Megatron-Core's layout constraints (:func:`harness.ir.experts.expert_layout_problems`, which the search
    enumerates by too: EP divides the experts, ETP their width, ETP x EP divides TP x CP x DP, EP > 1 with TP > 1
    needs sequence parallelism, EP > 1 not in float16); the shared experts split over TP like the dense MLP;
    EP > 1 and ETP > 1 need their group's network tier."""
    tiers = e.network_tiers
    given = {"expert_parallel": e.expert_parallel, "expert_tensor_parallel": e.expert_tensor_parallel,
             "moe_dispatcher": e.moe_dispatcher, "network_tiers.expert": tiers.expert,
             "network_tiers.expert_tensor": tiers.expert_tensor}
    moe = s.moe
    if moe is None:
        return [(f"execution.{name}", f"{name} needs model.moe (a dense model has no experts)")
                for name, value in given.items() if value is not None]
    problems: list[Problem] = []
    first = -(-moe.dense_blocks // moe.frequency) * moe.frequency  # the first MoE block's index
    if first >= s.blocks:
        problems.append(("model.moe.dense_layers", f"no MoE block among the {s.blocks} blocks (dense_layers="
                                                   f"{moe.dense_blocks}, layer_frequency={moe.frequency})"))
    ep, etp, tp = e.expert_degree, e.expert_tensor_degree, e.tensor_parallel
    problems += expert_layout_problems(tensor=tp, context=e.context_degree, data=e.data_parallel,
                                       experts=moe.experts, expert_ffn=moe.expert_ffn, expert_parallel=ep,
                                       expert_tensor_parallel=etp, sequence_parallel=e.sequence_parallel,
                                       datatype=e.datatype)
    if moe.shared_width % tp:
        problems.append(("execution.tensor_parallel", f"TP={tp} does not divide the shared experts' width "
                                                      f"{moe.shared_width} (shared_experts x shared_expert_ffn)"))
    for degree, name in ((ep, "expert"), (etp, "expert_tensor")):
        if degree > 1 and getattr(tiers, name) is None:
            problems.append((f"execution.network_tiers.{name}", f"{name} parallelism of {degree} needs the tier "
                                                                "of its group"))
    return problems


def latent_attention_problems(s: TransformerShape, e: ExecutionLayout) -> list[Problem]:
    """Multi-head latent attention's rules: head_size is its query/key head width, and every head has its own key
    and value (no grouped-query or multi-query form)."""
    if s.mla is None:
        return []
    problems: list[Problem] = []
    if s.head_size != s.mla.qk_head_dim:
        problems.append(("model.head_size", f"{s.head_size} differs from mla.qk_nope_head_dim + mla.qk_rope_head_dim "
                                            f"= {s.mla.qk_head_dim}, the query/key head width of latent attention"))
    if (s.kv_heads is not None and s.kv_heads != s.attention_heads) or e.attention == "multiquery":
        # the field the case sets: kv_heads when it states other heads, else the layout's multiquery
        field = "model.kv_heads" if s.kv_heads is not None and s.kv_heads != s.attention_heads else \
            "execution.attention"
        problems.append((field, "multi-head latent attention (model.mla) gives every head its own key and "
                                "value: no kv_heads other than attention_heads, no multiquery"))
    return problems


def layout_problems(shape: TransformerShape, execution: ExecutionLayout) -> list[Problem]:
    """All violated rules, in a stable order; empty when the layout is valid."""
    e, s = execution, shape
    tp = e.tensor_parallel
    problems: list[Problem] = []
    if e.processors > MAX_DEGREE:
        problems.append(("execution", f"TP x PP x DP x CP = {e.processors} processors exceeds the bound {MAX_DEGREE} (2^24)"))
    problems += context_problems(s, e) + vocabulary_problems(s)
    problems += expert_problems(s, e) + fsdp_problems(s, e) + expert_overlap_problems(s, e)
    if e.precision is not None:
        recipe = RECIPES[e.precision]
        from_recipe = recipe.layout_datatype
        if e.datatype != from_recipe:
            problems.append(("execution.datatype", f"precision {e.precision} runs everything but the quantized GEMMs "
                                                   f"in {from_recipe}: state datatype: {from_recipe}"))
    for name, value in (("hidden", s.hidden), ("feedforward", s.feedforward), ("attention_heads", s.attention_heads)):
        if value % tp:
            problems.append(("execution.tensor_parallel", f"TP={tp} does not divide model.{name}={value}"))
    problems += latent_attention_problems(s, e)
    kv = key_value_heads(s, e)
    if s.kv_heads is not None and e.attention == "multiquery" and s.kv_heads != 1:
        problems.append(("model.kv_heads", f"{s.kv_heads} contradicts execution.attention: multiquery (one key/value "
                                           "head); give one of them"))
    elif s.attention_heads % kv:
        problems.append(("model.kv_heads", f"{kv} does not divide attention_heads={s.attention_heads} (each "
                                           "key/value head serves a group of query heads)"))
    elif kv % tp and tp % kv:
        problems.append(("execution.tensor_parallel", f"TP={tp} and model.kv_heads={kv}: one must divide the other "
                                                      "(key/value heads split over TP, or replicated)"))
    if e.global_batch % e.data_parallel:
        problems.append(("execution.global_batch", f"{e.global_batch} is not divisible by data_parallel={e.data_parallel}"))
    elif (e.global_batch // e.data_parallel) % e.microbatch:
        problems.append(
            ("execution.microbatch", f"local batch {e.global_batch // e.data_parallel} is not divisible into microbatches of {e.microbatch}")
        )
    local = e.microbatch * (s.sequence_length // e.context_degree)
    if e.tp_communication in ("rs_ag", "p2p_rs_ag") and local % tp:
        problems.append(
            ("execution.tp_communication", f"{e.tp_communication} splits microbatch x sequence / CP = {local} over TP={tp}, which does not divide it")
        )
    if e.seq_par_ag_redo and e.tp_communication != "rs_ag":
        problems.append(("execution.seq_par_ag_redo", "all-gather redo needs sequence parallelism (tp_communication: rs_ag)"))
    if e.seq_par_ag_redo and e.recompute == "full":
        problems.append(("execution.seq_par_ag_redo", "all-gather redo is meaningless with full recompute (it already recommunicates)"))
    if e.recompute != "none" and not e.training:
        problems.append(("execution.recompute", "recomputation needs training: true"))
    problems += recompute_module_problems(s, e) + recompute_blocks_problems(s, e)
    if e.tp_overlap != "none" and tp == 1:
        problems.append(("execution.tp_overlap", f"TP overlap ({e.tp_overlap}) needs tensor_parallel > 1"))
    if e.dp_overlap and not e.training:
        problems.append(("execution.dp_overlap", "DP overlap needs training: true"))
    elif e.dp_overlap and e.data_parallel == 1:
        problems.append(("execution.dp_overlap", "DP overlap needs data_parallel > 1"))
    if e.offload.optimizer and not e.training:
        problems.append(("execution.offload.optimizer", "optimizer offload needs training: true"))
    if e.optimizer_sharding and e.data_parallel * e.context_degree == 1:
        problems.append(("execution.optimizer_sharding", "optimizer sharding needs data_parallel x context_parallel > 1"))
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
