"""Pass ``transformer-distribute``: ModelIR -> DistributedTaskIR.

Lowers one Transformer block to the task DAG of one TP rank:

- decomposes the block into primitives: fork, layer norm, Q/K/V projections,
  QK^T batch matmul, softmax, probability dropout, PV batch matmul, output
  projection, dropout, residual; then fork, layer norm, MLP linears, GeLU,
  dropout, residual;
- inserts explicit TP collectives ``f`` (entering a TP region) and ``g``
  (leaving it) with their forward/backward collectives for base and edge
  blocks: ``ar`` all-reduces, ``rs_ag`` reduce-scatters/all-gathers (sequence
  parallelism), ``p2p_rs_ag`` all-reduces in base blocks and
  reduce-scatters/all-gathers in a chunk's edge block; TP = 1 has none;
- clones recomputation as a graph transformation: ``full`` clones all forward
  compute; ``attn_only`` clones QK^T -> softmax -> dropout;
- adds each recommunication (the sequence-parallel all-gather redo, or the
  collectives that full recomputation repeats) as its own task;
- with TP overlap (ring or pipe) each TP collective and its adjacent linear
  become one ``overlapped_linear`` task: the Q/K/V projections (one fused
  GEMM, multihead) or the query projection (multiquery, whose unsplit key and
  value projections follow a two-user fork of the gathered input) with the
  attention ``f``; the output projection with the attention ``g``; the first
  MLP linear with the MLP ``f``; the second with the MLP ``g``. Such a task
  is recomputed only under full recomputation, and recommunicates like the
  collective it absorbed (both clones exist under full recomputation).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from harness.ir.checks import layout_problems
from harness.ir.distributed import (
    BatchMatmulShape,
    CollectiveOp,
    OverlappedLinearShape,
    CollectiveShape,
    DistributedTaskIR,
    ForkShape,
    LinearShape,
    NormShape,
    PointwiseShape,
    ResidualShape,
    Retention,
    Task,
)
from harness.ir.model import ModelIR
from harness.passes.base import ModulePass

_RECOMPUTE = "recompute/"
_RECOMM = "recommunication/"


def collective_ops(role: str, split: bool) -> tuple[CollectiveOp | None, CollectiveOp | None]:
    """(forward, backward) collectives of an ``f`` or ``g`` task.

    Unsplit: f is identity forward / all-reduce backward; g is its conjugate.
    Split (sequence parallel): f all-gathers forward and reduce-scatters
    backward; g reduce-scatters forward and all-gathers backward.
    """
    if role == "f":
        return ("all_gather", "reduce_scatter") if split else (None, "all_reduce")
    return ("reduce_scatter", "all_gather") if split else ("all_reduce", None)


# Retention is interned; this cache only skips the keyword handling for its few flag combinations.
_retention = functools.cache(Retention.trusted)


@dataclasses.dataclass
class _BlockBuilder:
    """Accumulates forward tasks with their recompute/recomm flags."""

    tasks: list[tuple[Task, bool, bool]] = dataclasses.field(default_factory=list)

    def add(self, name: str, shape: Any, deps: tuple[str, ...] = (), *, recompute: bool = False,
            recommunicate: bool = False, **retention: bool) -> str:
        task = Task.trusted(name=name, phase="forward", clone_of=None, depends_on=deps, shape=shape,
                            retention=_retention(**retention))
        self.tasks.append((task, recompute, recommunicate))
        return name


@dataclasses.dataclass(frozen=True)
class TransformerDistribute(ModulePass[ModelIR, DistributedTaskIR]):
    """Lower a ModelIR to the local TP block DAG."""

    name = "transformer-distribute"

    def requires(self, ir: ModelIR) -> None:
        """The ModelIR satisfies the import rules (harness.ir.checks), whoever built it."""
        problems = layout_problems(ir.shape, ir.execution)
        if problems:
            field, message = problems[0]
            raise self.fail(f"{field}: {message}")

    def apply(self, ir: ModelIR) -> DistributedTaskIR:
        s, e = ir.shape, ir.execution
        tp = e.tensor_parallel
        tokens = e.microbatch * s.sequence_length
        full_act = tokens * s.hidden
        outside_act = (tokens // tp) * s.hidden if e.sequence_parallel else full_act
        local_heads = e.microbatch * s.attention_heads // tp
        scores = s.attention_heads // tp * s.sequence_length**2 * e.microbatch
        proj = s.attention_heads * s.head_size // tp
        kv_width = proj if e.attention == "multihead" else s.head_size
        full = e.recompute == "full"
        attn = e.recompute in ("full", "attn_only")
        redo_attn = attn or e.seq_par_ag_redo
        redo_mlp = full or e.seq_par_ag_redo

        base_split = e.tp_communication == "rs_ag"
        edge_split = e.tp_communication in ("rs_ag", "p2p_rs_ag")

        def collective(role: str) -> CollectiveShape | None:
            if tp == 1:
                return None
            bf, bb = collective_ops(role, base_split)
            ef, eb = collective_ops(role, edge_split)
            return CollectiveShape.trusted(role=role, elements=full_act, participants=tp,
                                           sequence_sharded=e.sequence_parallel,
                                           base_forward=bf, base_backward=bb, edge_forward=ef, edge_backward=eb)

        if e.tp_overlap != "none":
            return DistributedTaskIR.trusted(shape=s, execution=e,
                                             tasks=tuple(self._with_clones(self._overlapped_block(ir), e.training)))

        b = _BlockBuilder()
        prev = b.add("attn.fork", ForkShape.trusted(elements=outside_act, users=2), recompute=full)
        prev = b.add("attn.layer_norm", NormShape.trusted(elements=outside_act, hidden=s.hidden), (prev,),
                     recompute=full, activation_stored=False, activation_reused=True)
        f = collective("f")
        if f:
            prev = b.add("attn.tp_f", f, (prev,), recommunicate=redo_attn)
        qkv = b.add("attn.qkv_fork", ForkShape.trusted(elements=full_act, users=3), (prev,), recompute=redo_attn,
                    activation_stored=not redo_attn)
        reuse = dict(activation_stored=False, activation_reused=True)
        q = b.add("attn.query", LinearShape.trusted(m=tokens, n=s.hidden, k=proj), (qkv,), recompute=full, **reuse)
        k = b.add("attn.key", LinearShape.trusted(m=tokens, n=s.hidden, k=kv_width), (qkv,), recompute=full, **reuse)
        v = b.add("attn.value", LinearShape.trusted(m=tokens, n=s.hidden, k=kv_width), (qkv,), recompute=full, **reuse)
        prev = b.add("attn.qk_matmul", BatchMatmulShape.trusted(batch=local_heads, m=s.sequence_length,
                     n=s.head_size, k=s.sequence_length), (q, k), recompute=attn, output_stored=not attn)
        prev = b.add("attn.softmax", PointwiseShape.trusted(kind="softmax", elements=scores), (prev,),
                     recompute=attn, output_stored=not attn)
        prev = b.add("attn.probs_dropout", PointwiseShape.trusted(kind="dropout", elements=scores), (prev,),
                     recompute=attn, activation_stored=not attn)
        prev = b.add("attn.pv_matmul", BatchMatmulShape.trusted(batch=local_heads, m=s.sequence_length,
                     n=s.sequence_length, k=s.head_size), (prev, v), recompute=full)
        prev = b.add("attn.out_proj", LinearShape.trusted(m=tokens, n=proj, k=s.hidden), (prev,), recompute=full)
        g = collective("g")
        if g:
            prev = b.add("attn.tp_g", g, (prev,), recommunicate=full, activation_stored=False)
        prev = b.add("attn.dropout", PointwiseShape.trusted(kind="dropout", elements=outside_act), (prev,),
                     recompute=full)
        prev = b.add("attn.residual", ResidualShape.trusted(elements_a=outside_act, elements_b=outside_act),
                     (prev, "attn.fork"), recompute=full, **reuse)

        fork = prev = b.add("mlp.fork", ForkShape.trusted(elements=outside_act, users=2), (prev,), recompute=full)
        prev = b.add("mlp.layer_norm", NormShape.trusted(elements=outside_act, hidden=s.hidden), (prev,),
                     recompute=full, **reuse)
        f = collective("f")
        if f:
            prev = b.add("mlp.tp_f", f, (prev,), recommunicate=redo_mlp)
        prev = b.add("mlp.fc1", LinearShape.trusted(m=tokens, n=s.hidden, k=s.feedforward // tp), (prev,), recompute=full,
                     activation_stored=not redo_mlp)
        prev = b.add("mlp.gelu", PointwiseShape.trusted(kind="gelu", elements=s.feedforward * tokens // tp,
                     fused=e.fused_activation), (prev,), recompute=full)
        prev = b.add("mlp.fc2", LinearShape.trusted(m=tokens, n=s.feedforward // tp, k=s.hidden), (prev,), recompute=full)
        g = collective("g")
        if g:
            prev = b.add("mlp.tp_g", g, (prev,), recommunicate=full, activation_stored=False)
        prev = b.add("mlp.dropout", PointwiseShape.trusted(kind="dropout", elements=outside_act), (prev,),
                     recompute=full)
        b.add("mlp.residual", ResidualShape.trusted(elements_a=outside_act, elements_b=outside_act), (prev, fork),
              recompute=full, **reuse)

        return DistributedTaskIR.trusted(shape=s, execution=e, tasks=tuple(self._with_clones(b, e.training)))

    @staticmethod
    def _overlapped_block(ir: ModelIR) -> _BlockBuilder:
        """The block under TP overlap (see the module rules); TP > 1 by the layout rules."""
        s, e = ir.shape, ir.execution
        tp = e.tensor_parallel
        tokens = e.microbatch * s.sequence_length
        full_act = tokens * s.hidden
        outside_act = (tokens // tp) * s.hidden if e.sequence_parallel else full_act
        local_heads = e.microbatch * s.attention_heads // tp
        scores = s.attention_heads // tp * s.sequence_length**2 * e.microbatch
        heads_width = s.attention_heads * s.head_size
        full = e.recompute == "full"
        attn = e.recompute in ("full", "attn_only")
        redo_attn = attn or e.seq_par_ag_redo
        redo_mlp = full or e.seq_par_ag_redo
        split = e.tp_communication == "rs_ag"
        edge_split = e.tp_communication in ("rs_ag", "p2p_rs_ag")

        def overlapped(role: str, n: int, k: int) -> OverlappedLinearShape:
            m = tokens
            if role == "f":  # all-gather side: the output features are split
                k //= tp
                act, grad = (m * n // tp, m * k) if split else (m * n, 0)
                elements = m * n
            else:  # reduce side: the contraction is split
                n //= tp
                act, grad = (m * n, 2 * (m * k // tp)) if split else (0, 2 * m * k)
                elements = m * k
            bf, bb = collective_ops(role, split)
            ef, eb = collective_ops(role, edge_split)
            return OverlappedLinearShape.trusted(
                role=role, m=m, n=n, k=k, elements=elements, participants=tp, activation_elements=act,
                activation_grad_elements=grad, base_forward=bf, base_backward=bb, edge_forward=ef, edge_backward=eb)

        b = _BlockBuilder()
        reuse = dict(activation_stored=False, activation_reused=True)
        prev = b.add("attn.fork", ForkShape.trusted(elements=outside_act, users=2), recompute=full)
        prev = b.add("attn.layer_norm", NormShape.trusted(elements=outside_act, hidden=s.hidden), (prev,),
                     recompute=full, **reuse)
        if e.attention == "multihead":
            q = k = v = b.add("attn.qkv_ag", overlapped("f", s.hidden, 3 * heads_width), (prev,), recompute=full,
                              recommunicate=redo_attn)
        else:
            q = b.add("attn.query_ag", overlapped("f", s.hidden, heads_width), (prev,), recompute=full,
                      recommunicate=redo_attn)
            kv = b.add("attn.kv_fork", ForkShape.trusted(elements=full_act, users=2), (q,), recompute=redo_attn,
                       activation_stored=not redo_attn)
            k = b.add("attn.key", LinearShape.trusted(m=tokens, n=s.hidden, k=s.head_size), (kv,), recompute=full,
                      **reuse)
            v = b.add("attn.value", LinearShape.trusted(m=tokens, n=s.hidden, k=s.head_size), (kv,),
                      recompute=full, **reuse)
        prev = b.add("attn.qk_matmul", BatchMatmulShape.trusted(batch=local_heads, m=s.sequence_length,
                     n=s.head_size, k=s.sequence_length), tuple(dict.fromkeys((q, k))), recompute=attn,
                     output_stored=not attn)
        prev = b.add("attn.softmax", PointwiseShape.trusted(kind="softmax", elements=scores), (prev,),
                     recompute=attn, output_stored=not attn)
        prev = b.add("attn.probs_dropout", PointwiseShape.trusted(kind="dropout", elements=scores), (prev,),
                     recompute=attn, activation_stored=not attn)
        prev = b.add("attn.pv_matmul", BatchMatmulShape.trusted(batch=local_heads, m=s.sequence_length,
                     n=s.sequence_length, k=s.head_size), (prev, v), recompute=full)
        prev = b.add("attn.out_proj_rs", overlapped("g", heads_width, s.hidden), (prev,), recompute=full,
                     recommunicate=full)
        prev = b.add("attn.dropout", PointwiseShape.trusted(kind="dropout", elements=outside_act), (prev,),
                     recompute=full)
        prev = b.add("attn.residual", ResidualShape.trusted(elements_a=outside_act, elements_b=outside_act),
                     (prev, "attn.fork"), recompute=full, **reuse)
        fork = prev = b.add("mlp.fork", ForkShape.trusted(elements=outside_act, users=2), (prev,), recompute=full)
        prev = b.add("mlp.layer_norm", NormShape.trusted(elements=outside_act, hidden=s.hidden), (prev,),
                     recompute=full, **reuse)
        prev = b.add("mlp.fc1_ag", overlapped("f", s.hidden, s.feedforward), (prev,), recompute=full,
                     recommunicate=redo_mlp)
        prev = b.add("mlp.gelu", PointwiseShape.trusted(kind="gelu", elements=s.feedforward * tokens // tp,
                     fused=e.fused_activation), (prev,), recompute=full)
        prev = b.add("mlp.fc2_rs", overlapped("g", s.feedforward, s.hidden), (prev,), recompute=full,
                     recommunicate=full)
        prev = b.add("mlp.dropout", PointwiseShape.trusted(kind="dropout", elements=outside_act), (prev,),
                     recompute=full)
        b.add("mlp.residual", ResidualShape.trusted(elements_a=outside_act, elements_b=outside_act), (prev, fork),
              recompute=full, **reuse)
        return b

    @staticmethod
    def _with_clones(b: _BlockBuilder, training: bool) -> list[Task]:
        """Forward tasks, then recompute clones and recommunication tasks.

        A clone consumes the clones of its producers where they exist, so the
        recompute region is its own sub-DAG hanging off stored activations.
        """
        forward = [task for task, _, _ in b.tasks]
        if not training:
            return forward
        clones: list[Task] = []
        replaced: dict[str, str] = {}
        for task, recompute, recommunicate in b.tasks:
            deps = tuple(replaced.get(d, d) for d in task.depends_on)
            sends = isinstance(task.shape, (CollectiveShape, OverlappedLinearShape)) and bool(
                task.shape.base_forward or task.shape.edge_forward)
            if recompute and recommunicate and sends and isinstance(task.shape, OverlappedLinearShape):
                # An overlapped GEMM is recomputed and its collective re-sent: both clones.
                clones.append(task.trusted_replace(name=_RECOMM + task.name, phase="recommunication",
                                                   clone_of=task.name, depends_on=deps))
            if recompute:
                clone = task.trusted_replace(name=_RECOMPUTE + task.name, phase="recompute", clone_of=task.name,
                                             depends_on=deps)
            elif recommunicate and sends:
                clone = task.trusted_replace(name=_RECOMM + task.name, phase="recommunication",
                                             clone_of=task.name, depends_on=deps)
            else:
                continue
            replaced[task.name] = clone.name
            clones.append(clone)
        return forward + clones

    def ensures(self, ir: DistributedTaskIR) -> None:
        seen: dict[str, Task] = {}
        for task in ir.tasks:
            if task.name in seen:
                raise self.fail(f"duplicate task {task.name}")
            missing = [d for d in task.depends_on if d not in seen]
            if missing:
                raise self.fail(f"task {task.name} depends on unknown or later task(s) {missing}")
            if task.phase != "forward":
                original = seen.get(task.clone_of or "")
                if original is None or original.phase != "forward" or (
                        original.shape is not task.shape and original.shape != task.shape):
                    raise self.fail(f"clone {task.name} does not repeat a forward task's shape")
            if task.phase == "recommunication" and not isinstance(task.shape, (CollectiveShape,
                                                                               OverlappedLinearShape)):
                raise self.fail(f"recommunication task {task.name} is not a collective")
            seen[task.name] = task
