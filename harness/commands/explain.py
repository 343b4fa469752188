"""``harness explain CASE... [--system NAME] [--json] [--by-task [--view NAME]]``.

Default: the evidence gap (system_evidence - peak_only) of each case split
over the curve families with exact Shapley values, per total and per timing
component; for a layout with TP/DP overlap or offload also each component of
each view split per queue into busy, hidden and exposed time
(:mod:`harness.explain.queues`; JSON key ``queues``). ``--by-task``: each
timing component of each view listed by the PortablePlanIR tasks (and
plan-level messages) behind it (refused with overlap or offload). Only the
case's anonymous estimate input reaches the library; the id labels the result.
An infeasible case is said first (before its split) and the exit status is 1
(:mod:`harness.commands.case_arguments`); in JSON each object has ``status``
and ``reason``.
"""

from __future__ import annotations

import json
from typing import Any

from harness.commands.case_arguments import add_case_arguments, infeasible_line, load_case_argument, \
    report_infeasible
from harness.cost.views import COST_VIEWS
from harness.errors import InputError
from harness.estimate import DEFAULT_VIEWS, estimate
from harness.explain import Attribution, ViewTasks, explain_input
from harness.vocabulary import CURVE_FAMILIES, VIEWS


def register(sub) -> None:
    p = sub.add_parser("explain", help="split the evidence gap over curve families (Shapley), or components by task")
    add_case_arguments(p, many=True)
    p.add_argument("--by-task", action="store_true", help="list each component's plan tasks instead")
    p.add_argument("--view", choices=list(VIEWS), help="with --by-task: only this view")
    p.add_argument("--json", action="store_true", help="JSON list, one object per case")
    p.set_defaults(func=run)


def attribution_json(case_id: str, a: Attribution, queues=None) -> dict[str, Any]:
    out = {"id": case_id, **a.model_dump(mode="json")}
    if queues is not None:
        out["queues"] = [v.model_dump(mode="json") for v in queues]
    return out


def print_queues(case_id: str, views) -> None:
    for v in views:
        print(f"{case_id}  {v.view}: per queue (physical schedule {v.physical_total_s:.4f} s; the estimate, "
              f"calculon-0.1.0, {v.estimate_total_s:.4f} s)")
        print(f"  {'component':18s} {'queue':14s} {'busy':>10s} {'hidden':>10s} {'exposed':>10s} {'slowdown':>10s}"
              f" {'physical':>10s} {'estimate':>10s}")
        for c in v.components:
            for i, q in enumerate(c.queues):
                tail = f" {c.physical_s:10.4f} {c.estimate_s:10.4f}" if i == 0 else ""
                print(f"  {c.component if i == 0 else '':18s} {q.queue or '(idle)':14s} {q.busy_s:10.4f} "
                      f"{q.hidden_s:10.4f} {q.exposed_s:10.4f} {q.slowdown_s:10.4f}{tail}")
            if not c.queues and c.estimate_s:
                print(f"  {c.component:18s} {'-':14s} {'':10s} {'':10s} {'':10s} {'':10s} {c.physical_s:10.4f} "
                      f"{c.estimate_s:10.4f}")


def print_attribution(case_id: str, a: Attribution) -> None:
    print(f"{case_id}: peak_only {a.peak_only_total_s:.4f} s -> system_evidence {a.system_evidence_total_s:.4f} s, "
          f"gap {a.gap_s:+.4f} s")
    families = [f for f in CURVE_FAMILIES if f in a.attribution_s]  # the families the profile defines
    width = max(10, *(len(f) + 1 for f in families))
    print(f"  {'component':18s}" + "".join(f"{f:>{width}s}" for f in families) + f"{'gap':>10s}")
    rows = [(name, parts) for name, parts in a.by_component.items() if any(parts.values())]
    for name, parts in rows + [("total", a.attribution_s)]:
        cells = "".join(f"{parts[f]:+{width}.4f}" for f in families)
        print(f"  {name:18s}{cells}{sum(parts.values()):+10.4f}")


def print_by_task(case_id: str, views: tuple[ViewTasks, ...]) -> None:
    for v in views:
        print(f"{case_id}  {v.view}  total {v.total_s:.4f} s")
        for comp in v.components:
            if not comp.tasks:
                continue
            print(f"  {comp.component}  {comp.time_s:.6f} s")
            for t in comp.tasks:
                share = t.time_s / comp.time_s if comp.time_s else 0.0
                print(f"    {t.task:34s} {t.primitive:14s} ops={t.operations:10.4g} mem={t.memory_bytes:10.4g} B "
                      f"msg={t.message_bytes:10.4g} B  {t.time_s:.6f} s {share:7.2%}")


def run(args) -> int:
    if args.view and not args.by_task:  # the attribution explains both views against each other
        raise InputError("<command line>", "--view", "is for --by-task (the attribution compares both views)")
    results, feasibility = [], []
    for argument in args.cases:
        path, case = load_case_argument(argument, args.system)
        est = estimate(case.estimate_input(), source=path)
        feasibility.append((est.status, est.reason, est.system))
        if args.by_task:
            views = (COST_VIEWS[args.view],) if args.view else DEFAULT_VIEWS
            results.append((case.id, explain_input(case.estimate_input(), views, mode="by_task", source=path).tasks))
        else:
            explained = explain_input(case.estimate_input(), DEFAULT_VIEWS, source=path)
            results.append((case.id, (explained.attribution, explained.queues)))
    infeasible = sum(status != "ok" for status, _, _ in feasibility)
    if args.json:
        if args.by_task:
            out = [{"id": cid, "views": [v.model_dump(mode="json") for v in views]} for cid, views in results]
        else:
            out = [attribution_json(cid, a, queues) for cid, (a, queues) in results]
        for entry, (status, reason, _) in zip(out, feasibility):
            entry.update(status=status, reason=reason)
        print(json.dumps(out, indent=1, allow_nan=False))
        return report_infeasible(infeasible, len(results))
    for (cid, result), (status, reason, system) in zip(results, feasibility):
        if status != "ok":
            print(infeasible_line(cid, system, reason))
        if args.by_task:
            print_by_task(cid, result)
            continue
        attribution, queues = result
        print_attribution(cid, attribution)
        if queues is not None:
            print_queues(cid, queues)
    return report_infeasible(infeasible, len(results))
