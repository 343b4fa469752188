"""``harness contract check|write [--cases DIR] [--contract PATH]``.

``check`` runs the experiment on the vendored records and lists every broken
contract entry (exit 1); ``write`` regenerates the contract from the current
results, for a reviewed golden update (never in CI).
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.errors import HarnessError


def register(sub) -> None:
    p = sub.add_parser("contract", help="check or (re)write the baseline regression contract")
    p.add_argument("action", choices=("check", "write"))
    p.add_argument("--cases", type=Path, default=Path("cases"), help="case directory (default: cases)")
    p.add_argument("--contract", type=Path, default=None, help="contract path (default: goldens/...)")
    p.set_defaults(func=run)


def run(args) -> int:
    from harness.experiment.contract import CONTRACT_PATH, evaluate, load_contract, write_contract
    from harness.experiment.run import run_experiment

    path = args.contract or CONTRACT_PATH
    report = run_experiment(args.cases)
    if args.action == "write":
        if os.environ.get("CI"):
            raise HarnessError("the baseline contract is never rewritten under CI; update it locally for review")
        print(f"wrote {write_contract(report, path)}")
        return 0
    broken = evaluate(load_contract(path), report)
    for line in broken:
        print(f"BROKEN {line}")
    print(f"{path}: {'honoured' if not broken else f'{len(broken)} broken entr' + ('y' if len(broken) == 1 else 'ies')}")
    return 1 if broken else 0
