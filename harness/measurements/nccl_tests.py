"""Importer: nccl-tests ``*_perf`` output as collective sweeps, and sweeps as network curves.

Two input forms are read (one table per file):

- nccl-tests' own output (``all_reduce_perf -b 1M -e 1G ...``): comment lines
  start with ``#``; a data line is ``size count type redop root time algbw
  busbw #wrong time algbw busbw #wrong`` (out-of-place then in-place; times in
  microseconds; ``redop``/``root`` are absent for all_gather);
- the comma-separated form vTrain publishes (``AR_GPU8_1M_1024M_LUT``):
  header ``size(B),count,type,time(ns),busbw(GB/s),time(ns),busbw(GB/s)``.

Rules (the table decides what it measured, or the import refuses):

- the measured time of a size is the faster of the out-of-place and in-place
  runs; sizes must strictly increase; the ``0 0`` lines nccl-tests prints for
  sizes below one element per rank are skipped; a non-zero ``#wrong`` (nccl-tests'
  own check failed) is refused (``N/A``: the check was off);
- the collective is read from the columns: ``size / (count x element
  bytes)`` (:data:`ELEMENT_BYTES`) is 1 for an all-reduce (each count is the
  full message) and the participant count ``n`` for a reduce-scatter or an
  all-gather (each count is one participant's share); ``redop`` tells these
  two apart (a reduction: reduce_scatter; ``none`` or no redop/root columns:
  all_gather); rooted collectives (root other than -1) are refused. The CSV
  form has no redop column: its reduce-scatter and all-gather tables need
  ``--collective``. A ``--collective`` that disagrees with the columns is
  refused;
- an all-to-all table (``alltoall_perf``) has an all-gather's columns: its
  size is what each rank sends (``P`` slices of ``count`` elements, one per
  rank), redop ``none``, ``busbw = algbw x (n - 1) / n``. It is read as
  all_to_all when its header says so (``# Collective test starting:
  alltoall_perf``, which nccl-tests prints since 2.13; the header's test must
  then agree with the columns and with ``--collective``, and a test other than
  the four read here is refused) or when ``--collective all_to_all`` says so;
  without either, such a table is an all-gather's, as before;
- the participant count is read from the table itself: from the count
  column (reduce_scatter, all_gather), else from nccl-tests' ``busbw = algbw
  x factor`` with ``algbw = size / time`` and, for all_reduce, ``factor = 2
  (n - 1) / n`` (reduce_scatter and all_gather: ``(n - 1) / n``), so every
  line printed precisely enough (its time and bus bandwidth rounded by at most
  :data:`PRINTED_PRECISION`: nccl-tests prints ``0.00`` GB/s at 8 B) gives
  ``n``; all such lines must agree (within 25 %), the ``#  Rank N`` lines of
  the header (when present) must list as many ranks, and an explicit
  ``participants`` must match;
- a line that cannot be read is one InputError naming the file, line and
  column.

Curves (family ``collective_curves``): for a tier of a base profile with
latency ``L``, bandwidth ``B`` and the collective's volume model ``adjusted =
size x m x (1 + offset / n)``, the efficiency that reproduces a measured
time ``t`` is ``adjusted / ((t - L) x B)``. The curve keeps the physics
monotone: the efficiency is made non-decreasing in the size (pool adjacent
violators, least squares; a larger message never gets a smaller share of the
bandwidth), then thinned to points a quarter octave apart
(interpolated in log size, :class:`~harness.evidence.families.CollectiveCurve`).
A curve that would need an efficiency above 1 or below the smallest one
(:data:`~harness.evidence.families.MIN_EFFICIENCY`), or more participants than
the tier connects, is refused, never clipped: it would not reproduce the
measurement (a table of another tier or another base). Two sweeps of the same
collective, tier and participant count are refused unless told how to
combine them (:func:`combined_sweeps`).
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import numpy as np

from harness.errors import InputError
from harness.evidence.families import MIN_EFFICIENCY, CollectiveCurve, SizePoint
from harness.evidence.profile import NetworkTier
from harness.inputs import finite_number, iter_lines
from harness.measurements.corpus import CollectiveSweepRecord

FACTORS = {"all_reduce": lambda n: 2 * (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n,
           "all_gather": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n}
#: The nccl-tests binaries whose tables are read, by the collective they measure (the header's ``# Collective
#: test starting: NAME``).
TESTS = {"all_reduce_perf": "all_reduce", "reduce_scatter_perf": "reduce_scatter", "all_gather_perf": "all_gather",
         "alltoall_perf": "all_to_all"}
TEST_LINE = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
CSV_HEADER = re.compile(r"^size\(B\),count,type,time\(ns\),busbw\(GB/s\),time\(ns\),busbw\(GB/s\)\s*$")
POINTS_PER_OCTAVE = 4
#: Bytes per element of nccl-tests' datatype names (``-d``): a table's ``size / (count x bytes)`` says whether
#: each count is a full message (all-reduce) or one participant's share (reduce-scatter, all-gather).
ELEMENT_BYTES = {"int8": 1, "uint8": 1, "char": 1, "f8e4m3": 1, "f8e5m2": 1, "half": 2, "float16": 2,
                 "bfloat16": 2, "int32": 4, "uint32": 4, "int": 4, "float": 4, "float32": 4, "int64": 8,
                 "uint64": 8, "double": 8, "float64": 8}
#: A ``#  Rank  N Group ...`` header line: nccl-tests lists every rank of the run.
RANK_LINE = re.compile(r"^#\s*Rank\s+(\d+)\s+Group\b")
#: A line's participant count is read from its bus bandwidth only when its time and bus bandwidth are printed to
#: within this relative rounding.
PRINTED_PRECISION = 0.005


def _participants(collective: str, size: float, time_s: float, busbw_gb_s: float) -> float:
    """``n`` from ``busbw / algbw`` (see the module rules)."""
    ratio = busbw_gb_s * 1e9 * time_s / size
    if collective == "all_reduce":
        return 2 / (2 - ratio) if ratio < 2 else math.inf
    return 1 / (1 - ratio) if ratio < 1 else math.inf


def _precise(*cells: str) -> bool:
    """Whether printed numbers carry enough digits to read a participant count: each cell's rounding (half its
    last printed digit) is at most :data:`PRINTED_PRECISION` of its value (nccl-tests prints ``0.00`` GB/s at
    8 B: no count can be read from it)."""
    for cell in cells:
        value = float(cell)
        decimals = len(cell.partition(".")[2]) if "." in cell and "e" not in cell.lower() else 0
        if not value > 0 or 0.5 * 10.0 ** -decimals > PRINTED_PRECISION * value:
            return False
    return True


def sweep_ids(paths: list[Path]) -> list[str]:
    """The record ids of the sweeps of ``paths``, unique: each file's name, or, when two names are the same,
    each file's path relative to the files' common parent directory (``d1/ar.txt``, ``d2/ar.txt``). The same
    file given twice is an InputError naming both arguments."""
    resolved = [Path(os.path.realpath(p)) for p in paths]
    seen: dict[Path, Path] = {}
    for given, real in zip(paths, resolved):
        if real in seen:
            raise InputError(str(given), "FILE", f"the same file as {seen[real]} (given twice: each table is one "
                                                 "sweep with a unique id)")
        seen[real] = given
    names = [p.name for p in resolved]
    if len(set(names)) == len(names):
        return names
    common = Path(os.path.commonpath([p.parent for p in resolved]))
    return [p.relative_to(common).as_posix() for p in resolved]


def _table_collective(source: str, found: set[tuple[str, int]], redops: set[str], csv_form: bool,
                      collective: str | None, named: str | None = None) -> tuple[str, int | None]:
    """The collective the table's columns say it measured, and the participant count its ``size / (count x
    element bytes)`` gives (``None`` for an all-reduce, whose count is one full message): see the module
    rules. ``collective`` (the command line's) and ``named`` (the header's test) must agree; they only decide
    what the columns cannot (an all-to-all has an all-gather's columns)."""
    if named is not None and collective is not None and named != collective:
        raise InputError(source, "--collective", f"{collective} given, the table's header says {named} "
                                                 f"(# Collective test starting: ...)")
    collective = collective or named
    ratios = {ratio for _, ratio in found}
    if len(ratios) != 1:
        raise InputError(source, "count", f"size / (count x element bytes) is not the same on every line "
                                          f"({', '.join(str(r) for r in sorted(ratios))})")
    ratio = ratios.pop()
    reduction = {r for r in redops if r not in ("none", "")}
    if ratio == 1:
        if redops and not reduction:
            raise InputError(source, "redop", "a table with no reduction and one full message per count is not "
                                              f"a collective read here ({', '.join(FACTORS)})")
        table = "all_reduce"
    elif redops and reduction:
        table = "reduce_scatter"
    elif redops or not csv_form:  # redop "none", or the old all_gather form without redop/root columns
        table = "all_to_all" if collective == "all_to_all" else "all_gather"  # the same columns
    elif collective in ("reduce_scatter", "all_gather", "all_to_all"):  # vTrain's CSV form: no redop column
        table = collective
    else:
        raise InputError(source, "count", f"each count is 1/{ratio} of the size: a reduce_scatter, all_gather or "
                                          f"all_to_all table (the CSV form has no redop column): give --collective")
    if named is not None and named != table:
        raise InputError(source, "Collective test", f"the header says {named}, the table's columns say {table} "
                                                    f"(count x element bytes = size / {ratio}, redop "
                                                    f"{', '.join(sorted(redops)) or 'absent'})")
    if collective is not None and collective != table:
        raise InputError(source, "--collective", f"{collective} given, the table's columns say {table} "
                                                 f"(count x element bytes = size / {ratio}, redop "
                                                 f"{', '.join(sorted(redops)) or 'absent'})")
    return table, None if table == "all_reduce" else ratio


def parse_nccl_tests(path: Path | str, collective: str | None, network_tier: int,
                     participants: int | None = None, record_id: str | None = None) -> CollectiveSweepRecord:
    """One file's table as a collective sweep record (see the module rules); its id is ``record_id``, else the
    file's name (:func:`sweep_ids` makes the ids of several files unique). ``collective`` ``None``: the one
    the table says."""
    if collective is not None and collective not in FACTORS:
        raise InputError(str(path), "collective", f"{collective!r}: nccl-tests tables are read for "
                                                  f"{', '.join(FACTORS)}")
    source = str(path)
    sizes, times, lines, precise = [], [], [], []
    best_cells = []
    ratios: set[tuple[str, int]] = set()
    redops: set[str] = set()
    ranks: set[int] = set()
    named: str | None = None
    csv_form = None
    for item in iter_lines(path):
        if item.error is not None:
            raise item.error
        text = item.text.strip()
        if not text:
            continue
        if text.startswith("#"):
            rank = RANK_LINE.match(text)
            if rank:
                ranks.add(int(rank.group(1)))
            test = TEST_LINE.match(text)
            if test:
                if test.group(1) not in TESTS:
                    raise InputError(source, "Collective test", f"{test.group(1)}: not a table read here (the "
                                                                f"tests of {', '.join(TESTS)})", line=item.number)
                named = TESTS[test.group(1)]
            continue
        if csv_form is None and CSV_HEADER.match(text):
            csv_form = True
            continue
        if csv_form:
            cells = [c.strip() for c in text.split(",")]
            if len(cells) != 7:
                raise InputError(source, f"line {item.number}", f"{len(cells)} fields, the header has 7")
            names = ("size(B)", "count", "type", "time(ns)", "busbw(GB/s)", "time(ns) in-place", "busbw(GB/s) in-place")
            size, time_a, bus_a, time_b, bus_b = (cells[0], cells[3], cells[4], cells[5], cells[6])
            scale = 1e-9
            columns = (names[0], names[3], names[4], names[5], names[6])
            wrong = ()
        else:
            cells = text.split()
            if len(cells) not in (11, 13) or not cells[0].isdigit():
                raise InputError(source, f"line {item.number}", "not an nccl-tests data line (size count type "
                                                                "[redop root] time algbw busbw #wrong time algbw "
                                                                "busbw #wrong)")
            offset = 0 if len(cells) == 13 else -2
            size, time_a, bus_a = cells[0], cells[5 + offset], cells[7 + offset]
            time_b, bus_b = cells[9 + offset], cells[11 + offset]
            scale = 1e-6
            columns = ("size", "time (out-of-place)", "busbw (out-of-place)", "time (in-place)", "busbw (in-place)")
            csv_form = False
            wrong = (cells[8 + offset], cells[12 + offset])
            if len(cells) == 13:
                redops.add(cells[3])
                if cells[4] != "-1":
                    raise InputError(source, "root", f"{cells[4]}: a rooted collective (broadcast, reduce) is not "
                                                     f"read here ({', '.join(FACTORS)} have root -1)", line=item.number)
        line = item.number
        if size == "0" and cells[1] == "0":  # nccl-tests' lines below one element per rank: no message, no time
            continue
        for count in wrong:
            if count not in ("0", "N/A"):
                raise InputError(source, "#wrong", f"{count}: nccl-tests found wrong results on this line (a "
                                                   "failed run is not a measurement)", line=line)
        size_b = finite_number(size, source, columns[0], line=line, minimum=1)
        elements = finite_number(cells[1], source, "count", line=line, minimum=1)
        if cells[2] not in ELEMENT_BYTES:
            raise InputError(source, "type", f"{cells[2]!r} is not an nccl-tests datatype "
                                             f"({', '.join(ELEMENT_BYTES)})", line=line)
        ratio = size_b / (elements * ELEMENT_BYTES[cells[2]])
        if ratio != int(ratio):
            raise InputError(source, "count", f"size {size_b:g} is not a whole multiple of count x element bytes",
                             line=line)
        ratios.add((cells[2], int(ratio)))
        ta = finite_number(time_a, source, columns[1], line=line, minimum=0) * scale
        tb = finite_number(time_b, source, columns[3], line=line, minimum=0) * scale
        ba = finite_number(bus_a, source, columns[2], line=line, minimum=0)
        bb = finite_number(bus_b, source, columns[4], line=line, minimum=0)
        if not (ta > 0 and tb > 0):
            raise InputError(source, columns[1], "measured times must be positive", line=line)
        if sizes and not size_b > sizes[-1]:
            raise InputError(source, columns[0], f"sizes must strictly increase ({size_b:g} after {sizes[-1]:g})",
                             line=line)
        best, bus, cells_used = (ta, ba, (time_a, bus_a)) if ta <= tb else (tb, bb, (time_b, bus_b))
        lines.append(line)
        best_cells.append((best, bus))
        precise.append(_precise(*cells_used))
        sizes.append(size_b)
        times.append(best)
    if not sizes:
        raise InputError(source, "<file>", "no nccl-tests data line")
    table, counted = _table_collective(source, ratios, redops, bool(csv_form), collective, named)
    found = _participant_count(source, table, counted, sizes, best_cells, lines, precise, ranks, participants)
    return CollectiveSweepRecord(kind="collective_sweep", id=record_id or Path(source).name, collective=table,
                                 participants=found, network_tier=network_tier, sizes_bytes=tuple(sizes),
                                 measured_s=tuple(times), note="nccl-tests; the faster of out-of-place and in-place")


def _participant_count(source: str, collective: str, counted: int | None, sizes, best, lines, precise,
                       ranks: set[int], participants: int | None) -> int:
    """The table's participant count (see the module rules): the ranks it lists, the count column, and the bus
    bandwidths of the lines printed precisely enough must agree; ``participants`` must match."""
    estimates = [(line, _participants(collective, size, time_s, bus))
                 for line, size, (time_s, bus), ok in zip(lines, sizes, best, precise) if ok]
    finite = [n for _, n in estimates if math.isfinite(n)]
    if counted is not None:
        found = counted
    elif finite:
        found = round(float(np.median(finite)))
    elif ranks:
        found = len(ranks)
    elif participants is not None:
        found = participants
    else:
        raise InputError(source, "busbw", "no line's times and bus bandwidths are printed precisely enough to read "
                                          "the participant count (give --participants)")
    for line, n in estimates:
        if not abs(n - found) <= 0.25 * found:
            raise InputError(source, "busbw", f"this line's bus bandwidth implies {n:.3g} participants, the table "
                                              f"{found}", line=line)
    if found < 2:
        raise InputError(source, "busbw", f"the table implies {found} participants (at least 2)")
    if ranks and len(ranks) != found:
        raise InputError(source, "Rank", f"the table lists {len(ranks)} ranks, its columns imply {found} "
                                         "participants")
    if participants is not None and participants != found:
        raise InputError(source, "--participants", f"{participants} given, the table's bus bandwidths imply {found}")
    return found


def _non_decreasing(values: np.ndarray) -> np.ndarray:
    """Least-squares non-decreasing fit (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [sum, count]
    for v in values:
        blocks.append([float(v), 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    return np.concatenate([np.full(int(c), s / c) for s, c in blocks])


def sweep_curve(sweep: CollectiveSweepRecord, tier: NetworkTier, source: str) -> CollectiveCurve:
    """The tier's efficiency curve that reproduces ``sweep`` (see the module rules). A sweep the tier cannot
    reproduce is an InputError naming ``source`` and the sweep: more participants than the tier connects, a
    time not above its latency, or an efficiency (after the monotone fit) above 1 or below
    :data:`~harness.evidence.families.MIN_EFFICIENCY` (a table of another tier or another base profile)."""
    model = tier.volume_model(sweep.collective)  # an all-to-all the tier does not state: its all-gather's
    if tier.size_processors and sweep.participants > tier.size_processors:
        raise InputError(source, "participants", f"{sweep.id}: {sweep.participants} participants on a tier of "
                                                 f"{tier.size_processors} processors")
    sizes = np.array(sweep.sizes_bytes)
    times = np.array(sweep.measured_s)
    if np.any(times <= tier.latency_s):
        raise InputError(source, "measured_s", f"{sweep.id}: a measured time is not above the tier's latency "
                                               f"{tier.latency_s} s")
    adjusted = sizes * model.volume_multiplier
    adjusted = adjusted + adjusted / sweep.participants * model.participant_offset
    efficiency = _non_decreasing(adjusted / ((times - tier.latency_s) * tier.bandwidth_bytes_per_s))
    for index in (int(np.argmax(efficiency)), int(np.argmin(efficiency))):
        if not MIN_EFFICIENCY <= efficiency[index] <= 1.0:
            raise InputError(source, "measured_s", f"{sweep.id}: at {sizes[index]:g} B the measured time needs "
                                                   f"{efficiency[index]:.3g} of the tier's "
                                                   f"{tier.bandwidth_bytes_per_s:g} B/s (efficiencies lie in "
                                                   f"[{MIN_EFFICIENCY:g}, 1]): a table of another tier or base "
                                                   f"profile?")
    octaves = np.log2(sizes / sizes[0]) * POINTS_PER_OCTAVE
    keep = [0]
    for i in range(1, len(sizes)):
        if np.floor(octaves[i]) > np.floor(octaves[keep[-1]]) or i == len(sizes) - 1:
            keep.append(i)
    points = tuple(SizePoint(size_bytes=float(sizes[i]), efficiency=float(efficiency[i])) for i in keep)
    return CollectiveCurve(participants=sweep.participants, points=points,
                           source=f"{sweep.id}: {sweep.collective} on tier {sweep.network_tier}, "
                                  f"{sweep.participants} participants ({sweep.note})")


#: How two sweeps of the same collective, tier and participant count may be combined (``--combine-sweeps``):
#: ``fastest`` keeps, at every size, the faster measured time (as the faster of out-of-place and in-place runs
#: within a table); the sweeps must measure the same sizes. Without it, such sweeps are an error.
COMBINE = ("fastest",)


def combined_sweeps(sweeps, how: str | None = None, source: str = "<sweeps>") -> tuple[CollectiveSweepRecord, ...]:
    """``sweeps`` with at most one per (collective, tier, participants): two of the same key are an InputError
    naming both ids, unless ``how`` (:data:`COMBINE`) says how to combine them (the result does not depend on
    the order they are given in)."""
    by_key: dict[tuple, list] = {}
    for sweep in sweeps:
        by_key.setdefault((sweep.collective, sweep.network_tier, sweep.participants), []).append(sweep)
    out = []
    for (collective, tier, participants), group in by_key.items():
        if len(group) == 1:
            out.append(group[0])
            continue
        ids = ", ".join(s.id for s in group)
        if how is None:
            raise InputError(source, "collective_sweep", f"{ids}: {len(group)} sweeps of {collective} on tier {tier} "
                                                         f"with {participants} participants (give --combine-sweeps "
                                                         f"{'|'.join(COMBINE)} to combine them)")
        if how not in COMBINE:
            raise InputError(source, "--combine-sweeps", f"{how!r}: one of {', '.join(COMBINE)}")
        if len({s.sizes_bytes for s in group}) != 1:
            raise InputError(source, "sizes_bytes", f"{ids}: sweeps combined by {how} must measure the same sizes")
        ordered = sorted(group, key=lambda s: s.id)
        out.append(ordered[0].model_copy(update={
            "id": "+".join(s.id for s in ordered), "measured_s": tuple(min(t) for t in zip(*(s.measured_s
                                                                                             for s in ordered))),
            "note": f"the fastest of {len(ordered)} sweeps at each size ({ordered[0].note})"}))
    return tuple(out)


#: A ring all-reduce is a reduce-scatter followed by an all-gather over the same ring: each half moves
#: ``(n - 1) / n`` of the message per processor (the all-reduce ``2 (n - 1) / n``) in ``n - 1`` of its
#: ``2 (n - 1)`` steps, so each takes half of the all-reduce's measured time at the same message size.
HALVES_OF_ALL_REDUCE = ("reduce_scatter", "all_gather")


def derived_sweeps(sweeps) -> tuple[CollectiveSweepRecord, ...]:
    """Reduce-scatter and all-gather sweeps derived from the all-reduce sweeps (see
    :data:`HALVES_OF_ALL_REDUCE`), for every tier and participant count that has no measured sweep of
    that collective (a measured sweep always wins)."""
    measured = {(s.collective, s.network_tier, s.participants) for s in sweeps}
    out = []
    for sweep in sweeps:
        if sweep.collective != "all_reduce":
            continue
        for collective in HALVES_OF_ALL_REDUCE:
            if (collective, sweep.network_tier, sweep.participants) in measured:
                continue
            out.append(sweep.model_copy(update={
                "collective": collective, "measured_s": tuple(t / 2 for t in sweep.measured_s),
                "note": f"derived: half the all_reduce time of the same message ({sweep.note})"}))
    return tuple(out)


def with_sweeps(profile, sweeps, source: str = "<sweeps>"):
    """``profile`` with the curves of ``sweeps`` on their tiers (a tier's curve for the same collective and
    participant count is replaced; others are kept). Two of ``sweeps`` for the same curve are an InputError
    (:func:`combined_sweeps` combines them first when told how)."""
    networks = list(profile.networks)
    combined_sweeps(sweeps, None, source)
    for sweep in sweeps:
        if sweep.network_tier >= len(networks):
            raise InputError(source, "network_tier", f"tier {sweep.network_tier} does not exist in evidence profile "
                                                     f"{profile.name} ({len(networks)} tiers)")
        tier = networks[sweep.network_tier]
        curve = sweep_curve(sweep, tier, source)
        measured = dict(tier.measured_collectives or {})
        kept = tuple(c for c in measured.get(sweep.collective, ()) if c.participants != curve.participants)
        measured[sweep.collective] = tuple(sorted(kept + (curve,), key=lambda c: c.participants))
        networks[sweep.network_tier] = tier.model_copy(update={"measured_collectives": measured})
    return profile.model_copy(update={"networks": tuple(networks)})
