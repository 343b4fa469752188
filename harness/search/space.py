"""The execution space of Calculon 0.1.0's optimal-execution search.

Rules (the space, not Calculon's code):

- a *group* is one of Calculon's parallel tasks: tensor-parallel degree TP over
  the divisors of the processor count that divide the hidden width and the
  head count; pipeline degree PP over the divisors of ``min(procs / TP,
  blocks)`` that divide the blocks (and ``procs / TP``); DP = procs / (TP x PP);
  interleaving 1 without PP, else every divisor of blocks / PP; the global
  batch is the largest multiple of DP not above the maximum (no group when DP
  exceeds it); recompute full, attn_only, none; optimizer sharding on then off
  when DP > 1; TP communication ar, p2p_rs_ag, rs_ag. Groups are numbered in
  that nesting order (outermost first);
- inside a group, executions nest (outermost first): all-gather redo (on then
  off, only with rs_ag and a recompute other than full), DP overlap (on then
  off, DP > 1), TP overlap (none, ring, pipe; TP > 1), weight offload (on then
  off), activation offload (on then off; not with full recompute), optimizer
  offload (on then off) -- the three offloads only when memory tier 2 has
  capacity -- fused activation (the requested values), microbatch size (every
  divisor of the local batch whose product with the sequence length TP
  divides, ascending), then the network tier of TP, PP and DP (every tier for
  a dimension of size > 1, else tier 0);
- every execution has a *position* (group, index inside the group's full
  nesting): the search ranks by sample rate and breaks ties by position, which
  is Calculon's first-found order;
- beyond Calculon's space (opt-in, :class:`SpaceOptions`; off, the space and every position are Calculon's):
  ``context_parallel`` nests the CP degree inside TP (1, and every divisor of ``procs / TP`` that splits the
  sequence into 2 x CP chunks; PP and DP share ``procs / (TP x CP)``, optimizer sharding is tried when
  DP x CP > 1, the microbatch sizes follow the rank's ``sequence / CP`` tokens, and CP's tier is placed last);
  ``precisions`` nests the mixed-precision recipes innermost of a group (each a group of its own);
- a mixture-of-experts model (``model.moe``; automatically, no option: a dense model's space and positions are
  unchanged) nests its expert layouts innermost of a group (:func:`expert_layouts`): ETP over the divisors of
  the expert width, EP over the divisors of the experts, within Megatron-Core's constraints
  (:func:`harness.ir.experts.expert_layout_problems`, the estimate's rules), and with EP x ETP > 1 the dispatcher
  alltoall (None, the default) then allgather; the expert and expert-tensor tiers are placed after CP's;
- ``mbs_break`` (Calculon's ``-m``) stops a microbatch loop at the first size
  whose executions (all tier placements) are all infeasible; positions are
  those of the unbroken nesting.

Everything here is arithmetic on the request and the profile's counts (tiers,
memory tier 2); nothing is estimated.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Iterator

from harness.ir.experts import expert_layout_problems
from harness.ir.model import TransformerShape

RECOMPUTE_ORDER = ("full", "attn_only", "none")
TP_COMM_ORDER = ("ar", "p2p_rs_ag", "rs_ag")
TP_OVERLAP_ORDER = ("none", "ring", "pipe")
FUSED_CHOICES = {"true": (True,), "false": (False,), "all": (False, True)}


def divisors(value: int) -> list[int]:
    """Divisors of ``value`` in ascending order (trial division up to sqrt(value): O(sqrt(value)))."""
    small, large = [], []
    d = 1
    while d * d <= value:
        if value % d == 0:
            small.append(d)
            if d * d != value:
                large.append(value // d)
        d += 1
    return small + large[::-1]


def tensor_parallelisms(processors: int, shape: TransformerShape) -> list[int]:
    return [t for t in divisors(processors) if shape.hidden % t == 0 and shape.attention_heads % t == 0]


def pipeline_parallelisms(processors: int, tp: int, shape: TransformerShape) -> list[int]:
    return [p for p in divisors(min(processors // tp, shape.blocks))
            if processors % (tp * p) == 0 and shape.blocks % p == 0]


def interleavings(blocks: int, pp: int) -> list[int]:
    return [1] if pp == 1 else divisors(blocks // pp)


def global_batch(dp: int, max_batch: int) -> int | None:
    """The largest multiple of DP not above ``max_batch``; None when DP exceeds it."""
    return None if dp > max_batch else max_batch // dp * dp


def microbatch_sizes(sequence_length: int, tp: int, dp: int, batch: int) -> list[int]:
    return [m for m in divisors(batch // dp) if m * sequence_length % tp == 0]


@dataclasses.dataclass(frozen=True)
class SpaceOptions:
    """What the request fixes about the space (Calculon's command-line switches)."""

    fused_activation: tuple[bool, ...] = (True,)
    tp_overlap: bool = True
    dp_overlap: bool = True
    mbs_break: bool = False
    #: Beyond Calculon's space (off by default, so the space is Calculon's): context-parallel degrees, and the
    #: mixed-precision recipes to try (None: everything in the datatype; see :func:`precision_choices`).
    context_parallel: bool = False
    precisions: tuple[str | None, ...] = (None,)


@dataclasses.dataclass(frozen=True)
class Group:
    """One of Calculon's parallel tasks: the layout choices outside the inner nesting."""

    index: int
    tp: int
    pp: int
    dp: int
    interleaving: int
    batch: int
    recompute: str
    optimizer_sharding: bool
    tp_comm: str
    cp: int = 1  #: context-parallel degree (1 in Calculon's space)
    precision: str | None = None  #: mixed-precision recipe (None in Calculon's space)
    ep: int = 1  #: expert-parallel degree (1: a dense model, or no EP)
    etp: int = 1  #: expert-tensor-parallel degree
    dispatcher: str | None = None  #: MoE token dispatcher: None (alltoall, the default) or allgather


@dataclasses.dataclass(frozen=True)
class Inner:
    """The choices of one group's inner nesting above the microbatch loop."""

    seq_par_ag_redo: bool
    dp_overlap: bool
    tp_overlap: str
    weight_offload: bool
    activations_offload: bool
    optimizer_offload: bool
    fused_activation: bool

    @property
    def offloads(self) -> bool:
        return self.weight_offload or self.activations_offload or self.optimizer_offload


def context_parallelisms(processors: int, tp: int, shape: TransformerShape, options: SpaceOptions) -> list[int]:
    """CP degrees: 1, and with ``options.context_parallel`` every divisor of ``procs / TP`` that splits the
    sequence into 2 x CP chunks (Megatron-Core's causal load balancing)."""
    if not options.context_parallel:
        return [1]
    return [c for c in divisors(processors // tp) if shape.sequence_length % (2 * c) == 0]


#: The MoE token dispatchers the search tries when EP x ETP > 1, in order (None: alltoall, the case default).
DISPATCHERS = (None, "allgather")


def expert_layouts(shape: TransformerShape, tp: int, cp: int, dp: int, tp_comm: str,
                   datatype: str | None) -> list[tuple[int, int, str | None]]:
    """``(EP, ETP, dispatcher)`` of a group: ``(1, 1, None)`` for a dense model; for a MoE model every ETP
    dividing the expert width and EP dividing the experts (ETP outer, both ascending) that Megatron-Core accepts
    with this TP, CP, DP and TP communication (:func:`harness.ir.experts.expert_layout_problems`), each with
    every dispatcher of :data:`DISPATCHERS` when EP x ETP > 1."""
    moe = shape.moe
    if moe is None:
        return [(1, 1, None)]
    out = []
    for etp in divisors(moe.expert_ffn):
        for ep in divisors(moe.experts):
            if expert_layout_problems(tensor=tp, context=cp, data=dp, experts=moe.experts,
                                      expert_ffn=moe.expert_ffn, expert_parallel=ep, expert_tensor_parallel=etp,
                                      sequence_parallel=tp_comm == "rs_ag", datatype=datatype):
                continue
            out += [(ep, etp, d) for d in (DISPATCHERS if ep * etp > 1 else (None,))]
    return out


def groups(shape: TransformerShape, processors: int, max_batch: int,
           options: SpaceOptions = SpaceOptions(), datatype: str | None = None) -> list[Group]:
    """Every group, in Calculon's order; with the options beyond Calculon's space, CP nests inside TP (PP and
    DP then share ``procs / (TP x CP)``) and the precision recipe innermost, then a MoE model's expert layouts
    (``datatype``: the layout's, which Megatron-Core's expert rules read; None: not checked)."""
    out = []
    for tp in tensor_parallelisms(processors, shape):
        for cp in context_parallelisms(processors, tp, shape, options):
            for pp in pipeline_parallelisms(processors // cp, tp, shape):
                dp = processors // (tp * pp * cp)
                for interleaving in interleavings(shape.blocks, pp):
                    batch = global_batch(dp, max_batch)
                    if batch is None:
                        continue
                    for recompute, sharding, comm, precision in itertools.product(
                            RECOMPUTE_ORDER, (True, False) if dp * cp > 1 else (False,), TP_COMM_ORDER,
                            options.precisions):
                        for ep, etp, dispatcher in expert_layouts(shape, tp, cp, dp, comm, datatype):
                            out.append(Group(len(out), tp, pp, dp, interleaving, batch, recompute, sharding, comm,
                                             cp, precision, ep, etp, dispatcher))
    return out


def inner_choices(group: Group, options: SpaceOptions, has_tier2: bool) -> list[Inner]:
    """The inner nesting above the microbatch loop, in Calculon's order."""
    on_off = (True, False)
    redo = on_off if group.tp_comm == "rs_ag" and group.recompute != "full" else (False,)
    dpo = on_off if group.dp > 1 and options.dp_overlap else (False,)
    tpo = TP_OVERLAP_ORDER if group.tp > 1 and options.tp_overlap else ("none",)
    offload = on_off if has_tier2 else (False,)
    act = (False,) if group.recompute == "full" or not has_tier2 else on_off
    return [Inner(*choice) for choice in itertools.product(redo, dpo, tpo, offload, act, offload,
                                                            options.fused_activation)]


#: The parallel dimensions the search places on network tiers: the columns of a placement, in this order
#: (context, then the expert dimensions last: a group without CP or experts has one tier for each, 0, so
#: Calculon's placements and positions stay).
PLACED_DIMENSIONS = ("tensor", "pipeline", "data", "context", "expert", "expert_tensor")
#: The placed dimensions a case states a tier for only when its degree is above 1 (harness.ir.model.NetworkTiers).
OPTIONAL_TIERS = ("context", "expert", "expert_tensor")


def degrees(group: Group) -> dict[str, int]:
    """The degree of each :data:`PLACED_DIMENSIONS` in ``group``."""
    return {"tensor": group.tp, "pipeline": group.pp, "data": group.dp, "context": group.cp,
            "expert": group.ep, "expert_tensor": group.etp}


def network_tiers(group: Group, placement: tuple[int, ...]) -> dict[str, int]:
    """A layout's ``network_tiers`` for one placement: tensor, pipeline and data, and each of
    :data:`OPTIONAL_TIERS` whose degree is above 1."""
    sizes = degrees(group)
    return {d: int(t) for d, t in zip(PLACED_DIMENSIONS, placement) if d not in OPTIONAL_TIERS or sizes[d] > 1}


def tier_placements(group: Group, networks: int) -> list[tuple[int, ...]]:
    """One network tier per :data:`PLACED_DIMENSIONS` in Calculon's order (tier 0 for a dimension of size 1)."""
    def tiers(size: int) -> range:
        return range(networks) if size > 1 else range(1)
    sizes = degrees(group)
    return list(itertools.product(*(tiers(sizes[d]) for d in PLACED_DIMENSIONS)))


@dataclasses.dataclass(frozen=True)
class GroupLayout:
    """The static nesting of one group: sizes that give every execution its position."""

    group: Group
    inner: tuple[Inner, ...]
    microbatches: tuple[int, ...]
    placements: tuple[tuple[int, ...], ...]

    @property
    def executions(self) -> int:
        """Executions of the unbroken nesting."""
        return len(self.inner) * len(self.microbatches) * len(self.placements)

    def position(self, inner: int, microbatch: int, placement: int) -> int:
        """Index of one execution in the group's unbroken nesting."""
        return (inner * len(self.microbatches) + microbatch) * len(self.placements) + placement


def group_layout(group: Group, shape: TransformerShape, options: SpaceOptions, networks: int,
                 has_tier2: bool) -> GroupLayout:
    return GroupLayout(group, tuple(inner_choices(group, options, has_tier2)),
                       tuple(microbatch_sizes(shape.sequence_length // group.cp, group.tp, group.dp, group.batch)),
                       tuple(tier_placements(group, networks)))


def layouts(shape: TransformerShape, processors: int, max_batch: int, options: SpaceOptions, networks: int,
            has_tier2: bool, datatype: str | None = None) -> Iterator[GroupLayout]:
    for group in groups(shape, processors, max_batch, options, datatype):
        yield group_layout(group, shape, options, networks, has_tier2)
