"""Background progress over a stretch of a stage's time (rule Q2 of :mod:`harness.schedule.queues`).

A tier-2 transfer or a DP sync progresses only while the compute queue is not
in a memory phase. :class:`Phases` holds a run's memory phases (relative to
the run's start, built once per run); a :class:`Stretch` places them (or
none: an idle stretch) at an offset in the stage's time and answers, in
``O(log n)``, how much free (non-memory) time lies between two instants and
when a given amount of free time has passed.
"""

from __future__ import annotations

import bisect


class Phases:
    """Memory phases ``(start, end)`` of one run, in order, relative to its start."""

    __slots__ = ("starts", "ends", "cum", "key")

    def __init__(self, phases: tuple[tuple[float, float], ...]) -> None:
        self.starts = [a for a, _ in phases]
        self.ends = [b for _, b in phases]
        cum = [0.0]
        for a, b in phases:
            cum.append(cum[-1] + (b - a))
        self.cum = cum
        self.key = [s - cum[k] for k, s in enumerate(self.starts)]  # free time before each phase's start

    def free(self, t: float) -> float:
        """Free time in ``[0, t]``."""
        k = bisect.bisect_right(self.starts, t) - 1
        if k < 0:
            return t
        if t < self.ends[k]:
            return self.key[k]
        return t - self.cum[k + 1]

    def at_free(self, target: float) -> float:
        """The first instant with ``target`` free time before it."""
        k = bisect.bisect_left(self.key, target)
        return target + (self.cum[k] if k < len(self.starts) else self.cum[-1])


NO_PHASES = Phases(())


class Stretch:
    """``[start, end]`` of a stage's time, with ``phases`` placed at ``offset`` (none: the compute queue idles)."""

    __slots__ = ("start", "end", "phases", "offset")

    def __init__(self, start: float, end: float, phases: Phases = NO_PHASES, offset: float = 0.0) -> None:
        self.start, self.end, self.phases, self.offset = start, end, phases, offset

    def free_s(self, a: float, b: float) -> float:
        """Free time in ``[a, b]``."""
        if b <= a:
            return 0.0
        o = self.offset
        return self.phases.free(b - o) - self.phases.free(a - o)

    def finish(self, t0: float, work_s: float) -> float | None:
        """The instant ``work_s`` seconds of free time after ``t0``, or None if it lies after the stretch's end."""
        o = self.offset
        t = max(self.phases.at_free(self.phases.free(t0 - o) + work_s) + o, t0)
        return t if t <= self.end else None

    def free_pieces(self, a: float, b: float) -> list[tuple[float, float]]:
        """The free intervals of ``[a, b]`` (for drawing; linear in the phases it crosses)."""
        o, p = self.offset, self.phases
        pieces = []
        cursor = a
        k = max(0, bisect.bisect_right(p.starts, a - o) - 1)
        while cursor < b and k < len(p.starts):
            s, e = p.starts[k] + o, p.ends[k] + o
            k += 1
            if e <= cursor:
                continue
            if s > cursor:
                pieces.append((cursor, min(s, b)))
            cursor = max(cursor, e)
        if cursor < b:
            pieces.append((cursor, b))
        return pieces
