"""Workload metrics read off a PortablePlanIR (per block, per microbatch).

The 19 workload metrics: operations and bytes of the five kinds of work
(forward, activation gradient, weight gradient, explicit recompute,
optimizer), TP message bytes (forward / backward / recommunication, base and
edge block), pipeline boundary bytes (forward / backward) and data-parallel
bytes; plus the eight per-block capacity figures.

Recompute is the explicit sum over recompute clones, not a running prefix.
"""

from __future__ import annotations

from pydantic import Field

from harness.ir.base import Frozen
from harness.ir.portable import PortablePlanIR
from harness.schedule.memory import BlockMemory

WORK_KINDS = ("forward", "activation_grad", "weight_grad", "recompute", "optimizer")


class WorkloadMetrics(Frozen):
    """Per block, per microbatch (the optimizer: per block) workload facts."""

    forward_flops: float = Field(description="Forward operations, TP reductions included.")
    activation_grad_flops: float = Field(description="Activation-gradient operations.")
    weight_grad_flops: float = Field(description="Weight-gradient operations.")
    recompute_flops: float = Field(description="Operations of the recompute clones.")
    optimizer_flops: float = Field(description="Optimizer-step operations.")
    forward_bytes: float = Field(description="Forward bytes read + written.")
    activation_grad_bytes: float = Field(description="Activation-gradient bytes read + written.")
    weight_grad_bytes: float = Field(description="Weight-gradient bytes read + written.")
    recompute_bytes: float = Field(description="Recompute-clone bytes read + written.")
    optimizer_bytes: float = Field(description="Optimizer-state bytes touched.")
    tp_forward_base_bytes: float = Field(description="TP forward message bytes, base block.")
    tp_forward_edge_bytes: float = Field(description="TP forward message bytes, edge block.")
    tp_backward_base_bytes: float = Field(description="TP backward message bytes, base block.")
    tp_backward_edge_bytes: float = Field(description="TP backward message bytes, edge block.")
    recomm_base_bytes: float = Field(description="Recommunication message bytes, base block.")
    recomm_edge_bytes: float = Field(description="Recommunication message bytes, edge block.")
    pp_forward_bytes: float = Field(description="Pipeline boundary message, forward.")
    pp_backward_bytes: float = Field(description="Pipeline boundary message, backward.")
    dp_bytes: float = Field(description="Data-parallel gradient message of one block.")
    block_weight_bytes: float = Field(description="Capacity: weights of one block.")
    block_activation_working_bytes: float = Field(description="Capacity: working activations of one block.")
    block_activation_storage_bytes: float = Field(description="Capacity: stored activations of one block.")
    block_activation_checkpoint_bytes: float = Field(description="Capacity: checkpoint of one block (full recompute).")
    block_weight_grad_bytes: float = Field(description="Capacity: sharded weight gradient of one block.")
    block_weight_grad_unsharded_bytes: float = Field(description="Capacity: fp32 weight gradient of one block.")
    block_activation_grad_bytes: float = Field(description="Capacity: activation gradients of one block.")
    block_optimizer_bytes: float = Field(description="Capacity: optimizer state of one block.")


def workload_metrics(plan: PortablePlanIR, memory: BlockMemory) -> WorkloadMetrics:
    flops = dict.fromkeys(WORK_KINDS, 0.0)
    nbytes = dict.fromkeys(WORK_KINDS, 0.0)
    msg = dict.fromkeys(("forward_base", "forward_edge", "backward_base", "backward_edge",
                         "recomm_base", "recomm_edge"), 0.0)
    for task in plan.tasks:
        if task.phase == "forward":
            for kind in ("forward", "activation_grad", "weight_grad", "optimizer"):
                work = getattr(task, kind)
                flops[kind] += work.operations
                nbytes[kind] += work.bytes_read + work.bytes_written
        elif task.phase == "recompute":
            flops["recompute"] += task.forward.operations
            nbytes["recompute"] += task.forward.bytes_read + task.forward.bytes_written
        m = task.messages
        if m is None:
            continue
        slots = (("recomm_base", m.forward_base), ("recomm_edge", m.forward_edge)) if task.phase == "recommunication" \
            else (("forward_base", m.forward_base), ("forward_edge", m.forward_edge),
                  ("backward_base", m.backward_base), ("backward_edge", m.backward_edge))
        for key, message in slots:
            if message is not None:
                msg[key] += message.message_bytes
    p = plan.pipeline
    return WorkloadMetrics(
        forward_flops=flops["forward"], activation_grad_flops=flops["activation_grad"],
        weight_grad_flops=flops["weight_grad"], recompute_flops=flops["recompute"],
        optimizer_flops=flops["optimizer"],
        forward_bytes=nbytes["forward"], activation_grad_bytes=nbytes["activation_grad"],
        weight_grad_bytes=nbytes["weight_grad"], recompute_bytes=nbytes["recompute"],
        optimizer_bytes=nbytes["optimizer"],
        tp_forward_base_bytes=msg["forward_base"], tp_forward_edge_bytes=msg["forward_edge"],
        tp_backward_base_bytes=msg["backward_base"], tp_backward_edge_bytes=msg["backward_edge"],
        recomm_base_bytes=msg["recomm_base"], recomm_edge_bytes=msg["recomm_edge"],
        pp_forward_bytes=p.forward.message_bytes if p.forward else 0.0,
        pp_backward_bytes=p.backward.message_bytes if p.backward else 0.0,
        dp_bytes=plan.data_parallel.gradient_bytes if plan.data_parallel else 0.0,
        block_weight_bytes=memory.weight_bytes,
        block_activation_working_bytes=memory.activation_working_bytes,
        block_activation_storage_bytes=memory.activation_storage_bytes,
        block_activation_checkpoint_bytes=memory.activation_checkpoint_bytes,
        block_weight_grad_bytes=memory.weight_grad_bytes,
        block_weight_grad_unsharded_bytes=memory.weight_grad_unsharded_bytes,
        block_activation_grad_bytes=memory.activation_grad_bytes,
        block_optimizer_bytes=memory.optimizer_bytes,
    )
