"""Per-primitive workload derivation rules (the seed's rules, unit-tested).

Rules, with ``b`` bytes per element:

- linear ``Y[M,K] = X[M,N] W[N,K]``: forward = dgrad = wgrad = 2MNK; forward
  reads X, W and writes Y; dgrad reads W, dY and writes dX; wgrad reads X, dY
  and writes dW.
- batch matmul (both inputs activations): forward = 2BMNK, dgrad = 4BMNK
  (gradients for both inputs), no wgrad; dgrad reads dC and writes dA, dB.
- layer norm: 9 / 14 / 7 operations per element (forward / dgrad / wgrad),
  2 x hidden parameters; dgrad reads the weights and one tensor.
- linear (or overlapped linear) with a bias (``bias``): k more parameters
  (weights, gradient, optimizer state); the forward reads them and the
  weight gradient writes them (the activation gradient does not touch them); the add and the bias gradient (a column sum of dY) are fused in the
  GEMM epilogues and add no operations (the matrix work stays 2MNK).
- RMSNorm (``rms_norm``): 4 / 7 / 3 operations per element (forward: square,
  sum, scale, gain; dgrad: g dY, x-hat, their product, its row sum, x-hat
  times the mean, subtract, scale; wgrad: x-hat, times dY, sum), hidden
  parameters; traffic from dependencies (dgrad reads X, dY and the gain).
- softmax 5 / 8, GeLU 8 / 13, dropout 1 / 1 operations per element; the
  softmax and GeLU gradients read one tensor and write one; dropout keeps a
  one-byte mask per element (its stored activation), and its gradient buffer
  is accounted at mask size.
- squared ReLU 2 / 3, SwiGLU 6 / 16, GeGLU 9 / 23, RoPE 3 / 3 operations per
  output element (SwiGLU: sigmoid 4, times the gate, times up; its gradient
  recomputes silu and forms both input gradients; GeGLU: GeLU's 8 / 13 plus
  the product with up; RoPE: x cos + rotate(x) sin); traffic from
  dependencies: a gated activation reads its two inputs (2 x elements) and
  dY and writes two input gradients; RoPE keeps no activation (its gradient
  is the inverse rotation of dY; the cos/sin tables, sequence x head_size,
  are not counted).
- embedding lookup: see :func:`embedding` (a gather, its dense weight gradient).
- flash attention: see :func:`flash_attention` (tiles executed, the
  FlashAttention-2 backward, Q/K/V/O/dO/log-sum-exp traffic).
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
- router (a MoE block's router GEMM): the linear rule, never quantized.
- top-k (router scores): per score, the score function's operations (softmax 5 / 8, sigmoid 4 / 3, forward
  / gradient) plus ``top_k`` compares forward (k passes of a max over the experts); forward reads the scores
  and writes the top_k probabilities and their int32 indices; the gradient reads the scores and the top_k
  probability gradients and writes the score gradient; it keeps its scores.
- permute: a copy of each token to its ``copies`` expert slots (no operations; reads tokens x hidden, writes
  copies x that); its gradient sums the copies back (copies x tokens x hidden additions). It keeps nothing.
  unpermute: the weighted sum of each token's copies (2 operations per copy element: multiply, add; reads the
  copies and the probabilities, writes tokens x hidden); its gradient scatters dY weighted back to the copies
  (the same operations) and the probability gradients (a dot product per copy: 2 per copy element); it keeps
  its copies.
- grouped linear (the local experts' grouped GEMM): ``groups`` times one expert's linear facts (quantized by
  its recipe like a linear); each pass's ``gemm_operations`` is one expert's GEMM, at whose size the pricer
  reads the operation-size efficiency (not at the total).
- expert collectives (all-to-all, expert-tensor all-gather / reduce-scatter, the all-gather dispatcher's
  collectives): their messages only, except the local reduction of a reduce-scatter (its buffer x (p-1)/p
  additions, as a TP collective's); they keep nothing.
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

from harness import session
from harness import calculon_compat as compat
from harness.passes import precision
from harness.ir.distributed import (
    BatchMatmulShape,
    CollectiveShape,
    CrossEntropyShape,
    EmbeddingShape,
    FlashAttentionShape,
    ForkShape,
    OverlappedLinearShape,
    LinearShape,
    NormShape,
    PointwiseShape,
    QuantizeShape,
    ResidualShape,
    RouterShape,
    TokenPermuteShape,
    GroupedLinearShape,
    TopKShape,
)
from harness.ir.portable import Capacity, Engine, Work

POINTWISE_OPERATIONS = {"softmax": (5, 8), "gelu": (8, 13), "dropout": (1, 1), "squared_relu": (2, 3),
                        "swiglu": (6, 16), "geglu": (9, 23), "rope": (3, 3)}
#: Pointwise kinds of Calculon 0.1.0's model: their gradient traffic is its named rule; the others' follows
#: their dependencies.
CALCULON_POINTWISE = frozenset({"softmax", "gelu"})
#: Gated activations: two inputs (gate and up) per output element.
GATED = frozenset({"swiglu", "geglu"})
RMS_NORM_OPERATIONS = (4, 7, 3)
#: Tokens per side of one FlashAttention-2 tile (its query block and key block, 128 for the head sizes of
#: current models on A100/H100): the causal and sliding-window masks skip whole tiles.
FLASH_TILE_TOKENS = 128
#: Bytes of one log-sum-exp value (fp32) per query row and head, which the flash forward writes for its backward.
LOG_SUM_EXP_BYTES = 4
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


def _quantized(s: LinearShape | OverlappedLinearShape, b: int, shards: int, facts: tuple, weights: int, output: int,
               activation_grad_bytes: int) -> PrimitiveFacts:
    """A quantized GEMM's facts (a linear's or an overlapped linear's): the recipe's three works and kept
    activation (``facts``, harness.passes.precision), the weights' optimizer step and the capacity with the
    quantized weight copy."""
    forward, activation_grad, weight_grad, kept = facts
    return PrimitiveFacts(
        forward=forward, activation_grad=activation_grad, weight_grad=weight_grad,
        optimizer=_optimizer(weights, 2 * weights, b, shards),
        capacity=_capacity(b, shards, weights=weights, activation=kept, output=output,
                           activation_grad=activation_grad_bytes, moments=2 * weights
                           ).trusted_replace(quantized_weight_bytes=precision.weight_copy_bytes(s)))


def linear(s: LinearShape, b: int, shards: int) -> PrimitiveFacts:
    ops = 2 * s.m * s.n * s.k
    x, matrix, y = s.m * s.n, s.n * s.k, s.m * s.k
    w = matrix + (s.k if s.bias else 0)
    if s.precision is not None:  # quantized GEMMs (harness.passes.precision)
        return _quantized(s, b, shards, precision.linear_facts(s, b), w, y, y * b)
    return PrimitiveFacts(
        forward=_work(ops, (x + w) * b, y * b, "matrix"),
        activation_grad=_work(ops, (matrix + y) * b, x * b, "matrix"),
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


def rms_norm(s: NormShape, b: int, shards: int) -> PrimitiveFacts:
    a, w = s.elements, s.hidden
    fw, dg, wg = RMS_NORM_OPERATIONS
    return PrimitiveFacts(
        forward=_work(fw * a, (a + w) * b, a * b, "vector"),
        activation_grad=_work(dg * a, (2 * a + w) * b, a * b, "vector"),
        weight_grad=_work(wg * a, 2 * a * b, w * b, "vector"),
        optimizer=_optimizer(w, 2 * w, b, shards),
        capacity=_capacity(b, shards, weights=w, activation=a * b, output=a, activation_grad=a * b, moments=2 * w),
    )


def norm(s: NormShape, b: int, shards: int) -> PrimitiveFacts:
    return rms_norm(s, b, shards) if s.kind == "rms_norm" else layer_norm(s, b, shards)


def pointwise(s: PointwiseShape, b: int, shards: int) -> PrimitiveFacts:
    a = s.elements
    fw, dg = POINTWISE_OPERATIONS[s.kind]
    if s.kind not in CALCULON_POINTWISE and s.kind != "dropout":
        inputs = 2 * a if s.kind in GATED else a
        kept = 0 if s.fused or s.kind == "rope" else inputs
        return PrimitiveFacts(
            forward=_work(fw * a, inputs * b, a * b, "vector"),
            activation_grad=_work(dg * a, (kept + a) * b, inputs * b, "vector"),
            weight_grad=_NONE, optimizer=_NONE,
            capacity=_capacity(b, shards, activation=kept * b, output=a, activation_grad=a * b),
        )
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
    x, matrix, y = s.m * s.n, s.n * s.k, s.m * s.k
    w = matrix + (s.k if s.bias else 0)
    act, grad = s.activation_elements, s.activation_grad_elements
    if s.precision is not None:  # quantized GEMMs (harness.passes.precision), as a linear's
        return _quantized(s, b, shards, precision.overlapped_linear_facts(s, b), w, y, grad * b)
    return PrimitiveFacts(
        forward=_work(ops, (x + w) * b, y * b, "matrix"),
        activation_grad=_work(ops, (matrix + grad) * b, act * b, "matrix"),
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


#: Bytes of one token id (Megatron's int64 token tensor), read by the embedding lookup and its gradient.
TOKEN_ID_BYTES = 8


def embedding(s: EmbeddingShape, b: int, shards: int) -> PrimitiveFacts:
    """The input embedding lookup over a local table of ``vocabulary x hidden`` weights (``t`` tokens, ``h``
    hidden, ``V`` local rows):

    - forward: a gathered row per token, the rows outside this rank's share masked to zero (``t h``
      operations); reads the ``t`` rows (``t h b``) and the ids (``8 t``), writes ``t h b``;
    - activation gradient: none (token ids have no gradient);
    - weight gradient: the ``t`` rows of dY accumulated into the table's gradient (``t h`` operations); reads
      dY (``t h b``) and the ids, writes the whole local gradient table (``V h b``: PyTorch's dense embedding
      backward fills it and adds the rows);
    - ``V h`` weights with their gradient and Adam state; it keeps nothing the block memory counts.
    """
    rows, table = s.tokens * s.hidden, s.vocabulary * s.hidden
    ids = TOKEN_ID_BYTES * s.tokens
    return PrimitiveFacts(
        forward=_work(rows, rows * b + ids, rows * b, "vector"),
        activation_grad=_NONE,
        weight_grad=_work(rows, rows * b + ids, table * b, "vector"),
        optimizer=_optimizer(table, 2 * table, b, shards),
        capacity=_capacity(b, shards, weights=table, moments=2 * table),
    )


def causal_tiles(sequence: int, window: int, tile: int = FLASH_TILE_TOKENS) -> tuple[int, int]:
    """(tiles executed, tiles of the full score matrix) of a causal kernel over ``sequence`` tokens whose queries
    attend to at most ``window`` keys, at ``tile`` x ``tile`` granularity.

    With ``n = ceil(sequence / tile)`` tiles per side, query tile ``i`` and key tile ``j`` hold a pair to compute
    when ``0 <= i - j <= D``, ``D = n - 1`` without a window (``window >= sequence``), else ``D = 1 + floor((window
    - 2) / tile)`` (``window >= 2``; 0 for a window of one token): a tile pair ``d = i - j >= 1`` apart holds a
    query and a key ``(d - 1) tile + 1`` tokens apart at the least, inside the window when that is at most
    ``window - 1``. Executed: ``sum over i of (min(i, D) + 1)``, i.e. ``n (n + 1) / 2`` for a causal mask (the
    fraction ``(n + 1) / (2 n)`` of the full scores: 33/64 for 4096 tokens), ``D (D + 1) / 2 + (n - D)(D + 1)``
    with a window. A tile on the diagonal (or the window's edge) is computed whole and masked inside.
    """
    n = -(-sequence // tile)
    if window >= sequence:
        reach = n - 1
    else:
        reach = min(n - 1, 1 + (window - 2) // tile if window >= 2 else 0)
    return reach * (reach + 1) // 2 + (n - reach) * (reach + 1), n * n


def context_tiles(sequence: int, context_parallel: int, tile: int = FLASH_TILE_TOKENS) -> tuple[int, int]:
    """(tiles executed, tiles of this rank's full products) of a causal kernel under context parallelism: the
    sequence in ``2 CP`` chunks of ``c = sequence / (2 CP)`` tokens, ``m = ceil(c / tile)`` tiles a side; the rank
    holds two query chunks and meets every key chunk over the ring (``4 CP`` chunk pairs, ``4 CP m^2`` tiles).
    Megatron-Core's load balancing gives it ``2 CP - 1`` whole pairs (below the diagonal: one of its own at the
    first step, two at each of the CP - 1 others) and the two causal diagonal pairs of its own chunks, each
    ``m (m + 1) / 2`` tiles: ``(2 CP - 1) m^2 + m (m + 1)`` executed (for CP = 1 this is :func:`causal_tiles`
    when the chunk is a whole number of tiles)."""
    m = -(-(sequence // (2 * context_parallel)) // tile)
    return (2 * context_parallel - 1) * m * m + m * (m + 1), 4 * context_parallel * m * m


def score_products(batch: int, heads: int, sequence: int, head_size: int) -> int:
    """Operations of one s x s score product (QK^T or PV) over ``batch`` x ``heads``: ``2 B H s^2 d``."""
    return 2 * batch * heads * sequence * sequence * head_size


def flash_products(s: FlashAttentionShape) -> tuple[int, int]:
    """(QK^T, PV) operations of a flash kernel's full s x s products: :func:`score_products` over the query/key
    head width and over the value head width (equal unless multi-head latent attention)."""
    if s.context_parallel is None:
        return (score_products(s.batch, s.heads, s.sequence, s.head_size),
                score_products(s.batch, s.heads, s.sequence, s.value_width))
    rows = 2 * s.batch * s.heads * s.queries * s.sequence  # this rank's queries against every key
    return rows * s.head_size, rows * s.value_width


def flash_attention(s: FlashAttentionShape, b: int, shards: int) -> PrimitiveFacts:
    """FlashAttention-2, causal: the tiles of :func:`causal_tiles` executed, a fraction ``f`` of the full scores.

    - forward: QK^T and PV over the executed tiles, ``2 x score_products x f`` on the matrix engine; reads Q
      (``B H s d``), K and V (``B H_kv s d`` each), writes O (``B H s d``) and the fp32 log-sum-exp (``B H s``
      x :data:`LOG_SUM_EXP_BYTES`); no s x s tensor touches memory;
    - backward (activation gradient): the scores recomputed (QK^T), then dV = P^T dO, dP = dO V^T, dQ = dS K and
      dK = dS^T Q: ``5 x score_products x f``; reads Q, K, V, O, dO and the log-sum-exp, writes dQ, dK, dV
      (the row sums ``dO . O`` of its preprocessing and the fp32 dQ accumulator are not counted); no weights;
    - the online softmax, the masking and the in-kernel dropout (its mask regenerated from the seed, never
      stored) run inside the kernel next to the products and are not counted as separate operations;
    - capacity: it keeps Q, K, V and the log-sum-exp for the backward (O is the output projection's stored
      input); its gradient buffer is dO;
    - with a value head width ``d_v`` of its own (multi-head latent attention), the products over V (PV, dV,
      dP) count ``d_v`` and the others ``d`` (:func:`flash_products`): forward ``(QK + PV) f``, backward
      ``(3 QK + 2 PV) f``; V, O and dO are ``d_v`` wide;
    - context parallelism (``context_parallel`` CP): the rank's ``s / CP`` queries against all ``s`` keys, ``f``
      from :func:`context_tiles`; Q, K, V, O and the log-sum-exp are the rank's (``s / CP`` positions) and each
      of the CP ring steps moves them once (reads Q and the step's K/V, writes its partial O and log-sum-exp,
      which Transformer Engine merges; the backward likewise); the capacity is the rank's, once.
    """
    if s.context_parallel is None:
        executed, tiles = causal_tiles(s.sequence, s.window)
        steps = 1
    else:
        executed, tiles = context_tiles(s.sequence, s.context_parallel)
        steps = s.context_parallel
    scores, values = flash_products(s)
    q = s.batch * s.heads * s.queries * s.head_size
    o = s.batch * s.heads * s.queries * s.value_width
    kv = s.batch * s.kv_heads * s.queries * (s.head_size + s.value_width)  # K and V (this rank's chunks)
    lse = s.batch * s.heads * s.queries * LOG_SUM_EXP_BYTES
    if steps == 1:
        forward_io = ((q + kv) * b, o * b + lse)
        backward_io = ((q + kv + 2 * o) * b + lse, (q + kv) * b)
    else:  # each ring step reads Q and that step's K/V chunks, and corrects O by the log-sum-exp
        forward_io = (steps * (q + kv) * b, steps * (o * b + lse))
        backward_io = (steps * ((q + kv + 2 * o) * b + lse), steps * (q + kv) * b)
    return PrimitiveFacts(
        forward=_work((scores + values) * executed / tiles, *forward_io, "matrix"),
        activation_grad=_work((3 * scores + 2 * values) * executed / tiles, *backward_io, "matrix"),
        weight_grad=_NONE_MATRIX, optimizer=_NONE,
        capacity=_capacity(b, shards, activation=(q + kv) * b + lse, output=o, activation_grad=o * b),
    )


#: primitive kind -> its family in the FLOP oracle's convention (:func:`matrix_operations`); flash attention apart.
MATRIX_FAMILIES: dict[str, str] = {"linear": "linear", "overlapped_linear": "linear", "router": "linear",
                                   "grouped_linear": "linear", "batch_matmul": "attention"}


def matrix_operations(shape) -> tuple[str, float] | None:
    """The FLOP oracle's convention for one forward task: ``("linear" | "attention", operations)`` or None.

    Forward + activation gradient + weight gradient matrix operations, no recomputation, the attention products
    over the full s x s scores (PyTorch's ``FlopCounterMode``: ``aten.mm``/``aten.addmm`` are linear, counting
    2MNK and not the bias add; ``aten.bmm`` attention): a linear's (or overlapped linear's) three passes, a batch
    matmul's forward and activation gradient, and for a flash kernel the materialized products it stands for
    (``3 x 2 x score_products``: QK^T and PV forward, twice each backward), not the tiles it executes.
    """
    if isinstance(shape, FlashAttentionShape):
        return "attention", 3 * sum(flash_products(shape))
    family = MATRIX_FAMILIES.get(shape.kind)
    if family is None:
        return None
    facts = derive(shape, 2, 1)
    return family, facts.forward.operations + facts.activation_grad.operations + facts.weight_grad.operations


def context_exchange(s, b: int, shards: int) -> PrimitiveFacts:
    """The context-parallel K/V ring: its messages only (no local work; the received chunks are transient)."""
    return PrimitiveFacts(forward=_NONE, activation_grad=_NONE, weight_grad=_NONE, optimizer=_NONE,
                          capacity=_capacity(b, shards))


def quantize(s: QuantizeShape, b: int, shards: int) -> PrimitiveFacts:
    """A quantized linear's casts (harness.passes.precision)."""
    forward, backward = precision.quantize_facts(s, b)
    return PrimitiveFacts(forward=forward, activation_grad=backward, weight_grad=_NONE, optimizer=_NONE,
                          capacity=_capacity(b, shards))


#: Score function operations per score (forward, gradient) of a router's top-k.
SCORE_OPERATIONS = {"softmax": POINTWISE_OPERATIONS["softmax"], "sigmoid": (4, 3)}
#: Bytes of one expert index (int32) the top-k writes per selected expert.
INDEX_BYTES = 4


def router(s: RouterShape, b: int, shards: int) -> PrimitiveFacts:
    """The router GEMM: the linear rule (never quantized)."""
    return linear(LinearShape.trusted(m=s.m, n=s.n, k=s.k), b, shards)


def top_k(s: TopKShape, b: int, shards: int) -> PrimitiveFacts:
    scores, picked = s.tokens * s.experts, s.tokens * s.top_k
    forward_ops, grad_ops = SCORE_OPERATIONS[s.score]
    return PrimitiveFacts(
        forward=_work(scores * (forward_ops + s.top_k), scores * b, picked * (b + INDEX_BYTES), "vector"),
        activation_grad=_work(scores * grad_ops, (scores + picked) * b, scores * b, "vector"),
        weight_grad=_NONE, optimizer=_NONE,
        capacity=_capacity(b, shards, activation=scores * b, output=picked, activation_grad=picked * b))


def token_permute(s: TokenPermuteShape, b: int, shards: int) -> PrimitiveFacts:
    tokens, copies = s.tokens * s.hidden, s.tokens * s.copies * s.hidden
    if s.kind == "permute":
        return PrimitiveFacts(
            forward=_work(0, tokens * b, copies * b, "vector"),
            activation_grad=_work(copies, copies * b, tokens * b, "vector"),
            weight_grad=_NONE, optimizer=_NONE,
            capacity=_capacity(b, shards, output=copies, activation_grad=copies * b))
    probabilities = s.tokens * s.copies
    return PrimitiveFacts(
        forward=_work(2 * copies, copies * b + probabilities * b, tokens * b, "vector"),
        activation_grad=_work(4 * copies, (copies + tokens) * b + probabilities * b, copies * b + probabilities * b,
                              "vector"),
        weight_grad=_NONE, optimizer=_NONE,
        capacity=_capacity(b, shards, activation=copies * b, output=tokens, activation_grad=tokens * b))


def _scaled(work: Work, groups: int) -> Work:
    return Work.trusted(operations=work.operations * groups, bytes_read=work.bytes_read * groups,
                        bytes_written=work.bytes_written * groups, engine=work.engine, datatype=work.datatype,
                        gemm_operations=work.operations if work.operations else None)


def grouped_linear(s: GroupedLinearShape, b: int, shards: int) -> PrimitiveFacts:
    one = linear(LinearShape.trusted(m=s.m, n=s.n, k=s.k, precision=s.precision), b, shards)
    c, g = one.capacity, s.groups
    return PrimitiveFacts(
        forward=_scaled(one.forward, g), activation_grad=_scaled(one.activation_grad, g),
        weight_grad=_scaled(one.weight_grad, g), optimizer=_scaled(one.optimizer, g).trusted_replace(
            gemm_operations=None),
        capacity=Capacity.trusted(**{f: None if getattr(c, f) is None else getattr(c, f) * g  # absent stays absent
                                     for f in Capacity.model_fields}))


def expert_collective(s, b: int, shards: int) -> PrimitiveFacts:
    """An expert dispatcher collective: the local reduction of the pass that reduce-scatters, nothing else."""
    def local(op) -> Work:
        ops = reduction_operations(op, s.elements * b, b, s.participants) if op else 0.0
        return _work(ops, s.elements * b, s.elements * b / s.participants, "vector") if ops else _NONE
    return PrimitiveFacts(forward=local(s.base_forward), activation_grad=local(s.base_backward), weight_grad=_NONE,
                          optimizer=_NONE, capacity=_capacity(b, shards))


RULES = {
    "linear": linear,
    "batch_matmul": batch_matmul,
    "layer_norm": norm,
    "rms_norm": norm,
    "softmax": pointwise,
    "dropout": pointwise,
    "gelu": pointwise,
    "squared_relu": pointwise,
    "swiglu": pointwise,
    "geglu": pointwise,
    "rope": pointwise,
    "flash_attention": flash_attention,
    "residual": residual,
    "fork": fork,
    "tp_collective": tp_collective,
    "overlapped_linear": overlapped_linear,
    "cross_entropy": cross_entropy,
    "embedding": embedding,
    "context_exchange": context_exchange,
    "quantize": quantize,
    "router": router,
    "top_k": top_k,
    "permute": token_permute,
    "unpermute": token_permute,
    "grouped_linear": grouped_linear,
    "expert_all_to_all": expert_collective,
    "context_all_to_all": expert_collective,  # no local reduction either
    "expert_tp_collective": expert_collective,
    "expert_gather": expert_collective,
}


#: Primitives with weights: the only ones whose facts depend on the optimizer shards.
WEIGHTED = frozenset({"linear", "layer_norm", "rms_norm", "overlapped_linear", "embedding", "router",
                      "grouped_linear"})

def derive(shape, bytes_per_element: int, optimizer_shards: int) -> PrimitiveFacts:
    """Apply the rule of ``shape.kind``.

    Memoized: the facts are a pure function of the shape's class and field
    values and the two integers, and immutable, so recompute clones and layouts
    that repeat a local shape share one set of facts. The optimizer shards only
    divide weight gradients and optimizer state, so a primitive without weights
    (not in :data:`WEIGHTED`) is derived with one shard: identical facts, shared
    across data-parallel layouts. The key is the field
    values (cheap to hash and compare, unlike a pydantic model's own
    ``__hash__`` / ``__eq__``); the memo is the current session's ``facts``
    (:mod:`harness.session`, bounded).
    """
    shards = optimizer_shards if shape.kind in WEIGHTED else 1  # weightless facts do not depend on it
    key = (type(shape), *shape.__dict__.values(), bytes_per_element, shards)
    memo = session.current().facts
    facts = memo.get(key)
    if facts is None:
        facts = memo.put(key, RULES[shape.kind](shape, bytes_per_element, shards))
    return facts
