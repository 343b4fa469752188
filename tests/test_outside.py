"""The work outside the composed blocks as one section of plan tasks (harness.cost.outside), priced once and
added by the one composition step.

The unit tests price a hand-made section with a stub pricer whose prices are exact binary fractions, so each
expected component is written out from the module rules (per microbatch ``m x``, per iteration once, the
accumulation ``(m - 1) x blocks_per_stage`` and ``(PP - 1) x blocks_per_chunk``) and compared exactly."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.cases import load_case
from harness.cost.outside import IterationTasks, iteration_tasks, outside_work
from harness.cost.views import COST_VIEWS, Pricer
from harness.evidence.families import GradientAccumulation
from harness.evidence.profile import load_profile
from harness.ir.portable import Work
from harness.pipeline import lower
from harness.schedule.calculon_forms import with_outside_work
from harness.vocabulary import COMPONENTS

from conftest import CASES_DIR


def work(operations: float) -> Work:
    return Work.trusted(operations=operations, bytes_read=0.0, bytes_written=0.0, engine="vector")


class StubPricer:
    """A work costs its operations / 8 seconds (x 2 for an optimizer step); a message its bytes / 4."""

    def __init__(self, host_s: float | None = None) -> None:
        self.profile = SimpleNamespace(launch=None if host_s is None else SimpleNamespace(
            issue_s_per_microbatch=host_s))
        self.view = SimpleNamespace(curves=("launch",))

    def work(self, w: Work, optimizer: bool = False):
        return SimpleNamespace(processing_s=w.operations / 8 * (2 if optimizer else 1))

    def message_s(self, message) -> float:
        return 0.0 if message is None else message.message_bytes / 4


def output_task(forward: float, dgrad: float, wgrad: float):
    return SimpleNamespace(forward=work(forward), activation_grad=work(dgrad), weight_grad=work(wgrad))


SECTION = IterationTasks(
    training=True,
    microbatch_tasks=(output_task(8, 16, 24), output_task(40, 8, 0)),  # forward 1 + 5, backward (2 + 3) + (1 + 0)
    optimizer_works=(work(4), work(12)),  # optimizer (4 + 12) / 8 x 2 = 4
    sync_messages=(SimpleNamespace(message_bytes=2.0),), embedding_group=SimpleNamespace(message_bytes=6.0),
    vocabulary=True,  # data_parallel 0.5 + 1.5 = 2
    accumulation_works=(work(2), work(6)),  # one block 1
    accumulation_multiples=(3 * 5, 1 * 2))  # m = 4, 5 blocks per stage; PP 2, 2 blocks per chunk


def test_the_section_is_priced_per_microbatch_per_iteration_and_per_accumulating_block():
    priced = outside_work(StubPricer(host_s=0.25), SECTION)
    assert priced.per_microbatch_s == (6.25, 6.0)
    assert priced.per_iteration_s == (4.0, 2.0)
    assert priced.accumulation_s == (15.0, 2.0)


def test_the_composition_adds_the_microbatch_work_m_times_and_the_iteration_work_once():
    base = {name: 1.0 for name in COMPONENTS}
    components, total = with_outside_work(base, float(len(COMPONENTS)), 4, outside_work(StubPricer(), SECTION),
                                          portable=False)
    assert components["forward"] == 1.0 + 4 * 6.0
    assert components["backward"] == 1.0 + 4 * 6.0 + 15.0
    assert components["optimizer"] == 1.0 + 4.0
    assert components["data_parallel"] == 1.0 + 2.0
    assert components["pipeline_bubble"] == 1.0 + 2.0
    assert total == len(COMPONENTS) + 24.0 + 24.0 + 4.0 + 2.0 + 15.0 + 2.0


def test_nothing_in_the_section_leaves_the_composition_as_it_is():
    priced = outside_work(StubPricer(), IterationTasks(training=True))
    assert priced.per_microbatch_s is None and priced.per_iteration_s is None and priced.accumulation_s is None


def test_a_plans_section_lists_each_weight_gradient_of_a_block_and_the_schedules_multiples():
    """gpt3-175B_full: 64 microbatches, 12 blocks per stage, PP 8, 4 blocks per chunk; a block's weight-holding
    tasks are the query, key, value and attention-output linears, the two MLP linears and the two norms."""
    measured = load_profile("a100_measured").model_copy(
        update={"gradient_accumulation": GradientAccumulation(kind="unfused_in_place_add")})
    low = lower(load_case(CASES_DIR / "gpt3-175B_full.yaml").estimate_input())
    pricer = Pricer(measured, COST_VIEWS["system_evidence"], low.plan.datatype)
    p = low.plan
    section = iteration_tasks(pricer, low.model, p.schedule, p.tasks, p.bytes_per_element,
                              output_tasks_planned=p.output_tasks, vocabulary_weights=p.vocabulary_weights)
    assert section.accumulation_multiples == (63 * 12, 7 * 4)
    h, ff, tp = 12288, 49152, 8
    expected = sorted([h * h // tp] * 4 + [h * ff // tp] * 2 + [2 * h] * 2)
    assert sorted(w.operations for w in section.accumulation_works) == pytest.approx(expected)
    without = measured.model_copy(update={"gradient_accumulation": None})
    assert iteration_tasks(Pricer(without, COST_VIEWS["system_evidence"], p.datatype), low.model, p.schedule,
                           p.tasks, p.bytes_per_element).accumulation_works == ()
