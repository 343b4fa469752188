"""``harness lower CASE.yaml [--stage model|distributed|portable] [--json]``."""

from __future__ import annotations

import json

from harness.cases import load_case
from harness.ir.printer import render
from harness.pipeline import lower

STAGES = ("model", "distributed", "portable")


def register(sub) -> None:
    p = sub.add_parser("lower", help="print a case's IR (ModelIR, DistributedTaskIR or PortablePlanIR) with its digest")
    p.add_argument("case", help="case YAML")
    p.add_argument("--stage", choices=STAGES, default="portable", help="which IR (default: portable)")
    p.add_argument("--json", action="store_true", help="canonical JSON instead of text")
    p.set_defaults(func=run)


def run(args) -> int:
    case = load_case(args.case)
    lowering = lower(case.estimate_input(), args.case)
    ir = {"model": lowering.model, "distributed": lowering.distributed, "portable": lowering.plan}[args.stage]
    if args.json:
        print(json.dumps({"digest": ir.digest(), "ir": ir.to_data()}, indent=1, sort_keys=True, allow_nan=False))
    else:
        print(render(ir))
    return 0
