"""Calibration plots from estimates and attributions computed on the cases."""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.image import imread

from harness.cases import load_case
from harness.errors import HarnessError, InputError
from harness.estimate import estimate
from harness.explain import explain_input
from harness.report.plots import PlotRow, plot_row, write_plots

from conftest import calculon_figures

CASES = Path(__file__).resolve().parents[1] / "cases"
NAMES = ("megatron-22B_full", "gpt3-175B_seqsel", "inference_megatron-22B_ar", "turing-530B_full")


@pytest.fixture(scope="module")
def rows() -> list[PlotRow]:
    out = []
    for name in NAMES:
        case = load_case(CASES / f"{name}.yaml")
        data = case.estimate_input()
        paper = case.comparison.paper.iteration_s if case.comparison.paper else None  # test-side only
        out.append(plot_row(case.id, estimate(data), explain_input(data).attribution, calculon_total_s=None, paper_s=paper))
    return out


def test_plot_row_carries_the_estimate_and_attribution(rows):
    """The row's figures are the case's (checked against Calculon 0.1.0's records and the paper, not against
    the estimate the row was built from)."""
    row = rows[0]
    peak, full = calculon_figures("megatron-22B_full", "peak_only"), calculon_figures("megatron-22B_full",
                                                                                      "system_evidence")
    assert row.id == "megatron-22B/full" and row.paper_s == 1.42 and row.calculon_total_s is None
    assert (row.peak_only_total_s, row.system_evidence_total_s) == (peak["total_s"], full["total_s"])
    assert row.components_s["system_evidence"]["forward"] == full["components_s.forward"]
    assert row.components_s["peak_only"]["pipeline_bubble"] == peak["components_s.pipeline_bubble"]
    assert sum(row.attribution_s.values()) == pytest.approx(row.system_evidence_total_s - row.peak_only_total_s,
                                                            rel=1e-9)
    assert rows[2].paper_s is None  # inference cases have no paper value


def test_write_plots_writes_three_readable_pngs(rows, tmp_path):
    paths = write_plots(rows, tmp_path / "plots")
    assert [p.name for p in paths] == ["totals.png", "components.png", "gap_waterfall.png"]
    for path in paths:
        image = imread(path)
        assert image.shape[0] > 400 and image.shape[1] > 1000
        assert image[..., :3].std() > 0.05  # drawn, not blank
    # four panels in one row: the small-multiple figures are wider than tall
    components = imread(paths[1])
    assert components.shape[1] > components.shape[0]


def test_write_plots_accepts_plain_mappings_and_skips_the_waterfall_without_attribution(rows, tmp_path):
    plain = [row.model_dump() | {"attribution_s": None} for row in rows[:2]]
    paths = write_plots(plain, tmp_path)
    assert [p.name for p in paths] == ["totals.png", "components.png"]


def test_bad_rows_name_the_field(rows, tmp_path):
    bad = rows[0].model_dump()
    del bad["peak_only_total_s"]
    with pytest.raises(InputError, match=r"plot rows\[1\]: peak_only_total_s: Field required"):
        write_plots([rows[1], bad], tmp_path)
    with pytest.raises(HarnessError, match="no rows"):
        write_plots([], tmp_path)


def test_unwritable_directory_is_an_input_error(rows, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(InputError, match=f"plots: --plots: cannot be created: {blocker} is not a directory"):
        write_plots(rows[:1], blocker / "plots")
