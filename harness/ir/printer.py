"""Readable text of each IR (the canonical form is the JSON of ``canonical()``).

The text view is for people; it shows every task with its facts and ends
with the digest so a reader can match it to reports and checkpoints.
"""

from __future__ import annotations

from harness.ir.base import Artifact
from harness.ir.concrete import ConcretePlanIR
from harness.ir.distributed import DistributedTaskIR
from harness.ir.model import ModelIR
from harness.ir.portable import MESSAGE_SLOTS, PASSES, PortablePlanIR


def _fields(model) -> str:
    data = model.model_dump(exclude={"kind"})
    return " ".join(f"{k}={v}" for k, v in data.items() if v is not None)


def render_model(ir: ModelIR) -> list[str]:
    return [f"{ir.dialect}", f"  shape: {_fields(ir.shape)}",
            f"  execution: {_fields(ir.execution.model_copy(update={}))}"]


#: Shapes whose ``m``, ``n``, ``k`` are rows, contraction width and columns (the IR's field names, kept for its
#: digests); the text writes them in the conventional GEMM notation M x K . K x N, K being the reduction width.
GEMM_KINDS = frozenset({"linear", "batch_matmul", "overlapped_linear"})


def _shape_text(shape) -> str:
    """A task shape's fields; a GEMM's as ``M x K . K x N`` (rows x reduction . reduction x columns) first."""
    if shape.kind not in GEMM_KINDS:
        return _fields(shape)
    rest = {k: v for k, v in shape.model_dump(exclude={"kind", "m", "n", "k"}).items() if v is not None}
    gemm = f"{shape.m} x {shape.n} . {shape.n} x {shape.k}"
    return " ".join([gemm, *(f"{k}={v}" for k, v in rest.items())])


def render_distributed(ir: DistributedTaskIR) -> list[str]:
    lines = [f"distributed block of one TP rank: {len(ir.tasks)} tasks (GEMMs as M x K . K x N: rows x reduction "
             ". reduction x columns)"]
    for t in ir.tasks:
        deps = ", ".join(t.depends_on) or "-"
        lines.append(f"  %{t.name} = {t.shape.kind}[{t.phase}]({deps}) {{{_shape_text(t.shape)}}}")
    if ir.output_tasks:
        lines.append(_output_heading(ir.output_tasks[0].shape.kind))
        for t in ir.output_tasks:
            deps = ", ".join(t.depends_on) or "-"
            lines.append(f"  %{t.name} = {t.shape.kind}[{t.phase}]({deps}) {{{_shape_text(t.shape)}}}")
    return lines


def _output_heading(first_kind: str) -> str:
    if first_kind == "embedding":
        return "embedding lookup (first stage) and output layer (last stage), once per microbatch:"
    return "output layer, once per microbatch on the last stage:"


def _num(x: float) -> str:
    return f"{x:.6g}"


def render_portable(ir: PortablePlanIR) -> list[str]:
    s = ir.schedule
    lines = [f"portable plan: {ir.datatype} ({ir.bytes_per_element} B/element), {ir.processors} processors",
             f"  schedule: {_fields(s)}"]
    output = ir.output_tasks or ()
    for t in ir.tasks + output:
        if output and t is output[0]:
            lines.append("  " + _output_heading(t.primitive))
        lines.append(f"  %{t.name} = {t.primitive}[{t.phase}]")
        for name in PASSES:
            w = getattr(t, name)
            if w.operations or w.bytes_read or w.bytes_written:
                lines.append(f"      {name}: ops={_num(w.operations)} read={_num(w.bytes_read)}B "
                             f"written={_num(w.bytes_written)}B engine={w.engine}")
        messages = t.messages
        if messages:
            for slot in MESSAGE_SLOTS:
                m = getattr(messages, slot)
                if m:
                    lines.append(f"      {slot}: {m.collective} {_num(m.message_bytes)}B x{m.participants} "
                                 f"tier {m.network_tier}")
            if messages.group is not None:  # absent: the tensor group
                lines.append(f"      group: {' x '.join(messages.group)}")
            if messages.ring_steps is not None:
                lines.append(f"      ring: {messages.ring_steps} steps")
            if messages.hides_behind:
                lines.append(f"      hides behind: {', '.join(messages.hides_behind)}")
    for label, m in (("pipeline forward", ir.pipeline.forward), ("pipeline backward", ir.pipeline.backward)):
        if m:
            lines.append(f"  {label}: p2p {_num(m.message_bytes)}B tier {m.network_tier}")
    if ir.data_parallel:
        for m in ir.data_parallel.messages:
            lines.append(f"  data parallel: {m.collective} {_num(m.message_bytes)}B x{m.participants} tier {m.network_tier}")
    v = ir.vocabulary_weights
    if v is not None:
        c = v.capacity
        lines.append(f"  vocabulary matrices on the first stage: weights={_num(c.weight_bytes)}B "
                     f"weight_grad={_num(c.weight_grad_bytes)}B optimizer={_num(c.optimizer_bytes)}B")
        for m in (*v.gradient_messages, *((v.embedding_group,) if v.embedding_group else ())):
            lines.append(f"    once per iteration: {m.collective} {_num(m.message_bytes)}B x{m.participants} "
                         f"tier {m.network_tier}")
    return lines


def render_concrete(ir: ConcretePlanIR) -> list[str]:
    """Options, queues, every program's commands (``%name = kind@queue[component] <- deps``, with the tile,
    phase and bytes they carry), buffers by tier; the plan's tasks are those of the PortablePlanIR."""
    o = ir.options
    offload = ",".join(k for k in ("weights", "activations", "optimizer") if getattr(o.offload, k)) or "none"
    lines = [f"concrete plan: {ir.datatype} ({ir.bytes_per_element} B/element), {len(ir.tasks)} plan tasks",
             f"  options: tp_overlap={o.tp_overlap} dp_overlap={o.dp_overlap} offload={offload} tiles={ir.tp_tiles}"
             + (" expert_overlap=True" if o.expert_overlap else ""),
             f"  schedule: {_fields(ir.schedule)}",
             "  queues: " + ", ".join(q.name + (f" ({'+'.join(q.dimensions)})" if q.dimensions else "")
                                      for q in ir.queues),
             "  queue_of: " + " ".join(f"{k}={v}" for k, v in sorted(ir.queue_of.items()))]
    for program in ir.programs:
        lines.append(f"  program {program.kind} [{program.block}]: {len(program.commands)} commands")
        for c in program.commands:
            what = []
            if c.tiles > 1:
                what.append(f"tile {c.tile}/{c.tiles}")
            if c.phase != "whole":
                what.append(c.phase)
            if c.message is not None:
                m = c.message
                what.append(f"{m.collective} {_num(m.message_bytes)}B x{m.participants}")
            if c.reduction_operations:
                what.append(f"reduce {_num(c.reduction_operations)} ops")
            if c.transfer_bytes:
                what.append(f"{_num(c.transfer_bytes)}B")
            deps = ", ".join(c.depends_on) or "-"
            lines.append(f"    %{c.name} = {c.kind}@{c.queue}[{c.component}] <- {deps}"
                         + (f" {{{'; '.join(what)}}}" if what else ""))
    for b in ir.buffers:
        lines.append(f"  buffer {b.name}: {_num(b.total_bytes)}B tier1={_num(b.tier1_bytes)}B "
                     f"tier2={_num(b.tier2_bytes)}B" + (" offloaded" if b.offloaded else ""))
    lines.append(f"  memory: tier1={_num(ir.tier1_total_bytes)}B tier2={_num(ir.tier2_total_bytes)}B")
    return lines


def render(ir: Artifact) -> str:
    if isinstance(ir, ModelIR):
        lines = render_model(ir)
    elif isinstance(ir, DistributedTaskIR):
        lines = render_distributed(ir)
    elif isinstance(ir, PortablePlanIR):
        lines = render_portable(ir)
    elif isinstance(ir, ConcretePlanIR):
        lines = render_concrete(ir)
    else:
        raise TypeError(type(ir).__name__)
    lines.append(f"// {ir.SCHEMA_NAME} v{ir.SCHEMA_VERSION} sha256:{ir.digest()}")
    return "\n".join(lines)
