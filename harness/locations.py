"""Where the harness finds its data: evidence profiles, cases, vendored records, the contract.

Two places, searched in this order:

1. the **project directory**, if there is one: a directory of the user's own
   data laid out like this repository (``evidence/<name>.yaml``,
   ``cases/*.yaml``, ``vendor/calculon-0.1.0/``,
   ``goldens/baseline_regression_contract.json``), any part of it optional.
   It is, first found wins:

   - ``--project DIR`` (every command takes it);
   - the environment variable ``HARNESS_PROJECT``;
   - discovered from the working directory, the way pytest and tox find
     their roots: the working directory or its nearest ancestor that holds an
     ``evidence/`` or a ``cases/`` directory;

2. the **packaged data**: in an installed wheel ``harness/_data/`` (the
   build copies the repository's ``evidence/``, ``cases/``, ``vendor/`` and
   the contract there, see ``setup.py``); in a source checkout or an editable
   install, the checkout itself.

Rules: an evidence profile is looked up by name in the project's
``evidence/`` first, then in the packaged profiles (a project profile of the
same name shadows the packaged one); the cases directory, the vendored
records and the contract are the project's when it has them, else the
packaged ones. Outputs (``oracle record``, ``contract write``) go to the
project only, never into the installed package. A ``--project`` or
``HARNESS_PROJECT`` that is not a directory is an :class:`InputError`.

The command line calls :func:`configure` once; library code reads
:func:`current` (the same discovery, computed on first use).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

from harness.errors import HarnessError, InputError
from harness.inputs import real_path

ENV_PROJECT = "HARNESS_PROJECT"
#: A directory holding one of these is a project directory (discovery).
PROJECT_MARKERS = ("evidence", "cases")
VENDOR_SUBDIR = Path("vendor") / "calculon-0.1.0"
CONTRACT_FILE = Path("goldens") / "baseline_regression_contract.json"

_PACKAGE = Path(__file__).resolve().parent


def packaged_root() -> Path | None:
    """The packaged data: ``harness/_data`` of a wheel, else the source checkout holding this package."""
    data = _PACKAGE / "_data"
    if data.is_dir():
        return data
    checkout = _PACKAGE.parent
    return checkout if any((checkout / m).is_dir() for m in PROJECT_MARKERS) else None


def discover(start: Path) -> Path | None:
    """``start`` or its nearest ancestor holding a project marker directory, else None."""
    start = real_path(start)
    for directory in (start, *start.parents):
        if any((directory / marker).is_dir() for marker in PROJECT_MARKERS):
            return directory
    return None


@dataclasses.dataclass(frozen=True)
class Locations:
    """The project directory (if any), how it was found, and the packaged data."""

    project: Path | None
    origin: str  # "--project", "$HARNESS_PROJECT", "working directory" or "none"
    packaged: Path | None

    def _roots(self) -> tuple[Path, ...]:
        roots = (self.project, self.packaged) if self.packaged != self.project else (self.project,)
        return tuple(r for r in roots if r is not None)

    def evidence_dirs(self) -> tuple[Path, ...]:
        """Where profiles are looked up, in order."""
        return tuple(r / "evidence" for r in self._roots())

    def profile_path(self, name: str) -> Path:
        """The first ``<dir>/<name>.yaml`` that exists, else the first candidate (for the error message)."""
        candidates = [d / f"{name}.yaml" for d in self.evidence_dirs()]
        if not candidates:
            raise HarnessError(f"no evidence profile {name!r}: no project directory and no packaged data "
                               f"(give --project DIR or set {ENV_PROJECT})")
        return next((c for c in candidates if c.is_file()), candidates[0])

    def _first(self, relative: Path, what: str) -> Path:
        for root in self._roots():
            if (root / relative).exists():
                return root / relative
        if not self._roots():
            raise HarnessError(f"no {what}: no project directory and no packaged data "
                               f"(give --project DIR or set {ENV_PROJECT})")
        return self._roots()[0] / relative

    def cases_dir(self) -> Path:
        return self._first(Path("cases"), "cases directory")

    def vendor_dir(self) -> Path:
        return self._first(VENDOR_SUBDIR, "vendored Calculon records")

    def corpora_dirs(self) -> tuple[Path, ...]:
        """Where the measurement corpora live (``measurements/`` of each root): data, never an output."""
        return tuple(r / "measurements" for r in self._roots())

    def contract_path(self) -> Path:
        return self._first(CONTRACT_FILE, "baseline contract")

    def writable(self, relative: Path, what: str) -> Path:
        """Where an output goes: in the project directory, never in the installed package."""
        if self.project is None:
            raise HarnessError(f"{what} is written into a project directory: give --project DIR, set {ENV_PROJECT} "
                               "or run from a project (a directory with evidence/ or cases/)")
        return self.project / relative

    def describe(self) -> str:
        project = f"{self.project} ({self.origin})" if self.project else "none"
        return f"project: {project}; packaged data: {self.packaged or 'none'}"


def resolve(project: Path | str | None = None, cwd: Path | None = None,
            environ: dict[str, str] | None = None) -> Locations:
    """The locations for an explicit ``project``, else ``$HARNESS_PROJECT``, else discovery from ``cwd``."""
    environ = os.environ if environ is None else environ
    if project is not None:
        origin, where = "--project", "--project"
    elif environ.get(ENV_PROJECT):
        project, origin, where = environ[ENV_PROJECT], "$HARNESS_PROJECT", ENV_PROJECT
    else:
        return Locations(discover(cwd or Path.cwd()), "working directory", packaged_root())
    path = Path(project).expanduser()
    if not path.is_dir():
        raise InputError(str(path), where, "not a directory")
    return Locations(real_path(path), origin, packaged_root())


_CURRENT: list[Locations] = []


def configure(project: Path | str | None = None) -> Locations:
    """Set the process's locations (the command line does, once per invocation)."""
    _CURRENT[:] = [resolve(project)]
    return _CURRENT[0]


def current() -> Locations:
    """The process's locations (resolved from the environment on first use)."""
    if not _CURRENT:
        _CURRENT.append(resolve())
    return _CURRENT[0]


@contextlib.contextmanager
def configured(project: Path | str | None = None) -> Iterator[Locations]:
    """The process's locations set for one command and restored afterwards (a command run in-process, as the
    tests and the wheel check do, must not leave its ``--project`` behind for whatever runs next)."""
    previous = list(_CURRENT)
    try:
        yield configure(project)
    finally:
        _CURRENT[:] = previous


def reset() -> None:
    """Forget the configured locations (the next :func:`current` resolves them again)."""
    _CURRENT.clear()
