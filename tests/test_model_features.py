"""Model features selected by the ModelIR (issue 19 item 4, issue 20 items 1, 2, 9), against hand-computed values.

Every figure below is computed by hand from the rule stated in docs/model-features.md and in
harness/passes/rules.py, on small shapes, never read back from the code under test.
"""

from __future__ import annotations

import pytest

from harness.cases import EstimateInput, validate_input
from harness.errors import InputError, UnsupportedFeatureError
from harness.interop.calculon_format import calculon_from_input
from harness.ir.model import ExecutionLayout, TransformerShape
from harness.pipeline import lower

SHAPE = dict(hidden=256, feedforward=1024, sequence_length=512, attention_heads=8, head_size=32, blocks=2)
LAYOUT = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=1, global_batch=2, microbatch=2,
              network_tiers={"tensor": 0, "pipeline": 0, "data": 0})


def data(shape=None, **execution) -> EstimateInput:
    return EstimateInput.model_validate({"model": {**SHAPE, **(shape or {})}, "execution": {**LAYOUT, **execution},
                                         "system": "a100_80g"})


def plan_task(lowering, name):
    return next(t for t in lowering.plan.tasks if t.name == name)


def forward_names(lowering):
    return [t.name for t in lowering.distributed.tasks if t.phase == "forward"]


def test_a_qkv_bias_under_tp_overlap_is_reported_as_unpriceable_naming_the_field():
    bad = data({"qkv_bias": True}, tensor_parallel=2, tp_overlap="ring")
    with pytest.raises(UnsupportedFeatureError, match=r"case.yaml: model.qkv_bias: a QKV bias has no form under TP "
                                                      r"overlap"):
        validate_input("case.yaml", bad)
    validate_input("case.yaml", data({"qkv_bias": True}, tensor_parallel=2))  # without overlap: priced


def test_calculon_translation_refuses_every_new_field_instead_of_dropping_it():
    for shape, execution, field in (({"mlp": "swiglu"}, {}, "model.mlp"), ({"kv_heads": 2}, {}, "model.kv_heads"),
                                    ({}, {"attention_kernel": "flash"}, "execution.attention_kernel")):
        with pytest.raises(InputError, match=f"x: {field}: Calculon's model has no such field"):
            calculon_from_input(data(shape, **execution), "x")
