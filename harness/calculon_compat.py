"""Calculon 0.1.0 bit-compatibility rules, each with a name and a reason.

The estimate reproduces Calculon 0.1.0 bit for bit on everything without
overlap or offload. Where that needs a choice the physics does not make (an
order of summation, a grouping of products) or a convention that differs from
the plain physical accounting (a gradient buffer at mask size, a zero-byte
message), the choice lives here, as a :class:`CompatRule` with

- ``name``: what the physics modules call it by;
- ``reason``: what Calculon 0.1.0 does, and why we keep it;
- ``alternative``: the form used when the rule is switched off (the plain
  physical or arithmetic form);
- ``used_in``: the modules that apply it;
- ``function``: the function of this module that implements both forms (the
  physics modules call it; a test checks that every module in ``used_in``
  does).

Everything not listed here is the project's own physics (the seed's rules in
``harness/passes/rules.py``, the schedule in ``harness/schedule``). A reader
can so tell "physics" from "bit-compatibility with Calculon 0.1.0", and new
semantics (overlap, fitted evidence) can choose.

Rules are on by default. Which are off is a value of the estimator session
(:attr:`harness.session.Session.rules_off`, a frozenset of names), never a
global: :func:`applies` reads the current session's. :func:`switched_off` runs a
``with`` block in a fresh session with the named rules off (for experiments and
the tests that prove each rule matters: ``tests/test_calculon_compat.py``); the
fresh session's memos are computed under that setting only, so nothing memoized
under one setting is reused under the other, and concurrent threads may use
different settings (each in its own session).

Adding a rule: one function here, decorated with :func:`rule` (its record)
and branching on :func:`applies`, the call in the physics module, and its
entry in the test's table of expected effects.
"""

from __future__ import annotations

import contextlib
import dataclasses
import types
from typing import Callable, Iterator, Mapping, TypeVar

from harness import session
from harness.vocabulary import COMPONENTS


@dataclasses.dataclass(frozen=True)
class CompatRule:
    """One Calculon 0.1.0 compatibility rule."""

    name: str
    reason: str
    alternative: str
    used_in: tuple[str, ...]
    function: str


F = TypeVar("F", bound=Callable)


def rule(name: str, *, reason: str, alternative: str, used_in: tuple[str, ...]) -> Callable[[F], F]:
    """Record on the decorated function that it implements rule ``name`` (:data:`RULES` collects them)."""
    def record(function: F) -> F:
        function.compat_rule = CompatRule(name, reason, alternative, used_in, function.__name__)
        return function
    return record


def applies(function: Callable) -> bool:
    """Whether the rule ``function`` implements applies in the current session (it does unless
    :func:`switched_off`)."""
    return function.compat_rule.name not in session.current().rules_off


def checked_names(names: tuple[str, ...] | frozenset[str]) -> frozenset[str]:
    """``names`` as a frozenset, if each names a rule of :data:`RULES` (else a KeyError naming the unknown)."""
    unknown = sorted(set(names) - set(RULES))
    if unknown:
        raise KeyError(f"unknown compatibility rule(s) {unknown} (known: {', '.join(RULES)})")
    return frozenset(names)


@contextlib.contextmanager
def switched_off(*names: str) -> Iterator[session.Session]:
    """Apply the alternative form of the named rules inside the block: the block runs in a fresh session
    whose ``rules_off`` adds ``names`` to the current session's (its memos start empty, so no result computed
    under one setting is reused under the other)."""
    with session.using(session.Session(session.current().rules_off | checked_names(names))) as fresh:
        yield fresh


# --- composition of the iteration (harness.schedule.compose) ------------------------------------------------

#: Calculon's order of the iteration total. Every component appears once (checked below); a new
#: component is placed where Calculon adds its counterpart.
CALCULON_TOTAL_ORDER = ("forward", "backward", "optimizer", "forward_offload", "backward_offload", "recompute",
                        "recommunication", "pipeline_bubble", "tensor_parallel", "pipeline_parallel", "data_parallel")
COMPONENTS.require(CALCULON_TOTAL_ORDER, "harness.calculon_compat.CALCULON_TOTAL_ORDER")


@rule("total-in-calculon-order",
      reason="Calculon's get_total_time adds the components in its own order (forward, backward, optimizer, recompute, "
             "recommunication, bubble, TP, PP, DP), not in the reporting order; floating-point addition is not "
             "associative, so the reporting order changes the last bit of about a quarter of the totals.",
      alternative="the components summed in reporting order (harness.vocabulary.COMPONENTS)",
      used_in=("harness.schedule.calculon_forms",))
def iteration_total(components: Mapping[str, float]) -> float:
    """The iteration time: the sum of the timing components."""
    total = 0.0
    for name in CALCULON_TOTAL_ORDER if applies(iteration_total) else COMPONENTS:
        total += components[name]
    return total


@rule("portable-total-summed-again",
      reason="The closed-form composition of a portable plan sums its total again from the components, in "
             "Calculon's order (total-in-calculon-order), after the output layer, the host's microbatch time and "
             "the vocabulary matrices join them; the projection of a ConcretePlanIR and the search add their seconds "
             "to the composed total. Calculon prices none of that work, but the estimates were pinned with both "
             "orders and they differ in the last bit (733 of 5144 view figures of the corpora and cases under the "
             "measured revisions), so the one post-composition step keeps the portable plan's order as this rule.",
      alternative="the outside work's seconds added to the composed total for every plan (the projection's order)",
      used_in=("harness.schedule.calculon_forms",))
def outside_work_total(added_total_s, components: Mapping[str, float], portable: bool):
    """The iteration time once the work outside the blocks joined ``components``: ``added_total_s`` (the
    composed total plus that work's seconds), or, for a portable plan, the components summed again."""
    if portable and applies(outside_work_total):
        return iteration_total(components)
    return added_total_s


@rule("backward-as-two-products",
      reason="Calculon scales the activation-gradient and the weight-gradient block times by blocks x microbatches "
             "separately and adds the products (mult*ag + mult*wg); that is not bit-equal to mult*(ag + wg).",
      alternative="mult x (activation-gradient + weight-gradient block time)",
      used_in=("harness.schedule.calculon_forms",))
def backward_s(mult: int, activation_grad_s: float, weight_grad_s: float) -> float:
    """The backward component from the per-block gradient times."""
    if applies(backward_s):
        return mult * activation_grad_s + mult * weight_grad_s
    return mult * (activation_grad_s + weight_grad_s)


@rule("tensor-parallel-by-direction",
      reason="Calculon totals the exposed TP time of the forward and of the backward pass separately over all chunks "
             "and microbatches and adds the two totals; that is not bit-equal to totalling each block's forward + "
             "backward TP time once.",
      alternative="microbatches x chunks x (base blocks x (forward + backward) + edge blocks x (forward + backward))",
      used_in=("harness.schedule.calculon_forms",))
def tensor_parallel_s(per_chunk: int, base_blocks: int, edge_blocks: int, forward_base_s: float,
                      forward_edge_s: float, backward_base_s: float, backward_edge_s: float) -> float:
    """The exposed TP component; ``per_chunk`` = microbatches x chunks."""
    if applies(tensor_parallel_s):
        return (per_chunk * (base_blocks * forward_base_s + edge_blocks * forward_edge_s)
                + per_chunk * (base_blocks * backward_base_s + edge_blocks * backward_edge_s))
    return per_chunk * (base_blocks * (forward_base_s + backward_base_s)
                        + edge_blocks * (forward_edge_s + backward_edge_s))


@rule("pipeline-parallel-by-direction",
      reason="Calculon multiplies microbatches x transfers x p2p time for each direction and adds the two products; "
             "that is not bit-equal to microbatches x (forward transfers + backward transfers).",
      alternative="microbatches x (forward transfers x forward p2p + backward transfers x backward p2p)",
      used_in=("harness.schedule.calculon_forms",))
def pipeline_parallel_s(microbatches: int, forward_transfers: int, forward_s: float, backward_transfers: int,
                        backward_s: float) -> float:
    """The exposed pipeline p2p component."""
    if applies(pipeline_parallel_s):
        return microbatches * forward_transfers * forward_s + microbatches * backward_transfers * backward_s
    return microbatches * (forward_transfers * forward_s + backward_transfers * backward_s)


@rule("bubble-grouping",
      reason="Calculon writes the bubble as (PP-1) x chunk + (extra chunks x chunk - reduction); grouping the chunk "
             "counts first is not bit-equal when interleaving adds chunks or uneven stages subtract blocks.",
      alternative="(PP - 1 + extra chunks) x chunk - reduction",
      used_in=("harness.schedule.calculon_forms",))
def pipeline_bubble_s(full_chunks: int, extra_chunks: int, chunk_s: float, reduction_s: float) -> float:
    """The pipeline bubble from its chunk counts."""
    if applies(pipeline_bubble_s):
        return full_chunks * chunk_s + (extra_chunks * chunk_s - reduction_s)
    return (full_chunks + extra_chunks) * chunk_s - reduction_s


@rule("block-backward-in-calculon-order",
      reason="Calculon adds a block's backward critical path as recompute, recommunication, activation gradient, "
             "weight gradient, TP (and the edge block's p2p); the order of the passes changes the last bit of the "
             "chunk times that feed the bubble.",
      alternative="activation gradient, weight gradient, recompute, recommunication, TP (then p2p): "
                  "the order of the passes",
      used_in=("harness.schedule.calculon_forms",))
def block_backward_s(recompute_s: float, recommunication_s: float, activation_grad_s: float, weight_grad_s: float,
                     tensor_parallel_s: float) -> float:
    """One block's backward critical path without p2p."""
    if applies(block_backward_s):
        return recompute_s + recommunication_s + activation_grad_s + weight_grad_s + tensor_parallel_s
    return activation_grad_s + weight_grad_s + recompute_s + recommunication_s + tensor_parallel_s


# --- memory of the first stage (harness.schedule.memory) -------------------------------------------------------

@rule("stored-activations-minus-working-block",
      reason="Calculon counts blocks x in-flight microbatches - 1 stored block activations next to one block's working "
             "space: the block being computed holds its working space instead of its stored activations "
             "(act = working + storage x (blocks x factor - 1)).",
      alternative="every block and in-flight microbatch stores its activations, and the working space comes on top "
                  "(working + storage x blocks x factor)",
      used_in=("harness.schedule.memory",))
def activation_bytes(working: float, storage: float, blocks: int, factor: float) -> float:
    """Activation memory of the first stage without full recompute."""
    if applies(activation_bytes):
        return working + storage * (blocks * factor - 1)
    return working + storage * (blocks * factor)


@rule("one-fp32-gradient-plus-sharded",
      reason="Calculon keeps one block's weight gradient unsharded in fp32 (accumulated before the reduction) and the "
             "other blocks - 1 in the element datatype after optimizer sharding.",
      alternative="every block keeps its sharded gradient, and the one fp32 accumulation buffer comes on top "
                  "(fp32 + sharded x blocks)",
      used_in=("harness.schedule.memory",))
def weight_grad_bytes(unsharded_fp32: float, sharded: float, blocks: int) -> float:
    """Weight-gradient memory of the first stage."""
    if applies(weight_grad_bytes):
        return unsharded_fp32 + sharded * (blocks - 1)
    return unsharded_fp32 + sharded * blocks


# --- workload facts (harness.passes.rules, harness.passes.plan_work) -----------------------------------------

@rule("dropout-gradient-at-mask-size",
      reason="Calculon's DropOut returns its one-byte-per-element mask size for the activation gradient as well as for "
             "the stored activation, so the gradient buffer is counted at one byte per element.",
      alternative="the gradient w.r.t. the output in the element datatype (elements x bytes per element)",
      used_in=("harness.passes.rules",))
def dropout_gradient_bytes(elements: int, bytes_per_element: int) -> float:
    """Bytes of a dropout's activation-gradient buffer."""
    return elements if applies(dropout_gradient_bytes) else elements * bytes_per_element


@rule("pointwise-gradient-traffic-as-forward",
      reason="Calculon's SoftMax and GeLU charge their activation-gradient pass the forward pass's memory traffic "
             "(read one tensor, write one); the gradient reads two (the saved tensor and the output gradient).",
      alternative="the activation-gradient pass reads the saved tensor and the output gradient and writes the "
                  "input gradient",
      used_in=("harness.passes.rules",))
def pointwise_gradient_read_bytes(elements: int, bytes_per_element: int) -> float:
    """Bytes a softmax or GeLU gradient reads."""
    tensors = 1 if applies(pointwise_gradient_read_bytes) else 2
    return tensors * elements * bytes_per_element


@rule("batch-matmul-gradient-reads-output-gradient",
      reason="Calculon charges a BatchMatMul's activation-gradient pass its activations and output gradient once "
             "(read dC, write dA and dB); computing dA = dC B^T and dB = A^T dC also reads both inputs.",
      alternative="the activation-gradient pass reads both inputs and the output gradient and writes both "
                  "input gradients",
      used_in=("harness.passes.rules",))
def batch_matmul_gradient_read_bytes(inputs: int, output: int, bytes_per_element: int) -> float:
    """Bytes a batch matmul's gradient reads."""
    return (output if applies(batch_matmul_gradient_read_bytes) else inputs + output) * bytes_per_element


@rule("layer-norm-gradient-reads-one-tensor",
      reason="Calculon charges a LayerNorm's activation-gradient pass its weights, activation and output gradient "
             "(read weights and one tensor, write one); the gradient reads the saved input and the output gradient.",
      alternative="the activation-gradient pass reads the weights, the saved input and the output gradient",
      used_in=("harness.passes.rules",))
def layer_norm_gradient_read_bytes(elements: int, weights: int, bytes_per_element: int) -> float:
    """Bytes a layer norm's activation gradient reads."""
    tensors = 1 if applies(layer_norm_gradient_read_bytes) else 2
    return (weights + tensors * elements) * bytes_per_element


@rule("inference-backward-p2p-slot",
      reason="In inference with PP > 1, Calculon still prices a backward pipeline p2p transfer of zero bytes; its "
             "latency enters the edge block's backward time and so the bubble ((PP - 1) chunk times).",
      alternative="no backward pipeline message in inference (the bubble is forward chunks only)",
      used_in=("harness.passes.plan_work",))
def inference_backward_p2p() -> bool:
    """Whether an inference plan with PP > 1 keeps a zero-byte backward p2p message."""
    return applies(inference_backward_p2p)


@rule("vocabulary-weights-uncounted",
      reason="Calculon 0.1.0's model has no embedding: it prices no lookup and holds no embedding or output-layer "
             "weights. A case that does not state model.tied_embeddings keeps that convention (no embedding "
             "lookup, no vocabulary weights in memory, optimizer or gradient synchronisation, whether or not it "
             "states a vocabulary), so every existing digest, golden and estimate stays as it was; stating "
             "tied_embeddings (true or false) counts them (harness.passes.output_layer).",
      alternative="a model with a vocabulary counts them as tied when it does not state tied_embeddings (the "
                  "field's default)",
      used_in=("harness.passes.output_layer",))
def vocabulary_tied(tied_embeddings: bool | None) -> bool | None:
    """Whether the vocabulary matrices are tied (True), untied (False), or not counted at all (None)."""
    if tied_embeddings is not None or applies(vocabulary_tied):
        return tied_embeddings
    return True


# --- TP/DP overlap and offload (harness.schedule.projection, the calculon-0.1.0 projection) ---------------------
# The physical alternative of each rule is what the list schedule of the ConcretePlanIR's commands does
# (harness.schedule.physical); scripts/quirk_effects.py measures each rule on a corpus.

@rule("doubled-pipe-tile",
      reason="With pipe TP overlap the first network tile runs before any GEMM tile; Calculon adds it both to the "
             "GEMM's processing time (forward, backward, recompute) and to the exposed TP time.",
      alternative="the exposed first tile is counted once, as exposed TP time",
      used_in=("harness.schedule.projection",))
def pipe_tile(time_s: float, exposed_s: float, net_tile_s: float) -> tuple[float, float]:
    """(processing, exposed) of a pipe-overlapped pass after its first network tile."""
    if applies(pipe_tile):
        return time_s + net_tile_s, exposed_s + net_tile_s
    return time_s, exposed_s + net_tile_s


@rule("edge-block-equals-base-block",
      reason="Calculon tiles an overlapped GEMM against the base block's message in every block, so the chunk's edge "
             "block (where p2p_rs_ag sends a reduce-scatter/all-gather instead of an all-reduce) takes the base "
             "block's processing time and exposes its TP time; only its TP link time differs.",
      alternative="the edge block's overlapped GEMMs are tiled against the edge block's own messages (processing "
                  "and exposed time)",
      used_in=("harness.schedule.projection",))
def edge_tile_message(base, edge):
    """The message an edge block's overlapped GEMM is tiled against."""
    return base if applies(edge_tile_message) else edge


@rule("stateful-exposed-time",
      reason="Calculon reads a layer's exposed time from whatever its last processing-time call stored; in the block "
             "loop that is the forward pass, so an overlapped GEMM's recommunication exposes its forward exposed time.",
      alternative="the recommunication exposes what sticks out of the pass the re-sent message is tiled with (the "
                  "recomputed GEMM when it is recomputed, else its weight gradient)",
      used_in=("harness.schedule.projection",))
def recommunication_exposed(forward_exposed_s: float, tiled_exposed_s: float) -> float:
    """Exposed recommunication of an overlapped GEMM."""
    return forward_exposed_s if applies(recommunication_exposed) else tiled_exposed_s


@rule("weight-grad-tiled-against-recommunication",
      reason="Calculon tiles an overlapped GEMM's weight gradient against the re-sent forward message whenever the "
             "layer recommunicates, also when the recomputed GEMM is tiled against the same message and the "
             "recommunication exposed time is counted on its own.",
      alternative="the weight gradient is tiled against the re-sent message only when the GEMM is not recomputed",
      used_in=("harness.schedule.projection",))
def weight_grad_tiled(recomputed: bool) -> bool:
    """Whether the weight gradient of a recommunicating overlapped GEMM is tiled against the re-sent message."""
    return True if applies(weight_grad_tiled) else not recomputed


@rule("recommunication-without-reduction",
      reason="Calculon prices a re-sent reduce-scatter or all-reduce of an overlapped GEMM without its local "
             "reduction work.",
      alternative="a re-sent reducing collective reduces again",
      used_in=("harness.schedule.projection",))
def resent_reduces() -> bool:
    """Whether a re-sent reducing collective carries its local reduction."""
    return not applies(resent_reduces)


@rule("prefix-counter-recompute-windows",
      reason="The DP overlap windows subtract the recompute memory time and add the recompute flop time as Calculon's "
             "block_re_* counters, which add the running forward total at every recomputed layer.",
      alternative="the recomputed layers' own flop and memory times",
      used_in=("harness.schedule.projection",))
def recompute_window_s(prefix_s: float, own_s: float) -> float:
    """The recompute time a DP window uses."""
    return prefix_s if applies(recompute_window_s) else own_s


@rule("dp-window-microbatches-equal-pp",
      reason="Calculon's DP window of a chunk is PP microbatches of backward time (1F1B with as many microbatches as "
             "stages), whatever the number of microbatches.",
      alternative="min(microbatches, PP) microbatches",
      used_in=("harness.schedule.calculon_forms",))
def dp_window_microbatches(microbatches: int, stages: int) -> int:
    return stages if applies(dp_window_microbatches) else min(microbatches, stages)


@rule("dp-one-block-always-exposed",
      reason="Calculon exposes one block's DP sync on top of the chunks' and the last chunk's exposed time.",
      alternative="only the chunks' and the last chunk's exposed time",
      used_in=("harness.schedule.calculon_forms",))
def dp_exposed_s(block_sync_s: float, exposed_s: float) -> float:
    return block_sync_s + exposed_s if applies(dp_exposed_s) else exposed_s


@rule("dp-optimizer-credit-twice",
      reason="Without optimizer sharding the optimizer step's compute time is credited to the last chunk's DP window "
             "a second time (it is already in each block's window).",
      alternative="the last chunk's window gets the per-block credit only",
      used_in=("harness.schedule.calculon_forms",))
def last_window_optimizer_credit() -> bool:
    return applies(last_window_optimizer_credit)


@rule("dp-same-tier-as-pp-when-pp-1",
      reason="Calculon takes DP and PP traffic to collide whenever DP's tier is PP's, also with PP = 1, where no "
             "pipeline traffic exists (its p2p latency still enters the windows).",
      alternative="collisions (and the p2p in the windows) only with PP > 1",
      used_in=("harness.schedule.calculon_forms",))
def dp_collides_with_pp(same_tier: bool, stages: int) -> bool:
    return same_tier if applies(dp_collides_with_pp) else same_tier and stages > 1


@rule("p2p-latency-without-pipeline-message",
      reason="Calculon prices a block's pipeline p2p also where nothing is sent (PP = 1, and the backward direction in "
             "inference): a zero-byte p2p costs the tier's latency, which enters the edge block's forward and "
             "backward times and through them the offload overheads and the DP windows (not the PP component).",
      alternative="no p2p time where no pipeline message is sent",
      used_in=("harness.schedule.calculon_forms",))
def unsent_p2p_s(priced_s: float, sent: bool) -> float:
    """A block's p2p time in one direction: ``priced_s`` if a message is sent (or under the rule), else 0."""
    return priced_s if sent or applies(unsent_p2p_s) else 0.0


@rule("offload-backward-without-recompute-memory",
      reason="Calculon's backward offload overhead (T(size) + memory time - block time) counts the activation- and "
             "weight-gradient memory time but not the recomputation's, although the recomputed forward layers' memory "
             "accesses take memory tier 1's bandwidth from the transfer as well.",
      alternative="the recomputed layers' memory time counts too",
      used_in=("harness.schedule.calculon_forms",))
def offload_recompute_memory_s(recompute_memory_s: float) -> float:
    """The recompute memory time a backward offload overhead adds (0 under the rule)."""
    return 0.0 if applies(offload_recompute_memory_s) else recompute_memory_s


#: The rules of the calculon-0.1.0 projection of a ConcretePlanIR (TP/DP overlap and offload).
OVERLAP_RULES = ("doubled-pipe-tile", "edge-block-equals-base-block", "stateful-exposed-time",
                 "weight-grad-tiled-against-recommunication", "recommunication-without-reduction",
                 "prefix-counter-recompute-windows", "dp-window-microbatches-equal-pp", "dp-one-block-always-exposed",
                 "dp-optimizer-credit-twice", "dp-same-tier-as-pp-when-pp-1", "p2p-latency-without-pipeline-message",
                 "offload-backward-without-recompute-memory")


def _collected_rules() -> Mapping[str, CompatRule]:
    """Every rule of this module, by name, in definition order (names are unique)."""
    rules = [f.compat_rule for f in globals().values() if callable(f) and hasattr(f, "compat_rule")]
    names = [r.name for r in rules]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"compatibility rule(s) {twice} registered twice")
    return types.MappingProxyType({r.name: r for r in rules})


#: Every compatibility rule, by name (read-only: collected from the decorated functions above).
RULES = _collected_rules()
