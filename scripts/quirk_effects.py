"""Measure each Calculon 0.1.0 overlap/offload rule's effect on a corpus of Calculon records.

Usage (from the repository root)::

    python scripts/quirk_effects.py [--records ../shared/reference/oracle-records/overlap-public.json | --vendored]

For every rule of harness.calculon_compat.OVERLAP_RULES: switch it off (its
physical alternative), estimate every record Calculon estimated, and report
how many view estimates change and the largest change of the total (percent
of Calculon's total). ``all`` switches every rule off: the physical
projection of the ConcretePlanIR (harness.schedule.physical).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import calculon_compat as compat
from harness.oracles.calculon import estimate_record
from harness.oracles.records import load_record_file
from harness.oracles.reference import read_reference

PUBLIC = Path(__file__).resolve().parents[2] / "shared" / "reference" / "oracle-records" / "overlap-public.json"


def effects(records) -> list[tuple[str, int, int, float]]:
    """``(rule, changed view estimates, estimated view estimates, largest |change| %)`` per rule and for all."""
    ok = [r for r in records if all(v.error is None for v in r.views.values())]
    base = {r.id: estimate_record(r) for r in ok}
    rows = []
    for names in [(n,) for n in compat.OVERLAP_RULES] + [compat.OVERLAP_RULES]:
        changed = total = 0
        largest = 0.0
        with compat.switched_off(*names):
            for r in ok:
                est = estimate_record(r)
                for view in r.views:
                    total += 1
                    calc = base[r.id].views[view].total_s
                    mine = est.views[view].total_s
                    if mine != calc:
                        changed += 1
                        largest = max(largest, abs(mine - calc) / calc * 100)
        rows.append(("all (physical)" if len(names) > 1 else names[0], changed, total, largest))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=Path, default=PUBLIC, help="a shared reference record file")
    parser.add_argument("--vendored", action="store_true", help="the vendored overlap corpus instead")
    args = parser.parse_args(argv)
    records = load_record_file("records/overlap.json.gz").records if args.vendored else \
        read_reference(args.records).records
    print("| rule | view estimates changed | of | largest change of the total |")
    print("|---|---|---|---|")
    for name, changed, total, largest in effects(records):
        print(f"| `{name}` | {changed} | {total} | {largest:.4g} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
