"""The processor mesh of a layout: named parallel dimensions and the groups collectives span.

The dimensions are :data:`harness.vocabulary.PARALLEL_DIMENSIONS`; this module holds each one's rules, so that a
new dimension is that vocabulary entry plus an entry in :data:`DEGREE_FIELDS` (checked at import) and the passes
that emit its work. Everything else (a message's network tier and participants, the plan's network groups, the
concrete plan's queues, the search's placement, memory sharding) derives from the rules below.

Rules:

- a dimension's **degree** is the layout field :data:`DEGREE_FIELDS` names (an optional field that is absent
  is degree 1); its **network tier** is ``execution.network_tiers.<dimension>`` (absent: see :func:`tier`);
- the layout's processors are the product of the degrees of the dimensions that are not *folded* (kind
  ``folded``: the expert dimensions re-partition the same processors, Megatron-Core's MoE parallel folding);
- a **group** is a tuple of distinct dimensions in vocabulary order: one dimension (``("tensor",)``) or a
  product (``("data", "context")``: the ranks that hold the same weights in a context-parallel layout). Its
  **size** is the product of its dimensions' degrees;
- a group's **network tier** is the highest tier among its dimensions of degree above 1 (the slowest link its
  members cross), or its first dimension's tier when every degree is 1 (then no message is sent). A message
  of the group travels on that tier with the group's size as participants.
"""

from __future__ import annotations

from typing import Any, Iterable

from harness.vocabulary import PARALLEL_DIMENSIONS

#: Parallel dimension name (one of :data:`harness.vocabulary.PARALLEL_DIMENSIONS`).
DimensionName = PARALLEL_DIMENSIONS.literal()
#: A group of processors a collective spans: distinct dimensions in vocabulary order.
Group = tuple[DimensionName, ...]

#: The layout (``ExecutionLayout``) field holding each dimension's degree.
DEGREE_FIELDS: dict[str, str] = {
    "tensor": "tensor_parallel",
    "pipeline": "pipeline_parallel",
    "data": "data_parallel",
    "context": "context_parallel",
    "expert": "expert_parallel",
    "expert_tensor": "expert_tensor_parallel",
}
PARALLEL_DIMENSIONS.require(DEGREE_FIELDS, "harness.ir.mesh.DEGREE_FIELDS", ordered=True)

TENSOR: Group = ("tensor",)
PIPELINE: Group = ("pipeline",)
DATA: Group = ("data",)
CONTEXT: Group = ("context",)


def group(*dimensions: str) -> Group:
    """The group of ``dimensions`` in vocabulary order (a ValueError for an unknown or repeated name)."""
    unknown = [d for d in dimensions if d not in PARALLEL_DIMENSIONS]
    if unknown or len(set(dimensions)) != len(dimensions):
        raise ValueError(f"a group names distinct parallel dimensions of {list(PARALLEL_DIMENSIONS)}, "
                         f"got {list(dimensions)}")
    return tuple(d for d in PARALLEL_DIMENSIONS if d in dimensions)


def degree(layout: Any, dimension: str) -> int:
    """The degree of ``dimension`` in ``layout`` (an absent optional degree is 1)."""
    value = getattr(layout, DEGREE_FIELDS[dimension])
    return 1 if value is None else value


def degrees(layout: Any) -> dict[str, int]:
    """Every dimension's degree, in vocabulary order."""
    return {d: degree(layout, d) for d in PARALLEL_DIMENSIONS}


#: The dimensions whose degrees multiply to the processors (every one that is not folded).
UNFOLDED = tuple(d for d in PARALLEL_DIMENSIONS if PARALLEL_DIMENSIONS.kind(d) != "folded")
EXPERT: Group = ("expert",)
EXPERT_TENSOR: Group = ("expert_tensor",)


def processors(layout: Any) -> int:
    """The product of the degrees of the dimensions that are not folded."""
    total = 1
    for d in UNFOLDED:
        total *= degree(layout, d)
    return total


def tier(layout: Any, dimension: str) -> int:
    """The network tier of ``dimension`` (``execution.network_tiers.<dimension>``); an optional tier that is
    absent is the tensor tier (its dimension then has degree 1: the layout checks refuse anything else)."""
    value = getattr(layout.network_tiers, dimension, None)
    return layout.network_tiers.tensor if value is None else value


def group_size(layout: Any, spans: Iterable[str]) -> int:
    """Processors in a group: the product of its dimensions' degrees."""
    size = 1
    for d in spans:
        size *= degree(layout, d)
    return size


def group_tier(layout: Any, spans: Group) -> int:
    """The network tier a message of the group travels on (module rules)."""
    return group_tier_of({d: degree(layout, d) for d in spans}, {d: tier(layout, d) for d in spans}, spans)


def gradient_group(layout: Any) -> Group:
    """The group a block's weight gradients are reduced over (and optimizer state is sharded over): the ranks
    that hold the same weights, every dimension that splits the batch or the sequence, not the weights: data,
    and data x context with context parallelism (Megatron-Core's data-parallel group with CP)."""
    return group("data", "context") if degree(layout, "context") > 1 else DATA


def group_tier_of(sizes: dict[str, int], tiers: dict[str, Any], spans: Group) -> Any:
    """:func:`group_tier` from per-dimension degrees and tiers; a tier may be a numpy array of placements
    (the search), then the result is one tier per placement."""
    used = [tiers[d] for d in spans if sizes.get(d, 1) > 1]
    if not used:
        return tiers[spans[0]]
    result = used[0]
    for t in used[1:]:
        result = _maximum(result, t)
    return result


def _maximum(a: Any, b: Any) -> Any:
    """The higher tier: of two ints, or elementwise where one is a numpy array of placements (the search's,
    so numpy is loaded: the estimate's tiers are ints and need no numpy)."""
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    import numpy as np

    return np.maximum(a, b)
