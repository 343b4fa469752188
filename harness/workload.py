"""Workload metrics read off a PortablePlanIR (per block, per microbatch).

The 19 workload metrics: operations and bytes of the five kinds of work
(forward, activation gradient, weight gradient, explicit recompute,
optimizer), TP message bytes (forward / backward / recommunication, base and
edge block), pipeline boundary bytes (forward / backward) and data-parallel
bytes; plus the eight per-block capacity figures.

Recompute is the explicit sum over recompute clones, not a running prefix.
"""


from pydantic import Field

from harness.ir.base import Frozen
from harness.ir.distributed import DistributedTaskIR
from harness.ir.portable import PortablePlanIR
from harness.passes.rules import matrix_operations
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
    """The metrics of one plan; every sum runs in task order (one accumulator per metric)."""
    fw_ops = ag_ops = wg_ops = re_ops = opt_ops = 0.0
    fw_b = ag_b = wg_b = re_b = opt_b = 0.0
    tp_fb = tp_fe = tp_bb = tp_be = recomm_b = recomm_e = 0.0
    for task in plan.tasks:
        phase = task.phase
        if phase == "forward":
            w = task.forward
            fw_ops += w.operations
            fw_b += w.bytes_read + w.bytes_written
            w = task.activation_grad
            ag_ops += w.operations
            ag_b += w.bytes_read + w.bytes_written
            w = task.weight_grad
            wg_ops += w.operations
            wg_b += w.bytes_read + w.bytes_written
            w = task.optimizer
            opt_ops += w.operations
            opt_b += w.bytes_read + w.bytes_written
        elif phase == "recompute":
            w = task.forward
            re_ops += w.operations
            re_b += w.bytes_read + w.bytes_written
        m = task.messages
        if m is None or phase == "recompute":  # a recomputed overlapped GEMM's messages are its recommunication
            continue
        if phase == "recommunication":
            if m.forward_base is not None:
                recomm_b += m.forward_base.message_bytes
            if m.forward_edge is not None:
                recomm_e += m.forward_edge.message_bytes
            continue
        if m.forward_base is not None:
            tp_fb += m.forward_base.message_bytes
        if m.forward_edge is not None:
            tp_fe += m.forward_edge.message_bytes
        if m.backward_base is not None:
            tp_bb += m.backward_base.message_bytes
        if m.backward_edge is not None:
            tp_be += m.backward_edge.message_bytes
    p = plan.pipeline
    return WorkloadMetrics(
        forward_flops=fw_ops, activation_grad_flops=ag_ops, weight_grad_flops=wg_ops, recompute_flops=re_ops,
        optimizer_flops=opt_ops,
        forward_bytes=fw_b, activation_grad_bytes=ag_b, weight_grad_bytes=wg_b, recompute_bytes=re_b,
        optimizer_bytes=opt_b,
        tp_forward_base_bytes=tp_fb, tp_forward_edge_bytes=tp_fe, tp_backward_base_bytes=tp_bb,
        tp_backward_edge_bytes=tp_be, recomm_base_bytes=recomm_b, recomm_edge_bytes=recomm_e,
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


class MatrixFlopsPerBlock(Frozen):
    """Matrix operations of one block on one processor for one microbatch, in the FLOP oracle's convention
    (:func:`harness.passes.rules.matrix_operations`): forward + activation gradient + weight gradient, no
    recomputation, the attention products over the full s x s scores. The executed work of a causal flash
    kernel (fewer tiles, scores recomputed) is what the plan prices; this figure is kept apart from it."""

    linear: float = Field(description="Linear layers (aten.mm / aten.addmm), FLOPs.")
    attention: float = Field(description="Attention score products QK^T and PV (aten.bmm), FLOPs.")


def matrix_flops_per_block(distributed: DistributedTaskIR) -> MatrixFlopsPerBlock:
    """The convention's figures summed over the block's forward tasks (clones excluded), in task order."""
    sums = {"linear": 0.0, "attention": 0.0}
    for task in distributed.tasks:
        if task.phase == "forward":
            found = matrix_operations(task.shape)
            if found is not None:
                sums[found[0]] += found[1]
    return MatrixFlopsPerBlock(**sums)
