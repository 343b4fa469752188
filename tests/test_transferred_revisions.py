"""Transferred revisions (harness.measurements.runs_transfer): b300_transferred and gb300_transferred, the
fitted megatron-core values of B200 and GB200 on the Blackwell Ultra data sheets."""

from __future__ import annotations

import pytest

from harness.evidence.profile import dump_profile, load_profile
from harness.measurements.runs_transfer import TRANSFERRED, source_values, transferred_revision

from conftest import ROOT, one_error_line, run_cli

#: What is not priced: the revision's name, its prose and how it was made.
PROSE = ("name", "description", "provenance", "fit")


def priced(profile) -> dict:
    return {key: value for key, value in profile.to_data().items() if key not in PROSE}


@pytest.mark.parametrize("name", sorted(TRANSFERRED))
def test_the_shipped_transferred_revisions_are_their_inputs_transferred(name):
    source, base = TRANSFERRED[name]
    again = transferred_revision(load_profile(source), load_profile(base), name)
    assert dump_profile(again) == (ROOT / "evidence" / f"{name}.yaml").read_text()
    shipped = load_profile(name)
    assert shipped.fit is None and "transferred" in shipped.description and source in shipped.provenance


@pytest.mark.parametrize("revision, base", [("b200_measured", "b200"), ("h100_measured", "h100_sxm_80g"),
                                            ("gb200_measured", "gb200_nvl72")])
def test_a_revision_transferred_onto_its_own_base_is_priced_as_the_revision(revision, base):
    """The transfer reads back every value a fit set, GB200's taken bf16 and NVLink values included: onto the
    data sheet a revision was fitted on, it gives that revision number for number (the fit's own output)."""
    fitted = load_profile(revision)
    assert fitted.fit.base_profile == base
    assert priced(transferred_revision(fitted, load_profile(base), "again")) == priced(fitted)


def test_the_values_taken_are_the_sources_fitted_and_taken_values():
    b200, gb200 = load_profile("b200_measured"), load_profile("gb200_measured")
    fitted = {p.name: p.value for p in b200.fit.parameters}
    assert source_values(b200) == fitted  # every fitted parameter, nothing else
    # GB200 fitted its fp8 efficiency and took bf16 and NVLink from B200 (its fit.fixed says so)
    assert source_values(gb200) == {"matrix_max_efficiency": fitted["matrix_max_efficiency"],
                                    "matrix_float8_max_efficiency": gb200.fit.parameters[0].value,
                                    "nvlink_efficiency": fitted["nvlink_efficiency"]}


def test_blackwell_ultra_keeps_its_own_data_sheet():
    """Peaks, capacities and bandwidths are the target's (the FP4 rate, HBM capacity and ConnectX-8 differ from
    B200's), efficiencies the source's."""
    transferred, base, source = load_profile("b300_transferred"), load_profile("b300"), load_profile("b200_measured")
    assert {dt: e.peak_flops_per_s for dt, e in transferred.matrix.items()} == {
        dt: e.peak_flops_per_s for dt, e in base.matrix.items()}
    assert transferred.matrix["float4"] == base.matrix["float4"]  # no shared run priced fp4: the data sheet's curve
    assert transferred.memory_tier1.capacity_bytes == 288 * 1024**3 > source.memory_tier1.capacity_bytes
    assert [t.bandwidth_bytes_per_s for t in transferred.networks] == [900e9, 100e9]
    assert transferred.networks[1] == base.networks[1]  # scale-out: the data sheet's, as every fitted revision's
    assert transferred.matrix["bfloat16"] == source.matrix["bfloat16"]
    assert transferred.networks[0].efficiency == source.networks[0].efficiency
    assert transferred.grouped_gemm == source.grouped_gemm


@pytest.mark.parametrize("argv, field", [
    (["--from", "a100_measured", "--base", "b300"], "--from"),  # fitted by another structure
    (["--from", "b300", "--base", "b300"], "--from"),  # never fitted
    (["--from", "b200_measured", "--base", "b200_measured"], "--base"),  # not a data sheet
    (["--from", "b200_measured", "--base", "a100_80g"], "--base"),  # no bfloat16 engine
    (["--from", "b200_missing", "--base", "b300"], "--from"),
    (["--from", "gb200_measured", "--base", "b300"], "--base"),  # an NVLink domain of 72 onto one of 8
])
def test_bad_transfers_are_one_line_errors_and_write_nothing(capsys, tmp_path, argv, field):
    output = tmp_path / "x_transferred.yaml"
    status, _, err = run_cli(capsys, "evidence", "transfer", *argv, "--output", output)
    one_error_line(status, err, field)
    assert not output.exists()


def test_the_command_writes_what_the_function_gives(capsys, tmp_path):
    output = tmp_path / "b300_again.yaml"
    status, out, _ = run_cli(capsys, "evidence", "transfer", "--from", "b200_measured", "--base", "b300",
                             "--output", output)
    assert status == 0 and "fitted to no run of this GPU" in out
    expected = transferred_revision(load_profile("b200_measured"), load_profile("b300"), "b300_again")
    assert output.read_text() == dump_profile(expected)
    status, _, err = run_cli(capsys, "evidence", "transfer", "--from", "b200_measured", "--base", "b300",
                             "--output", output)
    one_error_line(status, err, "--output")  # exists: --replace needed


@pytest.mark.parametrize("output", ["b300_again", "b300_again.yml", "b300_again.yaml.txt"])
def test_a_profile_output_must_be_named_NAME_yaml(capsys, tmp_path, output):
    """A profile is read from evidence/NAME.yaml: an output under any other name could never be loaded (fit,
    derive and transfer share the rule)."""
    status, _, err = run_cli(capsys, "evidence", "transfer", "--from", "b200_measured", "--base", "b300",
                             "--output", tmp_path / output)
    one_error_line(status, err, "--output")
    assert not any(tmp_path.iterdir())


def test_measured_all_to_all_curves_of_the_source_are_not_taken_for_the_fitted_value():
    """Only the structure's flat fitted curve is the parameter: a source whose tier 0 holds other all_to_all
    curves (nccl-tests sweeps of its own system) transfers no all-to-all value, and says nothing false."""
    from harness.evidence.families import CollectiveCurve, SizePoint

    b200 = load_profile("b200_measured")
    sweeps = (CollectiveCurve(participants=8, points=(SizePoint(size_bytes=1.0, efficiency=0.1),
                                                      SizePoint(size_bytes=1e6, efficiency=0.3)), source="a sweep"),)
    tier = b200.networks[0].model_copy(update={"measured_collectives": {"all_to_all": sweeps}})
    measured = b200.model_copy(update={"networks": (tier, *b200.networks[1:])})
    assert "nvlink_all_to_all_efficiency" not in source_values(measured)
    assert source_values(b200)["nvlink_all_to_all_efficiency"] == 0.178
