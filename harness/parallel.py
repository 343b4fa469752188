"""An ordered map over worker processes, in bounded memory: what ``estimate --calculon-batch --jobs N`` runs on.

Rules:
- :func:`ordered_map` yields ``function(item)`` for every item, in the order of ``items``, whatever order the
  workers finish in: a caller's output does not depend on the number of processes;
- at most ``in_flight_per_job x jobs`` items are submitted and not yet yielded, and ``items`` is read only as
  results are taken: memory does not grow with the length of ``items`` (a batch streams);
- the workers are forked where the platform allows (they start with the caller's imports, in no time), else
  spawned (they import ``function``'s module: it must be importable at top level, as any pickled function);
- an exception raised by ``function`` reaches the caller as itself; a worker process that dies (killed, out of
  memory) is a :class:`WorkerError` naming the command line's ``option``, never a traceback; leaving the loop
  early (an error, a break) cancels what was not started and stops the workers.
"""

from __future__ import annotations

import collections
import itertools
import multiprocessing
from typing import Callable, Iterable, Iterator, TypeVar

from harness.errors import InputError

T = TypeVar("T")
R = TypeVar("R")

#: Items submitted per worker and not yet yielded: two keep a worker busy while its last result travels back.
IN_FLIGHT_PER_JOB = 2


class WorkerError(InputError):
    """A worker process died (the command line's option that asked for workers is named)."""


def start_method() -> str:
    """How worker processes start (here and in the search's embedded cluster): ``fork`` where the platform has
    it (a worker starts with the harness already imported: a fraction of a second instead of seconds), else
    ``spawn`` (Windows)."""
    return "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"


def ordered_map(function: Callable[[T], R], items: Iterable[T], jobs: int, *, option: str = "--jobs",
                in_flight_per_job: int = IN_FLIGHT_PER_JOB) -> Iterator[R]:
    """``function(item)`` of every item, in order, computed by ``jobs`` worker processes (see the module rules)."""
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    source = iter(items)
    executor = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context(start_method()))
    try:
        pending = collections.deque(executor.submit(function, item)
                                    for item in itertools.islice(source, jobs * in_flight_per_job))
        while pending:
            result = pending.popleft().result()
            for item in itertools.islice(source, 1):  # one more for the one taken: the window stays full
                pending.append(executor.submit(function, item))
            yield result
    except BrokenProcessPool:
        raise WorkerError("<command line>", option, "a worker process died (killed, or out of memory): "
                                                    "the batch stopped") from None
    finally:
        executor.shutdown(wait=True, cancel_futures=True)
