"""Where the ``physical`` and the ``calculon-0.1.0`` projections of one ConcretePlanIR differ, and why.

Two kinds of difference, each with a name:

- a compatibility rule of :data:`harness.calculon_compat.OVERLAP_RULES`
  *applies* when switching it off alone changes the ``calculon-0.1.0``
  projection (its closed forms);
- a schedule difference *applies* when the ``physical`` projection changes
  as the list schedule is made to share one of the closed forms'
  assumptions (:class:`harness.schedule.physical.Assumptions`):
  ``transfer-of-running-block``, ``overhead-per-block``, ``dp-windows`` (the
  DP sync not scheduled, the closed form's exposed time with every rule off
  instead); ``closed-form-bubble`` applies when the schedule sharing all
  three, priced with every rule off, differs from the closed forms with
  every rule off (what is left is the closed-form bubble's approximation:
  remainder microbatches under interleaving, stages one block short).

"Changes" means some component moves by more than :data:`RELATIVE` of the
``calculon-0.1.0`` total (the list schedule's floating-point arithmetic
differs from the closed forms' in the last bits). Where nothing applies, the
two projections agree (``tests/test_physical.py``); ``scripts/quirk_effects.py``
measures every difference on a corpus.
"""

from __future__ import annotations

import dataclasses

from harness import calculon_compat as compat
from harness.cost.views import Pricer
from harness.ir.concrete import ConcretePlanIR
from harness.schedule.physical import Assumptions, physical_projection
from harness.estimate import switched_off
from harness.schedule.projection import Projection, calculon_projection

RELATIVE = 1e-9
SCHEDULE_DIFFERENCES = ("transfer-of-running-block", "overhead-per-block", "dp-windows", "closed-form-bubble")


@dataclasses.dataclass(frozen=True)
class Differences:
    """Both projections and every variant that isolates one difference."""

    calculon: Projection
    physical: Projection
    rule_off: dict[str, Projection]  # calculon-0.1.0 with one rule off
    closed: Projection  # calculon-0.1.0 with every rule off
    sharing: dict[str, Projection]  # physical sharing one assumption
    shared: Projection  # physical sharing every assumption (DP: the closed form's, every rule off)

    def changed(self, a: Projection, b: Projection) -> bool:
        scale = RELATIVE * self.calculon.total_s
        return any(abs(a.components_s[k] - b.components_s[k]) > scale for k in a.components_s)

    @property
    def rules(self) -> tuple[str, ...]:
        """The compatibility rules that apply."""
        return tuple(n for n, p in self.rule_off.items() if self.changed(p, self.calculon))

    @property
    def schedule(self) -> tuple[str, ...]:
        """The schedule differences that apply."""
        out = [n for n, p in self.sharing.items() if self.changed(p, self.physical)]
        if self.changed(self.shared, self.closed):
            out.append("closed-form-bubble")
        return tuple(out)

    def effect(self, name: str) -> float:
        """The change of the total (seconds, signed) that difference ``name`` accounts for."""
        if name in self.rule_off:
            return self.calculon.total_s - self.rule_off[name].total_s
        if name == "closed-form-bubble":
            return self.closed.total_s - self.shared.total_s
        return self.sharing[name].total_s - self.physical.total_s


def differences(c: ConcretePlanIR, pricer: Pricer) -> Differences:
    """Both projections of ``c`` under ``pricer`` and their variants (switches rules: not thread-safe)."""
    rule_off = {}
    for name in compat.OVERLAP_RULES:
        with switched_off(name):
            rule_off[name] = calculon_projection(c, pricer)
    with switched_off(*compat.OVERLAP_RULES):
        closed = calculon_projection(c, pricer)
        dp = closed.components_s["data_parallel"]
        shared = physical_projection(c, pricer, Assumptions(True, True, dp))
    sharing = {"transfer-of-running-block": physical_projection(c, pricer, Assumptions(transfer_of_running_block=True)),
               "overhead-per-block": physical_projection(c, pricer, Assumptions(overhead_per_block=True)),
               "dp-windows": physical_projection(c, pricer, Assumptions(data_parallel_s=dp))}
    return Differences(calculon_projection(c, pricer), physical_projection(c, pricer), rule_off, closed, sharing,
                       shared)
