"""The shipped a100_measured revision: reproducible from the committed corpora, and how well it generalizes.

Slow (a refit, and forty refits for the seven cross-validations: a few minutes); ``tox -e measured`` runs the
same report and writes its plots.
"""

from __future__ import annotations

import pytest

from harness.evidence.profile import load_profile
from harness.measurements.experiment import Budgets, fit_revision, load_inputs, run_report
from harness.measurements.korthikanti import import_table4, import_table5
from harness.measurements.corpus import corpus_text
from harness.measurements.vtrain import header as vtrain_header, import_vtrain

from conftest import CASES_DIR, REFERENCE_DIR, ROOT

pytestmark = pytest.mark.slow

FIT_CORPORA = [ROOT / "measurements" / "vtrain" / "vtrain-a100.jsonl",
               ROOT / "measurements" / "vtrain" / "vtrain-allreduce-a100.jsonl"]
CHECKS = [ROOT / "measurements" / "korthikanti22.jsonl"]
SHARED = REFERENCE_DIR / "measurements"


def test_refitting_the_committed_corpora_reproduces_the_shipped_digest():
    shipped = load_profile("a100_measured")
    inputs = load_inputs(FIT_CORPORA)
    refit = fit_revision(inputs, load_profile("a100_80g"), "a100_measured")
    assert refit.profile.revision() == shipped.revision()
    assert refit.evaluator_rel <= 1e-9


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"{SHARED}: the shared measurements are not installed")
def test_the_importers_reproduce_the_committed_corpora_from_the_shared_files():
    vtrain = SHARED / "vtrain"
    records = import_vtrain([vtrain / "single-node-train.csv", vtrain / "multi-node-train.csv"])
    assert corpus_text(vtrain_header(), records) == FIT_CORPORA[0].read_text()
    table = import_table4(SHARED / "korthikanti22-table4.json") + import_table5(CASES_DIR)
    assert [r.id for r in table] == [f"table4-row-{i}" for i in range(1, 6)] + [f"table5-row-{i}" for i in range(1, 9)]


@pytest.fixture(scope="module")
def report():
    return run_report(load_inputs(FIT_CORPORA), load_profile("a100_80g"), load_profile("a100_measured"),
                      "a100_measured", checks=load_inputs(CHECKS, fitting=False))


@pytest.mark.parametrize("grouping", ["shape", "processors"])
def test_cross_validated_mape_is_within_the_budgets(report, grouping):
    budgets = Budgets()
    classes = report["cross_validation"][grouping]["classes"]
    assert classes["one_node"]["mape_pct"] <= budgets.one_node_mape_pct
    assert classes["multi_node"]["mape_pct"] <= budgets.multi_node_mape_pct
    assert abs(classes["one_node"]["bias_pct"]) <= budgets.abs_bias_pct


@pytest.mark.parametrize("grouping", ["shape", "processors"])
def test_cross_validated_multi_node_bias_is_within_the_budget(report, grouping):
    # budget +-3 % (issue 13); revision 3 holds it out at -2.7 % (revision 2: -3.03 %, an xfail)
    assert abs(report["cross_validation"][grouping]["classes"]["multi_node"]["bias_pct"]) <= Budgets().abs_bias_pct


def test_the_harder_cross_validations_are_reported_for_every_record_they_hold_out(report):
    cross = report["cross_validation"]
    assert set(cross) == {"shape", "processors", "hidden", "blocks", "tensor_parallel", "microbatch", "multi_node"}
    rows = report["rows"]
    multi = [r for r in rows if r["class"] == "multi_node"]
    # fit one node only: every multi-node row is predicted, no one-node row is held out
    assert all(r["cv_multi_node_s"] is not None for r in multi)
    assert all(r["cv_multi_node_s"] is None for r in rows if r["class"] == "one_node")
    assert cross["multi_node"]["classes"]["multi_node"]["count"] == len(multi) == 73
    for grouping in ("hidden", "blocks", "tensor_parallel", "microbatch"):
        assert all(r[f"cv_{grouping}_s"] is not None for r in rows)  # each record held out exactly once
        groups = cross[grouping]["groups"]
        assert sum(m["count"] for per in groups.values() for m in per.values()) == len(rows)


def test_the_report_holds_every_required_part(report):
    assert report["profile"]["refit_reproduces_shipped"]
    for label in ("peak_only", "base", "fitted"):
        assert set(report["in_sample"][label]) == {"one_node", "multi_node"}
    fitted, base = report["in_sample"]["fitted"], report["in_sample"]["base"]
    assert fitted["one_node"]["mape_pct"] < base["one_node"]["mape_pct"] / 4
    moves = report["attribution_base_to_fitted"]["one_node"]
    assert set(moves) == {"bias_pct", "mape_pct"} and "launch" in moves["bias_pct"]
    gap = fitted["one_node"]["bias_pct"] - base["one_node"]["bias_pct"]
    assert sum(moves["bias_pct"].values()) == pytest.approx(gap, abs=1e-6)
    assert {row["what"] for row in report["checks"]} == {"layer_forward", "layer_backward", "iteration"}
    assert report["isolation"]["events"] > 0
