"""Work once per microbatch outside the Transformer blocks: the output layer and the host's microbatch time.

The output layer and loss are workload: a model that states its vocabulary
has them as the plan's ``output_tasks`` (:mod:`harness.passes.output_layer`
holds their rules), priced in every view like any task. A model without a
vocabulary (Calculon's models have none) gets them from the evidence profile
when it defines family ``output_layer`` and the view applies it: the
profile names its target's default vocabulary, and the same tasks are built
with it (:func:`harness.passes.output_layer.model_plan_tasks`, one
definition).

Rules (per microbatch, on the last pipeline stage, which then paces the
steady state of 1F1B: once per microbatch on the critical path):

- the forward passes of the output tasks join the ``forward`` component, their
  backward passes (the loss's, then the logit layer's dgrad and wgrad) join
  ``backward``; they are priced by the same :class:`Pricer` (curves,
  processing mode, launch) as every task;
- family ``launch`` with ``issue_s_per_microbatch``: the host spends that time
  on each training microbatch outside its operations (loading and
  broadcasting the batch, which synchronizes the host with the device, and
  the training engine's bookkeeping); it joins ``forward``;
- inference adds nothing (there are no output tasks, and the host time is a
  training microbatch's).

:func:`harness.cost.outside.outside_work` is the one place that prices what an iteration
gets per microbatch (:func:`output_tasks`, :func:`host_microbatch_s`); the closed form, the projection of overlapped layouts, the
search, the explanation and the trace use it.

The vocabulary matrices of a shape that states ``tied_embeddings`` (the
plan's ``vocabulary_weights``, :mod:`harness.passes.output_layer`) add, once
per training iteration (:func:`harness.cost.outside.outside_work`): their optimizer steps to
``optimizer``, and their data-parallel gradient synchronisation and the
embedding group's all-reduce to ``data_parallel``. Both run after the
backward pass and are exposed (the embedding's weight gradient is the last
the backward pass computes, so no DP overlap hides its synchronisation).
"""

from __future__ import annotations

from harness.cost.views import CostView, Pricer
from harness.errors import EvidenceError
from harness.evidence.profile import EvidenceProfile
from harness.ir.model import ModelIR
from harness.ir.portable import PlanTask, VocabularyWeights
from harness.passes.output_layer import model_plan_tasks, vocabulary_weights


def output_layer_applies(profile: EvidenceProfile, view: CostView) -> bool:
    """Family ``output_layer`` applies: the profile defines it and the view prices it."""
    return profile.output_layer is not None and "output_layer" in view.curves


def output_tasks(pricer: Pricer, model: ModelIR | None, training: bool,
                 planned: tuple[PlanTask, ...] | None = None) -> tuple[PlanTask, ...]:
    """The output tasks an iteration prices: the plan's (``planned``, or those of the model's own vocabulary),
    else, for a model without one, those of the profile's default vocabulary where family ``output_layer``
    applies; none for inference."""
    if not training:
        return ()
    if planned:
        return planned
    if model is not None and model.shape.vocabulary is not None:
        return model_plan_tasks(model.shape, model.execution, model.shape.vocabulary)
    if not output_layer_applies(pricer.profile, pricer.view):
        return ()
    if model is None:
        raise EvidenceError(f"evidence profile {pricer.profile.name}", "output_layer",
                            "the family needs the model shape (cost_view(..., model=lowering.model))")
    return model_plan_tasks(model.shape, model.execution, pricer.profile.output_layer.vocabulary)


def host_microbatch_s(pricer: Pricer) -> float:
    """The host's time per training microbatch (family ``launch``), 0 when the family does not give it."""
    launch = pricer.profile.launch
    if launch is None or "launch" not in pricer.view.curves or launch.issue_s_per_microbatch is None:
        return 0.0
    return launch.issue_s_per_microbatch


def task_seconds(pricer: Pricer, task: PlanTask) -> tuple[float, float]:
    """(forward, backward) seconds of one output task for one microbatch."""
    return (pricer.work(task.forward).processing_s,
            pricer.work(task.activation_grad).processing_s + pricer.work(task.weight_grad).processing_s)


def iteration_weights(model: ModelIR | None, planned: VocabularyWeights | None = None) -> VocabularyWeights | None:
    """The vocabulary matrices an iteration prices: the plan's (``planned``), else the model's (the same
    memoized instance the plan holds); None when they are not counted."""
    if planned is not None or model is None:
        return planned
    return vocabulary_weights(model.shape, model.execution)
