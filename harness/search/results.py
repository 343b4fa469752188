"""What a search produces: counts, the running top K, rows for Parquet.

Rules:

- the order of executions is (sample rate descending, group ascending,
  position ascending): Calculon's order, in which the first-found of equal
  sample rates wins; :class:`TopK` keeps the first ``k`` in that order and
  merging two of them is associative and commutative (the result does not
  depend on how the groups were split over workers);
- :class:`Counts` add up: ``executions = feasible + infeasible + invalid``; ``pruned`` counts the feasible executions that were not composed
  because their exact bound could not reach the top K;
- rows (``--results``) have one column per Calculon execution field, the
  position, status (``harness.vocabulary.SEARCH_STATUSES``), reason, total,
  sample rate, every timing component (``<name>_s``) and memory figure
  (``<name>_bytes``); figures are null where an execution was not estimated
  (invalid).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import threading
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from harness.search.space import PLACED_DIMENSIONS
from harness.vocabulary import COMPONENTS, MEMORY_FIGURES, SEARCH_STATUSES

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow

    from harness.search.space import GroupLayout, Inner

MEMORY: dict[str, str] = {name: name for name in MEMORY_FIGURES}
STATUSES = SEARCH_STATUSES


class SearchFacts(Protocol):
    """What a search's records need of its problem (``harness.search.evaluate.SearchProblem`` provides it; this
    module must not import that one, which imports this)."""

    @property
    def processors(self) -> int: ...

    @property
    def datatype(self) -> str: ...


@dataclasses.dataclass
class Counts:
    """Execution counts of a group or a whole search (see the module rules)."""

    executions: int = 0
    feasible: int = 0
    infeasible: int = 0
    invalid: int = 0
    pruned: int = 0

    def add(self, other: "Counts") -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One estimated, feasible execution."""

    rate: float
    group: int
    position: int
    execution: dict[str, Any]
    total_s: float
    components_s: dict[str, float]
    memory_bytes: dict[str, float]

    @property
    def order(self) -> tuple[float, int, int]:
        return (-self.rate, self.group, self.position)

    def to_json(self) -> dict[str, Any]:
        return {"execution": self.execution, "total_s": self.total_s, "sample_rate_per_s": self.rate,
                "components_s": self.components_s, "memory_bytes": self.memory_bytes}


class TopK:
    """The best ``k`` candidates in the search order (see the module rules).

    Thread-safe: a Dask worker runs several tasks at once in threads (``dask worker`` starts one per core by
    default) and they share one running top K per search (:func:`harness.search.run.running_top_k`); every read
    and update holds the instance's lock, so concurrent offers keep exactly the first ``k``.
    """

    def __init__(self, k: int, floor: float = -math.inf) -> None:
        self.k = k
        self._lock = threading.Lock()
        #: A sample rate below which nothing can be in the whole search's top K: the K-th best rate of
        #: executions found elsewhere (another worker); -inf when none is known. Raised by :meth:`raise_floor`.
        self.floor = floor
        self._orders: list[tuple[float, int, int]] = []
        self._entries: list[Candidate] = []

    def __getstate__(self) -> dict[str, Any]:
        with self._lock:
            state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def full(self) -> bool:
        with self._lock:
            return len(self._entries) >= self.k

    @property
    def worst_rate(self) -> float:
        """The K-th best sample rate (only meaningful when full)."""
        with self._lock:
            return self._entries[-1].rate

    @property
    def threshold(self) -> float:
        """Executions with a lower sample rate cannot be in the top K (-inf: any can)."""
        with self._lock:
            return max(self.floor, self._entries[-1].rate) if len(self._entries) >= self.k else self.floor

    def raise_floor(self, floor: float) -> None:
        """Raise :attr:`floor` to ``floor`` (never lowers it)."""
        with self._lock:
            self.floor = max(self.floor, floor)

    def accepts(self, rate: float, group: int, position: int) -> bool:
        with self._lock:
            if rate < self.floor:
                return False
            return len(self._entries) < self.k or (-rate, group, position) < self._orders[-1]

    def offer(self, candidate: Candidate) -> None:
        order = candidate.order
        with self._lock:
            if len(self._entries) >= self.k and not order < self._orders[-1]:
                return
            at = bisect.bisect_left(self._orders, order)
            if at < len(self._orders) and self._orders[at] == order:
                return  # the same execution offered twice
            self._orders.insert(at, order)
            self._entries.insert(at, candidate)
            del self._orders[self.k:], self._entries[self.k:]

    def entries(self) -> list[Candidate]:
        with self._lock:
            return list(self._entries)


@dataclasses.dataclass
class GroupOutcome:
    """What evaluating one group returns to the driver."""

    group: int
    counts: Counts
    best: list[Candidate]
    rows: "pyarrow.Table | None" = None
    points: tuple[np.ndarray, np.ndarray] | None = None  # (sample rate, tier-1 bytes) of feasible executions
    frontier: list[Candidate] = dataclasses.field(default_factory=list)  # the group's Pareto frontier


EXECUTION_COLUMNS = (
    "num_procs", "tensor_par", "pipeline_par", "data_par", "tensor_par_net", "pipeline_par_net", "data_par_net",
    "batch_size", "microbatch_size", "datatype", "fused_activation", "attention_type", "activation_recompute",
    "pipeline_interleaving", "optimizer_sharding", "tensor_par_comm_type", "tensor_par_overlap", "seq_par_ag_redo",
    "data_par_overlap", "weight_offload", "activations_offload", "optimizer_offload", "training",
)
FIGURE_COLUMNS = ("total_s", "sample_rate_per_s", *(f"{c}_s" for c in COMPONENTS), *(f"{m}_bytes" for m in MEMORY))


class RowBuffer:
    """Columnar rows of one group, built per lowering key (all placements at once).

    A chunk is one (inner choice, microbatch) of the group: its fixed execution
    values once, its placements, status and reason codes, and its figures as
    one array (None: not estimated); :meth:`finish` expands them with numpy.
    """

    def __init__(self, problem: SearchFacts, layout: "GroupLayout") -> None:
        self.problem = problem
        self.layout = layout
        self.placements = np.array(layout.placements, dtype=np.int64).reshape(-1, len(PLACED_DIMENSIONS))
        self._chunks: list[tuple[int, tuple, np.ndarray, np.ndarray, np.ndarray | None]] = []
        self._reasons: dict[str | None, int] = {None: 0}

    def _codes(self, reasons: list[str | None]) -> np.ndarray:
        table = self._reasons
        return np.array([table.setdefault(r, len(table)) for r in reasons], dtype=np.int32)

    def _fixed(self, inner: "Inner", microbatch: int) -> tuple:
        fixed = calculon_execution(self.problem, self.layout, inner, microbatch, (0,) * len(PLACED_DIMENSIONS))
        return tuple(fixed[name] for name in EXECUTION_COLUMNS)

    def add_unestimated(self, inner: "Inner", microbatch: int, first: int, status: str,
                        reasons: list[str | None]) -> None:
        codes = np.full(len(reasons), STATUSES.index(status), dtype=np.int8)
        self._chunks.append((first, self._fixed(inner, microbatch), codes, self._codes(reasons), None))

    def add_estimated(self, inner: "Inner", microbatch: int, first: int, feasible: np.ndarray,
                      reasons: list[str | None], total: np.ndarray, rates: np.ndarray,
                      components: dict[str, np.ndarray], memory: dict[str, float]) -> None:
        codes = np.where(feasible, STATUSES.index("ok"), STATUSES.index("infeasible")).astype(np.int8)
        n = len(feasible)
        figures = np.empty((n, len(FIGURE_COLUMNS)))
        figures[:, 0], figures[:, 1] = total, rates
        for j, name in enumerate(COMPONENTS, start=2):
            figures[:, j] = components[name]
        for j, name in enumerate(MEMORY, start=2 + len(COMPONENTS)):
            figures[:, j] = memory[name]
        self._chunks.append((first, self._fixed(inner, microbatch), codes,
                             self._codes([None if ok else r for ok, r in zip(feasible, reasons)]), figures))

    def finish(self) -> "pyarrow.Table":
        import pyarrow as pa

        schema = row_schema()
        n = len(self.placements)
        count = len(self._chunks)
        columns: dict[str, Any] = {
            "group": np.full(count * n, self.layout.group.index, dtype=np.int32),
            "position": (np.repeat(np.array([c[0] for c in self._chunks], dtype=np.int64), n)
                         + np.tile(np.arange(n, dtype=np.int64), count)),
        }
        fixed = list(zip(*(c[1] for c in self._chunks))) if count else [()] * len(EXECUTION_COLUMNS)
        for name, values in zip(EXECUTION_COLUMNS, fixed):
            columns[name] = np.repeat(np.array(values, dtype=object), n)
        for j, name in enumerate(("tensor_par_net", "pipeline_par_net", "data_par_net", "context_par_net",
                                  "expert_par_net", "expert_tensor_par_net")):  # PLACED_DIMENSIONS
            columns[name] = np.tile(self.placements[:, j], count)
        g = self.layout.group
        columns["context_par"] = np.full(count * n, g.cp, dtype=np.int64)
        columns["precision"] = np.full(count * n, g.precision, dtype=object)
        columns["expert_par"] = np.full(count * n, g.ep, dtype=np.int64)
        columns["expert_tensor_par"] = np.full(count * n, g.etp, dtype=np.int64)
        columns["moe_dispatcher"] = np.full(count * n, g.dispatcher, dtype=object)
        status = np.concatenate([c[2] for c in self._chunks]) if count else np.zeros(0, np.int8)
        columns["status"] = pa.DictionaryArray.from_arrays(pa.array(status), pa.array(STATUSES)).cast(pa.string())
        reasons = np.concatenate([c[3] for c in self._chunks]) if count else np.zeros(0, np.int32)
        table = [None] * len(self._reasons)
        for text, code in self._reasons.items():
            table[code] = text
        columns["reason"] = pa.DictionaryArray.from_arrays(pa.array(reasons), pa.array(table, pa.string())
                                                           ).cast(pa.string())
        figures = np.full((count * n, len(FIGURE_COLUMNS)), np.nan)
        for k, chunk in enumerate(self._chunks):
            if chunk[4] is not None:
                figures[k * n:(k + 1) * n] = chunk[4]
        for j, name in enumerate(FIGURE_COLUMNS):
            columns[name] = figures[:, j]
        arrays = [columns[f.name] if isinstance(columns[f.name], pa.Array)
                  else pa.array(columns[f.name], type=f.type, from_pandas=True) for f in schema]
        return pa.Table.from_arrays(arrays, schema=schema)


def row_schema() -> "pyarrow.Schema":
    """The Parquet schema of the rows (see the module rules)."""
    import pyarrow as pa

    strings = {"datatype", "attention_type", "activation_recompute", "tensor_par_comm_type", "tensor_par_overlap"}
    booleans = {"fused_activation", "optimizer_sharding", "seq_par_ag_redo", "data_par_overlap", "weight_offload",
                "activations_offload", "optimizer_offload", "training"}
    fields = [pa.field("group", pa.int32()), pa.field("position", pa.int64())]
    for name in EXECUTION_COLUMNS:
        fields.append(pa.field(name, pa.string() if name in strings else pa.bool_() if name in booleans
                               else pa.int64()))
    fields += [pa.field("context_par", pa.int64()), pa.field("context_par_net", pa.int64()),
               pa.field("precision", pa.string()), pa.field("expert_par", pa.int64()),
               pa.field("expert_par_net", pa.int64()), pa.field("expert_tensor_par", pa.int64()),
               pa.field("expert_tensor_par_net", pa.int64()), pa.field("moe_dispatcher", pa.string())
               ]  # EXTENSION_COLUMNS
    fields += [pa.field("status", pa.string()), pa.field("reason", pa.string())]
    fields += [pa.field(name, pa.float64()) for name in FIGURE_COLUMNS]
    return pa.schema(fields)


#: The execution fields outside Calculon's space (harness.search.space.SpaceOptions, a MoE model's expert layout):
#: in a candidate's execution only when they hold other than Calculon's value (CP 1, no precision recipe, EP 1,
#: ETP 1, the alltoall dispatcher), as row columns always.
EXTENSION_COLUMNS = ("context_par", "context_par_net", "precision", "expert_par", "expert_par_net",
                     "expert_tensor_par", "expert_tensor_par_net", "moe_dispatcher")


def calculon_execution(problem: SearchFacts, layout: "GroupLayout", inner: "Inner", microbatch: int,
                       tiers: tuple[int, ...]) -> dict[str, Any]:
    """One execution in Calculon's execution JSON (its field names, its order), then the
    :data:`EXTENSION_COLUMNS` that hold other than Calculon's value."""
    g = layout.group
    extension = {**({"context_par": g.cp, "context_par_net": int(tiers[3])} if g.cp > 1 else {}),
                 **({"precision": g.precision} if g.precision is not None else {}),
                 **({"expert_par": g.ep, "expert_par_net": int(tiers[4])} if g.ep > 1 else {}),
                 **({"expert_tensor_par": g.etp, "expert_tensor_par_net": int(tiers[5])} if g.etp > 1 else {}),
                 **({"moe_dispatcher": g.dispatcher} if g.dispatcher is not None else {})}
    return {
        "num_procs": problem.processors, "tensor_par": g.tp, "pipeline_par": g.pp, "data_par": g.dp,
        "tensor_par_net": int(tiers[0]), "pipeline_par_net": int(tiers[1]), "data_par_net": int(tiers[2]),
        "batch_size": g.batch, "microbatch_size": microbatch, "datatype": problem.datatype,
        "fused_activation": inner.fused_activation, "attention_type": "multihead",
        "activation_recompute": g.recompute, "pipeline_interleaving": g.interleaving,
        "optimizer_sharding": g.optimizer_sharding, "tensor_par_comm_type": g.tp_comm,
        "tensor_par_overlap": inner.tp_overlap, "seq_par_ag_redo": inner.seq_par_ag_redo,
        "data_par_overlap": inner.dp_overlap, "weight_offload": inner.weight_offload,
        "activations_offload": inner.activations_offload, "optimizer_offload": inner.optimizer_offload,
        "training": True, **extension,
    }
