"""Sub-graph patterns of ``transformer-distribute``: each emits one piece of a TP block.

A Transformer block of one tensor-parallel rank is a sequence of residual
sub-blocks (:class:`ResidualSubBlock`): fork, normalisation, ``f``
collective, a *core* pattern, ``g`` collective, dropout, residual. Under TP
overlap (ring or pipe) the core absorbs the two collectives into its first
and last linear (``overlapped_linear`` tasks, :meth:`Block.overlapped`).

Patterns are chosen by the ModelIR, the Megatron-Core way (its
``ModuleSpec``/``build_module``: the layer spec names the attention, MLP and
norm modules and the layer builds what the spec names): each registry below
holds small patterns, each pattern states which models it :meth:`matches`
(the xDSL way: registered, selected by what they match), and :func:`select`
takes the one that matches. A new variant is a new registry entry, not an
edit of a pass or of another pattern:

- :data:`CORES`, per block slot (``attention``, ``mlp``: the pass's ``block``
  option names the slots, in block order): :class:`SelfAttention` (multi-head,
  grouped-query and multi-query by ``model.kv_heads``),
  :class:`LatentAttentionCore` (``model.mla``), :class:`TwoLayerMLP`
  (``mlp: gelu | squared_relu``), :class:`GatedMLP` (``mlp: swiglu | geglu``);
- :data:`NORMS`: :class:`LayerNorm`, :class:`RMSNorm` (``model.norm``);
- :data:`SCORE_KERNELS`: :class:`MaterializedScores`, :class:`FlashScores`
  (``execution.attention_kernel``).

:func:`unpriceable` lists what no registered pattern can lower (it is what
:func:`harness.ir.checks.unsupported_features` reports).

Rules shared by every pattern:

- a pattern reads the block's sizes and flags from :class:`Block` (derived
  once from the ModelIR; head counts and widths from ``head_size`` and the
  key/value heads, never from hidden / heads) and appends forward tasks to a
  :class:`BlockBuilder` in topological order; it returns the name of its
  output task;
- a task carries its recompute flag (clone it under recomputation) and its
  recommunicate flag (its forward collective is sent again); the clones
  themselves are made afterwards by :func:`with_clones`;
- activations outside a TP region are sequence-sharded under ``rs_ag``.
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from harness.errors import PassError
from harness.ir.distributed import (
    BatchMatmulShape,
    ContextAllToAllShape,
    ExpertAllToAllShape,
    ExpertGatherShape,
    ExpertTensorCollectiveShape,
    GroupedLinearShape,
    RouterShape,
    TokenPermuteShape,
    TopKShape,
    CollectiveOp,
    FlashAttentionShape,
    CollectiveShape,
    ForkShape,
    LinearShape,
    NormShape,
    OverlappedLinearShape,
    PointwiseShape,
    ResidualShape,
    Retention,
    RingExchangeShape,
    Task,
)
from harness.ir import blocks
from harness.ir.experts import tokens_per_expert
from harness.ir.model import ExecutionLayout, ModelIR, TransformerShape, key_value_heads

RECOMPUTE = "recompute/"
RECOMMUNICATION = "recommunication/"

# Retention is interned (one shared instance per flags, in the session's table).
_retention = Retention.trusted
#: Retention of a task whose input is another task's stored activation.
REUSED = dict(activation_stored=False, activation_reused=True)
#: Retention of a task of an output-discarding recompute module (Megatron-Core's ``CheckpointWithoutOutput``):
#: its output is not kept; the backward pass recomputes it from the task's kept input.
DISCARDED = dict(output_stored=False)
#: The recompute modules that discard their output (``execution.recompute_modules``; core_attn checkpoints the
#: attention core, :attr:`Block.attention`). ``layernorm`` applies to the norms of cores with
#: :attr:`CorePattern.standalone_norm` only (latent attention's input norm, a MoE block's pre-MLP norm).
DISCARDING_MODULES = frozenset({"layernorm", "moe_act", "mla_up_proj"})


@dataclasses.dataclass(frozen=True)
class Block:
    """Sizes and recomputation flags of one block on one TP rank (what the patterns read)."""

    shape: TransformerShape
    execution: ExecutionLayout
    tokens: int  # microbatch x sequence
    full_act: int  # elements of one activation inside a TP region
    outside_act: int  # elements of one activation outside it (sequence-sharded under rs_ag)
    full: bool  # full recomputation
    attention: bool  # the attention core is recomputed (full or attn_only)
    heads: int  # local query heads: attention_heads / TP
    kv_heads: int  # local key/value heads: kv_heads / TP, or one (replicated) when kv_heads < TP
    kv_split: bool  # the key/value heads are split over TP (not replicated)
    queries: int  # sequence positions of one sample on this rank: sequence / CP (context parallelism)
    #: the output-discarding recompute modules of ``recompute: selective`` (layernorm, moe_act, mla_up_proj):
    #: each one's tasks are recomputed and their outputs not kept (empty otherwise; full recomputes everything)
    discarded: frozenset[str] = frozenset()

    def discards(self, module: str) -> bool:
        """Whether ``module``'s output is discarded and recomputed (``recompute: selective`` naming it)."""
        return module in self.discarded

    @property
    def context(self) -> int:
        """The context-parallel degree."""
        return self.execution.context_degree

    @property
    def ring(self) -> bool:
        """Context parallelism exchanges K/V in a ring (``cp_comm`` p2p, the default), not by all-to-all."""
        return self.context > 1 and self.execution.cp_comm != "a2a"

    @classmethod
    def of(cls, ir: ModelIR) -> "Block":
        s, e = ir.shape, ir.execution
        tp = e.tensor_parallel
        queries = s.sequence_length // e.context_degree  # context parallelism: this rank's share of the sequence
        tokens = e.microbatch * queries
        full_act = tokens * s.hidden
        outside = (tokens // tp) * s.hidden if e.sequence_parallel else full_act
        kv = key_value_heads(s, e)
        selected = frozenset(e.recompute_modules or ()) if e.recompute == "selective" else frozenset()
        return cls(s, e, tokens, full_act, outside, e.recompute == "full",
                   e.recompute in ("full", "attn_only") or "core_attn" in selected,
                   s.attention_heads // tp, max(1, kv // tp), kv >= tp, queries, selected & DISCARDING_MODULES)

    @property
    def query_width(self) -> int:
        """Local width of Q (and of the attention output): local heads x head_size."""
        return self.heads * self.shape.head_size

    @property
    def kv_width(self) -> int:
        """Local width of K and of V: local key/value heads x head_size."""
        return self.kv_heads * self.shape.head_size

    @property
    def value_head_size(self) -> int:
        """Width of one value (and attention output) head: ``mla.v_head_dim`` with latent attention, else
        head_size (the query/key head width, ``qk_nope + qk_rope`` with latent attention)."""
        mla = self.shape.mla
        return self.shape.head_size if mla is None else mla.v_head_dim

    @property
    def overlap(self) -> bool:
        """TP overlap: the collectives are fused into the adjacent linears."""
        return self.execution.tp_overlap != "none"

    def overlapped(self, role: str, n: int, k: int, bias: bool | None = None) -> OverlappedLinearShape:
        """A linear ``[tokens, n] x [n, k]`` (unsplit sizes) fused with the ``f`` or ``g`` collective.

        ``f`` (all-gather side) splits the output features, ``g`` (reduce side)
        the contraction; the kept activation and gradient buffers follow the
        collective (Calculon 0.1.0's accounting).
        """
        e = self.execution
        tp, m = e.tensor_parallel, self.tokens
        split = e.tp_communication == "rs_ag"
        if role == "f":
            k //= tp
            act, grad = (m * n // tp, m * k) if split else (m * n, 0)
            elements = m * n
        else:
            n //= tp
            act, grad = (m * n, 2 * (m * k // tp)) if split else (0, 2 * m * k)
            elements = m * k
        bf, bb = collective_ops(role, split)
        ef, eb = collective_ops(role, e.tp_communication in ("rs_ag", "p2p_rs_ag"))
        return OverlappedLinearShape.trusted(
            role=role, m=m, n=n, k=k, elements=elements, participants=tp, activation_elements=act,
            activation_grad_elements=grad, base_forward=bf, base_backward=bb, edge_forward=ef, edge_backward=eb,
            bias=bias)

    def collective(self, role: str) -> CollectiveShape | None:
        """The ``f`` (entering a TP region) or ``g`` (leaving it) collective; None without TP."""
        e = self.execution
        if e.tensor_parallel == 1:
            return None
        bf, bb = collective_ops(role, e.tp_communication == "rs_ag")
        ef, eb = collective_ops(role, e.tp_communication in ("rs_ag", "p2p_rs_ag"))
        return CollectiveShape.trusted(role=role, elements=self.full_act, participants=e.tensor_parallel,
                                       sequence_sharded=e.sequence_parallel,
                                       base_forward=bf, base_backward=bb, edge_forward=ef, edge_backward=eb)


def collective_ops(role: str, split: bool) -> tuple[CollectiveOp | None, CollectiveOp | None]:
    """(forward, backward) collectives of an ``f`` or ``g`` task.

    Unsplit: f is identity forward / all-reduce backward; g is its conjugate.
    Split (sequence parallel): f all-gathers forward and reduce-scatters
    backward; g reduce-scatters forward and all-gathers backward.
    """
    if role == "f":
        return ("all_gather", "reduce_scatter") if split else (None, "all_reduce")
    return ("reduce_scatter", "all_gather") if split else ("all_reduce", None)


@dataclasses.dataclass
class BlockBuilder:
    """Accumulates forward tasks with their recompute/recommunicate flags, in order."""

    tasks: list[tuple[Task, bool, bool]] = dataclasses.field(default_factory=list)
    #: the block's retention flags as given (keyword order) -> the interned Retention: a block repeats a few
    #: flag sets over its ~25 tasks, each built once per block
    retentions: dict[tuple, Retention] = dataclasses.field(default_factory=dict, repr=False)

    def add(self, name: str, shape: Any, deps: tuple[str, ...] = (), *, recompute: bool = False,
            recommunicate: bool = False, **retention: bool) -> str:
        flags = tuple(retention.items())
        kept = self.retentions.get(flags)
        if kept is None:
            kept = self.retentions[flags] = _retention(**retention)
        task = Task.trusted(name=name, phase="forward", clone_of=None, depends_on=deps, shape=shape,
                            retention=kept)
        self.tasks.append((task, recompute, recommunicate))
        return name


class Pattern(ABC):
    """A registered sub-graph pattern: selected by what it matches in the ModelIR."""

    name: ClassVar[str]  # the pattern's name (reported when a model matches none or several)

    @abstractmethod
    def matches(self, shape: TransformerShape, execution: ExecutionLayout) -> bool:
        """Whether this pattern lowers the part of ``shape`` / ``execution`` its registry stands for."""

    def unpriceable(self, shape: TransformerShape, execution: ExecutionLayout) -> list[tuple[str, str]]:
        """``(field, message)`` for what of the model this pattern, once selected, cannot lower (default none)."""
        return []


def select(patterns: tuple[Pattern, ...], shape: TransformerShape, execution: ExecutionLayout,
           what: str) -> Pattern:
    """The one pattern of ``patterns`` that matches; a PassError naming ``what`` when none or several do."""
    found = [p for p in patterns if p.matches(shape, execution)]
    if len(found) != 1:
        raise PassError("transformer-distribute", f"{len(found)} registered {what} patterns match the model "
                                                  f"(of {[p.name for p in patterns]}); exactly one must")
    return found[0]


class CorePattern(Pattern):
    """The architecture-specific inside of a TP region (between ``f`` and ``g``)."""

    slot: ClassVar[str]  # the block slot it fills (the pass's ``block`` option names slots)
    prefix: ClassVar[str]  # task-name prefix of its sub-block
    #: The core emits its own ``f`` collective (on what it sends into the TP region, e.g. latent attention's
    #: compressed Q and K/V); the sub-block then emits none before it.
    enters_region_itself: ClassVar[bool] = False
    #: The sub-block's norm is a module of its own in Megatron-Core's Transformer Engine layer spec (``TENorm``),
    #: not fused into the core's first linear (``TELayerNormColumnParallelLinear``, whose spec entry for the norm
    #: is ``IdentityOp``): only such a norm is recomputed by the ``layernorm`` recompute module
    #: (``TransformerLayer`` sets ``recompute_input_layernorm`` only for a norm that is not ``IdentityOp``).
    standalone_norm: ClassVar[bool] = False
    #: The core emits its own ``g`` collective (or none: a MoE block's tokens stay sequence-sharded, its dispatcher
    #: does the communication); the sub-block then emits none after it.
    leaves_region_itself: ClassVar[bool] = False

    @abstractmethod
    def redo_input(self, b: Block) -> bool:
        """Whether the collective feeding the core is sent again (its input is not stored)."""

    @abstractmethod
    def emit(self, b: Block, out: BlockBuilder, prev: str) -> str:
        """Append the core's tasks after ``prev`` (the ``f`` collective); return the last one (before ``g``)."""

    def emit_overlapped(self, b: Block, out: BlockBuilder, prev: str) -> str:
        """The same under TP overlap: the first linear absorbs ``f`` (recommunicating like it), the last ``g``.

        A core that does not define it cannot be lowered with TP overlap (:meth:`unpriceable` says so).
        """
        raise PassError("transformer-distribute", f"core pattern {self.name!r} has no form under TP overlap "
                                                  f"(tp_overlap={b.execution.tp_overlap})")

    def unpriceable(self, shape: TransformerShape, execution: ExecutionLayout) -> list[tuple[str, str]]:
        overlapped = type(self).emit_overlapped is not CorePattern.emit_overlapped
        if execution.tp_overlap != "none" and not overlapped:
            return [("execution.tp_overlap", f"core pattern {self.name!r} has no form under TP overlap")]
        return []


class NormPattern(Pattern):
    """The normalisation at the head of a residual sub-block."""

    @abstractmethod
    def shape(self, b: Block) -> NormShape:
        """The norm's task shape over the activation outside the TP region."""


class LayerNorm(NormPattern):
    """Layer norm (gain and bias): ``model.norm`` absent or ``layernorm``."""

    name = "layernorm"

    def matches(self, shape: TransformerShape, execution: ExecutionLayout) -> bool:
        return shape.norm in (None, "layernorm")

    def shape(self, b: Block) -> NormShape:
        return NormShape.trusted(elements=b.outside_act, hidden=b.shape.hidden)


class RMSNorm(NormPattern):
    """RMSNorm (gain only): ``model.norm: rmsnorm``."""

    name = "rmsnorm"

    def matches(self, shape: TransformerShape, execution: ExecutionLayout) -> bool:
        return shape.norm == "rmsnorm"

    def shape(self, b: Block) -> NormShape:
        return NormShape.trusted(kind="rms_norm", elements=b.outside_act, hidden=b.shape.hidden)


#: Normalisation patterns (selected by ``model.norm``).
NORMS: tuple[NormPattern, ...] = (LayerNorm(), RMSNorm())


@dataclasses.dataclass(frozen=True)
class ResidualSubBlock:
    """fork -> norm -> f -> core -> g -> dropout -> residual (with the fork)."""

    core: CorePattern
    norm: NormPattern

    def emit(self, b: Block, out: BlockBuilder, prev: str | None) -> str:
        p, full, act = self.core.prefix, b.full, b.outside_act
        fork = out.add(f"{p}.fork", ForkShape.trusted(elements=act, users=2), (prev,) if prev else (),
                       recompute=full)
        norm = b.discards("layernorm") and self.core.standalone_norm
        prev = out.add(f"{p}.layer_norm", self.norm.shape(b), (fork,), recompute=full or norm,
                       **({**REUSED, **DISCARDED} if norm else REUSED))
        if b.overlap and not self.core.leaves_region_itself:
            prev = self.core.emit_overlapped(b, out, prev)
        else:
            f = None if self.core.enters_region_itself else b.collective("f")
            if f:
                prev = out.add(f"{p}.tp_f", f, (prev,), recommunicate=self.core.redo_input(b))
            prev = self.core.emit(b, out, prev)
            g = None if self.core.leaves_region_itself else b.collective("g")
            if g:
                prev = out.add(f"{p}.tp_g", g, (prev,), recommunicate=full, activation_stored=False)
        prev = out.add(f"{p}.dropout", PointwiseShape.trusted(kind="dropout", elements=act), (prev,), recompute=full)
        return out.add(f"{p}.residual", ResidualShape.trusted(elements_a=act, elements_b=act), (prev, fork),
                       recompute=full, **REUSED)


class ScoreKernel(Pattern):
    """The attention proper, from Q, K and V to the attention output (before the output projection)."""

    #: The tasks of the kernel a context-parallel ring step hides behind (one chunk's scores per step).
    tasks: tuple[str, ...] = ()

    @abstractmethod
    def emit(self, b: Block, out: BlockBuilder, qk: tuple[str, ...], v: str) -> str:
        """Append the kernel's tasks after the Q/K producers ``qk`` and the V producer ``v``; return the last."""


#: The materialized kernel's tasks a context-parallel ring step hides behind (one chunk's scores per step).
SCORE_TASKS = ("attn.qk_matmul", "attn.softmax", "attn.probs_dropout", "attn.pv_matmul")


class MaterializedScores(ScoreKernel):
    """QK^T -> softmax -> probability dropout -> PV as separate kernels over the s x s scores (Megatron's unfused
    path; ``execution.attention_kernel`` absent or ``materialized``).

    The full s x s scores are computed (a causal or sliding-window mask is applied to them, it saves no work);
    grouped-query K and V are expanded to the query heads before the batch matmuls (Megatron-Core's
    ``DotProductAttention``). ``model.attention_dropout: 0`` has no dropout primitive. Under ``attn_only`` (or
    full) recomputation the region QK^T -> softmax -> dropout is recomputed.
    """

    tasks = SCORE_TASKS

    name = "materialized"

    def matches(self, shape: TransformerShape, execution: ExecutionLayout) -> bool:
        return execution.attention_kernel in (None, "materialized")

    def emit(self, b: Block, out: BlockBuilder, qk: tuple[str, ...], v: str) -> str:
        s, e, attn = b.shape, b.execution, b.attention
        local_heads = e.microbatch * b.heads
        # this rank's queries (sequence / CP) against every key: with 2 x CP causally balanced chunks each CP
        # rank computes 1/CP of the s x s scores
        scores = b.heads * b.queries * s.sequence_length * e.microbatch
        prev = out.add("attn.qk_matmul", BatchMatmulShape.trusted(batch=local_heads, m=b.queries,
                       n=s.head_size, k=s.sequence_length), qk, recompute=attn, output_stored=not attn)
        prev = out.add("attn.softmax", PointwiseShape.trusted(kind="softmax", elements=scores), (prev,),
                       recompute=attn, output_stored=not attn)
        if s.attention_dropout != 0:
            prev = out.add("attn.probs_dropout", PointwiseShape.trusted(kind="dropout", elements=scores), (prev,),
                           recompute=attn, activation_stored=not attn)
        return out.add("attn.pv_matmul", BatchMatmulShape.trusted(batch=local_heads, m=b.queries,
                       n=s.sequence_length, k=b.value_head_size), (prev, v), recompute=b.full)


class FlashScores(ScoreKernel):
    """One FlashAttention-2 kernel (``execution.attention_kernel: flash``): no s x s tensor, the scores recomputed
    in its own backward pass; the work rule is :func:`harness.passes.rules.flash_attention`. Checkpointing the
    attention core (``attn_only``, or ``core_attn`` of ``recompute: selective``: Megatron-Core's
    ``_checkpointed_attention_forward`` around Transformer Engine's attention) runs the kernel's forward again
    before its backward, so it is cloned then too (and under full recomputation); what it keeps is unchanged
    (its inputs are the projections' kept outputs, its output the output projection's kept input)."""

    name = "flash"
    tasks = ("attn.flash",)

    def matches(self, shape: TransformerShape, execution: ExecutionLayout) -> bool:
        return execution.attention_kernel == "flash"

    def emit(self, b: Block, out: BlockBuilder, qk: tuple[str, ...], v: str) -> str:
        s = b.shape
        window = min(s.sliding_window or s.sequence_length, s.sequence_length)
        value = b.value_head_size if b.value_head_size != s.head_size else None
        flash = FlashAttentionShape.trusted(batch=b.execution.microbatch, heads=b.heads, kv_heads=b.kv_heads,
                                            sequence=s.sequence_length, head_size=s.head_size, window=window,
                                            dropout=s.attention_dropout != 0, value_head_size=value,
                                            context_parallel=b.context if b.ring else None)
        return out.add("attn.flash", flash, tuple(dict.fromkeys((*qk, v))), recompute=b.attention)


#: Attention kernels (selected by ``execution.attention_kernel``).
SCORE_KERNELS: tuple[ScoreKernel, ...] = (MaterializedScores(), FlashScores())


class SelfAttention(CorePattern):
    """Q/K/V projections, [QK-norm], [RoPE], the score kernel, output projection.

    K and V have the model's key/value heads (:func:`~harness.ir.model.key_value_heads`: multi-head,
    grouped-query, multi-query), each ``head_size`` wide; they are split over TP when TP divides their count
    and replicated (one per rank, unsplit weights) otherwise. ``model.qkv_bias`` gives Q, K and V a bias;
    ``model.qk_norm`` an RMSNorm of Q and of K over each head; ``position: rope`` a rotary embedding of Q and K
    (one pointwise task over both). The score kernel is the registered one :data:`SCORE_KERNELS` selects. Under
    ``attn_only`` (or full) recomputation the materialized scores are recomputed, and the QKV fork that feeds
    them; the fork's input is then not stored, so the all-gather before it is sent again.
    """

    name = "self_attention"
    slot = "attention"
    prefix = "attn"

    def matches(self, shape: TransformerShape, execution: ExecutionLayout) -> bool:
        return shape.mla is None

    def redo_input(self, b: Block) -> bool:
        return b.attention or b.execution.seq_par_ag_redo

    def emit(self, b: Block, out: BlockBuilder, prev: str) -> str:
        s, full = b.shape, b.full
        bias = True if s.qkv_bias else None
        redo = self.redo_input(b)
        qkv = out.add("attn.qkv_fork", ForkShape.trusted(elements=b.full_act, users=3), (prev,), recompute=redo,
                      activation_stored=not redo)
        q = out.add("attn.query", LinearShape.trusted(m=b.tokens, n=s.hidden, k=b.query_width, bias=bias), (qkv,),
                    recompute=full, **REUSED)
        k = out.add("attn.key", LinearShape.trusted(m=b.tokens, n=s.hidden, k=b.kv_width, bias=bias), (qkv,),
                    recompute=full, **REUSED)
        v = out.add("attn.value", LinearShape.trusted(m=b.tokens, n=s.hidden, k=b.kv_width, bias=bias), (qkv,),
                    recompute=full, **REUSED)
        prev = self._scores(b, out, (q, k), v)
        return out.add("attn.out_proj", LinearShape.trusted(m=b.tokens, n=b.query_width, k=s.hidden), (prev,),
                       recompute=full)

    def emit_overlapped(self, b: Block, out: BlockBuilder, prev: str) -> str:
        """Q/K/V as one fused GEMM with ``f`` (K/V split over TP), or the query with ``f`` and the replicated key
        and value after a two-user fork of the gathered input (K/V replicated: multi-query); the output
        projection with ``g``."""
        s, full, tp = b.shape, b.full, b.execution.tensor_parallel
        bias = True if s.qkv_bias else None
        width = b.query_width * tp
        redo = self.redo_input(b)
        if b.kv_split:
            q = k = v = out.add("attn.qkv_ag", b.overlapped("f", s.hidden, width + 2 * b.kv_width * tp, bias),
                                (prev,), recompute=full, recommunicate=redo)
        else:
            q = out.add("attn.query_ag", b.overlapped("f", s.hidden, width, bias), (prev,), recompute=full,
                        recommunicate=redo)
            kv = out.add("attn.kv_fork", ForkShape.trusted(elements=b.full_act, users=2), (q,), recompute=redo,
                         activation_stored=not redo)
            k = out.add("attn.key", LinearShape.trusted(m=b.tokens, n=s.hidden, k=b.kv_width, bias=bias), (kv,),
                        recompute=full, **REUSED)
            v = out.add("attn.value", LinearShape.trusted(m=b.tokens, n=s.hidden, k=b.kv_width, bias=bias), (kv,),
                        recompute=full, **REUSED)
        prev = self._scores(b, out, tuple(dict.fromkeys((q, k))), v)
        return out.add("attn.out_proj_rs", b.overlapped("g", width, s.hidden), (prev,), recompute=full,
                       recommunicate=full)

    @staticmethod
    def _scores(b: Block, out: BlockBuilder, qk: tuple[str, ...], v: str) -> str:
        """[QK-norm] -> [RoPE] -> the selected score kernel."""
        s, full = b.shape, b.full
        if s.qk_norm:
            q, k = qk if len(qk) == 2 else (qk[0], qk[0])
            q = out.add("attn.q_norm", NormShape.trusted(kind="rms_norm", elements=b.tokens * b.query_width,
                                                         hidden=s.head_size), (q,), recompute=full)
            k = out.add("attn.k_norm", NormShape.trusted(kind="rms_norm", elements=b.tokens * b.kv_width,
                                                         hidden=s.head_size), (k,), recompute=full)
            qk = (q, k)
        if s.position == "rope":
            rope = PointwiseShape.trusted(kind="rope", elements=b.tokens * (b.query_width + b.kv_width))
            qk = (out.add("attn.rope", rope, qk, recompute=full),)
        kernel = select(SCORE_KERNELS, s, b.execution, "attention kernel")
        if b.context > 1 and not b.ring:
            return SelfAttention._ulysses(b, out, kernel, qk, v)
        if b.ring:  # the K/V ring of context parallelism, before the scores it feeds
            exchange = RingExchangeShape.trusted(elements=2 * b.tokens * b.kv_width, steps=b.context - 1,
                                                 participants=b.context, hides_behind=kernel.tasks)
            v = out.add("attn.context_exchange", exchange, tuple(dict.fromkeys((*qk[1:], v))))
            qk = (qk[0], v)
        return kernel.emit(b, out, qk, v)

    @staticmethod
    def _ulysses(b: Block, out: BlockBuilder, kernel: "ScoreKernel", qk: tuple[str, ...], v: str) -> str:
        """Ulysses (``cp_comm: a2a``): an all-to-all of Q, K and V over the context group (this rank's positions
        of every local head -> the whole sequence of heads / CP), the kernel over the whole sequence with heads /
        CP, then an all-to-all of its output back; the backward pass mirrors both (their gradients)."""
        cp = b.context

        def a2a(elements: int) -> ContextAllToAllShape:
            return ContextAllToAllShape.trusted(elements=elements, participants=cp, base_forward="all_to_all",
                                                base_backward="all_to_all", edge_forward="all_to_all",
                                                edge_backward="all_to_all")

        # checkpointing the attention core re-runs it with its all-to-alls (full recomputation too)
        qkv = out.add("attn.context_qkv_a2a", a2a(b.tokens * (b.query_width + 2 * b.kv_width)),
                      tuple(dict.fromkeys((*qk, v))), recommunicate=b.attention)
        heads = dataclasses.replace(b, heads=b.heads // cp, kv_heads=b.kv_heads // cp,
                                    queries=b.shape.sequence_length)
        prev = kernel.emit(heads, out, (qkv,), qkv)
        return out.add("attn.context_out_a2a", a2a(b.tokens * b.heads * b.value_head_size), (prev,),
                       recommunicate=b.attention)


class LatentAttentionCore(CorePattern):
    """Multi-head latent attention (``model.mla``), split over TP as Megatron-Core's ``MLASelfAttention`` with its
    Transformer Engine layer spec splits it.

    - The down projections are duplicated on every TP rank (``TELinear``, ``parallel_mode="duplicated"``: full
      weights, no split) and read the sub-block's input where it is, sequence-sharded under ``rs_ag``:
      ``attn.q_down`` hidden -> q_lora_rank and ``attn.kv_down`` hidden -> kv_lora_rank + qk_rope_head_dim, then
      the RMSNorms of the two latents (``attn.q_latent_norm`` over q_lora_rank, ``attn.kv_latent_norm`` over
      kv_lora_rank; Megatron-Core fuses them into the up projections' ``TELayerNormColumnParallelLinear``, which
      normalizes before it gathers).
    - The TP region starts after them: one ``attn.tp_f`` collective over the three tensors that enter it (the
      query latent, the key/value latent and the shared rotary key, q_lora_rank + kv_lora_rank +
      qk_rope_head_dim per token; without query compression the hidden states themselves instead of the query
      latent), all-gathered under sequence parallelism (Megatron-Core's column-parallel up projections gather
      their latent, ``gather_from_sequence_parallel_region`` the rotary key), its gradient all-reduced without.
    - The up projections are column-parallel, heads / TP per rank: ``attn.q_up`` q_lora_rank -> heads x
      (qk_nope + qk_rope) (``attn.query`` hidden -> the same without query compression), ``attn.kv_up``
      kv_lora_rank -> heads x (qk_nope + v_head_dim).
    - ``attn.rope`` rotates the query's rotary part (heads x qk_rope) and the one shared rotary key (qk_rope)
      per token; the score kernel runs over query/key heads qk_nope + qk_rope wide (head_size) and value heads
      v_head_dim wide, every head with its own K and V; ``attn.out_proj`` is row-parallel, heads x v_head_dim ->
      hidden.

    No form under TP overlap (refused by :meth:`CorePattern.unpriceable`); a QKV bias, QK-norm and learned
    positions are refused (:meth:`unpriceable`).
    """

    name = "latent_attention"
    slot = "attention"
    prefix = "attn"
    enters_region_itself = True
    standalone_norm = True  # the down projections are plain TELinear: the input norm is a TENorm

    def matches(self, shape: TransformerShape, execution: ExecutionLayout) -> bool:
        return shape.mla is not None

    def unpriceable(self, shape: TransformerShape, execution: ExecutionLayout) -> list[tuple[str, str]]:
        problems = super().unpriceable(shape, execution)
        for field, on, what in (("qkv_bias", shape.qkv_bias, "a QKV bias"), ("qk_norm", shape.qk_norm, "QK-norm"),
                                ("position", shape.position == "learned", "learned positions")):
            if on:
                problems.append((f"model.{field}", f"{what} with multi-head latent attention (model.mla) is not "
                                                   "modelled (its norms are on the latents, its positions rotary)"))
        return problems

    def redo_input(self, b: Block) -> bool:
        return b.full or b.execution.seq_par_ag_redo

    def emit(self, b: Block, out: BlockBuilder, prev: str) -> str:
        s, e, full = b.shape, b.execution, b.full
        mla = s.mla
        assert mla is not None
        tp, tokens, heads, redo = e.tensor_parallel, b.tokens, b.heads, self.redo_input(b)
        outside = b.outside_act // s.hidden  # tokens of the sub-block's input on this rank
        fork = out.add("attn.latent_fork", ForkShape.trusted(elements=b.outside_act, users=2), (prev,),
                       recompute=full, activation_stored=not full)
        kv_down = out.add("attn.kv_down", LinearShape.trusted(m=outside, n=s.hidden,
                          k=mla.kv_lora_rank + mla.qk_rope_head_dim), (fork,), recompute=full, **REUSED)
        kv_latent = out.add("attn.kv_latent_norm", NormShape.trusted(kind="rms_norm", elements=outside *
                            mla.kv_lora_rank, hidden=mla.kv_lora_rank), (kv_down,), recompute=full)
        if mla.q_lora_rank is not None:
            q_down = out.add("attn.q_down", LinearShape.trusted(m=outside, n=s.hidden, k=mla.q_lora_rank), (fork,),
                             recompute=full, **REUSED)
            q_latent = out.add("attn.q_latent_norm", NormShape.trusted(kind="rms_norm", elements=outside *
                               mla.q_lora_rank, hidden=mla.q_lora_rank), (q_down,), recompute=full)
            q_width = mla.q_lora_rank
        else:
            q_latent, q_width = fork, s.hidden
        q_in = kv_in = rope_in = None
        if tp > 1:
            bf, bb = collective_ops("f", e.tp_communication == "rs_ag")
            ef, eb = collective_ops("f", e.tp_communication in ("rs_ag", "p2p_rs_ag"))
            entering = CollectiveShape.trusted(
                role="f", elements=tokens * (q_width + mla.kv_lora_rank + mla.qk_rope_head_dim), participants=tp,
                sequence_sharded=e.sequence_parallel, base_forward=bf, base_backward=bb, edge_forward=ef,
                edge_backward=eb)
            q_in = kv_in = rope_in = out.add("attn.tp_f", entering, (q_latent, kv_latent, kv_down),
                                             recommunicate=redo)
        q_name, q_shape = (("attn.q_up", LinearShape.trusted(m=tokens, n=mla.q_lora_rank, k=heads * mla.qk_head_dim))
                           if mla.q_lora_rank is not None else
                           ("attn.query", LinearShape.trusted(m=tokens, n=s.hidden, k=heads * mla.qk_head_dim)))
        # without query compression and no gather, the query reads the fork's stored input itself
        q_kept = REUSED if mla.q_lora_rank is None and not (q_in and e.sequence_parallel) else {
            "activation_stored": not redo}
        # mla_up_proj: the up projections and the rotary embedding discard their outputs (Q, K, V)
        up, discarded = full or b.discards("mla_up_proj"), DISCARDED if b.discards("mla_up_proj") else {}
        q = out.add(q_name, q_shape, (q_in or q_latent,), recompute=up, **q_kept, **discarded)
        kv = out.add("attn.kv_up", LinearShape.trusted(m=tokens, n=mla.kv_lora_rank,
                     k=heads * (mla.qk_nope_head_dim + mla.v_head_dim)), (kv_in or kv_latent,), recompute=up,
                     activation_stored=not redo, **discarded)
        rope = out.add("attn.rope", PointwiseShape.trusted(kind="rope", elements=tokens * mla.qk_rope_head_dim *
                                                           (heads + 1)), (q, rope_in or kv_down), recompute=up,
                       **discarded)
        qk: tuple[str, ...] = (rope, kv)
        kernel = select(SCORE_KERNELS, s, e, "attention kernel")
        if b.ring:  # the K/V ring of context parallelism: every head's K (qk wide) and V (v_head_dim wide)
            exchange = RingExchangeShape.trusted(elements=tokens * heads * (mla.qk_head_dim + mla.v_head_dim),
                                                 steps=b.context - 1, participants=b.context,
                                                 hides_behind=kernel.tasks)
            kv = out.add("attn.context_exchange", exchange, qk)
            qk = (rope, kv)
        prev = kernel.emit(b, out, qk, kv)
        return out.add("attn.out_proj", LinearShape.trusted(m=tokens, n=heads * mla.v_head_dim, k=s.hidden), (prev,),
                       recompute=full)


class TwoLayerMLP(CorePattern):
    """fc1 -> activation (GeLU or squared ReLU) -> fc2 (``mlp`` absent, ``gelu`` or ``squared_relu``); fc1's input
    is redone (not stored) under full recompute or all-gather redo."""

    name = "two_layer_mlp"
    slot = "mlp"
    prefix = "mlp"

    def matches(self, shape: TransformerShape, execution: ExecutionLayout) -> bool:
        return shape.mlp in (None, "gelu", "squared_relu") and shape.moe is None

    def redo_input(self, b: Block) -> bool:
        return b.full or b.execution.seq_par_ag_redo

    def width(self, b: Block) -> int:
        """Output features of fc1 (all TP ranks)."""
        return b.shape.feedforward

    def emit(self, b: Block, out: BlockBuilder, prev: str) -> str:
        s, e, full = b.shape, b.execution, b.full
        inner = s.feedforward // e.tensor_parallel
        prev = out.add("mlp.fc1", LinearShape.trusted(m=b.tokens, n=s.hidden, k=self.width(b) // e.tensor_parallel),
                       (prev,), recompute=full, activation_stored=not self.redo_input(b))
        prev = self._activation(b, out, prev)
        return out.add("mlp.fc2", LinearShape.trusted(m=b.tokens, n=inner, k=s.hidden), (prev,), recompute=full)

    def emit_overlapped(self, b: Block, out: BlockBuilder, prev: str) -> str:
        s = b.shape
        prev = out.add("mlp.fc1_ag", b.overlapped("f", s.hidden, self.width(b)), (prev,), recompute=b.full,
                       recommunicate=self.redo_input(b))
        prev = self._activation(b, out, prev)
        return out.add("mlp.fc2_rs", b.overlapped("g", s.feedforward, s.hidden), (prev,), recompute=b.full,
                       recommunicate=b.full)

    @staticmethod
    def _activation(b: Block, out: BlockBuilder, prev: str) -> str:
        e, kind = b.execution, b.shape.mlp or "gelu"
        act = PointwiseShape.trusted(kind=kind, elements=b.shape.feedforward * b.tokens // e.tensor_parallel,
                                     fused=e.fused_activation)
        return out.add(f"mlp.{kind}", act, (prev,), recompute=b.full)


class GatedMLP(TwoLayerMLP):
    """fc1 (gate and up fused: hidden -> 2 x feedforward, Megatron-Core's ``linear_fc1`` with a gated linear unit)
    -> SwiGLU or GeGLU -> fc2 (``mlp: swiglu | geglu``): the three matrices of width feedforward."""

    name = "gated_mlp"

    def matches(self, shape: TransformerShape, execution: ExecutionLayout) -> bool:
        return shape.mlp in ("swiglu", "geglu") and shape.moe is None

    def width(self, b: Block) -> int:
        return 2 * b.shape.feedforward


class MixtureOfExpertsMLP(CorePattern):
    """A MoE block's MLP (``model.moe``; Megatron-Core's ``MoELayer`` with parallel folding), on this rank's
    ``T`` tokens (microbatch x sequence / CP, / TP under sequence parallelism: the tokens stay sequence-sharded,
    so the sub-block has no ``f`` / ``g`` collective):

    - ``mlp.moe_fork`` (to the router, the dispatch and the shared experts), ``mlp.router`` (the hidden x experts
      GEMM on every token), ``mlp.top_k`` (score function and top-k);
    - ``mlp.permute`` (each token copied to its top_k expert slots), then the dispatch: ``mlp.dispatch`` (an
      all-to-all over the EP group of the T x top_k x hidden buffer) and, with ETP > 1, ``mlp.expert_gather``
      (all-gather over ETP), or with ``moe_dispatcher: allgather`` one ``mlp.dispatch_gather`` (every token over
      the EP x ETP group);
    - the local experts (experts / EP) as grouped GEMMs ``mlp.experts_fc1``, the activation, ``mlp.experts_fc2``,
      each expert on the busiest expert's tokens (:func:`harness.ir.experts.tokens_per_expert` of the T x EP x
      ETP tokens its EP x ETP group routes, x ``load_imbalance`` capped by ``capacity_factor``), width / ETP;
    - the way back (``mlp.expert_scatter`` reduce-scatter over ETP, ``mlp.combine`` all-to-all, or the all-gather
      dispatcher's ``mlp.combine_scatter``) and ``mlp.unpermute`` (weighted sum of each token's copies);
    - shared experts (``shared_experts > 0``) on every token, one MLP of the shared width split over TP with
      their own all-gather / reduce-scatter under sequence parallelism (Megatron-Core's ``SharedExpertMLP``),
      added to the routed output (``mlp.shared_add``).

    Recomputed (and its collectives re-sent) only under full recomputation. The plan's block is a MoE block: a
    model with dense blocks too (``dense_layers``, ``layer_frequency``) is refused by :meth:`unpriceable` as one
    plan; the estimate lowers its two kinds of block each on its own (:mod:`harness.ir.blocks`)."""

    name = "mixture_of_experts"
    slot = "mlp"
    prefix = "mlp"
    enters_region_itself = True
    leaves_region_itself = True
    standalone_norm = True  # the router and the experts read a TENorm's output (pre_mlp_layernorm)

    def matches(self, shape: TransformerShape, execution: ExecutionLayout) -> bool:
        return shape.moe is not None

    def unpriceable(self, shape: TransformerShape, execution: ExecutionLayout) -> list[tuple[str, str]]:
        moe = shape.moe
        assert moe is not None
        problems: list[tuple[str, str]] = []
        one_plan = blocks.one_plan_problem(shape, execution)  # two plans: dense and MoE blocks, MTP layers
        if one_plan is not None:
            problems.append(one_plan)
        if execution.tensor_parallel > 1 and not execution.sequence_parallel:
            problems.append(("execution.tp_communication", "a MoE block with TP > 1 without sequence parallelism "
                                                           "(rs_ag) is not modelled yet"))
        if not execution.training:
            problems.append(("execution.training", "MoE inference is not modelled yet"))
        if (execution.tensor_parallel * execution.context_degree * execution.data_parallel
                > execution.expert_degree * execution.expert_tensor_degree) and \
                execution.data_parallel * execution.context_degree == 1:
            problems.append(("execution.expert_parallel", "expert data parallelism without data parallelism (TP > "
                                                          "EP x ETP, DP x CP = 1) is not modelled yet"))
        return problems

    def redo_input(self, b: Block) -> bool:
        return b.full

    def emit(self, b: Block, out: BlockBuilder, prev: str) -> str:
        s, e, full = b.shape, b.execution, b.full
        moe = s.moe
        assert moe is not None
        ep, etp, h = e.expert_degree, e.expert_tensor_degree, s.hidden
        tokens = b.outside_act // h  # this rank's tokens (sequence-sharded under rs_ag)
        copies = tokens * moe.top_k
        shared = moe.shared_width > 0
        fork = out.add("mlp.moe_fork", ForkShape.trusted(elements=b.outside_act, users=3 if shared else 2), (prev,),
                       recompute=full, activation_stored=not full)
        router = out.add("mlp.router", RouterShape.trusted(m=tokens, n=h, k=moe.experts), (fork,), recompute=full,
                         **REUSED)
        top = out.add("mlp.top_k", TopKShape.trusted(tokens=tokens, experts=moe.experts, top_k=moe.top_k,
                                                    score=moe.router or "softmax"), (router,), recompute=full)
        prev = out.add("mlp.permute", TokenPermuteShape.trusted(kind="permute", tokens=tokens, copies=moe.top_k,
                                                                hidden=h), (fork, top), recompute=full, **REUSED)
        gathered = copies * etp  # token copies at this rank's experts (the mean), after the ETP all-gather
        if e.moe_dispatcher == "allgather":
            if ep * etp > 1:
                prev = out.add("mlp.dispatch_gather", self._collective(
                    ExpertGatherShape, tokens * h * ep * etp, ep * etp, "all_gather", "reduce_scatter"), (prev,),
                    recommunicate=full)
        else:
            if ep > 1:
                prev = out.add("mlp.dispatch", self._collective(ExpertAllToAllShape, copies * h, ep, "all_to_all",
                                                                "all_to_all"), (prev,), recommunicate=full)
            if etp > 1:
                prev = out.add("mlp.expert_gather", self._collective(
                    ExpertTensorCollectiveShape, gathered * h, etp, "all_gather", "reduce_scatter"), (prev,),
                    recommunicate=full)
        prev = self._experts(b, out, prev, tokens * ep * etp)
        if e.moe_dispatcher == "allgather":
            if ep * etp > 1:
                prev = out.add("mlp.combine_scatter", self._collective(
                    ExpertGatherShape, tokens * h * ep * etp, ep * etp, "reduce_scatter", "all_gather"), (prev,),
                    recommunicate=full, activation_stored=False)
        else:
            if etp > 1:
                prev = out.add("mlp.expert_scatter", self._collective(
                    ExpertTensorCollectiveShape, gathered * h, etp, "reduce_scatter", "all_gather"), (prev,),
                    recommunicate=full, activation_stored=False)
            if ep > 1:
                prev = out.add("mlp.combine", self._collective(ExpertAllToAllShape, copies * h, ep, "all_to_all",
                                                               "all_to_all"), (prev,), recommunicate=full,
                               activation_stored=False)
        routed = out.add("mlp.unpermute", TokenPermuteShape.trusted(kind="unpermute", tokens=tokens,
                                                                    copies=moe.top_k, hidden=h), (prev, top),
                         recompute=full)
        if not shared:
            return routed
        return out.add("mlp.shared_add", ResidualShape.trusted(elements_a=b.outside_act, elements_b=b.outside_act),
                       (routed, self._shared(b, out, fork)), recompute=full, **REUSED)

    @staticmethod
    def _collective(cls: type, elements: int, participants: int, forward: CollectiveOp, backward: CollectiveOp):
        return cls.trusted(elements=elements, participants=participants, base_forward=forward,
                           base_backward=backward, edge_forward=forward, edge_backward=backward)

    @staticmethod
    def _experts(b: Block, out: BlockBuilder, prev: str, routed_tokens: int) -> str:
        """The local experts' grouped GEMMs on the busiest expert's tokens, width / ETP."""
        s, e, full = b.shape, b.execution, b.full
        moe = s.moe
        assert moe is not None
        etp, local = e.expert_tensor_degree, moe.experts // e.expert_degree
        busiest = tokens_per_expert(routed_tokens, moe.top_k, moe.experts, moe.imbalance)
        m = max(1, math.ceil(busiest))  # whole tokens: the busiest expert's, rounded up
        kind = s.mlp or "gelu"
        width = moe.expert_ffn // etp
        fc1_width = 2 * width if kind in ("swiglu", "geglu") else width
        prev = out.add("mlp.experts_fc1", GroupedLinearShape.trusted(groups=local, m=m, n=s.hidden, k=fc1_width),
                       (prev,), recompute=full)
        act = PointwiseShape.trusted(kind=kind, elements=local * m * width, fused=e.fused_activation)
        discarded = b.discards("moe_act")
        prev = out.add(f"mlp.experts_{kind}", act, (prev,), recompute=full or discarded,
                       **(DISCARDED if discarded else {}))
        return out.add("mlp.experts_fc2", GroupedLinearShape.trusted(groups=local, m=m, n=width, k=s.hidden), (prev,),
                       recompute=full)

    @staticmethod
    def _shared(b: Block, out: BlockBuilder, fork: str) -> str:
        """The shared experts: one dense MLP of the shared width over TP (its own f / g under sequence
        parallelism)."""
        s, e, full = b.shape, b.execution, b.full
        moe = s.moe
        assert moe is not None
        tp, kind = e.tensor_parallel, s.mlp or "gelu"
        width = moe.shared_width // tp
        fc1_width = 2 * width if kind in ("swiglu", "geglu") else width
        prev = fork
        f = b.collective("f")
        if f:
            prev = out.add("mlp.shared_tp_f", f, (prev,), recommunicate=full)
        prev = out.add("mlp.shared_fc1", LinearShape.trusted(m=b.tokens, n=s.hidden, k=fc1_width), (prev,),
                       recompute=full, activation_stored=not full)
        act = PointwiseShape.trusted(kind=kind, elements=b.tokens * width, fused=e.fused_activation)
        prev = out.add(f"mlp.shared_{kind}", act, (prev,), recompute=full)
        prev = out.add("mlp.shared_fc2", LinearShape.trusted(m=b.tokens, n=width, k=s.hidden), (prev,),
                       recompute=full)
        g = b.collective("g")
        if g:
            prev = out.add("mlp.shared_tp_g", g, (prev,), recommunicate=full, activation_stored=False)
        return prev


#: Core patterns per block slot (the pass's ``block`` option names the slots, in block order).
CORES: dict[str, tuple[CorePattern, ...]] = {"attention": (SelfAttention(), LatentAttentionCore()),
                                             "mlp": (TwoLayerMLP(), GatedMLP(), MixtureOfExpertsMLP())}


def unpriceable(shape: TransformerShape, execution: ExecutionLayout,
                slots: tuple[str, ...] = tuple(CORES)) -> list[tuple[str, str]]:
    """``(field, message)`` for each part of the model no registered pattern lowers: a slot, the norm or the
    attention kernel matched by none (or several), and what a selected pattern refuses (:meth:`Pattern.unpriceable`)."""
    problems: list[tuple[str, str]] = []
    chosen: list[Pattern] = []
    for what, patterns, field in [*((slot, CORES[slot], f"model.{slot}") for slot in slots),
                                  ("norm", NORMS, "model.norm"),
                                  ("attention kernel", SCORE_KERNELS, "execution.attention_kernel")]:
        found = [p for p in patterns if p.matches(shape, execution)]
        if len(found) != 1:
            problems.append((field, f"{len(found)} registered {what} patterns match (of {[p.name for p in patterns]})"))
        chosen += found[:1]
    for pattern in chosen:
        problems += pattern.unpriceable(shape, execution)
    return problems


def with_clones(out: BlockBuilder, training: bool) -> list[Task]:
    """Forward tasks, then (training) recompute clones and recommunication tasks.

    A flagged compute task gets a ``recompute/`` clone; a flagged collective
    (or overlapped linear) whose forward is not the identity gets a
    ``recommunication/`` clone; an overlapped linear flagged for both gets
    both (the recommunication first). A clone consumes the clones of its
    producers where they exist, so the recompute region is its own sub-DAG
    hanging off stored activations.
    """
    forward = [task for task, _, _ in out.tasks]
    if not training:
        return forward
    clones: list[Task] = []
    replaced: dict[str, str] = {}
    for task, recompute, recommunicate in out.tasks:
        deps = tuple(replaced.get(d, d) for d in task.depends_on)
        sends = isinstance(task.shape, (CollectiveShape, OverlappedLinearShape)) and bool(
            task.shape.base_forward or task.shape.edge_forward)
        if recompute and recommunicate and sends and isinstance(task.shape, OverlappedLinearShape):
            clones.append(task.trusted_replace(name=RECOMMUNICATION + task.name, phase="recommunication",
                                               clone_of=task.name, depends_on=deps))
        if recompute:
            clone = task.trusted_replace(name=RECOMPUTE + task.name, phase="recompute", clone_of=task.name,
                                         depends_on=deps)
        elif recommunicate and sends:
            clone = task.trusted_replace(name=RECOMMUNICATION + task.name, phase="recommunication",
                                         clone_of=task.name, depends_on=deps)
        else:
            continue
        replaced[task.name] = clone.name
        clones.append(clone)
    return forward + clones
