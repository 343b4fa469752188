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

A case is named on the command line by its file or by its name (the file's
path under ``cases/`` without ``.yaml``: ``megatron-22B_full``), looked up in
the project's ``cases/`` then the packaged ones (:meth:`Locations.case_path`),
so the packaged cases work from any directory; ``harness list cases|profiles``
lists what is reachable.

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
import functools
import os
import stat
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


def regular_file_status(path: Path) -> os.stat_result | None:
    """``os.stat(path)`` if ``path`` is a regular file (links followed), else None (``Path.is_file``'s answer
    with the status it read)."""
    try:
        status = os.stat(path)
    except (OSError, ValueError):
        return None
    return status if stat.S_ISREG(status.st_mode) else None


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

    @functools.cached_property
    def _evidence_dirs(self) -> tuple[Path, ...]:
        return tuple(r / "evidence" for r in self._roots())  # of the fields alone: computed once per instance

    def evidence_dirs(self) -> tuple[Path, ...]:
        """Where profiles are looked up, in order."""
        return self._evidence_dirs

    @functools.cached_property
    def _evidence_dir_texts(self) -> tuple[str, ...]:
        return tuple(map(str, self._evidence_dirs))

    def profile_file(self, name: str) -> tuple[Path, os.stat_result | None]:
        """The first ``<dir>/<name>.yaml`` that is a regular file (links followed) with its status, else the
        first candidate (for the error message) and None (:meth:`profile_file_text`)."""
        text, status = self.profile_file_text(name)
        return Path(text), status

    def profile_file_text(self, name: str) -> tuple[str, os.stat_result | None]:
        """:meth:`profile_file` with the path as text: one ``stat`` per candidate looked at and no ``Path`` (an
        estimate loads its profile through here, so this is all a cached profile costs; a ``Path`` made, hashed
        and written out is twice the ``stat``)."""
        dirs = self._evidence_dir_texts
        if not dirs:
            raise HarnessError(f"no evidence profile {name!r}: no project directory and no packaged data "
                               f"(give --project DIR or set {ENV_PROJECT})")
        file = f"{os.sep}{name}.yaml"
        for directory in dirs:
            path = directory + file
            status = regular_file_status(path)
            if status is not None:
                return path, status
        return dirs[0] + file, None

    def profile_path(self, name: str) -> Path:
        """The first ``<dir>/<name>.yaml`` that exists, else the first candidate (:meth:`profile_file`)."""
        return self.profile_file(name)[0]

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

    def case_dirs(self) -> tuple[Path, ...]:
        """Where cases are looked up by name, in order: the project's ``cases/``, then the packaged one."""
        return tuple(r / "cases" for r in self._roots() if (r / "cases").is_dir())

    def case_names(self) -> dict[str, Path]:
        """Every case reachable by name: ``{name: path}``, the name being the file's path under ``cases/``
        without ``.yaml`` (``megatron-22B_full``, ``concurrency/megatron-22B_overlap``), sorted; a project case
        shadows a packaged one of the same name."""
        found: dict[str, Path] = {}
        for directory in self.case_dirs():
            for path in sorted(directory.rglob("*.yaml")):
                found.setdefault(path.relative_to(directory).with_suffix("").as_posix(), path)
        return dict(sorted(found.items()))

    def profile_names(self) -> dict[str, Path]:
        """Every evidence profile reachable by name: ``{name: path}`` (a project profile shadows a packaged one)."""
        found: dict[str, Path] = {}
        for directory in self.evidence_dirs():
            if directory.is_dir():
                for path in sorted(directory.glob("*.yaml")):
                    found.setdefault(path.stem, path)
        return dict(sorted(found.items()))

    def case_path(self, argument: str) -> Path:
        """A case argument as a file: an existing file as given, else the case of that name
        (:meth:`case_names`; ``.yaml`` optional), else the argument unchanged (reading it then reports the
        missing file)."""
        path = Path(argument)
        if path.is_file() or path.is_absolute() or ".." in path.parts:
            return path
        name = argument[:-len(".yaml")] if argument.endswith(".yaml") else argument
        for directory in self.case_dirs():
            candidate = directory / f"{name}.yaml"
            if candidate.is_file():
                return candidate
        parts = Path(name).parts
        if parts and parts[0] == "cases":  # "cases/megatron-22B_full.yaml" outside a checkout
            return self.case_path("/".join(parts[1:])) if len(parts) > 1 else path
        return path

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
