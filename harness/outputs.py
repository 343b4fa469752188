"""Atomic output files: every file the harness writes goes through here.

Rules:

- **Checked before the work** (:func:`check_output`, :func:`check_output_dir`):
  an output path that is an existing directory, the same file as one of the
  command's inputs (also through a symbolic or hard link), the same path as
  another output of the command, a read-only file, or whose nearest existing
  ancestor is not a writable directory is refused with one line naming the
  path and the option, before anything is computed. Writable is tested for
  real: a temporary file is created and removed in that directory (``os.access``
  says yes to root everywhere, ``/proc`` and ``/sys`` included).
- **Several outputs together** (:func:`committed_together`): a command with
  more than one output (``trace --png``, ``search --results --pareto --plot
  --emit-case``, ``calibrate --plots``, ``evidence report|modern-report
  --plots``, ``evidence import nccl-tests --profile-output``, a vendored record
  and its manifest) puts them in place only after all were written; a failure
  in any leaves every target as it was.
- **The tool's own data is never an output** (one guard for every command):
  :func:`data_files` (case files, evidence profiles, vendored records,
  measurement corpora, the contract; symbolic links resolved) are refused by
  :func:`check_output` before the work and again by :func:`atomic_output` at
  the write, whichever command writes. Only a command that writes a kind by
  design names it (``replaces_data``): ``oracle record`` and ``oracle
  import-reference --replace`` (vendor), ``contract write`` (contract),
  ``evidence fit|derive|import nccl-tests --replace`` (evidence). A ``--plots``
  directory may not be (or lie inside) a data directory.
- **Parents**: missing parent directories of an output are created (like
  ``mkdir -p``), by every command, when the file is written.
- **Atomic**: the content goes to a temporary file in the target's directory
  (``.<name>.<random>.tmp``), is flushed to disk, given the permissions a new
  file would get (or the replaced file's), and renamed over the target. A
  reader sees the old file or the complete new one, never a partial file; a
  run that fails, is interrupted or hits a file-size limit leaves the target
  untouched (a killed process may leave its temporary file behind, never a
  truncated target). A symbolic link is followed: its target is replaced.
- An existing character device or FIFO (``/dev/null``, ``/dev/stdout``) is
  written directly: it cannot be replaced and holds no file to corrupt.

Errors are :class:`~harness.errors.InputError` naming the path and the option.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import gzip
import io
import os
import stat
import tempfile
from pathlib import Path
from typing import IO, Iterable, Iterator

from harness.errors import InputError

PathLike = str | os.PathLike


#: The kinds of the tool's own data (:func:`data_files`); an output may replace a file of a kind only when its
#: command writes that kind by design and says so (``replaces_data``).
DATA_KINDS = ("cases", "evidence", "vendor", "contract", "corpora")


def data_files(*, evidence: bool = True, vendor: bool = True, contract: bool = True, cases: bool = True,
               corpora: bool = True) -> list[Path]:
    """The tool's own data files of the current locations (:mod:`harness.locations`): every case file, evidence
    profile, vendored record file, measurement corpus and the baseline contract (every file of the case, vendor
    and measurements directories, whatever its name). :func:`check_output` and :func:`atomic_output` protect
    them from every output."""
    from harness import locations
    from harness.errors import HarnessError

    try:
        where = locations.current()
        files: list[Path] = []
        if evidence:
            files += [p for d in where.evidence_dirs() if d.is_dir() for p in sorted(d.glob("*.yaml"))]
        if cases and where.cases_dir().is_dir():
            files += [p for p in sorted(where.cases_dir().rglob("*")) if not p.is_dir()]
        if vendor and where.vendor_dir().is_dir():
            files += [p for p in sorted(where.vendor_dir().rglob("*")) if not p.is_dir()]
        if corpora:
            files += [p for d in where.corpora_dirs() if d.is_dir() for p in sorted(d.rglob("*")) if not p.is_dir()]
        if contract:
            files.append(where.contract_path())
    except HarnessError:  # no project and no packaged data: nothing of ours to protect
        return []
    return files


def _data_except(replaces_data: Iterable[str]) -> list[Path]:
    kinds = set(replaces_data)
    unknown = kinds - set(DATA_KINDS)
    if unknown:
        raise ValueError(f"replaces_data: unknown kinds {sorted(unknown)} (known: {DATA_KINDS})")
    return data_files(**{kind: kind not in kinds for kind in DATA_KINDS})


def _refuse_data(target: Path, replaces_data: Iterable[str], option: str, shown: str) -> None:
    for source in _data_except(replaces_data):
        if _same_file(target, _resolved(source)):
            raise InputError(shown, option, f"would overwrite {os.fspath(source)}, the tool's own data (cases, "
                                            "evidence, vendored records, corpora, the contract)")


def _resolved(path: PathLike) -> Path:
    return Path(os.path.realpath(os.fspath(path)))


def _same_file(a: Path, b: Path) -> bool:
    if a == b:
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _writable_ancestor(path: Path, option: str, shown: str) -> None:
    """The nearest existing ancestor of ``path`` must be a directory we can create entries in."""
    ancestor = path.parent
    while not ancestor.exists():
        if ancestor == ancestor.parent:
            break
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise InputError(shown, option, f"cannot be created: {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise InputError(shown, option, f"cannot be written: the directory {ancestor} is not writable")
    _probe(ancestor, option, shown)


def _probe(directory: Path, option: str, shown: str) -> None:
    """Create and remove a temporary file in ``directory``: the one test that holds for every user
    (``os.access`` is always true for root) and every file system (``/proc``, ``/sys``, a read-only mount)."""
    try:
        fd, name = tempfile.mkstemp(dir=directory, prefix=".harness-probe.", suffix=".tmp")
    except OSError as error:
        raise InputError(shown, option, f"cannot be written: cannot create a file in the directory {directory} "
                                        f"({error.strerror or error})") from None
    os.close(fd)
    _remove(name)


def _data_dirs() -> list[Path]:
    from harness import locations
    from harness.errors import HarnessError

    try:
        where = locations.current()
        dirs = [*where.evidence_dirs(), where.cases_dir(), where.vendor_dir(), *where.corpora_dirs()]
    except HarnessError:
        return []
    return [_resolved(d) for d in dirs if d.is_dir()]


def _is_stream_device(path: PathLike) -> bool:
    """An existing character device or FIFO, the path as given (``/dev/stdout`` is a link to a pipe that
    :func:`os.path.realpath` cannot name)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def check_output(path: PathLike, *, option: str = "--output", inputs: Iterable[PathLike] = (),
                 others: Iterable[PathLike] = (), replaces_data: Iterable[str] = ()) -> Path:
    """Check an output file path before the work (see the module rules); returns it as a Path. The tool's data
    (:func:`data_files`) are always protected, but for the kinds in ``replaces_data`` (:data:`DATA_KINDS`)."""
    shown = os.fspath(path)
    if not shown:
        raise InputError("<empty path>", option, "an output path is needed")
    target = _resolved(path)
    if target.is_dir():
        raise InputError(shown, option, "is a directory (give a file path)")
    for other in others:
        if other is not None and _same_file(target, _resolved(other)):
            raise InputError(shown, option, f"is also the path of another output ({os.fspath(other)})")
    _refuse_inputs(target, inputs, option, shown)
    _refuse_data(target, replaces_data, option, shown)
    if _is_stream_device(path):
        return Path(path)
    if target.exists():
        if not target.is_file():
            raise InputError(shown, option, "exists and is not a regular file")
        if not os.access(target, os.W_OK):
            raise InputError(shown, option, "the file is read-only")
    _writable_ancestor(target, option, shown)
    return Path(path)


def _refuse_inputs(target: Path, inputs: Iterable[PathLike], option: str, shown: str) -> None:
    """An output may not be (or replace) an input of the command or the tool's own data."""
    for source in inputs:
        if source is not None and _same_file(target, _resolved(source)):
            raise InputError(shown, option, f"would overwrite {os.fspath(source)}, an input of this command or "
                                            "the tool's own data")


def check_output_dir(path: PathLike, *, option: str, inputs: Iterable[PathLike] = ()) -> Path:
    """Check an output directory before the work: an existing one must be a writable directory, a missing
    one must be creatable (its nearest existing ancestor a writable directory), and it may not be one of the
    tool's data directories (cases, evidence, vendored records, corpora)."""
    shown = os.fspath(path)
    target = _resolved(path)
    _refuse_inputs(target, inputs, option, shown)
    for directory in _data_dirs():
        if _same_file(target, directory) or directory in target.parents:
            raise InputError(shown, option, f"is inside {directory}, a directory of the tool's own data")
    if target.exists():
        if not target.is_dir():
            raise InputError(shown, option, "exists and is not a directory")
        if not os.access(target, os.W_OK | os.X_OK):
            raise InputError(shown, option, "the directory is not writable")
        _probe(target, option, shown)
        return Path(path)
    _writable_ancestor(target, option, shown)
    return Path(path)


def _new_file_mode(existing: Path) -> int:
    try:
        return stat.S_IMODE(os.stat(existing).st_mode)
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


@contextlib.contextmanager
def atomic_output(path: PathLike, mode: str = "w", *, option: str = "--output",
                  replaces_data: Iterable[str] = (), exclusive: bool = False) -> Iterator[IO]:
    """A file object whose content replaces ``path`` atomically when the block ends without error.

    ``mode`` is ``"w"`` (UTF-8 text) or ``"wb"``. On an exception the
    temporary file is removed and ``path`` is left as it was. The tool's data
    (:func:`data_files`) is refused here too (the one guard every write passes),
    but for the kinds in ``replaces_data``. ``exclusive``: the target must not
    exist when the content is complete (it is linked into place, never renamed
    over: of two runs writing the same new file, the second is refused).
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_output: mode {mode!r} (use 'w' or 'wb')")
    shown = os.fspath(path)
    target = _resolved(path)
    _refuse_data(target, replaces_data, option, shown)
    if _is_stream_device(path):
        try:
            with open(path, mode, **({"encoding": "utf-8"} if mode == "w" else {})) as handle:
                yield handle
        except OSError as error:
            raise InputError(shown, option, f"cannot write: {error.strerror or error}") from None
        return
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as error:
        raise InputError(shown, option, f"cannot write: {error.strerror or error}") from None
    try:
        with os.fdopen(fd, mode, **({"encoding": "utf-8", "newline": ""} if mode == "w" else {})) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, _new_file_mode(target))
        pending = _PENDING.get()
        if pending is not None:  # inside committed_together: put in place with the command's other outputs
            pending.append(_Staged(temporary, target, exclusive, option, shown))
            return
        if exclusive:
            try:
                os.link(temporary, target)
            except FileExistsError:
                _remove(temporary)
                raise InputError(shown, option, "exists (written meanwhile by another run): give --replace to "
                                                "replace it") from None
            _remove(temporary)
        else:
            os.replace(temporary, target)
    except OSError as error:
        _remove(temporary)
        raise InputError(shown, option, f"cannot write: {error.strerror or error}") from None
    except BaseException:
        _remove(temporary)
        raise


@dataclasses.dataclass(frozen=True)
class _Staged:
    """A complete output of :func:`committed_together` waiting in its temporary file."""

    temporary: str
    target: Path
    exclusive: bool
    option: str
    shown: str


#: The outputs staged by the innermost :func:`committed_together` block (None: outside one, commit at once).
_PENDING: contextvars.ContextVar[list[_Staged] | None] = contextvars.ContextVar("harness_outputs_pending",
                                                                                default=None)


@contextlib.contextmanager
def committed_together() -> Iterator[None]:
    """The outputs :func:`atomic_output` completes in the block are put in place together when the block ends
    without an error, none of them when it raises (every temporary file removed, every target as it was): a
    command with several outputs (``trace --output --png``, ``search --output --plot ...``) never leaves one
    replaced and another not. Stream devices are written directly, as outside a block. A nested block belongs
    to the outer one. Putting in place: first the ``exclusive`` outputs (linked; one that appeared meanwhile
    refuses the lot, the ones linked before it are removed again), then the others (renamed over their
    targets, in the same directories as their temporary files)."""
    if _PENDING.get() is not None:
        yield
        return
    pending: list[_Staged] = []
    token = _PENDING.set(pending)
    try:
        yield
    except BaseException:
        for staged in pending:
            _remove(staged.temporary)
        raise
    finally:
        _PENDING.reset(token)
    _commit(pending)


def _commit(pending: list[_Staged]) -> None:
    ordered = [s for s in pending if s.exclusive] + [s for s in pending if not s.exclusive]
    linked: list[Path] = []
    for index, staged in enumerate(ordered):
        try:
            if staged.exclusive:
                os.link(staged.temporary, staged.target)
                linked.append(staged.target)
                _remove(staged.temporary)
            else:
                os.replace(staged.temporary, staged.target)
        except OSError as error:
            for rest in ordered[index:]:
                _remove(rest.temporary)
            if all(s.exclusive for s in ordered[:index]):  # nothing renamed over a target yet: undo the links
                for target in linked:
                    _remove(os.fspath(target))
            if isinstance(error, FileExistsError):
                raise InputError(staged.shown, staged.option, "exists (written meanwhile by another run): give "
                                                              "--replace to replace it") from None
            raise InputError(staged.shown, staged.option, f"cannot write: {error.strerror or error}") from None


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


@contextlib.contextmanager
def text_output(path: PathLike, *, option: str = "--output", replaces_data: Iterable[str] = (),
                exclusive: bool = False) -> Iterator[IO[str]]:
    """A UTF-8 text file object whose content replaces ``path`` atomically (:func:`atomic_output`); a ``.gz``
    name is written gzip-compressed with the fixed header of :func:`file_bytes` (mtime 0, the target's name), as
    a ``.gz`` input is read decompressed."""
    if Path(path).suffix != ".gz":
        with atomic_output(path, "w", option=option, replaces_data=replaces_data, exclusive=exclusive) as handle:
            yield handle
        return
    with atomic_output(path, "wb", option=option, replaces_data=replaces_data, exclusive=exclusive) as raw:
        with _gzip_writer(path, raw) as compressed:
            with io.TextIOWrapper(compressed, encoding="utf-8", newline="") as handle:
                yield handle


def write_text(path: PathLike, text: str, *, option: str = "--output", replaces_data: Iterable[str] = (),
               exclusive: bool = False) -> Path:
    """Replace ``path`` with ``text`` (UTF-8) atomically (see :func:`text_output`: a ``.gz`` name compressed)."""
    with text_output(path, option=option, replaces_data=replaces_data, exclusive=exclusive) as handle:
        handle.write(text)
    return Path(path)


def write_bytes(path: PathLike, data: bytes, *, option: str = "--output", replaces_data: Iterable[str] = ()) -> Path:
    """Replace ``path`` with ``data`` atomically; a ``.gz`` name is written gzip-compressed with a fixed
    header (mtime 0, the target's name), so equal data gives equal bytes."""
    path = Path(path)
    with atomic_output(path, "wb", option=option, replaces_data=replaces_data) as handle:
        handle.write(file_bytes(path, data))
    return path


def file_bytes(path: PathLike, data: bytes) -> bytes:
    """The bytes :func:`write_bytes` writes to ``path``: ``data``, gzip-compressed with a fixed header (mtime 0,
    the target's name) for a ``.gz`` name (a digest of them is the written file's, before it is in place)."""
    path = Path(path)
    if path.suffix != ".gz":
        return data
    buffer = io.BytesIO()
    with _gzip_writer(path, buffer) as compressed:
        compressed.write(data)
    return buffer.getvalue()


def _gzip_writer(path: PathLike, fileobj: IO[bytes]) -> gzip.GzipFile:
    """The one gzip header of a ``.gz`` output: the target's name and mtime 0 (equal data, equal bytes)."""
    return gzip.GzipFile(filename=Path(path).name, fileobj=fileobj, mode="wb", mtime=0)
