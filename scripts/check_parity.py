#!/usr/bin/env python3
"""Check parity with Calculon 0.1.0 on any recorded corpus: a fresh random one, say.

Usage (from the repository root; CALCULON is a Calculon checkout outside the project)::

    python scripts/generate_differential.py --seed 4242 --count 2000 --output /tmp/blind/d.jsonl.gz
    cp -r vendor/calculon-0.1.0 /tmp/blind/vendor      # the recorder adds its file to a vendor directory's manifest
    python -m harness oracle record --calculon-src CALCULON --batch /tmp/blind/d.jsonl.gz \\
        --output records/d.json.gz --vendor /tmp/blind/vendor --no-layers
    python scripts/check_parity.py records/d.json.gz --vendor /tmp/blind/vendor

(``generate_differential.py --overlap`` draws TP/DP overlap and offload too.) Every record and every recorded
view: the same verdict as Calculon and every metric within its budget (:func:`harness.oracles.calculon.check_record`,
what ``tests/test_differential.py`` asserts on the vendored corpora). Prints one summary line per file and the
first ``--show`` mismatches; exit status 1 when any record does not match.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.errors import HarnessError
from harness.oracles.calculon import check_record
from harness.oracles.records import load_record_file


def check_file(relative: str, vendor: Path | None, show: int) -> int:
    """Mismatching records of one record file (printed: a summary line, then up to ``show`` of them)."""
    records = load_record_file(relative, vendor).records
    mismatches = []
    for record in records:
        problems = [p.describe() for p in check_record(record) if not p.ok]
        if problems:
            mismatches.append(f"  {record.id}: " + " | ".join(problems))
    ran = sum(1 for r in records if all(v.error is None for v in r.views.values()))
    print(f"{relative}: {len(records)} records ({ran} that Calculon ran, {len(records) - ran} it refused): "
          f"{len(mismatches)} mismatching")
    for line in mismatches[:show]:
        print(line)
    return len(mismatches)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", nargs="+", help="record files, relative to the vendor directory (records/....json.gz)")
    parser.add_argument("--vendor", type=Path, help="vendor directory (default: the project's vendor/calculon-0.1.0)")
    parser.add_argument("--show", type=int, default=20, help="mismatches printed per file (default 20)")
    args = parser.parse_args(argv)
    try:
        failed = sum(check_file(name, args.vendor, args.show) for name in args.records)
    except HarnessError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
