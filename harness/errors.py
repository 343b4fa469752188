"""Error types of the harness.

Rule: every error a user can provoke renders as one line that names where it
came from (a file and field, a pass, a profile). The CLI prints ``str(error)``
and exits non-zero; it never shows a traceback for these.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def one_line(text: object) -> str:
    """``str(text)`` with control characters escaped (``\\n``, ``\\x1b``): an error is always one line."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))


def _rebuilt(cls: type, args: tuple, state: dict) -> "HarnessError":
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class HarnessError(Exception):
    """Base class: a one-line, user-facing error."""

    def __reduce__(self):
        """Pickled as its class, message and attributes, whatever its ``__init__`` takes: an error raised in a
        worker process (``--jobs``, the search's cluster) reaches the caller as itself (pickle's default calls
        ``cls(*args)``, which fails for a class whose arguments are not its message)."""
        return (_rebuilt, (type(self), self.args, self.__dict__))


class InputError(HarnessError):
    """Bad input: names the file (or source), the offending field and, when known, the line.

    Rendered ``<source>: <field>: <message>``, with `` (line N)`` appended
    when the line is known and not already the field.
    """

    def __init__(self, source: str, field: str, message: str, line: int | None = None) -> None:
        self.source = source
        self.field = field
        self.message = message
        self.line = line
        suffix = f" (line {line})" if line is not None and field != f"line {line}" else ""
        super().__init__(one_line(f"{source}: {field}: {message}{suffix}"))


class UnsupportedFeatureError(InputError):
    """A feature the estimate cannot price: no registered pattern lowers it
    (:func:`harness.ir.checks.unsupported_features`), or a translation has no
    counterpart for it (Calculon's format: TP/DP overlap and offload, which
    need concrete command dependencies, queues and buffers)."""

    REASON = (
        "is not representable in the portable plan: overlap and offload need "
        "concrete command dependencies, queues and buffers (a ConcretePlanIR), "
        "not an overlap ratio"
    )

    def __init__(self, source: str, field: str, message: str | None = None) -> None:
        super().__init__(source, field, self.REASON if message is None else message)


class PassError(HarnessError):
    """A pass's requirement or guarantee does not hold; names the pass."""

    def __init__(self, pass_name: str, message: str) -> None:
        self.pass_name = pass_name
        super().__init__(f"pass {pass_name}: {message}")


class EvidenceError(InputError):
    """An evidence profile is malformed, missing, or does not cover a request.

    Names the profile (its file, or ``evidence profile NAME``) and the field.
    """


class OracleIsolationError(HarnessError):
    """Comparison data was requested before both estimates of a case exist."""


class OracleRecordError(HarnessError):
    """A vendored oracle record is missing, corrupted or mismatched."""
