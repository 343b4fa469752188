"""Family ``gradient_accumulation``: weight gradients accumulated without a fused kernel.

Megatron-DeepSpeed (the training software of the vTrain runs) comments out
Megatron's fused gradient accumulation, so its linear layers hand each weight
gradient to autograd, which adds it in place into the weight's ``.grad`` for
every microbatch after the first (the first one assigns it). The work is
counted from that code; nothing is fitted.

Rules:

- each task of a block whose weight-gradient pass writes ``g`` bytes (a
  linear's weight, a norm's scale and shift) costs, for every microbatch after
  the first, one vector operation of ``g / bytes_per_element`` additions that
  reads ``2 g`` (the stored and the new gradient) and writes ``g``; it is
  priced by the same :class:`~harness.cost.views.Pricer` as every operation
  (curves, processing mode, the host's issue time of family ``launch``);
- a block's accumulation time ``a`` is the sum over its tasks; every stage
  runs it in each backward pass after its first microbatch's;
- an iteration of ``m >= 2`` microbatches gets ``(m - 1) x blocks_per_stage x
  a`` in ``backward`` (the first, fullest stage's) and, with PP > 1,
  ``(PP - 1) x blocks_per_chunk x a`` in ``pipeline_bubble``: the last
  microbatch's backward passes through the earlier stages' last chunk, each
  with its accumulation (the 1F1B event simulation agrees exactly); one
  microbatch, or inference, gets nothing;
- clones (recomputation, recommunication) hold no weights; the output
  layer's weight is the tied embedding, whose memory, optimizer step and
  data-parallel sync are not modelled either, so it has no accumulation.

:func:`harness.cost.outside.outside_work` is the one place that prices it (the works of
:func:`accumulate_works`, the multiples of :func:`block_multiples`, in the plan's section of
:class:`harness.cost.outside.IterationTasks`); the closed form, the
projection of overlapped layouts, the search, the explanation, the trace and
the fit's evaluator follow it.
"""

from __future__ import annotations

from harness import session
from harness.cost.views import CostView
from harness.evidence.profile import EvidenceProfile
from harness.ir.portable import PlanTask, Schedule, Work


def accumulate_work(gradient_bytes: float, bytes_per_element: int) -> Work:
    """The in-place add of one weight gradient of ``gradient_bytes`` (memoized in the session's
    ``output_tasks``: one instance per size, so that its price is memoized too)."""
    memo = session.current().output_tasks
    key = ("accumulation", gradient_bytes, bytes_per_element)
    hit = memo.get(key)
    return memo.put(key, _accumulate_work(gradient_bytes, bytes_per_element)) if hit is None else hit


def _accumulate_work(gradient_bytes: float, bytes_per_element: int) -> Work:
    return Work.trusted(operations=gradient_bytes / bytes_per_element, bytes_read=2 * gradient_bytes,
                        bytes_written=gradient_bytes, engine="vector")


def accumulate_works(tasks: tuple[PlanTask, ...], bytes_per_element: int) -> tuple[tuple[PlanTask, Work], ...]:
    """(task, its accumulation) of every block task whose weight-gradient pass writes bytes, in plan order."""
    return tuple((t, accumulate_work(t.weight_grad.bytes_written, bytes_per_element)) for t in tasks
                 if t.phase == "forward" and t.weight_grad.bytes_written > 0)


def accumulation_applies(profile: EvidenceProfile, view: CostView) -> bool:
    """Family ``gradient_accumulation`` applies: the profile defines it and the view prices it."""
    return profile.gradient_accumulation is not None and "gradient_accumulation" in view.curves


def block_multiples(s: Schedule) -> tuple[int, int]:
    """(backward, pipeline_bubble) multiples of one block's accumulation time in an iteration (see the rules)."""
    if not s.training or s.microbatches < 2:
        return 0, 0
    return (s.microbatches - 1) * s.blocks_per_stage, (s.pipeline_parallel - 1) * s.blocks_per_chunk
