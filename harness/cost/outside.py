"""The work an iteration gets outside its composed blocks, priced in one place for the estimate's two paths.

Three kinds (each None where the profile, the view or the plan gives none):

- once per microbatch: the output tasks and the host's microbatch time
  (:func:`harness.cost.output_layer.per_microbatch_s`);
- once per iteration: the vocabulary matrices' optimizer step and gradient
  synchronisation (:func:`harness.cost.output_layer.per_iteration_s`);
- the unfused gradient accumulation (:func:`harness.cost.accumulation.accumulation_s`).

:func:`harness.schedule.calculon_forms.with_outside_work` adds them to a
composed iteration: the closed form of a portable plan (``cost_view``), the
projection of a ConcretePlanIR (``concrete_iteration``) and the search
(which prices the per-iteration messages on each variant's tiers,
:func:`harness.search.concurrent.vocabulary_s`) all go through it.
"""

from __future__ import annotations

from harness.cost.accumulation import accumulation_s
from harness.cost.output_layer import per_iteration_s, per_microbatch_s
from harness.cost.views import Pricer
from harness.ir.model import ModelIR
from harness.ir.portable import PlanTask, Schedule, VocabularyWeights
from harness.schedule.calculon_forms import OutsideWork


def outside_work(pricer: Pricer, model: ModelIR | None, schedule: Schedule, tasks: tuple[PlanTask, ...],
                 bytes_per_element: int, *, output_tasks: tuple[PlanTask, ...] | None = None,
                 vocabulary_weights: VocabularyWeights | None = None) -> OutsideWork:
    """The outside work of one plan under ``pricer`` (``output_tasks`` and ``vocabulary_weights``: the plan's,
    where it holds them; else the model's, or the profile's default vocabulary)."""
    return OutsideWork(per_microbatch_s(pricer, model, schedule.training, output_tasks),
                       per_iteration_s(pricer, model, schedule.training, vocabulary_weights),
                       accumulation_s(pricer, tasks, schedule, bytes_per_element))
