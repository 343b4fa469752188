"""A model that states its vocabulary: the output layer and loss as plan tasks, seen by every command.

Values are computed here from the rules (harness/passes/output_layer.py): tokens x hidden x local vocabulary
for the logit GEMMs, the counted bytes per logit for the loss; the trace's simulation is checked against the
closed form and the explanation's shares against the components they split."""

from __future__ import annotations

import json

import pytest

from harness.cases import load_case
from harness.cli import main
from harness.cost.views import COST_VIEWS, Pricer
from harness.errors import HarnessError
from harness.estimate import estimate_lowering
from harness.evidence.profile import load_profile
from harness.explain import by_task
from harness.interop.calculon_format import calculon_from_input
from harness.pipeline import lower
from harness.trace import build_trace

from harness.passes.output_layer import model_plan_tasks

from conftest import CASES_DIR, ROOT

SYSTEM, PEAK = COST_VIEWS["system_evidence"], COST_VIEWS["peak_only"]


def stated(name: str, vocabulary: int = 50257, system: str = "a100_measured"):
    data = load_case(CASES_DIR / f"{name}.yaml").estimate_input()
    return data.model_copy(update={"system": system, "model": data.model.model_copy(update={"vocabulary": vocabulary})})


def write_case(tmp_path, vocabulary) -> str:
    text = (CASES_DIR / "gpt3-175B_full.yaml").read_text()
    path = tmp_path / "case.yaml"
    path.write_text(text.replace("  blocks: 96\n", f"  blocks: 96\n  vocabulary: {vocabulary}\n"))
    assert "vocabulary" in path.read_text()
    return str(path)


def test_the_plan_facts_follow_the_rules():
    lowering = lower(stated("gpt3-175B_full", 32000))  # h 12288, seq 2048, microbatch 1, TP 8
    logits, loss = lowering.plan.output_tasks
    local = 32768 // 8  # 32000 padded to a multiple of 128 x 8 = 1024
    tokens = 2048
    assert logits.primitive == "linear" and logits.forward.operations == 2 * tokens * 12288 * local
    assert logits.forward.bytes_read == (tokens * 12288 + 12288 * local) * 2  # fp16 operands
    assert loss.primitive == "cross_entropy" and loss.forward.operations == 5 * tokens * local  # softmax's
    assert loss.forward.bytes_read + loss.forward.bytes_written == 38 * tokens * local
    assert loss.activation_grad.bytes_read + loss.activation_grad.bytes_written == 14 * tokens * local


def test_explain_by_task_lists_the_output_tasks_and_they_add_up():
    lowering = lower(stated("gpt3-175B_full"))
    profile = load_profile("a100_measured")
    mb = lowering.plan.schedule.microbatches
    for view in (SYSTEM, PEAK):
        tasks = by_task(lowering.plan, profile, view, model=lowering.model)
        pricer = Pricer(profile, view, "float16")
        logits, loss = lowering.plan.output_tasks
        for component in tasks.components:
            assert sum(t.time_s for t in component.tasks) == pytest.approx(component.time_s, rel=1e-9, abs=1e-15)
        forward = {t.task: t for c in tasks.components if c.component == "forward" for t in c.tasks}
        backward = {t.task: t for c in tasks.components if c.component == "backward" for t in c.tasks}
        assert forward["output.logits"].time_s == pytest.approx(mb * pricer.work(logits.forward).processing_s)
        assert forward["output.loss"].phase == "output"
        assert backward["output.logits"].time_s == pytest.approx(
            mb * (pricer.work(logits.activation_grad).processing_s + pricer.work(logits.weight_grad).processing_s))


def test_the_trace_draws_them_on_the_last_stage_and_the_simulation_matches_the_closed_form():
    for name in ("gpt3-175B_full", "megatron-22B_full"):  # PP 8 and PP 1
        lowering = lower(stated(name))
        profile = load_profile("a100_measured")
        doc, sim = build_trace(lowering.plan, profile, SYSTEM, model=lowering.model, task_microbatches=1)
        estimate = estimate_lowering(lowering, profile).views["system_evidence"].total_s
        assert sim.exact and sim.total_s == pytest.approx(estimate, rel=1e-9)
        outputs = [e for e in doc["traceEvents"] if e.get("cat") == "output"]
        last = lowering.plan.schedule.pipeline_parallel - 1
        assert {e["pid"] for e in outputs} == {last}
        assert [e["name"] for e in outputs if e["args"]["phase"] == "forward"] == \
               ["output.logits", "output.loss", "host.microbatch"]
        assert [e["name"] for e in outputs if e["args"]["phase"] == "backward"] == ["output.loss", "output.logits"]


def test_the_commands_read_a_case_with_a_vocabulary(tmp_path, capsys):
    case = write_case(tmp_path, 50257)
    assert main(["lower", case, "--stage", "portable"]) == 0
    text = capsys.readouterr().out
    assert "output layer, once per microbatch on the last stage" in text and "%output.loss = cross_entropy" in text
    assert main(["explain", case, "--by-task", "--json"]) == 0
    assert "output.logits" in capsys.readouterr().out
    assert main(["trace", case, "--output", str(tmp_path / "t.json")]) == 0
    assert any(e.get("cat") == "output" for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"])


@pytest.mark.parametrize("value, message", [(0, "greater than 0"), (2**24 + 1, "less than or equal to 16777216"),
                                            ("true", "valid integer")])
def test_a_bad_vocabulary_is_one_line_naming_the_field(tmp_path, capsys, value, message):
    assert main(["estimate", write_case(tmp_path, value)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model.vocabulary" in err and message in err, err


def test_calculon_has_no_vocabulary_so_such_a_configuration_is_not_translated():
    with pytest.raises(HarnessError, match="model.vocabulary: Calculon's model has no vocabulary"):
        calculon_from_input(stated("gpt3-175B_full", system="a100_80g"))


def test_recording_calculon_on_a_case_with_a_vocabulary_is_one_line_before_calculon_runs(tmp_path, capsys):
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "case.yaml").write_text(open(write_case(tmp_path, 50257)).read())
    vendor = tmp_path / "vendor"
    assert main(["oracle", "record", "--calculon-src", str(tmp_path / "no-checkout"), "--cases", str(cases),
                 "--output", "out.json", "--vendor", str(vendor)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{cases / 'case.yaml'}: model.vocabulary: Calculon's model has no vocabulary" \
        in err, err  # refused before the (missing) checkout is even looked at
    assert not vendor.exists()


def test_a_small_shape_gets_the_hand_computed_facts():
    data = load_case(CASES_DIR / "megatron-22B_full.yaml").estimate_input()
    shape = data.model.model_copy(update={"hidden": 64, "sequence_length": 16})
    execution = data.execution.model_copy(update={"microbatch": 2, "tensor_parallel": 2})
    logits, loss = model_plan_tasks(shape, execution, 1000)  # padded to 1024 (a multiple of 128 x 2): 512 per rank
    tokens, local = 32, 512
    assert (logits.forward.operations, logits.forward.bytes_read, logits.forward.bytes_written) == \
           (2_097_152, 69_632, 32_768)  # 2 x 32 x 64 x 512; (32x64 + 64x512) x 2 B; 32x512 x 2 B
    assert (logits.activation_grad.operations, logits.activation_grad.bytes_read,
            logits.activation_grad.bytes_written) == (2_097_152, 98_304, 4_096)  # reads dY and W, writes dX
    assert (logits.weight_grad.operations, logits.weight_grad.bytes_read,
            logits.weight_grad.bytes_written) == (2_097_152, 36_864, 65_536)  # reads X and dY, writes dW
    assert loss.forward.bytes_read + loss.forward.bytes_written == 38 * tokens * local == 622_592
    assert loss.activation_grad.bytes_read + loss.activation_grad.bytes_written == 14 * tokens * local == 229_376
    assert loss.weight_grad.operations == loss.weight_grad.bytes_read == loss.weight_grad.bytes_written == 0


def test_a_case_without_a_vocabulary_keeps_the_golden_digests_and_one_with_it_does_not(tmp_path):
    golden = json.loads((ROOT / "goldens" / "test_goldens" / "test_ir_digests[gpt3-175Bfull].json")
                        .read_text())["digests"]
    text = (CASES_DIR / "gpt3-175B_full.yaml").read_text()
    explicit = tmp_path / "null.yaml"
    explicit.write_text(text.replace("  blocks: 96\n", "  blocks: 96\n  vocabulary: null\n"))
    for path in (CASES_DIR / "gpt3-175B_full.yaml", explicit):
        low = lower(load_case(path).estimate_input())
        assert (low.model.digest(), low.distributed.digest(), low.plan.digest()) == \
               (golden["model_ir"], golden["distributed_task_ir"], golden["portable_plan_ir"])
    low = lower(load_case(write_case(tmp_path, 50257)).estimate_input())
    assert {low.model.digest(), low.distributed.digest(), low.plan.digest()}.isdisjoint(golden.values())


def test_lower_distributed_prints_the_output_tasks_with_the_padded_local_vocabulary(tmp_path, capsys):
    assert main(["lower", write_case(tmp_path, 50257), "--stage", "distributed"]) == 0
    text = capsys.readouterr().out  # gpt3-175B: microbatch 1 x sequence 2048 tokens, h 12288, TP 8: 51200 / 8
    assert "%output.logits = linear[forward](-) {2048 x 12288 . 12288 x 6400}" in text
    assert "%output.loss = cross_entropy[forward](output.logits) {tokens=2048 vocabulary=6400 participants=8}" in text
