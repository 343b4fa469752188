"""Explained estimates: which plan tasks make each component, which evidence makes the gap, which queues hide it.

One entry point, :func:`explain_input`, in two modes (``harness explain``):

- the gap (default): ``system_evidence - peak_only`` split over the profile's
  curve families with exact Shapley values, per total and per component
  (:mod:`harness.explain.gap`); for a layout with TP/DP overlap or offload
  also each view's components split per queue into busy, hidden and exposed
  time (:mod:`harness.explain.queues`);
- by task (``mode="by_task"``, ``--by-task``): each view's components listed by
  the plan tasks and plan-level messages behind them
  (:mod:`harness.explain.tasks`); refused for TP/DP overlap and offload,
  whose block times are more than sums over tasks.

The lowering-level functions (:func:`attribute`, :func:`by_task`,
:func:`queue_split`, :func:`contributors`) are the modes' pieces; the
input-level entry lowers once and applies the estimate's profile checks.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

from harness.cases import EstimateInput
from harness.cost.views import CostView
from harness.errors import InputError
from harness.estimate import DEFAULT_VIEWS, check_tiers
from harness.evidence.profile import load_profile
from harness.explain.gap import Attribution, attribute, iteration, shapley
from harness.explain.queues import ComponentQueues, QueueShare, ViewQueues, queue_split
from harness.explain.tasks import (
    COMPONENT_PASSES,
    ComponentTasks,
    Contributor,
    TaskShare,
    ViewTasks,
    by_task,
    contributors,
)
from harness.pipeline import lower

__all__ = ["Attribution", "COMPONENT_PASSES", "ComponentQueues", "ComponentTasks", "Contributor", "Explanation",
           "QueueShare", "TaskShare", "ViewQueues", "ViewTasks", "attribute", "by_task", "contributors",
           "explain_input", "iteration", "queue_split", "shapley"]


@dataclasses.dataclass(frozen=True)
class Explanation:
    """One input explained: the gap mode's ``attribution`` (and ``queues`` for a layout with TP/DP overlap or
    offload, one per view), or the by-task mode's ``tasks`` (one per view); the other mode's fields are None."""

    attribution: Attribution | None = None
    queues: tuple[ViewQueues, ...] | None = None
    tasks: tuple[ViewTasks, ...] | None = None


def explain_input(data: EstimateInput, views: tuple[CostView, ...] = DEFAULT_VIEWS, *,
                  mode: Literal["gap", "by_task"] = "gap", source: str = "<input>",
                  evidence_dir: Path | None = None) -> Explanation:
    """Lower one anonymous input (the estimate's profile checks apply) and explain it in one mode (see the
    package rules): the gap over the curve families (with each view's per-queue split where the layout overlaps
    or offloads), or, ``mode="by_task"``, each view's components by task (an InputError for overlap or offload)."""
    if mode not in ("gap", "by_task"):
        raise ValueError(f"unknown explanation mode {mode!r}")
    profile = load_profile(data.system, evidence_dir, referrer=source)
    check_tiers(data, profile, source)
    lowering = lower(data, source)
    if mode == "by_task":
        if lowering.concurrent:
            if lowering.model.execution.expert_overlap:
                raise InputError(source, "--by-task", "the expert overlap makes block times less than sums over "
                                                      "tasks, and the per-queue split does not schedule it yet: "
                                                      "estimate prices it")
            raise InputError(source, "--by-task", "TP/DP overlap and offload make block times more than sums over "
                                                  "tasks; explain without --by-task splits each component per queue "
                                                  "instead")
        return Explanation(tasks=tuple(by_task(lowering.plan, profile, v, model=lowering.model) for v in views))
    attribution = attribute(lowering, profile)
    queues = tuple(queue_split(lowering, profile, v, source=source) for v in views) if lowering.concurrent else None
    return Explanation(attribution=attribution, queues=queues)

