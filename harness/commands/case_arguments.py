"""What every command that reads cases shares: the case argument, ``--system``, and the feasibility rule.

Rules:
- a case argument is a case file or a case *name* (``megatron-22B_full``, the file's path under ``cases/``
  without ``.yaml``), looked up in the project's then the packaged ``cases/``
  (:meth:`harness.locations.Locations.case_path`), so the packaged cases work from any directory; neither is
  one error line naming the argument and saying where it looked;
- ``--system NAME`` prices the case on another evidence profile (the case's ``system`` is replaced before
  anything is lowered; the case file is not changed), so comparing profiles needs no edit of the YAML;
- an infeasible case (Calculon would refuse it: memory over capacity, a network tier too small) is said
  FIRST, before its figures, in every command that prices it, and the command exits 1
  (:data:`INFEASIBLE_STATUS`): figures of an infeasible layout are what it would take, not a result.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import locations
from harness.cases import CaseFile, load_case
from harness.errors import InputError
from harness.evidence.profile import load_profile

#: The exit status of a command whose case (any of its cases) is infeasible on its system.
INFEASIBLE_STATUS = 1

SYSTEM_HELP = ("evidence profile to price the case(s) on instead of the case's own `system` (a name: "
               "evidence/NAME.yaml; `harness list profiles` lists them)")
CASE_HELP = "a case file, or a case name (`harness list cases` lists them: megatron-22B_full, ...)"


def add_case_arguments(parser: argparse.ArgumentParser, *, many: bool, dest: str = "cases") -> None:
    """The positional case argument(s) and ``--system``."""
    if many:
        parser.add_argument(dest, nargs="+", metavar="CASE", help=CASE_HELP)
    else:
        parser.add_argument(dest, metavar="CASE", help=CASE_HELP)
    parser.add_argument("--system", metavar="NAME", help=SYSTEM_HELP)


def case_file(argument: str) -> Path:
    """The file of a case argument (see the module rules); not found is an InputError naming it."""
    path = locations.current().case_path(argument)
    if not path.exists():
        where = ", ".join(str(d) for d in locations.current().case_dirs()) or "no cases directory"
        raise InputError(argument, "<file>", f"no such file, and no case of that name in {where} "
                                             "(`harness list cases` lists the names)")
    return path


def load_case_argument(argument: str, system: str | None = None) -> tuple[str, CaseFile]:
    """``(source, case)`` of a case argument, its ``system`` replaced by ``system`` when given."""
    path = case_file(argument)
    case = load_case(path)
    if system is not None:
        load_profile(system, referrer="--system")  # a bad or missing name is the option's error
        case = case.model_copy(update={"system": system})
    return str(path), case


def infeasible_line(case_id: str, system: str, reason: str | None) -> str:
    """The line said first about an infeasible case."""
    return (f"{case_id}: INFEASIBLE on {system}: {reason}; the figures below are what this layout would take, "
            f"not an achievable result (exit status {INFEASIBLE_STATUS})")


def report_infeasible(count: int, total: int) -> int:
    """The exit status for ``count`` infeasible of ``total`` cases, with a closing line on stderr."""
    if not count:
        return 0
    print(f"{count} of {total} case(s) infeasible on their system: exit status {INFEASIBLE_STATUS}", file=sys.stderr)
    return INFEASIBLE_STATUS
