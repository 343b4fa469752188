"""``harness estimate CASE.yaml... [--view NAME] [--json]`` and
``harness estimate --calculon-batch IN.jsonl [--output OUT.json]``.

The command reads a case (or a Calculon-format batch line), hands only its
anonymous estimate input to :func:`harness.estimate.estimate`, and labels the
result with the case id afterwards.

Batch output: a JSON list, one entry per non-blank input line, in file order,
``{"id", "status", "reason", "views"}`` with the ``--json`` view fields;
``status`` is ``ok``, ``infeasible`` (Calculon would refuse it: network tier
or memory capacity; figures still given), ``rejected`` (TP/DP overlap or
offload; no views) or ``invalid`` (reason ``line N: field: message``; no
views). A bad line never stops the batch; the exit status is 1 when any line
is invalid, 0 otherwise.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from harness.cases import load_case
from harness.cost.views import COST_VIEWS
from harness.errors import InputError
from harness.estimate import DEFAULT_VIEWS, Estimate, estimate
from harness.interop.calculon_batch import BatchLine, read_batch
from harness.vocabulary import BATCH_STATUSES, VIEWS



def register(sub) -> None:
    p = sub.add_parser("estimate", help="estimate cases with the peak-only and system-evidence views")
    p.add_argument("cases", nargs="*", metavar="CASE.yaml", help="case files")
    p.add_argument("--view", choices=list(VIEWS), help="only this view")
    p.add_argument("--json", action="store_true", help="JSON list of {id, status, reason, views}")
    p.add_argument("--calculon-batch", type=Path, metavar="IN.jsonl",
                   help='Calculon-format batch, one {"id", "model", "execution", "system"} per line (.gz allowed)')
    p.add_argument("--output", type=Path, metavar="OUT.json", help="write the JSON list here instead of stdout")
    p.set_defaults(func=run)


def estimate_json(case_id: str, est: Estimate) -> dict[str, Any]:
    return {"id": case_id, "status": est.status, "reason": est.reason, "views": est.views_json()}


def batch_entry_json(entry: BatchLine, views=DEFAULT_VIEWS, source: str = "<batch>") -> dict[str, Any]:
    """The output entry of one classified batch line (estimating valid lines)."""
    if entry.status != "valid":
        return {"id": entry.id, "status": entry.status, "reason": entry.reason, "views": {}}
    return estimate_json(entry.id, estimate(entry.input, views, source=f"{source}:{entry.line}"))


def _emit(data: Any, output: Path | None) -> None:
    text = json.dumps(data, indent=1) + "\n"
    if output is None:
        sys.stdout.write(text)
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)


def run_batch(args, views) -> int:
    if args.cases:
        raise InputError("--calculon-batch", "CASE.yaml", "give case files or a batch, not both")
    results = [batch_entry_json(e, views, str(args.calculon_batch)) for e in read_batch(args.calculon_batch)]
    _emit(results, args.output)
    counts = Counter(r["status"] for r in results)
    summary = ", ".join(f"{counts[s]} {s}" for s in BATCH_STATUSES)
    where = args.output if args.output else "stdout"
    print(f"estimated {len(results)} batch lines to {where}: {summary}", file=sys.stderr)
    return 1 if counts["invalid"] else 0


def run(args) -> int:
    views = (COST_VIEWS[args.view],) if args.view else DEFAULT_VIEWS
    if args.calculon_batch is not None:
        return run_batch(args, views)
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
