"""Pass ``transformer-distribute``: ModelIR -> DistributedTaskIR.

Lowers one Transformer block to the task DAG of one TP rank:

- decomposes the block into primitives, one sub-graph pattern after the other
  (:mod:`harness.passes.patterns`; option ``block``, default ``attention,mlp``,
  names the slots): each is a residual sub-block (fork, norm, ``f``, its
  core, ``g``, dropout, residual) around the core the ModelIR selects from
  the slot's registered patterns (attention: Q/K/V projections, optional
  QK-norm and RoPE, the score kernel, output projection; MLP: linears and
  the activation); the norm and the attention kernel are selected the same
  way;
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
  collective it absorbed (both clones exist under full recomputation);
- a training model that states its vocabulary also gets the output layer
  and loss as ``output_tasks`` (:mod:`harness.passes.output_layer`), outside
  the block.
"""

from __future__ import annotations

import dataclasses

from harness.ir.checks import layout_problems
from harness.ir.distributed import CollectiveShape, DistributedTaskIR, OverlappedLinearShape, Task
from harness.ir.model import ModelIR
from harness.passes.base import ModulePass
from harness.passes.precision import with_precision
from harness.passes.output_layer import output_tasks
from harness.passes.patterns import CORES, NORMS, Block, BlockBuilder, ResidualSubBlock, select, unpriceable, with_clones


@dataclasses.dataclass(frozen=True)
class TransformerDistribute(ModulePass[ModelIR, DistributedTaskIR]):
    """Lower a ModelIR to the local TP block DAG."""

    name = "transformer-distribute"

    #: The block's slots, in order, each a residual sub-block around the core pattern the ModelIR selects from
    #: ``patterns.CORES[slot]``.
    block: tuple[str, ...] = ("attention", "mlp")

    def check_options(self) -> None:
        unknown = [name for name in self.block if name not in CORES]
        if unknown or not self.block:
            raise self.fail(f"option block: {list(self.block)} must name core slots of {sorted(CORES)}")

    def requires(self, ir: ModelIR) -> None:
        """The ModelIR satisfies the import rules (harness.ir.checks), whoever built it, and the registered
        patterns lower every part of it (:func:`harness.passes.patterns.unpriceable`)."""
        problems = layout_problems(ir.shape, ir.execution) + unpriceable(ir.shape, ir.execution, self.block)
        if problems:
            field, message = problems[0]
            raise self.fail(f"{field}: {message}")

    def apply(self, ir: ModelIR) -> DistributedTaskIR:
        block, out = Block.of(ir), BlockBuilder()
        s, e = ir.shape, ir.execution
        norm = select(NORMS, s, e, "norm")
        prev = None
        for slot in self.block:
            prev = ResidualSubBlock(select(CORES[slot], s, e, slot), norm).emit(block, out, prev)
        vocabulary = ir.shape.vocabulary
        head = output_tasks(ir.shape, ir.execution, vocabulary) if vocabulary and ir.execution.training else None
        out.tasks = with_precision(out.tasks, e.precision)  # quantized linears (harness.passes.precision)
        return DistributedTaskIR.trusted(shape=ir.shape, execution=ir.execution,
                                         tasks=tuple(with_clones(out, ir.execution.training)), output_tasks=head)

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
        for task in ir.output_tasks or ():
            if task.name in seen:
                raise self.fail(f"duplicate task {task.name}")
            if task.phase != "forward" or any(d not in seen for d in task.depends_on):
                raise self.fail(f"output task {task.name} is not a forward task depending on earlier output tasks")
            seen[task.name] = task
