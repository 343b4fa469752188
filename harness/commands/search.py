"""``harness search --model M --system PROFILE --procs N --max-batch B --datatype DT [options]``.

Searches Calculon 0.1.0's execution space for the layouts with the highest
sample rate (see :mod:`harness.search.space` for the space,
:mod:`harness.search.evaluate` for what is shared and pruned,
:mod:`harness.search.run` for Dask, ``docs/search.md`` for sizing a cluster).

Outputs: the top K as a JSON list (``--output``, else stdout), best first;
``--results`` every execution as Parquet; ``--pareto`` the time-memory
frontier as a JSON list and ``--plot`` a PNG of the evaluated space. A
summary (counts, best, time, evidence revision) goes to stderr with a progress
bar, the best execution labelled in the project's field names, and the top K
grouped: entries that differ only in :data:`NEAR_DUPLICATE_FIELDS` are one
line (the JSON keeps every entry: it is Calculon's top K). ``--emit-case``
writes the best execution as a case YAML (:mod:`harness.interop.case_document`)
that ``harness estimate`` reads back to the same figures. Exit status 0, or 1
when no execution is feasible, said first on stderr (the outputs are still
written, empty; no case): the feasibility rule of every command that prices
(:mod:`harness.commands.case_arguments`). The best execution is feasible by
construction (only feasible executions rank).
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from harness.commands.case_arguments import INFEASIBLE_STATUS
from harness.inputs import read_yaml
from harness.outputs import check_output, committed_together, data_files, write_text
from harness.search.output import ParquetRows, entries_json
from harness.search.request import check_workers, search_problem
from harness.search.results import EXTENSION_COLUMNS
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
                       help="local Dask workers (default: in this process for a space below 500,000 executions, where "
                        "starting a cluster costs more than it saves; else one per core; 1: in this process)")
    where.add_argument("--scheduler", metavar="ADDRESS", help="an existing Dask scheduler, e.g. tcp://HOST:8786")
    p.add_argument("--pareto", type=Path, metavar="FRONTIER.json", help="the time-memory Pareto frontier as JSON")
    p.add_argument("--plot", type=Path, metavar="PLOT.png", help="PNG of the evaluated space, frontier and top K")
    p.add_argument("--fused-activation", choices=sorted(FUSED_CHOICES), default="true",
                   help="fused activation values searched (Calculon's -f; default: true)")
    p.add_argument("--mbs-break", action="store_true",
                   help="stop growing the microbatch after a size with no feasible execution (Calculon's -m)")
    p.add_argument("--no-tp-overlap", action="store_true", help="leave TP overlap out (Calculon's --no-tp-overlap)")
    p.add_argument("--no-dp-overlap", action="store_true", help="leave DP overlap out (Calculon's --no-dp-overlap)")
    p.add_argument("--context-parallel", action="store_true",
                   help="also search context parallelism (beyond Calculon's space: every CP degree that divides "
                        "procs / TP and splits the sequence into 2 x CP chunks, its network tier placed)")
    p.add_argument("--precision", choices=("none", "all"), default="none",
                   help="mixed-precision recipes searched (beyond Calculon's space): none (everything in "
                        "--datatype, the default) or all (also each fp8/fp4 recipe whose GEMM datatype the profile "
                        "has, for --datatype bfloat16)")
    p.add_argument("--no-prune", action="store_true", help="compose every execution (same result, slower)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--emit-case", type=Path, metavar="CASE.yaml",
                   help="also write the best execution as a case YAML (the project's field names), ready for "
                        "`harness estimate CASE.yaml`")
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
    named = [(args.output, "--output"), (args.results, "--results"), (args.pareto, "--pareto"), (args.plot, "--plot"),
             (args.emit_case, "--emit-case")]
    protected = [args.model, *data_files()]
    for path, flag in named:
        if path is not None:
            check_output(path, option=flag, inputs=protected,
                         others=[other for other, o in named if other is not None and o != flag])
    options = SpaceOptions(fused_activation=FUSED_CHOICES[args.fused_activation], tp_overlap=not args.no_tp_overlap,
                           dp_overlap=not args.no_dp_overlap, mbs_break=args.mbs_break,
                           context_parallel=args.context_parallel)
    collect_points = args.pareto is not None or args.plot is not None
    problem = search_problem(args.model, args.system, args.procs, args.max_batch, args.datatype, top=args.top,
                             options=options, prune=not args.no_prune, collect_rows=args.results is not None,
                             collect_points=collect_points, precision=args.precision)
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

    with committed_together():  # every output file, or none (harness.outputs)
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
            write_plot(args.plot, rates, memory, result.frontier, result.best, profile.memory_tier1.capacity_bytes,
                       title)
        if args.emit_case is not None and result.best:
            write_text(args.emit_case, best_case_text(args, problem, result.best[0]), option="--emit-case")
    _summary(args, problem, result, evidence, parquet)
    return 0 if result.best else INFEASIBLE_STATUS


def best_case_text(args, problem, best) -> str:
    """The best execution as a case YAML (:mod:`harness.interop.case_document`): the searched shape, the
    execution in the project's names, the searched profile; it reads back to exactly that input."""
    from harness.interop.calculon_format import input_from_calculon_execution
    from harness.interop.case_document import case_text

    calculon = {k: v for k, v in best.execution.items() if k not in EXTENSION_COLUMNS}
    extension, beyond, tiers = best.execution, {}, {}
    for degree, net, field, tier in (("context_par", "context_par_net", "context_parallel", "context"),
                                     ("expert_par", "expert_par_net", "expert_parallel", "expert"),
                                     ("expert_tensor_par", "expert_tensor_par_net", "expert_tensor_parallel",
                                      "expert_tensor")):  # the fields beyond Calculon's space
        if degree in extension:
            beyond[field], tiers[tier] = extension[degree], extension[net]
    if tiers:
        beyond["network_tiers"] = tiers
    for key, field in (("precision", "precision"), ("moe_dispatcher", "moe_dispatcher")):
        if key in extension:
            beyond[field] = extension[key]
    data = input_from_calculon_execution(problem.shape, calculon, problem.profile.name, "--emit-case", beyond)
    case_id = f"search/{Path(args.model).stem}-p{problem.processors}-b{best.execution['batch_size']}"
    space = "".join(f" {flag}" for flag, given in (
        (f"--fused-activation {args.fused_activation}", args.fused_activation != "true"),
        ("--mbs-break", args.mbs_break), ("--no-tp-overlap", args.no_tp_overlap),
        ("--no-dp-overlap", args.no_dp_overlap),
        ("--context-parallel", args.context_parallel), (f"--precision {args.precision}", args.precision != "none"))
        if given)  # every option that shapes the searched space, so the header reruns the search
    return case_text(case_id, data, f"The best execution of `harness search --model {args.model} --system "
                                    f"{problem.profile.name} --procs {problem.processors} --max-batch "
                                    f"{problem.max_batch} --datatype {problem.datatype}{space}`: {best.rate!r} "
                                    "samples/s.")


#: Fields whose values can leave the sample rate (nearly) unchanged: top entries that differ only in them are
#: shown as one group in the summary (the top-K JSON keeps every entry, in Calculon's order).
NEAR_DUPLICATE_FIELDS = ("seq_par_ag_redo", "tensor_par_overlap", "data_par_overlap")


def layout_words(e: dict) -> str:
    """One execution in the project's field names, labelled (``tensor_parallel 4, ..., offload weights``)."""
    offload = [name for key, name in (("weight_offload", "weights"), ("activations_offload", "activations"),
                                      ("optimizer_offload", "optimizer")) if e[key]] or ["none"]
    return (f"tensor_parallel {e['tensor_par']}, pipeline_parallel {e['pipeline_par']}, data_parallel "
            f"{e['data_par']}, microbatch {e['microbatch_size']}, pipeline_interleaving {e['pipeline_interleaving']}, "
            f"recompute {e['activation_recompute']}, tp_communication {e['tensor_par_comm_type']}, tp_overlap "
            f"{e['tensor_par_overlap']}, dp_overlap {str(e['data_par_overlap']).lower()}, seq_par_ag_redo "
            f"{str(e['seq_par_ag_redo']).lower()}, optimizer_sharding {str(e['optimizer_sharding']).lower()}, "
            f"fused_activation {str(e['fused_activation']).lower()}, offload {'+'.join(offload)}, network_tiers "
            f"{e['tensor_par_net']}/{e['pipeline_par_net']}/{e['data_par_net']}"
            + (f", context_parallel {e['context_par']} (tier {e['context_par_net']})" if "context_par" in e else "")
            + (f", precision {e['precision']}" if "precision" in e else "")
            + (f", expert_parallel {e['expert_par']} (tier {e['expert_par_net']})" if "expert_par" in e else "")
            + (f", expert_tensor_parallel {e['expert_tensor_par']} (tier {e['expert_tensor_par_net']})"
               if "expert_tensor_par" in e else "")
            + (f", moe_dispatcher {e['moe_dispatcher']}" if "moe_dispatcher" in e else ""))


def near_duplicate_groups(best: list) -> list[list[int]]:
    """Indices of the top entries grouped: entries whose executions are equal but for
    :data:`NEAR_DUPLICATE_FIELDS`, in rank order, each group in the order of its best entry."""
    groups: dict[tuple, list[int]] = {}
    for index, candidate in enumerate(best):
        key = tuple(sorted((k, v) for k, v in candidate.execution.items() if k not in NEAR_DUPLICATE_FIELDS))
        groups.setdefault(key, []).append(index)
    return list(groups.values())


def search_notes(args, problem) -> list[str]:
    """What the request asked for that the search does not do, said rather than silently dropped: a case file's
    execution section (the search takes its model section) and ``--precision all`` with no recipe to try."""
    notes = []
    if Path(args.model).suffix != ".json":
        document = read_yaml(args.model).data
        if isinstance(document, dict) and document.get("execution"):
            fields = [str(name) for name in sorted(document["execution"], key=str)]
            shown = fields[:next((n for n in range(len(fields), 0, -1) if len(", ".join(fields[:n])) <= 120), 1)]
            more = f", and {len(fields) - len(shown)} more" if len(shown) < len(fields) else ""
            notes.append(f"{args.model}: the search takes the case's model section only; its execution section "
                         f"({', '.join(shown)[:120]}{more}) is not applied to the searched layouts")
    if args.precision == "all" and tuple(problem.options.precisions) == (None,):
        notes.append(f"--precision all: no quantizing recipe runs with --datatype {problem.datatype} on "
                     f"{problem.profile.name} (a recipe needs bfloat16 and a float8 or float4 matrix engine): "
                     f"every layout is priced in {problem.datatype}")
    return notes


def _summary(args, problem, result, evidence, parquet) -> None:
    c = result.counts
    say = lambda text: print(text, file=sys.stderr)  # noqa: E731
    if not result.best:  # said first: the written outputs are empty, not a result
        say(f"search: NO FEASIBLE EXECUTION of {args.model} on {evidence['profile']} with {problem.processors} "
            f"processors, batch <= {problem.max_batch}: {c.infeasible:,} infeasible, {c.invalid:,} invalid of "
            f"{c.executions:,} executions; the outputs are empty" + (", no case written (--emit-case)"
                                                                   if args.emit_case is not None else "")
            + f" (exit status {INFEASIBLE_STATUS})")
    for note in search_notes(args, problem):
        say(f"note: {note}")
    say(f"search: {args.model} on {evidence['profile']} (evidence revision {evidence['revision']}), "
        f"{problem.processors} processors, batch <= {problem.max_batch}, {problem.datatype}")
    say(f"space: {result.groups:,} groups, {c.executions:,} executions: {c.feasible:,} feasible "
        f"({c.pruned:,} of them pruned by the exact bound), {c.infeasible:,} infeasible, {c.invalid:,} invalid")
    if result.best:
        b = result.best[0]
        say(f"best: {b.rate!r} samples/s (total {b.total_s!r} s): {layout_words(b.execution)}")
        groups = near_duplicate_groups(result.best)
        if len(result.best) > 1:
            say(f"top {len(result.best)}: {len(groups)} distinct layout(s) (entries that differ only in "
                "seq_par_ag_redo, tp_overlap or dp_overlap are one group; the JSON keeps every entry)")
            for number, members in enumerate(groups, 1):
                first = result.best[members[0]]
                variants = ""
                if len(members) > 1:
                    variants = "; also ranks " + ", ".join(
                        f"{i + 1} ({_difference(first.execution, result.best[i].execution)}, "
                        f"{result.best[i].rate!r} samples/s)" for i in members[1:])
                say(f"  {number}. rank {members[0] + 1}: {first.rate!r} samples/s: {layout_words(first.execution)}"
                    f"{variants}")
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
    if args.emit_case is not None and result.best:
        written.append(f"the best execution as a case to {args.emit_case}")
    say("wrote " + "; ".join(written))


def _difference(first: dict, other: dict) -> str:
    from harness.interop.calculon_format import EXECUTION_FIELDS

    return ", ".join(f"{EXECUTION_FIELDS[key]} {str(other[key]).lower()}" for key in NEAR_DUPLICATE_FIELDS
                     if other[key] != first[key])
