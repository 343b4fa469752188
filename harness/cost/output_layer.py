"""Work once per microbatch outside the Transformer blocks: the output layer and the host's microbatch time.

Family ``output_layer``. A measured iteration of a GPT model also runs the
token embedding, the output (logit) layer, which multiplies the last block's
activation by the (tied) embedding matrix, and the softmax cross-entropy loss
over the vocabulary. The portable plan has Transformer blocks only
(Calculon's model has no vocabulary), so the family names the vocabulary of
the target's training software; the work itself follows fixed rules.

Rules (per microbatch, on the last pipeline stage, which then paces the
steady state of 1F1B: once per microbatch on the critical path):

- the logit layer is a linear ``[tokens, hidden] x [hidden, V / TP]`` with the
  seed's linear rule (forward, dgrad and wgrad of ``2 x tokens x hidden x
  V/TP`` operations each; traffic from its operands), where ``tokens =
  microbatch x sequence length`` and ``V`` is the vocabulary padded to a
  multiple of ``vocabulary_multiple x TP`` (vocabulary-parallel, as Megatron);
- the loss moves :data:`~harness.passes.rules.LOSS_BYTES_PER_LOGIT` bytes per
  logit in its forward and its backward pass (counted from Megatron's
  cross-entropy), with the softmax's operations per element
  (``harness.passes.rules.POINTWISE_OPERATIONS``);
- its forward work is added to the ``forward`` component and its backward
  work to ``backward``; it is priced by the same :class:`Pricer` (curves,
  processing mode, launch) as every task;
- the embedding lookup and its gradient are not modelled (one gather and one
  scatter of ``tokens x hidden`` elements).

Family ``launch``, per microbatch: with ``issue_s_per_microbatch`` the host
spends that time on each training microbatch outside its operations (loading
and broadcasting the batch, which synchronizes the host with the device, and
the training engine's bookkeeping), once per microbatch on the critical path;
it joins the ``forward`` component.

:func:`per_microbatch_s` is the one place that decides what an iteration gets
per microbatch; the closed form, the projection of overlapped layouts and the
search use it.
"""

from __future__ import annotations

import dataclasses
import functools

from harness.cost.views import CostView, Pricer
from harness.evidence.families import OutputLayer
from harness.evidence.profile import EvidenceProfile
from harness.ir.distributed import LinearShape
from harness.ir.model import BYTES_PER_ELEMENT, ModelIR
from harness.ir.portable import Work
from harness.passes.rules import LOSS_BYTES_PER_LOGIT, POINTWISE_OPERATIONS, linear


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
    forward_ops, backward_ops = POINTWISE_OPERATIONS["softmax"]
    (f_read, f_written), (b_read, b_written) = LOSS_BYTES_PER_LOGIT["forward"], LOSS_BYTES_PER_LOGIT["backward"]
    loss_forward = Work.trusted(operations=forward_ops * logits, bytes_read=f_read * logits,
                                bytes_written=f_written * logits, engine="vector")
    loss_backward = Work.trusted(operations=backward_ops * logits, bytes_read=b_read * logits,
                                 bytes_written=b_written * logits, engine="vector")
    return OutputLayerWork(forward=(facts.forward, loss_forward),
                           backward=(loss_backward, facts.activation_grad, facts.weight_grad))


def output_layer_work(layer: OutputLayer, model: ModelIR) -> OutputLayerWork:
    """The work of one microbatch of ``model`` under ``layer`` (memoized: the same instances for the same shape)."""
    s, e = model.shape, model.execution
    return _works(layer, e.microbatch * s.sequence_length, s.hidden, e.tensor_parallel,
                  BYTES_PER_ELEMENT[e.datatype])


def output_layer_applies(profile: EvidenceProfile, view: CostView) -> bool:
    """Family ``output_layer`` applies: the profile defines it and the view prices it."""
    return profile.output_layer is not None and "output_layer" in view.curves


def output_layer_s(pricer: Pricer, model: ModelIR) -> tuple[float, float]:
    """(forward, backward) seconds of one microbatch's output layer, or (0, 0) when the family does not apply."""
    if not output_layer_applies(pricer.profile, pricer.view):
        return 0.0, 0.0
    work = output_layer_work(pricer.profile.output_layer, model)
    forward = sum(pricer.work(w).processing_s for w in work.forward)
    backward = sum(pricer.work(w).processing_s for w in work.backward)
    return forward, backward


def host_microbatch_s(pricer: Pricer) -> float:
    """The host's time per training microbatch (family ``launch``), 0 when the family does not give it."""
    launch = pricer.profile.launch
    if launch is None or "launch" not in pricer.view.curves or launch.issue_s_per_microbatch is None:
        return 0.0
    return launch.issue_s_per_microbatch


def per_microbatch_s(pricer: Pricer, model: ModelIR | None, training: bool) -> tuple[float, float] | None:
    """(forward, backward) seconds an iteration gets once per microbatch (the output layer, the host's
    microbatch time), or None when no family adds any (then the composition is left exactly as it is)."""
    profile = pricer.profile
    layer = output_layer_applies(profile, pricer.view)
    host = host_microbatch_s(pricer)
    if not training or (not layer and not host):
        return None
    forward = backward = 0.0
    if layer:
        if model is None:
            from harness.errors import EvidenceError
            raise EvidenceError(f"evidence profile {profile.name}", "output_layer",
                                "the family needs the model shape (cost_view(..., model=lowering.model))")
        forward, backward = output_layer_s(pricer, model)
    return forward + host, backward
