"""The ``physical`` projection of a ConcretePlanIR: its commands as they would run.

List schedule of one block program (:func:`run_program`): every queue runs
its commands in issue order, a command starts when its queue is free and the
commands it waits for are done. Durations come from the cost view:

- a whole compute command: its pass's processing time; a GEMM tile's flop
  phase ``flops_s / tiles`` and memory phase ``memory_s / tiles``;
- a network command: ``(message_s + local work) / tiles``, the local work
  being a TP collective's plan work or a reducing collective's reduction;
- a transfer: the tier-2 time of its bytes.

Resource conflict: while a network command of the TP tier is in flight, the
flop phase of a compute command progresses at ``1 - processor_usage`` of its
rate (the processor orchestrates the transfer). Memory phases and network
tiles do not overlap (a tile's memory phase waits for its step's network
tile: harness.ir.concrete). The makespan minus the compute queue's busy time
is the exposed time of the program.

:func:`physical_projection` composes the iteration with every
Calculon-compatibility rule of TP/DP overlap and offload switched off (their
physical alternatives, :data:`harness.calculon_compat.OVERLAP_RULES`); the
block times of that composition are the makespans of the block programs
(``tests/test_physical.py`` checks it to 1e-9 wherever the programs are the
closed forms' blocks).
"""

from __future__ import annotations

import dataclasses

from harness import calculon_compat as compat
from harness.cost.views import Pricer
from harness.ir.concrete import Command, ConcretePlanIR, Program
from harness.schedule.projection import Projection, calculon_projection, tier_of


@dataclasses.dataclass(frozen=True)
class ProgramRun:
    """The list schedule of one program."""

    makespan_s: float
    busy_s: dict[str, float]  # per queue
    component_busy_s: dict[str, float]  # compute-queue busy time per component
    exposed_s: float  # makespan - compute busy
    intervals: tuple[tuple[str, str, float, float], ...]  # (command, queue, start, end)


def duration_s(command: Command, c: ConcretePlanIR, pricer: Pricer) -> float:
    """Unslowed duration of one command (see the module rules)."""
    if command.kind == "compute":
        cost = pricer.work(command.work, optimizer=command.pass_name == "optimizer")
        if command.phase == "flops":
            return cost.compute_s / command.tiles
        if command.phase == "memory":
            return cost.memory_s / command.tiles
        return cost.processing_s
    if command.kind == "transfer":
        return pricer.tier2_s(command.transfer_bytes)
    t = pricer.message_s(command.message)
    if command.work is not None:
        t += pricer.work(command.work).processing_s
    elif command.reduction_operations:
        t += pricer.compute_s(command.reduction_operations, "vector")
    return t / command.tiles


def run_program(program: Program, c: ConcretePlanIR, pricer: Pricer) -> ProgramRun:
    """List-schedule ``program`` (see the module rules)."""
    pu = pricer.profile.networks[tier_of(c.queue_of["tensor"])].processor_usage
    tp_queue = c.queue_of["tensor"]
    remaining = {cmd.name: duration_s(cmd, c, pricer) for cmd in program.commands}
    pending: dict[str, list[Command]] = {}
    for cmd in program.commands:
        pending.setdefault(cmd.queue, []).append(cmd)
    running: dict[str, tuple[Command, float]] = {}
    done: dict[str, float] = {}
    busy = {q: 0.0 for q in pending}
    component: dict[str, float] = {}
    intervals = []
    now = 0.0
    while pending or running:
        for queue in list(pending):
            if queue in running:
                continue
            head = pending[queue][0]
            if all(d in done for d in head.depends_on):
                running[queue] = (head, now)
                pending[queue].pop(0)
                if not pending[queue]:
                    del pending[queue]
        if not running:
            raise RuntimeError(f"program {program.kind}/{program.block} deadlocks")
        network_busy = tp_queue in running
        rates = {q: (1 - pu) if cmd.phase == "flops" and network_busy else 1.0 for q, (cmd, _) in running.items()}
        step = min(remaining[cmd.name] / rates[q] for q, (cmd, _) in running.items())
        now += step
        for queue, (cmd, start) in list(running.items()):
            remaining[cmd.name] -= step * rates[queue]
            busy[queue] += step
            if queue == "compute":
                component[cmd.component] = component.get(cmd.component, 0.0) + step
            if remaining[cmd.name] <= 1e-18 * max(1.0, now):
                done[cmd.name] = now
                intervals.append((cmd.name, queue, start, now))
                del running[queue]
    return ProgramRun(now, busy, component, now - busy.get("compute", 0.0), tuple(intervals))


def physical_projection(c: ConcretePlanIR, pricer: Pricer) -> Projection:
    """The iteration with every overlap/offload compatibility rule off (their physical alternatives)."""
    with compat.switched_off(*compat.OVERLAP_RULES):
        projection = calculon_projection(c, pricer)
    return dataclasses.replace(projection, name="physical")

