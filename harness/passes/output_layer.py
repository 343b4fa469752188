"""The model's output layer and loss as tasks: workload rules of a GPT head (Megatron's).

A Transformer shape may state its token vocabulary (``model.vocabulary``).
For a training model that does, ``transformer-distribute`` adds these tasks
to the DistributedTaskIR's ``output_tasks`` and ``transformer-plan-work``
derives their facts into the PortablePlanIR's ``output_tasks``; the cost
views price them once per microbatch on the last pipeline stage
(:mod:`harness.cost.output_layer`). A shape without a vocabulary has no
output tasks (and the IR digests it always had); an evidence profile may
then supply its target's default vocabulary (family ``output_layer``), priced
through the same tasks.

Rules (per microbatch, ``tokens = microbatch x sequence length``):

- the vocabulary is padded to a multiple of :data:`VOCABULARY_MULTIPLE` x TP
  (Megatron's ``make-vocab-size-divisible-by``, default 128) and split over
  the TP group (vocabulary-parallel);
- ``output.logits``: a linear ``[tokens, hidden] x [hidden, V_padded / TP]``,
  the seed's linear rule (forward, dgrad and wgrad);
- ``output.loss``: the softmax cross-entropy over those logits
  (:func:`harness.passes.rules.cross_entropy`: the traffic counted from
  Megatron's cross-entropy, :data:`~harness.passes.rules.LOSS_BYTES_PER_LOGIT`);
- the output weight is the (tied) embedding's: its memory, optimizer step and
  data-parallel sync are not modelled, like the embedding itself, so the plan
  tasks hold no capacity and no optimizer work;
- inference has no output tasks (the measured families were fitted on
  training).
"""

from __future__ import annotations

from harness import session

from harness.ir.distributed import CrossEntropyShape, LinearShape, Retention, Task
from harness.ir.model import BYTES_PER_ELEMENT, ExecutionLayout, TransformerShape
from harness.ir.portable import NO_CAPACITY, NO_WORK, PlanTask
from harness.passes.rules import derive

#: Megatron pads the vocabulary to a multiple of this x TP (``--make-vocab-size-divisible-by``, default 128).
VOCABULARY_MULTIPLE = 128
LOGITS, LOSS = "output.logits", "output.loss"


def padded_vocabulary(vocabulary: int, tensor_parallel: int) -> int:
    """The vocabulary padded as Megatron pads it: up to a multiple of 128 x TP."""
    multiple = VOCABULARY_MULTIPLE * tensor_parallel
    return -(-vocabulary // multiple) * multiple


def _tasks(tokens: int, hidden: int, tensor_parallel: int, vocabulary: int) -> tuple[Task, ...]:
    memo = session.current().output_tasks
    key = ("tasks", tokens, hidden, tensor_parallel, vocabulary)
    hit = memo.get(key)
    return memo.put(key, _new_tasks(tokens, hidden, tensor_parallel, vocabulary)) if hit is None else hit


def _new_tasks(tokens: int, hidden: int, tensor_parallel: int, vocabulary: int) -> tuple[Task, ...]:
    local = padded_vocabulary(vocabulary, tensor_parallel) // tensor_parallel
    retention = Retention.trusted(activation_stored=True, output_stored=True, activation_reused=False)
    logits = Task.trusted(name=LOGITS, phase="forward", clone_of=None, depends_on=(),
                          shape=LinearShape.trusted(m=tokens, n=hidden, k=local), retention=retention)
    loss = Task.trusted(name=LOSS, phase="forward", clone_of=None, depends_on=(LOGITS,),
                        shape=CrossEntropyShape.trusted(tokens=tokens, vocabulary=local,
                                                        participants=tensor_parallel), retention=retention)
    return logits, loss


def output_tasks(shape: TransformerShape, execution: ExecutionLayout, vocabulary: int) -> tuple[Task, ...]:
    """The DistributedTaskIR output tasks of ``shape`` and ``execution`` with ``vocabulary`` (memoized in the
    session's ``output_tasks``)."""
    tokens = execution.microbatch * (shape.sequence_length // execution.context_degree)  # this CP rank's share
    return _tasks(tokens, shape.hidden, execution.tensor_parallel, vocabulary)


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
