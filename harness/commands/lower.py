"""``harness lower CASE [--system NAME] [--stage model|distributed|portable|concrete] [--json | --canonical]``.

Text (default): the readable IR and its digest. ``--json``: an indented
object ``{"digest", "ir"}`` with the IR's data. ``--canonical``: exactly the
IR's canonical JSON, the text whose SHA-256 is the digest (one line).
``concrete``: the ConcretePlanIR of ``transformer-concretize`` with the
layout's TP/DP overlap and offload options (a layout without them has the
ConcretePlanIR without concurrency, from which its estimate is projected).
"""

from __future__ import annotations

import json

from harness.commands.case_arguments import add_case_arguments, load_case_argument
from harness.ir.printer import render
from harness.pipeline import lower

STAGES = ("model", "distributed", "portable", "concrete")


def register(sub) -> None:
    p = sub.add_parser("lower", help="print a case's IR (ModelIR, DistributedTaskIR, PortablePlanIR or ConcretePlanIR) "
                                        "with its digest")
    add_case_arguments(p, many=False, dest="case")
    p.add_argument("--stage", choices=STAGES, default="portable", help="which IR (default: portable)")
    form = p.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help='{"digest", "ir"} as indented JSON instead of text')
    form.add_argument("--canonical", action="store_true",
                      help="the IR's canonical JSON (the text its SHA-256 digest is computed from)")
    p.set_defaults(func=run)


def run(args) -> int:
    source, case = load_case_argument(args.case, args.system)
    lowering = lower(case.estimate_input(), source)
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
