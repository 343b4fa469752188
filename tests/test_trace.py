"""Chrome trace export and the trace command."""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from pathlib import Path

import pytest
from matplotlib.image import imread

from harness.cases import load_case
from harness.cli import main
from harness.cost.views import COST_VIEWS as VIEWS
from harness.estimate import cost_view
from harness.evidence.profile import load_profile
from harness.ir.portable import Schedule
from harness.pipeline import lower
from harness.report.gantt import write_gantt
from harness.schedule.block import BlockTimes
from harness.schedule.compose import chunk_times, compose
from harness.schedule.simulate import simulate
from harness.trace import build_trace, task_spans

from conftest import calculon_figures

CASES = Path(__file__).resolve().parents[1] / "cases"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def prepared(name: str):
    data = load_case(CASES / f"{name}.yaml").estimate_input()
    return lower(data).plan, load_profile(data.system)


def complete(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e["ph"] == "X"]


def test_trace_document_layout_and_operation_events():
    plan, profile = prepared("gpt3-175B_seqsel")
    doc, sim = build_trace(plan, profile, VIEWS["peak_only"], task_microbatches=0, label="gpt3-175B/seqsel")
    assert doc["displayTimeUnit"] == "ms" and doc["otherData"]["view"] == "peak_only"
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {s: f"stage {s}" for s in range(8)}
    ops = [e for e in complete(doc) if e["cat"] in ("forward", "backward")]
    assert len(ops) == 2 * 8 * 3 * 64
    for e in ops:
        assert set(e["args"]) == {"stage", "microbatch", "chunk", "phase"} and e["args"]["stage"] == e["pid"]
        assert e["args"]["phase"] == e["cat"]
    first = sim.ops[3][10]
    event = next(e for e in ops if e["pid"] == 3 and (e["args"]["microbatch"], e["args"]["chunk"], e["args"]["phase"])
                 == (first.microbatch, first.chunk, first.phase))
    # events are quantized to nanoseconds: 1e-3 us per timestamp, 2e-3 us per duration (two timestamps)
    assert event["ts"] == pytest.approx(first.start_s * 1e6, abs=1e-3)
    assert event["dur"] == pytest.approx(first.duration_s * 1e6, abs=2e-3)
    step = [e for e in complete(doc) if e["cat"] == "optimizer"]
    assert len(step) == 1 and step[0]["pid"] == 0 and step[0]["tid"] == 1
    assert (step[0]["ts"] + step[0]["dur"]) / 1e6 == pytest.approx(sim.total_s, rel=1e-9)
    # the trace ends where Calculon 0.1.0's iteration ends (the closed form is exact for this schedule)
    assert (step[0]["ts"] + step[0]["dur"]) / 1e6 == pytest.approx(
        calculon_figures("gpt3-175B_seqsel", "peak_only")["total_s"], rel=1e-9)


def test_nested_blocks_and_tasks_fill_their_operation():
    plan, profile = prepared("megatron-1T_seqsel")
    doc, sim = build_trace(plan, profile, VIEWS["system_evidence"], task_microbatches=1)
    events = complete(doc)
    parents = {(e["pid"], e["args"]["chunk"], e["args"]["phase"]): e for e in events
               if e["cat"] in ("forward", "backward") and e["args"]["microbatch"] == 0}
    children = defaultdict(list)
    for e in events:
        if e["cat"] in ("block", "task"):
            assert e["args"]["microbatch"] == 0
            children[(e["pid"], e["args"]["chunk"], e["args"]["phase"], e["cat"])].append(e)
    assert len(parents) == 64 * 2
    for key, parent in parents.items():
        lo, hi = parent["ts"], parent["ts"] + parent["dur"]
        for cat in ("block", "task"):
            kids = children[(*key, cat)]
            assert kids and all(lo - 1e-6 <= k["ts"] and k["ts"] + k["dur"] <= hi + 1e-6 for k in kids)
            assert sum(k["dur"] for k in kids) == pytest.approx(parent["dur"], abs=1e-3 * len(kids))
        assert [k["args"]["kind"] for k in children[(*key, "block")]] == ["base", "edge"]
    backward_tasks = [k["name"] for k in children[(0, 0, "backward", "task")]]
    assert backward_tasks[0].startswith("recompute/") and backward_tasks[-1] == "pipeline.backward"
    assert "pipeline.backward" not in backward_tasks[:-1]


def test_task_spans_add_up_to_the_block_critical_paths():
    plan, profile = prepared("turing-530B_full")
    block, _ = cost_view(plan, profile, VIEWS["system_evidence"])
    c = chunk_times(plan.schedule, block)
    spans = task_spans(plan, profile, VIEWS["system_evidence"])
    for attr in ("forward_base", "forward_edge", "backward_base", "backward_edge"):
        assert sum(t for _, t in getattr(spans, attr)) == pytest.approx(getattr(c, f"{attr.split('_')[1]}_{attr.split('_')[0]}_s"),
                                                                        rel=1e-12)


def test_trace_command_writes_json(tmp_path, capsys):
    out = tmp_path / "t.json"
    assert main(["trace", str(CASES / "gpt3-175B_full.yaml"), "--output", str(out), "--view", "peak_only"]) == 0
    text = capsys.readouterr().out
    assert "gpt3-175B/full peak_only: 8 stages, 3072 operations" in text
    assert "closed-form bubble 0.544643 s" in text and "closed form is exact" in text
    doc = json.loads(out.read_text())
    assert doc["otherData"]["label"] == "gpt3-175B/full" and doc["otherData"]["exact"] is True
    assert any(e["cat"] == "task" for e in doc["traceEvents"] if e["ph"] == "X")


def test_trace_command_png(tmp_path, capsys):
    out, png = tmp_path / "t.json", tmp_path / "s.png"
    assert main(["trace", str(CASES / "megatron-22B_seqsel.yaml"), "--output", str(out), "--png", str(png),
                 "--task-microbatches", "0"]) == 0
    assert str(png) in capsys.readouterr().out
    assert not any(e["cat"] == "task" for e in json.loads(out.read_text())["traceEvents"] if e["ph"] == "X")
    assert png.read_bytes()[:8] == PNG_MAGIC


def test_gantt_of_a_dense_schedule_has_zoom_panels(tmp_path):
    s = Schedule(training=True, recompute="none", global_batch=40, microbatches=40, blocks=4, pipeline_parallel=2,
                 blocks_per_stage=2, bubble_reduction_blocks=0, chunks_per_stage=2, blocks_per_chunk=1,
                 base_blocks_per_chunk=0, edge_blocks_per_chunk=1, activation_checkpoint_bytes=0)
    block = BlockTimes(*([0.0] * len(dataclasses.fields(BlockTimes))))
    block = dataclasses.replace(block, forward_s=0.01, activation_grad_s=0.02, optimizer_s=0.05)
    dense = imread(write_gantt(simulate(s, block, compose(s, block)), tmp_path / "dense.png", title="dense"))
    sparse_schedule = s.model_copy(update={"global_batch": 4, "microbatches": 4})
    sparse = imread(write_gantt(simulate(sparse_schedule, block, compose(sparse_schedule, block)),
                                tmp_path / "sparse.png", title="sparse"))
    assert dense.shape[1] == sparse.shape[1] == 14 * 110
    assert dense.shape[0] > sparse.shape[0]  # a second row: the warm-up and cool-down panels
    image = dense
    assert image[..., :3].std() > 0.1  # not blank


def test_trace_command_bad_output_is_one_line_error(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    target = blocker / "t.json"  # under a file: cannot be created
    assert main(["trace", str(CASES / "megatron-22B_full.yaml"), "--output", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{target}: --output: cannot be created: {blocker} is not a directory" in err


def test_trace_command_creates_missing_parent_directories(tmp_path, capsys):
    target = tmp_path / "missing" / "deeper" / "t.json"
    assert main(["trace", str(CASES / "megatron-22B_full.yaml"), "--output", str(target)]) == 0
    assert json.loads(target.read_text())["traceEvents"]


def test_trace_command_bad_case_is_one_line_error(tmp_path, capsys):
    assert main(["trace", str(tmp_path / "nope.yaml"), "--output", str(tmp_path / "t.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope.yaml: <file>:" in err


def test_negative_task_microbatches_is_one_line_error(tmp_path, capsys):
    assert main(["trace", str(CASES / "megatron-22B_full.yaml"), "--output", str(tmp_path / "t.json"),
                 "--task-microbatches", "-1"]) == 2
    assert capsys.readouterr().err == f"error: {CASES / 'megatron-22B_full.yaml'}: --task-microbatches: must be >= 0, got -1\n"
