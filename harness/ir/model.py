"""ModelIR: the anonymous semantic import of one Transformer training step.

Dialect ``transformer.decoder_training``. It holds the model shape and the
execution layout, nothing else: no name, no case id, no comparison data, no
hardware. Two cases that differ only in name have the same ModelIR digest.

Input rules (the shape and the layout are what users write): strict types
(pydantic strict mode: ``true`` is not 1, ``"12288"`` is not 12288, ``"yes"``
is not a boolean) and upper bounds. The bounds are far beyond any real model
or cluster (the largest published dense models have hidden ~25 600, ~100
blocks, sequences of ~10^6 tokens, ~10^5 GPUs) and keep every figure the
model computes finite and every figure's arithmetic meaningful: with them,
operations per block stay below ~2^100, times below ~1e40 s and memory below
~1e28 bytes, far inside the float range, and nothing on the estimate path
iterates over a size. The event simulation (``harness trace``) has its own
operation limit.
"""


from typing import ClassVar, Literal

from pydantic import ConfigDict, Field, model_validator

from harness.ir import mesh
from harness.ir.base import Artifact, Frozen

Datatype = Literal["float8", "float16", "bfloat16", "float32"]
RecomputeMode = Literal["full", "attn_only", "selective", "none"]
#: Megatron-Core's ``recompute_modules`` (``TransformerConfig``, with ``recompute_granularity: selective``): the
#: submodules whose forward the backward pass recomputes. ``core_attn`` checkpoints the attention core (as
#: ``attn_only``); ``layernorm`` (the input norms that are modules of their own: a MoE block's pre-MLP norm,
#: latent attention's input norm; Megatron-Core fuses the others into the next linear), ``moe_act`` (the routed
#: experts' activation) and ``mla_up_proj`` (latent attention's up projections and rotary embedding) discard
#: their output and recompute it before its consumer's backward. ``mlp``, ``moe`` and ``shared_experts`` (whole submodules) are
#: named so that a layout stating them is refused as not modelled yet, not as invalid.
RecomputeModule = Literal["core_attn", "layernorm", "moe_act", "mla_up_proj", "mlp", "moe", "shared_experts"]
#: The recompute modules the patterns price (harness.passes.patterns); the others are refused
#: (harness.ir.checks.unsupported_features).
PRICED_RECOMPUTE_MODULES = ("core_attn", "layernorm", "moe_act", "mla_up_proj")
TPCommunication = Literal["ar", "p2p_rs_ag", "rs_ag"]
ContextCommunication = Literal["p2p", "a2a"]
#: Mixed-precision recipes (harness.passes.precision).
Precision = Literal["fp16", "bf16", "fp8_delayed", "fp8_current", "mxfp8", "nvfp4"]
#: Datatypes a work's operations may run in (a plan's element datatype, or a quantized GEMM's).
ComputeDatatype = Literal["float4", "float8", "float16", "bfloat16", "float32"]
AttentionKind = Literal["multihead", "multiquery"]
MlpKind = Literal["gelu", "swiglu", "geglu", "squared_relu"]
NormKind = Literal["layernorm", "rmsnorm"]
PositionKind = Literal["learned", "rope"]
AttentionKernel = Literal["materialized", "flash"]
RouterKind = Literal["softmax", "sigmoid"]
#: How a MoE block sends tokens to their experts' ranks (Megatron-Core's moe_token_dispatcher_type).
MoeDispatcher = Literal["alltoall", "allgather"]

BYTES_PER_ELEMENT: dict[str, int] = {"float8": 1, "float16": 2, "bfloat16": 2, "float32": 4}

# Upper bounds of the input sizes (see the module docstring for why).
MAX_WIDTH = 2**20  # hidden and feedforward widths, elements
MAX_SEQUENCE = 2**24  # tokens per sample
MAX_HEADS = 2**16  # attention heads; also the head size
MAX_BLOCKS = 2**16  # Transformer blocks
MAX_DEGREE = 2**24  # each parallel degree, and TP x PP x DP processors
MAX_BATCH = 2**24  # samples per iteration (and per microbatch)
MAX_INTERLEAVING = 2**16  # model chunks per pipeline stage
MAX_TIER = 1024  # network tier index
MAX_VOCABULARY = 2**24  # token vocabulary entries
MAX_EXPERTS = 2**16  # routed (or shared) experts of a MoE block; also the capacity factor and load imbalance


class StrictInput(Frozen):
    """An input section users write: strict types (no coercion of booleans or strings into numbers)."""

    model_config = ConfigDict(strict=True)


class MixtureOfExperts(StrictInput):
    """Mixture of experts (Megatron-Core's MoELayer): in each MoE block a router picks ``top_k`` of ``experts``
    routed experts per token, and the block's MLP is those experts' MLPs (and the shared experts', on every
    token) instead of the dense one. Each expert is an MLP of the model's kind (``model.mlp``) and its own width."""

    experts: int = Field(gt=0, le=MAX_EXPERTS, description="Routed experts of one MoE block.")
    top_k: int = Field(gt=0, le=MAX_EXPERTS, description=(
        "Routed experts each token is sent to (at most experts)."))
    expert_ffn: int = Field(gt=0, le=MAX_WIDTH, description=(
        "Inner width of one routed expert's MLP, elements (Megatron-Core's moe_ffn_hidden_size)."))
    shared_experts: int | None = Field(None, ge=0, le=MAX_EXPERTS, description=(
        "Shared experts: MLPs every token passes through besides its routed ones (DeepSeek, Qwen2-MoE). Absent: "
        "0."))
    shared_expert_ffn: int | None = Field(None, gt=0, le=MAX_WIDTH, description=(
        "Inner width of one shared expert, elements; the shared experts run as one MLP of shared_experts x "
        "shared_expert_ffn (Megatron-Core's moe_shared_expert_intermediate_size). Needs shared_experts > 0. "
        "Absent: expert_ffn."))
    dense_layers: int | None = Field(None, ge=0, le=MAX_BLOCKS, description=(
        "Leading dense blocks (DeepSeek-V3: 3; Hugging Face's first_k_dense_replace): blocks 0 to dense_layers - 1 "
        "have the dense MLP of width model.feedforward. Absent: 0."))
    layer_frequency: int | None = Field(None, gt=0, le=MAX_BLOCKS, description=(
        "Block i (counted from 0) at or past dense_layers is a MoE block when i is a multiple of layer_frequency "
        "(Megatron-Core's moe_layer_freq, Hugging Face's decoder_sparse_step / moe_layer_freq); the others are "
        "dense. Absent: 1 (every block past the dense ones)."))
    router: RouterKind | None = Field(None, description=(
        "Router score function: softmax or sigmoid (DeepSeek-V3); either way a hidden x experts GEMM on every "
        "token, then the top-k. Absent: softmax."))
    capacity_factor: float | None = Field(None, gt=0, le=MAX_EXPERTS, allow_inf_nan=False, description=(
        "Expert capacity (token dropping): an expert takes at most capacity_factor x tokens x top_k / experts "
        "tokens, the rest are dropped (Megatron-Core's moe_expert_capacity_factor); below 1 every expert drops. "
        "The grouped GEMMs run on the tokens kept; the dispatch and combine are priced with every token copy (the "
        "dropped ones not subtracted: an upper bound). Absent: dropless."))
    load_imbalance: float | None = Field(None, ge=1, le=MAX_EXPERTS, allow_inf_nan=False, description=(
        "Tokens of the busiest expert over the mean (>= 1): the slowest rank's grouped GEMM, which every rank "
        "waits for, runs that many times the mean tokens (capped by capacity_factor). Absent: 1.0 (balanced, as "
        "the public NVIDIA benchmarks force)."))

    @model_validator(mode="after")
    def _consistent(self) -> "MixtureOfExperts":
        if self.top_k > self.experts:
            raise ValueError(f"top_k={self.top_k} exceeds experts={self.experts} (a token picks distinct experts)")
        if self.shared_expert_ffn is not None and not self.shared_experts:
            raise ValueError("shared_expert_ffn needs shared_experts > 0")
        return self

    @property
    def dense_blocks(self) -> int:
        """Leading dense blocks (0 when absent)."""
        return self.dense_layers or 0

    @property
    def frequency(self) -> int:
        """The MoE-block frequency (1 when absent)."""
        return self.layer_frequency or 1

    @property
    def shared_width(self) -> int:
        """Inner width of the shared experts together (0 without them)."""
        return (self.shared_experts or 0) * (self.shared_expert_ffn or self.expert_ffn)

    @property
    def imbalance(self) -> float:
        """The busiest expert's tokens over the mean: load_imbalance (1 when absent), capped by the capacity (a
        capacity factor below 1 caps every expert under the mean: then it is below 1)."""
        imbalance = self.load_imbalance or 1.0
        return imbalance if self.capacity_factor is None else min(imbalance, self.capacity_factor)

    def is_moe_block(self, index: int) -> bool:
        """Whether block ``index`` (from 0) is a MoE block (the dense_layers and layer_frequency rules)."""
        return index >= self.dense_blocks and index % self.frequency == 0


class LatentAttention(StrictInput):
    """Multi-head latent attention (DeepSeek-V2/V3, Megatron-Core's ``MLASelfAttention``): Q and K/V through
    low-rank latents, each head's query and key a no-position part and a rotary part, values of their own width."""

    q_lora_rank: int | None = Field(None, gt=0, le=MAX_WIDTH, description=(
        "Width of the query latent, elements: Q = up(RMSNorm(down(x))), hidden -> q_lora_rank -> heads x "
        "(qk_nope_head_dim + qk_rope_head_dim). Absent: no query compression, one hidden -> heads x "
        "(qk_nope_head_dim + qk_rope_head_dim) projection (DeepSeek-V2-Lite)."))
    kv_lora_rank: int = Field(gt=0, le=MAX_WIDTH, description=(
        "Width of the key/value latent, elements: the down projection hidden -> kv_lora_rank + qk_rope_head_dim, "
        "an RMSNorm over the kv_lora_rank part, the up projection kv_lora_rank -> heads x (qk_nope_head_dim + "
        "v_head_dim)."))
    qk_rope_head_dim: int = Field(gt=0, le=MAX_HEADS, description=(
        "Rotary part of each query and key head, elements: the query's from its up projection, the key's one "
        "shared head from the key/value down projection."))
    qk_nope_head_dim: int = Field(gt=0, le=MAX_HEADS, description=(
        "Part of each query and key head without position encoding, elements."))
    v_head_dim: int = Field(gt=0, le=MAX_HEADS, description=(
        "Width of one value head, elements (the output projection reads heads x v_head_dim)."))

    ABSENT_IF_NONE: ClassVar[frozenset[str]] = frozenset({"q_lora_rank"})

    @property
    def qk_head_dim(self) -> int:
        """Width of one query (and key) head, elements: qk_nope_head_dim + qk_rope_head_dim."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim


class TransformerShape(StrictInput):
    """Decoder-only Transformer shape (identical blocks)."""

    CANONICAL_MEMO: ClassVar[bool] = True

    hidden: int = Field(gt=0, le=MAX_WIDTH, description="Model (embedding) width, elements.")
    feedforward: int = Field(gt=0, le=MAX_WIDTH, description="MLP inner width, elements.")
    sequence_length: int = Field(gt=0, le=MAX_SEQUENCE, description="Tokens per sample.")
    attention_heads: int = Field(gt=0, le=MAX_HEADS, description="Number of attention heads.")
    head_size: int = Field(gt=0, le=MAX_HEADS, description="Width of one attention head, elements.")
    blocks: int = Field(gt=0, le=MAX_BLOCKS, description="Number of Transformer blocks.")
    vocabulary: int | None = Field(None, gt=0, le=MAX_VOCABULARY, description=(
        "Token vocabulary (entries, before the training software pads it). Optional: when given, the plan holds "
        "the output layer and loss (harness.passes.output_layer); absent, an evidence profile may supply its "
        "target's default (family output_layer)."))

    kv_heads: int | None = Field(None, gt=0, le=MAX_HEADS, description=(
        "Key/value heads (grouped-query attention): attention_heads is multi-head, 1 multi-query; it divides "
        "attention_heads. Absent: attention_heads, or 1 under execution.attention: multiquery. Each TP rank holds "
        "kv_heads / TP of them, or one (replicated) when kv_heads < TP."))
    mlp: MlpKind | None = Field(None, description=(
        "MLP variant: gelu or squared_relu (two matrices, hidden -> feedforward -> hidden), swiglu or geglu "
        "(gated: three matrices of width feedforward, gate and up fused into one hidden x 2 feedforward linear as "
        "Megatron-Core's linear_fc1). Absent: gelu."))
    norm: NormKind | None = Field(None, description=(
        "Normalisation before each sub-block: layernorm (gain and bias, 2 x hidden parameters) or rmsnorm (gain "
        "only, hidden parameters). Absent: layernorm."))
    position: PositionKind | None = Field(None, description=(
        "Position encoding: learned (absolute, added to the embedding: no work in the blocks) or rope (rotary: "
        "pointwise work on Q and K in every block). Absent: learned."))
    qkv_bias: bool | None = Field(None, description=(
        "Q, K and V projections have a bias (Qwen2): its parameters, gradients and optimizer state; the add is "
        "fused in the GEMM epilogue (no matrix operations). Absent: no bias."))
    qk_norm: bool | None = Field(None, description=(
        "RMSNorm of Q and K per head before the scores (Qwen3, OLMo-2), head_size parameters each. Absent: "
        "none."))
    attention_dropout: float | None = Field(None, ge=0, lt=1, description=(
        "Dropout probability on the attention probabilities; 0: no dropout primitive (Llama). Absent: the "
        "dropout is there (today's Megatron GPT)."))
    sliding_window: int | None = Field(None, gt=0, le=MAX_SEQUENCE, description=(
        "Sliding-window attention: each query attends to the last sliding_window tokens, itself included "
        "(Mistral). A flash kernel skips the tiles outside the window; a materialized kernel computes the full "
        "scores and masks them. Absent: full causal attention."))
    tied_embeddings: bool | None = Field(None, description=(
        "true: the output layer uses the input embedding's weights (GPT-2, Gemma); false: its own (Llama). "
        "Stated either way (it needs vocabulary), the embedding lookup is a task and the embedding and "
        "output-layer matrices (padded vocabulary / TP x hidden each) are in the memory, optimizer and "
        "data-parallel figures; tied with PP > 1, the last stage's copy is all-reduced with the first stage's "
        "(harness.passes.output_layer). Absent: neither is counted (Calculon's convention, rule "
        "vocabulary-weights-uncounted)."))

    mla: LatentAttention | None = Field(None, description=(
        "Multi-head latent attention (DeepSeek-V2/V3) in place of the Q/K/V projections: its widths are these, "
        "not head_size's, which must then equal qk_nope_head_dim + qk_rope_head_dim (the query and key head "
        "width). Rotary position encoding on the rotary parts is part of it. Absent: no MLA."))

    moe: MixtureOfExperts | None = Field(None, description=(
        "Mixture of experts (model.moe.*): the MoE blocks' MLP is routed (and shared) experts. Absent: every "
        "block dense."))

    mtp_layers: int | None = Field(None, gt=0, le=MAX_BLOCKS, description=(
        "Multi-token-prediction layers (DeepSeek-V3; Megatron-Core's MTP): extra blocks on the last pipeline "
        "stage, each an RMSNorm of the next token's embedding and of the hidden state, a 2 x hidden -> hidden "
        "projection, one more block of the model's last kind, a final norm, and its own output layer and loss "
        "(harness.passes.multi_token). Needs model.moe (priced through the stages of harness.ir.blocks). Absent: "
        "none."))

    ABSENT_IF_NONE: ClassVar[frozenset[str]] = frozenset({
        "vocabulary", "kv_heads", "mlp", "norm", "position", "qkv_bias", "qk_norm", "attention_dropout",
        "sliding_window", "tied_embeddings", "mla", "moe", "mtp_layers"})  # shapes without them keep their digests


class NetworkTiers(StrictInput):
    """Network tier index used by each parallel dimension (harness.vocabulary.PARALLEL_DIMENSIONS)."""

    tensor: int = Field(ge=0, le=MAX_TIER, description="Network tier of the tensor-parallel group.")
    pipeline: int = Field(ge=0, le=MAX_TIER, description="Network tier of the pipeline-parallel peers.")
    data: int = Field(ge=0, le=MAX_TIER, description="Network tier of the data-parallel group.")
    context: int | None = Field(None, ge=0, le=MAX_TIER, description=(
        "Network tier of the context-parallel group (needed with context_parallel > 1)."))
    expert: int | None = Field(None, ge=0, le=MAX_TIER, description=(
        "Network tier of the expert-parallel group, which the MoE all-to-all crosses (needed with "
        "expert_parallel > 1)."))
    expert_tensor: int | None = Field(None, ge=0, le=MAX_TIER, description=(
        "Network tier of the expert-tensor-parallel group (needed with expert_tensor_parallel > 1)."))

    #: layouts without CP or experts keep their digests
    ABSENT_IF_NONE: ClassVar[frozenset[str]] = frozenset({"context", "expert", "expert_tensor"})


class Offload(StrictInput):
    """Offload switches: what lives in memory tier 2 (estimated through the ConcretePlanIR)."""

    weights: bool = Field(False, description="Offload weights to memory tier 2.")
    activations: bool = Field(False, description="Offload activations to memory tier 2.")
    optimizer: bool = Field(False, description="Offload optimizer state to memory tier 2.")

    @property
    def any_offloaded(self) -> bool:
        """Something lives in memory tier 2."""
        return self.weights or self.activations or self.optimizer


class ExecutionLayout(StrictInput):
    """Parallel layout and training options of one iteration."""

    CANONICAL_MEMO: ClassVar[bool] = True

    tensor_parallel: int = Field(gt=0, le=MAX_DEGREE, description="Tensor-parallel degree (TP).")
    pipeline_parallel: int = Field(gt=0, le=MAX_DEGREE, description="Pipeline-parallel degree (PP).")
    data_parallel: int = Field(gt=0, le=MAX_DEGREE, description="Data-parallel degree (DP).")
    global_batch: int = Field(gt=0, le=MAX_BATCH, description="Samples per iteration over all DP replicas.")
    microbatch: int = Field(gt=0, le=MAX_BATCH, description="Samples per microbatch.")
    pipeline_interleaving: int = Field(1, gt=0, le=MAX_INTERLEAVING,
                                       description="Model chunks per pipeline stage (virtual stages).")
    datatype: Datatype = Field("float16", description="Element datatype of weights and activations.")
    recompute: RecomputeMode = Field("none", description=(
        "Activation recomputation: full, attn_only (the attention core), selective (the recompute_modules) or "
        "none."))
    # strict=False: a YAML or JSON list is read as the tuple (the names stay Literal-checked)
    recompute_modules: tuple[RecomputeModule, ...] | None = Field(None, min_length=1, strict=False, description=(
        "With recompute: selective, the submodules recomputed (Megatron-Core's recompute_modules): core_attn, "
        "layernorm, moe_act, mla_up_proj (priced; mlp, moe and shared_experts are refused as not modelled). "
        "Absent: none."))
    recompute_blocks: int | None = Field(None, ge=1, le=MAX_BLOCKS, description=(
        "With recompute: full, the blocks of each model chunk recomputed whole, its first ones (Megatron-Core's "
        "recompute_method: block with recompute_num_layers); the chunk's other blocks keep their activations; at "
        "least the chunk's blocks: every block. Absent: every block."))
    tp_communication: TPCommunication = Field(
        "ar", description="TP collectives: ar (all-reduce), rs_ag (sequence parallel), p2p_rs_ag (RS/AG at chunk edges)."
    )
    seq_par_ag_redo: bool = Field(False, description="Redo the sequence-parallel all-gather in backward instead of storing.")
    optimizer_sharding: bool = Field(False, description="Shard optimizer state and gradients over DP (needs DP > 1).")
    fused_activation: bool = Field(False, description="GeLU fused into the preceding linear (no stored activation).")
    attention: AttentionKind = Field("multihead", description="multihead or multiquery attention.")
    network_tiers: NetworkTiers = Field(description="Network tier per parallel dimension.")
    context_parallel: int | None = Field(None, gt=0, le=MAX_DEGREE, description=(
        "Context-parallel degree (CP; absent: 1): each sample's sequence split over CP processors in 2 x CP "
        "chunks (rank r holds chunks r and 2CP-1-r, Megatron-Core's causal load balancing)."))
    precision: Precision | None = Field(None, description=(
        "Mixed-precision recipe (Transformer Engine's; harness.passes.precision): fp16 or bf16 (everything in the "
        "datatype), or fp8_delayed, fp8_current, mxfp8, nvfp4 (the linear GEMMs on quantized operands, everything "
        "else bf16). mxfp8 and nvfp4 are Blackwell's block-scaled formats: the profile's float8 (float4) engine "
        "prices them, and no check refuses them on a profile of an older GPU. Absent: everything in the datatype."))
    cp_comm: ContextCommunication | None = Field(None, description=(
        "How context-parallel attention exchanges K/V: p2p (a ring of CP-1 steps overlapped with the attention; "
        "the default) or a2a (Ulysses: all-to-all of Q, K, V and the output)."))
    training: bool = Field(True, description="Training (forward, backward, optimizer) or inference (forward only).")
    tp_overlap: Literal["none", "ring", "pipe"] = Field(
        "none", description="TP GEMM/collective overlap: none, ring (TP-1 network tiles) or pipe (TP tiles); needs TP > 1.")
    dp_overlap: bool = Field(False, description="DP gradient sync overlapped with the backward pass (training, DP > 1).")
    offload: Offload = Field(default_factory=Offload, description="Offload switches (weights, activations, optimizer "
                                                                  "state to memory tier 2).")
    attention_kernel: AttentionKernel | None = Field(None, description=(
        "Attention kernel: materialized (QK^T, softmax, dropout and PV as separate kernels over the s x s scores, "
        "Megatron's unfused path) or flash (one FlashAttention-2 kernel: no s x s tensor in memory, the scores "
        "recomputed in the backward pass, causal masking skipping the masked tiles). Absent: materialized."))

    expert_parallel: int | None = Field(None, gt=0, le=MAX_DEGREE, description=(
        "Expert-parallel degree (EP; absent: 1; needs model.moe): each MoE block's routed experts split over EP "
        "ranks (experts / EP each), tokens dispatched to their experts and combined back over the group. Folded "
        "(Megatron-Core's MoE parallel folding): the expert layers lay the same TP x CP x DP ranks out as ETP x EP "
        "x expert-DP, so EP is not a factor of the processors; ETP x EP divides TP x CP x DP."))
    expert_tensor_parallel: int | None = Field(None, gt=0, le=MAX_DEGREE, description=(
        "Expert-tensor-parallel degree (ETP; absent: 1; needs model.moe): each routed expert's matrices split "
        "over ETP ranks. Megatron-Core's default is TP: a case states it."))
    moe_dispatcher: MoeDispatcher | None = Field(None, description=(
        "How a MoE block sends tokens to their experts' ranks (needs model.moe): alltoall (an all-to-all over the "
        "expert-parallel group to dispatch, another to combine) or allgather (every token gathered over the "
        "group, the expert outputs reduce-scattered back). Absent: alltoall."))

    expert_overlap: bool | None = Field(None, description=(
        "The expert all-to-alls of one microbatch overlapped with another microbatch's compute (Megatron-Core's "
        "overlap_moe_expert_parallel_comm with delay_wgrad_compute; needs model.moe, expert_parallel > 1, the "
        "alltoall dispatcher, training and, with pipeline_parallel > 1, pipeline_interleaving > 1): a MoE block's "
        "forward of one microbatch runs with a block's backward of another on a compute and a communication "
        "stream (harness.schedule.block.expert_overlap_hidden_s); with full recomputation, TP overlap, CP or "
        "offload it is not modelled yet (refused). Absent or false: every all-to-all exposed."))

    fsdp: bool | None = Field(None, description=(
        "Fully sharded data parallelism (Megatron-FSDP's optim_grads_params, ZeRO-3; needs optimizer_sharding and "
        "DP x CP > 1): each block's weights sharded over the data x context group, all-gathered before its forward "
        "and again before its backward in every microbatch (the next block's gather prefetched under the current "
        "block's compute), its weight gradients reduce-scattered after its backward in every microbatch; no "
        "gradient sync at the end of the iteration. Absent or false: the weights replicated over DP."))

    #: layouts without these keep their digests
    ABSENT_IF_NONE: ClassVar[frozenset[str]] = frozenset({"attention_kernel", "context_parallel", "cp_comm",
                                                         "precision", "expert_parallel", "expert_tensor_parallel",
                                                         "moe_dispatcher", "fsdp", "recompute_modules",
                                                         "recompute_blocks", "expert_overlap"})

    @property
    def concurrent(self) -> bool:
        """The layout asks for concurrency the portable plan does not have: TP/DP overlap, offload or the expert
        overlap (priced through the ConcretePlanIR, whose options say the same: ``ConcreteOptions.concurrent``)."""
        return (self.tp_overlap != "none" or self.dp_overlap or self.offload.any_offloaded
                or bool(self.expert_overlap))

    @property
    def context_degree(self) -> int:
        """The context-parallel degree (1 when absent)."""
        return 1 if self.context_parallel is None else self.context_parallel

    @property
    def expert_degree(self) -> int:
        """The expert-parallel degree (1 when absent)."""
        return 1 if self.expert_parallel is None else self.expert_parallel

    @property
    def expert_tensor_degree(self) -> int:
        """The expert-tensor-parallel degree (1 when absent)."""
        return 1 if self.expert_tensor_parallel is None else self.expert_tensor_parallel

    @property
    def processors(self) -> int:
        """The product of the parallel degrees that are not folded (harness.ir.mesh)."""
        return mesh.processors(self)

    @property
    def bytes_per_element(self) -> int:
        return BYTES_PER_ELEMENT[self.datatype]

    @property
    def microbatches(self) -> int:
        return self.global_batch // self.data_parallel // self.microbatch

    @property
    def sequence_parallel(self) -> bool:
        return self.tp_communication == "rs_ag"


def key_value_heads(shape: TransformerShape, execution: ExecutionLayout) -> int:
    """The model's key/value heads: ``kv_heads``, else 1 under ``attention: multiquery``, else the heads."""
    if shape.kv_heads is not None:
        return shape.kv_heads
    return 1 if execution.attention == "multiquery" else shape.attention_heads


class ModelIR(Artifact):
    """Anonymous, validated Transformer training (or inference) step."""

    SCHEMA_NAME: ClassVar[str] = "blueprinting.model-ir"
    SCHEMA_VERSION: ClassVar[int] = 0

    dialect: Literal["transformer.decoder_training"] = Field(
        "transformer.decoder_training", description="IR dialect."
    )
    shape: TransformerShape = Field(description="Model shape.")
    execution: ExecutionLayout = Field(description="Parallel layout and options.")
