"""Bad input: one line naming the file and the field; never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from harness.cases import load_case
from harness.errors import InputError

from conftest import CASES_DIR, ROOT

BASE = yaml.safe_load((CASES_DIR / "gpt3-175B_seqsel.yaml").read_text())


def _write(tmp_path, edit) -> str:
    data = yaml.safe_load(yaml.safe_dump(BASE))
    edit(data)
    path = tmp_path / "case.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _set(section, field, value):
    def edit(data):
        data[section][field] = value
    return edit


CASES = [
    (lambda d: d["execution"].update(bogus=1), "execution.bogus", "unknown field"),
    (lambda d: d["model"].pop("hidden"), "model.hidden", "required field is missing"),
    (_set("model", "hidden", 0), "model.hidden", "greater than 0"),
    (_set("execution", "tensor_parallel", 5), "execution.tensor_parallel", "does not divide model.hidden"),
    (_set("model", "attention_heads", 100), "execution.tensor_parallel", "does not divide model.attention_heads"),
    (_set("model", "feedforward", 49153), "execution.tensor_parallel", "does not divide model.feedforward"),
    (_set("model", "sequence_length", 2047), "execution.tp_communication", "does not divide"),
    (lambda d: d["execution"].update(recompute="full"), "execution.seq_par_ag_redo", "full recompute"),
    (_set("execution", "pipeline_interleaving", 5), "execution.pipeline_interleaving", "does not divide the 12"),
    (lambda d: d["execution"].update(global_batch=63, microbatch=2), "execution.microbatch", "not divisible into"),
    (_set("execution", "recompute", "sometimes"), "execution.recompute", "Input should be"),
]


@pytest.mark.parametrize("edit,field,message", CASES)
def test_invalid_case_names_file_and_field(tmp_path, edit, field, message):
    path = _write(tmp_path, edit)
    with pytest.raises(InputError) as info:
        load_case(path)
    text = str(info.value)
    assert text.startswith(f"{path}: {field}: ") and message in text and "\n" not in text


@pytest.mark.parametrize("field,value", [("tp_overlap", "ring"), ("tp_overlap", "pipe"),
                                         ("offload", {"weights": True, "activations": True, "optimizer": True})])
def test_overlap_and_offload_are_accepted(tmp_path, field, value):
    """They lower to a ConcretePlanIR (parity with Calculon: tests/test_concrete_parity.py)."""
    case = load_case(_write(tmp_path, _set("execution", field, value)))
    got = getattr(case.execution, field)
    assert (got.model_dump() if field == "offload" else got) == value


@pytest.mark.parametrize("changes,field,message", [
    ({"tensor_parallel": 1, "tp_overlap": "ring"}, "execution.tp_overlap", "needs tensor_parallel > 1"),
    ({"dp_overlap": True}, "execution.dp_overlap", "needs data_parallel > 1"),
    ({"training": False, "recompute": "none", "offload": {"optimizer": True}}, "execution.offload.optimizer",
     "needs training: true"),
])
def test_overlap_options_where_calculon_asserts_are_input_errors(tmp_path, changes, field, message):
    with pytest.raises(InputError) as info:
        load_case(_write(tmp_path, lambda d: d["execution"].update(changes)))
    assert info.value.field == field and message in info.value.message


def test_cli_prints_one_line_and_no_traceback(tmp_path):
    path = _write(tmp_path, _set("execution", "tensor_parallel", 7))
    run = subprocess.run([sys.executable, "-m", "harness", "estimate", path], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 2
    assert run.stderr.strip().count("\n") == 0 and "Traceback" not in run.stderr
    assert "execution.tensor_parallel" in run.stderr and path in run.stderr


def test_network_tier_outside_the_profile_is_an_input_error(tmp_path):
    from harness.estimate import estimate

    case = load_case(_write(tmp_path, lambda d: d["execution"]["network_tiers"].update(pipeline=5)))
    with pytest.raises(InputError, match="execution.network_tiers.pipeline: tier 5 does not exist"):
        estimate(case.estimate_input(), source="case.yaml")
