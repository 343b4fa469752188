"""The search over a mixture-of-experts model's expert layout (issue 21, item 7: harness/search/space.py).

The reference is a brute-force enumeration written here from Megatron-Core's constraints, independently of the
space's code: every layout of a tiny MoE model on 2 processors (TP, PP, DP, recompute, sharding, TP communication,
EP, ETP, dispatcher, all-gather redo, DP overlap, microbatch, network tiers of every group, the expert
groups' too), each estimated by ``harness.estimate`` on its own; the search's rows must be exactly those executions
with exactly those figures. The constraints (megatron/core/parallel_state.py, transformer_config.py,
megatron/training/arguments.py): EP divides the experts, ETP the expert width, ETP x EP divides TP x CP x DP
(world % (ETP x EP x PP) == 0), EP > 1 with TP > 1 needs sequence parallelism, EP > 1 not in fp16."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest

from harness.cases import EstimateInput
from harness.estimate import estimate_lowering
from harness.evidence.profile import load_profile
from harness.ir.model import ExecutionLayout, TransformerShape
from harness.pipeline import lower
from harness.search.evaluate import SearchProblem
from harness.search.run import run_search
from harness.search.space import SpaceOptions, expert_layouts, groups
from conftest import brute_force_outcome

# 4 experts of width 256, top 2: EP over {1, 2, 4}, ETP over the divisors of 256 (on 2 processors: 1 or 2)
SHAPE = TransformerShape(hidden=512, feedforward=2048, sequence_length=512, attention_heads=8, head_size=64, blocks=2,
                         moe=dict(experts=4, top_k=2, expert_ffn=256))
DENSE = SHAPE.model_copy(update={"moe": None})


def without_tier2(name: str, **networks):
    base = load_profile(name)
    nets = (base.networks[0].model_copy(update=networks), *base.networks[1:]) if networks else base.networks
    return base.model_copy(update={"name": f"{name}_test", "networks": nets,
                                   "memory_tier2": base.memory_tier2.model_copy(update={"capacity_bytes": 0})})


@pytest.fixture(scope="module")
def profile():
    """h100_measured (hierarchical collectives) without memory tier 2 (no offload choices)."""
    return without_tier2("h100_measured")


def test_a_dense_models_groups_have_no_expert_layout():
    assert {(g.ep, g.etp, g.dispatcher) for g in groups(DENSE, 8, 8, SpaceOptions(), "bfloat16")} == {(1, 1, None)}
    assert expert_layouts(DENSE, 2, 1, 4, "ar", "bfloat16") == [(1, 1, None)]


def test_the_expert_layouts_are_megatron_cores():
    # TP 2, DP 4 (TP x CP x DP = 8), rs_ag: ETP in {1, 2, 4, 8} dividing 256, EP in {1, 2, 4}, ETP x EP | 8
    assert expert_layouts(SHAPE, 2, 1, 4, "rs_ag", "bfloat16") == [
        (1, 1, None), (2, 1, None), (2, 1, "allgather"), (4, 1, None), (4, 1, "allgather"),
        (1, 2, None), (1, 2, "allgather"), (2, 2, None), (2, 2, "allgather"), (4, 2, None), (4, 2, "allgather"),
        (1, 4, None), (1, 4, "allgather"), (2, 4, None), (2, 4, "allgather"), (1, 8, None), (1, 8, "allgather")]
    # without sequence parallelism EP stays 1 under TP 2; in float16 EP stays 1
    assert {ep for ep, _, _ in expert_layouts(SHAPE, 2, 1, 4, "ar", "bfloat16")} == {1}
    assert {ep for ep, _, _ in expert_layouts(SHAPE, 1, 1, 8, "ar", "float16")} == {1}


def brute_force(profile):
    """{execution key: (status, total_s)} of every layout, enumerated here (2 processors, batch <= 2)."""
    out = {}
    networks = range(len(profile.networks))
    for tp, pp in itertools.product((1, 2), (1, 2)):
        if tp * pp > 2:
            continue
        dp = 2 // (tp * pp)
        batch = 2 // dp * dp
        experts = [(ep, etp) for ep, etp in itertools.product((1, 2, 4), (1, 2, 4, 8, 16, 32, 64, 128, 256))
                   if 4 % ep == 0 and 256 % etp == 0 and (tp * dp) % (ep * etp) == 0]
        for recompute, sharding, comm, (ep, etp) in itertools.product(
                ("full", "attn_only", "none"), (True, False) if dp > 1 else (False,), ("ar", "p2p_rs_ag", "rs_ag"),
                experts):
            if ep > 1 and tp > 1 and comm != "rs_ag":
                continue  # Megatron-Core: EP with TP needs sequence parallelism
            for dispatcher in ((None, "allgather") if ep * etp > 1 else (None,)):
                redos = (True, False) if comm == "rs_ag" and recompute != "full" else (False,)
                dp_overlaps = (True, False) if dp > 1 else (False,)
                tp_overlaps = ("none",)  # --no-tp-overlap (DP overlap takes the projection's path already)
                microbatches = [m for m in (1, 2) if (batch // dp) % m == 0 and m * 512 % tp == 0]
                for redo, dpo, tpo, microbatch in itertools.product(redos, dp_overlaps, tp_overlaps, microbatches):
                    for tn, pn, dn, en, etn in itertools.product(*(networks if n > 1 else (0,)
                                                                   for n in (tp, pp, dp, ep, etp))):
                        tiers = {"tensor": tn, "pipeline": pn, "data": dn, **({"expert": en} if ep > 1 else {}),
                                 **({"expert_tensor": etn} if etp > 1 else {})}
                        execution = ExecutionLayout(
                            tensor_parallel=tp, pipeline_parallel=pp, data_parallel=dp, global_batch=batch,
                            microbatch=microbatch, datatype="bfloat16", recompute=recompute, tp_communication=comm,
                            seq_par_ag_redo=redo, optimizer_sharding=sharding, fused_activation=True,
                            network_tiers=tiers, training=True, tp_overlap=tpo, dp_overlap=dpo,
                            **({"expert_parallel": ep} if ep > 1 else {}),
                            **({"expert_tensor_parallel": etp} if etp > 1 else {}),
                            **({"moe_dispatcher": dispatcher} if dispatcher else {}))
                        key = (tp, pp, dp, recompute, sharding, comm, ep, etp, dispatcher, redo, dpo, tpo, microbatch,
                               tn, pn, dn, en, etn)
                        out[key] = brute_force_outcome(SHAPE, execution, profile)
    return out


def rows_of(problem):
    tables = []
    result = run_search(problem, workers=1, on_rows=tables.append)
    return result, pa.concat_tables(tables).to_pylist()


def test_every_expert_layout_equals_the_brute_force_estimate(profile):
    problem = SearchProblem(SHAPE, 2, 2, "bfloat16", profile, SpaceOptions(tp_overlap=False), 3, prune=False,
                            collect_rows=True)
    result, rows = rows_of(problem)
    got = {(r["tensor_par"], r["pipeline_par"], r["data_par"], r["activation_recompute"], r["optimizer_sharding"],
            r["tensor_par_comm_type"], r["expert_par"], r["expert_tensor_par"], r["moe_dispatcher"],
            r["seq_par_ag_redo"], r["data_par_overlap"], r["tensor_par_overlap"], r["microbatch_size"],
            r["tensor_par_net"], r["pipeline_par_net"], r["data_par_net"], r["expert_par_net"],
            r["expert_tensor_par_net"]): (r["status"], None if r["status"] == "invalid" else r["total_s"])
           for r in rows}
    expected = brute_force(profile)
    assert len(rows) == len(got) == len(expected)
    assert got == expected
    ok = {k for k, (status, _) in got.items() if status == "ok"}
    assert {(k[6], k[7], k[8]) for k in ok} == {(1, 1, None), (2, 1, None), (2, 1, "allgather"), (1, 2, None),
                                                (1, 2, "allgather")}  # every expert layout feasible somewhere
    assert {k[10] for k in ok if k[6] > 1} == {True, False}  # EP with DP overlap (the projection's path) too
    best = min((total, key) for key, (status, total) in expected.items() if status == "ok")
    assert result.best[0].total_s == best[0]


def test_ep_over_two_islands_is_searched_at_the_estimates_split_price():
    """4 processors over 2-processor islands: the EP 4 all-to-all on tier 1 is split (2 members per island) by
    the hierarchical family; the search's rows of EP 4 on tier 1 equal the estimate of each execution."""
    profile = without_tier2("h100_measured", size_processors=2)
    shape = SHAPE.model_copy(update={"blocks": 1})
    options = SpaceOptions(tp_overlap=False, dp_overlap=False)
    _, rows = rows_of(SearchProblem(shape, 4, 4, "bfloat16", profile, options, 1, prune=False, collect_rows=True))
    spread = [r for r in rows if r["expert_par"] == 4 and r["expert_par_net"] == 1 and r["status"] == "ok"]
    assert len(spread) > 20
    for r in spread[::max(1, len(spread) // 12)]:
        execution = ExecutionLayout(
            tensor_parallel=r["tensor_par"], pipeline_parallel=r["pipeline_par"], data_parallel=r["data_par"],
            global_batch=r["batch_size"], microbatch=r["microbatch_size"], datatype="bfloat16",
            recompute=r["activation_recompute"], tp_communication=r["tensor_par_comm_type"],
            seq_par_ag_redo=r["seq_par_ag_redo"], optimizer_sharding=r["optimizer_sharding"], fused_activation=True,
            network_tiers={"tensor": r["tensor_par_net"], "pipeline": r["pipeline_par_net"],
                           "data": r["data_par_net"], "expert": 1}, expert_parallel=4,
            **({"moe_dispatcher": r["moe_dispatcher"]} if r["moe_dispatcher"] else {}))
        est = estimate_lowering(lower(EstimateInput(model=shape, execution=execution, system=profile.name)), profile)
        assert r["total_s"] == est.views["system_evidence"].total_s
    # the folded expert groups fit the 2-processor islands as a layout of their own: TP 2 and EP 2 both on tier 0
    # are feasible (a joint check would need 4 processors on tier 0), as the estimate finds
    folded = [r for r in rows if (r["tensor_par"], r["tensor_par_net"], r["expert_par"], r["expert_par_net"],
                                  r["expert_tensor_par"], r["tensor_par_comm_type"]) == (2, 0, 2, 0, 1, "rs_ag")
              and r["data_par_net"] == 1]
    assert folded and {r["status"] for r in folded} == {"ok"}
    # ETP 2 x EP 2 on tier 0 is one folded group of 4 there: infeasible
    assert {r["status"] for r in rows if (r["expert_par"], r["expert_par_net"], r["expert_tensor_par"],
                                          r["expert_tensor_par_net"]) == (2, 0, 2, 0)} == {"infeasible"}
