"""``harness trace CASE [--system NAME] --output TRACE.json [--png SCHEDULE.png] [--view NAME] [--task-microbatches N]
[--max-operations N]``.

Simulates the case's pipeline iteration event by event under one cost view,
writes a Chrome trace (Perfetto / chrome://tracing) and optionally a Gantt
PNG, and prints the simulated bubble next to the closed form's. An
infeasible case is said first and the exit status is 1 (the trace is still
written: it shows what the layout would take; :mod:`harness.commands.case_arguments`).

A layout with TP/DP overlap or offload is traced from its ConcretePlanIR's
physical schedule instead (:mod:`harness.trace.queues`): one thread per
queue of the first stage (compute, each network tier, the tier-2 link) with
the overlapped tiles and the exposed gaps, next to every stage's operations;
it prints the physical and the ``calculon-0.1.0`` totals and the first
stage's exposed time per queue. Its PNG draws the same queue intervals as
rows below the stages (:func:`harness.report.gantt.queue_rows`).

Before any simulation: the output locations are checked (:mod:`harness.outputs`:
not a directory, not the case file, not each other, writable), and the work
is bounded: the iteration's pipeline operations (``PP x chunks x microbatches
x phases``) may not exceed ``--max-operations`` (default
:data:`~harness.trace.MAX_TRACE_OPERATIONS`), nor the trace events
(operations plus the blocks and tasks nested in the first N microbatches)
:data:`~harness.trace.MAX_TRACE_EVENTS`. A larger iteration is refused with
its counts, up front, not after minutes of simulation or an exhausted memory.
"""

from __future__ import annotations

from harness.commands.case_arguments import add_case_arguments, infeasible_line, load_case_argument, \
    report_infeasible
from harness.cost.views import COST_VIEWS
from harness.errors import InputError
from harness.estimate import check_tiers, estimate
from harness.evidence.profile import load_profile
from harness.outputs import check_output, committed_together, data_files
from harness.pipeline import lower
from harness.trace import MAX_TRACE_OPERATIONS, Trace, trace_lowering, write_trace
from harness.vocabulary import SYSTEM_EVIDENCE, VIEWS


def register(sub) -> None:
    p = sub.add_parser("trace", help="simulate the pipeline event by event; write a Chrome trace (and a Gantt PNG)")
    add_case_arguments(p, many=False, dest="case")
    p.add_argument("--output", required=True, metavar="TRACE.json", help="Chrome trace event JSON to write")
    p.add_argument("--png", metavar="SCHEDULE.png", help="also draw the schedule as a Gantt chart")
    p.add_argument("--view", choices=list(VIEWS), default=SYSTEM_EVIDENCE, help=f"cost view (default: {SYSTEM_EVIDENCE})")
    p.add_argument("--task-microbatches", type=int, default=1, metavar="N",
                   help="nest block and task events in the operations of the first N microbatches (default 1)")
    p.add_argument("--max-operations", type=int, default=MAX_TRACE_OPERATIONS, metavar="N",
                   help=f"refuse iterations with more pipeline operations (default {MAX_TRACE_OPERATIONS})")
    p.set_defaults(func=run)


def run(args) -> int:
    if args.task_microbatches < 0:
        raise InputError(args.case, "--task-microbatches", f"must be >= 0, got {args.task_microbatches}")
    if args.max_operations < 1:
        raise InputError(args.case, "--max-operations", f"must be >= 1, got {args.max_operations}")
    source, case = load_case_argument(args.case, args.system)
    args.case = source
    inputs = [args.case, *data_files()]
    check_output(args.output, option="--output", inputs=inputs, others=[args.png])
    if args.png:
        check_output(args.png, option="--png", inputs=inputs, others=[args.output])
        if args.task_microbatches == 0 and lower(case.estimate_input(), args.case).concurrent:
            raise InputError(args.case, "--task-microbatches", "a physical schedule's PNG draws the recorded "
                                                               "microbatches: use 1 or more with --png")
    data = case.estimate_input()
    profile = load_profile(data.system, referrer=args.case)
    check_tiers(data, profile, args.case)
    est = estimate(data, source=args.case)
    if est.status != "ok":
        print(infeasible_line(case.id, est.system, est.reason))
    infeasible = int(est.status != "ok")
    lowering = lower(data, args.case)
    trace = trace_lowering(lowering, profile, COST_VIEWS[args.view], task_microbatches=args.task_microbatches,
                           label=case.id, source=args.case, max_operations=args.max_operations)
    with committed_together():  # the trace and the PNG, or neither (harness.outputs)
        write_trace(trace.doc, args.output)
        if args.png:
            _write_png(args, case, trace)
    if trace.schedule is not None:
        return _report_queues(args, case, trace) or report_infeasible(infeasible, 1)
    sim, doc = trace.simulation, trace.doc
    ops = sum(len(stage) for stage in sim.ops)
    print(f"{case.id} {args.view}: {sim.pipeline_parallel} stages, {ops} operations, {len(doc['traceEvents'])} events "
          f"-> {args.output}" + (f", {args.png}" if args.png else ""))
    print(f"  makespan {sim.makespan_s:.6f} s, iteration {sim.total_s:.6f} s (closed form {sim.closed_form_total_s:.6f} s)")
    print(f"  stage-0 busy {sim.first_stage_busy_s:.6f} s, idle {sim.first_stage_idle_s:.6f} s; closed-form bubble "
          f"{sim.closed_form_bubble_s:.6f} s; difference {sim.bubble_difference_s:+.3e} s")
    print(f"  {sim.note}")
    return report_infeasible(infeasible, 1)


def _write_png(args, case, trace: Trace) -> None:
    """The Gantt PNG: of the simulation, or of a queue trace's physical schedule (see the module rules)."""
    from harness.report.gantt import queue_rows, write_gantt

    if trace.schedule is None:
        write_gantt(trace.simulation, args.png, title=f"{case.id} ({args.view})")
        return
    rows = queue_rows(trace.schedule.events, [q.name for q in trace.concrete.queues])
    write_gantt(trace.drawn(), args.png, title=f"{case.id} ({args.view}, physical schedule)", queues=rows,
                queues_note=f" as the trace records them: its first {args.task_microbatches} microbatch(es) "
                            f"and its step")


def _report_queues(args, case, trace: Trace) -> int:
    """The summary of a queue trace (a layout with TP/DP overlap or offload; see the module rules)."""
    schedule, other = trace.schedule, trace.doc["otherData"]
    print(f"{case.id} {args.view}: {trace.concrete.schedule.pipeline_parallel} stages, {len(schedule.ops)} operations, "
          f"{len(trace.doc['traceEvents'])} events -> {args.output}" + (f", {args.png}" if args.png else ""))
    print(f"  physical schedule {other['total_s']:.6f} s; the estimate (calculon-0.1.0) {other['calculon_total_s']:.6f} s")
    for entry in other["exposed_s"]:
        print(f"  stage 0 waits {entry['seconds']:.6f} s for {entry['component']} on {entry['queue']}")
    return 0
