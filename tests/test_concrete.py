"""ConcretePlanIR and transformer-concretize: structure, checks, and the no-concurrency equality.

- The no-overlap estimate *is* the ConcretePlanIR with no concurrency: for
  every case and a sample of the differential corpus, the ``calculon-0.1.0``
  projection of the concretized plan gives the estimate's components and
  total bit for bit, both views.
- Tiling: an overlapped pass has ``tiles`` GEMM tiles (flop and memory phase)
  and ``tiles - 1`` (ring) or ``tiles`` (pipe) network tiles, with the step
  dependencies of harness.ir.concrete.
- Buffers: without offload everything lives in tier 1; offloaded figures keep
  Calculon's staging copies (weights: two blocks).
- The pass checkpoint records the typed options; the digest is stable.
"""

from __future__ import annotations

import json
import random

import pytest

from harness.cases import load_cases
from harness.cost.views import COST_VIEWS, pricer_for
from harness.errors import PassError
from harness.estimate import estimate_lowering
from harness.evidence.profile import load_profile
from harness.interop.calculon_batch import require_valid
from harness.ir.concrete import ConcretePlanIR
from harness.oracles.records import vendor_dir
from harness.passes.concretize import TransformerConcretize
from harness.pipeline import lower
from harness.schedule.projection import calculon_projection

from conftest import CASES_DIR

INPUTS = vendor_dir() / "differential" / "inputs.jsonl.gz"
OVERLAP_INPUTS = vendor_dir() / "overlap" / "inputs.jsonl.gz"


def _no_overlap_inputs():
    cases = [(c.id, c.estimate_input()) for c in load_cases(CASES_DIR)]
    corpus = require_valid(INPUTS)
    sample = random.Random(7).sample(range(len(corpus)), 40)
    return cases + [corpus[i] for i in sorted(sample)]


@pytest.mark.parametrize("record_id,data", _no_overlap_inputs(), ids=lambda v: v if isinstance(v, str) else "")
def test_no_overlap_estimate_is_the_concrete_plan_without_concurrency(record_id, data):
    lowering = lower(data)
    assert not lowering.concurrent
    concrete, checkpoint = TransformerConcretize.for_layout(data.execution).run(lowering.plan)
    assert not concrete.options.concurrent and concrete.tp_tiles == 1
    assert all(c.tiles == 1 for p in concrete.programs for c in p.commands)
    assert concrete.tier2_total_bytes == 0
    profile = load_profile(data.system)
    est = estimate_lowering(lowering, profile)
    assert concrete.tier1_total_bytes == pytest.approx(est.views["system_evidence"].memory_bytes.tier1_total,
                                                       rel=0, abs=1.0)
    for view in COST_VIEWS.values():
        projection = calculon_projection(concrete, pricer_for(profile, view, concrete.datatype))
        ours = est.views[view.name]
        assert projection.total_s == ours.total_s, record_id
        assert projection.components_s == ours.components_s.model_dump(), record_id


def _overlap_input(predicate):
    for record_id, data in require_valid(OVERLAP_INPUTS):
        if predicate(data.execution):
            return data
    raise LookupError("no such input in the overlap corpus")


@pytest.mark.parametrize("mode,network_tiles", [("ring", lambda n: n - 1), ("pipe", lambda n: n)])
def test_overlapped_pairs_are_tiled(mode, network_tiles):
    data = _overlap_input(lambda e: e.tp_overlap == mode and e.tp_communication == "rs_ag" and e.training
                          and e.tensor_parallel >= 4)
    concrete, _ = lower(data).concretize()
    n = data.execution.tensor_parallel
    assert concrete.tp_tiles == n
    forward = concrete.program("forward", "base")
    pair = [c for c in forward.commands if c.task == "mlp.fc1_ag"]
    gemm = [c for c in pair if c.kind == "compute"]
    sends = [c for c in pair if c.kind == "collective"]
    assert [(c.tile, c.phase) for c in gemm] == [(i, p) for i in range(n) for p in ("flops", "memory")]
    assert len(sends) == network_tiles(n)
    assert {c.queue for c in sends} == {f"network.tier{data.execution.network_tiers.tensor}"}
    assert all(c.message.collective == "all_gather" for c in sends)
    by_name = {c.name: c for c in pair}
    for i in range(1, n):
        memory = by_name[f"mlp.fc1_ag/forward/tile{i}.memory"]
        assert f"mlp.fc1_ag/forward/tile{i}.send" in memory.depends_on  # the step waits for its network tile
        flops = by_name[f"mlp.fc1_ag/forward/tile{i}.flops"]
        assert flops.depends_on == (f"mlp.fc1_ag/forward/tile{i - 1}.memory",)


def test_offloaded_buffers_stage_through_tier1():
    data = _overlap_input(lambda e: e.offload.weights and e.offload.optimizer and e.training)
    lowering = lower(data)
    concrete, _ = lowering.concretize()
    buffers = {b.name: b for b in concrete.buffers}
    weight = buffers["weight"]
    blocks = concrete.schedule.blocks_per_stage
    assert weight.offloaded and weight.tier2_bytes == weight.total_bytes
    assert weight.tier1_bytes == pytest.approx(2 * weight.total_bytes / blocks)
    assert buffers["optimizer"].offloaded and buffers["optimizer"].tier2_bytes == buffers["optimizer"].total_bytes
    assert not buffers["activation_grad"].offloaded
    assert [q.kind for q in concrete.queues][-1] == "memory_tier2"
    assert concrete.program("forward_offload").commands[0].queue == "memory.tier2"


def test_checkpoint_records_typed_options_and_the_digest_is_stable():
    data = _overlap_input(lambda e: e.tp_overlap == "pipe" and e.dp_overlap)
    lowering = lower(data)
    concrete, checkpoint = lowering.concretize()
    assert checkpoint.pass_name == "transformer-concretize"
    assert checkpoint.pass_options["tp_overlap"] == "pipe" and checkpoint.pass_options["dp_overlap"] is True
    assert checkpoint.input_digest == lowering.plan.digest() and checkpoint.output_digest == concrete.digest()
    data = json.loads(concrete.canonical())
    assert (data.pop("schema_name"), data.pop("schema_version")) == ("blueprinting.concrete-plan-ir", 0)
    again = ConcretePlanIR.model_validate(data)
    assert again.digest() == concrete.digest()
    assert lowering.digests(concrete=True)["concrete_plan_ir"] == concrete.digest()
    assert "concrete_plan_ir" not in lowering.digests()


def test_the_pass_refuses_options_the_plan_cannot_carry():
    data = _overlap_input(lambda e: e.tp_overlap == "ring")
    plan = lower(data).plan
    with pytest.raises(PassError, match="tp_overlap=none but the plan has overlapped linears"):
        TransformerConcretize().run(plan)


def test_lower_prints_the_concrete_plan_ir_text_json_and_canonical(capsys):
    """`lower --stage concrete`: the text lists every command and ends with the digest; --json's IR and
    --canonical's text hash (hashlib here) to the reviewed golden digest."""
    import hashlib

    from harness.cases import load_case
    from harness.cli import main

    path = CASES_DIR / "concurrency" / "gpt3-13B_offload.yaml"
    golden = json.loads((CASES_DIR.parent / "goldens" / "test_concrete_goldens" /
                         "test_concurrency_concrete_plan_ir_digest[concurrencygpt3-13B-offload].json").read_text())
    concrete = lower(load_case(path).estimate_input()).concrete()
    assert main(["lower", str(path), "--stage", "concrete"]) == 0
    lines = capsys.readouterr().out.rstrip().splitlines()
    assert lines[-1] == f"// blueprinting.concrete-plan-ir v0 sha256:{golden['digest']}"
    assert sum(line.lstrip().startswith("%") for line in lines) == sum(len(p.commands) for p in concrete.programs)
    assert "  options: tp_overlap=ring dp_overlap=True offload=weights,activations tiles=4" in lines
    assert main(["lower", str(path), "--stage", "concrete", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    canonical = json.dumps(out["ir"], sort_keys=True, separators=(",", ":"), allow_nan=False)
    assert out["digest"] == hashlib.sha256(canonical.encode()).hexdigest() == golden["digest"]
    assert main(["lower", str(path), "--stage", "concrete", "--canonical"]) == 0
    assert hashlib.sha256(capsys.readouterr().out.rstrip("\n").encode()).hexdigest() == golden["digest"]
