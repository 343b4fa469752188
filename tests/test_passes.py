"""Pass infrastructure: typed options, checkpoints, textual pipelines, sub-graph patterns."""

from __future__ import annotations

import dataclasses

import pytest

from harness.cases import load_case
from harness.errors import PassError
from harness.ir.distributed import LinearShape, PointwiseShape
from harness.passes import patterns
from harness.passes.base import parse_pipeline
from harness.passes.distribute import TransformerDistribute
from harness.passes.importer import import_model
from harness.passes.plan_work import TransformerPlanWork
from harness.pipeline import PASSES, PIPELINE, PIPELINE_SPEC, Lowering, lower, pipeline_pass, run_pipeline

from conftest import CASES_DIR


@pytest.fixture(scope="module")
def model():
    return import_model(load_case(CASES_DIR / "megatron-22B_seqsel.yaml").estimate_input())


def test_the_lowering_pipeline_is_named_in_text():
    assert PIPELINE_SPEC == "transformer-distribute,transformer-plan-work"
    assert PIPELINE == (TransformerDistribute(), TransformerPlanWork())
    assert ",".join(p.spec() for p in PIPELINE) == PIPELINE_SPEC
    assert pipeline_pass("transformer-plan-work") == TransformerPlanWork()
    with pytest.raises(KeyError, match="runs 0 passes named 'transformer-concretize'"):
        pipeline_pass("transformer-concretize")  # a pass of the layout, not of the pipeline


def test_options_are_typed_and_round_trip_through_the_spec():
    reordered = TransformerDistribute(block=("mlp", "attention"))
    assert reordered.spec() == "transformer-distribute{block=mlp,attention}"
    assert parse_pipeline(reordered.spec(), PASSES) == (reordered,)
    assert reordered.options() == {"block": ("mlp", "attention")}
    assert TransformerDistribute().options() == {} and TransformerDistribute().options(include_defaults=True) == {
        "block": ("attention", "mlp")}
    assert parse_pipeline(" transformer-distribute { block=attention } , transformer-plan-work ", PASSES) == (
        TransformerDistribute(block=("attention",)), TransformerPlanWork())


@pytest.mark.parametrize("spec, message", [
    ("transformer-distribute{block=attention,moe}", r"pass transformer-distribute: option block: \['attention', "
                                                    r"'moe'\] must name core slots of \['attention', 'mlp'\]"),
    ("transformer-distribute{depth=3}", r"pass transformer-distribute: unknown option 'depth' \(options: block\)"),
    ("transformer-distribute{block}", r"pass transformer-distribute: option 'block' has no value"),
    ("transformer-plan-work{block=mlp}", r"pass transformer-plan-work: unknown option 'block' \(options: none\)"),
    ("transformer-fuse", r"pass pipeline: unknown pass 'transformer-fuse' \(known: transformer-concretize, "
                         r"transformer-distribute, transformer-plan-work\)"),
    ("transformer-plan-work,transformer-distribute", r"pass pipeline: transformer-plan-work produces "
                                                     r"PortablePlanIR but transformer-distribute takes ModelIR"),
    ("transformer-distribute{{", r"pass pipeline: cannot parse"),
    ("", r"pass pipeline: no pass in an empty pipeline"),
])
def test_bad_pipelines_are_one_line_pass_errors(spec, message):
    with pytest.raises(PassError, match=message):
        parse_pipeline(spec, PASSES)


def test_option_types_are_checked_when_the_pass_is_built():
    with pytest.raises(PassError, match=r"option block: 'attention' is not a tuple of str"):
        TransformerDistribute(block="attention")
    with pytest.raises(PassError, match=r"option block: \(1, 2\) is not a tuple of str"):
        TransformerDistribute(block=(1, 2))


def test_a_checkpoint_records_the_options_that_differ_from_the_defaults(model):
    passes = parse_pipeline("transformer-distribute{block=mlp,attention},transformer-plan-work", PASSES)
    irs, checkpoints = run_pipeline(passes, model)
    assert [c.pass_options for c in checkpoints] == [{"block": ("mlp", "attention")}, {}]
    assert checkpoints[0].to_data()["pass_options"] == {"block": ["mlp", "attention"]}
    default = lower(load_case(CASES_DIR / "megatron-22B_seqsel.yaml").estimate_input())
    assert [c.pass_options for c in default.checkpoints] == [{}, {}]
    reordered = Lowering.of(passes, irs)
    assert reordered.checkpoints == checkpoints
    assert [t.name for t in reordered.distributed.tasks][:2] == ["mlp.fork", "mlp.layer_norm"]
    assert reordered.distributed.digest() != default.distributed.digest()
    # the same tasks in another order: the same block work
    assert sorted(t.name for t in reordered.plan.tasks) == sorted(t.name for t in default.plan.tasks)


def test_the_block_is_one_residual_sub_block_per_core_pattern(model):
    dist = TransformerDistribute(block=("attention",)).apply(model)
    forward = [t.name for t in dist.tasks if t.phase == "forward"]
    assert forward == ["attn.fork", "attn.layer_norm", "attn.tp_f", "attn.qkv_fork", "attn.query", "attn.key",
                       "attn.value", "attn.qk_matmul", "attn.softmax", "attn.probs_dropout", "attn.pv_matmul",
                       "attn.out_proj", "attn.tp_g", "attn.dropout", "attn.residual"]
    twice = TransformerDistribute(block=("attention", "attention"))
    with pytest.raises(PassError, match="duplicate task attn.fork"):
        twice.run(model)


def _with(model, shape=None, **execution):
    """``model`` with shape fields and execution fields replaced (validated like a case's)."""
    from harness.ir.model import ExecutionLayout, TransformerShape
    s = TransformerShape.model_validate({**model.shape.model_dump(), **(shape or {})})
    e = ExecutionLayout.model_validate({**model.execution.model_dump(), **execution})
    return model.model_copy(update={"shape": s, "execution": e})


def test_the_model_selects_the_core_patterns_through_the_ordinary_pipeline(model):
    """``mlp: swiglu`` lowers through the default pipeline (no option, no patched registry): the gated MLP
    pattern is selected, fc1 is the fused gate+up linear of width 2 x feedforward (Megatron-Core's linear_fc1)."""
    swiglu = _with(model, {"mlp": "swiglu"})
    irs, checkpoints = run_pipeline(PIPELINE, swiglu)
    lowering = Lowering.of(PIPELINE, irs)
    names = [t.name for t in lowering.distributed.tasks if t.phase == "forward"]
    assert names[-7:] == ["mlp.tp_f", "mlp.fc1", "mlp.swiglu", "mlp.fc2", "mlp.tp_g", "mlp.dropout", "mlp.residual"]
    s, e = model.shape, model.execution
    tokens = e.microbatch * s.sequence_length  # 4 x 2048
    fc1 = next(t for t in lowering.plan.tasks if t.name == "mlp.fc1")
    # 2 x tokens x hidden x (2 x feedforward / TP): 6144 x 24576 wide, TP 8
    assert fc1.forward.operations == 2 * 8192 * 6144 * (2 * 24576 // 8) == 2 * tokens * s.hidden * (
        2 * s.feedforward // e.tensor_parallel)
    act = next(t for t in lowering.plan.tasks if t.name == "mlp.swiglu")
    assert act.primitive == "swiglu" and act.forward.operations == 6 * 8192 * 24576 // 8
    assert checkpoints[0].pass_options == {}
    assert type(patterns.select(patterns.CORES["mlp"], swiglu.shape, swiglu.execution, "mlp")) is patterns.GatedMLP
    assert type(patterns.select(patterns.CORES["mlp"], s, e, "mlp")) is patterns.TwoLayerMLP


def test_ir_types_come_from_the_generic_base():
    from harness.ir.distributed import DistributedTaskIR
    from harness.ir.model import ModelIR
    from harness.ir.portable import PortablePlanIR

    assert TransformerDistribute.ir_types() == (ModelIR, DistributedTaskIR)
    assert TransformerPlanWork.ir_types() == (DistributedTaskIR, PortablePlanIR)
    assert dataclasses.is_dataclass(TransformerPlanWork) and not dataclasses.fields(TransformerPlanWork)


def test_a_core_without_an_overlapped_form_is_refused_under_tp_overlap(model):
    class NoOverlap(patterns.TwoLayerMLP):
        name = "no_overlap"

        emit_overlapped = patterns.CorePattern.emit_overlapped

    overlapped = _with(model, tp_overlap="ring")
    assert NoOverlap().unpriceable(overlapped.shape, overlapped.execution) == [
        ("execution.tp_overlap", "core pattern 'no_overlap' has no form under TP overlap")]
    assert patterns.TwoLayerMLP().unpriceable(overlapped.shape, overlapped.execution) == []
    assert TransformerDistribute().apply(overlapped).task("attn.qkv_ag").shape.kind == "overlapped_linear"
