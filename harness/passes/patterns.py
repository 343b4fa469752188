"""Sub-graph patterns of ``transformer-distribute``: each emits one piece of a TP block.

A Transformer block of one tensor-parallel rank is a sequence of residual
sub-blocks (:class:`ResidualSubBlock`): fork, layer norm, ``f`` collective,
a *core* pattern, ``g`` collective, dropout, residual. Under TP overlap
(ring or pipe) the core absorbs the two collectives into its first and last
linear (``overlapped_linear`` tasks, :meth:`Block.overlapped`). The cores are
the patterns that differ between architectures: :class:`MultiHeadAttention`
(multi-head or multi-query attention) and :class:`GeluMLP`. Adding SwiGLU or
grouped-query attention is a new core pattern registered in :data:`CORES`
(and named in the pass's ``block`` option or chosen from the ModelIR), not an
edit of the others.

Rules shared by every pattern:

- a pattern reads the block's sizes and flags from :class:`Block` (derived
  once from the ModelIR) and appends forward tasks to a :class:`BlockBuilder`
  in topological order; it returns the name of its output task;
- a task carries its recompute flag (clone it under recomputation) and its
  recommunicate flag (its forward collective is sent again); the clones
  themselves are made afterwards by :func:`with_clones`;
- activations outside a TP region are sequence-sharded under ``rs_ag``.
"""

from __future__ import annotations

import dataclasses
import functools
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from harness.errors import PassError
from harness.ir.distributed import (
    BatchMatmulShape,
    CollectiveOp,
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
from harness.ir.model import ExecutionLayout, ModelIR, TransformerShape

RECOMPUTE = "recompute/"
RECOMMUNICATION = "recommunication/"

# Retention is interned; this cache only skips the keyword handling for its few flag combinations.
_retention = functools.cache(Retention.trusted)
#: Retention of a task whose input is another task's stored activation.
REUSED = dict(activation_stored=False, activation_reused=True)


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
    queries: int  # sequence positions of one sample on this rank: sequence / CP

    @property
    def context(self) -> int:
        """The context-parallel degree."""
        return self.execution.context_degree

    @classmethod
    def of(cls, ir: ModelIR) -> "Block":
        s, e = ir.shape, ir.execution
        queries = s.sequence_length // e.context_degree  # context parallelism: this rank's share of the sequence
        tokens = e.microbatch * queries
        full_act = tokens * s.hidden
        outside = (tokens // e.tensor_parallel) * s.hidden if e.sequence_parallel else full_act
        return cls(s, e, tokens, full_act, outside, e.recompute == "full", e.recompute in ("full", "attn_only"),
                   queries)

    @property
    def overlap(self) -> bool:
        """TP overlap: the collectives are fused into the adjacent linears."""
        return self.execution.tp_overlap != "none"

    def overlapped(self, role: str, n: int, k: int) -> OverlappedLinearShape:
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
            activation_grad_elements=grad, base_forward=bf, base_backward=bb, edge_forward=ef, edge_backward=eb)

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

    def add(self, name: str, shape: Any, deps: tuple[str, ...] = (), *, recompute: bool = False,
            recommunicate: bool = False, **retention: bool) -> str:
        task = Task.trusted(name=name, phase="forward", clone_of=None, depends_on=deps, shape=shape,
                            retention=_retention(**retention))
        self.tasks.append((task, recompute, recommunicate))
        return name


class CorePattern(ABC):
    """The architecture-specific inside of a TP region (between ``f`` and ``g``)."""

    name: ClassVar[str]  # the pattern's name in the pass's ``block`` option
    prefix: ClassVar[str]  # task-name prefix of its sub-block

    @abstractmethod
    def redo_input(self, b: Block) -> bool:
        """Whether the collective feeding the core is sent again (its input is not stored)."""

    @abstractmethod
    def emit(self, b: Block, out: BlockBuilder, prev: str) -> str:
        """Append the core's tasks after ``prev`` (the ``f`` collective); return the last one (before ``g``)."""

    def emit_overlapped(self, b: Block, out: BlockBuilder, prev: str) -> str:
        """The same under TP overlap: the first linear absorbs ``f`` (recommunicating like it), the last ``g``.

        A core that does not define it cannot be lowered with TP overlap.
        """
        raise PassError("transformer-distribute", f"core pattern {self.name!r} has no form under TP overlap "
                                                  f"(tp_overlap={b.execution.tp_overlap})")


@dataclasses.dataclass(frozen=True)
class ResidualSubBlock:
    """fork -> layer norm -> f -> core -> g -> dropout -> residual (with the fork)."""

    core: CorePattern

    def emit(self, b: Block, out: BlockBuilder, prev: str | None) -> str:
        p, full, act = self.core.prefix, b.full, b.outside_act
        fork = out.add(f"{p}.fork", ForkShape.trusted(elements=act, users=2), (prev,) if prev else (),
                       recompute=full)
        prev = out.add(f"{p}.layer_norm", NormShape.trusted(elements=act, hidden=b.shape.hidden), (fork,),
                       recompute=full, **REUSED)
        if b.overlap:
            prev = self.core.emit_overlapped(b, out, prev)
        else:
            f = b.collective("f")
            if f:
                prev = out.add(f"{p}.tp_f", f, (prev,), recommunicate=self.core.redo_input(b))
            prev = self.core.emit(b, out, prev)
            g = b.collective("g")
            if g:
                prev = out.add(f"{p}.tp_g", g, (prev,), recommunicate=full, activation_stored=False)
        prev = out.add(f"{p}.dropout", PointwiseShape.trusted(kind="dropout", elements=act), (prev,), recompute=full)
        return out.add(f"{p}.residual", ResidualShape.trusted(elements_a=act, elements_b=act), (prev, fork),
                       recompute=full, **REUSED)


class MultiHeadAttention(CorePattern):
    """Q/K/V projections, QK^T, softmax, probability dropout, PV, output projection.

    Multi-query attention shrinks K and V to one head. Under ``attn_only`` (or
    full) recomputation QK^T -> softmax -> dropout are recomputed, and the
    QKV fork that feeds them; the fork's input is then not stored, so the
    all-gather before it is sent again.
    """

    name = "attention"
    prefix = "attn"

    def redo_input(self, b: Block) -> bool:
        return b.attention or b.execution.seq_par_ag_redo

    def emit(self, b: Block, out: BlockBuilder, prev: str) -> str:
        s, full = b.shape, b.full
        proj = s.attention_heads * s.head_size // b.execution.tensor_parallel
        kv_width = proj if b.execution.attention == "multihead" else s.head_size
        redo = self.redo_input(b)
        qkv = out.add("attn.qkv_fork", ForkShape.trusted(elements=b.full_act, users=3), (prev,), recompute=redo,
                      activation_stored=not redo)
        q = out.add("attn.query", LinearShape.trusted(m=b.tokens, n=s.hidden, k=proj), (qkv,), recompute=full,
                    **REUSED)
        k = out.add("attn.key", LinearShape.trusted(m=b.tokens, n=s.hidden, k=kv_width), (qkv,), recompute=full,
                    **REUSED)
        v = out.add("attn.value", LinearShape.trusted(m=b.tokens, n=s.hidden, k=kv_width), (qkv,), recompute=full,
                    **REUSED)
        if b.context > 1:  # the K/V ring of context parallelism, before the scores it feeds
            exchange = RingExchangeShape.trusted(elements=2 * b.tokens * kv_width, steps=b.context - 1,
                                                 participants=b.context, hides_behind=SCORE_TASKS)
            k = v = out.add("attn.context_exchange", exchange, (k, v))
        prev = self._scores(b, out, tuple(dict.fromkeys((q, k))), v)
        return out.add("attn.out_proj", LinearShape.trusted(m=b.tokens, n=proj, k=s.hidden), (prev,), recompute=full)

    def emit_overlapped(self, b: Block, out: BlockBuilder, prev: str) -> str:
        """Q/K/V as one fused GEMM with ``f`` (multihead), or the query with ``f`` and the unsplit key and
        value after a two-user fork of the gathered input (multiquery); the output projection with ``g``."""
        s, full = b.shape, b.full
        width = s.attention_heads * s.head_size
        redo = self.redo_input(b)
        if b.execution.attention == "multihead":
            q = k = v = out.add("attn.qkv_ag", b.overlapped("f", s.hidden, 3 * width), (prev,), recompute=full,
                                recommunicate=redo)
        else:
            q = out.add("attn.query_ag", b.overlapped("f", s.hidden, width), (prev,), recompute=full,
                        recommunicate=redo)
            kv = out.add("attn.kv_fork", ForkShape.trusted(elements=b.full_act, users=2), (q,), recompute=redo,
                         activation_stored=not redo)
            k = out.add("attn.key", LinearShape.trusted(m=b.tokens, n=s.hidden, k=s.head_size), (kv,),
                        recompute=full, **REUSED)
            v = out.add("attn.value", LinearShape.trusted(m=b.tokens, n=s.hidden, k=s.head_size), (kv,),
                        recompute=full, **REUSED)
        prev = self._scores(b, out, tuple(dict.fromkeys((q, k))), v)
        return out.add("attn.out_proj_rs", b.overlapped("g", width, s.hidden), (prev,), recompute=full,
                       recommunicate=full)

    @staticmethod
    def _scores(b: Block, out: BlockBuilder, qk: tuple[str, ...], v: str) -> str:
        """QK^T -> softmax -> probability dropout -> PV (the recomputed region under ``attn_only``)."""
        s, e, attn = b.shape, b.execution, b.attention
        local_heads = e.microbatch * s.attention_heads // e.tensor_parallel
        # this rank's queries (sequence / CP) against every key: with 2 x CP causally balanced chunks each CP
        # rank computes 1/CP of the s x s scores
        scores = s.attention_heads // e.tensor_parallel * b.queries * s.sequence_length * e.microbatch
        prev = out.add("attn.qk_matmul", BatchMatmulShape.trusted(batch=local_heads, m=b.queries,
                       n=s.head_size, k=s.sequence_length), qk, recompute=attn, output_stored=not attn)
        prev = out.add("attn.softmax", PointwiseShape.trusted(kind="softmax", elements=scores), (prev,),
                       recompute=attn, output_stored=not attn)
        prev = out.add("attn.probs_dropout", PointwiseShape.trusted(kind="dropout", elements=scores), (prev,),
                       recompute=attn, activation_stored=not attn)
        return out.add("attn.pv_matmul", BatchMatmulShape.trusted(batch=local_heads, m=b.queries,
                       n=s.sequence_length, k=s.head_size), (prev, v), recompute=b.full)


#: The attention tasks a context-parallel ring step hides behind (one chunk's scores per step).
SCORE_TASKS = ("attn.qk_matmul", "attn.softmax", "attn.probs_dropout", "attn.pv_matmul")


class GeluMLP(CorePattern):
    """fc1 -> GeLU -> fc2; fc1's input is redone (not stored) under full recompute or all-gather redo."""

    name = "mlp"
    prefix = "mlp"

    def redo_input(self, b: Block) -> bool:
        return b.full or b.execution.seq_par_ag_redo

    def emit(self, b: Block, out: BlockBuilder, prev: str) -> str:
        s, e, full = b.shape, b.execution, b.full
        inner = s.feedforward // e.tensor_parallel
        prev = out.add("mlp.fc1", LinearShape.trusted(m=b.tokens, n=s.hidden, k=inner), (prev,), recompute=full,
                       activation_stored=not self.redo_input(b))
        prev = self._gelu(b, out, prev)
        return out.add("mlp.fc2", LinearShape.trusted(m=b.tokens, n=inner, k=s.hidden), (prev,), recompute=full)

    def emit_overlapped(self, b: Block, out: BlockBuilder, prev: str) -> str:
        s = b.shape
        prev = out.add("mlp.fc1_ag", b.overlapped("f", s.hidden, s.feedforward), (prev,), recompute=b.full,
                       recommunicate=self.redo_input(b))
        prev = self._gelu(b, out, prev)
        return out.add("mlp.fc2_rs", b.overlapped("g", s.feedforward, s.hidden), (prev,), recompute=b.full,
                       recommunicate=b.full)

    @staticmethod
    def _gelu(b: Block, out: BlockBuilder, prev: str) -> str:
        e = b.execution
        gelu = PointwiseShape.trusted(kind="gelu", elements=b.shape.feedforward * b.tokens // e.tensor_parallel,
                                      fused=e.fused_activation)
        return out.add("mlp.gelu", gelu, (prev,), recompute=b.full)


#: Core patterns by name (the pass's ``block`` option names them, in block order).
CORES: dict[str, CorePattern] = {core.name: core for core in (MultiHeadAttention(), GeluMLP())}


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
