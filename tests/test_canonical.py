"""The compiled canonical writers and trusted construction (the fast paths of lowering).

Rules checked: ``Artifact.canonical()`` is byte-identical to the reference
``canonical_json(artifact.to_data())`` for every IR of every case and of the
public and vendored differential corpora; a non-finite float or an unsupported field kind
falls back to the reference; ``Frozen.trusted`` stores fields in declaration
order, fills defaults, refuses missing and unknown fields and builds objects
equal to validated ones.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import Field, PrivateAttr

from harness.cases import load_cases
from harness.digest import canonical_json
from harness.interop.calculon_format import input_from_calculon
from harness.ir import canonical
from harness.ir.base import Frozen
from harness.ir.distributed import LinearShape, Retention, Task
from harness.ir.portable import Capacity, Message, TaskMessages, Work
from harness.oracles.records import load_record_file
from harness.pipeline import lower

from conftest import CASES_DIR


def _artifacts(lowering):
    return (lowering.model, lowering.distributed, lowering.plan, *lowering.checkpoints)


def _assert_reference(artifact) -> None:
    assert artifact.canonical() == canonical_json(artifact.to_data()), type(artifact).__name__


def test_every_case_ir_is_written_exactly_as_the_reference():
    for case in load_cases(CASES_DIR):
        for artifact in _artifacts(lower(case.estimate_input())):
            _assert_reference(artifact)


def test_a_field_absent_while_none_is_left_out_of_the_text_and_written_when_set():
    data = load_cases(CASES_DIR)[0].estimate_input()
    plain = lower(data)
    stated = lower(data.model_copy(update={"model": data.model.model_copy(update={"vocabulary": 32000})}))
    for artifact in (*_artifacts(plain), *_artifacts(stated)):
        _assert_reference(artifact)  # compiled writer == reference, both with and without the field
    for ir in (plain.model, plain.distributed, plain.plan):
        text = ir.canonical()
        assert '"vocabulary"' not in text and '"output_tasks"' not in text
        assert canonical.write(ir, (("schema_name", '"x"'), ("schema_version", "0"))) is not None
    assert '"vocabulary":32000' in stated.model.canonical()
    assert '"output_tasks":[{' in stated.distributed.canonical() and '"output_tasks":[{' in stated.plan.canonical()
    # nested dumps follow the same rule (the contract digests a case's model dump)
    assert "vocabulary" not in data.model.model_dump() and "vocabulary" not in plain.model.to_data()["shape"]
    assert stated.model.to_data()["shape"]["vocabulary"] == 32000


class _AbsentFirst(Frozen):
    ABSENT_IF_NONE = frozenset({"a", "c", "d"})
    a: int | None = Field(None, description="Sorts before the first present key.")
    b: int = Field(description="Present.")
    c: int | None = Field(None, description="Sorts after it.")
    d: int | None = Field(None, description="Sorts last.")


def test_absent_fields_before_and_after_the_first_present_key_are_written_as_the_reference():
    """'"a":2,' before the first present key, ',"c":3' after it, nothing while None (text written by hand)."""
    expected = {(): '{"b":1}', ("a",): '{"a":2,"b":1}', ("c",): '{"b":1,"c":3}',
                ("a", "c", "d"): '{"a":2,"b":1,"c":3,"d":4}'}
    values = {"a": 2, "c": 3, "d": 4}
    for given, text in expected.items():
        value = _AbsentFirst(b=1, **{k: values[k] for k in given})
        assert canonical.write(value) == text
        assert canonical_json(value.model_dump()) == text


def test_lowering_irs_take_the_compiled_path():
    low = lower(load_cases(CASES_DIR)[0].estimate_input())
    for ir in (low.model, low.distributed, low.plan):
        assert canonical.write(ir, (("schema_name", '"x"'), ("schema_version", "0"))) is not None


@pytest.mark.slow
def test_every_differential_corpus_ir_is_written_exactly_as_the_reference():
    """Every input of the public and the vendored differential corpora: each one lowers (none is skipped)."""
    records = [*load_record_file("records/public-differential.json.gz").records,
               *load_record_file("records/differential.json.gz").records]
    assert len(records) == 1900
    for record in records:
        data = input_from_calculon(record.calculon_model, record.calculon_execution, record.system)
        for artifact in _artifacts(lower(data)):
            _assert_reference(artifact)


def test_non_finite_floats_fall_back_to_the_reference_which_refuses_them():
    for value in (math.nan, math.inf, -math.inf):
        work = Work.trusted(operations=value, bytes_read=0, bytes_written=0, engine="vector")
        assert canonical.write(work) is None
        with pytest.raises(ValueError):
            canonical_json(work.model_dump(mode="json"))


def test_non_finite_numbers_anywhere_fall_back_to_the_reference():
    """In an optional (absent-if-None) float field, in an int field, nested in a memoized value."""
    zero = dict(weight_bytes=0, activation_bytes=0, output_bytes=0, weight_grad_bytes=0,
                weight_grad_unsharded_bytes=0, activation_grad_bytes=0, optimizer_bytes=0)
    assert canonical.write(Capacity.trusted(**zero, quantized_weight_bytes=math.inf)) is None
    assert canonical.write(Capacity.trusted(**zero, quantized_weight_bytes=2.5)) == canonical_json(
        Capacity.trusted(**zero, quantized_weight_bytes=2.5).model_dump(mode="json"))
    message = Message.trusted(collective="all_reduce", message_bytes=1, participants=math.nan, network_tier=0)
    assert canonical.write(message) is None
    stride = Message.trusted(collective="all_reduce", message_bytes=1, participants=2, network_tier=0,
                             member_stride_processors=-math.inf)
    assert canonical.write(stride) is None
    assert canonical.write(TaskMessages.trusted(forward_base=message, forward_edge=None, backward_base=None,
                                                backward_edge=None)) is None


def test_strings_holding_nan_or_inf_are_written_by_the_compiled_writer():
    task = Task.trusted(name="inference/nan.inf", phase="forward", shape=LinearShape.trusted(m=1, n=2, k=3))
    assert canonical.write(task) == canonical_json(task.model_dump(mode="json"))


def test_ints_in_float_fields_and_strings_are_written_like_model_dump():
    work = Work.trusted(operations=2**60 + 1, bytes_read=3, bytes_written=True, engine="matrix")
    assert canonical.write(work) == canonical_json(work.model_dump(mode="json"))
    task = Task.trusted(name='a "quoted" \\ näme', phase="forward", shape=LinearShape.trusted(m=1, n=2, k=3))
    assert canonical.write(task) == canonical_json(task.model_dump(mode="json"))


class _WithDict(Frozen):
    table: dict[str, Any] = Field(description="Not covered by the compiled writers.")


class _Aliased(Frozen):
    value: int = Field(alias="other", description="Aliased: not covered.")


def test_unsupported_field_kinds_have_no_compiled_writer():
    assert canonical.write(_WithDict(table={"a": 1})) is None
    assert canonical.write(_Aliased(other=1)) is None


def test_trusted_stores_declaration_order_and_fills_defaults():
    work = Work.trusted(engine="matrix", bytes_written=3, operations=1, bytes_read=2)
    assert list(work.__dict__) == list(Work.model_fields)
    task = Task.trusted(name="t", phase="forward", shape=LinearShape.trusted(m=1, n=2, k=3))
    assert task == Task(name="t", phase="forward", shape=LinearShape(m=1, n=2, k=3))
    assert task.retention == Retention() and task.depends_on == () and task.clone_of is None
    assert task.model_fields_set == {"name", "phase", "shape"}


def test_trusted_refuses_missing_and_unknown_fields():
    with pytest.raises(TypeError, match="missing field 'bytes_read'"):
        Work.trusted(operations=1, bytes_written=0, engine="vector")
    with pytest.raises(TypeError, match="unknown field"):
        Work.trusted(operations=1, bytes_read=0, bytes_written=0, engine="vector", extra=1)


def test_trusted_replace_keeps_the_other_fields():
    task = Task.trusted(name="t", phase="forward", shape=LinearShape.trusted(m=1, n=2, k=3))
    clone = task.trusted_replace(name="recompute/t", phase="recompute", clone_of="t")
    assert (clone.name, clone.phase, clone.clone_of, clone.shape) == ("recompute/t", "recompute", "t", task.shape)
    assert list(clone.__dict__) == list(Task.model_fields)


def test_interned_classes_share_one_instance_per_field_values():
    def task(k: int) -> Task:
        return Task.trusted(name="t", phase="forward", shape=LinearShape.trusted(m=1, n=2, k=k),
                            retention=Retention.trusted())

    a, b, c = task(3), task(3), task(4)
    assert a is b and a is not c and a.shape is b.shape
    assert a == Task(name="t", phase="forward", shape=LinearShape(m=1, n=2, k=3))


MEMO_INPUTS = ("differential/0000/anthropic-52B", "differential/0005/lamda", "differential/0006/megatron-126M",
               "overlap/0001/chinchilla", "overlap/0007/megatron-1T", "overlap/0034/megatron-22B")


def _memo_sizes(current) -> dict[str, int]:
    """The size of every memo of a session (the largest table where there are several: the interned classes,
    the two price memos of each shared pricer)."""
    pricers = [p for _, p in current.pricers.values()]
    sizes = {memo.name: len(memo) for memo in (current.lowerings, current.concrete, current.projections,
                                              current.pricers, current.facts, current.messages,
                                              current.output_tasks, current.texts, current.profiles)}
    sizes["interned"] = max(len(current.interned(cls)) for cls in current._interned)
    sizes["prices"] = max(len(m) for p in pricers for m in (p._priced, p._priced_optimizer))
    return sizes


def test_estimates_do_not_depend_on_memo_state():
    """A session whose every memo is bounded at 2 entries (and so evicts over and over) gives the same
    estimates as a fresh one with the real bounds.

    The sizes prove that each bound is the one the memo consults: above 2 with the real bounds, at most 2
    with the small ones (a memo with its own literal bound would fail here).
    """
    from harness import session
    from harness.estimate import estimate
    from harness.interop.calculon_format import input_from_calculon
    from harness.oracles.records import RecordIndex

    index = RecordIndex(("records/differential.json.gz", "records/overlap.json.gz"))
    inputs = [case.estimate_input() for case in load_cases(CASES_DIR)] + [
        input_from_calculon(r.calculon_model, r.calculon_execution, r.system) for r in map(index.get, MEMO_INPUTS)]
    inputs += [data.model_copy(update={"model": data.model.model_copy(update={"vocabulary": vocabulary})})
               for data in inputs[:3] for vocabulary in (32000, 50257)]  # the output layer's tasks
    with session.using(session.Session()) as roomy:
        reference = [estimate(data).model_dump_json() for data in inputs]
        sizes = _memo_sizes(roomy)
    assert all(size > 2 for name, size in sizes.items() if name != "profiles"), str(sizes)
    small = session.Session(lowerings=2, facts=2, interned=2, texts=2, pricers=2, prices=2, profiles=2)
    with session.using(small):
        assert [estimate(data).model_dump_json() for data in inputs] == reference
        assert [estimate(data).model_dump_json() for data in inputs] == reference
        sizes = _memo_sizes(small)
    assert all(size <= 2 for size in sizes.values()), sizes


def test_only_weighted_primitives_depend_on_the_optimizer_shards():
    from harness.passes.rules import RULES, WEIGHTED

    for case in load_cases(CASES_DIR):
        for task in lower(case.estimate_input()).distributed.tasks:
            rule = RULES[task.shape.kind]
            same = rule(task.shape, 2, 1) == rule(task.shape, 2, 8)
            assert same == (task.shape.kind not in WEIGHTED), task.name


def test_trusted_plans_are_derived_once_per_given_names_and_bounded():
    """A construction plan is remembered per tuple of given field names (on the class's spec), at most
    ``PLAN_LIMIT`` of them; past it, construction is still complete and checked."""
    from itertools import permutations

    from harness.ir import base

    spec = base._construction(Work)
    given = ("engine", "bytes_written", "operations", "bytes_read")
    work = Work.trusted(**{n: {"engine": "matrix"}.get(n, 1) for n in given})
    assert given in spec.plans and spec.plans[given][1] == set(given) == work.model_fields_set
    for order in permutations(("operations", "bytes_read", "bytes_written", "engine", "datatype")):
        work = Work.trusted(**{n: {"engine": "vector", "datatype": None}.get(n, 2) for n in order})
        assert list(work.__dict__) == list(Work.model_fields) and work.gemm_operations is None
        assert work.model_fields_set == set(order)
    assert len(spec.plans) == base.PLAN_LIMIT  # 120 orders + 1 seen, 64 remembered
    with pytest.raises(TypeError, match="missing field 'operations'"):
        Work.trusted(bytes_read=0, bytes_written=0, engine="vector", datatype=None, gemm_operations=None)


class _Base(Frozen):
    a: int = Field(description="A field of the base class.")


class _Derived(_Base):
    b: int = Field(0, description="A field of the subclass only.")


class _OrderedDerived(_Base):
    """The base's fields and a private attribute of its own (built by trusted_ordered only)."""

    _note: str = PrivateAttr(default="derived")


def test_a_subclass_builds_with_its_own_construction_spec():
    """The spec stored on a base class is found first by a subclass's lookup: the subclass derives its own."""
    base = _Base.trusted(a=1)
    derived = _Derived.trusted(a=1, b=2)
    assert (type(base), type(derived), derived.__dict__, base.__dict__) == (_Base, _Derived, {"a": 1, "b": 2},
                                                                           {"a": 1})
    ordered = _OrderedDerived.trusted_ordered({"a": 3})
    assert type(ordered) is _OrderedDerived and ordered._note == "derived" and ordered == _OrderedDerived(a=3)
    assert derived.model_fields_set == {"a", "b"} and derived == _Derived(a=1, b=2)
