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
- the driver merges the groups' top K lists (:class:`TopK`: the result is the
  same for any split and any completion order), adds the counts, and hands
  the groups' rows to ``on_rows`` in group order (the Parquet file is written
  in that order, whatever order the tasks finish in);
- ``workers=1`` without a scheduler runs in this process (no cluster);
  ``workers=W`` starts a ``LocalCluster`` of W single-threaded worker
  processes (forked where the platform allows: :func:`start_method`);
  ``scheduler="tcp://HOST:PORT"`` uses an existing cluster.
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import os
import threading
import time
import uuid
from typing import Callable, Iterable

from harness.errors import InputError
from harness.search.evaluate import Context, SearchProblem, evaluate_group
from harness.search.pareto import pareto_frontier
from harness.search.results import Candidate, Counts, GroupOutcome, TopK
from harness.search.space import GroupLayout, layouts

TASKS_PER_WORKER = 8
IN_FLIGHT_PER_WORKER = 2  # tasks queued per worker; the others wait, to carry the floor known when they start
CONNECT_TIMEOUT_S = 10  # an existing scheduler must answer within this

# Per worker process: search token -> running top K (the pruning bound), shared by the worker's threads (a
# TopK is thread-safe; _RUNNING_LOCK makes finding or creating one atomic).
_RUNNING: dict[str, TopK] = {}
_RUNNING_LOCK = threading.Lock()
RUNNING_LIMIT = 16  # searches remembered per worker process (more: forget them all; a bound only prunes less)


def running_top_k(token: str, k: int) -> TopK:
    """The worker's running top K of the search ``token`` (created on first use; every thread gets the same)."""
    with _RUNNING_LOCK:
        best = _RUNNING.get(token)
        if best is None:
            if len(_RUNNING) > RUNNING_LIMIT:
                _RUNNING.clear()
            best = _RUNNING[token] = TopK(k)
        return best


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
                        problem.has_tier2))


def evaluate_chunk(problem: SearchProblem, chunk: list[list[GroupLayout]], token: str,
                   floor: float = -math.inf) -> list[GroupOutcome]:
    """Evaluate families of groups in a worker (its running top K kept under ``token``); a family's
    groups share their lowerings (:class:`harness.search.evaluate.Context`). ``floor``: the K-th best
    sample rate the driver knows of (from every worker's finished tasks), a pruning bound."""
    best = running_top_k(token, problem.top)
    best.raise_floor(floor)
    context = Context(problem)
    out = []
    for family in chunk:
        out.extend(evaluate_group(problem, layout, best, context) for layout in family)
        context.forget()
    return out


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


def run_search(problem: SearchProblem, *, workers: int | None = None, scheduler: str | None = None,
               on_rows: Callable | None = None, on_progress: Callable | None = None,
               on_start: Callable[[int], None] | None = None) -> SearchRun:
    """Evaluate the whole space (see the module rules). ``on_start(total executions)`` is called once the
    workers are up, before any is evaluated; ``on_progress(counts)`` after each group."""
    start = time.perf_counter()
    items = space(problem)
    total = sum(i.executions for i in items)
    started = (lambda: on_start(total)) if on_start else (lambda: None)
    order = [i.group.index for i in items]
    merger = _Merger(problem, on_rows, on_progress)
    if scheduler is None and (workers or os.cpu_count() or 1) == 1:
        started()
        token = uuid.uuid4().hex
        for family in families(items):
            merger.add(evaluate_chunk(problem, [family], token), order)
        with _RUNNING_LOCK:
            _RUNNING.pop(token, None)
        used, where = 1, "in-process"
    else:
        used, where = _run_dask(problem, items, order, merger, workers, scheduler, started)
    return SearchRun(merger.counts, merger.best.entries(), len(items), sum(i.executions for i in items),
                     time.perf_counter() - start, used, where, merger.merged_points(), merger.frontier)


def start_method() -> str:
    """How the embedded cluster starts its worker processes: ``fork`` where the platform has it (a worker
    starts with the harness already imported: a fraction of a second instead of seconds), else ``spawn``."""
    return "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"


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
        try:
            client = Client(scheduler, timeout=CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError, ValueError) as error:
            raise InputError("<command line>", "--scheduler",
                             f"cannot use the Dask scheduler at {scheduler!r}: {str(error).splitlines()[0]}") from None
        where = f"cluster at {scheduler}"
    try:
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
