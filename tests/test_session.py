"""The estimator session (harness/session.py): bounded memos (two generations), thread safety, the compatibility setting as a
value, and no module-level mutable state anywhere in ``harness``."""

from __future__ import annotations

import ast
import gc
import random
import threading
import weakref
from pathlib import Path

import pytest

from harness import calculon_compat as compat, session
from harness.session import IdentityMemo, Memo, Session

HARNESS = Path(__file__).resolve().parents[1] / "harness"

#: Calls that build a mutable container.
CONTAINER_CALLS = {"dict", "list", "set", "bytearray", "defaultdict", "OrderedDict", "Counter", "deque",
                   "WeakKeyDictionary", "WeakValueDictionary", "WeakSet", "ChainMap"}
#: Methods that mutate a container in place.
MUTATORS = {"append", "extend", "insert", "add", "update", "clear", "pop", "popitem", "setdefault", "remove",
            "discard", "sort", "reverse", "move_to_end", "__setitem__", "__delitem__", "intersection_update",
            "difference_update", "symmetric_difference_update", "appendleft", "extendleft"}
#: Module-level state that is configuration, not a memo (documented where it is defined).
CONFIGURATION = {("harness/locations.py", "_CURRENT"): "the project locations the command line configured"}


def _is_container(value: ast.expr | None) -> bool:
    if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    if isinstance(value, ast.Call):
        f = value.func
        return (f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else "") in CONTAINER_CALLS
    return False


def _containers(tree: ast.Module) -> set[str]:
    """The names a module binds to a mutable container at module level."""
    names = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) and node.value is not None else []
        if _is_container(getattr(node, "value", None)):
            names |= {t.id for t in targets if isinstance(t, ast.Name)} - {"__all__"}
    return names


def _mutated(node: ast.AST) -> ast.expr | None:
    """The container a statement or call mutates in place, if any."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
        return node.func.value
    if isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
        for t in (node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]):
            if isinstance(t, ast.Subscript):
                return t.value
    return None


def _module_state_violations(path: Path, tree: ast.Module, elsewhere: frozenset[str] = frozenset()) -> list[str]:
    """What in one module is module-level mutable state: a mutation of its own module-level containers (or,
    through a module attribute, of ``elsewhere``'s, the other modules' names), a module-level ``functools``
    cache, ``exec``/``eval``/``compile``, a ``global`` statement."""
    where = path.relative_to(HARNESS.parent).as_posix()
    containers = _containers(tree)
    found = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found += [f"{where}:{node.lineno}: @{ast.unparse(d)} on {node.name} (a module-level memo)"
                      for d in node.decorator_list if "cache" in ast.unparse(d)]
    for node in tree.body:
        value = getattr(node, "value", None)
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(value, ast.Call) \
                and "cache" in ast.unparse(value.func):
            found.append(f"{where}:{node.lineno}: {ast.unparse(value.func)}(...) (a module-level memo)")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("exec", "eval",
                                                                                             "compile"):
            found.append(f"{where}:{node.lineno}: {node.func.id}()")
        if isinstance(node, ast.Global):
            found.append(f"{where}:{node.lineno}: global {', '.join(node.names)}")
        target = _mutated(node)
        own = isinstance(target, ast.Name) and target.id in containers and (where, target.id) not in CONFIGURATION
        other = (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                 and target.attr in elsewhere)
        if own or other:
            found.append(f"{where}:{node.lineno}: mutates the module-level {ast.unparse(target)}")
    return found


def test_no_module_level_mutable_state_and_no_exec():
    """Every module-level container of ``harness`` is a constant (built in one expression, never mutated
    afterwards, here or from another module); no module-level ``functools`` cache; no ``exec``/``eval``/
    ``compile``; no ``global``. Per-class derived code lives on its class (:func:`harness.session.derived`)."""
    trees = {path: ast.parse(path.read_text()) for path in sorted(HARNESS.rglob("*.py"))}
    everywhere = frozenset(name for tree in trees.values() for name in _containers(tree))
    found = [v for path, tree in trees.items() for v in _module_state_violations(path, tree, everywhere)]
    assert not found, "\n".join(found)


def test_the_scan_finds_each_kind_of_module_state():
    source = ("import functools\n_MEMO = {}\nLIMITS: dict = dict()\n"
              "def remember(k, v):\n    _MEMO[k] = v\n    LIMITS.update(a=1)\n    other.TABLE.clear()\n"
              "@functools.lru_cache(maxsize=8)\ndef f(x):\n    return x\n"
              "def g():\n    global X\n    exec('1')\n_R = functools.cache(int)\n")
    found = _module_state_violations(HARNESS / "example.py", ast.parse(source), frozenset({"TABLE"}))
    assert sorted(f.split(": ", 1)[1] for f in found) == sorted([
        "@functools.lru_cache(maxsize=8) on f (a module-level memo)", "mutates the module-level _MEMO",
        "mutates the module-level LIMITS", "mutates the module-level other.TABLE", "global X", "exec()",
        "functools.cache(...) (a module-level memo)"])


def test_memo_keeps_two_generations_of_half_its_limit():
    memo = Memo("m", 4)  # generations of 2
    memo.put("a", 1)
    memo.put("b", 2)  # the young generation is full: it becomes the old one
    assert memo.get("a") == 1  # found in the old generation: stored again in the young one
    memo.put("c", 3)  # young {a, c} becomes the old one: b, used before, is dropped
    assert (memo.get("b"), memo.get("a"), memo.get("c"), len(memo)) == (None, 1, 3, 2)
    memo.put("a", 10)  # a stored key is overwritten (the young value hides the old one)
    memo.put("d", 4)
    assert (memo.get("c"), memo.get("a"), memo.get("d")) == (None, 10, 4)
    one = Memo("one", 1)
    one.put("a", 1)
    assert one.get("a") == 1
    one.put("b", 2)
    assert (one.get("a"), one.get("b"), len(one)) == (None, 2, 1)
    with pytest.raises(ValueError):
        Memo("bad", 0)


def test_get_or_put_computes_only_what_neither_generation_holds_and_renews_what_the_old_one_does():
    memo, computed = Memo("m", 4), []  # generations of 2

    def compute(value):
        return lambda: computed.append(value) or value

    assert memo.get_or_put("a", compute(1)) == 1 and memo.get_or_put("a", compute(99)) == 1
    memo.put("b", 2)  # young {a, b} becomes the old one
    assert memo.get_or_put("a", compute(99)) == 1  # found in the old generation: not computed, stored again
    memo.put("c", 3)  # young {a, c} becomes the old one: b dropped, a kept
    assert memo.get_or_put("a", compute(99)) == 1 and memo.get_or_put("b", compute(20)) == 20
    assert computed == [1, 20]


class _Held:
    """An object an identity memo can hold (weakly referable: the test sees it let go)."""


@pytest.mark.parametrize("limit", [1, 2, 3, 4, 7, 16])
@pytest.mark.parametrize("kind", ["memo", "identity", "pairs"])
def test_memos_hold_at_most_their_limit_and_keep_what_was_used_lately(kind, limit):
    """The module rule, against a model of it: never more than ``limit`` entries, never a wrong value, and an
    entry read or written is still there after ``ceil(limit / 2) - 1`` stores. The model counts every put and
    every hit as a store (a hit in the old generation is one), so it asks no more than the rule."""
    rng = random.Random(limit)
    objects = [_Held() for _ in range(3 * limit + 2)]
    memo = Memo("m", limit) if kind == "memo" else IdentityMemo("m", limit)

    def get(i):
        if kind == "memo":
            return memo.get(i)
        return memo.get(objects[i]) if kind == "identity" else memo.get(objects[i], objects[-1 - i])

    def put(i, value):
        if kind == "memo":
            memo.put(i, value)
        elif kind == "identity":
            memo.put(value, objects[i])
        else:
            memo.put(value, objects[i], objects[-1 - i])

    kept = -(-limit // 2) - 1
    last, used, stores, hits = {}, {}, 0, 0
    for _ in range(4000):
        i = rng.randrange(len(objects))
        if rng.random() < 0.5:
            last[i] = rng.random()
            put(i, last[i])
            stores += 1
            used[i] = stores
        else:
            found = get(i)
            if i in used and stores - used[i] <= kept:
                assert found == last[i], (i, stores - used[i])
            if found is not None:
                assert found == last[i]
                hits += 1
                stores += 1
                used[i] = stores
        assert len(memo) <= limit
    assert hits > 100
    if kind != "memo":  # the objects of dropped entries are let go
        refs = [weakref.ref(o) for o in objects]
        for value in range(2 * limit):
            memo.put(value, _Held()) if kind == "identity" else memo.put(value, _Held(), objects[0])
        del objects[1:]
        gc.collect()
        assert not any(r() is not None for r in refs[1:])


def test_identity_memo_hits_only_the_same_objects():
    memo = IdentityMemo("m", 4)
    a, b = [1], [1]  # equal, not identical
    memo.put("price of a", a)
    memo.put("pair", a, b)
    assert (memo.get(a), memo.get(b), memo.get(a, b), memo.get(b, a)) == ("price of a", None, "pair", None)


def test_memos_are_bounded_and_consistent_under_threads():
    memo = Memo("m", 64)
    errors = []

    def work(offset: int) -> None:
        for i in range(5000):
            key = (offset + i) % 200
            value = memo.get(key)
            if value is not None and value != key * 3:
                errors.append((key, value))
            memo.put(key, key * 3)

    threads = [threading.Thread(target=work, args=(k * 37,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(memo) <= 64


def test_setdefault_gives_every_thread_the_same_value():
    memo = Memo("m", 4)
    made = []
    barrier = threading.Barrier(8)

    def make():
        made.append(object())
        return made[-1]

    got = []

    def run():
        barrier.wait()
        got.append(memo.setdefault("k", make))

    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 1 and all(g is made[0] for g in got)


def test_using_makes_a_session_current_and_restores_the_previous():
    outer = session.current()
    inner = Session()
    with session.using(inner):
        assert session.current() is inner
    assert session.current() is outer


def test_a_new_thread_has_its_own_default_session():
    seen = []
    thread = threading.Thread(target=lambda: seen.append(session.current()))
    thread.start()
    thread.join()
    assert seen[0] is not session.current()


def test_switched_off_is_a_value_of_a_fresh_session_and_threads_do_not_share_it():
    rule = compat.iteration_total
    assert compat.applies(rule)
    before = session.current()
    seen = {}

    def other_thread():
        seen["other"] = compat.applies(rule)

    with compat.switched_off("total-in-calculon-order") as fresh:
        assert fresh is session.current() and fresh is not before
        assert fresh.rules_off == frozenset({"total-in-calculon-order"})
        assert not compat.applies(rule)
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
    assert seen["other"] is True  # another thread's session keeps the rule
    assert compat.applies(rule) and session.current() is before
    with pytest.raises(KeyError, match="no-such-rule"):
        with compat.switched_off("no-such-rule"):
            pass


def test_the_compatibility_rules_are_read_only():
    with pytest.raises(TypeError):
        compat.RULES["x"] = None
    assert "total-in-calculon-order" in compat.RULES
