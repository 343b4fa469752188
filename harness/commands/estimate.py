"""``harness estimate CASE.yaml... [--view NAME] [--json]``,
``harness estimate --calculon-batch IN.jsonl [--output OUT.json]`` and
``harness estimate --runs ROWS.json --system PROFILE|auto [--view NAME] [--output OUT.json]`` (measured runs,
:mod:`harness.measurements.runs_estimate`).

The command reads a case (or a Calculon-format batch line), hands only its
anonymous estimate input to :func:`harness.estimate.estimate`, and labels the
result with the case id afterwards.

Batch output: a JSON list, one entry per non-blank input line, in file order,
``{"id", "status", "reason", "views"}`` with the ``--json`` view fields;
``status`` is ``ok``, ``infeasible`` (Calculon would refuse it: network tier
or memory capacity; figures still given), ``rejected`` (TP/DP overlap or
offload; no views) or ``invalid`` (reason ``line N: field: message``; no
views). A bad line never stops the batch (an estimate that fails for one
line makes that line ``invalid``); the exit status is 1 when any line is
invalid, 0 otherwise. A batch without any line (empty or blank) is an error,
like a calibration without cases. The batch is streamed: each line is read, estimated and
written before the next, and the estimate path's memo tables (lowerings,
interned IR values, prices; results never depend on them) are cleared every
:data:`BATCH_CACHE_LINES` lines, so memory does not grow with the file
(``scripts/measure_batch_memory.py`` measures it); the output
is written atomically (:mod:`harness.outputs`) and has the bytes
``json.dumps(entries, indent=1)`` would give. JSON output is strict
(``allow_nan=False``).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections import Counter
from pathlib import Path
from typing import IO, Any, Iterator

from harness.cases import load_case
from harness.cost.views import COST_VIEWS
from harness.errors import HarnessError, InputError, one_line
from harness.estimate import DEFAULT_VIEWS, Estimate, clear_caches, estimate
from harness.interop.calculon_batch import BatchLine, iter_batch
from harness.outputs import atomic_output, check_output, data_files
from harness.vocabulary import BATCH_STATUSES, VIEWS


#: Lines between two clearings of the estimate path's memo tables in a batch: their content is bounded only by
#: their own limits (4096 lowerings, 65536 entries per table: 529 MB peak for 50,000 distinct configurations),
#: while a batch gains little from remembering lines it will not see again. Measured on 5,000 differential-
#: space lines: peak 242 MB without clearing, 130 MB clearing every 1024 lines, 70 MB every 256, same time.
BATCH_CACHE_LINES = 256


def register(sub) -> None:
    p = sub.add_parser("estimate", help="estimate cases with the peak-only and system-evidence views")
    p.add_argument("cases", nargs="*", metavar="CASE.yaml", help="case files")
    p.add_argument("--view", choices=list(VIEWS), help="only this view")
    p.add_argument("--json", action="store_true", help="JSON list of {id, status, reason, views}")
    p.add_argument("--calculon-batch", type=Path, metavar="IN.jsonl",
                   help='Calculon-format batch, one {"id", "model", "execution", "system"} per line (.gz allowed)')
    p.add_argument("--runs", type=Path, metavar="ROWS.json",
                   help="a blueprinting.measured-runs.v0 file: every row estimated (or unsupported, field named), "
                        "with MAPE and signed bias per GPU, model family and precision")
    p.add_argument("--system", metavar="PROFILE|auto",
                   help="with --runs: the evidence profile of every row, or auto (each row's system.gpu)")
    p.add_argument("--output", type=Path, metavar="OUT.json", help="write the JSON list here instead of stdout")
    p.set_defaults(func=run)


def estimate_json(case_id: str, est: Estimate) -> dict[str, Any]:
    return {"id": case_id, "status": est.status, "reason": est.reason, "views": est.views_json()}


def batch_entry_json(entry: BatchLine, views=DEFAULT_VIEWS, source: str = "<batch>") -> dict[str, Any]:
    """The output entry of one classified batch line (estimating valid lines).

    An estimate that fails for this line (a figure out of range, an evidence
    curve that does not cover a size, an arithmetic failure) makes the line
    ``invalid`` with its one-line reason; the batch goes on.
    """
    if entry.status != "valid":
        return {"id": entry.id, "status": entry.status, "reason": entry.reason, "views": {}}
    where = f"{source}:{entry.line}"
    try:
        return estimate_json(entry.id, estimate(entry.input, views, source=where))
    except HarnessError as error:
        field = error.field if isinstance(error, InputError) else "<estimate>"
        message = error.message if isinstance(error, InputError) else str(error)
    except (ArithmeticError, ValueError, RecursionError) as error:  # a bug; the batch still goes on
        field, message = "<estimate>", f"internal error {type(error).__name__}: {error}"
    return {"id": entry.id, "status": "invalid", "reason": one_line(f"line {entry.line}: {field}: {message}"),
            "views": {}}


def dumps(data: Any, indent: int | None = 1) -> str:
    """Strict JSON (NaN and infinities are an error, never ``NaN`` in the output)."""
    return json.dumps(data, indent=indent, allow_nan=False)


class JsonListWriter:
    """Writes a JSON list entry by entry, byte-identical to ``json.dumps(entries, indent=1)``."""

    def __init__(self, handle: IO[str]) -> None:
        self.handle = handle
        self.count = 0

    def write(self, entry: Any) -> None:
        text = dumps(entry).replace("\n", "\n ")
        self.handle.write(("[\n " if self.count == 0 else ",\n ") + text)
        self.count += 1

    def close(self) -> None:
        self.handle.write("[]\n" if self.count == 0 else "\n]\n")


@contextlib.contextmanager
def _destination(output: Path | None) -> Iterator[IO[str]]:
    if output is None:
        yield sys.stdout
        return
    with atomic_output(output, "w") as handle:
        yield handle


def _emit(entries: list[dict[str, Any]], output: Path | None) -> None:
    with _destination(output) as handle:
        writer = JsonListWriter(handle)
        for entry in entries:
            writer.write(entry)
        writer.close()


def run_batch(args, views) -> int:
    if args.cases:
        raise InputError("--calculon-batch", "CASE.yaml", "give case files or a batch, not both")
    if args.output is not None:
        check_output(args.output, inputs=[args.calculon_batch, *data_files()])
    source = str(args.calculon_batch)
    lines = iter_batch(args.calculon_batch)
    counts: Counter[str] = Counter()
    first = next(lines, None)  # a file that cannot be read fails here, before the output is touched
    if first is None:
        raise InputError(source, "<file>", "no batch lines (the file is empty or blank): nothing to estimate")
    with _destination(args.output) as handle:
        writer = JsonListWriter(handle)
        _write_entry(writer, first, views, source, counts)
        for entry in lines:
            _write_entry(writer, entry, views, source, counts)
        writer.close()
    summary = ", ".join(f"{counts[s]} {s}" for s in BATCH_STATUSES)
    where = args.output if args.output else "stdout"
    print(f"estimated {sum(counts.values())} batch lines to {where}: {summary}", file=sys.stderr)
    return 1 if counts["invalid"] else 0


def _write_entry(writer: JsonListWriter, entry: BatchLine, views, source: str, counts: Counter) -> None:
    result = batch_entry_json(entry, views, source)
    writer.write(result)
    counts[result["status"]] += 1
    if counts.total() % BATCH_CACHE_LINES == 0:
        clear_caches()


def run_runs(args) -> int:
    """``--runs``: the rows as cases, estimated (:mod:`harness.measurements.runs_estimate`); the JSON list to
    ``--output`` (or stdout) and the summary to stdout (or stderr when the list goes to stdout)."""
    from harness.evidence.profile import check_profile_name
    from harness.measurements.runs_estimate import AUTO, DEFAULT_VIEW, estimate_runs, summary
    from harness.measurements.runs_schema import read_runs

    if args.cases or args.calculon_batch is not None:
        raise InputError("--runs", "CASE.yaml", "give --runs alone, not with case files or --calculon-batch")
    if args.system is None:
        raise InputError("<command line>", "--system", "--runs needs --system PROFILE or --system auto")
    if args.system != AUTO:
        check_profile_name(args.system, "<command line>", "--system")
    if args.output is not None:
        check_output(args.output, inputs=[args.runs, *data_files()])
    view = args.view or DEFAULT_VIEW
    results = estimate_runs(read_runs(args.runs), args.system, str(args.runs))
    _emit([r.json(view) for r in results], args.output)
    out = sys.stdout if args.output is not None else sys.stderr
    for line in summary(results):
        print(line, file=out)
    return 0


def run(args) -> int:
    views = (COST_VIEWS[args.view],) if args.view else DEFAULT_VIEWS
    if args.runs is not None:
        return run_runs(args)
    if args.system is not None:
        raise InputError("<command line>", "--system", "--system goes with --runs (a case names its own profile)")
    if args.calculon_batch is not None:
        return run_batch(args, views)
    if not args.cases:
        raise InputError("estimate", "CASE.yaml", "give at least one case file (or --calculon-batch IN.jsonl)")
    if args.output is not None:
        check_output(args.output, inputs=[*args.cases, *data_files()])
    results = []
    for path in args.cases:
        case = load_case(path)
        results.append((case.id, estimate(case.estimate_input(), views, source=path)))
    if args.json or args.output:
        _emit([estimate_json(cid, est) for cid, est in results], args.output)
        return 0
    for cid, est in results:
        status = "" if est.status == "ok" else f"  [{est.status}: {est.reason}]"
        print(f"{cid}{status}")
        for name, v in est.views.items():
            comps = "  ".join(f"{k}={val:.4f}" for k, val in v.components_s.model_dump().items() if val)
            print(f"  {name:16s} total={v.total_s:.4f} s  memory={v.memory_bytes.tier1_total / 2**30:.2f} GiB  {comps}")
    return 0
