"""Pass ``transformer-plan-work``: DistributedTaskIR -> PortablePlanIR.

Derives exact workload facts per task from the rules in
:mod:`harness.passes.rules` and the plan-level traffic:

- recompute clones repeat their original's forward work and hold nothing;
- a recommunication task sends its original's forward message again;
- the pipeline boundary message is one block activation, sequence-sharded when
  the TP collectives are split (rs_ag, p2p_rs_ag); training sends it back in
  the backward pass;
- the data-parallel message of a block is its weight bytes: one all-reduce, or
  a reduce-scatter plus an all-gather with optimizer sharding, or with
  ``fsdp`` the weights' two all-gathers and the gradients' reduce-scatter of
  every microbatch (``FSDP_MESSAGES``, ``fully_sharded``); a MoE block's
  expert weights (grouped GEMMs) are reduced (and, with optimizer sharding,
  their optimizer state sharded) over the expert-data-parallel group instead
  (TP x CP x DP / (EP x ETP) ranks: ``DataParallelTraffic.expert``), the dense
  ones over data (x context);
- the output tasks (a model that states its vocabulary) get their facts by
  :func:`harness.passes.output_layer.plan_tasks`, and the vocabulary matrices
  (a model that states ``tied_embeddings``) theirs by
  :func:`harness.passes.output_layer.vocabulary_weights`.

No processor, memory or network property is consulted and no duration is
produced: only network tier indices from the layout appear.
"""

from __future__ import annotations

import dataclasses

from harness import calculon_compat as compat, session
from harness.ir import mesh
from harness.ir.blocks import blocks_per_stage, short_stages
from harness.ir.distributed import (
    MEMBER_STRIDE_OF,
    CollectiveOp,
    CollectiveShape,
    DistributedTaskIR,
    OverlappedLinearShape,
    Task,
    expert_weights,
)
from harness.ir.model import ExecutionLayout
from harness.ir.portable import (
    NO_CAPACITY,
    NO_WORK,
    DataParallelTraffic,
    ExpertGradientTraffic,
    Message,
    NetworkUse,
    PipelineTraffic,
    PlanTask,
    PortablePlanIR,
    Schedule,
    TaskMessages,
)
from harness.passes.base import ModulePass
from harness.passes.output_layer import plan_tasks, vocabulary_weights
from harness.passes.precision import overlap_message_bytes
from harness.passes.rules import WEIGHTED, derive


def _task_messages(s: CollectiveShape | OverlappedLinearShape, b: int, tier: int, backward: bool,
                   stride: int | None = None) -> TaskMessages:
    """Messages of a collective of shape ``s`` on network ``tier`` (None: the identity, nothing sent); they
    span the shape's group (``GROUP``; the tensor group is left unnamed, :class:`TaskMessages`) and carry
    ``stride`` (``Message.member_stride_processors``; None: absent).

    Memoized by field values in the session's ``messages`` (a pure function of
    frozen values; bounded like :func:`harness.passes.rules.derive`): the f/g
    collectives of both sub-blocks and their clones share one immutable TaskMessages.
    """
    key = (type(s), *s.__dict__.values(), b, tier, backward, stride)
    memo = session.current().messages
    messages = memo.get(key)
    if messages is not None:
        return messages

    # An overlapped linear's recipe: its all-gathers quantized. Read from the fields (a shape without the field
    # has no key): ``getattr`` with a default costs pydantic an AttributeError, ~8 us, per shape without it.
    quantized = s.__dict__.get("precision")

    def message(op: CollectiveOp | None) -> Message | None:
        return None if op is None else Message.trusted(
            collective=op, message_bytes=overlap_message_bytes(op, s.elements, b, quantized),
            participants=s.participants, network_tier=tier, member_stride_processors=stride)

    return memo.put(key, TaskMessages.trusted(
        forward_base=message(s.base_forward), forward_edge=message(s.edge_forward),
        backward_base=message(s.base_backward) if backward else None,
        backward_edge=message(s.edge_backward) if backward else None,
        group=None if s.GROUP == mesh.TENSOR else s.GROUP))


#: A fully sharded block's messages in every microbatch (``execution.fsdp``; Megatron-FSDP's optim_grads_params):
#: the weights all-gathered before the forward, again before the backward, the gradients reduce-scattered after
#: it (harness.schedule.block.fsdp_exposure reads them in this order).
FSDP_MESSAGES: tuple[CollectiveOp, ...] = ("all_gather", "all_gather", "reduce_scatter")


#: The group weight gradients are reduced over (:func:`harness.ir.mesh.gradient_group`, one definition).
gradient_group = mesh.gradient_group


#: The ranks an expert-data-parallel group spans (Megatron-Core's folded expert layout: ETP x EP x expert-DP over
#: the same TP x CP x DP ranks): its messages cross the slowest link of these dimensions.
EXPERT_GRADIENT_SPANS: mesh.Group = mesh.group("tensor", "data", "context")


def expert_data_parallel(e: ExecutionLayout) -> int:
    """The expert-data-parallel degree: TP x CP x DP / (EP x ETP) (harness.ir.experts: a whole number)."""
    return e.tensor_parallel * e.context_degree * e.data_parallel // (e.expert_degree * e.expert_tensor_degree)


def member_stride(shape, e: ExecutionLayout) -> int | None:
    """The stride between the group's members a shape's messages carry (its ``MEMBER_STRIDE`` dimension's
    degree; on any tier: the search prices a plan lowered on tier 0 on every placement); None for the other
    shapes."""
    dimension = MEMBER_STRIDE_OF[shape.kind]
    return None if dimension is None else mesh.degree(e, dimension)


def _ring_messages(s, b: int, tier: int, backward: bool) -> TaskMessages:
    """A ring exchange's messages: one p2p step of the K/V chunk forward, K/V and their gradients backward
    (twice the bytes), each sent ``steps`` times (``TaskMessages.ring_steps``)."""
    forward = Message.trusted(collective="p2p", message_bytes=s.elements * b, participants=2, network_tier=tier)
    back = Message.trusted(collective="p2p", message_bytes=2 * s.elements * b, participants=2,
                           network_tier=tier) if backward else None
    return TaskMessages.trusted(forward_base=forward, forward_edge=forward, backward_base=back, backward_edge=back,
                                group=s.GROUP, ring_steps=s.steps, hides_behind=s.hides_behind)


@dataclasses.dataclass(frozen=True)
class TransformerPlanWork(ModulePass[DistributedTaskIR, PortablePlanIR]):
    """Attach workload facts; bind no hardware."""

    name = "transformer-plan-work"

    def requires(self, ir: DistributedTaskIR) -> None:
        if not ir.tasks:
            raise self.fail("the DistributedTaskIR has no tasks")
        if not any(t.phase == "forward" for t in ir.tasks):
            raise self.fail("the DistributedTaskIR has no forward task")

    def apply(self, ir: DistributedTaskIR) -> PortablePlanIR:
        e = ir.execution
        b = e.bytes_per_element
        shards = mesh.group_size(e, gradient_group(e)) if e.optimizer_sharding else 1
        expert_shards = expert_data_parallel(e) if e.optimizer_sharding else 1  # the distributed optimizer's
        tasks = self._plan_tasks(ir.tasks, b, shards, expert_shards, e)
        return PortablePlanIR.trusted(
            datatype=e.datatype,
            bytes_per_element=b,
            processors=e.processors,
            tasks=tasks,
            schedule=self._schedule(ir),
            pipeline=self._pipeline(ir),
            data_parallel=self._data_parallel(ir, tasks),
            network_use=self._network_use(ir),
            output_tasks=plan_tasks(ir.output_tasks, b) if ir.output_tasks else None,
            vocabulary_weights=vocabulary_weights(ir.shape, e),
        )

    @classmethod
    def _plan_tasks(cls, tasks: tuple[Task, ...], b: int, shards: int, expert_shards: int,
                    e: ExecutionLayout) -> tuple[PlanTask, ...]:
        """Every task's :meth:`_plan_task`, memoized in the session's ``plan_tasks``.

        A plan task is a pure function of its task (interned: equal tasks are one instance), the element size,
        the optimizer shards its rule reads (one for a primitive without weights, :data:`rules.WEIGHTED`),
        training, and, for a communicating task, the tier and member stride of its group: the key is those
        values with the task's identity (the memo holds the task, so its id is not reused while remembered;
        a hit is checked by identity).
        """
        memo = session.current().plan_tasks
        training = e.training
        placements: dict[type, tuple[int, int | None]] = {}  # shape class -> its group's (tier, stride)
        planned = []
        for task in tasks:
            shape = task.shape
            own = (expert_shards if expert_weights(shape.kind) else shards) if shape.kind in WEIGHTED else 1
            if shape.EXCHANGE == "none":
                key = (id(task), b, own, training)
                placement = None
            else:
                placement = placements.get(type(shape))
                if placement is None:
                    placement = placements[type(shape)] = (mesh.group_tier(e, shape.GROUP), member_stride(shape, e))
                key = (id(task), b, own, training, *placement)
            hit = memo.get(key)
            if hit is not None and hit[0] is task:
                planned.append(hit[1])
                continue
            plan_task = cls._plan_task(task, b, own, training, placement)
            memo.put(key, (task, plan_task))
            planned.append(plan_task)
        return tuple(planned)

    @staticmethod
    def _plan_task(task: Task, b: int, shards: int, training: bool,
                   placement: tuple[int, int | None] | None) -> PlanTask:
        """One task's workload facts; ``placement`` is a communicating task's (tier, member stride) (None:
        the task sends nothing)."""
        facts = derive(task.shape, b, shards)
        messages = None
        if placement is not None:
            # Backward messages exist for a training forward collective only; a
            # recommunication task sends its original's forward messages again
            # (as does the recompute clone of an overlapped linear: its GEMM is
            # tiled against them). They travel on their group's tier.
            tier, stride = placement
            if task.shape.EXCHANGE == "ring":
                messages = _ring_messages(task.shape, b, tier, training and task.phase == "forward")
            else:
                messages = _task_messages(task.shape, b, tier, training and task.phase == "forward", stride)
        if task.phase == "forward" and training:
            passes = dict(forward=facts.forward, activation_grad=facts.activation_grad,
                          weight_grad=facts.weight_grad, optimizer=facts.optimizer)
            capacity = facts.capacity
        elif task.phase == "forward":
            # Inference: no backward pass, no optimizer, no gradient state.
            passes = dict(forward=facts.forward, activation_grad=NO_WORK, weight_grad=NO_WORK, optimizer=NO_WORK)
            capacity = facts.capacity.trusted_replace(
                weight_grad_bytes=0, weight_grad_unsharded_bytes=0, activation_grad_bytes=0, optimizer_bytes=0)
        else:
            repeated = facts.forward if task.phase == "recompute" else NO_WORK
            passes = dict(forward=repeated, activation_grad=NO_WORK, weight_grad=NO_WORK, optimizer=NO_WORK)
            capacity = NO_CAPACITY
        return PlanTask.trusted(name=task.name, primitive=task.shape.kind, phase=task.phase, clone_of=task.clone_of,
                                **passes, messages=messages, capacity=capacity, retention=task.retention)

    #: The layout fields :meth:`relayout` may change (the TP overlap mode only between ring and pipe).
    RELAYOUT_FIELDS = frozenset({"pipeline_interleaving", "tp_overlap"})

    @classmethod
    def lowering_key(cls, e: ExecutionLayout) -> tuple:
        """Equal for two layouts (of one shape) exactly when :meth:`relayout` turns the plan of one into the
        plan of the other: every layout field but :data:`RELAYOUT_FIELDS`, and whether TP overlap is on.
        Derived from the layout's fields, so that a new field is part of it without an edit."""
        return (*(getattr(e, f) for f in type(e).model_fields if f not in cls.RELAYOUT_FIELDS),
                e.tp_overlap != "none")

    @classmethod
    def relayout(cls, plan: PortablePlanIR, ir: DistributedTaskIR) -> PortablePlanIR:
        """``plan`` with the schedule and pipeline traffic of ``ir``.

        Requires: ``plan`` is this pass's output for a DistributedTaskIR that
        differs from ``ir`` only in its execution's pipeline interleaving (or
        its TP overlap mode, ring or pipe, which the portable plan does not
        record): nothing else of a plan depends on them, so the result is
        this pass's output for ``ir``. The execution search shares one
        lowering between the interleavings of a layout with it.
        """
        return plan.trusted_replace(schedule=cls._schedule(ir), pipeline=cls._pipeline(ir))

    @staticmethod
    def _schedule(ir: DistributedTaskIR) -> Schedule:
        s, e = ir.shape, ir.execution
        per_stage = blocks_per_stage(s.blocks, e.pipeline_parallel)
        per_chunk = per_stage // e.pipeline_interleaving
        checkpoint = (e.microbatch * (s.sequence_length // e.context_degree) * s.hidden * e.bytes_per_element
                      if e.training and e.recompute == "full" else 0)
        return Schedule.trusted(
            training=e.training, recompute=e.recompute, global_batch=e.global_batch, microbatches=e.microbatches,
            blocks=s.blocks, pipeline_parallel=e.pipeline_parallel, blocks_per_stage=per_stage,
            bubble_reduction_blocks=short_stages(s.blocks, e.pipeline_parallel),
            chunks_per_stage=e.pipeline_interleaving, blocks_per_chunk=per_chunk,
            base_blocks_per_chunk=per_chunk - 1, edge_blocks_per_chunk=1,
            activation_checkpoint_bytes=checkpoint,
        )

    @staticmethod
    def _pipeline(ir: DistributedTaskIR) -> PipelineTraffic:
        s, e = ir.shape, ir.execution
        if e.pipeline_parallel == 1:
            return PipelineTraffic.trusted(forward=None, backward=None, forward_transfers_per_microbatch=0,
                                                   backward_transfers_per_microbatch=0)
        tokens = e.microbatch * (s.sequence_length // e.context_degree)
        sharded = e.tp_communication in ("rs_ag", "p2p_rs_ag")
        boundary = (tokens // e.tensor_parallel if sharded else tokens) * s.hidden * e.bytes_per_element
        tier = mesh.group_tier(e, PipelineTraffic.spans)
        # Inference keeps a zero-byte backward slot (a named Calculon rule): the
        # schedule's edge block still pays the p2p latency there.
        backward = None
        if e.training or compat.inference_backward_p2p():
            backward = Message.trusted(collective="p2p", message_bytes=boundary if e.training else 0,
                                       participants=2, network_tier=tier)
        return PipelineTraffic.trusted(
            forward=Message.trusted(collective="p2p", message_bytes=boundary, participants=2, network_tier=tier),
            backward=backward,
            forward_transfers_per_microbatch=e.pipeline_interleaving,
            backward_transfers_per_microbatch=e.pipeline_interleaving if e.training else 0,
        )

    @staticmethod
    def _data_parallel(ir: DistributedTaskIR, tasks: tuple[PlanTask, ...]) -> DataParallelTraffic | None:
        e = ir.execution
        spans = gradient_group(e)
        participants = mesh.group_size(e, spans)
        if participants == 1 or not e.training:
            return None
        gradient = sum(t.capacity.weight_bytes for t in tasks if not expert_weights(t.primitive))
        experts = sum(t.capacity.weight_bytes for t in tasks if expert_weights(t.primitive))
        ops = ("reduce_scatter", "all_gather") if e.optimizer_sharding else ("all_reduce",)
        if e.fsdp:  # every microbatch: the weights gathered for the forward and the backward, gradients scattered
            ops = FSDP_MESSAGES
        expert = None
        if experts and expert_data_parallel(e) > 1:  # the expert weights' gradients, over expert-DP
            tier = mesh.group_tier(e, EXPERT_GRADIENT_SPANS)
            expert = ExpertGradientTraffic.trusted(
                gradient_bytes=experts, group=EXPERT_GRADIENT_SPANS,
                messages=tuple(Message.trusted(collective=op, message_bytes=experts,
                                               participants=expert_data_parallel(e), network_tier=tier) for op in ops))
        return DataParallelTraffic.trusted(
            gradient_bytes=gradient,
            messages=tuple(Message.trusted(collective=op, message_bytes=gradient, participants=participants,
                                           network_tier=mesh.group_tier(e, spans)) for op in ops),
            group=None if spans == mesh.DATA else spans, expert=expert, fully_sharded=True if e.fsdp else None,
        )

    @staticmethod
    def _network_use(ir: DistributedTaskIR) -> tuple[NetworkUse, ...]:
        e = ir.execution
        return tuple(NetworkUse.trusted(dimension=d, network_tier=mesh.tier(e, d), group_size=n)
                     for d, n in mesh.degrees(e).items() if n > 1)

    def ensures(self, ir: PortablePlanIR) -> None:
        for task in ir.tasks:
            if task.phase != "forward" and task.capacity is not NO_CAPACITY and task.capacity != NO_CAPACITY:
                raise self.fail(f"clone {task.name} holds capacity")
            sends = task.exchange != "none"
            if sends and task.messages is None:
                raise self.fail(f"collective {task.name} has no messages")
            if not sends and task.messages is not None:
                raise self.fail(f"compute task {task.name} sends messages")
        sched = ir.schedule
        if sched.blocks_per_chunk * sched.chunks_per_stage != sched.blocks_per_stage:
            raise self.fail("chunks do not tile the blocks of a stage")
