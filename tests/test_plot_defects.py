"""Issue 23.10: the plot defects. Each test draws the real figure and measures what a reader sees: the
rendered extents of the value labels (no two overlap), the microbatch numbers in the zoomed warm-up, the
titles' per-class MAPEs."""

from __future__ import annotations

import itertools

import pytest

from harness.cases import load_case
from harness.cost.views import COST_VIEWS
from harness.estimate import estimate
from harness.evidence.profile import load_profile
from harness.pipeline import lower
from harness.report import plots as calibration_plots
from harness.report.plots import plot_row

from conftest import CASES_DIR

matplotlib = pytest.importorskip("matplotlib")


def _captured(monkeypatch, module):
    figures = []
    monkeypatch.setattr(module, "_save", lambda fig, path, *a, **k: figures.append(fig) or path)
    return figures


def _overlaps(texts) -> list[tuple[str, str]]:
    boxes = [(t.get_text(), t.get_window_extent()) for t in texts if t.get_text() and t.get_visible()]
    return [(a, b) for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2) if box_a.overlaps(box_b)]


def test_the_ratio_labels_of_totals_do_not_overlap(monkeypatch, tmp_path):
    """The calibration's own layout: every Table 5 case, three ratio bars each (0.15 inch apart at 16 cases)."""
    rows = []
    for path in sorted(CASES_DIR.glob("*.yaml")):
        case = load_case(path)
        if case.comparison.paper is not None:
            est = estimate(case.estimate_input())
            rows.append(plot_row(case.id, est, calculon_total_s=est.views["system_evidence"].total_s * 0.99,
                                 paper_s=case.comparison.paper.iteration_s))
    rows += rows[:6]  # 16 cases, as calibrate plots them
    figures = _captured(monkeypatch, calibration_plots)
    calibration_plots.plot_totals(rows, tmp_path / "t.png")
    fig = figures[0]
    fig.canvas.draw()
    ratio_axes = fig.axes[1]
    assert len(ratio_axes.texts) >= 8
    assert not _overlaps(ratio_axes.texts)


def test_the_attribution_plot_tick_labels_do_not_run_together(monkeypatch, tmp_path):
    from harness.measurements import plots as measured_plots
    from harness.vocabulary import CURVE_FAMILIES

    names = list(CURVE_FAMILIES)
    report = {"profile": {"base": "a100_80g", "name": "a100_measured"},
              "attribution_base_to_fitted": {c: {"bias_pct": {n: 1.0 for n in names},
                                                 "mape_pct": {n: 1.0 for n in names}}
                                             for c in ("one_node", "multi_node")}}
    figures = _captured(monkeypatch, measured_plots)
    measured_plots.plot_attribution(report, tmp_path / "a.png")
    fig = figures[0]
    fig.canvas.draw()
    for ax in fig.axes:
        assert not _overlaps(ax.get_xticklabels())


def test_the_predicted_vs_measured_titles_give_each_node_class_its_own_mape(monkeypatch, tmp_path):
    from harness.measurements import plots as measured_plots

    rows = [{"class": "one_node", "measured_s": 1.0, **{k: 1.1 for k in ("peak_only_s", "base_s", "fitted_s",
                                                                          "cv_shape_s")}}] * 3 + \
           [{"class": "multi_node", "measured_s": 2.0, **{k: 1.0 for k in ("peak_only_s", "base_s", "fitted_s",
                                                                            "cv_shape_s")}}]
    figures = _captured(monkeypatch, measured_plots)
    measured_plots.plot_predicted_vs_measured({"rows": rows, "profile": {"base": "a100_80g", "name": "x"}},
                                              tmp_path / "p.png")
    title = figures[0].axes[0].get_title()
    # one-node: +10 % on each of 3 records; multi-node: -50 % on one (pooled: MAPE 20 %, bias -5 %)
    assert "one_node: MAPE 10.0 %, bias +10.0 %" in title and "multi_node: MAPE 50.0 %, bias -50.0 %" in title
    assert "20.0" not in title


def test_the_175B_warm_up_zoom_shows_microbatch_numbers(monkeypatch, tmp_path):
    from harness.report import gantt
    from harness.trace import build_trace

    data = load_case(CASES_DIR / "gpt3-175B_full.yaml").estimate_input()
    lowering = lower(data, "gpt3")
    _, sim = build_trace(lowering.plan, load_profile(data.system), COST_VIEWS["system_evidence"],
                         task_microbatches=0, label="gpt3", source="gpt3", model=lowering.model)
    shown = []
    real_figure = gantt.Figure

    def figure(*args, **kwargs):
        fig = real_figure(*args, **kwargs)
        shown.append(fig)
        return fig

    monkeypatch.setattr(gantt, "Figure", figure)
    gantt.write_gantt(sim, tmp_path / "g.png", title="gpt3")
    zooms = [ax for ax in shown[0].axes if ax.get_title().startswith("warm-up")]
    assert zooms and "microbatch numbers" in zooms[0].get_title()
    x0, x1 = zooms[0].get_xlim()
    inside = [op for ops in sim.ops for op in ops if op.start_s >= x0 and op.end_s <= x1]
    forwards = [op for op in inside if op.phase == "forward"]
    assert len(forwards) >= 8  # the zoom shows operations, and the title's promise holds for every one of them
    assert sorted(t.get_text() for t in zooms[0].texts) == sorted(str(op.microbatch) for op in inside)
