#!/usr/bin/env python
"""Hostile-input sweep: attack every command and file kind as a hostile or careless user would, and
classify each outcome (issue 12's bar).

    python scripts/hostile_sweep.py [--only CLASS[,CLASS]] [--jobs 2] [--show weak,bad] [--json OUT]

Each attempt runs the real command line (``python -m harness ...``) in a fresh scratch directory, with
``HARNESS_PROJECT`` a copy of the project's data, and is classified:

- **bad**: a traceback or ``error: internal error``; a hang (timeout); exit 0 where an error is due
  (a silently accepted bad input, a zero-case success); a NaN, infinite or negative figure in any
  output; a changed input or tool data file; a partial or changed target file after a failed run;
  a valid input refused.
- **weak**: refused with a non-zero exit, but not as one ``error: ...`` line naming the file and the
  field the attempt expects (``needles``), or a temporary file left behind.
- **good**: everything else.

The attempt set is data (``attempts()``): each is (class, name, argv, expected outcome, files to create,
what the error must name). Rerun it after a change; ``--show bad`` prints the details of what failed.
Exit status: 1 when any attempt is bad.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import gzip
import hashlib
import json
import math
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT.parent / "shared" / "reference"
CALCULON = Path(os.environ.get("HARNESS_CALCULON_SRC", "/work/calculon"))
PY = sys.executable
TREE = ROOT  # the checkout under test (--tree): its harness package and its data

CASE = (ROOT / "cases" / "megatron-22B_full.yaml").read_text()
OVERLAP_CASE = (ROOT / "cases" / "concurrency" / "megatron-22B_overlap.yaml").read_text()
OFFLOAD_CASE = (ROOT / "cases" / "concurrency" / "gpt3-13B_offload.yaml").read_text()
PROFILE = (ROOT / "evidence" / "a100_80g.yaml").read_text()
MEASURED = (ROOT / "evidence" / "a100_measured.yaml").read_text()
MODEL = {"hidden": 6144, "feedforward": 24576, "seq_size": 2048, "attn_heads": 64, "attn_size": 96, "num_blocks": 48}
EXECUTION = {"num_procs": 8, "tensor_par": 8, "pipeline_par": 1, "data_par": 1, "tensor_par_net": 0,
             "pipeline_par_net": 1, "data_par_net": 1, "batch_size": 4, "microbatch_size": 4, "datatype": "float16",
             "fused_activation": False, "attention_type": "multihead", "activation_recompute": "attn_only",
             "pipeline_interleaving": 1, "optimizer_sharding": False, "tensor_par_comm_type": "rs_ag",
             "tensor_par_overlap": "none", "seq_par_ag_redo": True, "data_par_overlap": False,
             "weight_offload": False, "activations_offload": False, "optimizer_offload": False, "training": True}
LINE = {"id": "good", "model": MODEL, "execution": EXECUTION, "system": "a100_80g"}


def sub(text: str, old: str, new: str) -> str:
    if old not in text:
        raise SystemExit(f"hostile_sweep: {old!r} is not in the base text (the shipped file changed?)")
    return text.replace(old, new, 1)


#: The header of vTrain's CSV files (the importer's input).
VTRAIN_HEADER = ("# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,tensor "
                 "parallelism,data parallelism,pipeline parallelism,iteration time (ms)\n")


def line(**changes) -> str:
    data = json.loads(json.dumps(LINE))
    for key, value in changes.items():
        section, _, field = key.partition("__")
        if field:
            data[section][field] = value
        else:
            data[section] = value
    return json.dumps(data)


@dataclasses.dataclass
class Attempt:
    cls: str
    name: str
    argv: list[str]
    expect: str = "error"  # error | ok | any | batch
    files: dict[str, str | bytes] = dataclasses.field(default_factory=dict)
    needles: tuple[str, ...] = ()  # each must appear in the error line ("a|b": a or b)
    outputs: tuple[str, ...] = ()  # must not appear (or must stay as they were) after a refusal
    protect: tuple[str, ...] = ()  # extra files that must not change
    setup: Callable[[Path], None] | None = None
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    timeout: float = 90.0
    batch_invalid: tuple[str, ...] = ()  # batch: ids expected invalid (others ok)
    check: Callable[[Path, "Run"], list[str]] | None = None  # extra checks, return problems (bad)


@dataclasses.dataclass
class Run:
    status: int | None
    out: str
    err: str
    seconds: float


# --------------------------------------------------------------------------------------------- checks

_NONFINITE = re.compile(r"(?<![A-Za-z_])(nan|NaN|-?inf|-?Infinity|-?INF)(?![A-Za-z_])")
_NEGATIVE_FIGURE = re.compile(r"(?:=|:)\s*(-\d[\d.e+-]*)\s*(?:s\b|GiB|%|$)")
FIGURE_KEY = re.compile(r"(_s|_bytes|_s_per_[a-z]+|total|seconds|memory)$")
SIGNED_KEY = re.compile(r"(error|delta|diff|pct|offset|log|residual|change)", re.I)


def _strict_json(text: str):
    def refuse(name):
        raise ValueError(f"non-JSON constant {name}")
    return json.loads(text, parse_constant=refuse)


def figure_problems(data, path: str = "") -> list[str]:
    problems = []
    stack = [(path, data, "")]
    while stack:
        where, value, key = stack.pop()
        if isinstance(value, dict):
            stack.extend((f"{where}.{k}", v, str(k)) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", v, key) for i, v in enumerate(value))
        elif isinstance(value, float) and not math.isfinite(value):
            problems.append(f"non-finite {where}={value}")
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
            if FIGURE_KEY.search(key) and not SIGNED_KEY.search(where):
                problems.append(f"negative {where}={value}")
    return problems[:3]


def output_problems(text: str, what: str) -> list[str]:
    """Non-finite or negative figures in a command's text or JSON output."""
    stripped = text.strip()
    if not stripped:
        return []
    if stripped[0] in "[{":
        try:
            return [f"{what}: {p}" for p in figure_problems(_strict_json(stripped))]
        except ValueError as error:
            if "non-JSON constant" in str(error):
                return [f"{what}: not strict JSON ({error})"]
            # not one JSON document (JSONL, or JSON followed by text): fall back to the text checks
    problems = []
    match = _NONFINITE.search(text)
    if match:
        problems.append(f"{what}: non-finite figure {text[max(0, match.start() - 40):match.end() + 10]!r}")
    for m in _NEGATIVE_FIGURE.finditer(text):
        context = text[max(0, m.start() - 40):m.end()]
        if not SIGNED_KEY.search(context) and "error" not in context:
            problems.append(f"{what}: negative figure {context!r}")
            break
    return problems


def digest(path: Path) -> str | None:
    try:
        if path.is_dir():
            return "dir"
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def snapshot(paths) -> dict[Path, str | None]:
    return {p: digest(p) for p in paths}


# --------------------------------------------------------------------------------------------- running


def make_project(base: Path, vendor: Path) -> Path:
    project = base / "proj"
    project.mkdir()
    shutil.copytree(TREE / "evidence", project / "evidence")
    shutil.copytree(TREE / "cases", project / "cases")
    shutil.copytree(TREE / "goldens", project / "goldens", ignore=shutil.ignore_patterns("test_*"))
    shutil.copytree(TREE / "measurements", project / "measurements")
    (project / "vendor").symlink_to(vendor)
    return project


def run_attempt(attempt: Attempt, scratch: Path, vendor: Path) -> tuple[str, list[str], Run]:
    work = Path(tempfile.mkdtemp(prefix="a-", dir=scratch))
    project = make_project(work, vendor)
    for rel, content in attempt.files.items():
        path = work / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    if attempt.setup is not None:
        attempt.setup(work)
    fmt = {"w": str(work), "p": str(project), "root": str(TREE), "calculon": str(CALCULON)}
    # a driver script (a multi-line argument, with braces of its own) is passed as is
    argv = [a if "\n" in a else a.format(**fmt) for a in attempt.argv]
    inputs = [work / rel for rel in attempt.files] + [work / p.format(**fmt) for p in attempt.protect]
    inputs += sorted(p for p in (project / "evidence").glob("*.yaml"))
    contract = project / "goldens" / "baseline_regression_contract.json"
    if not (attempt.expect == "ok" and str(contract) in argv):  # contract write onto it: what the command is for
        inputs.append(contract)
    inputs += sorted(p for d in ("cases", "measurements") for p in (project / d).rglob("*") if p.is_file())
    outputs = [work / o.format(**fmt) for o in attempt.outputs]
    before = snapshot(inputs)
    out_before = snapshot(outputs)
    env = dict(os.environ, HARNESS_PROJECT=str(project), PYTHONDONTWRITEBYTECODE="1", COLUMNS="200",
               PYTHONPATH=str(TREE))
    env.pop("HARNESS_DEBUG", None)
    env.update({k: v.format(**fmt) for k, v in attempt.env.items()})
    start = time.monotonic()
    try:
        proc = subprocess.run([PY, "-m", "harness", *argv] if argv[:1] != ["@"] else argv[1:], cwd=work, env=env,
                              capture_output=True, text=True, errors="replace", timeout=attempt.timeout,
                              stdin=subprocess.DEVNULL)
        result = Run(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)
    except subprocess.TimeoutExpired as error:
        result = Run(None, (error.stdout or b"").decode("utf-8", "replace") if isinstance(error.stdout, bytes)
                     else (error.stdout or ""), str(error.stderr or ""), attempt.timeout)
    verdict, problems = classify(attempt, result, work, before, out_before, inputs, outputs)
    if attempt.check is not None and result.status is not None:
        extra = attempt.check(work, result)
        if extra:
            verdict, problems = "bad", problems + extra
    # the scratch directory goes (chmod back what an attempt made read-only)
    for dirpath, dirnames, _ in os.walk(work):
        for d in dirnames:
            with_path = Path(dirpath) / d
            if not with_path.is_symlink():
                try:
                    os.chmod(with_path, 0o755)
                except OSError:
                    pass
    shutil.rmtree(work, ignore_errors=True)
    return verdict, problems, result


def classify(attempt, result, work, before, out_before, inputs, outputs) -> tuple[str, list[str]]:
    bad, weak = [], []
    err_lines = [l for l in result.err.splitlines() if l.strip()]
    if result.status is None:
        bad.append(f"hang: no answer in {attempt.timeout:.0f} s")
    if "Traceback (most recent call last)" in result.err:
        bad.append("traceback: " + (err_lines[-1] if err_lines else ""))
    if "internal error" in result.err:
        bad.append("internal error: " + next((l for l in err_lines if "internal error" in l), ""))
    if result.status is not None and result.status < 0:
        bad.append(f"killed by signal {-result.status}")
    after = snapshot(inputs)
    for path, digest_before in before.items():
        if after[path] != digest_before:
            bad.append(f"input changed: {path.relative_to(work)}")
    temporaries = [p for p in work.rglob(".*.tmp")]
    if temporaries:
        weak.append(f"temporary file left: {temporaries[0].relative_to(work)}")
    ok_exit = result.status == 0
    if attempt.expect == "driver":  # a driver script judges itself (check); only crashes and hangs count here
        return ("bad", bad + weak) if bad else (("weak", weak) if weak else ("good", []))
    if attempt.expect == "error" and ok_exit:
        bad.append("accepted (exit 0) where an error is due")
    if attempt.expect == "ok" and result.status not in (0, None):
        bad.append(f"valid input refused (exit {result.status}): {err_lines[-1] if err_lines else ''}")
    if attempt.expect == "batch" and result.status is not None:
        bad.extend(batch_problems(attempt, result, work))
    refused = any(l.startswith("error: ") for l in err_lines)
    if result.status is not None and result.status != 0 and attempt.expect == "any" and not refused:
        pass  # a result with a non-zero exit (a batch with invalid lines, a search with no feasible execution)
    elif result.status is not None and result.status != 0 and attempt.expect in ("error", "any"):
        if len(err_lines) != 1 or not err_lines[0].startswith("error: "):
            weak.append(f"error is not one 'error:' line: {err_lines[:3]}")
        else:
            missing = [n.format(w=str(work)) for n in attempt.needles  # "a|b": either names it
                       if not any(alt in err_lines[0] for alt in n.format(w=str(work)).split("|"))]
            if missing:
                weak.append(f"error does not name {missing}: {err_lines[0][:300]}")
        after_out = snapshot(outputs)
        for path in outputs:
            if after_out[path] != out_before[path]:
                bad.append(f"output written or changed by a refused run: {path.relative_to(work)}")
    # figures: stdout and every JSON/text output the run wrote
    bad.extend(output_problems(result.out, "stdout"))
    if result.status == 0 or attempt.expect == "batch":
        for path in outputs:
            if path.is_file() and path.suffix in (".json", ".jsonl", ".txt", ".yaml"):
                try:
                    text = path.read_text()
                except (OSError, UnicodeDecodeError) as error:
                    bad.append(f"output unreadable: {path.name}: {error}")
                    continue
                bad.extend(output_problems(text, path.name))
    if bad:
        return "bad", bad + weak
    if weak:
        return "weak", weak
    return "good", []


def batch_problems(attempt, result, work) -> list[str]:
    out = work / "out.json"
    if result.status != 1:
        return [f"batch exit {result.status} (1 expected: some line invalid)"]
    try:
        entries = _strict_json(out.read_text())
    except (OSError, ValueError) as error:
        return [f"batch output unusable: {error}"]
    problems = []
    for entry in entries:
        want = "invalid" if entry.get("id") in attempt.batch_invalid or entry.get("id") is None else "ok"
        if entry.get("status") != want and not (want == "ok" and entry.get("status") == "infeasible"):
            problems.append(f"batch line {entry.get('id')!r}: {entry.get('status')} ({entry.get('reason')}), "
                            f"{want} expected")
        if entry.get("status") == "invalid" and "\n" in str(entry.get("reason")):
            problems.append("invalid reason is not one line")
    ids = {e.get("id") for e in entries}
    if "first" not in ids or "last" not in ids:
        problems.append(f"batch lost lines: ids {sorted(map(str, ids))[:6]}")
    return problems


# --------------------------------------------------------------------------------------------- attempts


def _fifo(name):
    def make(work: Path) -> None:
        os.mkfifo(work / name)
    return make


def _symlink(name, target):
    def make(work: Path) -> None:
        (work / name).symlink_to(target.format(w=str(work)))
    return make


def _readonly(name, content="old\n"):
    def make(work: Path) -> None:
        path = work / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if content is None:
            path.mkdir(exist_ok=True)
            os.chmod(path, 0o555)
        else:
            path.write_text(content)
            os.chmod(path, 0o444)
    return make


def _mkdir(name):
    def make(work: Path) -> None:
        (work / name).mkdir(parents=True, exist_ok=True)
    return make


def _all(*steps):
    def make(work: Path) -> None:
        for step in steps:
            step(work)
    return make


# case-file contents, each tried on every case command
HOSTILE_CASE_TEXTS: list[tuple[str, str, str | bytes, tuple[str, ...]]] = [
    # (class, name, content, needles)
    ("bytes", "binary", b"\x89PNG\r\n\x1a\n\x00\x00IHDR", ("<file>", "UTF-8")),
    ("bytes", "latin1", sub(CASE, "# Table 5", "# Tabl\u00e9 5").encode("latin-1"), ("UTF-8",)),
    ("bytes", "nul-byte", sub(CASE, "hidden: 6144", "hidden: 61\x0044"), ("(line ",)),  # read before any field
    ("bytes", "bom-utf8", "\ufeff" + CASE, ()),
    ("bytes", "utf16", CASE.encode("utf-16"), ("UTF-8",)),
    ("bytes", "crlf", CASE.replace("\n", "\r\n"), ()),
    ("bytes", "lone-cr", CASE.replace("\n", "\r"), ()),
    ("bytes", "surrogate-escape", sub(CASE, "id: megatron-22B/full", 'id: "\\ud800"'), ("id",)),
    ("bytes", "bidi-in-id", sub(CASE, "id: megatron-22B/full", "id: \"mega\u202etron\""), ("id",)),
    ("size", "empty", "", ("<root>",)),
    ("size", "only-comment", "# nothing\n", ("<root>",)),
    ("size", "null-doc", "~\n", ("<root>",)),
    ("size", "scalar-doc", "42\n", ("<root>",)),
    ("size", "huge-comment", CASE + "#" + "x" * (70 * 2**20) + "\n", ("<file>",)),
    ("size", "long-id", sub(CASE, "id: megatron-22B/full", "id: " + "a" * 100_000), ("id",)),
    ("nesting", "deep-flow", "schema: " + "[" * 100_000 + "]" * 100_000 + "\n", ("nest",)),
    ("nesting", "deep-map-flow", "a: " + "{b: " * 50_000 + "1" + "}" * 50_000 + "\n", ("nest",)),
    ("nesting", "deep-block", "".join("  " * i + "a:\n" for i in range(2_000)), ("nest",)),
    ("nesting", "wide", "x:\n" + "".join(f"  k{i}: {i}\n" for i in range(200_000)), ()),
    ("numbers", "yaml-.nan", sub(CASE, "hidden: 6144", "hidden: .nan"), ("model.hidden",)),
    ("numbers", "yaml-.NaN", sub(CASE, "hidden: 6144", "hidden: .NaN"), ("model.hidden",)),
    ("numbers", "yaml-.inf", sub(CASE, "iteration_s: 1.42", "iteration_s: .inf"), ("iteration_s",)),
    ("numbers", "yaml--.Inf", sub(CASE, "iteration_s: 1.42", "iteration_s: -.Inf"), ("iteration_s",)),
    ("numbers", "yaml-1e999", sub(CASE, "iteration_s: 1.42", "iteration_s: 1e999"), ("iteration_s",)),
    ("numbers", "yaml-1e-999", sub(CASE, "iteration_s: 1.42", "iteration_s: 1e-999"), ("iteration_s",)),
    ("numbers", "yaml-NaN-word", sub(CASE, "iteration_s: 1.42", "iteration_s: NaN"), ("iteration_s",)),
    ("numbers", "yaml-Infinity-word", sub(CASE, "iteration_s: 1.42", "iteration_s: Infinity"), ("iteration_s",)),
    ("numbers", "paper-negative", sub(CASE, "iteration_s: 1.42", "iteration_s: -1.42"), ("iteration_s",)),
    ("numbers", "paper-zero", sub(CASE, "iteration_s: 1.42", "iteration_s: 0"), ("iteration_s",)),
    ("numbers", "paper-denormal", sub(CASE, "iteration_s: 1.42", "iteration_s: 5e-324"), ("iteration_s",)),
    ("numbers", "paper-huge", sub(CASE, "iteration_s: 1.42", "iteration_s: 1e300"), ("iteration_s",)),
    ("numbers", "int-400-digits", sub(CASE, "global_batch: 4", "global_batch: " + "9" * 400), ("global_batch",)),
    ("numbers", "int-2^63", sub(CASE, "global_batch: 4", f"global_batch: {2**63}"), ("global_batch",)),
    ("numbers", "negative-hidden", sub(CASE, "hidden: 6144", "hidden: -6144"), ("model.hidden",)),
    ("numbers", "zero-hidden", sub(CASE, "hidden: 6144", "hidden: 0"), ("model.hidden",)),
    ("numbers", "zero-blocks", sub(CASE, "blocks: 48", "blocks: 0"), ("model.blocks",)),
    ("numbers", "zero-batch", sub(CASE, "global_batch: 4", "global_batch: 0"), ("global_batch",)),
    ("numbers", "zero-tp", sub(CASE, "tensor_parallel: 8", "tensor_parallel: 0"), ("tensor_parallel",)),
    ("numbers", "negative-tp", sub(CASE, "tensor_parallel: 8", "tensor_parallel: -8"), ("tensor_parallel",)),
    ("numbers", "float-tp", sub(CASE, "tensor_parallel: 8", "tensor_parallel: 8.0"), ("tensor_parallel",)),
    ("numbers", "hex-tp", sub(CASE, "tensor_parallel: 8", "tensor_parallel: 0x8"), ("tensor_parallel",)),
    ("numbers", "octal-tp", sub(CASE, "tensor_parallel: 8", "tensor_parallel: 0o10"), ("tensor_parallel",)),
    ("numbers", "sexagesimal", sub(CASE, "hidden: 6144", "hidden: 1:42:24"), ("model.hidden",)),
    ("numbers", "underscore-int", sub(CASE, "hidden: 6144", "hidden: 6_144"), ()),
    ("numbers", "bool-tp", sub(CASE, "tensor_parallel: 8", "tensor_parallel: true"), ("tensor_parallel",)),
    ("numbers", "string-hidden", sub(CASE, "hidden: 6144", 'hidden: "6144"'), ("model.hidden",)),
    ("numbers", "yes-training", sub(CASE, "training: true", "training: yes"), ("training",)),
    ("numbers", "on-training", sub(CASE, "training: true", "training: on"), ("training",)),
    ("numbers", "null-hidden", sub(CASE, "hidden: 6144", "hidden: null"), ("model.hidden",)),
    ("numbers", "tilde-tp", sub(CASE, "tensor_parallel: 8", "tensor_parallel: ~"), ("tensor_parallel",)),
    ("numbers", "max-widths", sub(sub(CASE, "hidden: 6144", f"hidden: {2**20}"), "feedforward: 24576",
                                  f"feedforward: {2**20}"), ()),
    ("keys", "duplicate", sub(CASE, "  blocks: 48", "  blocks: 48\n  blocks: 96"), ("model.blocks", "duplicate")),
    ("keys", "duplicate-top", CASE + "\nsystem: a100_80e\n", ("system", "duplicate")),
    ("keys", "duplicate-section", CASE + "\nmodel:\n  hidden: 1\n", ("model", "duplicate")),
    ("keys", "duplicate-quoted", sub(CASE, "  blocks: 48", "  blocks: 48\n  \"blocks\": 96"), ("blocks",)),
    ("keys", "anchor-alias", sub(sub(CASE, "  blocks: 48", "  blocks: &b 48"), "  hidden: 6144", "  hidden: *b"),
     ("alias",)),
    ("keys", "merge-key", sub(CASE, "model:\n", "model:\n  <<: {hidden: 1}\n"), ("model",)),
    ("keys", "merge-key-alias", "base: &b {hidden: 1}\n" + sub(CASE, "model:\n", "model:\n  <<: *b\n"), ()),
    ("keys", "python-tag", sub(CASE, "id: megatron-22B/full", "id: !!python/object/apply:os.system [echo]"),
     ("id", "tag")),
    ("keys", "local-tag", sub(CASE, "hidden: 6144", "hidden: !custom 6144"), ("hidden", "tag")),
    ("keys", "binary-tag", sub(CASE, "id: megatron-22B/full", "id: !!binary aGVsbG8="), ("id",)),
    ("keys", "set-tag", sub(CASE, "hidden: 6144", "hidden: !!set {a, b}"), ("hidden",)),
    ("keys", "two-documents", CASE + "\n---\n" + CASE, ("document",)),
    ("keys", "doc-end-then-junk", CASE + "\n...\nhidden: 1\n", ()),
    ("keys", "complex-key", sub(CASE, "model:\n", "model:\n  ? [a, b]\n  : 1\n"), ("model",)),
    ("keys", "int-key", sub(CASE, "model:\n", "model:\n  1: 2\n"), ("model",)),
    ("keys", "null-key", sub(CASE, "model:\n", "model:\n  ~: 2\n"), ("model",)),
    ("keys", "directive", "%YAML 1.1\n---\n" + CASE, ()),
    ("keys", "bad-directive", "%YAML 9.9\n---\n" + CASE, ()),
    ("shape", "list-root", "- 1\n- 2\n", ("<root>",)),
    ("shape", "model-is-list", sub(CASE, "model:\n", "model: [1, 2]\nmodel_x:\n"), ("model",)),
    ("shape", "execution-scalar", CASE.split("execution:")[0] + "execution: 3\n", ("execution",)),
    ("shape", "tiers-list", sub(CASE, "network_tiers:", "network_tiers: [0, 1, 1]\n  old_tiers:"),
     ("network_tiers",)),
    ("shape", "unknown-field", sub(CASE, "  blocks: 48", "  blocks: 48\n  experts: 8"), ("model.experts",)),
    ("shape", "unknown-top", CASE + "\nextra: 1\n", ("extra",)),
    ("shape", "missing-model", re.sub(r"model:\n(  .*\n)+", "", CASE), ("model",)),
    ("shape", "missing-hidden", sub(CASE, "  hidden: 6144\n", ""), ("model.hidden",)),
    ("shape", "wrong-schema", sub(CASE, "schema: blueprinting.case.v0", "schema: blueprinting.case.v9"), ("schema",)),
    ("names", "system-dotdot", sub(CASE, "system: a100_80g", "system: ../evidence/a100_80g"), ("system",)),
    ("names", "system-abs", sub(CASE, "system: a100_80g", "system: /etc/passwd"), ("system",)),
    ("names", "system-cyrillic", sub(CASE, "system: a100_80g", "system: \u0430100_80g"), ("system",)),
    ("names", "system-fullwidth", sub(CASE, "system: a100_80g", "system: a\uff11\uff10\uff10_80g"), ("system",)),
    ("names", "system-dot", sub(CASE, "system: a100_80g", "system: ."), ("system",)),
    ("names", "system-dotdot-only", sub(CASE, "system: a100_80g", "system: .."), ("system",)),
    ("names", "system-hidden", sub(CASE, "system: a100_80g", "system: .a100_80g"), ("system",)),
    ("names", "system-trailing-space", sub(CASE, "system: a100_80g", "system: 'a100_80g '"), ("system",)),
    ("names", "system-case", sub(CASE, "system: a100_80g", "system: A100_80G"), ("system",)),
    ("names", "system-nul", sub(CASE, "system: a100_80g", 'system: "a100\\0"'), ("system",)),
    ("names", "system-long", sub(CASE, "system: a100_80g", "system: " + "a" * 5000), ("system",)),
    ("names", "system-NaN", sub(CASE, "system: a100_80g", "system: NaN"), ("system",)),
    ("names", "id-newline", sub(CASE, "id: megatron-22B/full", 'id: "a\\nb"'), ("id",)),
    ("names", "id-ansi", sub(CASE, "id: megatron-22B/full", 'id: "\\e[31mred"'), ("id",)),
    ("names", "id-empty", sub(CASE, "id: megatron-22B/full", "id: ''"), ("id",)),
    ("names", "id-cyrillic", sub(CASE, "id: megatron-22B/full", "id: m\u0435gatron-22B/full"), ()),
    ("names", "datatype-unknown", sub(CASE, "datatype: float16", "datatype: float128"), ("datatype",)),
    ("names", "datatype-case", sub(CASE, "datatype: float16", "datatype: FLOAT16"), ("datatype",)),
    ("names", "recompute-unknown", sub(CASE, "recompute: full", "recompute: partial"), ("recompute",)),
    ("names", "oracle-record-path", sub(CASE, "oracle_record: megatron-22B/full", "oracle_record: ../../x"), ()),
]


def _layout(**changes) -> str:
    """The megatron-22B case with execution fields replaced (or added)."""
    text = CASE
    for key, value in changes.items():
        pattern = re.compile(rf"^  {key}: .*$", re.M)
        if pattern.search(text):
            text = pattern.sub(f"  {key}: {value}", text, count=1)
        else:
            text = sub(text, "  training: ", f"  {key}: {value}\n  training: ")
    return text


def _overlap(**changes) -> str:
    text = OVERLAP_CASE
    for key, value in changes.items():
        pattern = re.compile(rf"^  {key}: .*$", re.M)
        if pattern.search(text):
            text = pattern.sub(f"  {key}: {value}", text, count=1)
        else:
            text = sub(text, "  training: ", f"  {key}: {value}\n  training: ")
    return text


# layouts: (name, content, expect) -- "any": a refusal or an estimate, never a traceback or a bad figure
LAYOUTS = [
    ("tp-not-dividing", _layout(tensor_parallel=7), "error"),
    ("tp1-overlap-ring", _layout(tensor_parallel=1, data_parallel=8, global_batch=8, tp_overlap="ring"), "any"),
    ("tp1-overlap-pipe", _layout(tensor_parallel=1, data_parallel=8, global_batch=8, tp_overlap="pipe"), "any"),
    ("dp-overlap-without-dp", _layout(dp_overlap="true"), "any"),
    ("optimizer-sharding-without-dp", _layout(optimizer_sharding="true"), "any"),
    ("offload-1-block", _layout(**{"offload": "{weights: true, activations: true, optimizer: true}"}).replace(
        "blocks: 48", "blocks: 1").replace("tensor_parallel: 8", "tensor_parallel: 1").replace(
        "num_procs", "num_procs"), "any"),
    ("offload-2-blocks-pp2", _layout(tensor_parallel=4, pipeline_parallel=2,
                                     offload="{weights: true, activations: true}").replace("blocks: 48", "blocks: 2"),
     "any"),
    ("inference-optimizer-offload", _layout(training="false", offload="{optimizer: true}"), "any"),
    ("inference-recompute", _layout(training="false"), "any"),
    ("inference-dp-overlap", _layout(training="false", dp_overlap="true"), "any"),
    # recompute: selective (Megatron-Core's recompute_modules)
    ("selective-without-modules", _layout(recompute="selective"), "error"),
    ("selective-modules-string", _layout(recompute="selective", recompute_modules="layernorm"), "error"),
    ("selective-modules-empty", _layout(recompute="selective", recompute_modules="[]"), "error"),
    ("selective-modules-twice", _layout(recompute="selective", recompute_modules="[layernorm, layernorm]"), "error"),
    ("selective-modules-unknown", _layout(recompute="selective", recompute_modules="[attention]"), "error"),
    ("selective-moe-act-dense", _layout(recompute="selective", recompute_modules="[moe_act]"), "error"),
    ("selective-whole-mlp", _layout(recompute="selective", recompute_modules="[mlp]"), "error"),
    ("modules-under-full", _layout(recompute_modules="[layernorm]"), "error"),
    ("selective-inference", _layout(training="false", recompute="selective", recompute_modules="[layernorm]"),
     "error"),
    ("selective-all-priced", _layout(recompute="selective", recompute_modules="[core_attn, layernorm]"), "any"),
    # recompute_blocks (Megatron-Core's recompute_method: block)
    ("recompute-blocks-without-full", _layout(recompute="none", recompute_blocks=2), "error"),
    ("recompute-blocks-zero", _layout(recompute_blocks=0), "error"),
    ("recompute-blocks-more-than-a-chunk", _layout(recompute_blocks=49), "any"),  # every block: full
    ("recompute-blocks-string", _layout(recompute_blocks="'2'"), "error"),
    ("recompute-blocks-huge", _layout(recompute_blocks=2**70), "error"),
    ("recompute-blocks-offload", _layout(recompute_blocks=2, offload="{activations: true}"), "error"),
    ("recompute-blocks-some", _layout(recompute_blocks=12), "any"),
    # expert_overlap (Megatron-Core's overlap_moe_expert_parallel_comm): a dense case has no all-to-all
    ("expert-overlap-dense", _layout(expert_overlap="true"), "error"),
    ("expert-overlap-string", _layout(expert_overlap="'true'"), "error"),
    ("expert-overlap-false", _layout(expert_overlap="false"), "any"),
    ("microbatch-gt-batch", _layout(microbatch=8), "error"),
    ("batch-not-multiple", _layout(global_batch=5, microbatch=2), "error"),
    ("interleave-too-deep", _layout(pipeline_parallel=2, pipeline_interleaving=48, data_parallel=1), "any"),
    ("pp-more-than-blocks", _layout(pipeline_parallel=64, tensor_parallel=1), "any"),
    ("tier-missing", _layout(network_tiers="{tensor: 5, pipeline: 1, data: 1}"), "error"),
    ("tier-negative", _layout(network_tiers="{tensor: -1, pipeline: 1, data: 1}"), "error"),
    ("tier-huge", _layout(network_tiers=f"{{tensor: {2**40}, pipeline: 1, data: 1}}"), "error"),
    ("tp-bigger-than-tier0", _layout(tensor_parallel=16, global_batch=4).replace("data_parallel: 1",
                                                                                 "data_parallel: 1"), "any"),
    ("huge-layout", _layout(data_parallel=2**20, global_batch=2**20), "any"),
    ("huge-batch", _layout(global_batch=2**24, microbatch=1), "any"),
    ("huge-sequence", CASE.replace("sequence_length: 2048", f"sequence_length: {2**24}"), "any"),
    ("huge-everything", CASE.replace("hidden: 6144", f"hidden: {2**20}").replace(
        "feedforward: 24576", f"feedforward: {2**20}").replace("blocks: 48", f"blocks: {2**16}").replace(
        "sequence_length: 2048", f"sequence_length: {2**24}").replace("attention_heads: 64", "attention_heads: 8192")
     .replace("head_size: 96", "head_size: 128"), "any"),
    ("tiny-model", CASE.replace("hidden: 6144", "hidden: 8").replace("feedforward: 24576", "feedforward: 8").replace(
        "attention_heads: 64", "attention_heads: 8").replace("head_size: 96", "head_size: 1").replace(
        "sequence_length: 2048", "sequence_length: 1").replace("blocks: 48", "blocks: 1"), "any"),
    ("tiny-layout", _layout(tensor_parallel=1, global_batch=1, microbatch=1), "any"),
    ("overlap-inference", _overlap(training="false"), "any"),
    ("overlap-tp1", _overlap(tensor_parallel=1, data_parallel=32), "any"),
    ("overlap-dp1", _overlap(data_parallel=1, global_batch=16), "any"),
    ("overlap-pp-interleave-max", _overlap(pipeline_interleaving=24), "any"),
    ("overlap-unknown-kind", _overlap(tp_overlap="mesh"), "error"),
    ("overlap-bool", _overlap(tp_overlap="true"), "error"),
    ("offload-case-inference", OFFLOAD_CASE.replace("training: true", "training: false"), "any"),
    ("offload-unknown-field", OFFLOAD_CASE.replace("activations: true", "activations: true\n    gradients: true"),
     "error"),
    ("offload-list", OFFLOAD_CASE.replace("  offload:\n    weights: true\n    activations: true",
                                          "  offload: [weights]"), "error"),
]


# the case texts also tried on the slower commands (trace, calibrate, contract, concrete lowering, by-task)
HEAVY_SAMPLE = {"binary", "empty", "deep-flow", "duplicate", "anchor-alias", "python-tag", "two-documents",
                "system-dotdot", "system-cyrillic", "yaml-.nan", "int-400-digits", "bool-tp", "unknown-field",
                "list-root", "nul-byte", "merge-key"}


def case_attempts() -> list[Attempt]:
    out = []
    commands = {
        "lower": lambda: ["lower", "c.yaml"],
        "lower-concrete": lambda: ["lower", "--stage", "concrete", "--json", "c.yaml"],
        "estimate": lambda: ["estimate", "c.yaml"],
        "estimate-json": lambda: ["estimate", "--json", "--output", "out.json", "c.yaml"],
        "explain": lambda: ["explain", "--json", "c.yaml"],
        "explain-by-task": lambda: ["explain", "--by-task", "c.yaml"],
        "trace": lambda: ["trace", "c.yaml", "--output", "t.json", "--png", "t.png"],
        "calibrate": lambda: ["calibrate", "--cases", "cd", "--output", "r.json", "--compare"],
        "contract": lambda: ["contract", "check", "--cases", "cd"],
    }
    heavy = {"trace", "calibrate", "contract", "lower-concrete", "explain-by-task"}
    for cls, name, content, needles in HOSTILE_CASE_TEXTS:
        for command, argv in commands.items():
            if command in heavy and name not in HEAVY_SAMPLE:
                continue
            files = {"c.yaml": content} if command not in ("calibrate", "contract") else {"cd/c.yaml": content}
            expect = "any" if name in ("bom-utf8", "crlf", "lone-cr", "wide", "max-widths", "underscore-int",
                                       "id-cyrillic", "directive", "oracle-record-path", "doc-end-then-junk",
                                       "merge-key-alias") else "error"
            if name == "huge-comment" and command not in ("estimate", "lower"):
                continue
            if name == "wide" and command not in ("estimate",):
                continue
            name_needle = ("c.yaml",) if cls != "size" or name != "huge-comment" else ("c.yaml",)
            out.append(Attempt(f"case:{cls}", f"{name} / {command}", argv(), expect, files,
                               name_needle + needles, outputs=("out.json", "t.json", "t.png", "r.json")))
    for name, content, expect in LAYOUTS:
        measured = content.replace("system: a100_80g", "system: a100_measured")
        out.append(Attempt("layout", f"{name} / estimate on a100_measured", commands["estimate-json"](), expect,
                           {"c.yaml": measured}, ("c.yaml",), outputs=("out.json",), timeout=120))
        for command in ("estimate-json", "lower-concrete", "explain", "trace", "explain-by-task"):
            if command in ("trace", "explain-by-task") and name.startswith(("huge", "tier", "tp-not")):
                continue
            out.append(Attempt("layout", f"{name} / {command}", commands[command](), expect, {"c.yaml": content},
                               ("c.yaml",), outputs=("out.json", "t.json", "t.png"), timeout=120))
    return out


def path_attempts() -> list[Attempt]:
    a = []
    case = {"c.yaml": CASE}
    for command, argv in {
        "estimate": ["estimate", "{target}"],
        "lower": ["lower", "{target}"],
        "explain": ["explain", "{target}"],
        "trace": ["trace", "{target}", "--output", "t.json"],
        "batch": ["estimate", "--calculon-batch", "{target}", "--output", "out.json"],
        "import-model": ["import", "calculon", "--model", "{target}", "--execution", "e.json", "--system", "a100_80g"],
        "search-model": ["search", "--model", "{target}", "--system", "a100_80g", "--procs", "8", "--max-batch", "8",
                         "--datatype", "float16", "--workers", "1", "--no-progress"],
        "calibrate-cases": ["calibrate", "--cases", "{target}", "--output", "r.json"],
        "contract-cases": ["contract", "check", "--cases", "{target}"],
        "contract-file": ["contract", "check", "--contract", "{target}"],
        "vtrain": ["evidence", "import", "vtrain", "{target}", "--output", "o.jsonl"],
        "fit-corpus": ["evidence", "fit", "--base", "a100_80g", "--measurements", "{target}", "--output", "f.yaml"],
        "import-reference": ["oracle", "import-reference", "{target}", "--output", "x.json", "--vendor", "v"],
    }.items():
        dir_ok = command in ("calibrate-cases", "contract-cases")
        for name, target, setup in [
            ("missing", "nope.yaml", None),
            ("directory", "d", _mkdir("d")),
            ("fifo", "fifo", _fifo("fifo")),
            ("dev-zero", "/dev/zero", None),
            ("dev-null", "/dev/null", None),
            ("unreadable", "u.yaml", _readonly("u.yaml")),
            ("dangling-symlink", "link", _symlink("link", "{w}/nowhere")),
            ("symlink-loop", "loop", _all(_symlink("loop", "{w}/loop"))),
            ("empty-name", "", None),
            ("dash", "-", None),
            ("proc-self", "/proc/self/status", None),
        ]:
            if dir_ok and name == "directory":
                continue
            if name == "proc-self" and command == "batch":
                continue  # a readable file of bad lines: each line invalid, as any batch
            if name == "unreadable" and os.geteuid() == 0:
                continue  # root reads a 0444 file anyway; permissions cannot be tested as root
            argv2 = [x.replace("{target}", target) for x in argv]
            files = dict(case) if command != "import-model" else {"e.json": json.dumps(EXECUTION)}
            a.append(Attempt("paths", f"{command} / {name}", argv2, "error", files,
                             (target if target not in ("", "-") else "",), setup=setup,
                             outputs=("out.json", "r.json", "o.jsonl", "f.yaml", "t.json"), timeout=30))
    return a


def output_attempts() -> list[Attempt]:
    a = []
    writers = {
        "estimate": (["estimate", "c.yaml", "--json", "--output", "{o}"], "--output"),
        "batch": (["estimate", "--calculon-batch", "b.jsonl", "--output", "{o}"], "--output"),
        "trace": (["trace", "c.yaml", "--output", "{o}"], "--output"),
        "trace-png": (["trace", "c.yaml", "--output", "t.json", "--png", "{o}"], "--png"),
        "calibrate": (["calibrate", "--cases", "cd", "--output", "{o}"], "--output"),
        "calibrate-plots": (["calibrate", "--cases", "cd", "--output", "r.json", "--plots", "{o}"], "--plots"),
        "import": (["import", "calculon", "--model", "m.json", "--execution", "e.json", "--system", "a100_80g",
                    "-o", "{o}"], "--output"),
        "search": (["search", "--model", "m.json", "--system", "a100_80g", "--procs", "8", "--max-batch", "8",
                    "--datatype", "float16", "--workers", "1", "--no-progress", "--output", "{o}"], "--output"),
        "search-pareto": (["search", "--model", "m.json", "--system", "a100_80g", "--procs", "8", "--max-batch", "8",
                           "--datatype", "float16", "--workers", "1", "--no-progress", "--pareto", "{o}"],
                          "--pareto"),
        "vtrain": (["evidence", "import", "vtrain", "v.csv", "--output", "{o}"], "--output"),
        # the documented refit of a100_measured (k.jsonl, k2.jsonl: the vTrain corpora): a fit that reproduces its
        # data, so a valid target (missing-parents) is written
        "evidence-fit": (["evidence", "fit", "--base", "a100_80g", "--measurements", "k.jsonl", "k2.jsonl",
                          "--output", "{o}"], "--output"),
        "contract-write": (["contract", "write", "--cases", "cd", "--contract", "{o}"], "--contract"),
        # a sibling's fitted values onto a data sheet: inputs are shipped profiles only
        "evidence-transfer": (["evidence", "transfer", "--from", "b200_measured", "--base", "b300", "--output", "{o}"],
                              "--output"),
    }
    #: commands that write an evidence profile: it is read back as evidence/NAME.yaml, so their valid target ends
    #: in .yaml (any other name is refused naming --output)
    profile_writers = ("evidence-fit", "evidence-transfer")
    files = {"c.yaml": CASE, "cd/c.yaml": CASE, "b.jsonl": line(id="first") + "\n" + line(id="last") + "\n",
             "m.json": json.dumps(MODEL), "e.json": json.dumps(EXECUTION),
             "v.csv": (REFERENCE / "measurements" / "vtrain" / "single-node-train.csv").read_text()
             if (REFERENCE / "measurements" / "vtrain").is_dir() else "x\n",
             "k.jsonl": (ROOT / "measurements" / "vtrain" / "vtrain-a100.jsonl").read_text(),
             "k2.jsonl": (ROOT / "measurements" / "vtrain" / "vtrain-allreduce-a100.jsonl").read_text()}
    for command, (argv, option) in writers.items():
        is_dir_option = option == "--plots"
        targets = [
            ("onto-input-case", "c.yaml", None, "error"),
            ("onto-input-via-symlink", "lnk", None, "error"),  # a link to the command's own input (below)
            ("onto-directory", "d", _mkdir("d"), "error" if not is_dir_option else "ok"),
            ("onto-shipped-evidence", "{p}/evidence/a100_80g.yaml", None, "error"),
            # evidence fit writes evidence/NAME.yaml by design (how a100_measured is refitted), but replaces an
            # existing profile only with --replace
            ("onto-shipped-measured", "{p}/evidence/a100_measured.yaml", None, "error"),
            ("onto-contract", "{p}/goldens/baseline_regression_contract.json", None,
             "error" if command != "contract-write" else "ok"),
            ("onto-vendor-manifest", "{p}/vendor/calculon-0.1.0/MANIFEST.json", None, "error"),
            ("read-only-file", "ro.json", _readonly("ro.json"), "error"),
            ("read-only-dir", "rod/x.json", _readonly("rod", None), "error"),
            ("under-a-file", "c.yaml/x.json", None, "error"),
            ("missing-parents", "new/deeper/x.json", None, "ok"),
            ("dev-full", "/dev/full", None, "error"),
            ("empty-path", "", None, "error"),
        ]
        for name, target, setup, expect in targets:
            if command == "vtrain" and "v.csv" not in files:
                continue
            if name.startswith("read-only") and os.geteuid() == 0:
                continue
            if name == "onto-input-case" and command in ("import", "search", "search-pareto", "vtrain",
                                                          "evidence-fit"):
                target = {"import": "m.json", "search": "m.json", "search-pareto": "m.json", "vtrain": "v.csv",
                          "evidence-fit": "k.jsonl"}[command]
            if name == "onto-input-case" and command == "batch":
                target = "b.jsonl"
            if name == "onto-input-case" and command in ("calibrate", "contract-write"):
                target = "cd/c.yaml"
            own_input = {"import": "m.json", "search": "m.json", "search-pareto": "m.json", "vtrain": "v.csv",
                         "evidence-fit": "k.jsonl", "batch": "b.jsonl", "calibrate": "cd/c.yaml",
                         "contract-write": "cd/c.yaml"}.get(command, "c.yaml")
            if name == "onto-input-via-symlink":
                setup = _symlink("lnk", "{w}/" + own_input)
            if command in profile_writers and name == "missing-parents":
                target = "new/deeper/x.yaml"
            argv2 = [x.replace("{o}", target) for x in argv]
            outs = (target,) if target and not target.startswith("/dev") else ()
            a.append(Attempt("outputs", f"{command} / {name}", argv2, expect, dict(files),
                             (option,) if expect == "error" and target != "/dev/full" else (),
                             outputs=outs if expect == "error" else (), setup=setup,
                             protect=("vendor_manifest_sentinel",) if False else (), timeout=180,
                             check=_vendor_unchanged))
    return a


_VENDOR_DIGEST: dict[str, str] = {}


def _vendor_unchanged(work: Path, result: Run) -> list[str]:
    vendor = work / "proj" / "vendor"
    now = {str(p.relative_to(vendor)): digest(p) for p in sorted(vendor.rglob("*")) if p.is_file()}
    if _VENDOR_DIGEST and now != _VENDOR_DIGEST:
        changed = sorted(k for k in set(now) | set(_VENDOR_DIGEST) if now.get(k) != _VENDOR_DIGEST.get(k))
        _VENDOR_DIGEST.clear()
        _VENDOR_DIGEST.update(now)
        return [f"vendored files changed: {changed[:3]}"]
    return []


# evidence profiles: (class, name, content) -- tried via a case on estimate/--json, explain, trace
def _profile(old: str, new: str, base: str = PROFILE) -> str:
    """``base`` with the first ``key: value`` line of ``old``'s key set to ``new`` (whatever the shipped value:
    the measured profile is refitted now and then)."""
    key = old.split(":")[0]
    text, count = re.subn(rf"(?m)^(\s*){re.escape(key)}: .*$",
                          lambda m: (m.group(1) + new) if not new.startswith(" ") else new, base, count=1)
    if count != 1:
        raise SystemExit(f"hostile_sweep: no {key!r} line in the base profile")
    return text


NET0 = "  efficiency: 0.65\n  size_processors: 8\n  latency_s: 1.0e-05"
HOSTILE_PROFILES = [
    ("numbers", "peak-nan", _profile("peak_flops_per_s: 312000000000000.0", "peak_flops_per_s: .nan"), "error"),
    ("numbers", "peak-inf", _profile("peak_flops_per_s: 312000000000000.0", "peak_flops_per_s: .inf"), "error"),
    ("numbers", "peak-denormal", _profile("peak_flops_per_s: 312000000000000.0", "peak_flops_per_s: 1.0e-300"),
     "error"),
    ("numbers", "peak-zero", _profile("peak_flops_per_s: 312000000000000.0", "peak_flops_per_s: 0"), "error"),
    ("numbers", "peak-negative", _profile("peak_flops_per_s: 312000000000000.0", "peak_flops_per_s: -3.0e14"),
     "error"),
    ("numbers", "peak-int", _profile("peak_flops_per_s: 312000000000000.0", "peak_flops_per_s: 312000000000000"),
     "any"),
    ("numbers", "peak-string", _profile("peak_flops_per_s: 312000000000000.0", "peak_flops_per_s: '3e14'"), "error"),
    ("numbers", "peak-lower-bound", _profile("peak_flops_per_s: 312000000000000.0", "peak_flops_per_s: 1.0e6"),
     "any"),
    ("numbers", "peak-upper-bound", _profile("peak_flops_per_s: 312000000000000.0", "peak_flops_per_s: 1.0e24"),
     "any"),
    ("numbers", "efficiency-at-bound", PROFILE.replace("efficiency: 0.1\n", "efficiency: 0.0001\n"), "any"),
    ("numbers", "efficiency-zero", PROFILE.replace("efficiency: 0.1\n", "efficiency: 0.0\n"), "error"),
    ("numbers", "efficiency-above-1", PROFILE.replace("efficiency: 0.95\n", "efficiency: 1.5\n"), "error"),
    ("numbers", "efficiency-denormal", PROFILE.replace("efficiency: 0.1\n", "efficiency: 1.0e-320\n"), "error"),
    ("numbers", "bandwidth-lower", PROFILE.replace("bandwidth_bytes_per_s: 300000000000.0",
                                                   "bandwidth_bytes_per_s: 1000.0"), "any"),
    ("numbers", "all-bandwidth-lower", re.sub(r"bandwidth_bytes_per_s: [0-9.e+]+", "bandwidth_bytes_per_s: 1000.0",
                                              PROFILE), "any"),
    ("numbers", "all-lower-bounds", re.sub(r"efficiency: [0-9.]+", "efficiency: 0.0001", re.sub(
        r"bandwidth_bytes_per_s: [0-9.e+]+", "bandwidth_bytes_per_s: 1000.0", re.sub(
            r"peak_flops_per_s: [0-9.e+]+", "peak_flops_per_s: 1.0e6", PROFILE))).replace(
        "latency_s: 1.0e-05", "latency_s: 3600.0").replace("latency_s: 2.0e-05", "latency_s: 3600.0"), "any"),
    ("numbers", "latency-max", PROFILE.replace("latency_s: 1.0e-05", "latency_s: 3600.0"), "any"),
    ("numbers", "latency-beyond", PROFILE.replace("latency_s: 1.0e-05", "latency_s: 1.0e300"), "error"),
    ("numbers", "latency-negative", PROFILE.replace("latency_s: 1.0e-05", "latency_s: -1.0"), "error"),
    ("numbers", "usage-almost-1", PROFILE.replace("processor_usage: 0.15", "processor_usage: 0.9999999999999999"),
     "any"),
    ("numbers", "usage-1", PROFILE.replace("processor_usage: 0.15", "processor_usage: 1.0"), "error"),
    ("numbers", "offset-at-bound", PROFILE.replace("participant_offset: -1.0", "participant_offset: -2.0"), "any"),
    ("numbers", "offset-below", PROFILE.replace("participant_offset: -1.0", "participant_offset: -1.0e9"), "error"),
    ("numbers", "offset-max", PROFILE.replace("participant_offset: 0.0", "participant_offset: 1000.0"), "any"),
    ("numbers", "multiplier-min", PROFILE.replace("volume_multiplier: 1.5", "volume_multiplier: 0.001"), "any"),
    ("numbers", "multiplier-zero", PROFILE.replace("volume_multiplier: 1.5", "volume_multiplier: 0.0"), "error"),
    ("numbers", "capacity-zero", PROFILE.replace("capacity_bytes: 85899345920", "capacity_bytes: 0"), "error"),
    ("numbers", "capacity-one", PROFILE.replace("capacity_bytes: 85899345920", "capacity_bytes: 1"), "any"),
    ("numbers", "capacity-float", PROFILE.replace("capacity_bytes: 85899345920", "capacity_bytes: 8.5e10"),
     "error"),
    ("numbers", "size-processors-zero", PROFILE.replace("size_processors: 8\n", "size_processors: 0\n"), "any"),
    ("numbers", "size-processors-one", PROFILE.replace("size_processors: 8\n", "size_processors: 1\n"), "any"),
    ("numbers", "threshold-max", PROFILE.replace("threshold: 128000000000.0", "threshold: 1.0e300"), "any"),
    ("numbers", "thresholds-unsorted", PROFILE.replace("threshold: 16000000000.0\n        efficiency: 0.9",
                                                       "threshold: 1.0e12\n        efficiency: 0.9"), "error"),
    ("numbers", "no-zero-threshold", PROFILE.replace("      - threshold: 0.0\n        efficiency: 0.1\n", ""), "any"),
    ("numbers", "points-empty", re.sub(r"operation_size_efficiency:\n      points:\n(      - .*\n        .*\n)+",
                                       "operation_size_efficiency:\n      points: []\n", PROFILE, count=1), "error"),
    ("shape", "networks-empty", re.sub(r"networks:\n(- |  ).*(\n(- |  ).*)*", "networks: []", PROFILE), "error"),
    ("shape", "one-network", PROFILE.split("- bandwidth_bytes_per_s: 25000000000.0")[0].rstrip() + "\n"
     "schema_name: blueprinting.evidence-profile\nschema_version: 0\n", "any"),
    ("shape", "networks-mapping", PROFILE.replace("networks:\n- bandwidth", "networks:\n  zero:\n    bandwidth", 1),
     "error"),
    ("shape", "missing-collective", PROFILE.replace("    p2p:\n      volume_multiplier: 1.0\n      "
                                                    "participant_offset: 0.0\n", "", 1), "error"),
    ("shape", "unknown-collective", PROFILE.replace("    p2p:\n", "    broadcast:\n      volume_multiplier: 1.0\n"
                                                    "      participant_offset: 0.0\n    p2p:\n", 1), "error"),
    ("shape", "unknown-field", PROFILE.replace("processing_mode: no_overlap", "processing_mode: no_overlap\nturbo: 1"),
     "error"),
    ("shape", "name-mismatch", PROFILE.replace("name: a100_80g", "name: other"), "error"),
    ("shape", "datatype-missing", PROFILE.replace("matrix:\n  float16:", "matrix:\n  float32:"), "error"),
    ("shape", "schema-version", PROFILE.replace("schema_version: 0", "schema_version: 1"), "error"),
    ("shape", "schema-version-bool", PROFILE.replace("schema_version: 0", "schema_version: false"), "error"),
    ("shape", "empty", "", "error"),
    ("shape", "two-docs", PROFILE + "---\n" + PROFILE, "error"),
    ("shape", "duplicate-key", PROFILE.replace("processing_mode: no_overlap",
                                               "processing_mode: no_overlap\nprocessing_mode: roofline"), "error"),
    ("shape", "alias", PROFILE.replace("  efficiency: 0.65", "  efficiency: &e 0.65").replace(
        "  efficiency: 0.9\n  size", "  efficiency: *e\n  size"), "error"),
    ("shape", "binary", b"\x00\x01\x02\xff" * 10, "error"),
    ("shape", "bom", "\ufeff" + PROFILE, "any"),
    ("shape", "description-huge", PROFILE.replace("description: 'a100_80g: processor, memory and network evidence'",
                                                  "description: " + "x" * 20_000), "error"),
    ("shape", "processing-mode-unknown", PROFILE.replace("processing_mode: no_overlap", "processing_mode: magic"),
     "error"),
    # measured families (on a100_measured)
    ("measured", "saturating-half-huge", _profile("half_size: 100160000.0", "half_size: 1.0e300", MEASURED), "any"),
    ("measured", "saturating-max-eff-min", re.sub(r"max_efficiency: [0-9.]+", "max_efficiency: 0.0001", MEASURED),
     "any"),
    ("measured", "saturating-and-points", MEASURED.replace("operation_size_efficiency:\n",
                                                           "operation_size_efficiency:\n      points:\n      - "
                                                           "threshold: 0.0\n        efficiency: 0.5\n", 1), "error"),
    ("measured", "saturating-negative-half", _profile("half_size: 100160000.0", "half_size: -1.0", MEASURED),
     "error"),
    ("measured", "curve-size-huge", re.sub(r"size_bytes: [0-9.e+]+", lambda m, c=[0]: (
        c.__setitem__(0, c[0] + 1), f"size_bytes: {1e299 * c[0]:.6e}")[1], MEASURED), "any"),
    ("measured", "curve-size-tiny", re.sub(r"size_bytes: [0-9.e+]+", lambda m, c=[0]: (
        c.__setitem__(0, c[0] + 1), f"size_bytes: {1e-300 * c[0]:.6e}")[1], MEASURED), "any"),
    ("measured", "curve-eff-min", re.sub(r"(size_bytes: [0-9.e+]+\n\s+)efficiency: [0-9.e-]+",
                                         r"\1efficiency: 0.0001", MEASURED), "any"),
    ("measured", "curve-unsorted", MEASURED.replace("size_bytes: 2097152.0", "size_bytes: 1.0", 1), "error"),
    ("measured", "curve-participants-1", MEASURED.replace("- participants: 2\n", "- participants: 1\n", 1), "error"),
    ("measured", "curve-participants-dup", MEASURED.replace("- participants: 4\n", "- participants: 2\n", 1),
     "error"),
    ("measured", "curve-no-points", re.sub(r"(- participants: 2\n      points:\n)(      - .*\n        .*\n)+",
                                           r"\1", MEASURED, count=1).replace("points:\n      source", "points: []\n"
                                                                              "      source"), "error"),
    ("measured", "launch-max", _profile("issue_s_per_operation: 4.7774e-05", "issue_s_per_operation: 0.001",
                                        MEASURED), "any"),
    ("measured", "launch-zero", _profile("issue_s_per_operation: 4.7774e-05", "issue_s_per_operation: 0",
                                         MEASURED), "error"),
    ("measured", "launch-inf", _profile("issue_s_per_operation: 4.7774e-05", "issue_s_per_operation: .inf",
                                        MEASURED), "error"),
    ("measured", "vocab-max", _profile("vocabulary: 50257", f"vocabulary: {2**24}", MEASURED), "any"),
    ("measured", "vocab-zero", _profile("vocabulary: 50257", "vocabulary: 0", MEASURED), "error"),
    ("measured", "issue-matrix-max", _profile("issue_s_per_operation: x", "  issue_s_per_operation: 0.001\n"
                                              "  issue_s_per_matrix_operation: 0.001\n  issue_s_per_microbatch: 1.0\n"
                                              "  x_s: 0", MEASURED).replace("  x_s: 0\n", "").replace(
        "  issue_s_per_matrix_operation: 6.5226e-05\n", "").replace("  issue_s_per_microbatch: 0.0030651\n", ""),
     "any"),
    ("measured", "issue-microbatch-beyond", _profile("issue_s_per_microbatch: x", "  issue_s_per_microbatch: 1.5",
                                                     MEASURED), "error"),
    ("measured", "issue-matrix-nan", _profile("issue_s_per_matrix_operation: x",
                                              "  issue_s_per_matrix_operation: .nan", MEASURED), "error"),
    ("measured", "issue-matrix-bool", _profile("issue_s_per_matrix_operation: x",
                                               "  issue_s_per_matrix_operation: true", MEASURED), "error"),
    ("measured", "output-unknown-field", MEASURED.replace("  vocabulary: 50257\n", "  vocabulary: 50257\n"
                                                          "  loss_bytes: 1\n", 1), "error"),
    ("measured", "output-vocabulary-multiple", MEASURED.replace("  vocabulary: 50257\n", "  vocabulary: 50257\n"
                                                                "  vocabulary_multiple: 128\n", 1), "error"),
    ("measured", "hier-unknown", _profile("kind: island_then_next_tier", "kind: flat", MEASURED), "error"),
    ("measured", "partitioned-unknown", _profile("kind: slice_then_all_gather", "kind: other", MEASURED), "error"),
    ("measured", "fit-param-nan", _profile("value: 0.78535", "value: .nan", MEASURED), "error"),
    ("measured", "fit-records-negative", _profile("records: 793", "records: -1", MEASURED), "error"),
    ("measured", "fit-unknown-field", sub(MEASURED, "\n  objective:", "\n  oops: 1\n  objective:"), "error"),
    ("measured", "fit-corpora-mapping", re.sub(r"\n  corpora:\n  - name:", "\n  corpora:\n    x:\n      name:", MEASURED,
                                               count=1), "error"),
    ("measured", "measured-on-one-tier-network-1", MEASURED.replace(
        "  processor_usage: 0.02\n", "  processor_usage: 0.02\n  measured_collectives:\n    all_reduce:\n    - "
        "participants: 2\n      points:\n      - size_bytes: 1.0e300\n        efficiency: 0.0001\n      source: x\n",
        1), "any"),
]


def profile_attempts() -> list[Attempt]:
    a = []
    for cls, name, content, expect in HOSTILE_PROFILES:
        system = "hostile"
        text = content
        if isinstance(text, str):
            text = re.sub(r"^name: \S+", f"name: {system}", text, count=1, flags=re.M) if name != "name-mismatch" \
                else text
        case = sub(CASE, "system: a100_80g", f"system: {system}")
        overlap = sub(OVERLAP_CASE, "system: a100_80g", f"system: {system}")
        offload = sub(OFFLOAD_CASE, "system: a100_80g", f"system: {system}")
        files = {"proj/evidence/hostile.yaml": text, "c.yaml": case, "o.yaml": overlap, "f.yaml": offload,
                 "b.jsonl": "\n".join([line(id="first"), line(id="h", system=system), line(id="last")]) + "\n"}
        # a refusal names the profile: its file, or (a price its curves cannot give, a tier it lacks, found while
        # estimating) "evidence profile hostile"; datatype-missing names the datatype it lacks
        needles = ("datatype",) if name == "datatype-missing" else ("hostile.yaml|evidence profile hostile",)
        for command, argv in {
            "estimate-json": ["estimate", "--json", "--output", "out.json", "c.yaml", "o.yaml", "f.yaml"],
            "explain": ["explain", "--json", "c.yaml"],
            "explain-overlap": ["explain", "--json", "o.yaml"],
            "trace-offload": ["trace", "f.yaml", "--output", "t.json"],
            "batch": ["estimate", "--calculon-batch", "b.jsonl", "--output", "out.json"],
        }.items():  # (lower reads no profile: it only names the system)
            if command in ("trace-offload", "explain-overlap") and cls == "shape":
                continue
            if command == "batch":
                a.append(Attempt(f"profile:{cls}", f"{name} / batch", argv, "batch" if expect == "error" else "driver",
                                 dict(files), batch_invalid=("h",) if expect == "error" else (),
                                 outputs=("out.json",), check=None if expect == "error" else _batch_file_ok))
                continue
            a.append(Attempt(f"profile:{cls}", f"{name} / {command}", argv, expect, dict(files), needles,
                             outputs=("out.json", "t.json"), timeout=120))
    # search on a hostile profile (by name)
    for cls, name, content, expect in HOSTILE_PROFILES:
        if cls == "shape":
            continue
        text = re.sub(r"^name: \S+", "name: hostile", content, count=1, flags=re.M)
        a.append(Attempt(f"profile:{cls}", f"{name} / search", [
            "search", "--model", "m.json", "--system", "hostile", "--procs", "8", "--max-batch", "16", "--datatype",
            "float16", "--workers", "1", "--no-progress", "--top", "3", "--output", "s.json", "--pareto", "p.json"],
            expect, {"proj/evidence/hostile.yaml": text, "m.json": json.dumps(MODEL)},
            ("hostile.yaml",) if expect == "error" else (), outputs=("s.json", "p.json"), timeout=180))
    return a


# JSON: Calculon model/execution, batch lines
HOSTILE_JSON = [
    ("nan", '{"hidden": NaN}', ("hidden",)),
    ("Infinity", '{"hidden": Infinity}', ("hidden",)),
    ("-Infinity", '{"hidden": -Infinity}', ("hidden",)),
    ("1e999", '{"hidden": 1e999}', ("hidden",)),
    ("big-int", '{"hidden": ' + "9" * 5000 + "}", ("hidden",)),
    ("dup", '{"hidden": 1, "hidden": 2}', ("hidden", "duplicate")),
    ("deep", "[" * 100_000 + "]" * 100_000, ("nest",)),
    ("deep-obj", '{"a":' * 50_000 + "1" + "}" * 50_000, ("nest",)),
    ("trailing", '{"hidden": 1} x', ()),
    ("two-docs", '{"hidden": 1}\n{"hidden": 2}', ()),
    ("empty", "", ()),
    ("list", "[1,2,3]", ()),
    ("string", '"model"', ()),
    ("bom", "\ufeff" + json.dumps(MODEL), None),  # accepted
    ("nul", '{"hidden": 1\x00}', ()),
    ("lone-surrogate", '{"hidden": 1, "x": "\\ud800"}', ("x",)),
    ("single-quotes", "{'hidden': 1}", ()),
    ("comments", '{"hidden": 1 /* x */}', ()),
]


def json_attempts() -> list[Attempt]:
    a = []
    for name, text, needles in HOSTILE_JSON:
        model = text if name in ("bom",) else text
        for which in ("model", "execution"):
            files = {"m.json": json.dumps(MODEL), "e.json": json.dumps(EXECUTION)}
            files[f"{which[0]}.json"] = model if name != "bom" else ("\ufeff" + json.dumps(
                MODEL if which == "model" else EXECUTION))
            expect = "ok" if needles is None else "error"
            a.append(Attempt("calculon-json", f"{name} / import {which}", [
                "import", "calculon", "--model", "m.json", "--execution", "e.json", "--system", "a100_80g", "-o",
                "out.yaml"], expect, files, (f"{which[0]}.json",) + (needles or ()), outputs=("out.yaml",)))
        files = {"m.json": text if name != "bom" else "\ufeff" + json.dumps(MODEL)}
        a.append(Attempt("calculon-json", f"{name} / search --model", [
            "search", "--model", "m.json", "--system", "a100_80g", "--procs", "8", "--max-batch", "8",
            "--datatype", "float16", "--workers", "1", "--no-progress", "--output", "s.json"],
            "ok" if needles is None else "error", files, ("m.json",) + (needles or ()), outputs=("s.json",),
            timeout=120))
    # model/execution semantic attacks
    for name, model, execution, expect in [
        ("bool-hidden", dict(MODEL, hidden=True), EXECUTION, "error"),
        ("string-hidden", dict(MODEL, hidden="6144"), EXECUTION, "error"),
        ("float-hidden", dict(MODEL, hidden=6144.0), EXECUTION, "error"),
        ("negative-blocks", dict(MODEL, num_blocks=-1), EXECUTION, "error"),
        ("unknown-field", dict(MODEL, experts=8), EXECUTION, "error"),
        ("missing-field", {k: v for k, v in MODEL.items() if k != "hidden"}, EXECUTION, "error"),
        ("procs-mismatch", MODEL, dict(EXECUTION, num_procs=7), "error"),
        ("tp-overlap-tp1", MODEL, dict(EXECUTION, tensor_par=1, num_procs=1, tensor_par_overlap="ring"), "any"),
        ("optimizer-offload-inference", MODEL, dict(EXECUTION, training=False, optimizer_offload=True), "any"),
        ("dp-overlap-dp1", MODEL, dict(EXECUTION, data_par_overlap=True), "any"),
        ("datatype-unknown", MODEL, dict(EXECUTION, datatype="int4"), "error"),
        ("execution-list", MODEL, [EXECUTION], "error"),
        ("net-huge", MODEL, dict(EXECUTION, tensor_par_net=2**62), "error"),
        ("mbs-zero", MODEL, dict(EXECUTION, microbatch_size=0), "error"),
    ]:
        a.append(Attempt("calculon-json", f"{name} / import", [
            "import", "calculon", "--model", "m.json", "--execution", "e.json", "--system", "a100_80g", "-o",
            "out.yaml"], expect, {"m.json": json.dumps(model), "e.json": json.dumps(execution)}, (),
            outputs=("out.yaml",) if expect == "error" else ()))
    for system, expect in [("../evidence/a100_80g", "error"), ("/etc/passwd", "error"), ("", "error"),
                           ("nope", "error"), ("a100_80g\n", "error"), ("\u0430100_80g", "error")]:
        a.append(Attempt("calculon-json", f"--system {system!r} / import", [
            "import", "calculon", "--model", "m.json", "--execution", "e.json", "--system", system, "-o", "o.yaml"],
            expect, {"m.json": json.dumps(MODEL), "e.json": json.dumps(EXECUTION)}, ("system",),
            outputs=("o.yaml",)))
    return a


HOSTILE_LINES = [
    ("nan", line(id="x").replace("6144,", "NaN,", 1), True),
    ("Infinity", line(id="x").replace("6144,", "Infinity,", 1), True),
    ("1e999", line(id="x").replace("6144,", "1e999,", 1), True),
    ("big-int", line(id="x").replace("6144,", "9" * 400 + ",", 1), True),
    ("huge-int-5000", line(id="x").replace("6144,", "9" * 5000 + ",", 1), True),
    ("bool", line(id="x", execution__tensor_par=True), True),
    ("string-num", line(id="x", model__hidden="6144"), True),
    ("dup", line(id="x")[:-1] + ', "system": "a100_80e"}', True),
    ("deep", '{"id": "x", "model": ' + "[" * 100_000 + "]" * 100_000 + "}", False),
    ("system-path", line(id="x", system="../evidence/a100_80g"), True),
    ("system-abs", line(id="x", system="/etc/passwd"), True),
    ("system-dict", line(id="x", system={"name": "a100_80g"}), True),
    ("system-cyrillic", line(id="x", system="\u0430100_80g"), True),
    ("id-missing", json.dumps({k: v for k, v in LINE.items() if k != "id"}), False),
    ("id-int", line(id=7), False),
    ("id-null", line(id=None), False),
    ("id-huge", line(id="x" * 200_000), False),
    ("id-control", line(id="x\u001b[2J"), False),
    ("unknown-top", line(id="x")[:-1] + ', "extra": 1}', True),
    ("model-list", line(id="x", model=[1, 2]), True),
    ("execution-null", line(id="x", execution=None), True),
    ("list", "[1, 2]", False),
    ("scalar", "42", False),
    ("string", '"x"', False),
    ("null", "null", False),
    ("truncated-json", line(id="x")[:-10], False),
    ("nul-byte", line(id="x").replace('"x"', '"x\\u0000"'), True),
    ("layout-refused", line(id="x", execution__tensor_par=7, execution__num_procs=7), True),
    ("procs-mismatch", line(id="x", execution__num_procs=9), True),
    ("huge-line", line(id="x")[:-1] + ', "pad": "' + "a" * (2 * 2**20) + '"}', False),
]


def _batch_bytes(lines: list[str], gz: bool = False) -> bytes:
    data = ("\n".join(lines) + "\n").encode("utf-8")
    return gzip.compress(data, mtime=0) if gz else data


def batch_attempts() -> list[Attempt]:
    a = []
    for name, bad, _ in HOSTILE_LINES:
        for gz in (False, True):
            fname = "b.jsonl.gz" if gz else "b.jsonl"
            a.append(Attempt("batch-line", f"{name}{' (gz)' if gz else ''}", [
                "estimate", "--calculon-batch", fname, "--output", "out.json"], "batch",
                {fname: _batch_bytes([line(id="first"), bad, line(id="last")], gz)},
                batch_invalid=("x", "x" * 200_000, "x\u001b[2J", 7, "x\u0000"), outputs=("out.json",)))
    good = _batch_bytes([line(id="first"), line(id="mid"), line(id="last")])
    gzipped = gzip.compress(good, mtime=0)
    for name, content, fname, expect in [
        ("latin1-line", _batch_bytes([line(id="first")]) + b'{"id": "\xe9"}\n' + _batch_bytes([line(id="last")]),
         "b.jsonl", "batch"),
        ("bom", b"\xef\xbb\xbf" + good, "b.jsonl", "ok"),
        ("crlf", good.replace(b"\n", b"\r\n"), "b.jsonl", "ok"),
        ("no-final-newline", good.rstrip(b"\n"), "b.jsonl", "ok"),
        ("truncated-gz", gzipped[:-12], "b.jsonl.gz", "any"),
        ("truncated-gz-half", gzipped[: len(gzipped) // 2], "b.jsonl.gz", "any"),
        ("corrupt-gz", gzipped[:20] + b"\x00" * 40 + gzipped[60:], "b.jsonl.gz", "any"),
        ("gz-not-gz", good, "b.jsonl.gz", "error"),
        ("plain-is-gz", gzipped, "b.jsonl", "any"),
        ("concatenated-gz", gzipped + gzip.compress(_batch_bytes([line(id="m2"), line(id="m3")]), mtime=0),
         "b.jsonl.gz", "ok"),
        ("gz-trailing-garbage", gzipped + b"garbage", "b.jsonl.gz", "any"),
        ("gz-bomb-blank", gzip.compress(b"\n" * (20 * 2**20), mtime=0), "b.jsonl.gz", "error"),
        ("gz-bomb-one-line", gzip.compress(b"x" * (200 * 2**20), mtime=0), "b.jsonl.gz", "any"),
        ("empty", b"", "b.jsonl", "error"),
        ("blank", b"\n\n  \n", "b.jsonl", "error"),
        ("empty-gz", gzip.compress(b"", mtime=0), "b.jsonl.gz", "error"),
        ("only-bad", b"x\n", "b.jsonl", "any"),
        ("duplicate-ids", _batch_bytes([line(id="first"), line(id="first"), line(id="last")]), "b.jsonl", "any"),
    ]:
        # "any": a refusal, or a batch whose lines are each ok or invalid (exit 1 when some line is invalid)
        a.append(Attempt("batch-file", name, ["estimate", "--calculon-batch", fname, "--output", "out.json"],
                         "driver" if expect == "any" else expect, {fname: content},
                         (fname,) if expect == "error" else (), outputs=("out.json",),
                         check=_truncated_ok if name.startswith(("truncated", "corrupt")) else _batch_file_ok
                         if expect == "any" else None))
    # options that make no sense with a batch
    a.append(Attempt("batch-file", "batch and cases", ["estimate", "--calculon-batch", "b.jsonl", "c.yaml"], "error",
                     {"b.jsonl": good, "c.yaml": CASE}, ("--calculon-batch",)))
    a.append(Attempt("batch-file", "batch to stdout", ["estimate", "--calculon-batch", "b.jsonl"], "ok",
                     {"b.jsonl": good}))
    a.append(Attempt("batch-file", "batch --view", ["estimate", "--calculon-batch", "b.jsonl", "--view", "peak_only",
                                                    "--output", "out.json"], "ok", {"b.jsonl": good}))
    return a


def _batch_file_ok(work: Path, result: Run) -> list[str]:
    lines = [l for l in result.err.splitlines() if l.strip()]
    if result.status == 2:
        return [] if len(lines) == 1 and lines[0].startswith("error: ") else [f"refusal is not one line: {lines[:2]}"]
    if result.status not in (0, 1):
        return [f"batch exit {result.status}"]
    try:
        entries = _strict_json((work / "out.json").read_text())
    except (OSError, ValueError) as error:
        return [f"batch output unusable: {error}"]
    if any(e.get("status") not in ("ok", "infeasible", "invalid") for e in entries):
        return ["batch entry with an unknown status"]
    return figure_problems(entries)


def _truncated_ok(work: Path, result: Run) -> list[str]:
    problems = _batch_file_ok(work, result)
    if problems:
        return problems
    if result.status not in (1, 2):
        return [f"truncated gzip: exit {result.status}"]
    if result.status == 1:
        entries = _strict_json((work / "out.json").read_text())
        if entries[-1]["status"] != "invalid" or "truncat" not in str(entries[-1]["reason"]):
            return ["truncated gzip: last entry does not report the truncation"]
    return []


def contract_attempts() -> list[Attempt]:
    contract = json.loads((ROOT / "goldens" / "baseline_regression_contract.json").read_text())
    first_agg = next(iter(contract["aggregates"]))

    def edit(fn) -> str:
        data = json.loads(json.dumps(contract))
        fn(data)
        return json.dumps(data, indent=1)

    variants = [
        ("nan-value", re.sub(r'("value": )[0-9.e+-]+', r"\1NaN", json.dumps(contract), count=1), "error"),
        ("inf-tolerance", re.sub(r'("tolerance_pct": )[0-9.e+-]+', r"\1Infinity", json.dumps(contract), count=1),
         "error"),
        ("unknown-key", edit(lambda d: d.__setitem__("extra", 1)), "error"),
        ("list", "[]", "error"),
        ("string-value", edit(lambda d: d["aggregates"][first_agg].__setitem__("value", "1")), "error"),
        ("bool-value", edit(lambda d: d["aggregates"][first_agg].__setitem__("value", True)), "error"),
        ("tolerance-loosened", edit(lambda d: d["aggregates"][first_agg].__setitem__("tolerance_pct", 100)),
         "error"),
        ("tolerance-negative", edit(lambda d: d["aggregates"][first_agg].__setitem__("tolerance_pct", -1)), "error"),
        ("aggregate-missing", edit(lambda d: d["aggregates"].pop(first_agg)), "gate"),
        ("empty-object", "{}", "error"),
        ("duplicate-key", json.dumps(contract)[:-1] + ', "aggregates": {}}', "error"),
        ("deep", "[" * 100000 + "]" * 100000, "error"),
        ("binary", "\x00\x01", "error"),
    ]
    a = []
    for name, text, expect in variants:
        if expect == "gate":  # the gate's own verdict: exit 1 with the broken entries on stdout
            a.append(Attempt("contract", name, ["contract", "check", "--contract", "k.json"], "driver",
                             {"k.json": text}, check=_gate_broken))
            continue
        a.append(Attempt("contract", name, ["contract", "check", "--contract", "k.json"], expect, {"k.json": text},
                         ("k.json",)))
        a.append(Attempt("contract", f"{name} / project contract", ["contract", "check"], expect,
                         {"proj/goldens/baseline_regression_contract.json": text},
                         ("baseline_regression_contract.json",)))
    return a


def _gate_broken(work: Path, result: Run) -> list[str]:
    return [] if result.status == 1 and "BROKEN" in result.out else [f"gate exit {result.status}: {result.out[-200:]}"]


def _private_vendor(work: Path) -> Path:
    """Replace the attempt's link to the sweep's shared vendor copy by a private copy (for an attempt that
    edits it, or writes the project's vendor directory legitimately: otherwise every attempt running at the
    same time, or later, would see its writes)."""
    vendor = work / "proj" / "vendor"
    vendor.unlink()
    shutil.copytree(TREE / "vendor", vendor)
    return vendor


def vendor_attempts() -> list[Attempt]:
    """Tampered vendored records and MANIFEST (in a private copy of vendor/)."""
    a = []
    vendor = ROOT / "vendor" / "calculon-0.1.0"
    manifest = json.loads((vendor / "MANIFEST.json").read_text())

    def private(edit):
        def make(work: Path) -> None:
            edit(_private_vendor(work) / "calculon-0.1.0")
        return make

    first_file = next(p for p in sorted((vendor / "records").rglob("*")) if p.is_file())
    rel = first_file.relative_to(vendor)

    def tamper_record(v: Path) -> None:
        path = v / rel
        data = path.read_bytes()
        if rel.suffix == ".gz":
            text = gzip.decompress(data).decode()
            path.write_bytes(gzip.compress(text.replace("1", "2", 1).encode(), mtime=0))
        else:
            path.write_text(data.decode().replace("1", "2", 1))

    for name, edit in [
        ("manifest-binary", lambda v: (v / "MANIFEST.json").write_bytes(b"\x89\x00")),
        ("manifest-empty", lambda v: (v / "MANIFEST.json").write_text("")),
        ("manifest-list", lambda v: (v / "MANIFEST.json").write_text("[]")),
        ("manifest-nan", lambda v: (v / "MANIFEST.json").write_text(json.dumps(manifest)[:-1] + ', "x": NaN}')),
        ("manifest-missing", lambda v: (v / "MANIFEST.json").unlink()),
        ("manifest-dir", lambda v: ((v / "MANIFEST.json").unlink(), (v / "MANIFEST.json").mkdir())),
        ("record-tampered", tamper_record),
        ("record-truncated", lambda v: (v / rel).write_bytes((v / rel).read_bytes()[:100])),
        ("record-missing", lambda v: (v / rel).unlink()),
        ("record-symlink-out", lambda v: ((v / rel).unlink(), (v / rel).symlink_to("/etc/passwd"))),
        ("records-dir-file", lambda v: (shutil.rmtree(v / "records"), (v / "records").write_text("x"))),
    ]:
        a.append(Attempt("vendor", f"{name} / calibrate", ["calibrate", "--output", "r.json"], "error", {},
                         (), outputs=("r.json",), setup=private(edit)))
        a.append(Attempt("vendor", f"{name} / contract", ["contract", "check"], "error", {}, (), setup=private(edit)))
    return a


def calibrate_attempts() -> list[Attempt]:
    a = []
    for name, argv, files, expect, needles in [
        ("missing-cases", ["calibrate", "--cases", "nope", "--output", "r.json"], {}, "error", ("nope",)),
        ("empty-cases", ["calibrate", "--cases", "e", "--output", "r.json"], {"e/.keep": ""}, "error", ("e",)),
        ("cases-is-file", ["calibrate", "--cases", "c.yaml", "--output", "r.json"], {"c.yaml": CASE}, "error",
         ("c.yaml",)),
        ("cases-non-yaml-only", ["calibrate", "--cases", "e", "--output", "r.json"], {"e/x.txt": "x"}, "error", ()),
        ("compare-unknown", ["calibrate", "--output", "r.json", "--compare", "nope"], {}, "error", ("nope",)),
        ("compare-path", ["calibrate", "--output", "r.json", "--compare", "../evidence/a100_80g"], {}, "error", ()),
        ("compare-twice", ["calibrate", "--output", "r.json", "--compare", "a100_80g", "a100_80g"], {}, "any", ()),
        ("compare-hostile", ["calibrate", "--output", "r.json", "--compare", "hostile"],
         {"proj/evidence/hostile.yaml": PROFILE.replace("name: a100_80g", "name: hostile").replace(
             "peak_flops_per_s: 312000000000000.0", "peak_flops_per_s: 1.0e6")}, "any", ()),
        ("plots-onto-file", ["calibrate", "--output", "r.json", "--plots", "c.yaml"], {"c.yaml": CASE}, "error",
         ("--plots",)),
        ("plots-equals-output-dir", ["calibrate", "--output", "pl/r.json", "--plots", "pl"], {}, "any", ()),
        ("live-no-src", ["calibrate", "--output", "r.json", "--oracle", "live"], {}, "error", ("calculon",)),
        ("live-src-missing", ["calibrate", "--output", "r.json", "--oracle", "live", "--calculon-src", "nope"], {},
         "error", ("nope",)),
        ("live-src-file", ["calibrate", "--output", "r.json", "--oracle", "live", "--calculon-src", "c.yaml"],
         {"c.yaml": CASE}, "error", ("c.yaml",)),
        ("live-src-not-calculon", ["calibrate", "--output", "r.json", "--oracle", "live", "--calculon-src", "fake"],
         {"fake/calculon/__init__.py": "raise SystemExit(3)\n"}, "error", ("fake",)),
        ("live-src-evil", ["calibrate", "--output", "r.json", "--oracle", "live", "--calculon-src", "evil"],
         {"evil/calculon/__init__.py": "import os\nos._exit(0)\n"}, "error", ("evil",)),
        ("live-src-broken", ["calibrate", "--output", "r.json", "--oracle", "live", "--calculon-src", "broken"],
         {"broken/calculon/__init__.py": "x = (\n"}, "error", ("broken",)),
        ("src-without-live", ["calibrate", "--output", "r.json", "--calculon-src", "nope"], {}, "any", ()),
        ("project-is-file", ["--project", "c.yaml", "calibrate", "--output", "r.json"], {"c.yaml": CASE}, "error",
         ("c.yaml",)),
        ("project-missing", ["--project", "nope", "calibrate", "--output", "r.json"], {}, "error", ("nope",)),
        ("project-empty-dir", ["--project", "e", "calibrate", "--output", "r.json"], {"e/.keep": ""}, "any", ()),
        ("project-dev-null", ["--project", "/dev/null", "estimate", "{root}/cases/megatron-22B_full.yaml"], {},
         "error", ("/dev/null",)),
        ("output-equals-plots-file", ["calibrate", "--output", "x.png", "--plots", "."], {}, "any", ()),
    ]:
        a.append(Attempt("calibrate", name, argv, expect, files, needles, outputs=("r.json",), timeout=120))
    if CALCULON.is_dir():
        a.append(Attempt("calibrate", "live-real", ["calibrate", "--output", "r.json", "--oracle", "live",
                                                    "--calculon-src", "{calculon}"], "ok", {}, timeout=300))
    a.append(Attempt("calibrate", "env-project-missing", ["calibrate", "--output", "r.json"], "error", {},
                     ("nope",), env={"HARNESS_PROJECT": "{w}/nope"}, outputs=("r.json",)))
    a.append(Attempt("calibrate", "env-project-empty", ["estimate", "{root}/cases/megatron-22B_full.yaml"], "any",
                     {}, env={"HARNESS_PROJECT": ""}))
    a.append(Attempt("calibrate", "env-project-file", ["estimate", "{root}/cases/megatron-22B_full.yaml"], "error",
                     {"f": "x"}, ("f",), env={"HARNESS_PROJECT": "{w}/f"}))
    return a


def trace_attempts() -> list[Attempt]:
    a = []
    big = _layout(global_batch=4096, microbatch=1, pipeline_parallel=8, tensor_parallel=1, pipeline_interleaving=6)
    for name, argv, expect in [
        ("max-ops-zero", ["trace", "c.yaml", "--output", "t.json", "--max-operations", "0"], "error"),
        ("max-ops-negative", ["trace", "c.yaml", "--output", "t.json", "--max-operations", "-5"], "error"),
        ("max-ops-huge", ["trace", "c.yaml", "--output", "t.json", "--max-operations", str(10**30)], "any"),
        ("max-ops-float", ["trace", "c.yaml", "--output", "t.json", "--max-operations", "1e3"], "error"),
        ("max-ops-nan", ["trace", "c.yaml", "--output", "t.json", "--max-operations", "nan"], "error"),
        ("task-mb-negative", ["trace", "c.yaml", "--output", "t.json", "--task-microbatches", "-1"], "error"),
        ("task-mb-huge", ["trace", "c.yaml", "--output", "t.json", "--task-microbatches", str(10**12)], "any"),
        ("task-mb-zero", ["trace", "c.yaml", "--output", "t.json", "--task-microbatches", "0"], "any"),
        ("big-refused", ["trace", "big.yaml", "--output", "t.json", "--png", "t.png"], "any"),
        ("big-raised", ["trace", "big.yaml", "--output", "t.json", "--max-operations", str(10**9)], "any"),
        ("png-equals-output", ["trace", "c.yaml", "--output", "t.json", "--png", "t.json"], "error"),
        ("no-output", ["trace", "c.yaml"], "error"),
    ]:
        a.append(Attempt("trace", name, argv, expect, {"c.yaml": CASE, "big.yaml": big}, (),
                         outputs=("t.json", "t.png") if expect == "error" else (), timeout=180))
    return a


def search_attempts() -> list[Attempt]:
    a = []
    base = ["search", "--model", "m.json", "--system", "a100_80g", "--procs", "8", "--max-batch", "8", "--datatype",
            "float16", "--workers", "1", "--no-progress"]

    def with_(**over):
        argv = list(base)
        for key, value in over.items():
            flag = "--" + key.replace("_", "-")
            if flag in argv:
                i = argv.index(flag)
                if value is None:
                    del argv[i:i + 2]
                else:
                    argv[i + 1] = value
            elif value is not None:
                argv += [flag] + ([value] if value != "" else [])
        return argv

    files = {"m.json": json.dumps(MODEL), "c.yaml": CASE}
    for name, argv, expect in [
        ("procs-zero", with_(procs="0"), "error"),
        ("procs-negative", with_(procs="-8"), "error"),
        ("procs-float", with_(procs="8.5"), "error"),
        ("procs-1e20", with_(procs="100000000000000000000"), "error"),
        ("procs-prime", with_(procs="7"), "any"),
        ("procs-huge-valid", with_(procs=str(2**24), max_batch="16"), "any"),
        ("procs-highly-composite", with_(procs="720720", max_batch="720720"), "any"),
        ("batch-zero", with_(max_batch="0"), "error"),
        ("batch-lt-procs", with_(procs="64", max_batch="1"), "any"),
        ("top-zero", with_(top="0"), "error"),
        ("top-negative", with_(top="-1"), "error"),
        ("top-huge", with_(top="1000000"), "any"),
        ("workers-zero", with_(workers="0"), "error"),
        ("workers-negative", with_(workers="-1"), "error"),
        # only where the tree bounds --workers: an unbounded tree would start 100 000 worker processes
        *([("workers-huge", with_(workers="100000"), "error")]
          if "MAX_WORKERS" in (TREE / "harness" / "commands" / "search.py").read_text() else []),
        ("scheduler-garbage", with_(workers=None, scheduler="garbage"), "error"),
        ("scheduler-unreachable", with_(workers=None, scheduler="tcp://127.0.0.1:1"), "error"),
        ("datatype-unknown", with_(datatype="int4"), "error"),
        ("datatype-missing-in-profile", with_(datatype="float8"), "error"),
        ("system-path", with_(system="{p}/evidence/a100_80g.yaml"), "any"),
        ("system-dotdot", with_(system="../../etc/passwd"), "error"),
        ("system-yaml-outside", with_(system="outside.yaml"), "any"),
        ("system-missing", with_(system="nope"), "error"),
        ("system-dir", with_(system="d"), "error"),
        ("model-case-yaml", with_(model="c.yaml"), "ok"),
        ("model-case-hostile", with_(model="h.yaml"), "error"),
        ("model-json-bool", with_(model="mb.json"), "error"),
        ("model-yaml-not-case", with_(model="p.yaml"), "error"),
        ("output-equals-pareto", with_(output="x.json", pareto="x.json"), "error"),
        ("output-equals-results", with_(output="x.json", results="x.json"), "error"),
        ("results-onto-model", with_(results="m.json"), "error"),
        ("plot-onto-model", with_(plot="m.json"), "error"),
        ("plot-dir", with_(plot="d"), "error"),
        ("results-parquet-ok", with_(results="r.parquet", pareto="pp.json", plot="pl.png", top="3", output="o.json"),
         "ok"),
        ("fused-all", with_(fused_activation="all"), "ok"),
        ("no-prune", with_(no_prune=""), "ok"),
        ("model-huge", with_(model="mh.json", procs="4096", max_batch="4096"), "any"),
        ("model-tiny", with_(model="mt.json", procs="8", max_batch="8"), "any"),
        ("no-feasible", with_(model="mh.json", procs="1", max_batch="1"), "any"),
    ]:
        extra = {"h.yaml": sub(CASE, "hidden: 6144", "hidden: .nan"),
                 "mb.json": json.dumps(dict(MODEL, hidden=True)),
                 "p.yaml": PROFILE, "outside.yaml": PROFILE.replace("name: a100_80g", "name: outside"),
                 "mh.json": json.dumps({"hidden": 2**20, "feedforward": 2**20, "seq_size": 2**24,
                                        "attn_heads": 8192, "attn_size": 128, "num_blocks": 2**16}),
                 "mt.json": json.dumps({"hidden": 8, "feedforward": 8, "seq_size": 1, "attn_heads": 1,
                                        "attn_size": 8, "num_blocks": 1})}
        a.append(Attempt("search", name, argv, expect, dict(files, **extra), (),
                         setup=_mkdir("d"), timeout=240,
                         outputs=("x.json",) if expect == "error" else ("o.json", "pp.json")))
    return a


def evidence_attempts() -> list[Attempt]:
    a = []
    nccl = ("# nccl-tests\n#  size  count  type redop root  time algbw busbw #wrong  time algbw busbw #wrong\n"
            "  1048576  262144 float sum -1  50.5  20.76  31.14  0  50.1  20.93  31.40  0\n"
            "  2097152  524288 float sum -1  70.5  29.75  44.62  0  70.1  29.92  44.87  0\n")
    corpus = (ROOT / "measurements" / "korthikanti22.jsonl").read_text()
    vtrain = (ROOT / "measurements" / "vtrain" / "vtrain-a100.jsonl").read_text()
    for name, argv, files, expect in [
        ("nccl-ok", ["evidence", "import", "nccl-tests", "n.txt", "--tier", "0", "--output", "o.jsonl"],
         {"n.txt": nccl}, "ok"),
        ("nccl-nan", ["evidence", "import", "nccl-tests", "n.txt", "--tier", "0", "--output", "o.jsonl"],
         {"n.txt": nccl.replace("50.5", "nan")}, "error"),
        ("nccl-inf", ["evidence", "import", "nccl-tests", "n.txt", "--tier", "0", "--output", "o.jsonl"],
         {"n.txt": nccl.replace("50.5", "inf")}, "error"),
        ("nccl-negative-time", ["evidence", "import", "nccl-tests", "n.txt", "--tier", "0", "--output", "o.jsonl"],
         {"n.txt": nccl.replace("50.5", "-50.5").replace("50.1", "-50.1")}, "error"),
        ("nccl-zero-time", ["evidence", "import", "nccl-tests", "n.txt", "--tier", "0", "--output", "o.jsonl"],
         {"n.txt": nccl.replace("50.5", "0").replace("50.1", "0")}, "error"),
        ("nccl-zero-size", ["evidence", "import", "nccl-tests", "n.txt", "--tier", "0", "--output", "o.jsonl"],
         {"n.txt": nccl.replace("  1048576  262144", "  0  0")}, "any"),
        ("nccl-huge-size", ["evidence", "import", "nccl-tests", "n.txt", "--tier", "0", "--output", "o.jsonl"],
         {"n.txt": nccl.replace("2097152", "9" * 400)}, "error"),
        ("nccl-empty", ["evidence", "import", "nccl-tests", "n.txt", "--tier", "0", "--output", "o.jsonl"],
         {"n.txt": ""}, "error"),
        ("nccl-binary", ["evidence", "import", "nccl-tests", "n.txt", "--tier", "0", "--output", "o.jsonl"],
         {"n.txt": b"\x89PNG\x00\xff"}, "error"),
        ("nccl-wrong-columns", ["evidence", "import", "nccl-tests", "n.txt", "--tier", "0", "--output", "o.jsonl"],
         {"n.txt": "# x\n 1 2 3\n"}, "error"),
        ("nccl-unsorted", ["evidence", "import", "nccl-tests", "n.txt", "--tier", "0", "--output", "o.jsonl"],
         {"n.txt": nccl.replace("2097152", "1048576")}, "error"),
        ("nccl-tier-negative", ["evidence", "import", "nccl-tests", "n.txt", "--tier", "-1", "--output", "o.jsonl"],
         {"n.txt": nccl}, "error"),
        # a corpus states the tier its processors share; which tiers exist is a profile's: checked when applied
        ("nccl-tier-9-unapplied", ["evidence", "import", "nccl-tests", "n.txt", "--tier", "9", "--output", "o.jsonl"],
         {"n.txt": nccl}, "ok"),
        ("nccl-tier-missing", ["evidence", "import", "nccl-tests", "n.txt", "--tier", "9", "--output", "o.jsonl",
                               "--apply", "a100_80g", "--profile-output", "np.yaml"], {"n.txt": nccl}, "error"),
        ("nccl-participants-zero", ["evidence", "import", "nccl-tests", "n.txt", "--tier", "0", "--participants",
                                    "0", "--output", "o.jsonl"], {"n.txt": nccl}, "error"),
        ("nccl-participants-1", ["evidence", "import", "nccl-tests", "n.txt", "--tier", "0", "--participants",
                                 "1", "--output", "o.jsonl"], {"n.txt": nccl}, "error"),
        ("nccl-apply", ["evidence", "import", "nccl-tests", "n.txt", "--tier", "0", "--output", "o.jsonl", "--apply",
                        "a100_80g", "--profile-output", "np.yaml"], {"n.txt": nccl}, "ok"),
        ("nccl-apply-onto-shipped", ["evidence", "import", "nccl-tests", "n.txt", "--tier", "0", "--output",
                                     "o.jsonl", "--apply", "a100_80g", "--profile-output",
                                     "{p}/evidence/a100_measured.yaml"], {"n.txt": nccl}, "error"),
        ("nccl-apply-hostile-base", ["evidence", "import", "nccl-tests", "n.txt", "--tier", "0", "--output",
                                     "o.jsonl", "--apply", "hostile", "--profile-output", "np.yaml"],
         {"n.txt": nccl, "proj/evidence/hostile.yaml": PROFILE.replace("name: a100_80g", "name: hostile")
          .replace("latency_s: 1.0e-05", "latency_s: .nan")}, "error"),
        ("nccl-output-equals-profile-output", ["evidence", "import", "nccl-tests", "n.txt", "--tier", "0", "--output",
                                               "x.yaml", "--apply", "a100_80g", "--profile-output", "x.yaml"],
         {"n.txt": nccl}, "error"),
        ("nccl-output-onto-table", ["evidence", "import", "nccl-tests", "n.txt", "--tier", "0", "--output", "n.txt"],
         {"n.txt": nccl}, "error"),
        ("nccl-citation-control", ["evidence", "import", "nccl-tests", "n.txt", "--tier", "0", "--output", "o.jsonl",
                                   "--citation", "a\nb\x1b[2J"], {"n.txt": nccl}, "any"),
        ("vtrain-nan", ["evidence", "import", "vtrain", "v.csv", "--output", "o.jsonl"],
         {"v.csv": VTRAIN_HEADER + "4,16,4,2048,16,24,1024,1,2,2,nan\n"}, "error"),
        ("vtrain-negative", ["evidence", "import", "vtrain", "v.csv", "--output", "o.jsonl"],
         {"v.csv": VTRAIN_HEADER + "4,16,4,2048,16,24,1024,1,2,2,-410.4\n"}, "error"),
        ("vtrain-float-int", ["evidence", "import", "vtrain", "v.csv", "--output", "o.jsonl"],
         {"v.csv": VTRAIN_HEADER + "4,16,4,2048.5,16,24,1024,1,2,2,410.4\n"}, "error"),
        ("vtrain-gpus-mismatch", ["evidence", "import", "vtrain", "v.csv", "--output", "o.jsonl"],
         {"v.csv": VTRAIN_HEADER + "5,16,4,2048,16,24,1024,1,2,2,410.4\n"}, "error"),
        ("vtrain-huge", ["evidence", "import", "vtrain", "v.csv", "--output", "o.jsonl"],
         {"v.csv": VTRAIN_HEADER + "4,16,4,2048,16,24,1024,1,2,2,1e308\n"}, "any"),
        ("vtrain-header-only", ["evidence", "import", "vtrain", "v.csv", "--output", "o.jsonl"],
         {"v.csv": VTRAIN_HEADER}, "error"),
        ("korthikanti-nan", ["evidence", "import", "korthikanti", "--table4", "t4.json", "--output", "o.jsonl"],
         {"t4.json": '{"x": NaN}'}, "error"),
        ("korthikanti-list", ["evidence", "import", "korthikanti", "--table4", "t4.json", "--output", "o.jsonl"],
         {"t4.json": "[]"}, "error"),
        ("korthikanti-real-mutated", ["evidence", "import", "korthikanti", "--table4", "t4.json", "--output",
                                      "o.jsonl"],
         {"t4.json": re.sub(r'(\d+\.\d+)', "-1.0", (REFERENCE / "measurements" / "korthikanti22-table4.json")
                            .read_text(), count=3) if (REFERENCE / "measurements").is_dir() else "{}"}, "error"),
        ("fit-corpus-nan", ["evidence", "fit", "--base", "a100_80g", "--measurements", "k.jsonl", "--output", "f.yaml"],
         {"k.jsonl": corpus.replace('"measured_iteration_s":', '"measured_iteration_s":NaN,"x":', 1)}, "error"),
        ("fit-corpus-negative", ["evidence", "fit", "--base", "a100_80g", "--measurements", "k.jsonl", "--output",
                                 "f.yaml"],
         {"k.jsonl": re.sub(r'"measured_iteration_s":([0-9.]+)', r'"measured_iteration_s":-\1', vtrain, count=1)},
         "error"),
        ("fit-corpus-zero", ["evidence", "fit", "--base", "a100_80g", "--measurements", "k.jsonl", "--output",
                             "f.yaml"],
         {"k.jsonl": re.sub(r'"measured_iteration_s":([0-9.]+)', r'"measured_iteration_s":0', vtrain, count=1)},
         "error"),
        ("fit-corpus-no-header", ["evidence", "fit", "--base", "a100_80g", "--measurements", "k.jsonl", "--output",
                                  "f.yaml"], {"k.jsonl": "\n".join(vtrain.splitlines()[1:]) + "\n"}, "error"),
        ("fit-corpus-only-header", ["evidence", "fit", "--base", "a100_80g", "--measurements", "k.jsonl",
                                    "--output", "f.yaml"], {"k.jsonl": vtrain.splitlines()[0] + "\n"}, "error"),
        ("fit-corpus-empty", ["evidence", "fit", "--base", "a100_80g", "--measurements", "k.jsonl", "--output",
                              "f.yaml"], {"k.jsonl": ""}, "error"),
        ("fit-corpus-gz-truncated", ["evidence", "fit", "--base", "a100_80g", "--measurements", "k.jsonl.gz",
                                     "--output", "f.yaml"],
         {"k.jsonl.gz": gzip.compress(vtrain.encode(), mtime=0)[:-100]}, "error"),
        ("fit-base-hostile", ["evidence", "fit", "--base", "hostile", "--measurements", "k.jsonl", "--output",
                              "f.yaml"],
         {"k.jsonl": vtrain, "proj/evidence/hostile.yaml": PROFILE.replace("name: a100_80g", "name: hostile")
          .replace("peak_flops_per_s: 312000000000000.0", "peak_flops_per_s: .inf")}, "error"),
        ("fit-same-corpus-twice", ["evidence", "fit", "--base", "a100_80g", "--measurements", "k.jsonl", "k.jsonl",
                                   "--output", "f.yaml"], {"k.jsonl": vtrain}, "any"),
        ("fit-name-path", ["evidence", "fit", "--base", "a100_80g", "--measurements", "k.jsonl", "--output",
                           "f.yaml", "--name", "../x"], {"k.jsonl": vtrain}, "error"),
        ("fit-weight-negative", ["evidence", "fit", "--base", "a100_80g", "--measurements", "k.jsonl", "--output",
                                 "f.yaml", "--layer-weight", "-1"], {"k.jsonl": vtrain}, "error"),
        ("fit-weight-huge", ["evidence", "fit", "--base", "a100_80g", "--measurements", "k.jsonl", "--output",
                             "f.yaml", "--benchmark-weight", "1e308"], {"k.jsonl": vtrain}, "any"),
        ("fit-weights-zero", ["evidence", "fit", "--base", "a100_80g", "--measurements", "k.jsonl", "--output",
                              "f.yaml", "--benchmark-weight", "0", "--layer-weight", "0"],
         {"k.jsonl": corpus}, "any"),
        ("report-missing-profile", ["evidence", "report", "--profile", "nope", "--base", "a100_80g",
                                    "--measurements", "k.jsonl", "--output", "r.json"], {"k.jsonl": vtrain}, "error"),
        ("report-check-nan", ["evidence", "report", "--profile", "a100_measured", "--base", "a100_80g",
                              "--measurements", "k.jsonl", "--check", "c.jsonl", "--output", "r.json"],
         {"k.jsonl": vtrain, "c.jsonl": corpus.replace('"measured_iteration_s":', '"measured_iteration_s":NaN,"x":',
                                                       1)}, "error"),
        ("report-plots-onto-file", ["evidence", "report", "--profile", "a100_measured", "--base", "a100_80g",
                                    "--measurements", "k.jsonl", "--output", "r.json", "--plots", "k.jsonl"],
         {"k.jsonl": vtrain}, "error"),
        ("report-output-onto-corpus", ["evidence", "report", "--profile", "a100_measured", "--base", "a100_80g",
                                       "--measurements", "k.jsonl", "--output", "k.jsonl"], {"k.jsonl": vtrain},
         "error"),
    ]:
        a.append(Attempt("evidence", name, argv, expect, files, (),
                         outputs=("o.jsonl", "f.yaml", "r.json", "np.yaml", "x.yaml") if expect == "error" else (),
                         timeout=300))
    return a


def oracle_attempts() -> list[Attempt]:
    a = []
    ref = REFERENCE / "oracle-records" / "tab5.json"
    ref_text = ref.read_text() if ref.is_file() else "{}"
    for name, argv, files, expect in [
        ("record-src-missing", ["oracle", "record", "--calculon-src", "nope", "--cases", "cd", "--output", "x.json",
                                "--vendor", "v"], {"cd/c.yaml": CASE}, "error"),
        ("record-output-escapes", ["oracle", "record", "--calculon-src", "{calculon}", "--cases", "cd", "--output",
                                   "../../escaped.json", "--vendor", "v/a/b"], {"cd/c.yaml": CASE}, "error"),
        ("record-output-absolute", ["oracle", "record", "--calculon-src", "{calculon}", "--cases", "cd", "--output",
                                    "{w}/abs.json", "--vendor", "v"], {"cd/c.yaml": CASE}, "any"),
        ("record-vendor-is-file", ["oracle", "record", "--calculon-src", "{calculon}", "--cases", "cd", "--output",
                                   "x.json", "--vendor", "c.yaml"], {"cd/c.yaml": CASE, "c.yaml": CASE}, "error"),
        ("record-views-garbage", ["oracle", "record", "--calculon-src", "{calculon}", "--cases", "cd", "--output",
                                  "x.json", "--vendor", "v", "--views", "nope,,"], {"cd/c.yaml": CASE}, "error"),
        ("record-empty-cases", ["oracle", "record", "--calculon-src", "{calculon}", "--cases", "e", "--output",
                                "x.json", "--vendor", "v"], {"e/.keep": ""}, "error"),
        ("record-hostile-case", ["oracle", "record", "--calculon-src", "{calculon}", "--cases", "cd", "--output",
                                 "x.json", "--vendor", "v"], {"cd/c.yaml": sub(CASE, "hidden: 6144", "hidden: .nan")},
         "error"),
        ("record-batch-bad-line", ["oracle", "record", "--calculon-src", "{calculon}", "--batch", "b.jsonl",
                                   "--output", "x.json", "--vendor", "v"],
         {"b.jsonl": "\n".join([line(id="first"), line(id="x").replace("6144,", "NaN,", 1), line(id="last")])},
         "any"),
        ("record-real", ["oracle", "record", "--calculon-src", "{calculon}", "--cases", "cd", "--output", "x.json",
                         "--vendor", "v"], {"cd/c.yaml": CASE}, "ok"),
        ("record-onto-shipped", ["oracle", "record", "--calculon-src", "{calculon}", "--cases", "cd", "--output",
                                 "records/tab5.json"], {"cd/c.yaml": CASE}, "any"),
        ("record-search-no-model", ["oracle", "record", "--calculon-src", "{calculon}", "--search", "--output",
                                    "s.json", "--vendor", "v"], {}, "error"),
        ("record-search-hostile", ["oracle", "record", "--calculon-src", "{calculon}", "--search", "--model",
                                   "m.json", "--system", "a100_80g", "--procs", "0", "--max-batch", "8", "--output",
                                   "s.json", "--vendor", "v"], {"m.json": json.dumps(MODEL)}, "error"),
        ("record-search-model-nan", ["oracle", "record", "--calculon-src", "{calculon}", "--search", "--model",
                                     "m.json", "--system", "a100_80g", "--procs", "8", "--max-batch", "8",
                                     "--output", "s.json", "--vendor", "v"], {"m.json": '{"hidden": NaN}'}, "error"),
        ("record-search-cpus-zero", ["oracle", "record", "--calculon-src", "{calculon}", "--search", "--model",
                                     "m.json", "--system", "a100_80g", "--procs", "8", "--max-batch", "8",
                                     "--output", "s.json", "--vendor", "v", "--cpus", "0"],
         {"m.json": json.dumps(MODEL)}, "error"),
        ("import-reference-ok", ["oracle", "import-reference", "r.json", "--output", "x.json", "--vendor", "v"],
         {"r.json": ref_text}, "ok"),
        ("import-reference-nan", ["oracle", "import-reference", "r.json", "--output", "x.json", "--vendor", "v"],
         {"r.json": re.sub(r"(\d+\.\d+)", "NaN", ref_text, count=1)}, "error"),
        ("import-reference-list", ["oracle", "import-reference", "r.json", "--output", "x.json", "--vendor", "v"],
         {"r.json": "[]"}, "error"),
        ("import-reference-records-mapping", ["oracle", "import-reference", "r.json", "--output", "x.json",
                                              "--vendor", "v"], {"r.json": '{"meta": {}, "records": {"a": 1}}'},
         "error"),
        ("import-reference-negative", ["oracle", "import-reference", "r.json", "--output", "x.json", "--vendor", "v"],
         {"r.json": re.sub(r'("total_time": )(\d)', r"\1-\2", ref_text, count=1)}, "error"),
        ("import-reference-output-escapes", ["oracle", "import-reference", "r.json", "--output", "../../../e.json",
                                             "--vendor", "v/a"], {"r.json": ref_text}, "error"),
        ("import-reference-onto-shipped", ["oracle", "import-reference", "r.json", "--output", "MANIFEST.json"],
         {"r.json": ref_text}, "error"),
    ]:
        a.append(Attempt("oracle", name, argv, expect, files, (), outputs=("v/x.json",) if expect == "error" else (),
                         timeout=300, check=_no_escape, setup=_oracle_setup(name, argv)))
    return a


def _oracle_setup(name: str, argv: list[str]) -> Callable[[Path], None] | None:
    """Without ``--vendor`` the command writes the project's vendor directory: a private copy (see
    ``_private_vendor``). ``import-reference-ok`` needs a manifest in ``v`` (the reference's Calculon is checked
    against the manifest's; a fresh directory has none, and its refusal is right)."""
    if "--vendor" not in argv:
        return lambda work: _private_vendor(work) and None
    if name == "import-reference-ok":
        def manifest(work: Path) -> None:
            (work / "v").mkdir()
            shutil.copy(TREE / "vendor" / "calculon-0.1.0" / "MANIFEST.json", work / "v" / "MANIFEST.json")
        return manifest
    return None


def _no_escape(work: Path, result: Run) -> list[str]:
    escaped = [p for p in (work / "escaped.json", work / "e.json", work.parent / "escaped.json",
                           work.parent / "e.json") if p.exists()]
    return [f"wrote outside the vendor directory: {escaped[0]}"] if escaped else []


def plugin_attempts() -> list[Attempt]:
    a = []
    for name, args, files, expect in [
        ("cases-missing", ["--harness-cases", "nope"], {}, "error"),
        ("cases-empty", ["--harness-cases", "e"], {"e/.keep": ""}, "error"),
        ("cases-file", ["--harness-cases", "c.yaml"], {"c.yaml": CASE}, "error"),
        ("cases-hostile", ["--harness-cases", "cd"], {"cd/c.yaml": sub(CASE, "hidden: 6144", "hidden: .nan")},
         "error"),
        ("goldens-missing", ["--harness-goldens", "nope"], {}, "any"),
        ("oracle-live-no-src", ["--harness-oracle", "live", "--harness-calculon-src", "nope"], {}, "error"),
    ]:
        argv = ["@", PY, "-m", "pytest", "-p", "harness.pytest_plugin", "-m", "calibration", "-q", "--co",
                "{root}/tests/test_calibration.py", "-p", "no:cacheprovider", "--rootdir", "{root}", *args]
        a.append(Attempt("pytest-plugin", name, argv, "driver", files, (), timeout=120,
                         check=_pytest_refuses if expect == "error" else _pytest_ok))
    return a


def _pytest_ok(work: Path, result: Run) -> list[str]:
    if "INTERNALERROR" in result.out or "INTERNALERROR" in result.err:
        return ["pytest INTERNALERROR"]
    return []


def _pytest_refuses(work: Path, result: Run) -> list[str]:
    problems = _pytest_ok(work, result)
    if result.status in (0, 5):
        problems.append(f"pytest exit {result.status} on a bad option (a usage error is due)")
    return problems


def process_attempts() -> list[Attempt]:
    """Interrupted and concurrent runs: no partial target file, the old one kept."""
    a = []
    lines = [line(id=f"l{i}") for i in range(3000)]
    big = _batch_bytes(lines)
    script_kill = r'''
import os, signal, subprocess, sys, time, json
work = sys.argv[1]; sig = int(sys.argv[2]); delay = float(sys.argv[3]); argv = sys.argv[4:]
old = b'{"old": true}\n'
for name in ("out.json", "t.json", "r.json"):
    open(os.path.join(work, name), "wb").write(old)
p = subprocess.Popen([sys.executable, "-m", "harness", *argv], cwd=work, stdout=subprocess.DEVNULL,
                     stderr=subprocess.PIPE)
time.sleep(delay)
p.send_signal(sig)
err = p.communicate(timeout=60)[1].decode(errors="replace")
bad = []
for name in ("out.json", "t.json", "r.json"):
    data = open(os.path.join(work, name), "rb").read()
    if data != old:
        try:
            json.loads(data)
        except ValueError:
            bad.append(f"{name}: partial file after signal {sig}")
if "Traceback" in err:
    bad.append("traceback on signal: " + err.strip().splitlines()[-1])
print(json.dumps(bad))
sys.exit(3 if bad else 0)
'''
    for sig, delay in [(signal.SIGTERM, 1.0), (signal.SIGKILL, 1.5), (signal.SIGINT, 1.0), (signal.SIGTERM, 2.5)]:
        for name, argv in [("batch", ["estimate", "--calculon-batch", "b.jsonl", "--output", "out.json"]),
                           ("calibrate", ["calibrate", "--output", "r.json", "--plots", "pl"]),
                           ("trace", ["trace", "big.yaml", "--output", "t.json", "--png", "t.png",
                                      "--max-operations", "10000000"])]:
            a.append(Attempt("interrupted", f"{name} / {signal.Signals(sig).name} at {delay}s",
                             ["@", PY, "-c", script_kill, "{w}", str(int(sig)), str(delay), *argv], "driver",
                             {"b.jsonl": big, "big.yaml": _layout(global_batch=2048, microbatch=1,
                                                                  pipeline_parallel=8, tensor_parallel=1)}, (),
                             check=_json_list_empty, timeout=120))
    concurrent_script = r'''
import os, subprocess, sys, json, threading, time
work = sys.argv[1]
argv = ["calibrate", "--output", "r.json"]
procs = [subprocess.Popen([sys.executable, "-m", "harness", *argv], cwd=work, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE) for _ in range(3)]
bad = []; reads = 0
while any(p.poll() is None for p in procs):
    try:
        data = open(os.path.join(work, "r.json"), "rb").read()
        reads += 1
        json.loads(data)
    except FileNotFoundError:
        pass
    except ValueError:
        bad.append("partial r.json seen by a reader")
for p in procs:
    err = p.communicate()[1].decode(errors="replace")
    if p.returncode != 0:
        bad.append(f"concurrent run failed: {err.strip()[-200:]}")
print(json.dumps(bad[:3]))
sys.exit(3 if bad else 0)
'''
    a.append(Attempt("concurrent", "3 calibrate onto one report", ["@", PY, "-c", concurrent_script, "{w}"], "driver",
                     {}, (), check=_json_list_empty, timeout=240))
    concurrent_batch = concurrent_script.replace('["calibrate", "--output", "r.json"]',
                                                 '["estimate", "--calculon-batch", "b.jsonl", "--output", "r.json"]')
    a.append(Attempt("concurrent", "3 batches onto one output", ["@", PY, "-c", concurrent_batch, "{w}"], "driver",
                     {"b.jsonl": _batch_bytes(lines[:800])}, (), check=_json_list_empty, timeout=240))
    return a


def _json_list_empty(work: Path, result: Run) -> list[str]:
    try:
        problems = json.loads(result.out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return [f"driver failed: {result.err.strip()[-300:]}"]
    return problems


def misc_attempts() -> list[Attempt]:
    a = []
    files = {"c.yaml": CASE}
    for name, argv, expect in [
        ("no-command", [], "error"),
        ("unknown-command", ["frobnicate"], "error"),
        ("estimate-no-case", ["estimate"], "error"),
        ("estimate-same-case-twice", ["estimate", "c.yaml", "c.yaml"], "any"),
        ("estimate-view-bad", ["estimate", "--view", "nope", "c.yaml"], "error"),
        ("explain-view-without-by-task", ["explain", "--view", "peak_only", "c.yaml"], "any"),
        ("lower-json-and-canonical", ["lower", "--json", "--canonical", "c.yaml"], "error"),
        ("lower-every-stage", ["lower", "--stage", "distributed", "--canonical", "c.yaml"], "ok"),
        ("contract-write-no-args", ["contract", "write"], "any"),
        ("contract-bad-verb", ["contract", "nope"], "error"),
        ("project-dotdot", ["--project", "..", "estimate", "c.yaml"], "any"),
        ("project-twice", ["--project", "{p}", "estimate", "--project", "/nope", "c.yaml"], "error"),
        ("argv-nul", ["estimate", "c\udcff.yaml"], "error"),
        ("output-dash", ["estimate", "c.yaml", "--json", "--output", "-"], "any"),
    ]:
        a.append(Attempt("cli", name, argv, expect, dict(files), (), outputs=()))
    return a


def measured_group() -> list[Attempt]:
    """Issue 24's surfaces: importers, fit and report, outputs onto the tool's data, scheduler and --top, the
    plugin (scripts/hostile_sweep_measured.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from hostile_sweep_measured import measured_attempts

    return measured_attempts(Attempt, PY, symlink=_symlink, pytest_ok=_pytest_ok, pytest_refuses=_pytest_refuses)


GROUPS = {
    "measured": measured_group,
    "case": case_attempts, "paths": path_attempts, "outputs": output_attempts, "profile": profile_attempts,
    "json": json_attempts, "batch": batch_attempts, "contract": contract_attempts, "vendor": vendor_attempts,
    "calibrate": calibrate_attempts, "trace": trace_attempts, "search": search_attempts,
    "evidence": evidence_attempts, "oracle": oracle_attempts, "plugin": plugin_attempts,
    "process": process_attempts, "cli": misc_attempts,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated groups: " + ",".join(GROUPS))
    parser.add_argument("--match", default="", help="only attempts whose class/name contains this")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--show", default="bad,weak", help="which verdicts to list in detail")
    parser.add_argument("--json", default=None, help="write every outcome here")
    parser.add_argument("--tree", default=str(ROOT), help="checkout under test (default: this script's)")
    args = parser.parse_args(argv)
    global TREE
    TREE = Path(args.tree).resolve()
    groups = [g for g in args.only.split(",") if g] or list(GROUPS)
    unknown = [g for g in groups if g not in GROUPS]
    if unknown:
        parser.error(f"--only: unknown group(s) {', '.join(unknown)} (known: {', '.join(GROUPS)})")
    attempts = [att for g in groups for att in GROUPS[g]()]
    if args.match:
        attempts = [att for att in attempts if args.match in f"{att.cls}/{att.name}"]
    scratch = Path(tempfile.mkdtemp(prefix="hostile-sweep-"))
    vendor = scratch / "vendor"
    shutil.copytree(TREE / "vendor", vendor)
    _VENDOR_DIGEST.update({str(p.relative_to(vendor)): digest(p)
                           for p in sorted(vendor.rglob("*")) if p.is_file()})
    results = []
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run_attempt, att, scratch, vendor): att for att in attempts}
        for n, future in enumerate(concurrent.futures.as_completed(futures), 1):
            att = futures[future]
            try:
                verdict, problems, run = future.result()
            except Exception as error:  # noqa: BLE001 - a sweep bug is reported, not fatal
                verdict, problems, run = "bad", [f"sweep error {type(error).__name__}: {error}"], Run(None, "", "", 0)
            results.append((att, verdict, problems, run))
            print(f"\r{n}/{len(attempts)} {time.monotonic() - start:.0f}s", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    shutil.rmtree(scratch, ignore_errors=True)
    table: dict[str, dict[str, int]] = {}
    for att, verdict, _, _ in results:
        row = table.setdefault(att.cls, {"good": 0, "weak": 0, "bad": 0})
        row[verdict] += 1
    print(f"{'class':28} {'attempts':>8} {'good':>6} {'weak':>6} {'bad':>6}")
    for cls in sorted(table):
        row = table[cls]
        print(f"{cls:28} {sum(row.values()):8d} {row['good']:6d} {row['weak']:6d} {row['bad']:6d}")
    total = {k: sum(r[k] for r in table.values()) for k in ("good", "weak", "bad")}
    print(f"{'total':28} {sum(total.values()):8d} {total['good']:6d} {total['weak']:6d} {total['bad']:6d}")
    show = set(args.show.split(","))
    for att, verdict, problems, run in sorted(results, key=lambda r: (r[1], r[0].cls, r[0].name)):
        if verdict in show:
            print(f"[{verdict}] {att.cls} :: {att.name} (exit {run.status}, {run.seconds:.1f}s)")
            for problem in problems:
                print(f"    {problem[:400]}")
    if args.json:
        Path(args.json).write_text(json.dumps([
            {"class": att.cls, "name": att.name, "verdict": verdict, "problems": problems, "status": run.status,
             "stderr": run.err[-2000:]} for att, verdict, problems, run in results], indent=1))
    return 1 if total["bad"] else 0


if __name__ == "__main__":
    sys.exit(main())
