"""Run a search: in this process, on an embedded Dask ``LocalCluster``, or on a cluster.

Rules:

- the space is cut into tasks of whole families (the groups that differ only
  in pipeline interleaving, which share their lowerings), in order of first
  appearance (about eight tasks per worker, balanced by execution count); a
  worker keeps one running top K per search (its pruning bound) across the
  tasks it runs, shared by its threads (``dask worker`` runs several; the
  top K is thread-safe); tasks are submitted two per worker at a time, each with the
  K-th best sample rate the driver has merged so far (a floor: exact, since
  it is the rate of executions already found), so every worker prunes with
  what all have found;
- memory is bounded: the search holds at most ``min(K, executions)`` reported
  executions, and a K whose executions would not fit in 1 GB (or half the
  available memory) is refused before any work (:func:`check_top_memory`,
  :data:`CANDIDATE_BYTES`);
- the driver merges the groups' top K lists (:class:`TopK`: the result is the
  same for any split and any completion order), adds the counts, and hands
  the groups' rows to ``on_rows`` in group order (the Parquet file is written
  in that order, whatever order the tasks finish in);
- ``workers=None`` (the default) chooses by the size of the space
  (:func:`default_workers`): in this process below
  :data:`IN_PROCESS_EXECUTIONS` executions, else one worker per core;
- ``workers=1`` without a scheduler runs in this process (no cluster);
  ``workers=W`` starts a ``LocalCluster`` of W single-threaded worker
  processes (forked where the platform allows: :func:`start_method`);
  ``scheduler="tcp://HOST:PORT"`` uses an existing cluster, which must
  connect and answer its handshake within :data:`CONNECT_TIMEOUT_S`
  (:func:`probe_scheduler`; a silent listener or an HTTP port is refused
  naming the address, never waited on), and whose every later message has
  the deadline :data:`MESSAGE_TIMEOUT_S` (Dask's ``comm.timeouts.tcp``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import sys
import time
import uuid
from typing import Callable, Iterable

from harness import session
from harness.errors import InputError
from harness.parallel import start_method
from harness.search.evaluate import Context, SearchProblem, evaluate_group
from harness.search.pareto import pareto_frontier
from harness.search.results import Candidate, Counts, GroupOutcome, TopK
from harness.search.space import GroupLayout, layouts

#: Memory one reported execution takes while a search holds its top K: 2.1 kB measured in one process
#: (``python scripts/measure_top_memory.py``: 22B on 4 processors, every execution kept), doubled for a cluster
#: (a worker's running top K and the driver's merged one each hold a copy).
CANDIDATE_BYTES = 4096
#: What a search's top K may take (:func:`check_top_memory`): at most 1 GB (about 244,000 executions), and at most
#: half of the machine's available memory.
TOP_MEMORY_BYTES = 10**9
TOP_MEMORY_SHARE = 0.5
TASKS_PER_WORKER = 8
IN_FLIGHT_PER_WORKER = 2  # tasks queued per worker; the others wait, to carry the floor known when they start
CONNECT_TIMEOUT_S = 10  # an existing scheduler must connect and answer its handshake within this
#: The deadline of every later message from an existing scheduler (Dask's ``comm.timeouts.tcp``): Dask spreads it
#: over 10 keep-alive probes and refuses a value below 11 s (``AssertionError: Timeout too low`` on every
#: connection), so it is the connect deadline or 11 s, whichever is longer.
MESSAGE_TIMEOUT_S = max(CONNECT_TIMEOUT_S, 11)
#: A Dask message starts with its length (8 bytes, little-endian): a scheduler's handshake is a few kilobytes.
MAX_HANDSHAKE_BYTES = 1 << 20

def running_top_k(token: str, k: int) -> TopK:
    """The current session's running top K of the search ``token`` (the pruning bound; created on first use,
    atomically: every thread of a worker gets the same; a TopK is thread-safe). A session remembers the last
    few searches (:attr:`harness.session.Session.running_tops`; forgetting one only prunes less)."""
    return session.current().running_tops.setdefault(token, lambda: TopK(k))


@dataclasses.dataclass(frozen=True)
class SearchRun:
    """The merged outcome of a search."""

    counts: Counts
    best: list[Candidate]
    groups: int
    space_executions: int  # executions of the unbroken nesting (the progress total)
    elapsed_s: float
    workers: int
    where: str
    points: tuple | None  # (sample rates, tier-1 bytes) of every feasible execution, with --pareto
    frontier: list[Candidate]


def space(problem: SearchProblem) -> list[GroupLayout]:
    return list(layouts(problem.shape, problem.processors, problem.max_batch, problem.options, problem.networks,
                        problem.has_tier2, problem.datatype))


def evaluate_chunk(problem: SearchProblem, chunk: list[list[GroupLayout]], token: str,
                   floor: float = -math.inf) -> list[GroupOutcome]:
    """Evaluate families of groups in a worker (its running top K kept under ``token``); a family's
    groups share their lowerings (:class:`harness.search.evaluate.Context`). ``floor``: the K-th best
    sample rate the driver knows of (from every worker's finished tasks), a pruning bound."""
    owner = _worker_session()
    with session.using(owner) if owner is not None else contextlib.nullcontext():
        best = running_top_k(token, problem.top)
        best.raise_floor(floor)
        context = Context(problem)
        out = []
        for family in chunk:
            out.extend(evaluate_group(problem, layout, best, context) for layout in family)
            context.forget()
        return out


def _worker_session():
    """The Dask worker's session (:mod:`harness.search.worker`), or None in this process (a process that has
    not imported ``distributed`` is no worker: the in-process search does not pay for importing it)."""
    if "distributed" not in sys.modules:
        return None
    from harness.search.worker import worker_session
    return worker_session()


def families(items: list[GroupLayout]) -> list[list[GroupLayout]]:
    """The groups that differ only in pipeline interleaving, together (in order of first appearance)."""
    out: dict[tuple, list[GroupLayout]] = {}
    for item in items:
        g = item.group
        out.setdefault((g.tp, g.pp, g.dp, g.batch, g.recompute, g.optimizer_sharding, g.tp_comm), []).append(item)
    return list(out.values())


def chunks(items: list[list[GroupLayout]], count: int) -> list[list[list[GroupLayout]]]:
    """Cut the families ``items`` (in order) into about ``count`` runs of similar execution counts."""
    sizes = [sum(i.executions for i in family) for family in items]
    target = (sum(sizes) or 1) / max(count, 1)
    out: list[list[list[GroupLayout]]] = [[]]
    acc = 0.0
    for family, size in zip(items, sizes):
        if out[-1] and acc >= target:
            out.append([])
            acc = 0.0
        out[-1].append(family)
        acc += size
    return [c for c in out if c]


class _Merger:
    """Merges outcomes as they arrive; releases rows in group order."""

    def __init__(self, problem: SearchProblem, on_rows: Callable | None, on_progress: Callable | None) -> None:
        self.best = TopK(problem.top)
        self.counts = Counts()
        self.on_rows = on_rows
        self.on_progress = on_progress
        self.pending: dict[int, GroupOutcome] = {}
        self.next_group = 0
        self.points: list = []
        self.frontier: list[Candidate] = []

    def add(self, outcomes: Iterable[GroupOutcome], order: list[int]) -> None:
        for outcome in outcomes:
            self.counts.add(outcome.counts)
            for candidate in outcome.best:
                self.best.offer(candidate)
            if outcome.points is not None:
                self.points.append((outcome.group, outcome.points))
            self.frontier = pareto_frontier([*self.frontier, *outcome.frontier])
            if self.on_progress:
                self.on_progress(outcome.counts)
            if self.on_rows is not None:
                self.pending[outcome.group] = outcome
        while self.on_rows is not None and self.next_group < len(order) and order[self.next_group] in self.pending:
            outcome = self.pending.pop(order[self.next_group])
            self.next_group += 1
            if outcome.rows is not None:
                self.on_rows(outcome.rows)

    def merged_points(self):
        if not self.points:
            return None
        import numpy as np

        self.points.sort(key=lambda item: item[0])
        return (np.concatenate([p[1][0] for p in self.points]), np.concatenate([p[1][1] for p in self.points]))


#: Below this many executions the default is to search in this process: starting a LocalCluster (forking the
#: workers, importing numpy and the estimate path in each, connecting) costs seconds that a small space never
#: wins back. The issue's measurement on 2 cores: Megatron-22B on 4 processors (53,352 executions) took 8.9 s
#: with the 2-worker default and 4.4 s with --workers 1. ``scripts/compare_search_speed.py --workers`` measures
#: the ratio on the machine at hand.
IN_PROCESS_EXECUTIONS = 500_000


def default_workers(executions: int, cores: int) -> int:
    """The worker count when the user gives none: 1 (in this process) for a space below
    :data:`IN_PROCESS_EXECUTIONS` executions or a single core, else one worker per core."""
    return 1 if executions < IN_PROCESS_EXECUTIONS or cores <= 1 else cores


def run_search(problem: SearchProblem, *, workers: int | None = None, scheduler: str | None = None,
               on_rows: Callable | None = None, on_progress: Callable | None = None,
               on_start: Callable[[int], None] | None = None) -> SearchRun:
    """Evaluate the whole space (see the module rules). ``on_start(total executions)`` is called once the
    workers are up, before any is evaluated; ``on_progress(counts)`` after each group."""
    start = time.perf_counter()
    items = space(problem)
    total = sum(i.executions for i in items)
    check_top_memory(problem.top, total)
    started = (lambda: on_start(total)) if on_start else (lambda: None)
    order = [i.group.index for i in items]
    merger = _Merger(problem, on_rows, on_progress)
    if workers is None and scheduler is None:
        workers = default_workers(total, os.cpu_count() or 1)
    if scheduler is None and workers == 1:
        started()
        token = uuid.uuid4().hex
        for family in families(items):
            merger.add(evaluate_chunk(problem, [family], token), order)
        session.current().running_tops.pop(token)
        used, where = 1, "in-process"
    else:
        used, where = _run_dask(problem, items, order, merger, workers, scheduler, started)
    return SearchRun(merger.counts, merger.best.entries(), len(items), sum(i.executions for i in items),
                     time.perf_counter() - start, used, where, merger.merged_points(), merger.frontier)


def available_memory_bytes() -> int | None:
    """The machine's available physical memory (``None`` where the platform does not say)."""
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_top_memory(top: int, executions: int) -> None:
    """The bound on ``--top``: a search holds ``min(top, executions)`` reported executions of
    :data:`CANDIDATE_BYTES` each, which must fit in :data:`TOP_MEMORY_BYTES` and in :data:`TOP_MEMORY_SHARE`
    of the available memory; else an InputError naming ``--top`` and the largest K that fits, before any
    worker starts (a search that would die of memory after minutes is refused at once)."""
    available = available_memory_bytes()
    budget = TOP_MEMORY_BYTES if available is None else min(TOP_MEMORY_BYTES, TOP_MEMORY_SHARE * available)
    held = min(top, executions)
    if held * CANDIDATE_BYTES <= budget:
        return
    raise InputError("<command line>", "--top", f"{top} would hold up to {held} of the space's {executions} "
                                                f"executions ({held * CANDIDATE_BYTES / 1e9:.2g} GB at "
                                                f"{CANDIDATE_BYTES} bytes each), more than the "
                                                f"{budget / 1e9:.2g} GB a search's top K may take: at most "
                                                f"{int(budget // CANDIDATE_BYTES)}")


def probe_scheduler(address: str, deadline_s: float = CONNECT_TIMEOUT_S) -> None:
    """Check that ``tcp://HOST:PORT`` is a Dask scheduler before Dask waits on it: it must accept a connection
    and send the start of its handshake (a Dask server speaks first) within ``deadline_s``, and that start must
    be a Dask message length. A silent listener, an HTTP server or a dashboard port is an InputError naming the
    address (Dask's own client would wait for it forever, or read a banner as a message length). Other schemes
    are left to Dask."""
    import socket
    import struct
    from urllib.parse import urlsplit

    def refuse(reason: str) -> InputError:
        return InputError("<command line>", "--scheduler", f"cannot use the Dask scheduler at {address!r}: {reason}")

    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    if parts.scheme != "tcp":
        return
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        raise refuse("not a HOST:PORT address") from None
    if not host or port is None:
        raise refuse("not a HOST:PORT address")
    start = time.monotonic()
    try:
        with socket.create_connection((host, port), timeout=deadline_s) as connection:
            prefix = b""
            while len(prefix) < 8:
                left = deadline_s - (time.monotonic() - start)
                if left <= 0:
                    raise socket.timeout
                connection.settimeout(left)
                chunk = connection.recv(8 - len(prefix))
                if not chunk:
                    raise refuse("it closed the connection without a Dask handshake")
                prefix += chunk
    except socket.timeout:
        raise refuse(f"no Dask handshake within {deadline_s:g} s (a silent listener, or not a Dask scheduler)") from None
    except OSError as error:
        raise refuse(error.strerror or str(error)) from None
    (length,) = struct.unpack("<Q", prefix)
    if not 0 < length <= MAX_HANDSHAKE_BYTES:
        raise refuse(f"it answered {prefix!r}, not a Dask handshake (an HTTP server or a dashboard port?)")


def _run_dask(problem: SearchProblem, items: list[GroupLayout], order: list[int], merger: _Merger,
              workers: int | None, scheduler: str | None, started: Callable[[], None]) -> tuple[int, str]:
    import dask
    from distributed import Client, LocalCluster, as_completed

    cluster = None
    if scheduler is None:
        workers = workers or os.cpu_count() or 1
        with dask.config.set({"distributed.worker.multiprocessing-method": start_method()}):
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                                   worker_dashboard_address=None)
        client = Client(cluster)
        where = f"LocalCluster of {workers} workers"
    else:
        probe_scheduler(scheduler)
        try:
            with dask.config.set({"distributed.comm.timeouts.connect": CONNECT_TIMEOUT_S,
                                  "distributed.comm.timeouts.tcp": MESSAGE_TIMEOUT_S}):
                client = Client(scheduler, timeout=CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError, ValueError, AssertionError) as error:
            raise InputError("<command line>", "--scheduler",
                             f"cannot use the Dask scheduler at {scheduler!r}: {str(error).splitlines()[0]}") from None
        where = f"cluster at {scheduler}"
    try:
        from harness.search.worker import SESSION_PLUGIN, SessionPlugin

        client.register_plugin(SessionPlugin(), name=SESSION_PLUGIN)
        started()  # after the workers are forked: no display thread of the caller's is running while they are
        used = len(client.scheduler_info()["workers"]) or 1
        token = uuid.uuid4().hex
        remote = client.scatter(problem, broadcast=True)
        todo = iter(chunks(families(items), used * TASKS_PER_WORKER))

        def submit():
            chunk = next(todo, None)
            return None if chunk is None else client.submit(evaluate_chunk, remote, chunk, token,
                                                            merger.best.threshold, pure=False)

        running = as_completed([f for f in (submit() for _ in range(IN_FLIGHT_PER_WORKER * used)) if f])
        for future in running:
            merger.add(future.result(), order)
            future.release()
            following = submit()
            if following is not None:
                running.add(following)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    return used, where
