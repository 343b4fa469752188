"""PortablePlanIR: exact workload facts, no hardware, no durations.

Every task carries the operations and bytes read/written of each pass
(forward, activation gradient, weight gradient, optimizer step), the TP
messages it sends in a base and in an edge block, and the capacity it holds.
Plan-level facts give the pipeline boundary messages, the data-parallel
gradient messages, the schedule shape and the network groups.

Both cost views consume this IR unchanged; nothing here depends on a system
profile except the network tier *indices* chosen by the layout.
"""


from typing import ClassVar, Literal

from pydantic import Field

from harness.ir.base import Artifact, Frozen
from harness.ir.distributed import CollectiveOp, Exchange, Phase, Retention, exchange
from harness.ir.mesh import DATA, PIPELINE, TENSOR, DimensionName, Group
from harness.ir.model import ComputeDatatype, Datatype, RecomputeMode

Engine = Literal["matrix", "vector"]
PASSES = ("forward", "activation_grad", "weight_grad", "optimizer")


class Work(Frozen):
    """Work of one task in one pass.

    Its operations run at the peak (and on the curve) of its engine for :attr:`datatype`; absent, the plan's
    datatype. One plan may so hold fp8 GEMMs, bf16 pointwise work and fp32 optimizer steps.
    """

    CANONICAL_MEMO: ClassVar[bool] = True
    #: plans of one datatype and no grouped GEMM keep their digests
    ABSENT_IF_NONE: ClassVar[frozenset[str]] = frozenset({"datatype", "gemm_operations"})

    operations: float = Field(ge=0, description="Arithmetic operations (FLOPs) of the pass.")
    bytes_read: float = Field(ge=0, description="Bytes read from memory tier 1.")
    bytes_written: float = Field(ge=0, description="Bytes written to memory tier 1.")
    engine: Engine = Field(description="Processing engine the operations need (matrix or vector).")
    datatype: ComputeDatatype | None = Field(None, description="Datatype the operations run in (selects the engine's peak "
                                                        "and curve); absent: the plan's datatype.")
    gemm_operations: float | None = Field(None, gt=0, description=(
        "A grouped GEMM (the local experts'): operations of one of its equal GEMMs, the size at which the "
        "operation-size efficiency is read (not the pass's total); absent: the pass's operations."))

    @property
    def bytes_accessed(self) -> float:
        return self.bytes_read + self.bytes_written


#: Built without validation (its values are the validated ones: floats), so that importing this module does not build
#: Work's validator, which the estimate path never needs (tests/test_startup.py).
NO_WORK = Work.trusted(operations=0.0, bytes_read=0.0, bytes_written=0.0, engine="vector")


class Message(Frozen):
    """One logical message; a network profile applies its volume model."""

    # No CANONICAL_MEMO: a first pass writes each Message once (0 hits in 5.3 lookups per estimate: the memoized
    # TaskMessages that hold shared ones are found first), so remembering their texts only cost a lookup and a put.

    collective: CollectiveOp = Field(description="Collective or point-to-point operation.")
    message_bytes: float = Field(ge=0, description="Logical message size from the activation shape, bytes.")
    participants: int = Field(ge=2, description="Processors taking part.")
    network_tier: int = Field(ge=0, description="Network tier index it travels on.")
    member_stride_processors: int | None = Field(None, gt=0, description=(
        "Processors between consecutive members of the group in rank order, for a group spread over the islands "
        "of the tier below its own (the expert-parallel all-to-all: ETP apart); with the hierarchical family it "
        "is priced inside those islands and across them (harness.cost.views). Absent: priced whole on its "
        "tier."))

    ABSENT_IF_NONE: ClassVar[frozenset[str]] = frozenset({"member_stride_processors"})  # digests kept


class TaskMessages(Frozen):
    """Messages of a collective task; None is the identity (nothing sent). They span :attr:`spans`."""

    CANONICAL_MEMO: ClassVar[bool] = True
    ABSENT_IF_NONE: ClassVar[frozenset[str]] = frozenset({"group", "ring_steps", "hides_behind"})  # TP: digests kept

    forward_base: Message | None = Field(description="Forward message in a base block.")
    forward_edge: Message | None = Field(description="Forward message in a chunk's edge block.")
    backward_base: Message | None = Field(description="Backward message in a base block.")
    backward_edge: Message | None = Field(description="Backward message in a chunk's edge block.")
    group: Group | None = Field(None, description="The parallel group the messages span (harness.ir.mesh); "
                                                  "absent: the tensor group.")
    ring_steps: int | None = Field(None, gt=0, description="A ring exchange: each message is sent this many times, "
                                                           "one step after the other; absent: once.")
    hides_behind: tuple[str, ...] | None = Field(None, description=(
        "A ring exchange: the tasks whose passes run while a step travels (harness.schedule.block)."))

    @property
    def spans(self) -> Group:
        """The group the messages span (absent: the tensor group)."""
        return TENSOR if self.group is None else self.group


#: The message slots of :class:`TaskMessages` (its fields that hold one message), in declaration order.
MESSAGE_SLOTS: tuple[str, ...] = tuple(name for name, field in TaskMessages.model_fields.items()
                                       if field.annotation == Message | None)


class Capacity(Frozen):
    """Bytes a task holds, per microbatch (activations) or per block (state)."""

    CANONICAL_MEMO: ClassVar[bool] = True

    weight_bytes: float = Field(ge=0, description="Weights.")
    activation_bytes: float = Field(ge=0, description="Input activation kept for backward.")
    output_bytes: float = Field(ge=0, description="Output activation.")
    weight_grad_bytes: float = Field(ge=0, description="Weight gradient in the element datatype, after optimizer sharding.")
    weight_grad_unsharded_bytes: float = Field(ge=0, description="Weight gradient accumulated in fp32 before reduction.")
    activation_grad_bytes: float = Field(ge=0, description="Gradient w.r.t. the output.")
    optimizer_bytes: float = Field(ge=0, description="fp32 master weights and Adam moments, after sharding.")
    quantized_weight_bytes: float | None = Field(None, ge=0, description=(
        "Quantized copies of the weights kept for the whole iteration (a quantizing precision recipe, "
        "harness.passes.precision); None: none."))

    ABSENT_IF_NONE: ClassVar[frozenset[str]] = frozenset({"quantized_weight_bytes"})  # digests kept without it


NO_CAPACITY = Capacity.trusted(weight_bytes=0.0, activation_bytes=0.0, output_bytes=0.0, weight_grad_bytes=0.0,
                               weight_grad_unsharded_bytes=0.0, activation_grad_bytes=0.0, optimizer_bytes=0.0)


class PlanTask(Frozen):
    """A DistributedTaskIR task with its workload facts."""

    #: Shared by :mod:`harness.passes.plan_work`'s own memo (one instance per task and context), so not interned
    #: again here (the intern key of ~12 fields cost every plan task of a first pass); its text is memoized.
    CANONICAL_MEMO: ClassVar[bool] = True

    name: str = Field(description="Task name (as in the DistributedTaskIR).")
    primitive: str = Field(description="Primitive kind.")
    phase: Phase = Field(description="forward, recompute or recommunication.")
    clone_of: str | None = Field(None, description="Forward task a clone repeats.")
    forward: Work = Field(description="Forward pass (for clones: the repeated forward work).")
    activation_grad: Work = Field(description="Activation-gradient (dgrad) pass.")
    weight_grad: Work = Field(description="Weight-gradient (wgrad) pass.")
    optimizer: Work = Field(description="Optimizer step (per block, not per microbatch).")
    messages: TaskMessages | None = Field(None, description="Messages (communicating primitives only).")
    capacity: Capacity = Field(description="Bytes held (zero for clones).")
    retention: Retention = Field(description="Memory semantics.")

    @property
    def exchange(self) -> Exchange:
        """How the task's primitive communicates (:data:`harness.ir.distributed.Exchange`)."""
        return exchange(self.primitive)


class Schedule(Frozen):
    """Shape of the 1F1B / interleaved schedule (no durations)."""

    training: bool = Field(description="Training (forward + backward + optimizer) or inference.")
    recompute: RecomputeMode = Field(description="Recomputation mode.")
    global_batch: int = Field(gt=0, description="Samples per iteration.")
    microbatches: int = Field(gt=0, description="Microbatches per pipeline per iteration.")
    blocks: int = Field(gt=0, description="Blocks of the model.")
    pipeline_parallel: int = Field(gt=0, description="Pipeline stages.")
    blocks_per_stage: int = Field(gt=0, description="Blocks on the first (fullest) stage.")
    bubble_reduction_blocks: int = Field(ge=0, description="Stages holding one block fewer when PP does not divide the blocks.")
    chunks_per_stage: int = Field(gt=0, description="Model chunks per stage (pipeline interleaving).")
    blocks_per_chunk: int = Field(gt=0, description="Blocks in one chunk.")
    base_blocks_per_chunk: int = Field(ge=0, description="Blocks of a chunk that are not its edge block.")
    edge_blocks_per_chunk: int = Field(ge=0, description="Edge blocks per chunk (the one that sends the boundary activation).")
    activation_checkpoint_bytes: float = Field(ge=0, description="Block input kept per microbatch under full recomputation.")


class PipelineTraffic(Frozen):
    """Boundary-activation messages sent by a chunk's edge block (between peers of the pipeline group)."""

    spans: ClassVar[Group] = PIPELINE

    forward: Message | None = Field(description="Forward boundary message (None without PP).")
    backward: Message | None = Field(description="Backward boundary message (None without PP).")
    forward_transfers_per_microbatch: int = Field(ge=0, description="Forward p2p transfers per microbatch per stage.")
    backward_transfers_per_microbatch: int = Field(ge=0, description="Backward p2p transfers per microbatch per stage.")


class ExpertGradientTraffic(Frozen):
    """Mixture of experts: the expert weights' gradient synchronization per block over the expert-data-parallel
    group (TP x CP x DP / (EP x ETP) ranks, strided over the ranks of :attr:`group`)."""

    gradient_bytes: float = Field(ge=0, description="Expert weight gradients of one block on one rank, bytes.")
    messages: tuple[Message, ...] = Field(description="all_reduce, or reduce_scatter + all_gather with optimizer "
                                                      "sharding, of the expert-data-parallel group.")
    group: Group = Field(description="The dimensions whose ranks the expert-data-parallel group spans (its messages "
                                     "cross the slowest of their links).")

    @property
    def spans(self) -> Group:
        return self.group


class DataParallelTraffic(Frozen):
    """Gradient synchronization per block (training with DP > 1) over the group of ranks holding the same
    weights (:attr:`spans`)."""

    ABSENT_IF_NONE: ClassVar[frozenset[str]] = frozenset({"group", "expert", "fully_sharded"})  # digests kept

    gradient_bytes: float = Field(ge=0, description="Logical gradient message of one block.")
    messages: tuple[Message, ...] = Field(description="all_reduce, or reduce_scatter + all_gather with optimizer sharding.")
    group: Group | None = Field(None, description="The parallel group the gradients are reduced over "
                                                  "(harness.ir.mesh); absent: the data group.")
    expert: ExpertGradientTraffic | None = Field(None, description=(
        "Mixture of experts: the expert weights' gradient sync over the expert-data-parallel group; the fields "
        "above are then the dense weights'. Absent: every weight is dense."))
    fully_sharded: bool | None = Field(None, description=(
        "Fully sharded data parallelism (execution.fsdp): the messages are the weights' all-gather before the "
        "forward, again before the backward, and the gradients' reduce-scatter after it, each sent in every "
        "microbatch (harness.schedule.block.fsdp_exposure); absent: one gradient sync per iteration."))

    @property
    def spans(self) -> Group:
        """The group the gradients are reduced over (absent: the data group)."""
        return DATA if self.group is None else self.group

    @property
    def all_messages(self) -> tuple[Message, ...]:
        """The dense messages, then the expert weights' (the whole sync of one block)."""
        return self.messages + (self.expert.messages if self.expert is not None else ())


class VocabularyWeights(Frozen):
    """The embedding and output-layer matrices on the first pipeline stage, once per iteration
    (harness.passes.output_layer): their state, their optimizer step, their gradient synchronisation."""

    ABSENT_IF_NONE: ClassVar[frozenset[str]] = frozenset({"gradient_group"})

    capacity: Capacity = Field(description="Their weights, weight gradients (after optimizer sharding) and optimizer "
                                           "state on the first stage (no activations).")
    optimizer: tuple[Work, ...] = Field(description="The optimizer step of each matrix on the first stage.")
    gradient_messages: tuple[Message, ...] = Field(description=(
        "Their data-parallel gradient synchronisation (all_reduce, or reduce_scatter + all_gather with optimizer "
        "sharding; none without data parallelism), once per iteration."))
    gradient_group: Group | None = Field(None, description="The group those gradients are reduced over; absent: "
                                                           "the data group.")
    embedding_group: Message | None = Field(description=(
        "Tied matrices with PP > 1: the all-reduce of the embedding gradient between the first and the last "
        "stage, which both hold a copy (Megatron's embedding group); None otherwise."))

    @property
    def spans(self) -> Group:
        """The group the gradient messages span (absent: the data group)."""
        return DATA if self.gradient_group is None else self.gradient_group


class NetworkUse(Frozen):
    """A parallel group placed on a network tier."""

    dimension: DimensionName = Field(description="Parallel dimension (harness.vocabulary.PARALLEL_DIMENSIONS).")
    network_tier: int = Field(ge=0, description="Tier index.")
    group_size: int = Field(gt=1, description="Processors in the group.")


class PortablePlanIR(Artifact):
    """Exact, hardware-free workload facts of one iteration."""

    SCHEMA_NAME: ClassVar[str] = "blueprinting.portable-plan-ir"
    SCHEMA_VERSION: ClassVar[int] = 0

    datatype: Datatype = Field(description="Element datatype (selects the profile's peak and curves).")
    bytes_per_element: int = Field(gt=0, description="Bytes per element of the datatype.")
    processors: int = Field(gt=0, description="The product of the parallel degrees (harness.ir.mesh).")
    tasks: tuple[PlanTask, ...] = Field(description="Block tasks with workload facts, in DAG order.")
    schedule: Schedule = Field(description="Schedule shape.")
    pipeline: PipelineTraffic = Field(description="Pipeline boundary traffic.")
    data_parallel: DataParallelTraffic | None = Field(description="DP gradient traffic (None without it).")
    network_use: tuple[NetworkUse, ...] = Field(description="Parallel groups per network tier.")
    output_tasks: tuple[PlanTask, ...] | None = Field(
        None, description="The output layer and loss with their facts, once per microbatch on the last stage "
                          "(from the DistributedTaskIR's output tasks); None without them.")

    vocabulary_weights: VocabularyWeights | None = Field(
        None, description="The embedding and output-layer matrices on the first stage (a shape that states "
                          "tied_embeddings); None: not counted (Calculon's convention).")

    #: plans without them keep their digests
    ABSENT_IF_NONE: ClassVar[frozenset[str]] = frozenset({"output_tasks", "vocabulary_weights"})

    def phase_tasks(self, phase: str) -> tuple[PlanTask, ...]:
        return tuple(t for t in self.tasks if t.phase == phase)
