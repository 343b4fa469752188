"""The two cost views, and any view between them.

A view reads only the PortablePlanIR and an evidence profile. It prices:

- compute: ``operations / (peak x efficiency(operations))`` on the task's
  engine (the optimizer step always runs on the vector engine);
- memory: ``bytes / (bandwidth x efficiency(bytes))`` on memory tier 1;
- a task: compute + memory (``no_overlap``) or their max (``roofline``);
- a message: ``adjusted = bytes x multiplier``, ``adjusted += adjusted /
  participants x offset``, ``time = latency + adjusted / (bandwidth x
  efficiency)``; a collective the tier has no volume model for (an optional
  one of ``harness.vocabulary.COLLECTIVES``) uses its fallback's
  (``NetworkTier.volume_model``, ``harness.evidence.profile.VOLUME_FALLBACK``):
  ``all_to_all`` (a MoE dispatch or combine, ``bytes`` its send buffer) the
  tier's ``all_gather`` model, which moves the same ``(P-1)/P`` of the buffer
  from each rank (``harness.ir.experts.all_to_all_bytes_sent_per_rank``), at
  the tier's efficiency (or its measured ``all_to_all`` curve, family
  ``collective_curves``, where the profile has one);
- a grouped GEMM (a work with ``gemm_operations``, the local experts'): its
  operations at the efficiency of one of its GEMMs' size, not of the total
  (times family ``grouped_gemm``'s factor at that size, where the profile
  has it and the view applies it).

A view names the *curve families* whose evidence it applies
(``harness.vocabulary.CURVE_FAMILIES``: ``matrix``, ``vector`` operation-size
curves, ``memory`` transfer-size curves, ``network`` bandwidth efficiency). A
family not applied has efficiency 1.0; peaks, latencies and collective volume
models are always applied. The two named views (``harness.vocabulary.VIEWS``)
are the ends: ``peak_only`` applies none, ``system_evidence`` all of them; any
other subset is named ``curves:<family>+...``. There is no other input: no
model name, no per-case factor, no reference total, no overlap ratio.

Measured families (``harness.evidence.families``; only where the profile
defines them and the view applies them; ``peak_only`` applies none, which
keeps it the naive baseline of peaks, latencies and volume models):

- ``launch``: a non-empty pass of a task takes ``max(its processing time,
  its issue time)`` (``issue_s_per_operation``, or
  ``issue_s_per_matrix_operation`` for a matrix-engine pass when the
  profile gives it); the optimizer step is issued as fused
  multi-tensor kernels, not operation by operation, and is left alone;
- ``collective_curves``: a collective the tier has measured curves for uses
  the curve's efficiency at the message size (the curve of the most measured
  participants not above the group's) instead of the tier's efficiency;
- ``hierarchical``: a group larger than its tier's island
  (``size_processors``) with a next tier costs the collective over one island
  on its tier plus the same collective over the islands on the next tier
  with ``1/island`` of the message (an all-to-all, which combines nothing:
  ``island / P`` of its buffer inside, the whole buffer across, so that the
  two move the flat all-to-all's bytes: :func:`hierarchical_parts`); a
  message that carries its group's member stride (the expert all-to-all on a
  tier above the first, ``Message.member_stride_processors``) is split the
  same way over the islands of the tier below, ``island // stride`` members
  per island (:func:`members_per_island`), when the group neither fits one
  such island nor has one member per island;
- ``output_layer``: priced by :mod:`harness.cost.output_layer`;
- ``partitioned_p2p``: a pipeline boundary transfer (:meth:`Pricer.boundary_s`)
  with a tensor-parallel group of ``TP`` costs the p2p of ``1/TP`` of the
  message plus an all-gather of the message over the TP group on its tier
  (unless the plan already sends the 1/TP sequence shard, or the message is
  the zero-byte inference slot);
- ``gradient_accumulation``: priced by :mod:`harness.cost.accumulation`;
- ``grouped_gemm``: a grouped GEMM's efficiency is the engine's at one
  expert's GEMM size ``g`` times ``g / (g + half_size_operations)``
  (:class:`harness.evidence.families.GroupedGemm`).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Iterable, NamedTuple, Protocol, runtime_checkable

from harness import session
from harness.errors import EvidenceError
from harness.evidence.families import curve_for
from harness.evidence.profile import MEASURED_FAMILY_NAMES, ComputeEngine, EvidenceProfile, defines_family
from harness.ir.portable import NO_WORK, Message, PlanTask, PortablePlanIR, Work
from harness.vocabulary import CURVE_FAMILIES, PEAK_ONLY, SYSTEM_EVIDENCE, VIEWS

if TYPE_CHECKING:  # the annotations' arrays (the fit's); an estimate imports no numpy
    import numpy as np


@dataclasses.dataclass(frozen=True)
class CostView:
    """Which evidence curve families a view applies."""

    name: str
    curves: frozenset[str]

    @classmethod
    def with_curves(cls, families: Iterable[str]) -> "CostView":
        families = frozenset(families)
        unknown = families - set(CURVE_FAMILIES)
        if unknown:
            raise ValueError(f"unknown curve families {sorted(unknown)}")
        name = {frozenset(): PEAK_ONLY, frozenset(CURVE_FAMILIES): SYSTEM_EVIDENCE}.get(
            families, "curves:" + "+".join(f for f in CURVE_FAMILIES if f in families))
        return cls(name, families)


#: The named views (``harness.vocabulary.VIEWS``), by name, in vocabulary order.
COST_VIEWS: dict[str, CostView] = {v.name: v for v in (CostView.with_curves(()),
                                                      CostView.with_curves(CURVE_FAMILIES))}
VIEWS.require(COST_VIEWS, "harness.cost.views.COST_VIEWS", ordered=True)



def profile_families(profile: EvidenceProfile) -> tuple[str, ...]:
    """The curve families ``profile`` defines, in vocabulary order: the four
    Calculon families always, a measured family only where the profile has it
    (a family it lacks changes no price, so explain leaves it out)."""
    return tuple(f for f in CURVE_FAMILIES if f not in MEASURED_FAMILY_NAMES or defines_family(profile, f))


class PassCost(NamedTuple):
    """Time of one task in one pass (an immutable record: a NamedTuple, the
    cheapest to build; pricing builds one per task and pass)."""

    compute_s: float
    memory_s: float
    processing_s: float
    network_base_s: float = 0.0
    network_edge_s: float = 0.0


ZERO = PassCost(0.0, 0.0, 0.0)


@dataclasses.dataclass(slots=True)
class TaskCost:
    """Times of one plan task in every pass (read-only by convention: not
    ``frozen``, whose generated ``__init__`` costs four times as much; the
    ``passes`` dict made it mutable and unhashable anyway)."""

    name: str
    phase: str
    primitive: str
    passes: dict[str, PassCost]

    def __getitem__(self, pass_name: str) -> PassCost:
        return self.passes[pass_name]


#: Seconds as a pricer returns them: a float, or (a vectorised pricer: the search's placements) a numpy array
#: of floats with one element per placement, combined elementwise by the composition.
Seconds = Any


@runtime_checkable
class BlockPricer(Protocol):
    """What pricing the tasks of a block needs (the block sums of the projection,
    :func:`harness.schedule.projection.block_sums`; the search's per-tier block sums).

    Implemented by :class:`Pricer` and by the pricers that re-price its messages:
    ``harness.search.concurrent.TierPricer`` (every message on one tier), and,
    through :class:`PlanPricer`, ``harness.search.placement.PlacementPricer`` and
    ``ZeroNetworkPricer``. Invariant: compute and memory times are the wrapped
    :class:`Pricer`'s (a re-pricer changes network times only).
    """

    #: The evidence profile priced from.
    profile: EvidenceProfile
    #: The cost view (which curve families apply).
    view: CostView
    #: Whether a task's processing time is max(compute, memory) (``roofline``) or their sum.
    roofline: bool

    def work(self, work: Work, optimizer: bool = False) -> PassCost:
        """Compute, memory and processing time of one pass's work (the optimizer step on the vector engine)."""

    def task(self, task: PlanTask) -> TaskCost:
        """Times of one plan task in every pass, its messages' network time included."""

    def message_s(self, message: Message | None) -> Seconds:
        """Network time of one message (None, the identity, costs 0)."""

    def compute_s(self, operations: float, engine: str, datatype: str | None = None,
                  gemm_operations: float | None = None) -> float:
        """Time of ``operations`` on ``engine`` (``matrix`` or ``vector``) in ``datatype`` (None: the
        pricer's), at the efficiency of ``gemm_operations`` (one GEMM of a grouped GEMM; None: of the total)."""

    def memory_s(self, size_bytes: float) -> float:
        """Time to move ``size_bytes`` through memory tier 1."""

    def tier2_s(self, size_bytes: float) -> float:
        """Time to move ``size_bytes`` over the memory tier-2 link."""


@runtime_checkable
class PlanPricer(BlockPricer, Protocol):
    """Everything a pricer provides: :class:`BlockPricer` and the pipeline boundary transfer a plan's
    composition prices (:func:`harness.estimate.cost_view`, :func:`harness.schedule.block.block_times`).

    Implemented by :class:`Pricer`, ``harness.search.placement.PlacementPricer`` (every network time
    an array over placements) and ``ZeroNetworkPricer`` (every network time 0: the pruning bound).
    """

    def boundary_s(self, message: Message | None, plan: PortablePlanIR) -> Seconds:
        """A pipeline boundary transfer of ``plan`` (family ``partitioned_p2p`` reads the plan's TP group)."""


#: Bound of each price memo of a :class:`Pricer` made outside a session (a session's pricers take its
#: ``prices_limit``).
MEMO_LIMIT = 1 << 16


def seconds(amount, rate_per_s, efficiency):
    """``amount / (rate x efficiency)``: the time of operations on an engine or of bytes through a memory
    tier (floats, or numpy arrays elementwise). The scalar methods of :class:`Pricer` write the same
    expression inline (a call per priced pass would add ~1 % to a first-pass estimate);
    ``tests/test_pricer_protocol.py`` checks :meth:`Pricer.processing_s_of` equals :meth:`Pricer.work` bit
    for bit."""
    return amount / (rate_per_s * efficiency)


def processing_s(compute_s, memory_s, roofline: bool, maximum):
    """A pass's processing time: ``maximum(compute, memory)`` under ``roofline``, else their sum
    (``maximum`` is ``max`` for floats, ``np.maximum`` for arrays)."""
    return maximum(compute_s, memory_s) if roofline else compute_s + memory_s


class Pricer:
    """Prices work and messages for one profile, datatype and view.

    The profile's numbers and which curves the view applies are resolved once
    per pricer; the arithmetic of every price is the one in the module rules.
    :meth:`work` memoizes its prices per ``Work`` instance (the passes share immutable instances between
    clones, repeated shapes and layouts: memoized facts, plan tasks shared per task and context), keyed by
    ``id`` with the instance held alive by the memo
    (:class:`harness.session.IdentityMemo`: bounded by ``memo_limit``, in two generations,
    thread-safe). :meth:`task` does not memoize: a first pass over new layouts hits a task memo for 40 % of
    its tasks only, while the ~3 objects it keeps per task (the TaskCost, its dict, its PassCosts) are walked
    by every later collection of the oldest generation: without it a cold first pass of the public
    differential corpus spends 0.12-0.13 instead of 0.32 ms per estimate in the collector and takes
    1.45-1.76 instead of 1.88-2.11 ms, a warm pass the same (its works are memoized).
    """

    def __init__(self, profile: EvidenceProfile, view: CostView, datatype: str, memo_limit: int = MEMO_LIMIT
                 ) -> None:
        self.profile = profile
        self.view = view
        self.datatype = datatype
        self.matrix = self._engine(profile.matrix, "matrix", datatype)
        self.vector = self._engine(profile.vector, "vector", datatype)
        self.roofline = profile.processing_mode == "roofline"
        self._where = f"evidence profile {profile.name}"
        # engine -> (peak FLOP/s, applied operation-size curve or None, (source, field) for errors), for the
        # pricer's datatype; (engine, datatype) -> the same for a work that states its own (resolved when met)
        self._engines = {engine: self._resolved(engine, spec, datatype)
                         for engine, spec in (("matrix", self.matrix), ("vector", self.vector))}
        self._typed_engines: dict[tuple[str, str], tuple] = {}
        tier = profile.memory_tier1
        self._memory = (tier.bandwidth_bytes_per_s,
                        tier.transfer_size_efficiency if "memory" in view.curves else None,
                        (self._where, "memory_tier1.transfer_size_efficiency"))
        self._network_curves = "network" in view.curves
        launch = profile.launch if "launch" in view.curves else None
        # engine -> host issue time of one operation (0: family launch not applied)
        self._issue_s = {engine: 0.0 if launch is None else launch.issue_s(engine) for engine in ("matrix", "vector")}
        self._measured_collectives = "collective_curves" in view.curves
        self._hierarchical = profile.hierarchical_collectives is not None and "hierarchical" in view.curves
        self._partitioned_p2p = profile.partitioned_p2p is not None and "partitioned_p2p" in view.curves
        self._grouped_gemm = profile.grouped_gemm if "grouped_gemm" in view.curves else None
        # id(instance) -> price, with the instance held alive by its memo (one
        # table per pass kind: the optimizer step runs on the vector engine)
        self._priced: session.IdentityMemo[PassCost] = session.IdentityMemo("work prices", memo_limit)
        self._priced_optimizer: session.IdentityMemo[PassCost] = session.IdentityMemo("optimizer prices",
                                                                                       memo_limit)

    def _engine(self, engines: dict[str, ComputeEngine], family: str, datatype: str) -> ComputeEngine:
        if datatype not in engines:
            raise EvidenceError(f"evidence profile {self.profile.name}", family,
                                f"no {datatype} engine (has {sorted(engines)})")
        return engines[datatype]

    def _resolved(self, engine: str, spec: ComputeEngine, datatype: str) -> tuple:
        return (spec.peak_flops_per_s, spec.operation_size_efficiency if engine in self.view.curves else None,
                (self._where, f"{engine}.{datatype}.operation_size_efficiency"))

    def compute_s(self, operations: float, engine: str, datatype: str | None = None,
                  gemm_operations: float | None = None) -> float:
        """Time of ``operations`` on ``engine`` in ``datatype`` (None: the pricer's datatype), at the operation-size
        efficiency of ``gemm_operations`` (one GEMM of a grouped GEMM; None: of ``operations``)."""
        if operations == 0:
            return 0.0
        if datatype is None or datatype == self.datatype:
            peak, curve, what = self._engines[engine]
        else:
            resolved = self._typed_engines.get((engine, datatype))
            if resolved is None:
                engines = self.profile.matrix if engine == "matrix" else self.profile.vector
                resolved = self._typed_engines[(engine, datatype)] = self._resolved(
                    engine, self._engine(engines, engine, datatype), datatype)
            peak, curve, what = resolved
        eff = 1.0 if curve is None else curve.efficiency(gemm_operations or operations, *what)
        if gemm_operations is not None and self._grouped_gemm is not None and engine == "matrix":
            eff *= self._grouped_gemm.factor(gemm_operations)  # family grouped_gemm
        return operations / (peak * eff)  # seconds(), inline: the hot path of a first pass

    def memory_s(self, size_bytes: float) -> float:
        if size_bytes == 0:
            return 0.0
        bandwidth, curve, what = self._memory
        eff = 1.0 if curve is None else curve.efficiency(size_bytes, *what)
        return size_bytes / (bandwidth * eff)  # seconds(), inline

    def tier2_s(self, size_bytes: float) -> float:
        """Time to move ``size_bytes`` over the memory tier-2 link (the ``memory`` curve family applies)."""
        if size_bytes == 0:
            return 0.0
        tier = self.profile.memory_tier2
        eff = 1.0
        if "memory" in self.view.curves:
            eff = tier.transfer_size_efficiency.efficiency(size_bytes, f"evidence profile {self.profile.name}",
                                                           "memory_tier2.transfer_size_efficiency")
        return size_bytes / (tier.bandwidth_bytes_per_s * eff)  # seconds(), inline

    def work(self, work: Work, optimizer: bool = False) -> PassCost:
        """Compute and memory time of one pass (the optimizer step runs on the vector engine)."""
        if work is NO_WORK:  # a clone's or an inference task's empty pass: what _work gives any zero work
            return ZERO
        memo = self._priced_optimizer if optimizer else self._priced
        cost = memo.get(work)
        if cost is None:
            cost = memo.put(self._work(work, optimizer), work)
        return cost

    def _work(self, work: Work, optimizer: bool) -> PassCost:
        operations, read, written = work.operations, work.bytes_read, work.bytes_written
        if operations == 0 and read == 0 and written == 0:
            return ZERO
        compute = self.compute_s(operations, "vector" if optimizer else work.engine, work.datatype,
                                 work.gemm_operations)
        memory = self.memory_s(read + written)
        processing = max(compute, memory) if self.roofline else compute + memory  # processing_s(), inline
        issue = self._issue_s[work.engine]
        if issue and not optimizer and processing < issue:
            processing = issue  # family launch: the operation waits for the host to issue it
        return PassCost(compute, memory, processing)


    def processing_s_of(self, operations: np.ndarray, size_bytes: np.ndarray, matrix: np.ndarray,
                        issued: np.ndarray) -> np.ndarray:
        """:meth:`work`'s processing time of many passes at once (the fit's design matrix): ``operations`` on
        the matrix engine where ``matrix`` (else the vector engine), ``size_bytes`` through memory tier 1, the
        host's issue time (family ``launch``) a floor where ``issued``. The same rules and the same written
        forms (:func:`seconds`, :func:`processing_s`), elementwise; a pass of no operations has no compute
        time and one of no bytes no memory time."""
        import numpy as np  # the fit's (numpy is loaded: the arguments are arrays); an estimate needs none

        (m_peak, m_curve, _), (v_peak, v_curve, _) = self._engines["matrix"], self._engines["vector"]
        m_eff = 1.0 if m_curve is None else m_curve.efficiencies(operations)
        v_eff = 1.0 if v_curve is None else v_curve.efficiencies(operations)
        bandwidth, curve, _ = self._memory
        memory_eff = 1.0 if curve is None else curve.efficiencies(size_bytes)
        with np.errstate(divide="ignore", invalid="ignore"):
            compute = np.where(matrix, seconds(operations, m_peak, m_eff), seconds(operations, v_peak, v_eff))
            compute = np.where(operations == 0, 0.0, compute)
            memory = np.where(size_bytes == 0, 0.0, seconds(size_bytes, bandwidth, memory_eff))
        processing = processing_s(compute, memory, self.roofline, np.maximum)
        if self._issue_s["matrix"] or self._issue_s["vector"]:
            issue = np.where(matrix, self._issue_s["matrix"], self._issue_s["vector"])
            processing = np.where(issued, np.maximum(processing, issue), processing)
        return processing
    def message_s(self, message: Message | None) -> float:
        """Network time of one message; the identity (None) costs nothing."""
        if message is None:
            return 0.0
        try:
            net = self.profile.networks[message.network_tier]
        except IndexError:
            raise EvidenceError(self._where, "networks", f"no network tier {message.network_tier} "
                                                         f"(has {len(self.profile.networks)})") from None
        if self._hierarchical:
            if message.participants > net.size_processors and message.network_tier + 1 < len(self.profile.networks):
                return self._hierarchical_s(message, net.size_processors, message.network_tier)
            stride = message.member_stride_processors
            if stride is not None and message.network_tier > 0:  # a group spread over the islands of the tier below
                island = members_per_island(message.participants, stride,
                                            self.profile.networks[message.network_tier - 1].size_processors)
                if 1 < island < message.participants:
                    return self._hierarchical_s(message, island, message.network_tier - 1)
        model = net.volume_model(message.collective)
        adjusted = message.message_bytes * model.volume_multiplier
        adjusted += adjusted / message.participants * model.participant_offset
        curves = net.measured_collectives if self._measured_collectives else None
        if curves and message.collective in curves:
            if adjusted == 0:
                return net.latency_s
            eff = curve_for(curves[message.collective], message.participants).efficiency(message.message_bytes)
        else:
            eff = net.efficiency if self._network_curves else 1.0
        return net.latency_s + adjusted / (net.bandwidth_bytes_per_s * eff)

    def message_on_tier_s(self, message: Message, tier: int) -> float:
        """Network time of ``message`` if it travelled on network ``tier`` (the search prices one plan's
        messages on every tier placement with it)."""
        return self.message_s(message if message.network_tier == tier else message.trusted_replace(network_tier=tier))

    def boundary_s(self, message: Message | None, plan: PortablePlanIR) -> float:
        """A pipeline boundary transfer of ``plan`` (family partitioned_p2p: split over the TP group)."""
        if not self._partitioned_p2p or message is None or message.message_bytes == 0:
            return self.message_s(message)
        group = next((u for u in plan.network_use if u.dimension == "tensor"), None)
        if group is None or _sequence_sharded_edges(plan):
            return self.message_s(message)  # no TP group, or the plan already sends a 1/TP (sequence) shard
        tp = group.group_size
        slice_ = Message.trusted(collective=message.collective, message_bytes=message.message_bytes / tp,
                                 participants=message.participants, network_tier=message.network_tier)
        gather = Message.trusted(collective="all_gather", message_bytes=message.message_bytes, participants=tp,
                                 network_tier=group.network_tier)
        return self.message_s(slice_) + self.message_s(gather)

    def _hierarchical_s(self, message: Message, island: int, tier: int) -> float:
        """Family hierarchical: the collective inside one island (``island`` of its members) on ``tier``, then
        across the islands on the next tier (:func:`hierarchical_parts`)."""
        (inside_bytes, inside_members), (across_bytes, islands) = hierarchical_parts(
            message.collective, message.message_bytes, message.participants, island)
        inside = Message.trusted(collective=message.collective, message_bytes=inside_bytes,
                                 participants=inside_members, network_tier=tier)
        across = Message.trusted(collective=message.collective, message_bytes=across_bytes,
                                 participants=islands, network_tier=tier + 1)
        return self.message_s(inside) + self.message_s(across)

    def task(self, task: PlanTask) -> TaskCost:
        """Times of one plan task in every pass, TP network time included (a new TaskCost per call: see the
        class's rules)."""
        work = self.work
        passes = {"forward": work(task.forward), "activation_grad": work(task.activation_grad),
                  "weight_grad": work(task.weight_grad), "optimizer": work(task.optimizer, optimizer=True)}
        msgs = task.messages
        if msgs is not None:
            fw, bw = passes["forward"], passes["activation_grad"]
            passes["forward"] = PassCost(fw.compute_s, fw.memory_s, fw.processing_s,
                                         self.message_s(msgs.forward_base), self.message_s(msgs.forward_edge))
            passes["activation_grad"] = PassCost(bw.compute_s, bw.memory_s, bw.processing_s,
                                                 self.message_s(msgs.backward_base),
                                                 self.message_s(msgs.backward_edge))
        return TaskCost(task.name, task.phase, task.primitive, passes)


def hierarchical_parts(collective: str, message_bytes: float, participants: int,
                       island: int) -> tuple[tuple[float, int], tuple[float, int]]:
    """Family hierarchical's two collectives of one over ``participants`` processors, ``island`` of them per
    island, as ``(message bytes, participants)``: inside one island, then across the ``ceil(participants /
    island)`` islands (a partial island counts as one). A reduction or a gather combines inside the island
    first, so the collective across carries ``1/island`` of the message. An all-to-all combines nothing: of a
    rank's send buffer (its message) the ``island / participants`` destined to its own island travels inside
    it, and the collective across is an all-to-all of the whole buffer over the islands, whose ``(islands - 1)
    / islands`` (``all_to_all_bytes_sent_per_rank``) is exactly the part destined to the other islands: the two
    move what the flat all-to-all moves, each on its own tier."""
    islands = -(-participants // island)
    if collective == "all_to_all":
        return (message_bytes * island / participants, island), (message_bytes, islands)
    return (message_bytes, island), (message_bytes / island, islands)


def members_per_island(participants: int, stride: int, island_processors: int) -> int:
    """Members of a group of ``participants`` processors, ``stride`` apart in rank order (aligned on an island's
    first rank, as Megatron-Core's contiguous groups are), inside one island of ``island_processors``: at least
    one, at most the group."""
    return max(1, min(participants, island_processors // stride))


def _sequence_sharded_edges(plan: PortablePlanIR) -> bool:
    """Whether the edge block's TP collectives reduce-scatter / all-gather (then the plan's boundary message
    is already the 1/TP sequence shard: rs_ag, p2p_rs_ag layouts)."""
    return any(t.messages is not None and t.messages.forward_edge is not None
               and t.messages.forward_edge.collective in ("reduce_scatter", "all_gather") for t in plan.tasks)


def pricer_for(profile: EvidenceProfile, view: CostView, datatype: str) -> Pricer:
    """The current session's shared :class:`Pricer` of ``(profile, view, datatype)``, so that its
    price memo serves every estimate on that profile (keyed by the profile's
    ``id``, the profile held alive with it; bounded: :attr:`harness.session.Session.pricers`)."""
    current = session.current()
    key = (id(profile), view, datatype)
    entry = current.pricers.get(key)
    if entry is None or entry[0] is not profile:
        entry = current.pricers.put(key, (profile, Pricer(profile, view, datatype, current.prices_limit)))
    return entry[1]


def cost_tasks(plan: PortablePlanIR, profile: EvidenceProfile, view: CostView) -> tuple[TaskCost, ...]:
    """Price every task of the plan under ``view``."""
    pricer = pricer_for(profile, view, plan.datatype)
    return tuple(map(pricer.task, plan.tasks))
