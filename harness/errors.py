"""Error types of the harness.

Rule: every error a user can provoke renders as one line that names where it
came from (a file and field, a pass, a profile). The CLI prints ``str(error)``
and exits non-zero; it never shows a traceback for these.
"""

from __future__ import annotations


class HarnessError(Exception):
    """Base class: a one-line, user-facing error."""


class InputError(HarnessError):
    """Bad input: names the file (or source) and the offending field."""

    def __init__(self, source: str, field: str, message: str) -> None:
        self.source = source
        self.field = field
        self.message = message
        super().__init__(f"{source}: {field}: {message}")


class UnsupportedFeatureError(InputError):
    """A feature the portable plan cannot represent (TP/DP overlap, offload).

    Those semantics need concrete command dependencies, queues, buffers and a
    resource-conflict analysis; they belong to a ConcretePlanIR, not to a
    portable plan with a hidden overlap ratio.
    """

    REASON = (
        "is not representable in the portable plan: overlap and offload need "
        "concrete command dependencies, queues and buffers (a ConcretePlanIR), "
        "not an overlap ratio"
    )

    def __init__(self, source: str, field: str) -> None:
        super().__init__(source, field, self.REASON)


class PassError(HarnessError):
    """A pass's requirement or guarantee does not hold; names the pass."""

    def __init__(self, pass_name: str, message: str) -> None:
        self.pass_name = pass_name
        super().__init__(f"pass {pass_name}: {message}")


class EvidenceError(HarnessError):
    """An evidence profile is malformed or does not cover a request."""


class OracleIsolationError(HarnessError):
    """Comparison data was requested before both estimates of a case exist."""


class OracleRecordError(HarnessError):
    """A vendored oracle record is missing, corrupted or mismatched."""
