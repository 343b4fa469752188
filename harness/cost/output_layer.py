"""Family ``output_layer``: the work of the model's edges that the portable plan leaves out.

A measured iteration of a GPT model also runs the token embedding, the output
(logit) layer, which multiplies the last block's activation by the (tied)
embedding matrix, and the softmax cross-entropy loss over the vocabulary. The
portable plan has Transformer blocks only (Calculon's model has no
vocabulary), so a profile that was fitted to measured runs describes that
work as a target-wide family: the vocabulary of the target's training
software and the bytes its loss moves per logit.

Rules (per microbatch, on the last pipeline stage, which then paces the
steady state of 1F1B: once per microbatch on the critical path):

- the logit layer is a linear ``[tokens, hidden] x [hidden, V / TP]`` with the
  seed's linear rule (forward, dgrad and wgrad of ``2 x tokens x hidden x
  V/TP`` operations each; traffic from its operands), where ``tokens =
  microbatch x sequence length`` and ``V`` is the vocabulary padded to a
  multiple of ``vocabulary_multiple x TP`` (vocabulary-parallel, as Megatron);
- the loss moves ``loss_bytes_per_logit`` bytes per logit, half in the
  forward pass and half in the backward pass, with the softmax's operations
  per element (``harness.passes.rules.POINTWISE_OPERATIONS``);
- its forward work is added to the ``forward`` component and its backward
  work to ``backward``; it is priced by the same :class:`Pricer` (curves,
  processing mode, launch) as every task;
- the embedding lookup and its gradient are not modelled (one gather and one
  scatter of ``tokens x hidden`` elements).
"""

from __future__ import annotations

import dataclasses
import functools

from harness.cost.views import CostView, Pricer
from harness.evidence.profile import EvidenceProfile
from harness.evidence.families import OutputLayer
from harness.ir.distributed import LinearShape
from harness.ir.model import BYTES_PER_ELEMENT, ModelIR
from harness.ir.portable import Work
from harness.passes.rules import POINTWISE_OPERATIONS, linear


@dataclasses.dataclass(frozen=True)
class OutputLayerWork:
    """The output layer's work of one microbatch, by pass."""

    forward: tuple[Work, ...]
    backward: tuple[Work, ...]


@functools.lru_cache(maxsize=1024)
def _works(layer: OutputLayer, tokens: int, hidden: int, tensor_parallel: int, bytes_per_element: int
           ) -> OutputLayerWork:
    local_vocabulary = layer.padded_vocabulary(tensor_parallel) // tensor_parallel
    facts = linear(LinearShape.trusted(m=tokens, n=hidden, k=local_vocabulary), bytes_per_element, 1)
    logits = tokens * local_vocabulary
    half = logits * layer.loss_bytes_per_logit / 2
    forward_ops, backward_ops = POINTWISE_OPERATIONS["softmax"]
    loss_forward = Work.trusted(operations=forward_ops * logits, bytes_read=half / 2, bytes_written=half / 2,
                                engine="vector")
    loss_backward = Work.trusted(operations=backward_ops * logits, bytes_read=half / 2, bytes_written=half / 2,
                                 engine="vector")
    return OutputLayerWork(forward=(facts.forward, loss_forward),
                           backward=(loss_backward, facts.activation_grad, facts.weight_grad))


def output_layer_work(layer: OutputLayer, model: ModelIR) -> OutputLayerWork:
    """The work of one microbatch of ``model`` under ``layer`` (memoized: the same instances for the same shape)."""
    s, e = model.shape, model.execution
    return _works(layer, e.microbatch * s.sequence_length, s.hidden, e.tensor_parallel,
                  BYTES_PER_ELEMENT[e.datatype])


def output_layer_applies(profile: EvidenceProfile, view: CostView) -> bool:
    """The family applies: the profile defines it and the view prices it (to a training iteration)."""
    return profile.output_layer is not None and "output_layer" in view.curves


def output_layer_s(pricer: Pricer, model: ModelIR) -> tuple[float, float]:
    """(forward, backward) seconds of one microbatch's output layer, or (0, 0) when the family does not apply."""
    if not output_layer_applies(pricer.profile, pricer.view):
        return 0.0, 0.0
    work = output_layer_work(pricer.profile.output_layer, model)
    forward = sum(pricer.work(w).processing_s for w in work.forward)
    backward = sum(pricer.work(w).processing_s for w in work.backward)
    return forward, backward
