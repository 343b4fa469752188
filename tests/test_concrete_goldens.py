"""Reviewed goldens of the ConcretePlanIR: its digest and pass checkpoint, per case.

One syrupy snapshot (JSON under goldens/test_concrete_goldens/) per case of
``cases/`` (the ConcretePlanIR without concurrency that their estimates are
projected from) and per case of ``cases/concurrency/`` (TP/DP overlap and
offload layouts; outside the baseline contract, whose case list is
``cases/*.yaml``). The goldens of ``tests/test_goldens.py`` (digests of the
first three IRs, workload, components, memory) are separate files and do not
change. Updates only through ``tox -e goldens`` and a reviewed commit.
"""

from __future__ import annotations

import re

import pytest

from harness.cases import load_cases
from harness.pipeline import lower

from conftest import CASES_DIR

pytestmark = pytest.mark.baseline_regression

CONCURRENCY_DIR = CASES_DIR / "concurrency"
CONCURRENCY_CASES = load_cases(CONCURRENCY_DIR)


def _snapshot(lowering) -> dict:
    concrete, checkpoint = lowering.concretize()
    assert checkpoint.input_digest == lowering.plan.digest() and checkpoint.output_digest == concrete.digest()
    return {"digest": concrete.digest(), "checkpoint": checkpoint.to_data()}


def test_concrete_plan_ir_digest(case, lowering, golden_snapshot):
    assert not lowering.concurrent, "a case of cases/ has no TP/DP overlap or offload (they live in cases/concurrency)"
    assert golden_snapshot == _snapshot(lowering)


@pytest.mark.parametrize("case_file", CONCURRENCY_CASES, ids=[c.id for c in CONCURRENCY_CASES])
def test_concurrency_concrete_plan_ir_digest(case_file, golden_snapshot):
    lowering = lower(case_file.estimate_input(), case_file.id)
    assert lowering.concurrent
    assert golden_snapshot == _snapshot(lowering)


def test_concurrency_cases_stay_out_of_the_contract():
    """The baseline contract, the plugin's ``case`` fixture and the experiment read ``cases/*.yaml`` only."""
    from harness.experiment.contract import load_contract

    contract_ids = set(load_contract()["portable_plan_digests"])
    top = {c.id for c in load_cases(CASES_DIR)}
    assert contract_ids == top
    assert not {c.id for c in CONCURRENCY_CASES} & top


def test_concrete_goldens_cover_exactly_the_cases(request):
    """Every case has its ConcretePlanIR golden and no golden is left from a removed case."""
    from harness.pytest_plugin import goldens_dir

    directory = goldens_dir(request.config) / "test_concrete_goldens"
    ids = {f"test_concrete_plan_ir_digest[{c.id}]" for c in load_cases(CASES_DIR)}
    ids |= {f"test_concurrency_concrete_plan_ir_digest[{c.id}]" for c in CONCURRENCY_CASES}
    expected = {re.sub(r"[^\w\-.\[\]]", "", name) + ".json" for name in ids}
    present = {p.name for p in directory.iterdir() if ".obtained" not in p.name}
    assert sorted(present - expected) == [], "unused goldens: delete them in a reviewed commit"
    assert sorted(expected - present) == [], "missing goldens: create them with `tox -e goldens`"
