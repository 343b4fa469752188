"""The model's vocabulary layers as tasks: the input embedding lookup, the output layer and loss (Megatron's GPT).

A Transformer shape may state its token vocabulary (``model.vocabulary``).
For a training model that does, ``transformer-distribute`` adds these tasks
to the DistributedTaskIR's ``output_tasks`` and ``transformer-plan-work``
derives their facts into the PortablePlanIR's ``output_tasks``; the cost
views price them once per microbatch (:mod:`harness.cost.output_layer`). A
shape without a vocabulary has no output tasks (and the IR digests it always
had); an evidence profile may then supply its target's default vocabulary
(family ``output_layer``), priced through the same tasks.

Rules (per microbatch, ``tokens = microbatch x sequence length / CP``):

- the vocabulary is padded to a multiple of :data:`VOCABULARY_MULTIPLE` x TP
  (Megatron's ``make-vocab-size-divisible-by``, default 128) and split over
  the TP group (vocabulary-parallel);
- ``output.logits``: a linear ``[tokens, hidden] x [hidden, V_padded / TP]``,
  the seed's linear rule (forward, dgrad and wgrad);
- ``output.loss``: the softmax cross-entropy over those logits
  (:func:`harness.passes.rules.cross_entropy`: the traffic counted from
  Megatron's cross-entropy, :data:`~harness.passes.rules.LOSS_BYTES_PER_LOGIT`);
- inference has no output tasks (the measured families were fitted on
  training).

The embedding and the vocabulary weights are counted when the shape states
``tied_embeddings`` (true or false) next to its vocabulary; absent, the
Calculon convention holds (:func:`harness.calculon_compat.vocabulary_tied`,
rule ``vocabulary-weights-uncounted``): no lookup task, no weights, as before.
Counted:

- ``embedding.lookup``, the first output task (it runs first in the forward
  pass and its weight gradient last in the backward pass):
  :func:`harness.passes.rules.embedding` over the local ``V_padded / TP``
  rows. The TP reduction of its output (an all-reduce, or a reduce-scatter
  with sequence parallelism, one block ``g``'s message) is not priced;
- the weights (:func:`vocabulary_weights`, the PortablePlanIR's
  ``vocabulary_weights``), ``V_padded / TP x hidden`` elements per matrix:
  the embedding on the first pipeline stage; the output layer's own matrix
  when untied, on the last stage; tied, the output layer uses the
  embedding's, and with PP > 1 the last stage keeps a copy whose gradient is
  all-reduced with the first stage's over the embedding group (2 ranks, the
  pipeline tier) after the backward pass, as Megatron does
  (``_allreduce_word_embedding_grads``). The first stage (the one the memory
  figures describe) so holds one matrix, or two when PP = 1 and untied, each
  with its weights, gradient and Adam state (the rules of a block's linear,
  sharded over the gradient group with optimizer sharding); its optimizer
  step and the data-parallel synchronisation of those gradients (as a
  block's, over the same group) run once per iteration, with the embedding
  group's all-reduce, in the ``optimizer`` and ``data_parallel`` components
  (:func:`harness.cost.outside.outside_work`). In inference the
  first stage holds the weights only.
"""

from __future__ import annotations

from harness import calculon_compat as compat, session
from harness.ir import mesh
from harness.ir.distributed import CrossEntropyShape, EmbeddingShape, LinearShape, Retention, Task
from harness.ir.model import BYTES_PER_ELEMENT, ExecutionLayout, TransformerShape
from harness.ir.portable import NO_CAPACITY, NO_WORK, Capacity, Message, PlanTask, VocabularyWeights
from harness.passes.rules import derive

#: Megatron pads the vocabulary to a multiple of this x TP (``--make-vocab-size-divisible-by``, default 128).
VOCABULARY_MULTIPLE = 128
LOGITS, LOSS, LOOKUP = "output.logits", "output.loss", "embedding.lookup"


def padded_vocabulary(vocabulary: int, tensor_parallel: int) -> int:
    """The vocabulary padded as Megatron pads it: up to a multiple of 128 x TP."""
    multiple = VOCABULARY_MULTIPLE * tensor_parallel
    return -(-vocabulary // multiple) * multiple


def counted(shape: TransformerShape) -> bool | None:
    """Whether the shape's vocabulary matrices are tied (True), untied (False), or not counted (None: the
    Calculon convention, :func:`harness.calculon_compat.vocabulary_tied`; always None without a vocabulary)."""
    return None if shape.vocabulary is None else compat.vocabulary_tied(shape.tied_embeddings)


def _tasks(tokens: int, hidden: int, tensor_parallel: int, vocabulary: int, embedding: bool) -> tuple[Task, ...]:
    """The output tasks (memoized in the session's ``output_tasks``: one instance per arguments)."""
    return session.current().output_tasks.get_or_put(
        ("tasks", tokens, hidden, tensor_parallel, vocabulary, embedding),
        lambda: _new_tasks(tokens, hidden, tensor_parallel, vocabulary, embedding))


def _new_tasks(tokens: int, hidden: int, tensor_parallel: int, vocabulary: int, embedding: bool
               ) -> tuple[Task, ...]:
    local = padded_vocabulary(vocabulary, tensor_parallel) // tensor_parallel
    retention = Retention.trusted(activation_stored=True, output_stored=True, activation_reused=False)
    lookup = (Task.trusted(name=LOOKUP, phase="forward", clone_of=None, depends_on=(),
                           shape=EmbeddingShape.trusted(tokens=tokens, hidden=hidden, vocabulary=local,
                                                        participants=tensor_parallel), retention=retention),
              ) if embedding else ()
    logits = Task.trusted(name=LOGITS, phase="forward", clone_of=None, depends_on=(),
                          shape=LinearShape.trusted(m=tokens, n=hidden, k=local), retention=retention)
    loss = Task.trusted(name=LOSS, phase="forward", clone_of=None, depends_on=(LOGITS,),
                        shape=CrossEntropyShape.trusted(tokens=tokens, vocabulary=local,
                                                        participants=tensor_parallel), retention=retention)
    return *lookup, logits, loss


def output_tasks(shape: TransformerShape, execution: ExecutionLayout, vocabulary: int) -> tuple[Task, ...]:
    """The DistributedTaskIR output tasks of ``shape`` and ``execution`` with ``vocabulary`` (memoized in the
    session's ``output_tasks``): the embedding lookup first when the shape's own vocabulary matrices are
    counted (:func:`counted`)."""
    tokens = execution.microbatch * (shape.sequence_length // execution.context_degree)  # this CP rank's share
    embedding = vocabulary == shape.vocabulary and counted(shape) is not None
    return _tasks(tokens, shape.hidden, execution.tensor_parallel, vocabulary, embedding)


def vocabulary_weights(shape: TransformerShape, execution: ExecutionLayout) -> VocabularyWeights | None:
    """The first stage's vocabulary matrices (see the module rules), or None when they are not counted."""
    tied = counted(shape)
    if tied is None:
        return None
    e = execution
    return _weights(shape.vocabulary, shape.hidden, e.tensor_parallel, e.pipeline_parallel, tied, e.training,
                    e.bytes_per_element, mesh.group_size(e, mesh.gradient_group(e)), e.optimizer_sharding,
                    mesh.gradient_group(e), mesh.group_tier(e, mesh.gradient_group(e)),
                    mesh.group_tier(e, mesh.PIPELINE))


def _weights(*arguments) -> VocabularyWeights:
    """The vocabulary weights of these arguments (memoized in the session's ``output_tasks``)."""
    return session.current().output_tasks.get_or_put(("weights", *arguments), lambda: _new_weights(*arguments))


def _new_weights(vocabulary: int, hidden: int, tensor_parallel: int, pipeline_parallel: int, tied: bool,
                 training: bool, b: int, replicas: int, sharding: bool, group: mesh.Group, gradient_tier: int,
                 pipeline_tier: int) -> VocabularyWeights:
    local = padded_vocabulary(vocabulary, tensor_parallel) // tensor_parallel
    matrices = 1 if tied or pipeline_parallel > 1 else 2  # the first stage's: the embedding, and untied at PP 1
    facts = derive(EmbeddingShape.trusted(tokens=1, hidden=hidden, vocabulary=local, participants=tensor_parallel),
                   b, replicas if sharding else 1)
    c = facts.capacity
    if not training:
        return VocabularyWeights.trusted(capacity=NO_CAPACITY.trusted_replace(weight_bytes=matrices * c.weight_bytes),
                                         optimizer=(), gradient_messages=(), embedding_group=None)
    capacity = Capacity.trusted(weight_bytes=matrices * c.weight_bytes, activation_bytes=0, output_bytes=0,
                                weight_grad_bytes=matrices * c.weight_grad_bytes,
                                weight_grad_unsharded_bytes=matrices * c.weight_grad_unsharded_bytes,
                                activation_grad_bytes=0, optimizer_bytes=matrices * c.optimizer_bytes)
    gradient = capacity.weight_bytes
    ops = ("reduce_scatter", "all_gather") if sharding else ("all_reduce",)
    messages = tuple(Message.trusted(collective=op, message_bytes=gradient, participants=replicas,
                                     network_tier=gradient_tier) for op in ops) if replicas > 1 else ()
    shared = Message.trusted(collective="all_reduce", message_bytes=c.weight_bytes, participants=2,
                             network_tier=pipeline_tier) if tied and pipeline_parallel > 1 else None
    return VocabularyWeights.trusted(capacity=capacity, optimizer=(facts.optimizer,) * matrices,
                                     gradient_messages=messages,
                                     gradient_group=None if group == mesh.DATA else group, embedding_group=shared)


def plan_tasks(tasks: tuple[Task, ...], bytes_per_element: int) -> tuple[PlanTask, ...]:
    """The PortablePlanIR output tasks: each task's forward, dgrad and wgrad facts (see the module rules;
    memoized in the session's ``output_tasks``, so that a plan and :func:`model_plan_tasks` share instances)."""
    memo = session.current().output_tasks
    key = ("plan", tasks, bytes_per_element)
    hit = memo.get(key)
    return memo.put(key, _new_plan_tasks(tasks, bytes_per_element)) if hit is None else hit


def _new_plan_tasks(tasks: tuple[Task, ...], bytes_per_element: int) -> tuple[PlanTask, ...]:
    out = []
    for task in tasks:
        facts = derive(task.shape, bytes_per_element, 1)
        out.append(PlanTask.trusted(name=task.name, primitive=task.shape.kind, phase=task.phase, clone_of=None,
                                    forward=facts.forward, activation_grad=facts.activation_grad,
                                    weight_grad=facts.weight_grad, optimizer=NO_WORK, messages=None,
                                    capacity=NO_CAPACITY, retention=task.retention))
    return tuple(out)


def model_plan_tasks(shape: TransformerShape, execution: ExecutionLayout, vocabulary: int) -> tuple[PlanTask, ...]:
    """The plan output tasks of a model with ``vocabulary`` (the same instances the passes put in its plan)."""
    return plan_tasks(output_tasks(shape, execution, vocabulary), BYTES_PER_ELEMENT[execution.datatype])
