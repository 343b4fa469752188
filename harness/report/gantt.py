"""Gantt chart of a simulated pipeline iteration (PNG, matplotlib Agg).

One row per stage (stage 0 on top); forward chunks in blues, backward
chunks in oranges (darker = later chunk); the first stage's data-parallel
sync and optimizer step after the pipeline in grey and green; white is idle.
A bar carries its microbatch number when it is wide enough to read. When the
whole iteration is too dense to read, two zoomed panels below it show the
warm-up and the cool-down at the same scale.

A physical schedule (TP/DP overlap, offload: :mod:`harness.trace.queues`) adds
one row per queue of the first stage below the stages, labelled ``stage 0
<queue>`` (``compute``, each ``network.tierN``, ``memory.tier2``, and
``exposed``: the compute queue's idle time), each bar coloured by the
component it runs or, on ``exposed``, waits for; the rows hold what the
trace recorded (its first ``--task-microbatches`` microbatches and the step),
the same intervals as the JSON trace's queue threads.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from harness.outputs import atomic_output
from harness.schedule.physical import Event
from harness.schedule.simulate import Simulation

DENSE_OPS = 48  # more operations per stage than this: add the zoomed panels
LABEL_MIN_IN = 0.16  # narrowest bar (inches) that gets its microbatch number
STEP_COLORS = {"data_parallel": "0.55", "optimizer": "tab:green"}
EXPOSED = "exposed"  # the queue trace's row of the compute queue's idle time (harness.trace.queues.EXPOSED)


def queue_rows(events: Sequence[Event], queues: Sequence[str]) -> tuple[tuple[str, tuple[Event, ...]], ...]:
    """(queue, its events) for each of ``queues`` in order, then ``exposed``: the rows a physical schedule adds."""
    names = [*queues, EXPOSED]
    return tuple((name, tuple(e for e in events if e.queue == name)) for name in names)


#: the components the stage rows already draw keep their colours; the others take these, in sorted order
OTHER_COLORS = ("tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan", "tab:red", "gold", "black")


def _component_colors(rows) -> dict[str, object]:
    """One colour per component the rows hold (the same on every row): forward, backward, data_parallel and
    optimizer as the stage rows draw them, the others from :data:`OTHER_COLORS` in sorted order."""
    known = {"forward": _shade("forward", 0, 1), "backward": _shade("backward", 0, 1), **STEP_COLORS}
    components = sorted({e.component for _, events in rows for e in events})
    others = iter(OTHER_COLORS * (1 + len(components) // len(OTHER_COLORS)))
    return {c: known[c] if c in known else next(others) for c in components}


def _shade(phase: str, chunk: int, chunks: int):
    cmap = colormaps["Blues" if phase == "forward" else "Oranges"]
    low, high = (0.5, 0.9) if phase == "forward" else (0.35, 0.8)
    return cmap(low + (high - low) * (chunk / max(chunks - 1, 1)))


def _ink(rgba) -> str:
    """Black or white text, whichever reads on ``rgba``."""
    r, g, b = rgba[:3]
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.55 else "white"


def _steps(sim: Simulation) -> list[tuple[str, float, float]]:
    start, out = sim.makespan_s, []
    for name, width in (("data_parallel", sim.data_parallel_s), ("optimizer", sim.optimizer_s)):
        if width:
            out.append((name, start, width))
            start += width
    return out


def _draw_queues(ax: Axes, rows, colors, first_row: int, x0: float, x1: float) -> None:
    """The queue rows from ``first_row`` down, each bar its event's interval coloured by its component."""
    for index, (name, events) in enumerate(rows):
        by_component: dict[str, list[tuple[float, float]]] = {}
        for e in events:
            if e.end_s > x0 and e.start_s < x1 and e.end_s > e.start_s:
                by_component.setdefault(e.component, []).append((e.start_s, e.end_s - e.start_s))
        for component, bars in sorted(by_component.items()):
            ax.broken_barh(bars, (first_row + index - 0.42, 0.84), facecolors=colors[component], edgecolor="none",
                           hatch="////" if name == EXPOSED else None, label=f"{name}: {component}")
    ax.axhline(first_row - 0.5, color="0.4", linewidth=0.8)


def _draw(ax: Axes, sim: Simulation, x0: float, x1: float, width_in: float, rows=(), colors=None) -> None:
    pp, chunks = sim.pipeline_parallel, sim.chunks_per_stage
    scale = width_in / (x1 - x0)
    for stage, ops in enumerate(sim.ops):
        groups: dict[tuple[str, int], list[tuple[float, float]]] = {}
        visible = [op for op in ops if op.end_s > x0 and op.start_s < x1]
        for op in visible:
            groups.setdefault((op.phase, op.chunk), []).append((op.start_s, op.duration_s))
        thin = len(visible) > width_in * 12
        for (phase, chunk), bars in groups.items():
            ax.broken_barh(bars, (stage - 0.42, 0.84), facecolors=_shade(phase, chunk, chunks),
                           edgecolor="none" if thin else "white", linewidth=0.5)
        for op in visible:
            inside = op.start_s >= x0 and op.end_s <= x1
            if inside and pp <= 40 and op.duration_s * scale >= LABEL_MIN_IN * (1 + 0.4 * (op.microbatch >= 100)):
                ax.text((op.start_s + op.end_s) / 2, stage, str(op.microbatch), ha="center", va="center", fontsize=6.5,
                        color=_ink(_shade(op.phase, op.chunk, chunks)), clip_on=True)
    for name, start, width in _steps(sim):
        ax.broken_barh([(start, width)], (-0.42, 0.84), facecolors=STEP_COLORS[name])
    if rows:
        _draw_queues(ax, rows, colors, pp, x0, x1)
    ax.set_xlim(x0, x1)
    ax.set_ylim(pp + len(rows) - 0.5, -0.5)
    every = max(1, -(-pp // 16))
    ticks = list(range(0, pp, every)) + [pp + i for i in range(len(rows))]
    ax.set_yticks(ticks, [f"stage {s}" for s in range(0, pp, every)] + [f"stage 0 {name}" for name, _ in rows],
                  fontsize=7)
    ax.grid(axis="x", color="0.85", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.tick_params(axis="x", labelsize=8)


ZOOM_IN = 6.0  # width of a zoomed panel, inches


def _window(sim: Simulation) -> float:
    """Width of the zoomed panels: the first stage's warm-up plus a few steady operations, narrowed until the
    shortest operation of the first stage is wide enough for a three-digit microbatch number (an interleaved
    warm-up of dozens of short forwards left every bar too narrow for its number)."""
    first = sim.ops[0]
    backward = [op for op in first if op.phase == "backward"]
    edge = backward[min(3, len(backward) - 1)].end_s if backward else sim.ops[-1][min(sim.pipeline_parallel,
                                                                                    len(sim.ops[-1]) - 1)].end_s
    shortest = min((op.duration_s for op in first if op.duration_s > 0), default=edge)
    return min(edge, sim.total_s / 2, ZOOM_IN * shortest / (LABEL_MIN_IN * 1.45))


def write_gantt(sim: Simulation, path: Path | str, title: str = "",
                queues: Sequence[tuple[str, Sequence[Event]]] = (), queues_note: str = "") -> Path:
    """Draw ``sim`` as a Gantt chart into ``path`` (PNG) and return the path. ``queues``: a physical schedule's
    first-stage queue rows (:func:`queue_rows`), drawn below the stages in every panel; ``queues_note``: what
    they cover, said in the title."""
    pp, chunks = sim.pipeline_parallel, sim.chunks_per_stage
    dense = max(len(ops) for ops in sim.ops) > DENSE_OPS
    colors = _component_colors(queues)
    row_in = max(0.11, min(0.3, 3.0 / pp))
    top_in = 0.9 + row_in * (pp + len(queues))
    columns = 6 if queues else 8
    legend_rows = -(-(2 * chunks + 2 + len(colors) + 1) // columns)
    fig = Figure(figsize=(14, 1.3 + 0.2 * legend_rows + top_in * (1.8 if dense else 1)), dpi=110)
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(2 if dense else 1, 2, height_ratios=[1, 0.8] if dense else [1])
    main = fig.add_subplot(grid[0, :])
    _draw(main, sim, 0.0, sim.total_s * 1.005, 12.5, queues, colors)
    main.set_xlabel("time in the iteration (s)", fontsize=9)
    if dense:
        w = _window(sim)
        for column, (x0, x1, label) in enumerate(((0.0, w, "warm-up"),
                                                  (sim.total_s - w, sim.total_s * 1.002, "cool-down"))):
            ax = fig.add_subplot(grid[1, column])
            _draw(ax, sim, x0, x1, ZOOM_IN, queues, colors)
            ax.set_title(f"{label}: {x0:.4g} - {min(x1, sim.total_s):.4g} s (microbatch numbers in the bars)",
                         fontsize=9)
            ax.set_xlabel("time in the iteration (s)", fontsize=9)
            main.axvspan(x0, x1, color="0.5", alpha=0.08, zorder=0)
    schedule = f"interleaved 1F1B, {chunks} chunks/stage" if chunks > 1 else "1F1B"
    if not sim.training:
        schedule = "forward only" + (f", {chunks} chunks/stage" if chunks > 1 else "")
    fig.suptitle(f"{title}  —  {schedule}, PP={pp}, {sim.microbatches} microbatches\n"
                 f"iteration {sim.total_s:.4g} s; stage-0 idle {sim.first_stage_idle_s:.4g} s vs closed-form "
                 f"bubble {sim.closed_form_bubble_s:.4g} s (difference {sim.bubble_difference_s:+.2g} s)"
                 + (f"\nbelow the stages: stage 0's queues{queues_note} (exposed: compute idle, hatched in the colour "
                    f"of what it waits for)" if queues else ""), fontsize=10)
    handles = [Patch(color=_shade("forward", c, chunks), label=f"forward chunk {c}") for c in range(chunks)]
    if sim.training:
        handles += [Patch(color=_shade("backward", c, chunks), label=f"backward chunk {c}") for c in range(chunks)]
    handles += [Patch(color=STEP_COLORS[name], label=f"{name.replace('_', ' ')} (stage 0)") for name, _, _ in _steps(sim)]
    handles += [Patch(facecolor=color, label=f"queue: {component}") for component, color in colors.items()]
    if any(name == EXPOSED and events for name, events in queues):
        handles.append(Patch(facecolor="white", edgecolor="0.3", hatch="////", label="exposed (waits for)"))
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), columns), fontsize=8, frameon=False)
    height = fig.get_figheight()
    fig.tight_layout(rect=(0, (0.1 + 0.2 * legend_rows) / height, 1, 1))  # tight_layout leaves room for the suptitle
    with atomic_output(path, "wb", option="--png") as handle:
        fig.savefig(handle, format="png")
    return Path(path)
