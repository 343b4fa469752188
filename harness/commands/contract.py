"""``harness contract check|write [--cases DIR] [--contract PATH]``.

``check`` runs the experiment on the vendored records and lists every broken
contract entry (exit 1); ``write`` regenerates the contract from the current
results, for a reviewed golden update (never in CI).
"""

from __future__ import annotations

import os
from pathlib import Path

from harness import locations
from harness.errors import HarnessError


def register(sub) -> None:
    p = sub.add_parser("contract", help="check or (re)write the baseline regression contract")
    p.add_argument("action", choices=("check", "write"))
    p.add_argument("--cases", type=Path, help="case directory (default: the project's cases/, else the packaged ones)")
    p.add_argument("--contract", type=Path, default=None,
                   help="contract path (default: the project's goldens/baseline_regression_contract.json, else the "
                        "packaged one; write: the project's)")
    p.set_defaults(func=run)


def run(args) -> int:
    from harness.cases import case_paths
    from harness.experiment.contract import evaluate, load_contract, write_contract
    from harness.experiment.run import run_experiment
    from harness.outputs import check_output

    where = locations.current()
    cases = args.cases or where.cases_dir()
    inputs = case_paths(cases)
    if args.action == "write":
        if os.environ.get("CI"):
            raise HarnessError("the baseline contract is never rewritten under CI; update it locally for review")
        path = args.contract or where.writable(locations.CONTRACT_FILE, "the baseline contract")
        check_output(path, option="--contract", inputs=inputs, replaces_data=("contract",))
        print(f"wrote {write_contract(run_experiment(cases), path)}")
        return 0
    path = args.contract or where.contract_path()
    contract = load_contract(path)  # a malformed contract fails before the experiment runs
    report = run_experiment(cases)
    broken = evaluate(contract, report)
    for line in broken:
        print(f"BROKEN {line}")
    print(f"{path}: {'honoured' if not broken else f'{len(broken)} broken entr' + ('y' if len(broken) == 1 else 'ies')}")
    return 1 if broken else 0
