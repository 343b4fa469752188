"""Explained estimates by evidence: which curve families make the gap (``harness explain``).

``attribute`` prices the same PortablePlanIR under every subset of the
curve families the profile defines (``CostView.with_curves``): the four
Calculon families ``matrix``, ``vector``, ``memory`` and ``network`` (16
subsets), plus each measured family the profile has (``launch``,
``output_layer``, ``collective_curves``, ``hierarchical``, ...), and splits
``system_evidence - peak_only`` over them with exact Shapley values, for the
total and for every component. Rule (efficiency): the parts add up to the gap.
A layout with TP/DP overlap or offload is priced as its estimate is: the
``calculon-0.1.0`` projection of its ConcretePlanIR under each subset
(:func:`iteration`).
"""

from __future__ import annotations

import itertools
import math

from pydantic import Field

from harness.cost.views import CostView, pricer_for, profile_families
from harness.estimate import concrete_iteration, cost_view
from harness.evidence.profile import EvidenceProfile
from harness.ir.base import Frozen
from harness.pipeline import Lowering
from harness.vocabulary import COMPONENTS


class Attribution(Frozen):
    """The evidence gap of one input split over the profile's curve families (exact Shapley values)."""

    peak_only_total_s: float = Field(description="Iteration time with no curve applied, seconds.")
    system_evidence_total_s: float = Field(description="Iteration time with every family of the profile applied, "
                                                       "seconds.")
    attribution_s: dict[str, float] = Field(description="Shapley share of the total gap per family, seconds; "
                                                        "they add up to system_evidence - peak_only.")
    by_component: dict[str, dict[str, float]] = Field(description="Shapley shares per timing component and family, "
                                                                  "seconds; each component's add up to its gap.")

    @property
    def gap_s(self) -> float:
        return self.system_evidence_total_s - self.peak_only_total_s


def shapley(values: dict[frozenset[str], float], players: tuple[str, ...]) -> dict[str, float]:
    """Exact Shapley values of a game given on every subset of ``players``."""
    n = len(players)
    out = {}
    for player in players:
        others = [p for p in players if p != player]
        total = 0.0
        for size in range(n):
            weight = math.factorial(size) * math.factorial(n - size - 1) / math.factorial(n)
            for subset in itertools.combinations(others, size):
                s = frozenset(subset)
                total += weight * (values[s | {player}] - values[s])
        out[player] = total
    return out


def iteration(lowering: Lowering, profile: EvidenceProfile, view: CostView):
    """The estimate's iteration of ``lowering`` under ``view`` (``components_s``, ``total_s``): the composition of
    its plan, or, with TP/DP overlap or offload, the projection of its ConcretePlanIR
    (:func:`harness.estimate.concrete_iteration`)."""
    if lowering.concurrent:
        pricer = pricer_for(profile, view, lowering.plan.datatype)
        return concrete_iteration(lowering.concrete(), pricer, lowering.model)
    return cost_view(lowering.plan, profile, view, model=lowering.model)[1]


def attribute(lowering: Lowering, profile: EvidenceProfile) -> Attribution:
    """Split the gap of one lowering over the curve families the profile
    defines (:func:`~harness.cost.views.profile_families`: the four Calculon
    families, plus each measured family it has), per total and per component."""
    players = profile_families(profile)
    comps = {}
    for size in range(len(players) + 1):
        for subset in itertools.combinations(players, size):
            comps[frozenset(subset)] = iteration(lowering, profile, CostView.with_curves(subset))
    total = shapley({s: c.total_s for s, c in comps.items()}, players)
    by_component = {name: shapley({s: c.components_s[name] for s, c in comps.items()}, players)
                    for name in COMPONENTS}
    return Attribution(peak_only_total_s=comps[frozenset()].total_s,
                       system_evidence_total_s=comps[frozenset(players)].total_s,
                       attribution_s=total, by_component=by_component)
