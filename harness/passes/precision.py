"""Mixed-precision recipes, ``execution.precision`` (Transformer Engine's, as Megatron-Core runs them).

Rules (every figure per element; ``b`` the layout's bytes per element):

- ``fp16`` / ``bf16``: every work in the layout's datatype, which must be float16 / bfloat16 (nothing else
  changes: a plan without ``precision`` is the same plan);
- ``fp8_delayed``, ``fp8_current``, ``mxfp8``, ``nvfp4`` (layout datatype bfloat16): the block's linear layers
  run their three GEMMs (forward, activation gradient, weight gradient) on the matrix engine in
  :attr:`Recipe.gemm_datatype` (float8; float4 for nvfp4) on quantized operands: X and W forward, W and dY
  for the activation gradient, X and dY for the weight gradient are read at :func:`quantized_bytes` (the
  element plus its share of the scale factors: one E8M0 byte per 32 elements for MXFP8, one E4M3 byte per 16
  for NVFP4, none for per-tensor scaling); their outputs (Y, dX, dW) are written in bf16. A linear keeps its
  quantized input X for the weight gradient (TE saves the fp8 input), not the bf16 one;
- each such linear is preceded by a ``quantize`` task (vector engine, bf16) that casts X and W in the forward
  pass and dY in the backward pass: :data:`QUANTIZE_OPERATIONS` per element (the running amax and the scale),
  reading ``b`` bytes and writing :func:`quantized_bytes`; with current scaling (``fp8_current``) and NVFP4's
  per-tensor amax the amax is a pass of its own first (:data:`AMAX_PASS_OPERATIONS` more per element and the
  tensor read once more). Not counted: delayed scaling's amax-history update (a few values per tensor);
- each quantized linear holds :data:`WEIGHT_COPIES` quantized copies of its weight for the whole iteration
  (:func:`weight_copy_bytes`, the capacity's ``quantized_weight_bytes``): Transformer Engine casts the weight
  on the first microbatch and keeps it, row-wise for the forward GEMM and column-wise (transposed) for the
  activation-gradient GEMM, which Hopper's fp8 GEMMs and Blackwell's block-scaled ones read in that layout; it
  joins the ``weight`` memory figure (not the weights' gradients, optimizer state or data-parallel bytes);
- under TP overlap (``execution.tp_overlap``) the overlapped linears are quantized the same way (a
  ``quantize`` task before each, the same casts; :func:`overlapped_linear_facts` reads the same quantized
  operands), and their tiled collectives carry what Transformer Engine's userbuffers send
  (:func:`overlap_message_bytes`): an all-gather moves the quantized tensor (TE casts the local shard and
  gathers the fp8 bytes: ``transformer_engine/pytorch/module/linear.py`` ``_Linear.forward`` at
  d0067d0d lines 378-418, ``input_quantizer(inputmat)`` then ``fill_userbuffers_buffer_for_all_gather``; every
  all-gather overlap buffer is fp8, ``module/base.py`` lines 335-345 and 391, "AllGather buffers use fp8 when
  using fp8 recipe"), a reduce-scatter or all-reduce the GEMM's bf16 output (``module/linear.py`` line 529:
  ``reduce_scatter_out`` in ``activation_dtype``; the pipelined reduce-scatter buffers are fp8 only with a
  user's ``fp8_buf``, ``module/base.py`` lines 564-566, which the harness does not model);
- everything else (attention scores, norms, pointwise work, the other collectives, the output layer) stays in
  bf16;
  weights are stored in bf16, with fp32 main weights, fp32 main gradients and fp32 Adam moments (the
  optimizer and capacity rules of :mod:`harness.passes.rules`, unchanged).

A recipe is applied to the DistributedTaskIR by :func:`with_precision` (before the recompute clones, so a
recomputed linear's quantization is recomputed with it); the facts are :func:`linear_facts` and
:func:`quantize_facts`.
"""

from __future__ import annotations

import dataclasses

from harness.ir.distributed import GroupedLinearShape, LinearShape, OverlappedLinearShape, QuantizeShape, Task
from harness.ir.portable import Work

QUANTIZE_OPERATIONS = 2  # |x| into the running amax, x times the scale (the cast is the store)
AMAX_PASS_OPERATIONS = 1  # |x| into the amax, in a pass of its own before the cast


@dataclasses.dataclass(frozen=True)
class Recipe:
    """One ``execution.precision`` value."""

    layout_datatype: str  # the datatype the layout must state (everything but the quantized GEMMs)
    gemm_datatype: str | None  # the linear GEMMs' datatype (None: the layout's, no quantization)
    operand_bytes: float = 0.0  # bytes of one quantized element
    scale_bytes_per_element: float = 0.0  # scale-factor bytes per quantized element
    amax_pass: bool = False  # the amax is computed in a pass of its own before the cast


RECIPES: dict[str, Recipe] = {
    "fp16": Recipe("float16", None),
    "bf16": Recipe("bfloat16", None),
    "fp8_delayed": Recipe("bfloat16", "float8", 1.0),
    "fp8_current": Recipe("bfloat16", "float8", 1.0, amax_pass=True),
    "mxfp8": Recipe("bfloat16", "float8", 1.0, 1 / 32),
    "nvfp4": Recipe("bfloat16", "float4", 0.5, 1 / 16, amax_pass=True),
}


def quantized_gemm_datatype(precision: str | None) -> str | None:
    """The datatype of the linear GEMMs an ``execution.precision`` quantizes (``float8``, ``float4``), or None (no
    precision, a recipe that quantizes nothing, or a name outside :data:`RECIPES`, which the case check refuses)."""
    recipe = None if precision is None else RECIPES.get(precision)
    return None if recipe is None else recipe.gemm_datatype


#: Quantized copies of each weight a recipe keeps for the iteration: row-wise and column-wise (module rules).
WEIGHT_COPIES = 2


def weight_copy_bytes(s: LinearShape | OverlappedLinearShape) -> float:
    """Bytes of the quantized weight copies a quantized linear keeps (the bias is not quantized)."""
    return WEIGHT_COPIES * quantized_bytes(s.n * s.k, RECIPES[s.precision])


def quantized_bytes(elements: float, recipe: Recipe) -> float:
    """Bytes of ``elements`` quantized: the elements and their scale factors."""
    return elements * (recipe.operand_bytes + recipe.scale_bytes_per_element)


def _work(operations: float, read: float, written: float, engine: str, datatype: str | None = None) -> Work:
    return Work.trusted(operations=operations, bytes_read=read, bytes_written=written, engine=engine,
                        datatype=datatype)


def _gemm_passes(s: LinearShape | OverlappedLinearShape, b: int, kept: int, gradient: int):
    """(forward, activation gradient, weight gradient, kept input bytes) of a quantized GEMM of shape ``s`` that
    keeps ``kept`` input elements for the backward pass and reads ``gradient`` output-gradient elements."""
    r = RECIPES[s.precision]
    ops = 2 * s.m * s.n * s.k
    x, w, y = s.m * s.n, s.n * s.k, s.m * s.k
    bias = s.k * b if s.bias else 0  # the bias is not quantized
    q = lambda n: quantized_bytes(n, r)  # noqa: E731
    g = r.gemm_datatype
    return (_work(ops, q(x) + q(w) + bias, y * b, "matrix", g), _work(ops, q(w) + q(gradient), kept * b, "matrix", g),
            _work(ops, q(kept) + q(gradient), w * b + bias, "matrix", g), q(kept))


def linear_facts(s: LinearShape, b: int):
    """(forward, activation gradient, weight gradient, kept input bytes) of a quantized linear (module rules)."""
    return _gemm_passes(s, b, s.m * s.n, s.m * s.k)


def overlapped_linear_facts(s: OverlappedLinearShape, b: int):
    """The same for an overlapped linear (TP overlap): the passes of :func:`linear_facts` over the shape's kept
    input and gradient buffers (``activation_elements``, ``activation_grad_elements``: Calculon's accounting of
    the tiles, :func:`harness.passes.rules.overlapped_linear`), read quantized."""
    return _gemm_passes(s, b, s.activation_elements, s.activation_grad_elements)


def overlap_message_bytes(collective: str, elements: int, b: int, precision: str | None) -> float:
    """Bytes a tiled TP collective of ``elements`` carries (module rules): an all-gather under a quantizing
    recipe the quantized elements, anything else ``elements x b``."""
    if precision is None or collective != "all_gather" or RECIPES[precision].gemm_datatype is None:
        return elements * b
    return quantized_bytes(elements, RECIPES[precision])


def quantize_facts(s: QuantizeShape, b: int) -> tuple[Work, Work]:
    """(forward, activation gradient) of a quantize task (module rules); it keeps nothing."""
    r = RECIPES[s.recipe]
    per_element_ops = QUANTIZE_OPERATIONS + (AMAX_PASS_OPERATIONS if r.amax_pass else 0)
    reads = 2 if r.amax_pass else 1

    def cast(elements: int) -> Work:
        return _work(per_element_ops * elements, reads * elements * b, quantized_bytes(elements, r), "vector")

    return cast(s.input_elements + s.weight_elements), cast(s.grad_elements)


def with_precision(entries: list[tuple[Task, bool, bool]], precision: str | None) -> list[tuple[Task, bool, bool]]:
    """The block's ``(task, recompute, recommunicate)`` entries with the recipe applied: every linear gets the
    recipe and a ``<linear>.quantize`` task before it (same recompute flag); unchanged without quantization."""
    if precision is None or RECIPES[precision].gemm_datatype is None:
        return entries
    out = []
    for task, recompute, recommunicate in entries:
        s = task.shape
        if isinstance(s, (LinearShape, GroupedLinearShape, OverlappedLinearShape)):
            groups = s.groups if isinstance(s, GroupedLinearShape) else 1  # a grouped GEMM casts every expert's
            shape = QuantizeShape.trusted(input_elements=groups * s.m * s.n, weight_elements=groups * s.n * s.k,
                                          grad_elements=groups * s.m * s.k, recipe=precision)
            quantize = Task.trusted(name=f"{task.name}.quantize", phase="forward", clone_of=None,
                                    depends_on=task.depends_on, shape=shape,
                                    retention=task.retention.trusted_replace(activation_reused=False,
                                                                             activation_stored=True,
                                                                             output_stored=True))
            out.append((quantize, recompute, False))
            task = task.trusted_replace(shape=s.trusted_replace(precision=precision), depends_on=(quantize.name,))
        out.append((task, recompute, recommunicate))
    return out
