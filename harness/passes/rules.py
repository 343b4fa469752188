"""Per-primitive workload derivation rules (the seed's rules, unit-tested).

Rules, with ``b`` bytes per element:

- linear ``Y[M,K] = X[M,N] W[N,K]``: forward = dgrad = wgrad = 2MNK; forward
  reads X, W and writes Y; dgrad reads W, dY and writes dX; wgrad reads X, dY
  and writes dW.
- batch matmul (both inputs activations): forward = 2BMNK, dgrad = 4BMNK
  (gradients for both inputs), no wgrad; dgrad reads dC and writes dA, dB.
- layer norm: 9 / 14 / 7 operations per element (forward / dgrad / wgrad),
  2 x hidden parameters; dgrad reads the weights and one tensor.
- softmax 5 / 8, GeLU 8 / 13, dropout 1 / 1 operations per element; the
  softmax and GeLU gradients read one tensor and write one; dropout keeps a
  one-byte mask per element (its stored activation), and its gradient buffer
  is accounted at mask size.
- residual: forward one operation per output element, dgrad one per input.
- fork: no forward work; dgrad sums ``users`` gradients.
- TP collective: local reduction ``elements x (p-1)/p`` on the reducing side
  (g forward, f backward); HBM traffic of reduce-scatter/all-gather stays on
  the task; identities move nothing.
- overlapped linear (a linear fused with its TP collective): the linear's
  operations on the local GEMM; forward reads X, W and writes Y; dgrad and
  wgrad touch the weight (gradient) and the kept activation and gradient
  buffers of the shape (the all-gather side keeps a tile of the gathered
  input, the reduce side a partial-output tile and its network buffer); the
  collective's local reduction is priced by the ConcretePlanIR's collective
  commands (:func:`reduction_operations`), not here.
- optimizer (Adam): 11 operations per weight-gradient element; touches the
  fp32 master copy (when the datatype is narrower) and two fp32 moments;
  sharded over DP with optimizer sharding. The state is counted once.

The gradient traffic of batch matmul, layer norm, softmax and GeLU and the
dropout gradient buffer follow Calculon 0.1.0's accounting rather than the
traffic-from-dependencies rule; each is a named rule in
:mod:`harness.calculon_compat` (the alternative there is the dependency form).
"""

from __future__ import annotations

import dataclasses

from harness import calculon_compat as compat
from harness.ir.distributed import (
    BatchMatmulShape,
    CollectiveShape,
    CrossEntropyShape,
    ForkShape,
    OverlappedLinearShape,
    LinearShape,
    NormShape,
    PointwiseShape,
    ResidualShape,
)
from harness.ir.portable import Capacity, Engine, Work

POINTWISE_OPERATIONS = {"softmax": (5, 8), "gelu": (8, 13), "dropout": (1, 1)}
#: Memory-tier-1 bytes the loss moves per logit, forward and backward: Megatron's vocabulary-parallel softmax
#: cross-entropy on fp16 logits, counted from its source (megatron/core/tensor_parallel/cross_entropy.py and the
#: GPT pipeline model's fp32 cast). Forward: the logits cast to fp32 (read 2, write 4), the max over the
#: vocabulary (read 4), the max subtracted (read 4, write 4), exp in place (read 4, write 4), the sum (read 4),
#: the division by it in place (read 4, write 4): 38. Backward: the stored softmax scaled by the loss gradient in
#: place (read 4, write 4), the fp32 gradient cast back to fp16 (read 4, write 2): 14. The target gathers and the
#: TP all-reduces of one value per token are left out (tokens, not logits).
LOSS_BYTES_PER_LOGIT = {"forward": (22, 16), "backward": (8, 6)}  # (read, written)
ADAM_OPERATIONS_PER_ELEMENT = 11
LAYER_NORM_OPERATIONS = (9, 14, 7)


@dataclasses.dataclass(frozen=True)
class PrimitiveFacts:
    """Facts of one primitive: four passes and the capacity it holds."""

    forward: Work
    activation_grad: Work
    weight_grad: Work
    optimizer: Work
    capacity: Capacity


def _work(operations: float, read: float, written: float, engine: Engine) -> Work:
    return Work.trusted(operations=operations, bytes_read=read, bytes_written=written, engine=engine)


def _optimizer(weights: int, moments: int, b: int, shards: int) -> Work:
    master = weights * 4 if b < 4 else 0
    return _work(weights / shards * ADAM_OPERATIONS_PER_ELEMENT, (master + moments * 4) / shards, 0, "vector")


def _capacity(b: int, shards: int, *, weights: int = 0, activation: float = 0, output: int = 0,
              activation_grad: float = 0, moments: int = 0) -> Capacity:
    master = weights * 4 if b < 4 else 0
    return Capacity.trusted(
        weight_bytes=weights * b, activation_bytes=activation, output_bytes=output * b,
        weight_grad_bytes=weights * b / shards, weight_grad_unsharded_bytes=weights * 4,
        activation_grad_bytes=activation_grad, optimizer_bytes=(master + moments * 4) / shards,
    )


_NONE = _work(0, 0, 0, "vector")
_NONE_MATRIX = _work(0, 0, 0, "matrix")


def linear(s: LinearShape, b: int, shards: int) -> PrimitiveFacts:
    ops = 2 * s.m * s.n * s.k
    x, w, y = s.m * s.n, s.n * s.k, s.m * s.k
    return PrimitiveFacts(
        forward=_work(ops, (x + w) * b, y * b, "matrix"),
        activation_grad=_work(ops, (w + y) * b, x * b, "matrix"),
        weight_grad=_work(ops, (x + y) * b, w * b, "matrix"),
        optimizer=_optimizer(w, 2 * w, b, shards),
        capacity=_capacity(b, shards, weights=w, activation=x * b, output=y, activation_grad=y * b, moments=2 * w),
    )


def batch_matmul(s: BatchMatmulShape, b: int, shards: int) -> PrimitiveFacts:
    ops = 2 * s.batch * s.m * s.n * s.k
    inputs, out = s.batch * (s.m * s.n + s.n * s.k), s.batch * s.m * s.k
    return PrimitiveFacts(
        forward=_work(ops, inputs * b, out * b, "matrix"),
        activation_grad=_work(2 * ops, compat.batch_matmul_gradient_read_bytes(inputs, out, b), inputs * b, "matrix"),
        weight_grad=_NONE_MATRIX,
        optimizer=_NONE,
        capacity=_capacity(b, shards, activation=inputs * b, output=out, activation_grad=out * b),
    )


def layer_norm(s: NormShape, b: int, shards: int) -> PrimitiveFacts:
    a, w = s.elements, 2 * s.hidden
    fw, dg, wg = LAYER_NORM_OPERATIONS
    return PrimitiveFacts(
        forward=_work(fw * a, (a + w) * b, a * b, "vector"),
        activation_grad=_work(dg * a, compat.layer_norm_gradient_read_bytes(a, w, b), a * b, "vector"),
        weight_grad=_work(wg * a, 2 * a * b, w * b, "vector"),
        optimizer=_optimizer(w, 2 * w, b, shards),
        capacity=_capacity(b, shards, weights=w, activation=a * b, output=a, activation_grad=a * b, moments=2 * w),
    )


def pointwise(s: PointwiseShape, b: int, shards: int) -> PrimitiveFacts:
    a = s.elements
    fw, dg = POINTWISE_OPERATIONS[s.kind]
    if s.kind == "dropout":
        mask = a  # one byte per element
        forward = _work(fw * a, a * b, a * b + mask, "vector")
        return PrimitiveFacts(
            forward=forward,
            activation_grad=_work(dg * a, a * b + mask, a * b, "vector"),
            weight_grad=_NONE, optimizer=_NONE,
            capacity=_capacity(b, shards, activation=mask, output=a,
                               activation_grad=compat.dropout_gradient_bytes(a, b)),
        )
    kept = 0 if s.fused else a
    return PrimitiveFacts(
        forward=_work(fw * a, a * b, a * b, "vector"),
        activation_grad=_work(dg * a, compat.pointwise_gradient_read_bytes(a, b), a * b, "vector"),
        weight_grad=_NONE, optimizer=_NONE,
        capacity=_capacity(b, shards, activation=kept * b, output=a, activation_grad=kept * b),
    )


def residual(s: ResidualShape, b: int, shards: int) -> PrimitiveFacts:
    inputs, out = s.elements_a + s.elements_b, max(s.elements_a, s.elements_b)
    return PrimitiveFacts(
        forward=_work(out, inputs * b, out * b, "vector"),
        activation_grad=_work(inputs, out * b, inputs * b, "vector"),
        weight_grad=_NONE, optimizer=_NONE,
        capacity=_capacity(b, shards, activation=inputs * b, output=out, activation_grad=out * b),
    )


def fork(s: ForkShape, b: int, shards: int) -> PrimitiveFacts:
    a = s.elements
    return PrimitiveFacts(
        forward=_NONE,
        activation_grad=_work(s.users * a, s.users * a * b, a * b, "vector"),
        weight_grad=_NONE, optimizer=_NONE,
        # Gradients of the users accumulate in one buffer owned by the users.
        capacity=_capacity(b, shards, activation=a * b, output=0, activation_grad=0),
    )


def tp_collective(s: CollectiveShape, b: int, shards: int) -> PrimitiveFacts:
    a, p = s.elements, s.participants
    reduction = a * (p - 1) / p
    moved = _work(0, a * b, a * b, "vector")
    if s.role == "f":
        forward = moved if s.sequence_sharded else _NONE
        backward = _work(reduction, a * b, a * b, "vector")
        kept = a * b / p if s.sequence_sharded else 0
        kept_grad = a * b / p if s.sequence_sharded else a * b
    else:
        forward = _work(reduction, a * b, a * b, "vector")
        backward = moved if s.sequence_sharded else _NONE
        kept = a * b / p if s.sequence_sharded else a * b
        kept_grad = a * b / p if s.sequence_sharded else 0
    return PrimitiveFacts(
        forward=forward, activation_grad=backward, weight_grad=_NONE, optimizer=_NONE,
        capacity=_capacity(b, shards, activation=kept, output=a, activation_grad=kept_grad),
    )


def overlapped_linear(s: OverlappedLinearShape, b: int, shards: int) -> PrimitiveFacts:
    ops = 2 * s.m * s.n * s.k
    x, w, y = s.m * s.n, s.n * s.k, s.m * s.k
    act, grad = s.activation_elements, s.activation_grad_elements
    return PrimitiveFacts(
        forward=_work(ops, (x + w) * b, y * b, "matrix"),
        activation_grad=_work(ops, (w + grad) * b, act * b, "matrix"),
        weight_grad=_work(ops, (act + grad) * b, w * b, "matrix"),
        optimizer=_optimizer(w, 2 * w, b, shards),
        capacity=_capacity(b, shards, weights=w, activation=act * b, output=y, activation_grad=grad * b,
                           moments=2 * w),
    )


#: Collectives that reduce: they carry local reduction work on the vector engine.
REDUCING = frozenset({"reduce_scatter", "all_reduce"})


def reduction_operations(collective: str, message_bytes: float, b: int, participants: int) -> float:
    """Local reduction of a TP collective: ``elements x (p-1)/p`` when it reduces, else 0."""
    if collective not in REDUCING:
        return 0.0
    return message_bytes / b * (participants - 1) / participants


def cross_entropy(s: CrossEntropyShape, b: int, shards: int) -> PrimitiveFacts:
    """The loss over ``tokens x vocabulary`` local logits: the softmax's operations per logit and
    :data:`LOSS_BYTES_PER_LOGIT` (the logits' datatype is the cast's source; everything after it is fp32, as
    Megatron computes it). It holds nothing the plan's memory figures count."""
    logits = s.tokens * s.vocabulary
    (f_read, f_written), (b_read, b_written) = LOSS_BYTES_PER_LOGIT["forward"], LOSS_BYTES_PER_LOGIT["backward"]
    forward_ops, backward_ops = POINTWISE_OPERATIONS["softmax"]
    return PrimitiveFacts(
        forward=_work(forward_ops * logits, f_read * logits, f_written * logits, "vector"),
        activation_grad=_work(backward_ops * logits, b_read * logits, b_written * logits, "vector"),
        weight_grad=_NONE, optimizer=_NONE, capacity=_capacity(b, shards),
    )


def context_exchange(s, b: int, shards: int) -> PrimitiveFacts:
    """The context-parallel K/V ring: its messages only (no local work; the received chunks are transient)."""
    return PrimitiveFacts(forward=_NONE, activation_grad=_NONE, weight_grad=_NONE, optimizer=_NONE,
                          capacity=_capacity(b, shards))


RULES = {
    "linear": linear,
    "batch_matmul": batch_matmul,
    "layer_norm": layer_norm,
    "softmax": pointwise,
    "dropout": pointwise,
    "gelu": pointwise,
    "residual": residual,
    "fork": fork,
    "tp_collective": tp_collective,
    "overlapped_linear": overlapped_linear,
    "cross_entropy": cross_entropy,
    "context_exchange": context_exchange,
}


#: Primitives with weights: the only ones whose facts depend on the optimizer shards.
WEIGHTED = frozenset({"linear", "layer_norm", "overlapped_linear"})

_FACTS: dict[tuple, PrimitiveFacts] = {}
FACTS_LIMIT = 8192


def derive(shape, bytes_per_element: int, optimizer_shards: int) -> PrimitiveFacts:
    """Apply the rule of ``shape.kind``.

    Memoized: the facts are a pure function of the shape's class and field
    values and the two integers, and immutable, so recompute clones and layouts
    that repeat a local shape share one set of facts. The optimizer shards only
    divide weight gradients and optimizer state, so a primitive without weights
    (not in :data:`WEIGHTED`) is derived with one shard: identical facts, shared
    across data-parallel layouts. The key is the field
    values (cheap to hash and compare, unlike a pydantic model's own
    ``__hash__`` / ``__eq__``); the memo is bounded.
    """
    shards = optimizer_shards if shape.kind in WEIGHTED else 1  # weightless facts do not depend on it
    key = (type(shape), *shape.__dict__.values(), bytes_per_element, shards)
    facts = _FACTS.get(key)
    if facts is None:
        if len(_FACTS) >= FACTS_LIMIT:
            _FACTS.clear()
        facts = _FACTS[key] = RULES[shape.kind](shape, bytes_per_element, shards)
    return facts


def clear_memo() -> None:
    """Forget the memoized facts (results never depend on them)."""
    _FACTS.clear()
