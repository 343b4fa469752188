"""``harness search --model M --system PROFILE --procs N --max-batch B --datatype DT [options]``.

Searches Calculon 0.1.0's execution space for the layouts with the highest
sample rate (see :mod:`harness.search.space` for the space,
:mod:`harness.search.evaluate` for what is shared and pruned,
:mod:`harness.search.run` for Dask, ``docs/search.md`` for sizing a cluster).

Outputs: the top K as a JSON list (``--output``, else stdout), best first;
``--results`` every execution as Parquet; ``--pareto`` the time-memory
frontier as a JSON list and ``--plot`` a PNG of the evaluated space. A
summary (counts, best, time, evidence revision) goes to stderr with a progress
bar. Exit status 0, or 1 when no execution is feasible (the outputs are still
written, empty).
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from harness.outputs import check_output, data_files, write_text
from harness.search.output import ParquetRows, entries_json
from harness.search.request import check_workers, search_problem
from harness.search.space import FUSED_CHOICES, SpaceOptions


def register(sub) -> None:
    p = sub.add_parser("search", help="find the layouts with the best sample rate (Calculon's search space)")
    p.add_argument("--model", required=True, type=Path, metavar="MODEL", help="Calculon model JSON or case YAML")
    p.add_argument("--system", required=True, metavar="PROFILE", help="evidence profile name (evidence/NAME.yaml; never a path: "
                   "a profile elsewhere is reached with --project DIR)")
    p.add_argument("--procs", required=True, type=int, metavar="N", help="processors")
    p.add_argument("--max-batch", required=True, type=int, metavar="B",
                   help="maximum global batch (the batch is the largest multiple of DP not above it)")
    p.add_argument("--datatype", required=True, metavar="DT", help="datatype (float16, bfloat16, float8, float32)")
    p.add_argument("--top", type=int, default=1, metavar="K", help="how many executions to report (default: 1)")
    p.add_argument("--output", type=Path, metavar="OUT.json", help="top K JSON (default: stdout)")
    p.add_argument("--results", type=Path, metavar="ALL.parquet", help="every evaluated execution as Parquet")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--workers", type=int, metavar="W",  # bounded: harness.search.request.MAX_WORKERS_PER_CORE
                       help="local Dask workers (default: one per core; 1: in this process)")
    where.add_argument("--scheduler", metavar="ADDRESS", help="an existing Dask scheduler, e.g. tcp://HOST:8786")
    p.add_argument("--pareto", type=Path, metavar="FRONTIER.json", help="the time-memory Pareto frontier as JSON")
    p.add_argument("--plot", type=Path, metavar="PLOT.png", help="PNG of the evaluated space, frontier and top K")
    p.add_argument("--fused-activation", choices=sorted(FUSED_CHOICES), default="true",
                   help="fused activation values searched (Calculon's -f; default: true)")
    p.add_argument("--mbs-break", action="store_true",
                   help="stop growing the microbatch after a size with no feasible execution (Calculon's -m)")
    p.add_argument("--no-tp-overlap", action="store_true", help="leave TP overlap out (Calculon's --no-tp-overlap)")
    p.add_argument("--no-dp-overlap", action="store_true", help="leave DP overlap out (Calculon's --no-dp-overlap)")
    p.add_argument("--no-prune", action="store_true", help="compose every execution (same result, slower)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def _progress(enabled: bool):
    from rich.console import Console
    from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
    from rich.text import Text

    class Rate(ProgressColumn):
        def render(self, task) -> Text:
            elapsed = task.elapsed or 0.0
            return Text(f"{task.completed / elapsed:,.0f}/s" if elapsed > 0 else "-/s")

    return Progress(TextColumn("search"), BarColumn(), TextColumn("{task.completed:,}/{task.total:,} evaluated"),
                    TextColumn("{task.fields[pruned]:,} pruned"), Rate(), TimeElapsedColumn(),
                    console=Console(stderr=True), disable=not enabled)


def run(args) -> int:
    check_workers(args.workers, "--workers")  # MAX_WORKERS_PER_CORE per core, before any process starts
    named = [(args.output, "--output"), (args.results, "--results"), (args.pareto, "--pareto"), (args.plot, "--plot")]
    protected = [args.model, *data_files()]
    for path, flag in named:
        if path is not None:
            check_output(path, option=flag, inputs=protected,
                         others=[other for other, o in named if other is not None and o != flag])
    options = SpaceOptions(fused_activation=FUSED_CHOICES[args.fused_activation], tp_overlap=not args.no_tp_overlap,
                           dp_overlap=not args.no_dp_overlap, mbs_break=args.mbs_break)
    collect_points = args.pareto is not None or args.plot is not None
    problem = search_problem(args.model, args.system, args.procs, args.max_batch, args.datatype, top=args.top,
                             options=options, prune=not args.no_prune, collect_rows=args.results is not None,
                             collect_points=collect_points)
    from harness.search.run import run_search

    profile = problem.profile
    evidence = {"profile": profile.name, "revision": profile.revision()}
    parquet = None
    if args.results is not None:
        parquet = ParquetRows(args.results, {
            "blueprinting.search.model": str(args.model), "blueprinting.search.processors": str(args.procs),
            "blueprinting.search.max_batch": str(args.max_batch), "blueprinting.search.datatype": args.datatype,
            "blueprinting.evidence.profile": profile.name, "blueprinting.evidence.revision": evidence["revision"]})
    progress = _progress(not args.no_progress)
    state = {}

    def on_start(total: int) -> None:
        state["task"] = progress.add_task("search", total=total, pruned=0)
        progress.start()

    def on_progress(counts) -> None:
        state["pruned"] = state.get("pruned", 0) + counts.pruned
        progress.update(state["task"], advance=counts.executions, pruned=state["pruned"])

    with contextlib.ExitStack() as stack:
        if parquet is not None:
            stack.enter_context(parquet)
        try:
            result = run_search(problem, workers=args.workers, scheduler=args.scheduler,
                                on_rows=parquet.write if parquet else None, on_progress=on_progress,
                                on_start=on_start)
            progress.update(state["task"], total=result.counts.executions)
        finally:
            progress.stop()
    text = entries_json(result.best, evidence)
    if args.output is None:
        sys.stdout.write(text)
    else:
        write_text(args.output, text, option="--output")
    if args.pareto is not None:
        write_text(args.pareto, entries_json(result.frontier, evidence), option="--pareto")
    if args.plot is not None:
        from harness.search.pareto import write_plot
        rates, memory = result.points if result.points is not None else (None, None)
        title = (f"{args.model.name}: {args.procs} processors, batch <= {args.max_batch}, {args.datatype}, "
                 f"{profile.name} (evidence {evidence['revision'][:12]})")
        write_plot(args.plot, rates, memory, result.frontier, result.best, profile.memory_tier1.capacity_bytes, title)
    _summary(args, problem, result, evidence, parquet)
    return 0 if result.best else 1


def _summary(args, problem, result, evidence, parquet) -> None:
    c = result.counts
    say = lambda text: print(text, file=sys.stderr)  # noqa: E731
    say(f"search: {args.model} on {evidence['profile']} (evidence revision {evidence['revision']}), "
        f"{problem.processors} processors, batch <= {problem.max_batch}, {problem.datatype}")
    say(f"space: {result.groups:,} groups, {c.executions:,} executions: {c.feasible:,} feasible "
        f"({c.pruned:,} of them pruned by the exact bound), {c.infeasible:,} infeasible, {c.invalid:,} invalid")
    if result.best:
        b = result.best[0]
        e = b.execution
        say(f"best: {b.rate!r} samples/s (total {b.total_s!r} s): TP {e['tensor_par']} PP {e['pipeline_par']} "
            f"DP {e['data_par']}, microbatch {e['microbatch_size']}, interleaving {e['pipeline_interleaving']}, "
            f"{e['activation_recompute']}, {e['tensor_par_comm_type']}")
    else:
        say("best: no feasible execution")
    say(f"time: {result.elapsed_s:.2f} s ({result.where})")
    written = [f"top {len(result.best)} to {args.output or 'stdout'}"]
    if parquet is not None:
        written.append(f"{parquet.rows:,} rows to {args.results}")
    if args.pareto is not None:
        written.append(f"frontier of {len(result.frontier)} to {args.pareto}")
    if args.plot is not None:
        written.append(f"plot to {args.plot}")
    say("wrote " + "; ".join(written))
