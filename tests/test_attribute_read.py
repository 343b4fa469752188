"""harness.ir.attribute_read: which IR classes read attributes through CPython's generic read, and that no
read changes (a private attribute and an extra field are still pydantic's; a miss is the same error).

The slot is read here with ctypes directly (the word ``tp_getattro`` of a type compared with ``object``'s),
not through the module's own helpers."""

from __future__ import annotations

import copy
import ctypes
import pickle
import sys
import types

import pytest
from pydantic import BaseModel, ConfigDict, PrivateAttr

from harness.ir import attribute_read
from harness.ir.base import Frozen
from harness.ir.distributed import CollectiveShape, LinearShape, Task
from harness.ir.model import ExecutionLayout, ModelIR, TransformerShape
from harness.ir.portable import Message, PlanTask, PortablePlanIR, TaskMessages, Work

pytestmark = pytest.mark.skipif(sys.implementation.name != "cpython", reason="a CPython type slot")

WORD = ctypes.sizeof(ctypes.c_void_p)


def getattro(cls: type) -> int:
    """The address in ``cls``'s ``tp_getattro`` (the 19th word of a PyTypeObject)."""
    return ctypes.c_void_p.from_address(id(cls) + 18 * WORD).value


GENERIC = ctypes.cast(ctypes.pythonapi.PyObject_GenericGetAttr, ctypes.c_void_p).value


def test_object_holds_the_generic_read_where_the_module_writes():
    assert getattro(object) == GENERIC
    assert getattro(BaseModel) != GENERIC  # pydantic's __getattr__ hook


@pytest.mark.parametrize("cls", [Work, Message, TaskMessages, PlanTask, Task, LinearShape, CollectiveShape,
                                 TransformerShape, ExecutionLayout])
def test_ir_value_classes_read_generically(cls):
    """The classes an estimate reads most: no private attributes, extra fields forbidden."""
    assert getattro(cls) == GENERIC


@pytest.mark.parametrize("cls", [ModelIR, PortablePlanIR])
def test_artifacts_keep_pydantics_read(cls):
    """An artifact's digest is a private attribute: its class keeps the hook that serves it."""
    assert getattro(cls) == getattro(BaseModel) != GENERIC


def test_a_private_attribute_is_still_read():
    class WithPrivate(Frozen):
        a: int
        _note: str = PrivateAttr(default="kept")

    obj = WithPrivate(a=1)
    assert getattro(WithPrivate) != GENERIC
    assert (obj.a, obj._note) == (1, "kept")


def test_a_subclass_is_judged_on_its_own():
    """CPython computes a new class's read from its MRO (pydantic's hook), not from its base's slot: a subclass
    of a generic-read class that adds a private attribute keeps the hook that serves it."""

    class Base(Frozen):
        a: int

    class WithPrivate(Base):
        _note: str = PrivateAttr(default="kept")

    assert getattro(Base) == GENERIC
    assert getattro(WithPrivate) == getattro(BaseModel) != GENERIC
    assert WithPrivate(a=1)._note == "kept"


def test_an_extra_field_is_still_read():
    class Open(Frozen):
        model_config = ConfigDict(extra="allow")
        a: int

    obj = Open(a=1, b=2)
    assert getattro(Open) != GENERIC
    assert (obj.a, obj.b) == (1, 2)


@pytest.mark.parametrize("method, data", [("model_validate", {"a": 1, "b": 2}),
                                          ("model_validate_json", '{"a": 1, "b": 2}'),
                                          ("model_validate_strings", {"a": "1", "b": "2"})])
def test_a_validation_cannot_allow_extras_a_generic_class_forbids(method, data):
    """pydantic's per-call ``extra="allow"`` would keep extras only the skipped fallback can read: refused."""

    class Closed(Frozen):
        a: int

    class Open(Frozen):
        model_config = ConfigDict(extra="allow")
        a: int

    with pytest.raises(TypeError, match="Closed forbids extra fields"):
        getattr(Closed, method)(data, extra="allow")
    assert getattr(Closed, method)(data, extra="ignore").a == 1
    assert getattr(Closed, method)({"a": 1} if method == "model_validate" else
                                   '{"a": 1}' if method == "model_validate_json" else {"a": "1"}).a == 1
    assert getattr(Open, method)(data, extra="allow").b in (2, "2")


def test_copies_and_pickles_read_the_same():
    task = _plan_task()
    fields = {name: task.__dict__[name] for name in PlanTask.model_fields}
    for other in (copy.copy(task), copy.deepcopy(task), pickle.loads(pickle.dumps(task))):
        assert type(other) is PlanTask
        assert {name: getattr(other, name) for name in fields} == fields
    renamed = task.model_copy(update={"name": "renamed"})
    assert {name: getattr(renamed, name) for name in fields} == {**fields, "name": "renamed"}


def test_a_new_frozen_class_reads_generically_and_misses_as_before():
    class Plain(Frozen):
        a: int
        b: tuple[int, ...] = ()

    class Hooked(Frozen):  # keeps pydantic's read (a private attribute)
        a: int
        _note: str = PrivateAttr(default="")

    obj, hooked = Plain(a=3), Hooked(a=3)
    assert getattro(Plain) == GENERIC and getattro(Hooked) != GENERIC
    assert (obj.a, obj.b, getattr(obj, "c", "default"), hasattr(obj, "c")) == (3, (), "default", False)
    with pytest.raises(AttributeError) as generic_miss:
        obj.c
    with pytest.raises(AttributeError) as pydantic_miss:
        hooked.c
    assert str(generic_miss.value) == "'Plain' object has no attribute 'c'"
    assert str(pydantic_miss.value) == "'Hooked' object has no attribute 'c'"  # pydantic's fallback: the same form


def test_nothing_changes_on_another_interpreter(monkeypatch):
    monkeypatch.setattr(attribute_read, "sys", types.SimpleNamespace(implementation=types.SimpleNamespace(
        name="pypy")))

    class Elsewhere(Frozen):
        a: int

    assert getattro(Elsewhere) == getattro(BaseModel) != GENERIC
    assert Elsewhere(a=1).a == 1


def test_nothing_changes_for_a_layout_it_does_not_recognise(monkeypatch):
    """The word the module would write is checked against ``object``'s first: at another index (here the one
    before, ``tp_str``) it writes nothing."""
    monkeypatch.setattr(attribute_read, "GETATTRO_WORD", 17)

    class Unrecognised(Frozen):
        a: int

    assert getattro(Unrecognised) == getattro(BaseModel) != GENERIC
    assert str(Unrecognised(a=1)) == "a=1"


def test_a_read_of_its_own_is_left():
    """A class that defines ``__getattribute__`` or ``__getattr__`` keeps the hook, which calls them."""

    class OwnGetattribute(Frozen):
        a: int

        def __getattribute__(self, name):
            return "own" if name == "a" else object.__getattribute__(self, name)

    class OwnGetattr(Frozen):
        a: int

        def __getattr__(self, name):
            return f"missing {name}"

    assert getattro(OwnGetattribute) != GENERIC and getattro(OwnGetattr) != GENERIC
    assert not attribute_read.use_generic_read(OwnGetattribute, BaseModel, dict(OwnGetattribute.model_config), {})
    assert (OwnGetattribute(a=1).a, OwnGetattr(a=1).a, OwnGetattr(a=1).b) == ("own", 1, "missing b")


def _plan_task() -> PlanTask:
    """A plan task of a real lowering (the first of the 22B case's plan)."""
    from conftest import ROOT
    from harness.cases import load_case
    from harness.pipeline import lower

    return lower(load_case(ROOT / "cases" / "megatron-22B_full.yaml").estimate_input()).plan.tasks[0]
