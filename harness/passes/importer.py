"""Semantic import: an anonymous estimate input becomes a ModelIR.

Rule: the importer sees only the shape and the layout; names, case ids and
comparison data do not exist at this point, so they cannot reach the IR.
"""

from __future__ import annotations

from harness.cases import EstimateInput, validate_input
from harness.ir.model import ModelIR


def import_model(data: EstimateInput, source: str = "<input>") -> ModelIR:
    """Validate the layout semantically and build the ModelIR."""
    validate_input(source, data)
    return ModelIR(shape=data.model, execution=data.execution)
