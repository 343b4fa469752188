"""Multi-token prediction's head (``model.mtp_layers``; DeepSeek-V3, Megatron-Core's MTP): the work of one MTP layer
outside its transformer block, once per microbatch on the last pipeline stage.

Megatron-Core (megatron/core/transformer/multi_token_prediction.py, ``MultiTokenPredictionLayer``): each layer
normalizes the embedding of the tokens one further ahead (``enorm``) and the previous hidden state (``hnorm``),
concatenates them (``2 x hidden``), projects them back to ``hidden`` with ``eh_proj`` (a column-parallel linear:
output ``hidden / TP``, its input all-gathered over TP under sequence parallelism), gathers the projection over TP
(``gather_from_tensor_model_parallel_region``) and scatters it back to the sequence shards, runs one transformer
block of the decoder's kind (priced as a block of the last stage: :mod:`harness.ir.blocks`), a final norm, and the
output layer and loss of its own prediction (the main output layer's tasks again: harness.cost.output_layer).

Rules (per microbatch, ``tokens = microbatch x sequence / CP``, ``local = tokens / TP`` under sequence
parallelism, else ``tokens``):

- tasks (:func:`head_tasks`): ``mtp.enorm``, ``mtp.hnorm`` (the model's norm over ``local x hidden``), ``mtp.eh_proj``
  (a linear ``[tokens, 2 x hidden] x [2 x hidden, hidden / TP]``: forward, dgrad and wgrad by the linear rule),
  ``mtp.final_norm`` (``local x hidden``);
- messages (TP > 1, :func:`head_messages`): forward, the all-gather of the ``tokens x 2 hidden`` input (sequence
  parallelism) and the all-gather of the ``tokens x hidden`` projection; backward, the all-gather of the
  projection's gradient (the scatter's backward) and the reduce-scatter of the input's gradient, on the tensor
  tier;
- not counted (documented): the embedding lookup of the shifted tokens (the main embedding's weights, shared),
  ``eh_proj``'s and the norms' weights in the memory, optimizer and data-parallel figures.
"""

from __future__ import annotations

from harness.ir import mesh
from harness.ir.distributed import LinearShape, NormShape, Retention, Task
from harness.ir.model import BYTES_PER_ELEMENT, ExecutionLayout, TransformerShape
from harness.ir.portable import Message, PlanTask
from harness.passes.output_layer import plan_tasks

RETENTION = Retention.trusted(activation_stored=True, output_stored=True, activation_reused=False)


def _tokens(shape: TransformerShape, e: ExecutionLayout) -> tuple[int, int]:
    """(tokens of the TP group, this rank's sequence shard) per microbatch."""
    tokens = e.microbatch * (shape.sequence_length // e.context_degree)
    return tokens, tokens // e.tensor_parallel if e.sequence_parallel else tokens


def head_tasks(shape: TransformerShape, e: ExecutionLayout) -> tuple[PlanTask, ...]:
    """One MTP layer's tasks outside its block (module rules), as plan tasks (forward, dgrad, wgrad)."""
    tokens, local = _tokens(shape, e)
    h = shape.hidden
    norm = "rms_norm" if shape.norm == "rmsnorm" else "layer_norm"

    def task(name: str, s) -> Task:
        return Task.trusted(name=name, phase="forward", clone_of=None, depends_on=(), shape=s, retention=RETENTION)

    tasks = (task("mtp.enorm", NormShape.trusted(kind=norm, elements=local * h, hidden=h)),
             task("mtp.hnorm", NormShape.trusted(kind=norm, elements=local * h, hidden=h)),
             task("mtp.eh_proj", LinearShape.trusted(m=tokens, n=2 * h, k=h // e.tensor_parallel)),
             task("mtp.final_norm", NormShape.trusted(kind=norm, elements=local * h, hidden=h)))
    return plan_tasks(tasks, BYTES_PER_ELEMENT[e.datatype])


def head_messages(shape: TransformerShape, e: ExecutionLayout) -> tuple[tuple[Message, ...], tuple[Message, ...]]:
    """(forward, backward) TP messages of one MTP layer's head (module rules); none without TP."""
    tp = e.tensor_parallel
    if tp == 1:
        return (), ()
    tokens, _ = _tokens(shape, e)
    b, h, tier = BYTES_PER_ELEMENT[e.datatype], shape.hidden, mesh.tier(e, "tensor")

    def message(op: str, elements: int) -> Message:
        return Message.trusted(collective=op, message_bytes=elements * b, participants=tp, network_tier=tier)

    gathered = (message("all_gather", tokens * 2 * h),) if e.sequence_parallel else ()
    scattered = (message("reduce_scatter", tokens * 2 * h),) if e.sequence_parallel else ()
    return (*gathered, message("all_gather", tokens * h)), (message("all_gather", tokens * h), *scattered)
