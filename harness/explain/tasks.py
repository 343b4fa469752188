"""Explained estimates by task: which plan tasks make each component (``harness explain --by-task``).

The closed form (:func:`~harness.schedule.compose.compose`) is linear
in the block critical paths, and the block critical paths
(:func:`~harness.schedule.block.block_times`) are sums over tasks. So one
task's contribution to every component is the closed form applied to that
task's own block times; the pipeline boundary messages and the data-parallel
messages are contributors of their own, and so are the output tasks (phase
``output``: the plan's, or those of the profile's default vocabulary where
its ``output_layer`` family applies) and the host's microbatch time
(``host.microbatch``, family ``launch``), once per microbatch, and each
weight's unfused gradient accumulation (``accumulate/<task>``, phase
``accumulate``, family ``gradient_accumulation``). Rule: the contributions
to a component add up to the component (up to rounding); nothing is
re-derived. TP/DP overlap and offload break the sums over tasks: such layouts
are split per queue instead (:mod:`harness.explain.queues`).
"""

from __future__ import annotations

import dataclasses

from pydantic import Field

from harness.cost.accumulation import accumulate_works, block_multiples
from harness.cost.output_layer import host_microbatch_s, output_tasks, task_seconds
from harness.cost.outside import accumulation_tasks, outside_work
from harness.cost.views import CostView, Pricer
from harness.estimate import cost_view
from harness.evidence.profile import EvidenceProfile
from harness.ir.base import Frozen
from harness.ir.model import ModelIR
from harness.ir.portable import Message, PlanTask, PortablePlanIR
from harness.schedule.block import BlockTimes, block_times
from harness.schedule.compose import compose
from harness.vocabulary import COMPONENTS

ZERO_BLOCK = BlockTimes(*(0.0 for _ in dataclasses.fields(BlockTimes)))

# Passes whose work feeds a component (for the operations and bytes shown next to a task).
COMPONENT_PASSES = {
    "forward": ("forward",), "backward": ("activation_grad", "weight_grad"), "optimizer": ("optimizer",),
    "recompute": ("forward",), "tensor_parallel": ("forward", "activation_grad"), "pipeline_parallel": (),
    "data_parallel": (), "recommunication": (), "pipeline_bubble": ("forward", "activation_grad", "weight_grad"),
    "forward_offload": (), "backward_offload": (),
}
COMPONENTS.require(COMPONENT_PASSES, "harness.explain.tasks.COMPONENT_PASSES")


@dataclasses.dataclass(frozen=True)
class Contributor:
    """A plan task or a plan-level message, with its share of the block critical paths."""

    name: str  # task name, or pipeline.forward / pipeline.backward / data_parallel.<collective>
    primitive: str  # task primitive, or the message's collective
    phase: str  # forward / recompute / recommunication, or pipeline / data_parallel
    block: BlockTimes  # this contributor's share: the contributors' blocks add up to block_times
    task: PlanTask | None  # the plan task (None for a plan-level message)
    messages: tuple[Message, ...]  # the messages it sends in a base block (the plan-level message)


def contributors(plan: PortablePlanIR, pricer: Pricer) -> tuple[Contributor, ...]:
    """Every task and plan-level message, each with its own block times."""
    out = []
    dp = plan.data_parallel
    sharded = dp is not None and bool(dp.fully_sharded)
    # fully sharded: the gathers' exposed time depends on the whole block's compute, so the tasks are timed
    # without it and it is one contributor of its own (the difference of the whole block's times)
    tasks_plan = plan.trusted_replace(data_parallel=None) if sharded else plan
    for task in plan.tasks:
        own = block_times(tasks_plan, (pricer.task(task),), pricer)
        msgs = task.messages
        sent = tuple(m for m in ((msgs.forward_base, msgs.backward_base) if msgs else ()) if m is not None)
        out.append(Contributor(task.name, task.primitive, task.phase,
                               dataclasses.replace(own, pp_forward_s=0.0, pp_backward_s=0.0, dp_s=0.0), task, sent))
    p = plan.pipeline
    for label, msg, field in (("forward", p.forward, "pp_forward_s"), ("backward", p.backward, "pp_backward_s")):
        if msg is not None:
            out.append(Contributor(f"pipeline.{label}", msg.collective, "pipeline",
                                   dataclasses.replace(ZERO_BLOCK, **{field: pricer.boundary_s(msg, plan)}), None,
                                   (msg,)))
    if sharded:
        costs = tuple(map(pricer.task, plan.tasks))
        whole, plain = block_times(plan, costs, pricer), block_times(tasks_plan, costs, pricer)
        out.append(Contributor("data_parallel.fsdp", "all_gather", "data_parallel", dataclasses.replace(
            ZERO_BLOCK, forward_s=whole.forward_s - plain.forward_s,
            activation_grad_s=whole.activation_grad_s - plain.activation_grad_s), None, dp.messages))
    for msg in plan.data_parallel.all_messages if plan.data_parallel and not sharded else ():
        out.append(Contributor(f"data_parallel.{msg.collective}", msg.collective, "data_parallel",
                               dataclasses.replace(ZERO_BLOCK, dp_s=pricer.message_s(msg)), None, (msg,)))
    return tuple(out)


class TaskShare(Frozen):
    """One contributor's part of one timing component."""

    task: str = Field(description="PortablePlanIR task, or pipeline.<direction> / data_parallel.<collective>.")
    primitive: str = Field(description="Task primitive, or the message's collective.")
    phase: str = Field(description="Task phase, or pipeline / data_parallel / output (once per microbatch) / host / "
                                   "accumulate (a weight's gradient accumulation, per microbatch after the first) / "
                                   "vocabulary (the vocabulary matrices' optimizer step and gradient "
                                   "synchronisation, once per iteration).")
    operations: float = Field(description="Operations of the passes feeding the component, one block and microbatch "
                                          "(one block for the optimizer).")
    memory_bytes: float = Field(description="Tier-1 bytes read and written by those passes, same unit.")
    message_bytes: float = Field(description="Logical bytes of the messages it sends in a base block.")
    time_s: float = Field(description="Contribution to the component, seconds.")


class ComponentTasks(Frozen):
    """One timing component and the contributors behind it; their times add up to ``time_s``."""

    component: str = Field(description="Timing component name.")
    time_s: float = Field(description="The component, seconds (as in the estimate).")
    tasks: tuple[TaskShare, ...] = Field(description="Non-zero contributions, largest first.")


class ViewTasks(Frozen):
    """The by-task breakdown of one cost view."""

    view: str = Field(description="Cost view name.")
    total_s: float = Field(description="Iteration time, seconds.")
    components: tuple[ComponentTasks, ...] = Field(description="Every timing component, in estimate order.")


def _share(c: Contributor, component: str, time_s: float) -> TaskShare:
    works = [getattr(c.task, name) for name in COMPONENT_PASSES[component]] if c.task else []
    return TaskShare(task=c.name, primitive=c.primitive, phase=c.phase,
                     operations=sum(w.operations for w in works), memory_bytes=sum(w.bytes_accessed for w in works),
                     message_bytes=sum(m.message_bytes for m in c.messages), time_s=time_s)


def _output_layer_shares(plan: PortablePlanIR, pricer: Pricer, model: ModelIR | None) -> dict[str, list[TaskShare]]:
    """The per-microbatch contributions outside the blocks to forward and backward: each output task (the plan's,
    or those of the profile's default vocabulary), and the host's microbatch time (family ``launch``)."""
    if not plan.schedule.training:
        return {}
    mb = plan.schedule.microbatches
    out: dict[str, list[TaskShare]] = {}
    host = host_microbatch_s(pricer)
    if host:
        out["forward"] = [TaskShare(task="host.microbatch", primitive="host", phase="host", operations=0.0,
                                    memory_bytes=0.0, message_bytes=0.0, time_s=mb * host)]
    for task in output_tasks(pricer, model, True, plan.output_tasks):
        forward, backward = task_seconds(pricer, task)
        for component, seconds, works in (("forward", forward, (task.forward,)),
                                           ("backward", backward, (task.activation_grad, task.weight_grad))):
            if seconds:
                out.setdefault(component, []).append(TaskShare(
                    task=task.name, primitive=task.primitive, phase="output",
                    operations=sum(w.operations for w in works), memory_bytes=sum(w.bytes_accessed for w in works),
                    message_bytes=0.0, time_s=mb * seconds))
    return out


def _vocabulary_shares(plan: PortablePlanIR, pricer: Pricer) -> dict[str, list[TaskShare]]:
    """The vocabulary matrices' once-per-iteration work (a shape that states ``tied_embeddings``), as
    :func:`harness.cost.outside.outside_work` adds it: their optimizer steps, their gradient
    synchronisation and the embedding group's all-reduce (phase ``vocabulary``)."""
    w = plan.vocabulary_weights
    if w is None or not plan.schedule.training:
        return {}
    out: dict[str, list[TaskShare]] = {}
    for i, work in enumerate(w.optimizer):
        out.setdefault("optimizer", []).append(TaskShare(
            task=f"vocabulary.optimizer/{i}", primitive="optimizer", phase="vocabulary", operations=work.operations,
            memory_bytes=work.bytes_accessed, message_bytes=0.0, time_s=pricer.work(work, optimizer=True).processing_s))
    named = [(f"vocabulary.{m.collective}", m) for m in w.gradient_messages]
    if w.embedding_group is not None:
        named.append(("embedding_group.all_reduce", w.embedding_group))
    for name, message in named:
        out.setdefault("data_parallel", []).append(TaskShare(
            task=name, primitive=message.collective, phase="vocabulary", operations=0.0, memory_bytes=0.0,
            message_bytes=message.message_bytes, time_s=pricer.message_s(message)))
    return out


def _accumulation_shares(plan: PortablePlanIR, pricer: Pricer) -> dict[str, list[TaskShare]]:
    """The unfused gradient accumulation (family ``gradient_accumulation``) of each weight-holding task, in
    backward and the bubble (``accumulate/<task>``, phase ``accumulate``), as
    :func:`harness.cost.outside.outside_work` adds them."""
    section = accumulation_tasks(pricer, plan.schedule, plan.tasks, plan.bytes_per_element)
    if outside_work(pricer, section).accumulation_s is None:
        return {}
    out: dict[str, list[TaskShare]] = {}
    multiples = dict(zip(("backward", "pipeline_bubble"), block_multiples(plan.schedule)))
    for task, work in accumulate_works(plan.tasks, plan.bytes_per_element):
        seconds = pricer.work(work).processing_s
        for component, multiple in multiples.items():
            if multiple and seconds:
                out.setdefault(component, []).append(TaskShare(
                    task=f"accumulate/{task.name}", primitive="accumulate", phase="accumulate",
                    operations=work.operations, memory_bytes=work.bytes_accessed,
                    message_bytes=0.0, time_s=multiple * seconds))
    return out


def by_task(plan: PortablePlanIR, profile: EvidenceProfile, view: CostView, *,
            model: ModelIR | None = None) -> ViewTasks:
    """Every component of ``view`` split over the plan's contributors (and the
    output layer's work, where the profile's ``output_layer`` family applies)."""
    pricer = Pricer(profile, view, plan.datatype)
    _, whole = cost_view(plan, profile, view, model=model)
    parts = [(c, compose(plan.schedule, c.block).components_s) for c in contributors(plan, pricer)]
    edges = _output_layer_shares(plan, pricer, model)
    accumulation = _accumulation_shares(plan, pricer)
    vocabulary = _vocabulary_shares(plan, pricer)
    components = []
    for name in COMPONENTS:
        shares = [_share(c, name, comps[name]) for c, comps in parts if comps[name] != 0.0] + edges.get(name, []) \
            + accumulation.get(name, []) + vocabulary.get(name, [])
        components.append(ComponentTasks(component=name, time_s=whole.components_s[name],
                                         tasks=tuple(sorted(shares, key=lambda s: -abs(s.time_s)))))
    return ViewTasks(view=view.name, total_s=whole.total_s, components=tuple(components))
