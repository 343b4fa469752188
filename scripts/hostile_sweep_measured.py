"""The hostile sweep's attempts on the surfaces of issue 24: the measurement importers (nccl-tests, Korthikanti
Table 4, vTrain), the fit and its report, every command's outputs aimed at the tool's data, the search's
scheduler and ``--top``, and the pytest plugin (``python scripts/hostile_sweep.py --only measured``).

Built by :func:`measured_attempts` from the sweep's own ``Attempt`` type (passed in: the sweep runs as a
script), generated as data: a valid input of each kind, then every mutation of it a hostile or careless user
would try. ``expect`` says what is due: ``ok``, ``error`` (one ``error:`` line naming the ``needles``) or
``any`` (a result or a refusal, never a crash).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
VTRAIN_HEADER = ("# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,tensor "
                 "parallelism,data parallelism,pipeline parallelism,iteration time (ms)\n")
VTRAIN_ROW = ["4", "16", "4", "2048", "16", "24", "1024", "1", "2", "2", "410.4"]
T4 = {"model": {"hidden": 1024, "feedforward": 4096, "seq_size": 512, "attn_heads": 16, "attn_size": 64,
                "num_blocks": 4},
      "execution": {"tensor_par": 2, "pipeline_par": 1, "data_par": 1, "batch_size": 4, "microbatch_size": 4},
      "rows": [{"sequence_parallel": True, "recompute": "attn_only", "forward_ms": 1.5, "backward_ms": 3.25},
               {"sequence_parallel": False, "recompute": "none", "forward_ms": 1.7, "backward_ms": 3.5}]}
SILENT = r'''
import socket, subprocess, sys, threading
mode = sys.argv[1]
listener = socket.socket(); listener.bind(("127.0.0.1", 0)); listener.listen(4)
port = listener.getsockname()[1]
held = []
def serve():
    while True:
        c, _ = listener.accept(); held.append(c)
        if mode == "http": c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        if mode == "close": c.close()
        if mode == "garbage": c.sendall(b"\x00" * 16)
threading.Thread(target=serve, daemon=True).start()
done = subprocess.run([sys.executable, "-m", "harness", *[a.replace("PORT", str(port)) for a in sys.argv[2:]]],
                      capture_output=True, text=True, timeout=80)
sys.stdout.write(done.stdout); sys.stderr.write(done.stderr); sys.exit(done.returncode)
'''


def nccl_table(collective: str = "all_reduce", n: int = 8, *, sizes=(1 << 20, 1 << 22, 1 << 24),
               bus=(20.0, 60.0, 120.0), csv: bool = False, ranks: int = 0, wrong: str = "0", root: str = "-1",
               redop: str | None = None, dtype: str = "float", start8: bool = False) -> str:
    """A table as nccl-tests prints it (see tests/test_hostile_measurements.py: the count column is a full
    message for all_reduce, one rank's share otherwise; busbw = algbw x the collective's factor)."""
    factor = 2 * (n - 1) / n if collective == "all_reduce" else (n - 1) / n
    redop = redop or ("none" if collective == "all_gather" else "sum")
    width = {"float": 4, "half": 2, "double": 8, "int8": 1}.get(dtype, 4)
    if start8:  # nccl-tests' -b 8: the smallest message is one element per rank (a "0 0" line below it)
        smallest = 8 if collective == "all_reduce" else width * n
        sizes, bus = (smallest,) + tuple(sizes), (0.0001,) + tuple(bus)
    if csv:
        lines = ["size(B),count,type,time(ns),busbw(GB/s),time(ns),busbw(GB/s)"]
    else:
        lines = [f"# nThread 1 nGpus {n} minBytes 8 maxBytes 16777216 step: 2(factor) warmup iters: 5 iters: 20"]
        lines += [f"#  Rank {r:2d} Group  0 Pid 10 on host device {r} [0x07] NVIDIA A100" for r in range(ranks)]
        lines.append("#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong")
        if start8 and collective != "all_reduce":
            lines.append(f"0 0 {dtype} {redop} -1 0.19 0.00 0.00 0 0.18 0.00 0.00 0")
    for size, b in zip(sizes, bus):
        count = max(size // width if collective == "all_reduce" else size // width // n, 1)
        t = size * factor / (b * 1e9)
        alg = size / t / 1e9
        if csv:
            lines.append(f"{size},{count},{dtype},{t * 1e9:.1f},{b:.2f},{t * 1.01e9:.1f},{b / 1.01:.2f}")
        else:
            lines.append(f"{size} {count} {dtype} {redop} {root} {t * 1e6:.2f} {alg:.2f} {b:.2f} {wrong} "
                         f"{t * 1.01e6:.2f} {alg / 1.01:.2f} {b / 1.01:.2f} 0")
    return "\n".join(lines) + "\n"


def _nccl(make, python) -> list:
    a = []
    imp = ["evidence", "import", "nccl-tests"]

    def add(name, argv, files, expect, needles=(), outputs=("o.jsonl", "np.yaml")):
        setup = _existing("np.yaml") if name == "apply-replace" else None  # replaced on purpose: not an input
        a.append(make("measured:nccl", name, argv, expect, files, needles,
                      outputs=outputs if expect == "error" else (), timeout=60, setup=setup))

    for collective in ("all_reduce", "reduce_scatter", "all_gather"):
        for n in (2, 4, 8, 16):
            add(f"{collective}-{n}", [*imp, "t.txt", "--tier", "0", "--output", "o.jsonl"],
                {"t.txt": nccl_table(collective, n)}, "ok")
            add(f"{collective}-{n}-ranks", [*imp, "t.txt", "--tier", "1", "--output", "o.jsonl"],
                {"t.txt": nccl_table(collective, n, ranks=n)}, "ok")
            add(f"{collective}-{n}-ranks-wrong", [*imp, "t.txt", "--tier", "0", "--output", "o.jsonl"],
                {"t.txt": nccl_table(collective, n, ranks=n + 1)}, "error", ("t.txt", "Rank"))
            add(f"{collective}-{n}-8-bytes", [*imp, "t.txt", "--tier", "0", "--output", "o.jsonl"],
                {"t.txt": nccl_table(collective, n, start8=True)}, "ok")
            add(f"{collective}-{n}-participants-right", [*imp, "t.txt", "--tier", "0", "--participants", str(n),
                                                         "--output", "o.jsonl"],
                {"t.txt": nccl_table(collective, n)}, "ok")
            add(f"{collective}-{n}-participants-wrong", [*imp, "t.txt", "--tier", "0", "--participants",
                                                         str(n * 2), "--output", "o.jsonl"],
                {"t.txt": nccl_table(collective, n)}, "error", ("t.txt", "--participants"))
            for given in ("all_reduce", "reduce_scatter", "all_gather"):
                if given != collective:
                    add(f"{collective}-{n}-as-{given}", [*imp, "t.txt", "--tier", "0", "--collective", given,
                                                         "--output", "o.jsonl"],
                        {"t.txt": nccl_table(collective, n)}, "error", ("t.txt", "--collective"))
            csv_expect = "ok" if collective == "all_reduce" else "error"
            add(f"{collective}-{n}-csv", [*imp, "t.csv", "--tier", "0", "--output", "o.jsonl"],
                {"t.csv": nccl_table(collective, n, csv=True)}, csv_expect, ("t.csv", "count"))
            if collective != "all_reduce":
                add(f"{collective}-{n}-csv-told", [*imp, "t.csv", "--tier", "0", "--collective", collective,
                                                   "--output", "o.jsonl"],
                    {"t.csv": nccl_table(collective, n, csv=True)}, "ok")
    base = nccl_table("all_reduce", 8)
    data_line = base.splitlines()[-2]
    cells = data_line.split()
    for index, column in enumerate(("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                                    "time-in", "algbw-in", "busbw-in", "#wrong-in")):
        for value in ("nan", "inf", "-1", "abc", "1_000", "0x10", "1e400", ""):
            if value == cells[index]:
                continue  # not a mutation
            mutated = list(cells)
            mutated[index] = value
            text = base.replace(data_line, " ".join(m for m in mutated if m))
            expect = "any" if column in ("algbw", "algbw-in", "redop") else "error"
            add(f"cell-{column}-{value or 'empty'}", [*imp, "t.txt", "--tier", "0", "--output", "o.jsonl"],
                {"t.txt": text}, expect, ("t.txt",))
    for name, text, expect in [
        ("wrong-results", nccl_table(wrong="2"), "error"), ("wrong-na", nccl_table(wrong="N/A"), "ok"),
        ("rooted", nccl_table(root="0"), "error"), ("redop-prod", nccl_table(redop="prod"), "ok"),
        ("redop-none-full", nccl_table(redop="none"), "error"), ("type-unknown", nccl_table(dtype="float8"), "error"),
        ("type-half", nccl_table(dtype="half"), "ok"), ("type-double", nccl_table(dtype="double"), "ok"),
        ("unsorted", nccl_table(sizes=(1 << 22, 1 << 20, 1 << 24)), "error"),
        ("repeated-size", nccl_table(sizes=(1 << 20, 1 << 20, 1 << 24)), "error"),
        ("all-imprecise", nccl_table(sizes=(8, 16, 32), bus=(0.0001, 0.0002, 0.0003)), "error"),
        ("comments-only", "# nothing\n#\n", "error"), ("crlf", nccl_table().replace("\n", "\r\n"), "ok"),
        ("tabs", nccl_table().replace(" ", "\t"), "ok"), ("bom", "\ufeff" + nccl_table(), "any"),
        ("trailing-garbage", nccl_table() + "garbage\n", "error"), ("nul", nccl_table().replace("float", "fl\0at"),
                                                                    "error"),
        ("latin1", nccl_table().replace("NVIDIA", "NVIDI\u00c4"), "ok"),
    ]:
        add(name, [*imp, "t.txt", "--tier", "0", "--output", "o.jsonl"], {"t.txt": text}, expect, ("t.txt",))
    apply = [*imp, "t.txt", "--tier", "0", "--output", "o.jsonl", "--apply", "a100_80g", "--profile-output"]
    for name, argv, files, expect, needles in [
        ("apply-ok", [*apply, "np.yaml"], {"t.txt": base}, "ok", ()),
        ("apply-faster-than-tier", [*apply, "np.yaml"], {"t.txt": nccl_table(bus=(200.0, 800.0, 900.0))}, "error",
         ("t.txt", "measured_s")),
        ("apply-slower-than-floor", [*apply, "np.yaml", "--participants", "8"],
         {"t.txt": nccl_table(bus=(0.002, 0.004, 0.008))}, "error", ("t.txt",)),
        ("apply-too-many-participants", [*apply, "np.yaml"], {"t.txt": nccl_table("all_gather", 64)}, "error",
         ("participants",)),
        ("apply-bad-name", [*apply, "Bad_Name.yaml"], {"t.txt": base}, "error", ("--profile-output",)),
        ("apply-name-dots", [*apply, "..yaml"], {"t.txt": base}, "error", ("--profile-output",)),
        ("apply-onto-shipped", [*apply, "{p}/evidence/a100_measured.yaml"], {"t.txt": base}, "error",
         ("--profile-output",)),
        ("apply-onto-existing", [*apply, "np.yaml"], {"t.txt": base, "np.yaml": "name: np\n"}, "error",
         ("--replace",)),
        ("apply-replace", [*apply, "np.yaml", "--replace"], {"t.txt": base}, "ok", ()),
        ("apply-tier-missing", [*imp, "t.txt", "--tier", "7", "--output", "o.jsonl", "--apply", "a100_80g",
                                "--profile-output", "np.yaml"], {"t.txt": base}, "error", ("--tier",)),
        ("apply-twice", [*imp, "t.txt", "u.txt", "--tier", "0", "--output", "o.jsonl", "--apply", "a100_80g",
                         "--profile-output", "np.yaml"], {"t.txt": base, "u.txt": base}, "error",
         ("--combine-sweeps",)),
        ("apply-twice-combined", [*imp, "t.txt", "u.txt", "--tier", "0", "--output", "o.jsonl", "--apply",
                                  "a100_80g", "--profile-output", "np.yaml", "--combine-sweeps", "fastest"],
         {"t.txt": base, "u.txt": base}, "ok", ()),
        ("apply-combine-unknown", [*imp, "t.txt", "--tier", "0", "--output", "o.jsonl", "--combine-sweeps", "mean"],
         {"t.txt": base}, "error", ("--combine-sweeps",)),
        ("licence-long", [*imp, "t.txt", "--tier", "0", "--output", "o.jsonl", "--licence", "x" * 10_001],
         {"t.txt": base}, "error", ("--licence",)),
        ("hardware-long", [*imp, "t.txt", "--tier", "0", "--output", "o.jsonl", "--hardware", "x" * 10_001],
         {"t.txt": base}, "error", ("--hardware",)),
        ("citation-empty", [*imp, "t.txt", "--tier", "0", "--output", "o.jsonl", "--citation", ""],
         {"t.txt": base}, "error", ("--citation",)),
        ("name-bad", [*imp, "t.txt", "--tier", "0", "--output", "o.jsonl", "--name", "a b"], {"t.txt": base},
         "error", ("--name",)),
    ]:
        add(name, argv, files, expect, needles)
    return a


def _korthikanti(make, python) -> list:
    a = []
    argv = ["evidence", "import", "korthikanti", "--table4", "t4.json", "--output", "o.jsonl"]

    def add(name, data, expect, needles=()):
        text = data if isinstance(data, str) else json.dumps(data)
        a.append(make("measured:korthikanti", name, argv, expect, {"t4.json": text}, ("t4.json", *needles),
                      outputs=("o.jsonl",) if expect == "error" else (), timeout=60))

    def edited(fn):
        data = json.loads(json.dumps(T4))
        fn(data)
        return data

    add("ok", T4, "ok")
    for key in ("sequence_parallel", "recompute", "forward_ms", "backward_ms"):
        for value in ("7.7", "true", None, [], {}, -1, 0, 1e20, True, "none "):
            if key == "sequence_parallel" and value is True:
                continue  # valid
            add(f"row-{key}-{json.dumps(value)[:12]}", edited(lambda d, k=key, v=value: d["rows"][0].update({k: v})),
                "error", (f"rows.0.{key}",))
        add(f"row-{key}-missing", edited(lambda d, k=key: d["rows"][0].pop(k)), "error", (f"rows.0.{key}",))
    for where, key in (("", "colour"), ("model", "vocab"), ("execution", "weight_offload"),
                       ("execution", "tensor_par_net"), ("execution", "num_procs"), ("execution", "datatype"),
                       ("execution", "activation_recompute"), ("execution", "tensor_par_comm_type"),
                       ("rows.0", "colour")):
        def put(d, w=where, k=key):
            target = d if not w else (d["rows"][0] if w == "rows.0" else d[w])
            target[k] = 1
        add(f"unknown-{where or 'root'}-{key}", edited(put), "error", (key,))
    for name, data in [("rows-empty", edited(lambda d: d.update(rows=[]))),
                       ("rows-object", edited(lambda d: d.update(rows={}))),
                       ("rows-missing", edited(lambda d: d.pop("rows"))),
                       ("model-list", edited(lambda d: d.update(model=[]))),
                       ("model-hidden-string", edited(lambda d: d["model"].update(hidden="1024"))),
                       ("model-missing-key", edited(lambda d: d["model"].pop("hidden"))),
                       ("execution-tp-3", edited(lambda d: d["execution"].update(tensor_par=3))),
                       ("execution-string", edited(lambda d: d["execution"].update(tensor_par="2"))),
                       ("total-wrong", edited(lambda d: d["rows"][0].update(total_ms=9.0))),
                       ("total-string", edited(lambda d: d["rows"][0].update(total_ms="4.75"))),
                       ("overhead-string", edited(lambda d: d["rows"][0].update(overhead_pct="7"))),
                       ("experiment-number", edited(lambda d: d["rows"][0].update(experiment=3))),
                       ("about-number", edited(lambda d: d.update(source=3))),
                       ("root-list", []), ("root-string", '"x"'), ("nan", '{"rows": NaN}'),
                       ("duplicate-key", '{"rows": [], "rows": []}'), ("empty", "")]:
        add(name, data, "error")
    add("total-right", edited(lambda d: d["rows"][0].update(total_ms=4.75)), "ok")
    add("overhead-null", edited(lambda d: d["rows"][0].update(overhead_pct=None)), "ok")
    add("about-strings", edited(lambda d: d.update(source="paper", what="layers", hardware="A100", note="n")), "ok")
    return a


def _vtrain(make, python) -> list:
    a = []
    columns = VTRAIN_HEADER.strip().split(",")
    for index, column in enumerate(columns):
        for value in ("nan", "-1", "0", "1.5", "1e30", "", "abc", "0x10", "1_0"):
            row = list(VTRAIN_ROW)
            row[index] = value
            expect = "any" if (column == "iteration time (ms)" and value in ("1.5", "1e30")) else "error"
            a.append(make("measured:vtrain", f"{column}-{value or 'empty'}",
                          ["evidence", "import", "vtrain", "v.csv", "--output", "o.jsonl"], expect,
                          {"v.csv": VTRAIN_HEADER + ",".join(row) + "\n"}, ("v.csv",),
                          outputs=("o.jsonl",) if expect == "error" else (), timeout=60))
    for name, text, expect in [("ok", VTRAIN_HEADER + ",".join(VTRAIN_ROW) + "\n", "ok"),
                               ("one-ns", VTRAIN_HEADER + ",".join(VTRAIN_ROW[:-1] + ["0.000001"]) + "\n", "error"),
                               ("hidden-huge", VTRAIN_HEADER + ",".join(VTRAIN_ROW[:3] + [str(2**40)] + VTRAIN_ROW[4:])
                                + "\n", "error")]:
        a.append(make("measured:vtrain", name, ["evidence", "import", "vtrain", "v.csv", "--output", "o.jsonl"],
                      expect, {"v.csv": text}, ("v.csv",), outputs=("o.jsonl",) if expect == "error" else (),
                      timeout=60, check=_no_pydantic))
    return a


def _no_pydantic(work, result) -> list[str]:
    return ["pydantic's URL in the error"] if "pydantic.dev" in result.err else []


def _records(count: int, seconds: float | None = None) -> list[dict]:
    """Iteration records of one small shape (growing batches), at the shipped revision's estimates (``seconds``:
    every record at that time instead: impossible data)."""
    from harness.evidence.profile import load_profile
    from harness.measurements.corpus import IterationRecord
    from harness.measurements.design import Design

    records = [{"kind": "iteration", "id": f"r{i}",
                "model": {"hidden": 1024, "feedforward": 4096, "sequence_length": 1024, "attention_heads": 16,
                          "head_size": 64, "blocks": 12},
                "execution": {"tensor_parallel": 2, "pipeline_parallel": 1, "data_parallel": 1,
                              "global_batch": 2 * (i + 1), "microbatch": 1, "recompute": "full",
                              "network_tiers": {"tensor": 0, "pipeline": 0, "data": 0}}} for i in range(count)]
    fitted = load_profile("a100_measured")
    times = Design([IterationRecord.model_validate({**r, "measured_iteration_s": 1.0}) for r in records],
                   fitted).predict(fitted)
    return [{**r, "measured_iteration_s": seconds if seconds is not None else float(t)}
            for r, t in zip(records, times)]


def _corpus(records) -> str:
    header = {"kind": "corpus", "schema_name": "blueprinting.measurement-corpus", "schema_version": 0, "name": "t",
              "description": "t", "source": {"citation": "t", "licence": "t"},
              "environment": {"hardware": "t", "software": "t"}}
    return "\n".join(json.dumps(o) for o in [header, *records]) + "\n"


def _fit(make, python) -> list:
    a = []
    sweeps = (ROOT / "measurements" / "vtrain" / "vtrain-allreduce-a100.jsonl").read_text()
    lines = sweeps.splitlines()
    again = json.loads(lines[1])
    again["id"] = "again"
    twice = "\n".join(lines[:2] + [json.dumps(again)]) + "\n"
    good = _corpus(_records(8))
    fit = ["evidence", "fit", "--base", "a100_80g", "--measurements", "c.jsonl", "s.jsonl", "--output"]
    for name, argv, files, expect, needles in [
        ("ok", [*fit, "f.yaml"], {"c.jsonl": good, "s.jsonl": sweeps}, "ok", ()),
        ("impossible-1ms", [*fit, "f.yaml"], {"c.jsonl": _corpus(_records(8, 1e-3)), "s.jsonl": sweeps}, "fit-refused",
         ()),
        ("impossible-1us", [*fit, "f.yaml"], {"c.jsonl": _corpus(_records(8, 1e-6)), "s.jsonl": sweeps}, "error",
         ("c.jsonl", "measured_iteration_s")),
        ("impossible-1e-300", [*fit, "f.yaml"], {"c.jsonl": _corpus(_records(8, 1e-300)), "s.jsonl": sweeps},
         "error", ("c.jsonl",)),
        ("impossible-hours", [*fit, "f.yaml"], {"c.jsonl": _corpus(_records(8, 3600.0)), "s.jsonl": sweeps},
         "fit-refused", ()),
        ("too-few", [*fit, "f.yaml"], {"c.jsonl": _corpus(_records(3)), "s.jsonl": sweeps}, "fit-refused", ()),
        ("no-sweeps", ["evidence", "fit", "--base", "a100_80g", "--measurements", "c.jsonl", "--output", "f.yaml"],
         {"c.jsonl": good}, "any", ()),
        ("sweeps-twice", [*fit, "f.yaml"], {"c.jsonl": good, "s.jsonl": twice}, "error", ("--combine-sweeps",)),
        ("sweeps-twice-combined", [*fit, "f.yaml", "--combine-sweeps", "fastest"],
         {"c.jsonl": good, "s.jsonl": twice}, "ok", ()),
        # The profile name of these two comes from the output's stem (no --name given), so the error names
        # --output, the option the bad value came from (evidence._profile_name, commit 0c862fc); every case
        # file's stem has an upper-case letter, so onto-case is refused by the name rule before the data guard,
        # which onto-case-by-link reaches.
        ("onto-case", [*fit, "{p}/cases/megatron-22B_full.yaml"], {"c.jsonl": good, "s.jsonl": sweeps}, "error",
         ("--output", "'megatron-22B_full' is not a profile name")),
        ("onto-case-by-link", [*fit, "ok.yaml"], {"c.jsonl": good, "s.jsonl": sweeps}, "error", ("--output",)),
        ("onto-existing", [*fit, "f.yaml"], {"c.jsonl": good, "s.jsonl": sweeps, "f.yaml": "name: f\n"}, "error",
         ("--replace",)),
        ("onto-existing-replace", [*fit, "f.yaml", "--replace"], {"c.jsonl": good, "s.jsonl": sweeps}, "ok", ()),
        ("name-upper", [*fit, "F.yaml"], {"c.jsonl": good, "s.jsonl": sweeps}, "error",
         ("--output", "'F' is not a profile name")),
        ("only-sweeps", ["evidence", "fit", "--base", "a100_80g", "--measurements", "s.jsonl", "--output", "f.yaml"],
         {"s.jsonl": sweeps}, "error", ("kind",)),
    ]:
        outputs = ("f.yaml",) if expect in ("error", "fit-refused") else ()
        check = _fit_refused if expect == "fit-refused" else None
        setup = {"onto-existing-replace": _existing("f.yaml"),
                 "onto-case-by-link": _link("ok.yaml", "proj/cases/megatron-22B_full.yaml")}.get(name)
        a.append(make("measured:fit", name, argv, "any" if expect == "fit-refused" else expect, files, needles,
                      outputs=outputs, timeout=300, check=check, setup=setup))
    report = ["evidence", "report", "--profile", "a100_measured", "--base", "a100_80g", "--measurements", "c.jsonl",
              "s.jsonl", "--output", "r.json"]
    a.append(make("measured:report", "one-shape", report, "any", {"c.jsonl": good, "s.jsonl": sweeps}, (),
                  timeout=300, check=_not_enough_data))
    a.append(make("measured:report", "impossible", report, "any", {"c.jsonl": _corpus(_records(8, 1e-3)),
                                                                   "s.jsonl": sweeps}, (), outputs=("r.json",),
                  timeout=300, check=_fit_refused))
    a.append(make("measured:report", "onto-corpus", [*report[:-1], "{p}/measurements/vtrain/vtrain-a100.jsonl"],
                  "error", {"c.jsonl": good, "s.jsonl": sweeps}, ("--output",), timeout=300))
    a.append(make("measured:report", "plots-into-cases", [*report, "--plots", "{p}/cases"], "error",
                  {"c.jsonl": good, "s.jsonl": sweeps}, ("--plots",), timeout=300))
    return a


def _existing(name: str):
    """A setup: an existing output the attempt replaces on purpose (not one of its inputs)."""
    def make(work: Path) -> None:
        (work / name).write_text("name: old\n")
    return make


def _link(name: str, target: str):
    def make(work: Path) -> None:
        (work / name).symlink_to(work / target)
    return make


def _fit_refused(work, result) -> list[str]:
    if result.status != 1:
        return [f"a fit on data it cannot reproduce: exit {result.status}, not 1"]
    if "mean |error|" not in result.out:
        return ["the refusal shows no residuals"]
    return [] if not (work / "f.yaml").exists() else ["a refused fit wrote its output"]


def _not_enough_data(work, result) -> list[str]:
    problems = []
    if result.status != 1:
        problems.append(f"budgets over zero records: exit {result.status}, not 1")
    if "budgets: all met" in result.out or "not enough data" not in result.out:
        problems.append("the report does not say 'not enough data'")
    return problems


#: Data files of the project (relative to it) every command's outputs must leave alone.
DATA_TARGETS = ("cases/megatron-22B_full.yaml", "cases/concurrency/megatron-22B_overlap.yaml",
                "measurements/vtrain/vtrain-a100.jsonl", "measurements/korthikanti22.jsonl",
                "evidence/a100_80g.yaml", "goldens/baseline_regression_contract.json",
                "vendor/calculon-0.1.0/MANIFEST.json", "vendor/calculon-0.1.0/records/cases.json", "link-to-case.yaml")


def _outputs(make, python, symlink) -> list:
    a = []
    case = "{p}/cases/megatron-22B_full.yaml"
    table = nccl_table()
    t4 = json.dumps(T4)
    vtrain = VTRAIN_HEADER + ",".join(VTRAIN_ROW) + "\n"
    commands = [
        ("estimate", ["estimate", case, "--output"], {}),
        ("estimate-json", ["estimate", case, "--json", "--output"], {}),
        ("calibrate", ["calibrate", "--output"], {}),
        ("trace", ["trace", case, "--output"], {}),
        ("search", ["search", "--model", case, "--system", "a100_80g", "--procs", "2", "--max-batch", "2",
                    "--datatype", "float16", "--no-progress", "--output"], {}),
        ("import-vtrain", ["evidence", "import", "vtrain", "v.csv", "--output"], {"v.csv": vtrain}),
        ("import-korthikanti", ["evidence", "import", "korthikanti", "--table4", "t4.json", "--output"],
         {"t4.json": t4}),
        ("import-nccl", ["evidence", "import", "nccl-tests", "t.txt", "--tier", "0", "--output"], {"t.txt": table}),
        ("import-nccl-profile", ["evidence", "import", "nccl-tests", "t.txt", "--tier", "0", "--output", "o.jsonl",
                                 "--apply", "a100_80g", "--profile-output"], {"t.txt": table}),
        ("derive", ["evidence", "derive", "--from", "a100_measured", "--without", "gradient_accumulation",
                    "--reason", "x", "--output"], {}),
        ("report", ["evidence", "report", "--profile", "a100_measured", "--base", "a100_80g", "--measurements",
                    "{p}/measurements/korthikanti22.jsonl", "--output"], {}),
    ]
    for command, argv, files in commands:
        for target in DATA_TARGETS:
            path = target if target == "link-to-case.yaml" else "{p}/" + target
            a.append(make("measured:outputs", f"{command}-onto-{target}", [*argv, path], "error", files, (),
                          protect=(), timeout=300, setup=symlink("link-to-case.yaml", "proj/cases/megatron-22B_full.yaml"),
                          check=_data_unchanged))
    a.append(make("measured:outputs", "estimate-dev-stdout", ["estimate", case, "--json", "--output", "/dev/stdout"],
                  "ok", {}, (), timeout=120))
    return a


def _data_unchanged(work, result) -> list[str]:
    import hashlib

    project = work / "proj"
    problems = []
    for target in DATA_TARGETS[:-1]:
        path = project / target
        source = ROOT / target
        if path.is_file() and source.is_file() and hashlib.sha256(path.read_bytes()).digest() != \
                hashlib.sha256(source.read_bytes()).digest():
            problems.append(f"data file changed: {target}")
    return problems


def _search(make, python) -> list:
    a = []
    search = ["search", "--model", "{p}/cases/megatron-22B_full.yaml", "--system", "a100_80g", "--datatype",
              "float16", "--no-progress"]
    for mode in ("silent", "http", "close", "garbage"):
        a.append(make("measured:search", f"scheduler-{mode}",
                      ["@", python, "-c", SILENT, mode, *search, "--procs", "2", "--max-batch", "2", "--scheduler",
                       "tcp://127.0.0.1:PORT"], "error", {}, ("--scheduler", "127.0.0.1"), timeout=90))
    for name, extra, expect in [("top-huge-16", ["--procs", "16", "--max-batch", "16", "--top", "1000000"], "error"),
                                ("top-huge-64", ["--procs", "64", "--max-batch", "64", "--top", "1000000"], "error"),
                                ("top-large-2", ["--procs", "2", "--max-batch", "2", "--top", "1000000"], "any"),
                                ("top-over-bound", ["--procs", "2", "--max-batch", "2", "--top", "1000001"], "error"),
                                ("scheduler-not-an-address", ["--procs", "2", "--max-batch", "2", "--scheduler",
                                                              "tcp://nohost:notaport"], "error"),
                                ("scheduler-no-port", ["--procs", "2", "--max-batch", "2", "--scheduler",
                                                       "tcp://127.0.0.1"], "error")]:
        a.append(make("measured:search", name, [*search, *extra], expect, {}, ("--top",) if "top" in name else
                      ("--scheduler",), timeout=120))
    return a


def _plugin(make, python, ok, refuses) -> list:
    a = []
    for name, args, files, expect in [
        ("oracle-live-no-src", ["--harness-oracle", "live"], {}, "error"),
        ("oracle-live-file-src", ["--harness-oracle", "live", "--harness-calculon-src", "f.txt"], {"f.txt": "x"},
         "error"),
        ("oracle-unknown", ["--harness-oracle", "sometimes"], {}, "error"),
        ("cases-binary", ["--harness-cases", "cd"], {"cd/c.yaml": b"\x89PNG\x00"}, "error"),
        ("cases-deep", ["--harness-cases", "cd"], {"cd/c.yaml": "a: " + "[" * 5000 + "]" * 5000 + "\n"}, "error"),
    ]:
        argv = ["@", python, "-m", "pytest", "-p", "harness.pytest_plugin", "-m", "calibration", "-q", "--co",
                "{root}/tests/test_calibration.py", "-p", "no:cacheprovider", "--rootdir", "{root}", *args]
        a.append(make("measured:plugin", name, argv, "driver", files, (), timeout=120,
                      check=refuses if expect == "error" else ok))
    return a


def measured_attempts(make: Callable[..., Any], python: str, *, symlink, pytest_ok, pytest_refuses) -> list:
    """Every attempt of the group (``make``: the sweep's Attempt; ``symlink``, ``pytest_ok``,
    ``pytest_refuses``: its setup and check helpers)."""
    return [*_nccl(make, python), *_korthikanti(make, python), *_vtrain(make, python), *_fit(make, python),
            *_outputs(make, python, symlink), *_search(make, python),
            *_plugin(make, python, pytest_ok, pytest_refuses)]
