"""The work an iteration gets outside its composed blocks: one typed section of plan tasks, priced in one place.

:class:`IterationTasks` states that work as the plan's tasks and works, each with where it goes:

- once per microbatch (``microbatch_tasks``): the output tasks, their forward passes to ``forward``, their
  backward passes (the loss's, then the logit layer's dgrad and wgrad: the tasks in reverse) to ``backward``;
  with them the host's microbatch time of family ``launch`` (``host_microbatch``: a profile figure, not a
  task) to ``forward``;
- once per iteration (``optimizer_works``, ``sync_messages``, ``embedding_group``; ``vocabulary`` says whether
  they are counted): the vocabulary matrices' optimizer steps to ``optimizer``, their data-parallel gradient
  synchronisation and the embedding group's all-reduce to ``data_parallel``;
- the unfused gradient accumulation (``accumulation_works``, family ``gradient_accumulation``): one block's
  in-place adds, ``accumulation_multiples`` (backward, pipeline_bubble) times.

Rule (where the section comes from): :func:`iteration_tasks` derives it from the plan's digested fields (its
``tasks``, ``schedule``, ``bytes_per_element``, ``output_tasks`` and ``vocabulary_weights``) and, for a model
that states no vocabulary, the profile's default vocabulary (family ``output_layer``): that part depends on
the profile, so the section is built per (plan, profile, view) and is not a field of the portable plan (its
digest is unchanged). A plan that holds ``output_tasks`` has them in the section as they are; the families
that do not apply under the view contribute nothing.

:func:`outside_work` is the one place that prices the section, with the one :class:`Pricer` (``pricer.work``,
``pricer.message_s``; the search passes a ``message_s`` that prices a message on each variant's tier, as
arrays) into an :class:`~harness.schedule.calculon_forms.OutsideWork`, and
:func:`harness.schedule.calculon_forms.with_outside_work` is the one function that adds it to a composed
iteration: the closed form of a portable plan (``estimate.cost_view``), the projection of a ConcretePlanIR
(``estimate.concrete_iteration``) and the search (``search.concurrent.project``) all go through both.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from harness.cost.accumulation import accumulate_works, accumulation_applies, block_multiples
from harness.cost.output_layer import host_microbatch_s, iteration_weights, output_tasks
from harness.cost.views import Pricer
from harness.ir.model import ModelIR
from harness.ir.portable import Message, PlanTask, Schedule, VocabularyWeights, Work
from harness.schedule.calculon_forms import OutsideWork


@dataclasses.dataclass(frozen=True)
class IterationTasks:
    """The plan's work outside its composed blocks, each part where it goes (module rules)."""

    #: A training iteration (inference has no work outside its blocks).
    training: bool
    #: Once per microbatch: forward passes to ``forward``, backward passes (in reverse) to ``backward``.
    microbatch_tasks: tuple[PlanTask, ...] = ()
    #: Once per iteration, counted only when ``vocabulary``: to ``optimizer`` ...
    optimizer_works: tuple[Work, ...] = ()
    #: ... and to ``data_parallel`` (the gradient messages, then the embedding group's all-reduce).
    sync_messages: tuple[Message, ...] = ()
    embedding_group: Message | None = None
    vocabulary: bool = False
    #: One block's accumulation works, ``accumulation_multiples`` (backward, pipeline_bubble) times per iteration.
    accumulation_works: tuple[Work, ...] = ()
    accumulation_multiples: tuple[int, int] = (0, 0)


def iteration_tasks(pricer: Pricer, model: ModelIR | None, schedule: Schedule, tasks: tuple[PlanTask, ...],
                    bytes_per_element: int, *, output_tasks_planned: tuple[PlanTask, ...] | None = None,
                    vocabulary_weights: VocabularyWeights | None = None) -> IterationTasks:
    """The section of one plan under ``pricer``'s profile and view (``output_tasks_planned`` and
    ``vocabulary_weights``: the plan's, where it holds them; else the model's, or the profile's default
    vocabulary)."""
    training = schedule.training
    weights = iteration_weights(model, vocabulary_weights) if training else None
    return IterationTasks(
        training=training, microbatch_tasks=output_tasks(pricer, model, training, output_tasks_planned),
        optimizer_works=weights.optimizer if weights is not None else (),
        sync_messages=weights.gradient_messages if weights is not None else (),
        embedding_group=weights.embedding_group if weights is not None else None, vocabulary=weights is not None,
        **accumulation_part(pricer, schedule, tasks, bytes_per_element))


def accumulation_part(pricer: Pricer, schedule: Schedule, tasks: tuple[PlanTask, ...], bytes_per_element: int
                      ) -> dict:
    """The accumulation fields of the section of ``tasks`` (the works only where family
    ``gradient_accumulation`` applies and the schedule accumulates: two or more training microbatches)."""
    multiples = block_multiples(schedule)
    works: tuple[Work, ...] = ()
    if multiples[0] and accumulation_applies(pricer.profile, pricer.view):
        works = tuple(w for _, w in accumulate_works(tasks, bytes_per_element))
    return {"accumulation_works": works, "accumulation_multiples": multiples}


def accumulation_tasks(pricer: Pricer, schedule: Schedule, tasks: tuple[PlanTask, ...], bytes_per_element: int
                       ) -> IterationTasks:
    """A section holding only the accumulation of ``tasks`` (another block kind's, or one block's for the
    explanation)."""
    return IterationTasks(training=schedule.training,
                          **accumulation_part(pricer, schedule, tasks, bytes_per_element))


def block_accumulation_s(pricer: Pricer, section: IterationTasks) -> float:
    """One block's accumulation seconds for one microbatch after the first (0 when there is none)."""
    return sum((pricer.work(w).processing_s for w in section.accumulation_works), 0.0)


def outside_work(pricer: Pricer, section: IterationTasks, *,
                 sync_message_s: Callable[[Message | None], object] | None = None,
                 embedding_message_s: Callable[[Message | None], object] | None = None) -> OutsideWork:
    """The seconds of ``section`` under ``pricer`` (each pair None where there is none, so that the composition
    is left exactly as it is). ``sync_message_s`` and ``embedding_message_s`` price the per-iteration gradient
    messages (their data-parallel group) and the embedding group's all-reduce (the pipeline group); default
    ``pricer.message_s`` (the search prices each on its group's tier in every variant, as arrays)."""
    sync_message_s = pricer.message_s if sync_message_s is None else sync_message_s
    embedding_message_s = pricer.message_s if embedding_message_s is None else embedding_message_s
    per_microbatch = None
    host = host_microbatch_s(pricer) if section.training else 0.0
    if section.microbatch_tasks or host:
        forward = backward = 0.0
        for task in section.microbatch_tasks:
            forward += pricer.work(task.forward).processing_s
        for task in reversed(section.microbatch_tasks):  # backpropagation: the loss, then the logit layer's
            backward += pricer.work(task.activation_grad).processing_s
            backward += pricer.work(task.weight_grad).processing_s
        per_microbatch = (forward + host, backward)
    per_iteration = None
    if section.vocabulary:
        optimizer = 0.0
        for work in section.optimizer_works:
            optimizer += pricer.work(work, optimizer=True).processing_s
        sync = 0.0
        for message in section.sync_messages:
            sync = sync + sync_message_s(message)
        per_iteration = (optimizer, sync + embedding_message_s(section.embedding_group))
    accumulation = None
    backward_multiple, bubble_multiple = section.accumulation_multiples
    if backward_multiple and section.accumulation_works:
        block = block_accumulation_s(pricer, section)
        if block:
            accumulation = (backward_multiple * block, bubble_multiple * block)
    return OutsideWork(per_microbatch, per_iteration, accumulation)
