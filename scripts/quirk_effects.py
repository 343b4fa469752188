"""Where the ``physical`` and the ``calculon-0.1.0`` projections differ, by how much, and why.

Usage (from the repository root)::

    python scripts/quirk_effects.py [--records REFERENCE.json | --vendored] [--limit N]

Default: the 300 shared overlap records (vendored as
``records/public-overlap.json.gz``); ``--records``: a shared reference
record file; ``--vendored``: the project's 3000-configuration overlap corpus.

For every view estimate of the records Calculon estimated, every named
difference of :mod:`harness.schedule.differences` (the compatibility rules
of the ``calculon-0.1.0`` projection, then the schedule differences of the
``physical`` one): how many view estimates it changes, and the largest
change of the total it accounts for (percent of Calculon's total); then
``all``: the ``physical`` projection against ``calculon-0.1.0``, and how many
view estimates no difference applies to (there the two agree to 1e-9).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import calculon_compat as compat
from harness.cost.views import COST_VIEWS, pricer_for
from harness.evidence.profile import load_profile
from harness.interop.calculon_format import input_from_calculon
from harness.oracles.records import load_record_file
from harness.oracles.reference import read_reference
from harness.pipeline import lower
from harness.schedule.differences import RELATIVE, SCHEDULE_DIFFERENCES, differences


def measure(records) -> list:
    """:class:`~harness.schedule.differences.Differences` of every view estimate Calculon made."""
    out = []
    for record in records:
        if any(v.error is not None for v in record.views.values()):
            continue
        data = input_from_calculon(record.calculon_model, record.calculon_execution, record.system, record.id)
        concrete = lower(data).concrete()
        profile = load_profile(data.system)
        for view in record.views:
            out.append(differences(concrete, pricer_for(profile, COST_VIEWS[view], concrete.datatype)))
    return out


def effects(records) -> list[tuple[str, int, int, float]]:
    """``(difference, view estimates it changes, view estimates, largest |change| % of Calculon's total)``."""
    measured = measure(records)
    rows = []
    for name in (*compat.OVERLAP_RULES, *SCHEDULE_DIFFERENCES):
        hits = [d for d in measured if name in d.rules or name in d.schedule]
        largest = max((abs(d.effect(name)) / d.calculon.total_s * 100 for d in hits), default=0.0)
        rows.append((name, len(hits), len(measured), largest))
    moved = [d for d in measured if abs(d.physical.total_s - d.calculon.total_s) > RELATIVE * d.calculon.total_s]
    largest = max((abs(d.physical.total_s - d.calculon.total_s) / d.calculon.total_s * 100 for d in moved),
                  default=0.0)
    rows.append(("all (physical vs calculon-0.1.0)", len(moved), len(measured), largest))
    untouched = [d for d in measured if not d.rules and not d.schedule]
    rows.append(("none applies (the projections agree)", len(untouched), len(measured), max(
        (abs(d.physical.total_s - d.calculon.total_s) / d.calculon.total_s * 100 for d in untouched), default=0.0)))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=Path, default=None, help="a shared reference record file")
    parser.add_argument("--vendored", action="store_true", help="the vendored overlap corpus instead")
    parser.add_argument("--limit", type=int, default=None, help="only the first N records")
    args = parser.parse_args(argv)
    if args.records is not None:
        records = read_reference(args.records).records
    else:
        records = load_record_file("records/overlap.json.gz" if args.vendored else "records/public-overlap.json.gz").records
    print("| difference | view estimates it changes | of | largest change of the total |")
    print("|---|---|---|---|")
    for name, changed, total, largest in effects(records[:args.limit]):
        print(f"| `{name}` | {changed} | {total} | {largest:.4g} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
