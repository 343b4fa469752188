"""Pass ``transformer-concretize``: PortablePlanIR -> ConcretePlanIR.

Binds the plan's tasks to queues (rules in :mod:`harness.ir.concrete`):

- a compute task's pass becomes one compute command on ``compute``;
- a TP collective's message becomes a collective command on the TP tier's
  queue (its local copy/reduction work travels with it, as in the plan);
  an identity sends nothing and gets no command;
- an overlapped linear becomes ``tiles`` GEMM tiles (a flop phase and a
  memory phase each) and ``tiles - 1`` (ring) or ``tiles`` (pipe) network
  tiles of its message, with the step dependencies of the module rules; a
  pass whose message is the identity is one untiled compute command;
- a ring exchange (context parallelism's K/V ring) becomes its ``steps`` sends
  (kind ``p2p``) on its group's queue against ``steps + 1`` chunks of the tasks
  it hides behind (``1/(steps + 1)`` of each, a flop then a memory phase):
  chunk 0 on local data, step ``i``'s send issued with chunk ``i``, chunk
  ``i + 1`` waiting for it; in the forward pass, again with the recomputed
  hidden tasks, and with the backward messages against their activation
  gradients; the sends count in the component of the pass they stall;
- the backward program holds the recompute clones (forward work), the
  recommunication messages, then the activation and weight gradients in
  reverse task order; an overlapped linear's re-sent message is tiled with
  its recomputed GEMM when it is recomputed, else with its weight gradient;
- the edge block's forward program ends with the pipeline boundary p2p, its
  backward program with the backward p2p (PP > 1);
- per block: an ``optimizer`` program (training), a ``data_parallel``
  program (the gradient messages, training with DP > 1), and with offload a
  ``forward_offload`` and a ``backward_offload`` transfer on ``memory.tier2``
  (forward: the larger of the weights and the kept activations; backward:
  weights, kept activations and optimizer state, training only);
- buffers: the first-stage memory figures, offloaded ones split between a
  tier-1 staging copy and tier 2.

Options (typed, recorded in the PassCheckpoint; :meth:`TransformerConcretize.for_layout`
takes them from a layout): ``tp_overlap`` (none, ring, pipe), ``dp_overlap``,
the three offload switches and the network tier of each parallel dimension,
``<dimension>_tier`` for every dimension of ``harness.vocabulary.PARALLEL_DIMENSIONS``
(generated from it: the plan only names the tiers of the dimensions that send
something). The queue map names every dimension of kind ``required`` and every
``optional`` one whose group is larger than one processor. A task's messages go
to the queue of their group's tier (:func:`harness.ir.mesh.group_tier_of`). No
duration is produced and no hardware property is read.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Literal

from harness.ir import mesh
from harness.ir.concrete import Buffer, Command, ConcreteOptions, ConcretePlanIR, Program, Queue
from harness.ir.distributed import EXPERT_ALL_TO_ALL
from harness.ir.model import ExecutionLayout, Offload
from harness.ir.portable import NO_CAPACITY, Message, PlanTask, PortablePlanIR, Work
from harness.passes.base import ModulePass
from harness.passes.rules import reduction_operations
from harness.schedule.block import hidden_tasks
from harness.schedule.memory import BlockMemory, StageMemory, block_memory, stage_memory
from harness.vocabulary import PARALLEL_DIMENSIONS

COMPUTE = "compute"
TIER2 = "memory.tier2"


def network_queue(tier: int) -> str:
    return f"network.tier{tier}"


class _Builder:
    """Commands of one program with chained or explicit dependencies."""

    def __init__(self, b: int, queue_of_group: Callable[[mesh.Group], str]) -> None:
        self.b = b
        self.queue_of_group = queue_of_group  # the network queue a task's messages (of a group) travel on
        self.commands: list[Command] = []
        self.last: tuple[str, ...] = ()

    def add(self, name: str, queue: str, kind: str, task: str, pass_name: str, component: str, *,
            work: Work | None = None, message: Message | None = None, reduction: float = 0.0,
            transfer: float = 0.0, phase: str = "whole", tile: int = 0, tiles: int = 1,
            deps: tuple[str, ...] | None = None, chain: bool = True) -> str:
        command = Command.trusted_ordered({  # the fields in declaration order (a hot loop: tiles)
            "name": name, "queue": queue, "kind": kind, "task": task, "pass_name": pass_name,
            "component": component, "phase": phase, "tile": tile, "tiles": tiles, "work": work, "message": message,
            "reduction_operations": reduction, "transfer_bytes": transfer,
            "depends_on": self.last if deps is None else deps})
        self.commands.append(command)
        if chain:
            self.last = (name,)
        return name

    def reduction(self, message: Message) -> float:
        return reduction_operations(message.collective, message.message_bytes, self.b, message.participants)

    def collective(self, task: PlanTask, pass_name: str, component: str, message: Message | None,
                   work: Work | None, reducing: bool = True) -> None:
        if message is None:
            return
        self.add(f"{task.name}/{pass_name}.send", self.queue_of_group(task.messages.spans), "collective", task.name,
                 pass_name, component,
                 work=work, message=message, reduction=self.reduction(message) if reducing else 0.0)

    def tiled(self, task: PlanTask, pass_name: str, component: str, net_component: str, work: Work,
              message: Message | None, tiles: int, mode: str, reducing: bool = True) -> None:
        """An overlapped GEMM pass against ``message`` (untiled when it is the identity)."""
        if message is None or tiles == 1:
            self.add(f"{task.name}/{pass_name}", COMPUTE, "compute", task.name, pass_name, component, work=work)
            return
        reduction = self.reduction(message) if reducing else 0.0
        prefix = f"{task.name}/{pass_name}"
        step: tuple[str, ...] = self.last
        name, tp_queue, append = task.name, self.queue_of_group(task.messages.spans), self.commands.append
        make = Command.trusted_ordered
        # the commands of a tile step, fields in declaration order (the hot loop of the pass)
        for i in range(tiles):
            if mode == "pipe" or i > 0:  # ring: the first GEMM tile works on local data
                send = f"{prefix}/tile{i}.send"
                append(make({"name": send, "queue": tp_queue, "kind": "collective", "task": name,
                             "pass_name": pass_name, "component": net_component, "phase": "whole", "tile": i,
                             "tiles": tiles, "work": None, "message": message, "reduction_operations": reduction,
                             "transfer_bytes": 0.0, "depends_on": step}))
                if mode == "pipe" and i == 0:  # pipe: the first network tile before any GEMM tile
                    step, net = (send,), ()
                else:
                    net = (send,)
            else:
                net = ()
            flops = f"{prefix}/tile{i}.flops"
            append(make({"name": flops, "queue": COMPUTE, "kind": "compute", "task": name, "pass_name": pass_name,
                         "component": component, "phase": "flops", "tile": i, "tiles": tiles, "work": work,
                         "message": None, "reduction_operations": 0.0, "transfer_bytes": 0.0, "depends_on": step}))
            memory = f"{prefix}/tile{i}.memory"
            append(make({"name": memory, "queue": COMPUTE, "kind": "compute", "task": name, "pass_name": pass_name,
                         "component": component, "phase": "memory", "tile": i, "tiles": tiles, "work": work,
                         "message": None, "reduction_operations": 0.0, "transfer_bytes": 0.0,
                         "depends_on": (flops, *net)}))
            step = (memory,)
        self.last = step


    def ring(self, ring: PlanTask, hidden: list[tuple[PlanTask, Work]], pass_name: str, component: str,
             message: Message) -> None:
        """A ring exchange's ``steps`` sends of ``message`` on its group's queue against ``steps + 1`` chunks of
        the ``hidden`` tasks' pass (each chunk ``1/(steps + 1)`` of every hidden task's work, a flop then a
        memory phase; module rules): chunk 0 runs on local data; step ``i``'s send starts with chunk ``i`` (it
        forwards the K/V chunk ``i`` works on) and chunk ``i + 1`` waits for it (Megatron-Core's ring attention
        posts the next step's send/receive before computing the current one)."""
        steps = ring.messages.ring_steps
        tiles = steps + 1
        queue = self.queue_of_group(ring.messages.spans)
        start: tuple[str, ...] = self.last
        for i in range(tiles):
            send = None
            if i < steps:
                send = self.add(f"{ring.name}/{pass_name}/step{i}.send", queue, "p2p", ring.name, pass_name, component,
                                message=message, deps=start, chain=False)
            deps = start
            for task, work in hidden:
                flops = self.add(f"{task.name}/{pass_name}/chunk{i}.flops", COMPUTE, "compute", task.name, pass_name,
                                 component, work=work, phase="flops", tile=i, tiles=tiles, deps=deps)
                deps = (self.add(f"{task.name}/{pass_name}/chunk{i}.memory", COMPUTE, "compute", task.name,
                                 pass_name, component, work=work, phase="memory", tile=i, tiles=tiles,
                                 deps=(flops,)),)
            start = deps if send is None else (*deps, send)
        self.last = deps


def _rings(forward: list[PlanTask], fail: Callable[[str], Exception]
           ) -> dict[str, tuple[PlanTask, tuple[PlanTask, ...]]]:
    """Each ring exchange's hidden tasks (the plan's, in plan order), by the name of every hidden task; the
    hidden tasks of a ring must follow one another in the plan (the ring's chunks run them chunk by chunk)."""
    names = [t.name for t in forward]
    by_name = {t.name: t for t in forward}
    out: dict[str, tuple[PlanTask, tuple[PlanTask, ...]]] = {}
    for ring in forward:
        if ring.exchange != "ring":
            continue
        hidden = hidden_tasks(ring.messages, by_name)
        at = sorted(names.index(n) for n in hidden)
        if not at or at != list(range(at[0], at[0] + len(at))):
            raise fail(f"{ring.name}: the tasks it hides behind {list(hidden)} do not follow one another")
        entry = (ring, tuple(forward[i] for i in at))
        for n in hidden:
            out[n] = entry
    return out


def offload_transfer_bytes(recompute: str, o: Offload, block: BlockMemory) -> tuple[float, float]:
    """(forward, backward) bytes one block moves over the tier-2 link per microbatch: forward the larger
    of the offloaded weights and kept activations, backward the sum of what is offloaded (training)."""
    kept = block.activation_storage_bytes if recompute != "full" else block.activation_checkpoint_bytes
    weights = block.weight_bytes if o.weights else 0
    acts = kept if o.activations else 0
    size = 0
    if o.weights:
        size += block.weight_bytes
    if o.activations:
        size += kept
    if o.optimizer:
        size += block.optimizer_bytes
    return max(weights, acts), size


#: The network tier options of the pass, one ``<dimension>_tier`` per parallel dimension (generated from the
#: vocabulary, so that a new dimension has its option without an edit here).
_TierOptions = dataclasses.make_dataclass(
    "_TierOptions", [(f"{d}_tier", int, dataclasses.field(default=0)) for d in PARALLEL_DIMENSIONS], frozen=True)


@dataclasses.dataclass(frozen=True)
class TransformerConcretize(ModulePass[PortablePlanIR, ConcretePlanIR], _TierOptions):
    """Bind the plan to queues; tile overlapped pairs; place buffers."""

    name = "transformer-concretize"

    tp_overlap: Literal["none", "ring", "pipe"] = "none"
    dp_overlap: bool = False
    offload_weights: bool = False
    offload_activations: bool = False
    offload_optimizer: bool = False
    expert_overlap: bool = False

    @classmethod
    def for_layout(cls, e: ExecutionLayout) -> "TransformerConcretize":
        """The pass with the options a layout asks for."""
        return cls(tp_overlap=e.tp_overlap, dp_overlap=e.dp_overlap, offload_weights=e.offload.weights,
                   offload_activations=e.offload.activations, offload_optimizer=e.offload.optimizer,
                   expert_overlap=bool(e.expert_overlap), **{f"{d}_tier": mesh.tier(e, d) for d in PARALLEL_DIMENSIONS})

    def tiers(self) -> dict[str, int]:
        """The network tier of each parallel dimension (the ``<dimension>_tier`` options)."""
        return {d: getattr(self, f"{d}_tier") for d in PARALLEL_DIMENSIONS}

    def requires(self, ir: PortablePlanIR) -> None:
        if not ir.tasks:
            raise self.fail("the PortablePlanIR has no tasks")
        overlapped = any(t.exchange == "tiled" for t in ir.tasks)
        if overlapped != (self.tp_overlap != "none"):
            raise self.fail(f"tp_overlap={self.tp_overlap} but the plan {'has' if overlapped else 'has no'} "
                            "overlapped linears")
        if self.dp_overlap and not (ir.schedule.training and ir.data_parallel is not None):
            raise self.fail("DP overlap needs training with DP > 1")
        if self.offload_optimizer and not ir.schedule.training:
            raise self.fail("optimizer offload needs training")
        if self.expert_overlap and not (ir.schedule.training and
                                        sum(t.primitive == EXPERT_ALL_TO_ALL for t in ir.tasks) >= 2):
            raise self.fail("expert overlap needs training with the expert all-to-alls of a MoE block")

    def apply(self, plan: PortablePlanIR) -> ConcretePlanIR:
        offload = Offload.trusted(weights=self.offload_weights, activations=self.offload_activations,
                                  optimizer=self.offload_optimizer)
        options = ConcreteOptions.trusted(tp_overlap=self.tp_overlap, dp_overlap=self.dp_overlap, offload=offload,
                                          expert_overlap=True if self.expert_overlap else None)
        tiers = self.tiers()
        sizes = {use.dimension: use.group_size for use in plan.network_use}
        used: dict[int, list[str]] = {}
        for dim, tier in tiers.items():
            if sizes.get(dim, 1) > 1:
                used.setdefault(tier, []).append(dim)
        mapped = [d for d in PARALLEL_DIMENSIONS if PARALLEL_DIMENSIONS.kind(d) == "required" or sizes.get(d, 1) > 1]
        o = offload
        offloading = o.weights or o.activations or o.optimizer
        queues = [Queue.trusted(name=COMPUTE, kind="compute", network_tier=None, dimensions=())]
        queues += [Queue.trusted(name=network_queue(t), kind="network", network_tier=t, dimensions=tuple(d))
                   for t, d in sorted(used.items())]
        if offloading:
            queues.append(Queue.trusted(name=TIER2, kind="memory_tier2", network_tier=None, dimensions=()))
        queue_of = {dim: network_queue(tiers[dim]) for dim in mapped}
        queue_of["offload"] = TIER2
        tiles = sizes.get("tensor", 1) if self.tp_overlap != "none" else 1
        block = block_memory(plan)
        stage = stage_memory(plan, block)
        programs = self._programs(plan, options, queue_of, tiles, block)
        return ConcretePlanIR.trusted(
            datatype=plan.datatype, bytes_per_element=plan.bytes_per_element, options=options, tp_tiles=tiles,
            queues=tuple(queues), tasks=plan.tasks, programs=programs,
            buffers=self.buffers(plan, offload, block, stage), schedule=plan.schedule, pipeline=plan.pipeline,
            data_parallel=plan.data_parallel, queue_of=queue_of)

    def _programs(self, plan: PortablePlanIR, options: ConcreteOptions, queue_of: dict[str, str], tiles: int,
                  block: BlockMemory) -> tuple[Program, ...]:
        b = plan.bytes_per_element
        training = plan.schedule.training
        mode = options.tp_overlap
        tiers, sizes = self.tiers(), {use.dimension: use.group_size for use in plan.network_use}

        def queue_of_group(spans: mesh.Group) -> str:
            return network_queue(mesh.group_tier_of(sizes, tiers, spans))
        recomputed = {t.clone_of for t in plan.tasks if t.phase == "recompute"}
        resent = {t.clone_of: t for t in plan.tasks if t.phase == "recommunication"}
        forward = [t for t in plan.tasks if t.phase == "forward"]
        rings = _rings(forward, self.fail)  # context parallelism's K/V rings, by the tasks they hide behind
        # where the edge block sends what the base block sends, its programs are the base block's (the same
        # immutable commands) followed by the boundary send
        same = all(t.messages.forward_edge == t.messages.forward_base and
                   t.messages.backward_edge == t.messages.backward_base for t in plan.tasks if t.messages)
        programs = []
        built: dict[str, _Builder] = {}
        for kind in ("base", "edge"):
            edge = kind == "edge"
            fw = _Builder(b, queue_of_group)
            if edge and same:
                fw.commands, fw.last = list(built["forward"].commands), built["forward"].last
            ringed: set[str] = set()
            for task in forward if not (edge and same) else ():
                msgs = task.messages
                if task.exchange == "ring":  # its sends run with the chunks of the tasks it hides behind
                    continue
                if task.name in rings:
                    ring, hidden = rings[task.name]
                    if ring.name not in ringed:
                        ringed.add(ring.name)
                        fw.ring(ring, [(h, h.forward) for h in hidden], "forward", "forward",
                                ring.messages.forward_base)
                    continue
                if task.exchange == "collective":
                    fw.collective(task, "forward", "tensor_parallel", msgs.forward_edge if edge else msgs.forward_base,
                                  task.forward)
                elif task.exchange == "tiled":
                    fw.tiled(task, "forward", "forward", "tensor_parallel", task.forward,
                             msgs.forward_edge if edge else msgs.forward_base, tiles, mode)
                else:
                    fw.add(f"{task.name}/forward", COMPUTE, "compute", task.name, "forward", "forward",
                           work=task.forward)
            built["forward"] = fw
            if edge and plan.pipeline.forward is not None:
                fw.add("pipeline/forward.send", queue_of["pipeline"], "p2p", "pipeline", "forward",
                       "pipeline_parallel", message=plan.pipeline.forward)
            programs.append(Program.trusted(kind="forward", block=kind, commands=tuple(fw.commands)))
            if not training:
                continue
            bw = _Builder(b, queue_of_group)
            if edge and same:
                bw.commands, bw.last = list(built["backward"].commands), built["backward"].last
            ringed = set()
            for task in plan.tasks if not (edge and same) else ():
                if task.phase == "recompute" and task.clone_of in rings:  # the ring redone with its recomputed tasks
                    ring, hidden = rings[task.clone_of]
                    if ring.name not in ringed:
                        ringed.add(ring.name)
                        clones = [t for t in plan.tasks if t.phase == "recompute" and t.clone_of in
                                  {h.name for h in hidden}]
                        bw.ring(ring, [(t, t.forward) for t in clones], "forward", "recompute",
                                ring.messages.forward_base)
                elif task.phase == "recompute" and task.exchange == "tiled":
                    msgs = task.messages
                    bw.tiled(task, "forward", "recompute", "recommunication", task.forward,
                             msgs.forward_edge if edge else msgs.forward_base, tiles, mode)
                elif task.phase == "recompute":
                    bw.add(f"{task.name}/forward", COMPUTE, "compute", task.name, "forward", "recompute",
                           work=task.forward)
                elif task.phase == "recommunication" and task.exchange == "collective":
                    bw.collective(task, "forward", "recommunication",
                                  task.messages.forward_edge if edge else task.messages.forward_base, None,
                                  reducing=False)
            ringed = set()
            for task in reversed(forward) if not (edge and same) else ():
                msgs = task.messages
                if task.exchange == "ring":
                    continue
                if task.name in rings:  # the backward ring (K/V and their gradients) against the hidden gradients
                    ring, hidden = rings[task.name]
                    if ring.name not in ringed:
                        ringed.add(ring.name)
                        bw.ring(ring, [(h, h.activation_grad) for h in reversed(hidden)], "activation_grad",
                                "backward", ring.messages.backward_base)
                    if task.weight_grad.operations or task.weight_grad.bytes_accessed:
                        bw.add(f"{task.name}/weight_grad", COMPUTE, "compute", task.name, "weight_grad", "backward",
                               work=task.weight_grad)
                    continue
                if task.exchange == "collective":
                    bw.collective(task, "activation_grad", "tensor_parallel",
                                  msgs.backward_edge if edge else msgs.backward_base, task.activation_grad)
                    continue
                if task.exchange == "tiled":
                    bw.tiled(task, "activation_grad", "backward", "tensor_parallel", task.activation_grad,
                             msgs.backward_edge if edge else msgs.backward_base, tiles, mode)
                    again = resent.get(task.name)
                    redo = None
                    if again is not None and task.name not in recomputed:
                        redo = again.messages.forward_edge if edge else again.messages.forward_base
                    bw.tiled(task, "weight_grad", "backward", "recommunication", task.weight_grad, redo, tiles,
                             mode, reducing=False)
                    continue
                bw.add(f"{task.name}/activation_grad", COMPUTE, "compute", task.name, "activation_grad", "backward",
                       work=task.activation_grad)
                if task.weight_grad.operations or task.weight_grad.bytes_accessed:
                    bw.add(f"{task.name}/weight_grad", COMPUTE, "compute", task.name, "weight_grad", "backward",
                           work=task.weight_grad)
            built["backward"] = bw
            if edge and plan.pipeline.backward is not None:
                bw.add("pipeline/backward.send", queue_of["pipeline"], "p2p", "pipeline", "activation_grad",
                       "pipeline_parallel", message=plan.pipeline.backward)
            programs.append(Program.trusted(kind="backward", block=kind, commands=tuple(bw.commands)))
        if training:
            opt = _Builder(b, queue_of_group)
            for task in forward:
                if task.optimizer.operations or task.optimizer.bytes_accessed:
                    opt.add(f"{task.name}/optimizer", COMPUTE, "compute", task.name, "optimizer", "optimizer",
                            work=task.optimizer)
            programs.append(Program.trusted(kind="optimizer", block="any", commands=tuple(opt.commands)))
        if plan.data_parallel is not None:
            dp = _Builder(b, queue_of_group)
            for i, message in enumerate(plan.data_parallel.messages):
                dp.add(f"data_parallel/{message.collective}", queue_of_group(plan.data_parallel.spans), "collective",
                       "data_parallel", "weight_grad", "data_parallel", message=message)
            expert = plan.data_parallel.expert  # a MoE block's expert weights, over expert-DP
            for message in expert.messages if expert is not None else ():
                dp.add(f"data_parallel/expert_{message.collective}", queue_of_group(expert.spans), "collective",
                       "data_parallel", "weight_grad", "data_parallel", message=message)
            programs.append(Program.trusted(kind="data_parallel", block="any", commands=tuple(dp.commands)))
        o = options.offload
        if o.weights or o.activations or o.optimizer:
            forward_bytes, size = offload_transfer_bytes(plan.schedule.recompute, o, block)
            fw = _Builder(b, queue_of_group)
            fw.add("offload/forward", TIER2, "transfer", "offload", "forward", "forward_offload",
                   transfer=forward_bytes, deps=())
            programs.append(Program.trusted(kind="forward_offload", block="any", commands=tuple(fw.commands)))
            if training:
                bw = _Builder(b, queue_of_group)
                bw.add("offload/backward", TIER2, "transfer", "offload", "activation_grad", "backward_offload",
                       transfer=size, deps=())
                programs.append(Program.trusted(kind="backward_offload", block="any", commands=tuple(bw.commands)))
        return tuple(programs)

    @staticmethod
    def buffers(plan: PortablePlanIR, o: Offload, block: BlockMemory, stage: StageMemory) -> tuple[Buffer, ...]:
        """Tier residency of every memory figure (Calculon 0.1.0's staging rules)."""
        s = plan.schedule
        training = s.training
        full = s.recompute == "full"

        def buf(name, total, offloaded, tier1, tier2):
            return Buffer.trusted(name=name, total_bytes=total, offloaded=offloaded, tier1_bytes=tier1,
                                  tier2_bytes=tier2)

        # The vocabulary matrices (a shape that states tied_embeddings) stay in tier 1: offload streams blocks.
        v = NO_CAPACITY if plan.vocabulary_weights is None else plan.vocabulary_weights.capacity
        resident = block.weight_bytes if not block.quantized_weight_bytes else (
            block.weight_bytes + block.quantized_weight_bytes)  # a block's weights with their quantized copies
        out = [buf("weight", stage.weight, o.weights, 2 * resident + v.weight_bytes if o.weights
                   else stage.weight, stage.weight - v.weight_bytes if o.weights else 0)]
        if o.activations and not full:
            out.append(buf("activation", stage.activation, True,
                           block.activation_working_bytes + block.activation_storage_bytes, stage.activation))
            out.append(buf("activation_checkpoint", stage.activation_checkpoint, False, 0, 0))
        elif o.activations:
            out.append(buf("activation", stage.activation, False, block.activation_working_bytes, 0))
            out.append(buf("activation_checkpoint", stage.activation_checkpoint, True,
                           2 * block.activation_checkpoint_bytes, stage.activation_checkpoint))
        else:
            out.append(buf("activation", stage.activation, False, stage.activation, 0))
            out.append(buf("activation_checkpoint", stage.activation_checkpoint, False, stage.activation_checkpoint,
                           0))
        if o.optimizer and training:
            out.append(buf("weight_grad", stage.weight_grad, True,
                           block.weight_grad_unsharded_bytes + block.weight_grad_bytes + v.weight_grad_bytes,
                           block.weight_grad_bytes * s.blocks_per_stage))
            out.append(buf("optimizer", stage.optimizer, True, 2 * block.optimizer_bytes + v.optimizer_bytes,
                           stage.optimizer - v.optimizer_bytes))
        else:
            out.append(buf("weight_grad", stage.weight_grad, False, stage.weight_grad, 0))
            out.append(buf("optimizer", stage.optimizer, False, stage.optimizer, 0))
        out.append(buf("activation_grad", stage.activation_grad, False, stage.activation_grad, 0))
        return tuple(out)

    def ensures(self, ir: ConcretePlanIR) -> None:
        """Unique command names per program, known queues, dependencies on earlier commands of the program, work
        exactly on compute commands (on the compute queue), a message on every network command, memory >= 0.
        A command object already checked (the edge block reuses the base block's) is checked once per program
        position it could differ in: its dependencies."""
        queues = {q.name for q in ir.queues}
        checked: set[int] = set()
        for program in ir.programs:
            seen: set[str] = set()
            for command in program.commands:
                name = command.name
                if name in seen:
                    raise self.fail(f"{program.kind}/{program.block}: duplicate command {name}")
                for d in command.depends_on:
                    if d not in seen:
                        raise self.fail(f"{name} waits for unknown or later command(s) {[d]}")
                seen.add(name)
                if id(command) in checked:
                    continue
                if command.queue not in queues:
                    raise self.fail(f"{name}: unknown queue {command.queue}")
                kind = command.kind
                if (kind == "compute") != (command.work is not None and command.queue == "compute"):
                    raise self.fail(f"{name}: compute commands (only) run work on the compute queue")
                if (kind == "collective" or kind == "p2p") and command.message is None:
                    raise self.fail(f"{name}: a network command without a message")
                checked.add(id(command))
        if ir.tier1_total_bytes < 0 or ir.tier2_total_bytes < 0:
            raise self.fail("negative memory")
