"""a100_measured_fused_accumulation: a100_measured without family gradient_accumulation, derived, not fitted.

The shipped variant must be what ``harness evidence derive`` writes from the committed a100_measured (byte for byte),
and must price every case exactly as a100_measured minus the unfused accumulation, whose seconds are built here from
the model's weight shapes (tests/test_accumulation.py's hand count)."""

from __future__ import annotations

import json
import re

import pytest

from harness.cases import load_case
from harness.cli import main
from harness.commands.calibrate import DEFAULT_COMPARE
from harness.cost.views import COST_VIEWS, Pricer, profile_families
from harness.errors import EvidenceError
from harness.estimate import cost_view, estimate
from harness.evidence.derive import derive_profile
from harness.evidence.profile import dump_profile, load_profile, parse_profile
from harness.explain import attribute
from harness.pipeline import lower

from conftest import CASES_DIR, ROOT
from test_accumulation import hand_block_s
from test_hostile_inputs import one_error_line, run

NAME, SOURCE = "a100_measured_fused_accumulation", "a100_measured"
SHIPPED = ROOT / "evidence" / f"{NAME}.yaml"
SYSTEM = COST_VIEWS["system_evidence"]


@pytest.fixture(scope="module")
def profiles():
    return load_profile(SOURCE), load_profile(NAME)


def test_rederiving_from_the_committed_source_reproduces_the_shipped_variant_byte_for_byte(profiles, tmp_path,
                                                                                          capsys):
    source, variant = profiles
    assert variant.derived.source_profile == SOURCE and variant.derived.without == ("gradient_accumulation",)
    assert variant.derived.source_revision == source.revision()  # derived from the committed revision, not another
    output = tmp_path / f"{NAME}.yaml"
    status, out, err = run(capsys, "evidence", "derive", "--from", SOURCE, "--without", "gradient_accumulation",
                           "--reason", variant.derived.reason, "--output", output)
    assert status == 0, err
    assert output.read_bytes() == SHIPPED.read_bytes()
    assert variant.revision() in out
    assert dump_profile(derive_profile(source, ("gradient_accumulation",), NAME, variant.derived.reason)) == \
           SHIPPED.read_text()


def test_the_variant_is_the_source_without_the_family_and_nothing_else(profiles):
    source, variant = profiles
    changed = {"name", "description", "provenance", "derived"}
    expected = source.model_copy(update={"gradient_accumulation": None}).to_data()
    got = variant.to_data()
    assert {k: v for k, v in got.items() if k not in changed} == {k: v for k, v in expected.items()
                                                                    if k not in changed}
    assert got["fit"] == source.to_data()["fit"]  # the source's fit, unchanged (parameters and all)
    assert "gradient_accumulation" not in got and "gradient_accumulation" in source.to_data()
    assert profile_families(variant) == profile_families(source)[:-1]
    assert variant.provenance.startswith(f"Derived by 'harness evidence derive' from {SOURCE} (revision "
                                         f"{source.revision()[:12]}) without family gradient_accumulation")


def test_a_multi_microbatch_iteration_costs_the_source_minus_its_accumulation(profiles):
    source, variant = profiles
    low = lower(load_case(CASES_DIR / "gpt3-175B_full.yaml").estimate_input())  # 64 microbatches, see below
    s = low.plan.schedule
    assert (s.microbatches, s.blocks_per_stage, s.blocks_per_chunk, s.pipeline_parallel) == (64, 12, 4, 8)
    a = hand_block_s(Pricer(source, SYSTEM, "float16"), 12288, 49152, 8)  # one block's adds on one TP rank
    _, with_adds = cost_view(low.plan, source, SYSTEM, model=low.model)
    _, fused = cost_view(low.plan, variant, SYSTEM, model=low.model)
    assert with_adds.total_s - fused.total_s == pytest.approx((63 * 12 + 7 * 4) * a, rel=1e-9)
    assert with_adds.components_s["backward"] - fused.components_s["backward"] == pytest.approx(63 * 12 * a,
                                                                                                rel=1e-9)
    others = set(fused.components_s) - {"backward", "pipeline_bubble"}
    assert {k: fused.components_s[k] for k in others} == {k: with_adds.components_s[k] for k in others}


def test_one_microbatch_prices_identically_under_both(profiles):
    source, variant = profiles
    low = lower(load_case(CASES_DIR / "megatron-22B_full.yaml").estimate_input())
    assert low.plan.schedule.microbatches == 1
    assert cost_view(low.plan, variant, SYSTEM, model=low.model)[1] == cost_view(low.plan, source, SYSTEM,
                                                                                  model=low.model)[1]


def test_every_command_accepts_it(profiles, tmp_path, capsys):
    from harness.interop.calculon_format import calculon_from_input

    data = load_case(CASES_DIR / "gpt3-175B_full.yaml").estimate_input().model_copy(update={"system": NAME})
    expected = estimate(data).views["system_evidence"].total_s
    low = lower(data)
    assert expected == cost_view(low.plan, profiles[1], SYSTEM, model=low.model)[1].total_s
    m, e = calculon_from_input(data)
    batch = tmp_path / "batch.jsonl"
    batch.write_text(json.dumps({"id": "x", "model": m, "execution": e, "system": NAME}) + "\n")
    status, _, err = run(capsys, "estimate", "--calculon-batch", batch, "--output", tmp_path / "out.json")
    assert status == 0, err
    line = json.loads((tmp_path / "out.json").read_text())[0]
    assert line["status"] == "ok" and line["views"]["system_evidence"]["total_s"] == expected
    case = tmp_path / "case.yaml"
    case.write_text((CASES_DIR / "gpt3-175B_full.yaml").read_text().replace("system: a100_80g", f"system: {NAME}"))
    status, out, err = run(capsys, "estimate", "--json", case)
    assert status == 0, err
    assert json.loads(out)[0]["views"]["system_evidence"]["total_s"] == expected
    status, out, err = run(capsys, "explain", "--json", case)
    assert status == 0, err
    split = attribute(low, profiles[1])
    assert "gradient_accumulation" not in split.attribution_s
    assert json.loads(out)[0]["system_evidence_total_s"] == expected


def test_calibrate_compares_both_measured_profiles_by_default():
    assert DEFAULT_COMPARE == (SOURCE, NAME)


@pytest.mark.parametrize("argv, needles", [
    (["--from", "nope", "--without", "gradient_accumulation"], ("--from", "no evidence profile named 'nope'")),
    (["--from", "../a100_measured", "--without", "gradient_accumulation"], ("--from", "never a path")),
    (["--from", "a100_80g", "--without", "gradient_accumulation"], ("--without", "a100_80g does not define")),
    (["--from", SOURCE, "--without", "matrix"], ("--without", "'matrix' is not a measured family")),
    (["--from", SOURCE, "--without", "launch"], ("--without", "launch.issue_s_per_operation", "refit")),
    (["--from", SOURCE, "--without", "hierarchical", "hierarchical"], ("--without", "named twice")),
    (["--from", NAME, "--without", "partitioned_p2p"], ("--from", "itself derived from a100_measured")),
    (["--from", SOURCE, "--without", "gradient_accumulation", "--reason", " "], ("--reason", "one non-empty line")),
    (["--from", SOURCE, "--without", "gradient_accumulation", "--name", SOURCE], ("--name", "a name of its own")),
])
def test_bad_derive_arguments_are_one_line_errors_and_write_nothing(argv, needles, tmp_path, capsys):
    name = next((argv[i + 1] for i, a in enumerate(argv) if a == "--name"), "x")
    output = tmp_path / f"{name}.yaml"
    reason = [] if "--reason" in argv else ["--reason", "why"]
    one_error_line(*run(capsys, "evidence", "derive", *argv, *reason, "--output", output)[::2], *needles)
    assert not output.exists()


def test_an_existing_output_is_replaced_only_with_replace(tmp_path, capsys):
    output = tmp_path / "x.yaml"
    output.write_text("keep")
    argv = ["evidence", "derive", "--from", SOURCE, "--without", "gradient_accumulation", "--reason", "why",
            "--output", output]
    one_error_line(*run(capsys, *argv)[::2], str(output), "--replace")
    assert output.read_text() == "keep"
    assert run(capsys, *argv, "--replace")[0] == 0
    assert load_profile("x", tmp_path).derived.without == ("gradient_accumulation",)


def test_a_derived_block_that_contradicts_the_profile_is_refused_naming_the_file_and_field():
    text = SHIPPED.read_text().replace("partitioned_p2p:\n  kind: slice_then_all_gather\n",
                                       "partitioned_p2p:\n  kind: slice_then_all_gather\n"
                                       "gradient_accumulation:\n  kind: unfused_in_place_add\n", 1)
    assert "gradient_accumulation:\n  kind" in text
    with pytest.raises(EvidenceError, match=r"derived\.without names 'gradient_accumulation', which the profile "
                                            r"defines") as error:
        parse_profile(text.encode(), str(SHIPPED), NAME)
    assert str(SHIPPED) in str(error.value)


@pytest.mark.parametrize("edit, message", [
    # the body prices 0.45693; --fixed-from read 0.9, transfer 0.45693 (hostile-input probe)
    ({"value": 0.9}, "value 0.9 is not what the profile prices at 'matrix.bfloat16.operation_size_efficiency."
                     "saturating.max_efficiency' (0.45693)"),
    ({"path": "matrix.bfloat16.nowhere"}, "path 'matrix.bfloat16.nowhere' names no field of the profile"),
    ({"lower": 0.5}, "value 0.45693 outside its bounds [0.5, 0.95]"),
    ({"upper": 0.1}, "value 0.45693 outside its bounds [0.2, 0.1]"),
    ({"standard_error": -0.01}, "standard_error -0.01 is negative"),
])
def test_a_fit_block_that_is_not_the_body_is_refused_naming_the_parameter(tmp_path, edit, message):
    """A fitted parameter states what the profile prices (harness.evidence.profile, _fit_is_the_body)."""
    import yaml

    from harness.errors import HarnessError
    from harness.evidence.profile import load_profile

    data = yaml.safe_load((ROOT / "evidence" / "b200_measured.yaml").read_text())
    data["name"] = "b200_edited"
    data["fit"]["parameters"][0].update(edit)
    (tmp_path / "b200_edited.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(HarnessError, match="fit.parameters.0 \\(matrix_max_efficiency\\): " + re.escape(message)):
        load_profile("b200_edited", tmp_path)
    data["fit"]["parameters"][4]["value"] = 0.2  # the flat all-to-all curve holds 0.178 at its point
    data["fit"]["parameters"][0] = yaml.safe_load((ROOT / "evidence" / "b200_measured.yaml").read_text())["fit"][
        "parameters"][0]
    (tmp_path / "b200_edited.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(HarnessError, match="fit.parameters.4 \\(nvlink_all_to_all_efficiency\\): value 0.2 is not"):
        load_profile("b200_edited", tmp_path)
