"""Per-primitive derivation rules (the seed's rules), hand-computed."""

from __future__ import annotations

import pytest

from harness.ir.distributed import (
    BatchMatmulShape,
    CollectiveShape,
    ForkShape,
    LinearShape,
    NormShape,
    PointwiseShape,
    ResidualShape,
)
from harness.passes.rules import derive

B = 2  # float16


def test_linear_forward_dgrad_wgrad_are_each_2mnk_and_traffic_follows_dependencies():
    f = derive(LinearShape(m=4, n=3, k=5), B, 1)
    assert f.forward.operations == f.activation_grad.operations == f.weight_grad.operations == 2 * 4 * 3 * 5
    x, w, y = 4 * 3, 3 * 5, 4 * 5
    assert (f.forward.bytes_read, f.forward.bytes_written) == ((x + w) * B, y * B)  # reads X, W; writes Y
    assert (f.activation_grad.bytes_read, f.activation_grad.bytes_written) == ((w + y) * B, x * B)  # W, dY -> dX
    assert (f.weight_grad.bytes_read, f.weight_grad.bytes_written) == ((x + y) * B, w * B)  # X, dY -> dW
    assert f.forward.engine == "matrix"
    assert f.capacity.weight_bytes == w * B and f.capacity.weight_grad_unsharded_bytes == w * 4


def test_batch_matmul_dgrad_is_twice_forward_and_has_no_wgrad():
    f = derive(BatchMatmulShape(batch=3, m=4, n=5, k=6), B, 1)
    assert f.forward.operations == 2 * 3 * 4 * 5 * 6
    assert f.activation_grad.operations == 2 * f.forward.operations
    assert f.weight_grad.operations == 0 and f.weight_grad.bytes_accessed == 0
    assert f.capacity.weight_bytes == 0 and f.optimizer.operations == 0


def test_layer_norm_declared_counts_and_parameters():
    f = derive(NormShape(elements=100, hidden=10), B, 1)
    assert (f.forward.operations, f.activation_grad.operations, f.weight_grad.operations) == (900, 1400, 700)
    assert f.capacity.weight_bytes == 20 * B
    # Adam: 11 ops per gradient element; fp32 master copy + two fp32 moments.
    assert f.optimizer.operations == 20 * 11
    assert f.optimizer.bytes_accessed == 20 * 4 + 40 * 4


@pytest.mark.parametrize("kind,fw,dg", [("softmax", 5, 8), ("gelu", 8, 13), ("dropout", 1, 1)])
def test_pointwise_counts(kind, fw, dg):
    f = derive(PointwiseShape(kind=kind, elements=1000), B, 1)
    assert (f.forward.operations, f.activation_grad.operations) == (fw * 1000, dg * 1000)
    assert f.forward.engine == "vector"


def test_dropout_keeps_a_one_byte_mask():
    f = derive(PointwiseShape(kind="dropout", elements=1000), B, 1)
    assert f.forward.bytes_written == 1000 * B + 1000
    assert f.capacity.activation_bytes == 1000


def test_fused_gelu_keeps_no_activation():
    assert derive(PointwiseShape(kind="gelu", elements=10, fused=True), B, 1).capacity.activation_bytes == 0
    assert derive(PointwiseShape(kind="gelu", elements=10), B, 1).capacity.activation_bytes == 10 * B


def test_residual_and_fork():
    r = derive(ResidualShape(elements_a=10, elements_b=10), B, 1)
    assert (r.forward.operations, r.activation_grad.operations) == (10, 20)
    k = derive(ForkShape(elements=10, users=3), B, 1)
    assert k.forward.operations == 0 and k.forward.bytes_accessed == 0
    assert k.activation_grad.operations == 30 and k.activation_grad.bytes_accessed == 10 * B * 4


def _collective(role, split):
    ops = {("f", False): (None, "all_reduce"), ("g", False): ("all_reduce", None),
           ("f", True): ("all_gather", "reduce_scatter"), ("g", True): ("reduce_scatter", "all_gather")}[(role, split)]
    return CollectiveShape(role=role, elements=800, participants=8, sequence_sharded=split,
                           base_forward=ops[0], base_backward=ops[1], edge_forward=ops[0], edge_backward=ops[1])


def test_all_reduce_collectives_reduce_locally_on_the_reducing_side():
    f, g = derive(_collective("f", False), B, 1), derive(_collective("g", False), B, 1)
    assert f.forward.bytes_accessed == 0  # identity
    assert f.activation_grad.operations == 800 * 7 / 8
    assert g.forward.operations == 800 * 7 / 8 and g.activation_grad.bytes_accessed == 0


def test_sequence_parallel_collectives_keep_a_shard():
    f = derive(_collective("f", True), B, 1)
    assert f.forward.bytes_accessed == 2 * 800 * B  # the all-gather's copy stays on the task
    assert f.capacity.activation_bytes == 800 * B / 8


def test_optimizer_sharding_divides_state_and_step():
    whole, sharded = derive(LinearShape(m=2, n=4, k=4), B, 1), derive(LinearShape(m=2, n=4, k=4), B, 4)
    assert sharded.optimizer.operations == whole.optimizer.operations / 4
    assert sharded.capacity.optimizer_bytes == whole.capacity.optimizer_bytes / 4
    assert sharded.capacity.weight_grad_bytes == whole.capacity.weight_grad_bytes / 4
