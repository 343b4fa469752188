"""The processor mesh (harness.ir.mesh): groups, their size and tier, and what derives from them.

Values are hand-computed from the rules in the module docstring."""

from __future__ import annotations

import numpy as np
import pytest

from harness.ir import mesh
from harness.ir.distributed import SHAPE_OF, exchange
from harness.ir.model import ExecutionLayout
from harness.passes.concretize import TransformerConcretize
from harness.passes.plan_work import TransformerPlanWork
from harness.passes.rules import RULES
from harness.vocabulary import PARALLEL_DIMENSIONS


def layout(**changes) -> ExecutionLayout:
    values = dict(tensor_parallel=8, pipeline_parallel=1, data_parallel=4, global_batch=64, microbatch=1,
                  network_tiers={"tensor": 0, "pipeline": 1, "data": 2})
    values.update(changes)
    return ExecutionLayout(**values)


def test_a_group_travels_on_the_highest_tier_of_its_sending_dimensions():
    e = layout()
    assert mesh.group_size(e, ("tensor", "data")) == 32
    assert mesh.group_tier(e, ("tensor", "data")) == 2
    assert mesh.group_tier(e, ("tensor", "pipeline")) == 0  # PP = 1 sends nothing: it does not count
    assert mesh.group_tier(e, ("pipeline",)) == 1  # nothing sends: the first dimension's tier
    assert mesh.processors(e) == 32 == e.processors


def test_group_tiers_of_placements_are_elementwise():
    tiers = {"tensor": np.array([0, 1, 0]), "data": np.array([1, 0, 0])}
    got = mesh.group_tier_of({"tensor": 8, "data": 4}, tiers, ("tensor", "data"))
    assert got.tolist() == [1, 1, 0]


def test_a_group_names_distinct_dimensions_in_vocabulary_order():
    assert mesh.group("data", "tensor") == ("tensor", "data")
    with pytest.raises(ValueError):
        mesh.group("data", "data")
    with pytest.raises(ValueError):
        mesh.group("expert_sideways")


def test_every_primitive_says_how_it_communicates():
    assert set(RULES) == set(SHAPE_OF)
    assert exchange("tp_collective") == "collective" and exchange("overlapped_linear") == "tiled"
    assert exchange("context_exchange") == "ring" and SHAPE_OF["context_exchange"].GROUP == ("context",)
    experts = {"expert_all_to_all": ("expert",), "expert_tp_collective": ("expert_tensor",),
               "expert_gather": ("expert", "expert_tensor"),  # the MoE dispatcher's collectives
               "context_all_to_all": ("context",)}  # Ulysses context parallelism's
    others = set(RULES) - {"tp_collective", "overlapped_linear", "context_exchange", *experts}
    assert {exchange(k) for k in others} == {"none"}
    for kind in ("tp_collective", "overlapped_linear"):
        assert SHAPE_OF[kind].GROUP == ("tensor",)
    for kind, group in experts.items():
        assert exchange(kind) == "collective" and SHAPE_OF[kind].GROUP == group


def test_the_concretize_pass_has_one_tier_option_per_dimension():
    options = TransformerConcretize().options(include_defaults=True)
    assert {f"{d}_tier" for d in PARALLEL_DIMENSIONS} <= set(options)
    # the optional dimensions absent: on the tensor tier (harness.ir.mesh.tier)
    assert TransformerConcretize.for_layout(layout()).tiers() == {"tensor": 0, "pipeline": 1, "data": 2, "context": 0,
                                                                  "expert": 0, "expert_tensor": 0}


def test_the_lowering_key_ignores_exactly_what_relayout_changes():
    key = TransformerPlanWork.lowering_key
    assert key(layout()) == key(layout(pipeline_interleaving=2))
    assert key(layout(tensor_parallel=2, tp_overlap="ring")) == key(layout(tensor_parallel=2, tp_overlap="pipe"))
    assert key(layout(tensor_parallel=2, tp_overlap="ring")) != key(layout(tensor_parallel=2))
    assert key(layout()) != key(layout(dp_overlap=True))
    assert key(layout()) != key(layout(recompute="full"))


SHAPE = dict(hidden=64, feedforward=256, sequence_length=32, attention_heads=8, head_size=8, blocks=2)


def test_messages_take_their_group_s_size_and_tier():
    from harness.cases import EstimateInput
    from harness.pipeline import lower

    plan = lower(EstimateInput(model=SHAPE, execution=layout(tensor_parallel=2, pipeline_parallel=2,
                                                               data_parallel=2, global_batch=8),
                               system="a100_80g")).plan
    tp = [t.messages for t in plan.tasks if t.messages is not None]
    assert tp and all(m.spans == ("tensor",) and m.forward_base is None or m.forward_base.network_tier == 0
                      for m in tp)
    assert {m.backward_base.participants for m in tp if m.backward_base} == {2}
    assert plan.pipeline.forward.network_tier == 1 and plan.pipeline.forward.participants == 2
    dp = plan.data_parallel
    assert dp.spans == ("data",) and [(m.network_tier, m.participants) for m in dp.messages] == [(2, 2)]
    assert [(u.dimension, u.network_tier, u.group_size) for u in plan.network_use] == [
        ("tensor", 0, 2), ("pipeline", 1, 2), ("data", 2, 2)]
