"""DistributedTaskIR: the local tensor-parallel block as a task DAG.

One Transformer block as seen by one processor of a TP group: primitives with
their local shapes, explicit TP collectives (with base- and edge-block
variants), recompute clones and recommunication tasks. No bytes, no
operation counts, no hardware: those are derived by ``transformer-plan-work``.

Invariants (checked between passes):
- task names are unique; every dependency names an earlier task (a DAG in
  topological order);
- a ``recompute`` task is a clone of a ``forward`` task with the same shape;
- a ``recommunication`` task is a clone of a forward ``tp_collective`` whose
  forward collective is not the identity.
"""


from typing import Annotated, ClassVar, Literal, Union, get_args

from pydantic import Field

from harness.ir.base import Artifact, Frozen
from harness.ir.mesh import CONTEXT, EXPERT, EXPERT_TENSOR, TENSOR, Group
from harness.ir.model import ExecutionLayout, Precision, TransformerShape
from harness.vocabulary import COLLECTIVES

#: A collective operation (harness.vocabulary.COLLECTIVES).
CollectiveOp = COLLECTIVES.literal()
Phase = Literal["forward", "recompute", "recommunication"]
#: How a primitive communicates (a class property of its shape, :data:`EXCHANGE`): ``none``: it computes and
#: sends nothing; ``collective``: a communication task whose time is its messages plus its local work on them
#: (the block sums keep it apart from compute); ``tiled``: a compute task whose GEMM is tiled against its
#: collective (TP overlap: priced by the ConcretePlanIR's projection).
#: ``ring``: messages sent in ring steps, each hidden behind one step of other tasks' passes (context-parallel
#: attention; the block sums expose what the steps do not hide, harness.schedule.block).
Exchange = Literal["none", "collective", "tiled", "ring"]


class LinearShape(Frozen):
    """Y[m,k] = X[m,n] x W[n,k]."""

    INTERNED: ClassVar[bool] = True
    EXCHANGE: ClassVar[Exchange] = "none"

    kind: Literal["linear"] = "linear"
    m: int = Field(gt=0, description="Rows of X and Y (local tokens).")
    n: int = Field(gt=0, description="Contraction width (input features).")
    k: int = Field(gt=0, description="Output features.")
    bias: bool | None = Field(None, description="Y = X W + b: k bias parameters, the add fused in the GEMM epilogue "
                                                "(None: no bias).")
    precision: Precision | None = Field(None, description=(
        "A quantizing recipe (harness.passes.precision): the GEMMs on quantized operands; None: the plan's "
        "datatype."))

    ABSENT_IF_NONE: ClassVar[frozenset[str]] = frozenset({"bias", "precision"})  # digests without them kept


class BatchMatmulShape(Frozen):
    """batch x (C[m,k] = A[m,n] x B[n,k]); both inputs are activations."""

    INTERNED: ClassVar[bool] = True
    EXCHANGE: ClassVar[Exchange] = "none"

    kind: Literal["batch_matmul"] = "batch_matmul"
    batch: int = Field(gt=0, description="Independent matrix products (local heads x samples).")
    m: int = Field(gt=0, description="Rows of A and C.")
    n: int = Field(gt=0, description="Contraction size.")
    k: int = Field(gt=0, description="Columns of B and C.")


class NormShape(Frozen):
    """Normalisation over ``elements`` activations of rows ``hidden`` wide: layer norm (gain and bias, 2 x hidden
    parameters) or RMSNorm (gain only, hidden parameters)."""

    INTERNED: ClassVar[bool] = True
    EXCHANGE: ClassVar[Exchange] = "none"

    kind: Literal["layer_norm", "rms_norm"] = "layer_norm"
    elements: int = Field(gt=0, description="Activation elements normalized.")
    hidden: int = Field(gt=0, description="Normalized width (gain and bias sizes).")


class PointwiseShape(Frozen):
    """Element-wise primitive over ``elements`` activations."""

    INTERNED: ClassVar[bool] = True
    EXCHANGE: ClassVar[Exchange] = "none"

    kind: Literal["softmax", "dropout", "gelu", "squared_relu", "swiglu", "geglu", "rope"]
    elements: int = Field(gt=0, description="Output elements (a gated activation reads twice as many).")
    fused: bool = Field(False, description="MLP activations only: fused into the preceding linear, keeps no "
                                           "activation.")


class ResidualShape(Frozen):
    """Element-wise sum of two operands."""

    INTERNED: ClassVar[bool] = True
    EXCHANGE: ClassVar[Exchange] = "none"

    kind: Literal["residual"] = "residual"
    elements_a: int = Field(gt=0, description="Elements of the first operand.")
    elements_b: int = Field(gt=0, description="Elements of the second operand.")


class ForkShape(Frozen):
    """Fan-out of one activation to ``users`` consumers (gradients summed)."""

    INTERNED: ClassVar[bool] = True
    EXCHANGE: ClassVar[Exchange] = "none"

    kind: Literal["fork"] = "fork"
    elements: int = Field(gt=0, description="Activation elements forked.")
    users: int = Field(gt=1, description="Number of consumers.")


class CollectiveShape(Frozen):
    """An explicit TP collective and its conjugate in the backward pass.

    Role ``f`` is identity (or all-gather) forward and all-reduce (or
    reduce-scatter) backward; role ``g`` is its conjugate. ``None`` means the
    identity: no message at all.
    """

    INTERNED: ClassVar[bool] = True
    EXCHANGE: ClassVar[Exchange] = "collective"
    GROUP: ClassVar[Group] = TENSOR  #: the group its messages span

    kind: Literal["tp_collective"] = "tp_collective"
    role: Literal["f", "g"] = Field(description="f: enters a TP region; g: leaves it (conjugate).")
    elements: int = Field(gt=0, description="Elements of the full (unsharded) activation exchanged.")
    participants: int = Field(gt=1, description="Processors in the TP group.")
    sequence_sharded: bool = Field(description="The activation outside the TP region is sequence-sharded (rs_ag).")
    base_forward: CollectiveOp | None = Field(description="Forward collective in a base block.")
    base_backward: CollectiveOp | None = Field(description="Backward collective in a base block.")
    edge_forward: CollectiveOp | None = Field(description="Forward collective in a chunk's edge block.")
    edge_backward: CollectiveOp | None = Field(description="Backward collective in a chunk's edge block.")


class OverlappedLinearShape(Frozen):
    """A linear fused with its adjacent TP collective (TP overlap: ring or pipe).

    Role ``f`` all-gathers (or, unsplit, passes) the input forward and
    reduces the input gradient backward; role ``g`` reduces (reduce-scatter
    or all-reduce) the output forward and all-gathers the output gradient
    backward. ``m``, ``n``, ``k`` are the local GEMM after the TP split; the
    collective moves ``elements`` (the full activation). The kept activation
    and gradient buffers follow the collective: the all-gather side keeps a
    tile of the gathered input, the reduce side a tile of the partial output
    gradient (Calculon 0.1.0's accounting, named in harness.calculon_compat).
    """

    INTERNED: ClassVar[bool] = True
    EXCHANGE: ClassVar[Exchange] = "tiled"
    GROUP: ClassVar[Group] = TENSOR  #: the group its messages span

    kind: Literal["overlapped_linear"] = "overlapped_linear"
    role: Literal["f", "g"] = Field(description="f: all-gather side (enters the TP region); g: reduce side.")
    m: int = Field(gt=0, description="Rows of X and Y (tokens).")
    n: int = Field(gt=0, description="Local contraction width.")
    k: int = Field(gt=0, description="Local output features.")
    elements: int = Field(gt=0, description="Elements of the full activation the collective moves.")
    participants: int = Field(gt=1, description="Processors in the TP group (and tiles of the overlap).")
    activation_elements: int = Field(ge=0, description="Input activation elements kept for backward.")
    activation_grad_elements: int = Field(ge=0, description="Gradient elements held (gradient plus network buffer).")
    base_forward: CollectiveOp | None = Field(description="Forward collective in a base block.")
    base_backward: CollectiveOp | None = Field(description="Backward collective in a base block.")
    edge_forward: CollectiveOp | None = Field(description="Forward collective in a chunk's edge block.")
    edge_backward: CollectiveOp | None = Field(description="Backward collective in a chunk's edge block.")
    bias: bool | None = Field(None, description="The linear has a bias: k local bias parameters, the add fused in "
                                                "the GEMM epilogue (None: no bias).")
    precision: Precision | None = Field(None, description=(
        "A quantizing recipe (harness.passes.precision): the GEMMs on quantized operands and the all-gathers of "
        "the tiled collective in the quantized datatype; None: the plan's datatype."))

    ABSENT_IF_NONE: ClassVar[frozenset[str]] = frozenset({"bias", "precision"})  # digests without them kept


class CrossEntropyShape(Frozen):
    """Softmax cross-entropy of ``tokens`` rows over a vocabulary split across ``participants`` TP ranks."""

    INTERNED: ClassVar[bool] = True
    EXCHANGE: ClassVar[Exchange] = "none"

    kind: Literal["cross_entropy"] = "cross_entropy"
    tokens: int = Field(gt=0, description="Rows (tokens of one microbatch).")
    vocabulary: int = Field(gt=0, description="Local (padded, vocabulary-parallel) vocabulary entries.")
    participants: int = Field(gt=0, description="Processors sharing the vocabulary (the TP group).")


class EmbeddingShape(Frozen):
    """The input embedding lookup of ``tokens`` token ids in a table of ``vocabulary`` rows of ``hidden``
    elements, split over ``participants`` TP ranks (Megatron's ``VocabParallelEmbedding``: each rank gathers a
    row for every token from its share of the padded vocabulary, the rows outside its share masked to zero).
    The rule is :func:`harness.passes.rules.embedding`."""

    INTERNED: ClassVar[bool] = True
    EXCHANGE: ClassVar[Exchange] = "none"

    kind: Literal["embedding"] = "embedding"
    tokens: int = Field(gt=0, description="Token ids looked up (tokens of one microbatch on this rank).")
    hidden: int = Field(gt=0, description="Width of a row (the model width), elements.")
    vocabulary: int = Field(gt=0, description="Rows of the local table (the padded vocabulary / TP).")
    participants: int = Field(gt=0, description="Processors sharing the table (the TP group).")


class FlashAttentionShape(Frozen):
    """One fused causal attention kernel (FlashAttention-2) over the local heads of one microbatch.

    Q has ``heads`` heads, K and V ``kv_heads`` (grouped-query: each K/V head serves heads / kv_heads query
    heads), each ``head_size`` wide (V and the output ``value_head_size`` wide when given: multi-head latent
    attention), over ``sequence`` tokens; a query attends to at most ``window`` keys (itself and the ones before
    it). The work rule (tiles executed, recomputation in the backward pass) is
    :func:`harness.passes.rules.flash_attention`.
    """

    INTERNED: ClassVar[bool] = True
    EXCHANGE: ClassVar[Exchange] = "none"

    kind: Literal["flash_attention"] = "flash_attention"
    batch: int = Field(gt=0, description="Samples of the microbatch.")
    heads: int = Field(gt=0, description="Local query heads (one TP rank).")
    kv_heads: int = Field(gt=0, description="Local key/value heads (one TP rank).")
    sequence: int = Field(gt=0, description="Tokens per sample (queries and keys).")
    head_size: int = Field(gt=0, description="Width of one head, elements.")
    window: int = Field(gt=0, description="Keys a query attends to at most, itself included (the sequence length "
                                          "without a sliding window).")
    dropout: bool = Field(description="Dropout on the probabilities inside the kernel (mask regenerated from the "
                                      "random seed in the backward pass, never stored).")
    value_head_size: int | None = Field(None, gt=0, description=(
        "Width of one value (and output) head, elements, when it differs from head_size (multi-head latent "
        "attention: Q and K qk_nope + qk_rope wide, V v_head_dim); None: head_size."))

    context_parallel: int | None = Field(None, gt=1, description=(
        "Context parallelism: the sample's sequence split in 2 x CP chunks, this rank holding two (Megatron-Core's "
        "causal load balancing) and attending to every rank's K/V over CP ring steps; its queries are sequence / "
        "CP. None: the whole sequence on this rank."))

    ABSENT_IF_NONE: ClassVar[frozenset[str]] = frozenset({"value_head_size", "context_parallel"})  # digests kept

    @property
    def queries(self) -> int:
        """Query positions of one sample on this rank (sequence / CP)."""
        return self.sequence // (self.context_parallel or 1)

    @property
    def value_width(self) -> int:
        """Width of one value (and output) head, elements."""
        return self.head_size if self.value_head_size is None else self.value_head_size


class QuantizeShape(Frozen):
    """The casts a quantized linear's operands need (harness.passes.precision): its input X and weight W in
    the forward pass, its output gradient dY in the backward pass."""

    INTERNED: ClassVar[bool] = True
    EXCHANGE: ClassVar[Exchange] = "none"

    kind: Literal["quantize"] = "quantize"
    input_elements: int = Field(gt=0, description="Elements of the linear's input X.")
    weight_elements: int = Field(gt=0, description="Elements of its weight W.")
    grad_elements: int = Field(gt=0, description="Elements of its output gradient dY.")
    recipe: Precision = Field(description="The recipe (execution.precision).")


class RingExchangeShape(Frozen):
    """The K/V exchange of context-parallel attention (Megatron-Core's ring, ``cp_comm: p2p``).

    Each of the CP ranks holds the K and V of its own sequence chunks (``elements``, the forward message of
    one step); in ``steps`` = CP - 1 ring steps it sends them to the next rank and receives the previous
    one's, while the attention of the chunk it already holds runs (the tasks ``hides_behind``). The backward
    pass sends K and V again with their gradients (twice the bytes per step). No local work.
    """

    INTERNED: ClassVar[bool] = True
    EXCHANGE: ClassVar[Exchange] = "ring"
    GROUP: ClassVar[Group] = CONTEXT  #: the group its messages span

    kind: Literal["context_exchange"] = "context_exchange"
    elements: int = Field(gt=0, description="K and V elements of the local sequence chunk (one step's message).")
    steps: int = Field(gt=0, description="Ring steps (CP - 1).")
    participants: int = Field(gt=1, description="Processors in the context-parallel group.")
    hides_behind: tuple[str, ...] = Field(description="Tasks whose passes run while a step's message travels.")


class RouterShape(Frozen):
    """A MoE block's router GEMM ``scores[m, k] = X[m, n] x W[n, k]`` (k: the routed experts) on every local token.
    Its weights are dense ones (replicated over the expert dimensions, reduced with the dense gradients); it is
    never quantized (Transformer Engine runs the router outside the fp8 region)."""

    INTERNED: ClassVar[bool] = True
    EXCHANGE: ClassVar[Exchange] = "none"

    kind: Literal["router"] = "router"
    m: int = Field(gt=0, description="Local tokens routed.")
    n: int = Field(gt=0, description="Model width (hidden), elements.")
    k: int = Field(gt=0, description="Routed experts (scores per token).")


class TopKShape(Frozen):
    """The router's score function over ``tokens x experts`` scores and the top-k selection of each token's
    experts (harness.passes.rules.top_k)."""

    INTERNED: ClassVar[bool] = True
    EXCHANGE: ClassVar[Exchange] = "none"

    kind: Literal["top_k"] = "top_k"
    tokens: int = Field(gt=0, description="Local tokens routed.")
    experts: int = Field(gt=0, description="Routed experts (scores per token).")
    top_k: int = Field(gt=0, description="Experts each token is sent to.")
    score: Literal["softmax", "sigmoid"] = Field(description="Score function (model.moe.router).")


class TokenPermuteShape(Frozen):
    """The token (un)permutation around a MoE dispatch: ``permute`` copies each of ``tokens`` local tokens to its
    ``copies`` (top_k) expert slots, grouped by expert; ``unpermute`` sums each token's expert outputs weighted by
    its router probabilities. ``hidden`` elements per token."""

    INTERNED: ClassVar[bool] = True
    EXCHANGE: ClassVar[Exchange] = "none"

    kind: Literal["permute", "unpermute"]
    tokens: int = Field(gt=0, description="Local tokens (before dispatch / after combine).")
    copies: int = Field(gt=0, description="Expert slots per token (top_k).")
    hidden: int = Field(gt=0, description="Elements per token (model width).")


class GroupedLinearShape(Frozen):
    """The local experts' grouped GEMM: ``groups`` experts, each ``Y[m,k] = X[m,n] x W[n,k]`` on ``m`` tokens (the
    busiest expert's count, which prices the slowest rank). Its weights are expert weights: sharded over the
    expert dimensions, their gradients reduced over the expert-data-parallel group (harness.passes.plan_work)."""

    INTERNED: ClassVar[bool] = True
    EXCHANGE: ClassVar[Exchange] = "none"
    EXPERT_WEIGHTS: ClassVar[bool] = True  #: its weights belong to the expert layout, not the dense one

    kind: Literal["grouped_linear"] = "grouped_linear"
    groups: int = Field(gt=0, description="Local experts (experts / EP).")
    m: int = Field(gt=0, description="Tokens of each expert's GEMM (the busiest expert's).")
    n: int = Field(gt=0, description="Contraction width (input features, local).")
    k: int = Field(gt=0, description="Output features (local).")
    precision: Precision | None = Field(None, description=(
        "A quantizing recipe (harness.passes.precision): each GEMM on quantized operands; None: the plan's "
        "datatype."))

    ABSENT_IF_NONE: ClassVar[frozenset[str]] = frozenset({"precision"})


class _ExpertCollective(Frozen):
    """A collective of the MoE token dispatcher (fields as :class:`CollectiveShape`'s, without a role)."""

    INTERNED: ClassVar[bool] = True
    EXCHANGE: ClassVar[Exchange] = "collective"

    elements: int = Field(gt=0, description="Elements of the message's buffer (the logical message, see kind).")
    participants: int = Field(gt=1, description="Processors in the group.")
    base_forward: CollectiveOp | None = Field(description="Forward collective in a base block.")
    base_backward: CollectiveOp | None = Field(description="Backward collective in a base block.")
    edge_forward: CollectiveOp | None = Field(description="Forward collective in a chunk's edge block.")
    edge_backward: CollectiveOp | None = Field(description="Backward collective in a chunk's edge block.")


class ExpertAllToAllShape(_ExpertCollective):
    """The dispatch (tokens to their experts' ranks) or combine (expert outputs back) all-to-all over the
    expert-parallel group: ``elements`` is this rank's send buffer (its tokens x top_k x hidden), of which
    (P-1)/P leaves it (harness.ir.experts.all_to_all_bytes_sent_per_rank); the backward pass sends the
    gradients the other way (the same volume)."""

    GROUP: ClassVar[Group] = EXPERT  #: the group its messages span
    #: The dimension whose degree separates consecutive members of the group in rank order (Megatron-Core's expert
    #: rank order ``tp-ep-dp-pp`` over the expert degrees: ETP fastest, then EP): on a tier above the first, its
    #: messages carry that stride (``Message.member_stride_processors``).
    MEMBER_STRIDE: ClassVar[str] = "expert_tensor"

    kind: Literal["expert_all_to_all"] = "expert_all_to_all"


#: The primitive kind of :class:`ExpertAllToAllShape` (a MoE block's dispatch and combine).
EXPERT_ALL_TO_ALL = ExpertAllToAllShape.model_fields["kind"].default


class ContextAllToAllShape(_ExpertCollective):
    """An all-to-all of Ulysses context parallelism (``cp_comm: a2a``) over the context group: before the
    attention, this rank's Q, K and V (its sequence / CP positions, every local head) become the whole sequence's
    for heads / CP; after it, the attention output goes back; the backward pass sends the gradients the other
    way. ``elements`` is this rank's send buffer."""

    GROUP: ClassVar[Group] = CONTEXT  #: the group its messages span

    kind: Literal["context_all_to_all"] = "context_all_to_all"


class ExpertTensorCollectiveShape(_ExpertCollective):
    """The expert-tensor-parallel all-gather (of the dispatched tokens, before the experts; reduce-scatter in the
    backward pass) or reduce-scatter (of the expert outputs; all-gather backward) over the ETP group;
    ``elements`` is the gathered buffer (the collective's full activation, as :class:`CollectiveShape`'s)."""

    GROUP: ClassVar[Group] = EXPERT_TENSOR  #: the group its messages span

    kind: Literal["expert_tp_collective"] = "expert_tp_collective"


class ExpertGatherShape(_ExpertCollective):
    """The all-gather dispatcher's collectives over the expert x expert-tensor group: every token gathered to every
    rank before the experts (reduce-scatter of the gradients backward), the expert outputs reduce-scattered back
    (all-gather backward); ``elements`` is the gathered buffer (every rank's tokens x hidden)."""

    GROUP: ClassVar[Group] = ("expert", "expert_tensor")  #: the group its messages span

    kind: Literal["expert_gather"] = "expert_gather"


SHAPES = (LinearShape, BatchMatmulShape, NormShape, PointwiseShape, ResidualShape, ForkShape, CollectiveShape,
          OverlappedLinearShape, CrossEntropyShape, EmbeddingShape, FlashAttentionShape, RingExchangeShape,
          QuantizeShape, RouterShape, TopKShape, TokenPermuteShape, GroupedLinearShape, ExpertAllToAllShape, ContextAllToAllShape,
          ExpertTensorCollectiveShape, ExpertGatherShape)
TaskShape = Annotated[Union[SHAPES], Field(discriminator="kind")]

#: primitive kind -> its shape class (every value of every shape's ``kind`` Literal).
SHAPE_OF: dict[str, type] = {kind: cls for cls in SHAPES for kind in get_args(cls.model_fields["kind"].annotation)}


#: primitive kind -> whether its weights are expert weights (its shape's ``EXPERT_WEIGHTS``), derived from
#: :data:`SHAPE_OF` once: a class attribute a shape lacks costs pydantic's metaclass an AttributeError per lookup.
EXPERT_WEIGHTS_OF: dict[str, bool] = {kind: getattr(cls, "EXPERT_WEIGHTS", False) for kind, cls in SHAPE_OF.items()}


#: primitive kind -> the dimension whose degree separates consecutive members of its group in rank order (its
#: shape's ``MEMBER_STRIDE``), or None; derived once, as :data:`EXPERT_WEIGHTS_OF`.
MEMBER_STRIDE_OF: dict[str, str | None] = {kind: getattr(cls, "MEMBER_STRIDE", None) for kind, cls in SHAPE_OF.items()}


def expert_weights(primitive: str) -> bool:
    """Whether the weights of primitive ``primitive`` are expert weights (its shape's ``EXPERT_WEIGHTS``)."""
    return EXPERT_WEIGHTS_OF[primitive]


def exchange(primitive: str) -> Exchange:
    """How the primitive ``primitive`` communicates (its shape's :data:`Exchange` class property)."""
    return SHAPE_OF[primitive].EXCHANGE


class Retention(Frozen):
    """What the task keeps for the backward pass (memory semantics)."""

    INTERNED: ClassVar[bool] = True

    activation_stored: bool = Field(True, description="Its input activation is kept until backward.")
    output_stored: bool = Field(True, description="Its output is kept (false: recomputed instead).")
    activation_reused: bool = Field(False, description="Its input is another task's stored activation (no new working space).")


class Task(Frozen):
    """One node of the block DAG."""

    INTERNED: ClassVar[bool] = True

    name: str = Field(description="Unique task name, e.g. attn.qk_matmul or recompute/attn.softmax.")
    phase: Phase = Field(description="forward, recompute (clone) or recommunication (collective redo).")
    clone_of: str | None = Field(None, description="For clones: the forward task they repeat.")
    depends_on: tuple[str, ...] = Field((), description="Names of the tasks this one consumes.")
    shape: TaskShape = Field(description="Primitive and local shape.")
    retention: Retention = Field(default_factory=Retention, description="Memory semantics.")


class DistributedTaskIR(Artifact):
    """The local TP block DAG plus the layout it was lowered for."""

    SCHEMA_NAME: ClassVar[str] = "blueprinting.distributed-task-ir"
    SCHEMA_VERSION: ClassVar[int] = 0

    shape: TransformerShape = Field(description="Model shape (from the ModelIR).")
    execution: ExecutionLayout = Field(description="Layout (from the ModelIR).")
    tasks: tuple[Task, ...] = Field(description="Block tasks in topological order.")
    output_tasks: tuple[Task, ...] | None = Field(
        None, description="The output layer and loss (harness.passes.output_layer), once per microbatch on the last "
                          "stage; only for a training model that states its vocabulary.")

    ABSENT_IF_NONE: ClassVar[frozenset[str]] = frozenset({"output_tasks"})  # plans without them keep their digests

    def task(self, name: str) -> Task:
        for task in self.tasks:
            if task.name == name:
                return task
        raise KeyError(name)
