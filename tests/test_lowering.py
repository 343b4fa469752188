"""The lowering pipeline: structure, clones, digests, checkpoints, pass errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from harness.cases import load_case
from harness.errors import PassError
from harness.ir.distributed import DistributedTaskIR
from harness.passes.distribute import TransformerDistribute
from harness.passes.plan_work import TransformerPlanWork
from harness.pipeline import lower

from conftest import CASES_DIR, ROOT


def _lower(name: str, **execution):
    case = load_case(CASES_DIR / f"{name}.yaml")
    data = case.estimate_input()
    if execution:
        data = data.model_copy(update={"execution": data.execution.model_copy(update=execution)})
    return lower(data)


def test_block_primitives_and_explicit_collectives():
    dist = _lower("megatron-22B_full").distributed
    forward = [t for t in dist.tasks if t.phase == "forward"]
    kinds = [t.shape.kind for t in forward]
    assert kinds.count("linear") == 6 and kinds.count("batch_matmul") == 2
    assert kinds.count("tp_collective") == 4 and kinds.count("layer_norm") == 2
    g = dist.task("attn.tp_g").shape
    assert (g.base_forward, g.base_backward) == ("all_reduce", None)


def test_full_recompute_clones_every_forward_compute_task():
    dist = _lower("megatron-22B_full").distributed
    compute = {t.name for t in dist.tasks if t.phase == "forward" and t.shape.kind != "tp_collective"}
    clones = {t.clone_of for t in dist.tasks if t.phase == "recompute"}
    assert clones == compute
    # full recomputation repeats the g all-reduces as recommunication
    assert {t.clone_of for t in dist.tasks if t.phase == "recommunication"} == {"attn.tp_g", "mlp.tp_g"}


def test_attn_only_clones_qk_softmax_dropout_and_ag_redo_is_its_own_task():
    dist = _lower("megatron-22B_seqsel").distributed
    recomputed = {t.clone_of for t in dist.tasks if t.phase == "recompute"}
    assert recomputed == {"attn.qk_matmul", "attn.softmax", "attn.probs_dropout", "attn.qkv_fork"}
    redo = [t for t in dist.tasks if t.phase == "recommunication"]
    assert {t.clone_of for t in redo} == {"attn.tp_f", "mlp.tp_f"}
    assert all(t.shape.base_forward == "all_gather" for t in redo)
    # the recompute sub-DAG consumes the redone all-gather
    assert dist.task("recompute/attn.qkv_fork").depends_on == ("recommunication/attn.tp_f",)


def test_p2p_rs_ag_splits_only_in_the_edge_block():
    g = _lower("megatron-22B_full", tp_communication="p2p_rs_ag").distributed.task("attn.tp_g").shape
    assert (g.base_forward, g.edge_forward) == ("all_reduce", "reduce_scatter")


def test_tp1_has_no_collectives_and_inference_has_no_clones():
    assert not any(t.shape.kind == "tp_collective" for t in _lower("megatron-22B_full", tensor_parallel=1,
                                                                     recompute="none").distributed.tasks)
    inference = _lower("inference_megatron-22B_ar")
    assert {t.phase for t in inference.distributed.tasks} == {"forward"}
    assert all(t.activation_grad.operations == 0 for t in inference.plan.tasks)


def test_multiquery_shrinks_key_and_value():
    dist = _lower("megatron-22B_full", attention="multiquery").distributed
    assert dist.task("attn.key").shape.k == 96 and dist.task("attn.query").shape.k == 64 * 96 // 8


def test_checkpoints_chain_the_digests():
    low = _lower("gpt3-175B_seqsel")
    first, second = low.checkpoints
    assert first.pass_name == "transformer-distribute" and second.pass_name == "transformer-plan-work"
    assert first.input_digest == low.model.digest()
    assert first.output_digest == second.input_digest == low.distributed.digest()
    assert second.output_digest == low.plan.digest()


def test_digests_change_with_any_input():
    base = _lower("gpt3-175B_seqsel").digests()
    for change in (dict(microbatch=2, global_batch=128), dict(fused_activation=True), dict(datatype="bfloat16")):
        other = _lower("gpt3-175B_seqsel", **change).digests()
        assert all(other[k] != base[k] for k in base), change


def test_digests_are_identical_across_processes():
    code = ("from harness.cases import load_case; from harness.pipeline import lower; "
            f"print(lower(load_case({str(CASES_DIR / 'turing-530B_seqsel.yaml')!r}).estimate_input()).digests())")
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                           env={"PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert len(runs) == 1
    assert str(_lower("turing-530B_seqsel").digests()) == runs.pop().strip()


def test_pass_invariant_violation_names_the_pass():
    dist = _lower("megatron-22B_full").distributed
    broken = dist.model_copy(update={"tasks": dist.tasks[1:]})  # drops attn.fork, which others depend on
    with pytest.raises(PassError, match="pass transformer-distribute: task attn.layer_norm depends on unknown"):
        TransformerDistribute().ensures(broken)
    with pytest.raises(PassError, match="pass transformer-plan-work: .*no tasks"):
        TransformerPlanWork().requires(DistributedTaskIR(shape=dist.shape, execution=dist.execution, tasks=()))


def test_a_copied_artifact_gets_its_own_digest():
    from harness.evidence import load_profile

    profile = load_profile("a100_80g")
    revision = profile.revision()
    moved = profile.model_copy(update={"processing_mode": "roofline"})
    assert moved.revision() != revision and profile.revision() == revision
    assert moved.revision() == type(profile).model_validate(moved.model_dump()).revision()


def test_distribute_requires_a_valid_layout_whoever_built_the_model_ir():
    model = _lower("megatron-22B_full").model
    bad = model.model_copy(update={"execution": model.execution.model_copy(update={"tensor_parallel": 7})})
    with pytest.raises(PassError, match="pass transformer-distribute: execution.tensor_parallel: TP=7"):
        TransformerDistribute().requires(bad)


@pytest.mark.parametrize("stage", ["model", "distributed", "portable"])
def test_lower_prints_the_canonical_text_its_digest_is_computed_from(stage, capsys):
    """sha256(the printed canonical text) is the digest the other two forms print (checked with hashlib)."""
    import hashlib
    import json as json_module

    from harness.cli import main

    case = str(CASES_DIR / "megatron-22B_seqsel.yaml")
    assert main(["lower", case, "--stage", stage, "--canonical"]) == 0
    text = capsys.readouterr().out
    assert text.endswith("}\n") and text.count("\n") == 1
    assert main(["lower", case, "--stage", stage, "--json"]) == 0
    wrapped = json_module.loads(capsys.readouterr().out)
    assert hashlib.sha256(text[:-1].encode()).hexdigest() == wrapped["digest"]
    assert json_module.loads(text) == wrapped["ir"]
    assert main(["lower", case, "--stage", stage]) == 0
    assert capsys.readouterr().out.rstrip().endswith(f"sha256:{wrapped['digest']}")


def test_an_estimate_without_digests_has_the_same_figures_and_writes_no_plan_text():
    """``estimate(..., digests=False)`` (the batch, whose entries report no digest) gives the same figures and
    never digests the DistributedTaskIR or the PortablePlanIR (the lowering's checkpoints are derived on demand);
    the default estimate reports the lowering's three digests."""
    from harness.estimate import clear_caches, estimate

    data = load_case(CASES_DIR / "megatron-22B_seqsel.yaml").estimate_input()
    clear_caches()
    quick = estimate(data, digests=False)
    low = lower(data)  # the session's lowering, the one the estimate used
    assert quick.digests is None
    assert low.distributed.__pydantic_private__["_digest"] is None
    assert low.plan.__pydantic_private__["_digest"] is None
    full = estimate(data)
    assert full.digests == {"model_ir": low.model.digest(), "distributed_task_ir": low.distributed.digest(),
                            "portable_plan_ir": low.plan.digest()}
    assert full.model_dump(exclude={"digests"}) == quick.model_dump(exclude={"digests"})
    assert [c.output_digest for c in low.checkpoints] == [low.distributed.digest(), low.plan.digest()]
