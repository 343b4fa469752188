"""``harness lower CASE.yaml [--stage model|distributed|portable|concrete] [--json | --canonical]``.

Text (default): the readable IR and its digest. ``--json``: an indented
object ``{"digest", "ir"}`` with the IR's data. ``--canonical``: exactly the
IR's canonical JSON, the text whose SHA-256 is the digest (one line).
``concrete``: the ConcretePlanIR of ``transformer-concretize`` with the
layout's TP/DP overlap and offload options (a layout without them has the
ConcretePlanIR without concurrency, from which its estimate is projected).
"""

from __future__ import annotations

import json

from harness.cases import load_case
from harness.ir.printer import render
from harness.pipeline import lower

STAGES = ("model", "distributed", "portable", "concrete")


def register(sub) -> None:
    p = sub.add_parser("lower", help="print a case's IR (ModelIR, DistributedTaskIR, PortablePlanIR or ConcretePlanIR) "
                                        "with its digest")
    p.add_argument("case", help="case YAML")
    p.add_argument("--stage", choices=STAGES, default="portable", help="which IR (default: portable)")
    form = p.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help='{"digest", "ir"} as indented JSON instead of text')
    form.add_argument("--canonical", action="store_true",
                      help="the IR's canonical JSON (the text its SHA-256 digest is computed from)")
    p.set_defaults(func=run)


def run(args) -> int:
    case = load_case(args.case)
    lowering = lower(case.estimate_input(), args.case)
    if args.stage == "concrete":
        ir = lowering.concrete()
    else:
        ir = {"model": lowering.model, "distributed": lowering.distributed, "portable": lowering.plan}[args.stage]
    if args.json:
        print(json.dumps({"digest": ir.digest(), "ir": ir.to_data()}, indent=1, sort_keys=True, allow_nan=False))
    elif args.canonical:
        print(ir.canonical())
    else:
        print(render(ir))
    return 0
