"""``harness oracle record --calculon-src PATH [--cases DIR] [--output REL]``.

Runs a local Calculon checkout on every case (both views) and writes the
project's own record file under ``vendor/calculon-0.1.0/`` plus its manifest.
"""

from __future__ import annotations

from pathlib import Path

from harness.cases import load_cases
from harness.oracles.record import record_inputs, write_record_file
from harness.oracles.records import VENDOR_DIR
from harness.oracles.runner import CalculonRunner


def register(sub) -> None:
    p = sub.add_parser("oracle", help="oracle records (Calculon)")
    osub = p.add_subparsers(dest="oracle_command", required=True, metavar="SUBCOMMAND")
    r = osub.add_parser("record", help="run a Calculon checkout on the cases and vendor its outputs")
    r.add_argument("--calculon-src", required=True, type=Path, help="Calculon 0.1.0 source checkout")
    r.add_argument("--cases", type=Path, default=Path("cases"), help="case directory (default: cases)")
    r.add_argument("--output", default="records/cases.json", help="record file, relative to the vendor directory")
    r.add_argument("--vendor", type=Path, default=VENDOR_DIR, help=f"vendor directory (default: {VENDOR_DIR})")
    r.set_defaults(func=run_record)


def run_record(args) -> int:
    runner = CalculonRunner(args.calculon_src)
    cases = load_cases(args.cases)
    inputs = [(c.comparison.oracle_record or c.id, c.estimate_input()) for c in cases]
    records, revisions = record_inputs(runner, inputs)
    path = write_record_file(runner, args.output, records, revisions, args.vendor)
    print(f"wrote {len(records)} records to {path} (Calculon source sha256 {runner.source_digest})")
    return 0
