"""``estimate --calculon-batch --jobs N``: the same bytes as one process, whatever N; and the ordered map under it."""

from __future__ import annotations

import gzip
import json
import os
import time

import pytest

from harness.cli import main
from harness.commands import estimate as estimate_command
from harness.errors import PassError, UnsupportedFeatureError
from harness.parallel import WorkerError, ordered_map

from test_interop import EXECUTION, MODEL, _line


def _hostile_batch(tmp_path, name="in.jsonl"):
    """Every kind of line, and more lines than two chunks of a worker: valid (TP overlap and offload too: the
    ConcretePlanIR), infeasible, not JSON, a bad layout, an unknown field, blank, not UTF-8, duplicate ids (of a
    valid line, of an invalid one: invalid lines keep no id)."""
    lines = [
        _line("ok"),
        _line("too-small", tensor_par_net=0, pipeline_par_net=0),
        _line("memory", tensor_par=1, num_procs=8),
        _line("overlap", tensor_par_overlap="ring", tensor_par=1, num_procs=8),
        _line("ring", tensor_par_overlap="ring"),
        _line("offload", weight_offload=True),
        "{not json",
        _line("layout", tensor_par=5, num_procs=40),
        json.dumps({"id": "extra", "model": MODEL, "execution": EXECUTION, "system": "a100_80g", "comment": 1}),
        "",
        _line("ok"),
        _line("layout", tensor_par=5, num_procs=40),  # the first "layout" was invalid: this one is its own
        _line("bf16", datatype="bfloat16"),
        *[_line(f"dp{n}", data_par=n, num_procs=64 * n) for n in range(1, 9)],
        *[_line(f"mb{n}", microbatch_size=n) for n in (1, 2, 4, 8)],
        "   ",
        *[_line(f"pp{n}", pipeline_par=n, num_procs=8 * n) for n in (1, 2, 4, 8, 16, 32, 64)],
        _line("dp4"),  # a duplicate of a valid line far from it (another chunk)
        _line("dp3"),  # the first dp3 was invalid: this one is its own
    ]
    path = tmp_path / name
    data = b"".join(line.encode() + b"\n" for line in lines)
    data = data.replace(b"   \n", b"\xff\xfe not utf-8\n", 1)
    if name.endswith(".gz"):
        data = gzip.compress(data)[:-9]  # truncated: every complete line kept, then one invalid entry
    path.write_bytes(data)
    return path, len(lines)


@pytest.mark.parametrize("name", ["in.jsonl", "in.jsonl.gz"])
def test_jobs_write_the_bytes_of_one_process(tmp_path, capsys, name):
    batch, count = _hostile_batch(tmp_path, name)
    outputs = {}
    for jobs in (1, 2, 3):
        out = tmp_path / f"out{jobs}.json"
        code = main(["estimate", "--calculon-batch", str(batch), "--output", str(out), "--jobs", str(jobs)])
        outputs[jobs] = (code, out.read_bytes(), capsys.readouterr().err.replace(str(out), "OUT"))
    assert outputs[2] == outputs[1] == outputs[3]
    code, text, summary = outputs[1]
    entries = json.loads(text)
    statuses = {s: sum(e["status"] == s for e in entries) for s in ("ok", "infeasible", "invalid")}
    assert code == 1 and all(statuses.values()), statuses  # every status a Calculon-format line can have
    reasons = [e["reason"] or "" for e in entries]
    assert sum("duplicate id 'ok' (also on line 1)" in r for r in reasons) == 1
    assert sum("duplicate id 'dp4' (also on line 17)" in r for r in reasons) == 1
    assert not any("duplicate id 'dp3'" in r for r in reasons)
    assert sum(r.startswith("line 12: execution.tensor_par: TP=5") for r in reasons) == 1  # not a duplicate
    assert any("UTF-8" in r for r in reasons)
    if name.endswith(".gz"):
        assert entries[-1]["reason"] == (f"line {count + 1}: <file>: truncated: the compressed stream ends early; "
                                         f"the {count} complete lines before it were read")
        assert len(entries) == count  # one blank line, and the truncation's entry
    else:
        assert len(entries) == count - 1  # one blank line; the not-UTF-8 line is an entry
    assert f"estimated {len(entries)} batch lines" in summary


def test_spawned_workers_write_the_same_bytes(tmp_path, capsys, monkeypatch):
    """Where the platform cannot fork (Windows), the workers are spawned: they import the command's module
    to run its chunks, and the output is the same."""
    from harness import parallel

    path = tmp_path / "in.jsonl"
    path.write_text("".join(line + "\n" for line in (_line("a"), _line("b", tensor_par=5, num_procs=40), _line("a"))))
    outputs = []
    for jobs in (1, 2):
        out = tmp_path / f"out{jobs}.json"
        monkeypatch.setattr(parallel, "start_method", lambda: "spawn")
        assert main(["estimate", "--calculon-batch", str(path), "--output", str(out), "--jobs", str(jobs)]) == 1
        outputs.append(out.read_bytes())
        capsys.readouterr()
    assert outputs[0] == outputs[1]
    assert [e["status"] for e in json.loads(outputs[1])] == ["ok", "invalid", "invalid"]


def test_jobs_is_for_a_batch_and_in_range(tmp_path, capsys):
    batch, _ = _hostile_batch(tmp_path)
    for jobs, message in (("0", "--jobs: must be 1 to 256 worker processes, got 0"),
                          ("257", "--jobs: must be 1 to 256 worker processes, got 257")):
        assert main(["estimate", "--calculon-batch", str(batch), "--jobs", jobs]) == 2
        err = capsys.readouterr().err
        assert err == f"error: <command line>: {message}\n"
    assert main(["estimate", "megatron-22B_full", "--jobs", "2"]) == 2
    assert "--jobs: is for --calculon-batch" in capsys.readouterr().err


def _dies(task):
    os._exit(9)


def test_a_worker_that_dies_is_one_line_and_no_output(tmp_path, capsys, monkeypatch):
    batch, _ = _hostile_batch(tmp_path)
    out = tmp_path / "out.json"
    monkeypatch.setattr(estimate_command, "estimate_chunk", _dies)
    assert main(["estimate", "--calculon-batch", str(batch), "--output", str(out), "--jobs", "2"]) == 2
    err = capsys.readouterr().err
    assert err == "error: <command line>: --jobs: a worker process died (killed, or out of memory): the batch stopped\n"
    assert not out.exists() and list(tmp_path.iterdir()) == [batch]  # no output, no temporary file left


def _slow_double(item):
    time.sleep(0.05 if item % 3 == 0 else 0.0)  # the first of every three finishes last
    return 2 * item


def _fails_on_five(item):
    if item == 5:
        raise ValueError("item five")
    return item


def _input_error(item):
    raise UnsupportedFeatureError(f"line {item}", "execution.tp_overlap")


def _pass_error(item):
    raise PassError("transformer-distribute", f"item {item}")


def test_a_harness_error_in_a_worker_reaches_the_caller_as_itself():
    """Pickle rebuilds an exception as ``cls(*args)``; a harness error's arguments are not its message, so it
    is pickled with its attributes (``HarnessError.__reduce__``)."""
    with pytest.raises(UnsupportedFeatureError) as info:
        list(ordered_map(_input_error, [7], 1))
    assert (info.value.source, info.value.field, info.value.line) == ("line 7", "execution.tp_overlap", None)
    assert str(info.value) == f"line 7: execution.tp_overlap: {UnsupportedFeatureError.REASON}"
    with pytest.raises(PassError) as info:
        list(ordered_map(_pass_error, [3], 1))
    assert (info.value.pass_name, str(info.value)) == ("transformer-distribute", "pass transformer-distribute: item 3")


def test_ordered_map_yields_in_order_and_raises_a_workers_exception():
    assert list(ordered_map(_slow_double, range(12), 3)) == [2 * n for n in range(12)]
    results = ordered_map(_fails_on_five, range(10), 2)
    assert [next(results) for _ in range(5)] == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="item five"):
        next(results)


def test_ordered_map_reads_its_items_only_as_results_are_taken():
    taken = []

    def items():
        for n in range(100):
            taken.append(n)
            yield n

    results = ordered_map(_slow_double, items(), 2, in_flight_per_job=2)
    assert next(results) == 0
    assert len(taken) <= 2 * 2 + 1  # the window, and the one refilled after the first result
    results.close()  # leaving early stops the workers
    assert len(taken) <= 2 * 2 + 1


def test_ordered_map_names_the_option_when_a_worker_dies():
    with pytest.raises(WorkerError) as info:
        list(ordered_map(_dies, range(4), 2, option="--workers"))
    assert str(info.value) == ("<command line>: --workers: a worker process died (killed, or out of memory): the "
                               "batch stopped")
