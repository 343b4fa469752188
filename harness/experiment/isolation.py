"""Oracle isolation: comparison data is released only after both estimates.

Rules:
- the experiment registers every estimate it finishes (case id, view);
- :meth:`ComparisonGate.open` releases a case's ``comparison`` section (paper
  value, oracle record id) only when *both* views of that case are
  registered; otherwise it raises :class:`OracleIsolationError`;
- every registration and release is logged in order, so a report (and a
  test) can show that no oracle was consulted before its estimates existed.

The estimate path itself cannot reach oracle code (import-linter contract in
``.importlinter``) and only ever receives an anonymous ``EstimateInput``.
"""

from __future__ import annotations

import dataclasses

from harness.cases import CaseFile, Comparison
from harness.errors import OracleIsolationError
from harness.vocabulary import VIEWS

REQUIRED_VIEWS = frozenset(VIEWS)

POLICY = (f"Both estimates ({', '.join(VIEWS)}) of a case are finished before its comparison section "
          "(Calculon record id, paper value) is released; estimation modules cannot import oracle code or read "
          "vendor/ (import-linter contract).")


@dataclasses.dataclass
class ComparisonGate:
    """Releases comparison data per case, after both of its estimates."""

    estimated: dict[str, set[str]] = dataclasses.field(default_factory=dict)
    events: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    def register_estimate(self, case_id: str, view: str) -> None:
        self.estimated.setdefault(case_id, set()).add(view)
        self.events.append(("estimate", f"{case_id}:{view}"))

    def open(self, case: CaseFile) -> Comparison:
        missing = REQUIRED_VIEWS - self.estimated.get(case.id, set())
        if missing:
            raise OracleIsolationError(
                f"case {case.id}: comparison data requested before its {', '.join(sorted(missing))} estimate(s) exist")
        self.events.append(("oracle", case.id))
        return case.comparison
