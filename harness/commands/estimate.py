"""``harness estimate CASE... [--system NAME] [--view NAME] [--json]``,
``harness estimate --calculon-batch IN.jsonl [--output OUT.json] [--jobs N]`` and
``harness estimate --runs ROWS.json --system PROFILE|auto [--view NAME] [--output OUT.json]`` (measured runs,
:mod:`harness.measurements.runs_estimate`).

The command reads a case (a file or a packaged case's name, see
:mod:`harness.commands.case_arguments`; or a Calculon-format batch line), hands only its
anonymous estimate input to :func:`harness.estimate.estimate`, and labels the
result with the case id afterwards.

Batch output: a JSON list, one entry per non-blank input line, in file order,
``{"id", "status", "reason", "views"}`` with the ``--json`` view fields;
``status`` is ``ok``, ``infeasible`` (Calculon would refuse it: network tier
or memory capacity; figures still given), ``rejected`` (TP/DP overlap or
offload; no views) or ``invalid`` (reason ``line N: field: message``; no
views). An infeasible case (a file or name) is said first and makes the exit
status 1 (:mod:`harness.commands.case_arguments`); in a batch every line
carries its own status, and the exit status reports invalid lines only
(a search-like batch holds infeasible lines by design). A bad line never stops the batch (an estimate that fails for one
line makes that line ``invalid``); the exit status is 1 when any line is
invalid, 0 otherwise. A batch without any line (empty or blank) is an error,
like a calibration without cases. The batch is streamed: the lines are read,
classified, estimated and written in chunks of :data:`JOB_CHUNK_LINES`, and
a process's estimate-path memo tables (lowerings, interned IR values,
prices; results never depend on them) are cleared after a chunk once they
hold :data:`BATCH_CACHE_LINES` lowerings, so memory does not grow with the
file (``scripts/measure_batch_memory.py`` measures it); the output
is written atomically (:mod:`harness.outputs`) and has the bytes
``json.dumps(entries, indent=1)`` would give. JSON output is strict
(``allow_nan=False``). ``--jobs N`` estimates the chunks in N worker
processes (:func:`harness.parallel.ordered_map`: in file order, a bounded
number in flight); in either case this process reads and writes the lines
and applies the duplicate-id rule in file order, so the output, the summary
and the exit status do not depend on N.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import sys
from collections import Counter
from json.encoder import encode_basestring_ascii as _json_string
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Iterator

from harness import session
from harness.commands.case_arguments import CASE_HELP, infeasible_line, load_case_argument, report_infeasible
from harness.cost.views import COST_VIEWS
from harness.errors import HarnessError, InputError, one_line
from harness.estimate import DEFAULT_VIEWS, Estimate, clear_caches, estimate, mixed_lowerings
from harness.evidence.profile import load_profile
from harness.inputs import TextLine, iter_lines
from harness.ir import blocks
from harness.interop.calculon_batch import BatchLine, DuplicateIds, parse_line, unreadable_line
from harness.outputs import check_output, data_files, text_output
from harness.pipeline import lower
from harness.vocabulary import BATCH_STATUSES, VIEWS

if TYPE_CHECKING:  # the case path's figures (harness.throughput), imported there: a batch reports none
    from harness.throughput import Throughput


#: Lowerings a batch process's memo tables may hold before they are cleared (after a chunk): their content is
#: bounded only by their own limits (4096 lowerings, 65536 entries per table: 529 MB peak for 50,000 distinct configurations),
#: while a batch gains little from remembering lines it will not see again. Measured on 5,000 differential-
#: space lines: peak 242 MB without clearing, 130 MB clearing every 1024 lines, 70 MB every 256, same time.
BATCH_CACHE_LINES = 256


def register(sub) -> None:
    p = sub.add_parser("estimate", help="estimate cases with the peak-only and system-evidence views")
    p.add_argument("cases", nargs="*", metavar="CASE", help=CASE_HELP)
    p.add_argument("--view", choices=list(VIEWS), help="only this view")
    p.add_argument("--json", action="store_true", help="JSON list of {id, status, reason, views}")
    p.add_argument("--calculon-batch", type=Path, metavar="IN.jsonl",
                   help='Calculon-format batch, one {"id", "model", "execution", "system"} per line (.gz allowed)')
    p.add_argument("--runs", type=Path, metavar="ROWS.json",
                   help="a blueprinting.measured-runs.v0 file: every row estimated (or unsupported, field named), "
                        "with MAPE and signed bias per GPU, model family and precision")
    p.add_argument("--system", metavar="PROFILE|auto",
                   help="the evidence profile to price on: for cases, instead of each case's own `system` "
                        "(`harness list profiles` lists them); with --runs, every row's, or auto (each row's "
                        "system.gpu's data-sheet profile) or auto-measured (its fitted revision; B300 and GB300: their "
                        "transferred revisions, a sibling's fitted values)")
    p.add_argument("--output", type=Path, metavar="OUT.json",
                   help="write the JSON list here instead of stdout (a .gz name: gzip-compressed)")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help=f"with --calculon-batch: estimate the lines in N worker processes (1-{MAX_JOBS}; the "
                        "output is the same bytes; default 1: in this process)")
    p.set_defaults(func=run)


def estimate_json(case_id: str, est: Estimate) -> dict[str, Any]:
    return {"id": case_id, "status": est.status, "reason": est.reason, "views": est.views_json()}


#: What each figure of a case's JSON entry covers (the figures keep their names; the scope is stated here).
SCOPES = {
    "total_s": "one iteration (global batch), seconds",
    "components_s": "one iteration's timing components, seconds; they add up to total_s",
    "memory_bytes": "one processor (GPU) of the first pipeline stage, bytes",
    "workload": "one Transformer block on one processor (its 1/TP share), one microbatch (optimizer: one block)",
    "throughput": "per processor (GPU): the iteration's figures divided by the processors (TP x CP x PP x DP)",
}


def case_throughput(source: str, data, est: Estimate) -> dict[str, Throughput]:
    """Tokens/s, model FLOP/s and MFU per GPU of each view of a case's estimate (:mod:`harness.throughput`: the
    model FLOPs read off the lowering of the model on the convention's layout, ``reference_input``); a model
    priced stage by stage counts the blocks of each kind (``estimate_mixed``'s lowerings of that layout)."""
    from harness.throughput import reference_input, throughput

    reference, kinds = reference_input(data), None
    if blocks.priced_by_stages(reference.model, reference.execution):
        moe, dense, mixed = mixed_lowerings(reference, source)
        plan = moe.plan
        kinds = ((moe.plan, sum(n for n, _ in mixed.stages)), (dense.plan, sum(d for _, d in mixed.stages)))
    else:
        plan = lower(reference, source).plan
    peak = load_profile(data.system).matrix[data.execution.datatype].peak_flops_per_s
    return {name: throughput(plan, data, v.total_s, peak, kinds) for name, v in est.views.items()}


def case_json(case_id: str, est: Estimate, figures: dict[str, Throughput]) -> dict[str, Any]:
    """A case's entry: the batch entry's fields, each view's ``throughput``, the ``scopes`` and the FLOP
    convention."""
    from harness.throughput import FLOP_CONVENTION

    out = estimate_json(case_id, est)
    for name, view in out["views"].items():
        view["throughput"] = figures[name].model_dump(mode="json")
    out["scopes"] = SCOPES
    out["flop_convention"] = FLOP_CONVENTION
    return out


def quantized_gemm_peak(data) -> tuple[str, str, float] | None:
    """``(layout datatype, GEMM datatype, its peak FLOP/s)`` of a low-precision recipe (``execution.precision``:
    fp8, fp4), whose quantized GEMMs' peak is above the layout datatype's that MFU is taken against (the FLOP
    convention: such an MFU can pass 100 %); None without such a recipe."""
    from harness.passes.precision import quantized_gemm_datatype

    gemm = quantized_gemm_datatype(data.execution.precision)
    engine = None if gemm is None else load_profile(data.system).matrix.get(gemm)
    return None if engine is None else (data.execution.datatype, gemm, engine.peak_flops_per_s)


def print_case(case_id: str, est: Estimate, figures: dict[str, Throughput],
               gemm_peak: tuple[str, str, float] | None = None) -> None:
    """The text form of one case: infeasibility first, then per view its time, memory per processor, components
    and per-GPU throughput; under a quantizing recipe (``gemm_peak``: :func:`quantized_gemm_peak`) the model
    FLOP/s against its GEMMs' peak too, so that an MFU above 100 % of the layout datatype's peak is read as it
    is meant."""
    print(infeasible_line(case_id, est.system, est.reason) if est.status != "ok" else case_id)
    for name, v in est.views.items():
        comps = "  ".join(f"{k}={val:.4f}" for k, val in v.components_s.model_dump().items() if val)
        t = figures[name]
        print(f"  {name:16s} total={v.total_s:.4f} s  memory={v.memory_bytes.tier1_total / 2**30:.2f} GiB per "
              f"processor  {comps}")
        print(f"  {'':16s} per GPU: {t.tokens_per_s_per_processor:.1f} tokens/s  "
              f"{t.model_flops_per_s_per_processor / 1e12:.1f} model TFLOP/s  "
              f"MFU {t.model_flops_utilization:.1%} of {t.peak_flops_per_s_per_processor / 1e12:g} TFLOP/s"
              + ("" if gemm_peak is None else
                 f" ({gemm_peak[0]}; {t.model_flops_per_s_per_processor / gemm_peak[2]:.1%} of the {gemm_peak[1]} "
                 f"GEMMs' {gemm_peak[2] / 1e12:g} TFLOP/s)"))


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
        return estimate_json(entry.id, estimate(entry.input, views, source=where, digests=False))
    except HarnessError as error:
        field = error.field if isinstance(error, InputError) else "<estimate>"
        message = error.message if isinstance(error, InputError) else str(error)
    except (ArithmeticError, ValueError, RecursionError) as error:  # a bug; the batch still goes on
        field, message = "<estimate>", f"internal error {type(error).__name__}: {error}"
    return {"id": entry.id, "status": "invalid", "reason": one_line(f"line {entry.line}: {field}: {message}"),
            "views": {}}


def dumps(data: Any, indent: int | None = 1) -> str:
    """Strict JSON (NaN and infinities are an error, never ``NaN`` in the output); ``indent=1`` through
    :func:`indented_json`, the same text."""
    if indent == 1:
        return indented_json(data)
    return json.dumps(data, indent=indent, allow_nan=False)


class _NotPlain(Exception):
    """A value :func:`_plain_json` leaves to :mod:`json` (which writes it, or raises its own error)."""


_float_text = float.__repr__  # json's text of a finite float


def _plain_json(value: Any, indent: str) -> str:
    """The text ``json.dumps(value, indent=1, allow_nan=False)`` gives, every line after the first prefixed
    with ``indent``, for plain values: dicts with ``str`` keys, lists, tuples, ``str``, finite ``float``,
    ``int``, ``bool`` and None, exactly of those types (no subclass). Anything else (a NaN or an infinity, a
    key of another type, a subclass, an unknown object) raises :class:`_NotPlain`."""
    kind = type(value)
    if kind is float:
        if value - value != 0.0:  # NaN or an infinity: json's error, not ours
            raise _NotPlain
        return _float_text(value)
    if kind is str:
        return _json_string(value)
    if kind is dict:
        if not value:
            return "{}"
        inner = indent + " "
        items = []
        for key, item in value.items():
            if type(key) is not str:
                raise _NotPlain
            if type(item) is float and item - item == 0.0:  # most figures: no call
                items.append(_json_string(key) + ": " + _float_text(item))
            else:
                items.append(_json_string(key) + ": " + _plain_json(item, inner))
        return "{\n" + inner + (",\n" + inner).join(items) + "\n" + indent + "}"
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if kind is int:
        return int.__repr__(value)
    if kind is list or kind is tuple:
        if not value:
            return "[]"
        inner = indent + " "
        return "[\n" + inner + (",\n" + inner).join([_plain_json(item, inner) for item in value]) + "\n" + indent + "]"
    raise _NotPlain


def indented_json(data: Any, indent: str = "") -> str:
    """``json.dumps(data, indent=1, allow_nan=False)`` with every line after the first prefixed by ``indent``
    (JSON text holds no newline inside a string, so the lines are the layout's). json writes an indented
    text in pure Python, a call per value; the batch's entries (about a hundred floats each) are plain
    values, written here in a call per dict or list: a third of the time (docs/performance.md). Values
    that are not plain (:func:`_plain_json`) go to json itself, so the text, and every error, is json's."""
    try:
        return _plain_json(data, indent)
    except (_NotPlain, RecursionError):
        text = json.dumps(data, indent=1, allow_nan=False)
        return text.replace("\n", "\n" + indent) if indent else text


class JsonListWriter:
    """Writes a JSON list entry by entry, byte-identical to ``json.dumps(entries, indent=1)``."""

    def __init__(self, handle: IO[str]) -> None:
        self.handle = handle
        self.count = 0

    def write(self, entry: Any) -> None:
        self.write_text(indented_json(entry, " "))

    def write_text(self, text: str) -> None:
        """Write one entry given as its text, ``indented_json(entry, " ")``."""
        self.handle.write(("[\n " if self.count == 0 else ",\n ") + text)
        self.count += 1

    def close(self) -> None:
        self.handle.write("[]\n" if self.count == 0 else "\n]\n")


@contextlib.contextmanager
def _destination(output: Path | None) -> Iterator[IO[str]]:
    if output is None:
        yield sys.stdout
        return
    with text_output(output) as handle:  # a .gz name compressed
        yield handle


def _emit(entries: list[dict[str, Any]], output: Path | None) -> None:
    with _destination(output) as handle:
        writer = JsonListWriter(handle)
        for entry in entries:
            writer.write(entry)
        writer.close()


#: Most worker processes ``--jobs`` starts.
MAX_JOBS = 256
#: Batch lines a worker estimates per task of ``--jobs`` (a task's cost, a pickled list of texts, is paid once
#: per chunk; a chunk is small enough that every worker gets some of a short batch).
JOB_CHUNK_LINES = 16


def run_batch(args, views) -> int:
    if not 1 <= args.jobs <= MAX_JOBS:
        raise InputError("<command line>", "--jobs", f"must be 1 to {MAX_JOBS} worker processes, got {args.jobs}")
    if args.cases:
        raise InputError("--calculon-batch", "CASE", "give case files or a batch, not both")
    if args.system:
        raise InputError("--calculon-batch", "--system", "a batch line names its own system; --system is for cases")
    if args.output is not None:
        check_output(args.output, inputs=[args.calculon_batch, *data_files()])
    source = str(args.calculon_batch)
    items = (item for item in iter_lines(args.calculon_batch) if item.error is not None or item.text.strip())
    first = next(items, None)  # a file that cannot be read fails here, before the output is touched
    if first is None:
        raise InputError(source, "<file>", "no batch lines (the file is empty or blank): nothing to estimate")
    chunks = _chunks(itertools.chain((first,), items), views, source)
    if args.jobs == 1:
        results = map(estimate_chunk, chunks)
    else:
        from harness.parallel import ordered_map

        results = ordered_map(estimate_chunk, chunks, args.jobs)
    counts: Counter[str] = Counter()
    ids = DuplicateIds()  # in file order, here: a duplicate's estimate is dropped for its invalid entry
    with _destination(args.output) as handle:
        writer = JsonListWriter(handle)
        for chunk in results:
            for line, record_id, classified, status, text in chunk:
                duplicate = ids.duplicate(line, record_id, classified)
                if duplicate is not None:
                    result = batch_entry_json(duplicate, views, source)
                    status, text = result["status"], indented_json(result, " ")
                writer.write_text(text)
                counts[status] += 1
        writer.close()
    summary = ", ".join(f"{counts[s]} {s}" for s in BATCH_STATUSES)
    where = args.output if args.output else "stdout"
    print(f"estimated {sum(counts.values())} batch lines to {where}: {summary}", file=sys.stderr)
    return 1 if counts["invalid"] else 0


def _chunks(items: Iterator[TextLine], views, source: str) -> Iterator[tuple]:
    """The tasks of :func:`estimate_chunk` (in this process, or in the workers of ``--jobs``): JOB_CHUNK_LINES
    lines each, a line as ``(number, text)`` or, when it
    could not be read, its invalid entry."""
    names = tuple(v.name for v in views)
    while chunk := [(item.number, item.text) if item.error is None else unreadable_line(item)
                    for item in itertools.islice(items, JOB_CHUNK_LINES)]:
        yield names, source, chunk


def estimate_chunk(task: tuple) -> list[tuple[int, str | None, str, str, str]]:
    """One task of the batch (:func:`_chunks`), in this process or a worker of ``--jobs``: every line classified (:func:`parse_line`) and estimated
    (:func:`batch_entry_json`), as ``(line, id, classified status, entry status, entry JSON text)``. The
    process's memo tables are cleared after a chunk once they hold BATCH_CACHE_LINES lowerings (results never
    depend on them)."""
    names, source, chunk = task
    views = tuple(COST_VIEWS[name] for name in names)
    out = []
    for line in chunk:
        entry = line if isinstance(line, BatchLine) else parse_line(line[1], line[0], source)
        result = batch_entry_json(entry, views, source)
        out.append((entry.line, entry.id, entry.status, result["status"], indented_json(result, " ")))
    if len(session.current().lowerings) >= BATCH_CACHE_LINES:
        clear_caches()
    return out


def run_runs(args) -> int:
    """``--runs``: the rows as cases, estimated (:mod:`harness.measurements.runs_estimate`); the JSON list to
    ``--output`` (or stdout) and the summary to stdout (or stderr when the list goes to stdout). Like a batch,
    every row carries its status and the exit status is 1 when any row is ``invalid``, else 0 (``unsupported``
    and ``infeasible`` rows are figures or refusals by design, not bad input)."""
    from harness.measurements.runs_estimate import AUTOMATIC, DEFAULT_VIEW, estimate_runs, summary
    from harness.measurements.runs_schema import read_runs

    if args.cases or args.calculon_batch is not None:
        raise InputError("--runs", "CASE.yaml", "give --runs alone, not with case files or --calculon-batch")
    if args.system is None:
        raise InputError("<command line>", "--system", "--runs needs --system PROFILE, auto or auto-measured")
    if args.system not in AUTOMATIC:  # a bad or unknown name is refused up front, as for cases (case_arguments)
        load_profile(args.system, referrer="--system")
    if args.output is not None:
        check_output(args.output, inputs=[args.runs, *data_files()])
    view = args.view or DEFAULT_VIEW
    results = estimate_runs(read_runs(args.runs), args.system, str(args.runs))
    entries, lines = [r.json(view) for r in results], summary(results)  # before the output: a failure writes none
    _emit(entries, args.output)
    out = sys.stdout if args.output is not None else sys.stderr
    for line in lines:
        print(line, file=out)
    return 1 if any(r.status == "invalid" for r in results) else 0  # the batch's rule (module docstring)


def run(args) -> int:
    views = (COST_VIEWS[args.view],) if args.view else DEFAULT_VIEWS
    if args.jobs != 1 and args.calculon_batch is None:
        raise InputError("<command line>", "--jobs", "is for --calculon-batch (cases and --runs run in this process)")
    if args.runs is not None:
        return run_runs(args)
    if args.calculon_batch is not None:
        return run_batch(args, views)
    if not args.cases:
        raise InputError("estimate", "CASE", "give at least one case file or name (or --calculon-batch IN.jsonl)")
    from harness.throughput import FLOP_CONVENTION

    loaded = [load_case_argument(argument, args.system) for argument in args.cases]
    if args.output is not None:
        check_output(args.output, inputs=[*(source for source, _ in loaded), *data_files()])
    results = [(case.id, estimate(case.estimate_input(), views, source=source)) for source, case in loaded]
    infeasible = sum(est.status != "ok" for _, est in results)
    figures = [case_throughput(source, case.estimate_input(), est) for (source, case), (_, est) in zip(loaded, results)]
    if args.json or args.output:
        _emit([case_json(cid, est, f) for (cid, est), f in zip(results, figures)], args.output)
        return report_infeasible(infeasible, len(results))
    for (cid, est), f, (_, case) in zip(results, figures, loaded):
        print_case(cid, est, f, quantized_gemm_peak(case.estimate_input()))
    print(f"({FLOP_CONVENTION})")
    return report_infeasible(infeasible, len(results))
