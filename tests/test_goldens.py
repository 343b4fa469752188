"""Reviewed goldens per case: IR digests, workload facts, components, memory.

Strict snapshots (syrupy, JSON under goldens/test_goldens/) for exact facts;
numeric regressions (pytest-regressions, CSV under goldens/test_goldens/)
with per-field tolerances written here for the timing components and memory
(budgets: floating-point reassociation for timing, one byte for memory). A
mismatch is reported in the failure itself (syrupy's diff; pytest-regressions'
table of obtained and expected values, with the obtained CSV under pytest's
temporary directory, ``<basetemp>/<test>_0/``); nothing is written next to the
goldens. Updates happen only through ``tox -e goldens`` and a reviewed commit.
"""

from __future__ import annotations

import re

import pytest

from harness.vocabulary import PORTABLE_COMPONENTS, TIER1_MEMORY_FIGURES

pytestmark = pytest.mark.baseline_regression

# Timing: floating-point reassociation only (far below the 1e-9 % budget).
COMPONENT_TOLERANCE = {"rtol": 1e-13, "atol": 1e-15}
# Memory: one byte.
MEMORY_TOLERANCE = {"rtol": 0.0, "atol": 1.0}


def test_ir_digests(case, lowering, golden_snapshot):
    first, second = lowering.checkpoints
    assert first.output_digest == second.input_digest == lowering.distributed.digest()
    assert golden_snapshot == {
        "digests": lowering.digests(),
        "checkpoints": [cp.to_data() for cp in lowering.checkpoints],
    }


def test_workload_facts(case, evidence_estimate, peak_only_estimate, golden_snapshot):
    workload = evidence_estimate.views["system_evidence"].workload
    assert workload == peak_only_estimate.views["peak_only"].workload, "workload facts must not depend on the view"
    assert golden_snapshot == workload.model_dump(mode="json")


def test_components(case, peak_only_estimate, evidence_estimate, num_regression):
    data = {}
    for est in (peak_only_estimate, evidence_estimate):
        (name, view), = est.views.items()
        comps = view.components_s.model_dump()
        assert comps["forward_offload"] == comps["backward_offload"] == 0, "no case offloads"
        data.update({f"{name}.{c}_s": [comps[c]] for c in PORTABLE_COMPONENTS})
        data[f"{name}.total_s"] = [view.total_s]
    num_regression.check(data, tolerances={k: COMPONENT_TOLERANCE for k in data})


def test_memory(case, evidence_estimate, num_regression):
    memory = evidence_estimate.views["system_evidence"].memory_bytes.model_dump()
    assert memory["tier2_total"] == 0, "no case offloads: nothing may live in memory tier 2"
    data = {f"{k}_bytes": [memory[k]] for k in TIER1_MEMORY_FIGURES}
    num_regression.check(data, tolerances={k: MEMORY_TOLERANCE for k in data})


def _syrupy_id(case_id: str) -> str:
    return re.sub(r"[^\w\-.]", "", case_id)


def _regressions_id(case_id: str) -> str:
    return re.sub(r"[\W]", "_", case_id)


def test_goldens_cover_exactly_the_cases(request):
    """Every case has its four goldens and no golden is left from a removed case or test."""
    from harness.pytest_plugin import _load_cases, goldens_dir

    directory = goldens_dir(request.config) / "test_goldens"
    ids = [c.id for c in _load_cases(request.config)]
    expected = set()
    for cid in ids:
        expected |= {f"test_ir_digests[{_syrupy_id(cid)}].json", f"test_workload_facts[{_syrupy_id(cid)}].json",
                     f"test_components_{_regressions_id(cid)}_.csv", f"test_memory_{_regressions_id(cid)}_.csv"}
    present = {p.name for p in directory.iterdir() if ".obtained" not in p.name}
    assert sorted(present - expected) == [], "unused goldens: delete them in a reviewed commit"
    assert sorted(expected - present) == [], "missing goldens: create them with `tox -e goldens`"
