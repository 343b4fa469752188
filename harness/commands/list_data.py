"""``harness list cases|profiles``: what can be named on the command line, from any directory.

``cases``: one line per case reachable by name (the project's ``cases/``, then the packaged ones; a project
case shadows a packaged one), ``NAME  ID  SYSTEM  PATH``. ``profiles``: one line per evidence profile,
``NAME  DATATYPES  PATH`` (the matrix engine's datatypes: what ``execution.datatype`` may be on it).
A case or profile that does not load is listed with its one-line error instead of its fields, so the
listing never stops at a bad file.
"""

from __future__ import annotations

from harness import locations
from harness.cases import load_case
from harness.errors import HarnessError
from harness.evidence.profile import load_profile
from harness.names import PROFILE_NAME, PROFILE_NAME_RULE


def register(sub) -> None:
    p = sub.add_parser("list", help="list the cases and evidence profiles that can be named (from any directory)")
    p.add_argument("what", choices=("cases", "profiles"),
                   help="cases: the case names `estimate NAME` accepts; profiles: the names --system accepts")
    p.set_defaults(func=run)


def run(args) -> int:
    where = locations.current()
    if args.what == "cases":
        rows = []
        for name, path in where.case_names().items():
            try:
                case = load_case(path)
                rows.append((name, case.id, case.system, str(path)))
            except HarnessError as error:
                rows.append((name, "-", "-", f"{path} (does not load: {error})"))
    else:
        rows = []
        for name, path in where.profile_names().items():
            if PROFILE_NAME.fullmatch(name) is None:  # a file --system cannot name (its error named --system)
                rows.append((name, "-", f"{path} (not a profile name: {PROFILE_NAME_RULE})"))
                continue
            try:
                rows.append((name, ",".join(load_profile(name).matrix), str(path)))
            except HarnessError as error:
                rows.append((name, "-", f"{path} (does not load: {error})"))
    if not rows:
        print(f"no {args.what} found ({where.describe()})")
        return 0
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
    return 0
