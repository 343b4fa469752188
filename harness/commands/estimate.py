"""``harness estimate CASE.yaml... [--view NAME] [--json]``.

The command reads a case, hands only its anonymous estimate input to
:func:`harness.estimate.estimate`, and labels the result with the case id
afterwards.
"""

from __future__ import annotations

import json
from typing import Any

from harness.cases import load_case
from harness.cost.views import VIEWS
from harness.estimate import DEFAULT_VIEWS, Estimate, estimate

VIEW_FIELDS = ("total_s", "components_s", "memory_bytes", "workload")


def register(sub) -> None:
    p = sub.add_parser("estimate", help="estimate cases with the peak-only and system-evidence views")
    p.add_argument("cases", nargs="*", metavar="CASE.yaml", help="case files")
    p.add_argument("--view", choices=sorted(VIEWS), help="only this view")
    p.add_argument("--json", action="store_true", help="JSON list of {id, status, reason, views}")
    p.set_defaults(func=run)


def view_json(est: Estimate) -> dict[str, Any]:
    return {name: v.model_dump(mode="json", include=set(VIEW_FIELDS)) for name, v in est.views.items()}


def estimate_json(case_id: str, est: Estimate) -> dict[str, Any]:
    return {"id": case_id, "status": est.status, "reason": est.reason, "views": view_json(est)}


def run(args) -> int:
    views = (VIEWS[args.view],) if args.view else DEFAULT_VIEWS
    results = []
    for path in args.cases:
        case = load_case(path)
        results.append((case.id, estimate(case.estimate_input(), views, source=path)))
    if args.json:
        print(json.dumps([estimate_json(cid, est) for cid, est in results], indent=1))
        return 0
    for cid, est in results:
        status = "" if est.status == "ok" else f"  [{est.status}: {est.reason}]"
        print(f"{cid}{status}")
        for name, v in est.views.items():
            comps = "  ".join(f"{k}={val:.4f}" for k, val in v.components_s.model_dump().items() if val)
            print(f"  {name:16s} total={v.total_s:.4f} s  memory={v.memory_bytes.tier1_total / 2**30:.2f} GiB  {comps}")
    return 0
