"""The queue trace of TP/DP-overlap and offload layouts (harness.trace.queues, ``harness trace``).

Facts checked on the produced trace document, each computed independently:
tile counts from the TP degree and the overlap mode; a network or tier-2
thread's busy time from the prices of the commands it ran; the compute and
``exposed`` threads tiling the first stage's iteration without overlap; the
exposed events adding up to the exposed components, and, where no
compatibility rule applies, to the closed forms' exposed TP time.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from pathlib import Path

import pytest

from harness.cases import load_case
from harness.cli import main
from harness.cost.views import COST_VIEWS
from harness.errors import InputError
from harness.evidence.profile import load_profile
from harness.pipeline import lower
from harness.schedule.projection import calculon_projection
from harness.trace import build_queue_trace, check_queue_trace_size, queue_trace_size

CONCURRENCY = Path(__file__).resolve().parents[1] / "cases" / "concurrency"
PIPE = "megatron-22B_overlap"  # TP 8, pipe, rs_ag, DP overlap with sharding, PP 2 x 2 chunks
RING = "gpt3-13B_offload"  # TP 4, ring, ar, weights + activations offload, DP overlap, PP 2


def _case(name: str, **execution):
    case = load_case(CONCURRENCY / f"{name}.yaml")
    data = case.estimate_input()
    if execution:
        data = data.model_copy(update={"execution": data.execution.model_copy(update=execution)})
    return case, data


def _trace(name: str, view: str = "system_evidence", microbatches: int | None = None, **execution):
    case, data = _case(name, **execution)
    concrete = lower(data).concrete()
    profile = load_profile(data.system)
    n = concrete.schedule.microbatches if microbatches is None else microbatches
    # every microbatch is traced here, above the command's memory bound (harness.trace.MAX_TRACE_EVENTS)
    doc, schedule = build_queue_trace(concrete, profile, COST_VIEWS[view], task_microbatches=n, label=case.id,
                                      max_events=10 ** 7)
    return doc, schedule, concrete, profile


def _queue_events(doc: dict, concrete) -> dict[str, list[dict]]:
    pp = concrete.schedule.pipeline_parallel
    names = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == pp}
    out = defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["pid"] == pp:
            out[names[e["tid"]]].append(e)
    return out


@pytest.fixture(scope="module")
def pipe():
    return _trace(PIPE)


@pytest.fixture(scope="module")
def ring():
    return _trace(RING)


def test_one_thread_per_queue_and_one_process_per_stage(pipe):
    doc, schedule, concrete, _ = pipe
    pp = concrete.schedule.pipeline_parallel
    meta = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    processes = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert processes == {**{s: f"stage {s}" for s in range(pp)}, pp: "stage 0 queues"}
    threads = [e["args"]["name"] for e in meta if e["name"] == "thread_name" and e["pid"] == pp]
    assert threads == [q.name for q in concrete.queues] + ["exposed"]
    assert threads[:3] == ["compute", "network.tier0", "network.tier1"]  # TP on tier 0; PP and DP share tier 1
    ops = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] < pp]
    s = concrete.schedule
    assert len(ops) == pp * s.chunks_per_stage * s.microbatches * 2


# rs_ag: all four overlapped pairs send forward; ar: only the two reduce-side ones (f is the identity)
@pytest.mark.parametrize("fixture,mode,tp,pairs", [("pipe", "pipe", 8, 4), ("ring", "ring", 4, 2)])
def test_overlapped_pairs_show_tp_or_tp_minus_one_network_tiles(fixture, mode, tp, pairs, request):
    doc, _, concrete, _ = request.getfixturevalue(fixture)
    events = _queue_events(doc, concrete)
    op = "F mb0 c0 block0 (base)"
    sends = defaultdict(set)
    for e in events[concrete.queue_of["tensor"]]:
        m = re.fullmatch(r"(.+)/forward/tile(\d+)\.send", e["name"])
        if m and e["args"]["op"] == op:
            sends[m.group(1)].add(int(m.group(2)))
    gemms = defaultdict(set)
    for e in events["compute"]:
        m = re.fullmatch(r"(.+)/forward/tile(\d+)\.(flops|memory)", e["name"])
        if m and e["args"]["op"] == op:
            gemms[m.group(1)].add((int(m.group(2)), m.group(3)))
    assert len(sends) == pairs
    for task, tiles in sends.items():
        assert tiles == set(range(tp) if mode == "pipe" else range(1, tp)), task
        assert gemms[task] == {(i, p) for i in range(tp) for p in ("flops", "memory")}


@pytest.mark.parametrize("fixture", ["pipe", "ring"])
def test_network_and_link_busy_time_is_the_priced_commands(fixture, request):
    doc, schedule, concrete, profile = request.getfixturevalue(fixture)
    pricer_view = COST_VIEWS[doc["otherData"]["view"]]
    from harness.cost.views import pricer_for
    from harness.passes.rules import reduction_operations

    pricer = pricer_for(profile, pricer_view, concrete.datatype)
    events = _queue_events(doc, concrete)
    op = "B mb0 c0 block0 (base)"
    program = concrete.program("backward", "base")
    priced = 0.0
    for c in program.commands:
        if c.queue != concrete.queue_of["tensor"]:
            continue
        seconds = pricer.message_s(c.message)
        if c.work is not None:
            seconds += pricer.work(c.work).processing_s
        elif c.reduction_operations:
            m = c.message
            assert c.reduction_operations == reduction_operations(m.collective, m.message_bytes,
                                                                   concrete.bytes_per_element, m.participants)
            seconds += pricer.compute_s(c.reduction_operations, "vector")
        priced += seconds / c.tiles
    busy = math.fsum(e["args"]["duration_s"] for e in events[concrete.queue_of["tensor"]] if e["args"]["op"] == op)
    assert busy == pytest.approx(priced, rel=1e-12)
    link = events.get("memory.tier2", [])
    if concrete.program("forward_offload") is not None:
        forward = pricer.tier2_s(concrete.program("forward_offload").commands[0].transfer_bytes)
        backward = pricer.tier2_s(concrete.program("backward_offload").commands[0].transfer_bytes)
        s = concrete.schedule
        blocks = s.blocks_per_stage * s.microbatches  # per direction over the iteration
        # transfers 1 .. n: every block but the resident first one, and the next iteration's first (forward)
        expected = blocks * forward + blocks * backward
        assert math.fsum(e["args"]["duration_s"] for e in link) == pytest.approx(expected, rel=1e-9)
        by_component = defaultdict(float)
        for e in link:
            by_component[e["args"]["component"]] += e["args"]["duration_s"]
        assert by_component["forward_offload"] == pytest.approx(blocks * forward, rel=1e-9)
    else:
        assert not link


@pytest.mark.parametrize("fixture", ["pipe", "ring"])
def test_compute_and_exposed_threads_tile_the_first_stage_and_add_up_to_the_components(fixture, request):
    doc, schedule, concrete, _ = request.getfixturevalue(fixture)
    events = _queue_events(doc, concrete)
    timeline = sorted(events["compute"] + events["exposed"], key=lambda e: (e["ts"], e["dur"]))
    total = doc["otherData"]["total_s"]
    assert math.fsum(e["args"]["duration_s"] for e in timeline) == pytest.approx(total, rel=1e-12)
    for before, after in zip(timeline, timeline[1:]):  # contiguous, no overlap (ns rounding)
        assert after["ts"] == pytest.approx(before["ts"] + before["dur"], abs=2e-3)
    exposed = defaultdict(float)
    for e in events["exposed"]:
        exposed[e["name"]] += e["args"]["duration_s"]
    components = doc["otherData"]["components_s"]
    slowdown = doc["otherData"]["slowdown_s"]
    compute = defaultdict(float)
    for e in events["compute"]:
        compute[e["args"]["component"]] += e["args"]["duration_s"]
    for name, value in components.items():
        if name in ("forward", "backward", "recompute", "optimizer"):
            continue
        assert exposed.get(name, 0.0) + slowdown.get(name, 0.0) == pytest.approx(value, rel=1e-9, abs=1e-15), name
    for name in ("forward", "backward", "recompute", "optimizer"):
        # compute events carry wall time; the part a DP sync slowed them by is charged to data_parallel
        lost = slowdown.get("data_parallel", 0.0) if name != "optimizer" else 0.0
        assert compute.get(name, 0.0) >= components[name] - 1e-15
        assert compute.get(name, 0.0) <= components[name] + lost + 1e-12
    assert math.fsum(compute.values()) == pytest.approx(sum(components[n] for n in compute) +
                                                        slowdown.get("data_parallel", 0.0), rel=1e-9)


def test_exposed_tp_time_is_the_closed_forms_where_no_rule_applies():
    # ring, rs_ag (edge block's messages = the base block's), no recompute, no DP overlap, no offload, PP 1
    _, data = _case(PIPE, tp_overlap="ring", dp_overlap=False, recompute="none", seq_par_ag_redo=False,
                    pipeline_parallel=1, data_parallel=8, pipeline_interleaving=1)
    concrete = lower(data).concrete()
    profile = load_profile(data.system)
    doc, _ = build_queue_trace(concrete, profile, COST_VIEWS["system_evidence"],
                               task_microbatches=concrete.schedule.microbatches, max_events=10 ** 7)
    exposed = math.fsum(e["args"]["duration_s"] for e in doc["traceEvents"]
                        if e["ph"] == "X" and e["name"] == "tensor_parallel" and e["cat"] == "exposed")
    from harness.cost.views import pricer_for

    closed = calculon_projection(concrete, pricer_for(profile, COST_VIEWS["system_evidence"], concrete.datatype))
    assert exposed > 0
    assert exposed == pytest.approx(closed.components_s["tensor_parallel"], rel=1e-9)


def test_an_oversized_queue_trace_is_refused_up_front():
    _, data = _case(PIPE)
    concrete = lower(data).concrete()
    operations, events = queue_trace_size(concrete, 16)
    assert operations == 2 * 2 * 16 * 2  # stages x chunks x microbatches x phases
    doc, _ = build_queue_trace(concrete, load_profile(data.system), COST_VIEWS["peak_only"], task_microbatches=16,
                               max_events=events)
    assert len(doc["traceEvents"]) <= events  # the bound holds
    with pytest.raises(InputError) as info:
        check_queue_trace_size(concrete, "x.yaml", task_microbatches=16, max_events=1000)
    assert "\n" not in str(info.value) and str(info.value).startswith("x.yaml: --task-microbatches: ")


def test_trace_command_writes_the_queue_trace(tmp_path, capsys):
    out = tmp_path / "trace.json"
    png = tmp_path / "schedule.png"
    assert main(["trace", str(CONCURRENCY / f"{RING}.yaml"), "--output", str(out), "--png", str(png)]) == 0
    doc = json.loads(out.read_text())
    assert doc["otherData"]["projection"] == "physical" and doc["otherData"]["recorded_microbatches"] == 1
    text = capsys.readouterr().out
    assert "physical schedule" in text and "calculon-0.1.0" in text and "forward_offload on memory.tier2" in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_layout_without_concurrency_keeps_the_pipeline_trace(tmp_path):
    out = tmp_path / "trace.json"
    assert main(["trace", str(CONCURRENCY.parent / "megatron-22B_full.yaml"), "--output", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert "projection" not in doc["otherData"]
    assert not any(e["ph"] == "M" and e["name"] == "process_name" and e["args"]["name"] == "stage 0 queues"
                   for e in doc["traceEvents"])


def test_the_schedule_png_draws_one_row_per_queue_as_the_json_trace_records_it(tmp_path, monkeypatch):
    """Issue 23.10: the per-queue threads were only in the JSON trace, the PNG drew the stages alone. The main panel
    now holds one row per queue of the first stage, labelled by the queue's thread name in the JSON, whose bars add
    up, per component, to that thread's events (the same intervals, read back from the figure's collections)."""
    from harness.report import gantt

    shown = []
    real_figure = gantt.Figure
    monkeypatch.setattr(gantt, "Figure", lambda *a, **k: shown.append(real_figure(*a, **k)) or shown[-1])
    out, png = tmp_path / "trace.json", tmp_path / "schedule.png"
    assert main(["trace", str(CONCURRENCY / f"{PIPE}.yaml"), "--output", str(out), "--png", str(png)]) == 0
    doc = json.loads(out.read_text())
    pp = 2  # the case's pipeline_parallel
    threads = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"]
               if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == pp}
    queues = [threads[tid] for tid in sorted(threads)]
    assert queues == ["compute", "network.tier0", "network.tier1", "exposed"]  # TP on tier 0, PP and DP on tier 1
    expected = defaultdict(float)
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["pid"] == pp:
            expected[(e["args"]["queue"], e["args"]["component"])] += e["args"]["duration_s"]
    main_axes = shown[0].axes[0]
    labels = [t.get_text() for t in main_axes.get_yticklabels()]
    assert labels == ["stage 0", "stage 1"] + [f"stage 0 {q}" for q in queues]
    drawn = defaultdict(float)
    for collection in main_axes.collections:
        queue, _, component = collection.get_label().partition(": ")
        if queue not in queues:
            continue  # a stage row's operations
        row = pp + queues.index(queue)
        for path in collection.get_paths():
            box = path.get_extents()
            assert row - 0.5 < box.y0 < box.y1 < row + 0.5  # on its own row
            drawn[(queue, component)] += box.x1 - box.x0
    assert set(drawn) == set(expected)
    for key, seconds in expected.items():
        assert drawn[key] == pytest.approx(seconds, rel=1e-9, abs=1e-12), key


def test_a_queue_png_without_recorded_microbatches_is_refused(tmp_path, capsys):
    """--task-microbatches 0 records no operation of a physical schedule: the PNG was an internal error (max() of
    an empty sequence); now a one-line refusal naming the option, before anything is written."""
    out, png = tmp_path / "trace.json", tmp_path / "schedule.png"
    assert main(["trace", str(CONCURRENCY / f"{RING}.yaml"), "--output", str(out), "--png", str(png),
                 "--task-microbatches", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--task-microbatches" in err and not out.exists() and not png.exists()
