"""The estimator session: the one owner of every memo of the estimate path, and of the compatibility setting.

Lowering, pricing and projection are pure functions of frozen values; they memoize results so that repeated
inputs (recompute clones, layouts that repeat a shape, the two cost views of one plan, the search's families)
are computed once. Every such memo is a named, bounded, thread-safe :class:`Memo` (or :class:`IdentityMemo`)
of one :class:`Session`. Rules:

- **bounded**: a memo holds at most its ``limit`` entries; past it, the least recently used entry is dropped
  (LRU), so a long-lived session (a search worker, a batch of thousands) keeps a fixed footprint;
- **thread-safe** (CPython, whose GIL makes each ``OrderedDict`` operation atomic for the keys used here:
  tuples of atoms, ids, strings, classes, whose hash and equality run no Python code): a read is one lookup
  and one ``move_to_end``, a write one store and at most one eviction; a read that races an eviction is a
  miss, and two writes racing past the limit evict one entry each (the memo stays within its limit); a value
  may be computed twice by two threads, never wrongly (the functions memoized are pure). Creating a shared
  mutable value (:meth:`Memo.setdefault`) takes the memo's lock;
- **results never depend on a memo**: a fresh session gives bit-identical figures (the differential tests run
  in fresh and warm sessions alike);
- **the compatibility setting is a value of the session**: :attr:`Session.rules_off` (a frozenset of the
  names of :data:`harness.calculon_compat.RULES` switched off). A memo never mixes settings, because a
  session's memos are computed under its own setting only;
  :func:`harness.calculon_compat.switched_off` runs a block in a fresh session with rules off;
- **the current session is context-local** (:mod:`contextvars`): :func:`using` makes a session current for a
  ``with`` block (explicit ownership: a search worker, a test, an experiment); without one, :func:`current`
  creates a default session for the current context on first use. Its lifetime is that context's: the main
  thread's default session lives as long as the process, a new thread starts with none (and creates its own),
  a Dask worker process shares one among its threads (:mod:`harness.search.run`);
- code derived from a class (compiled canonical writers, construction specs) is not a memo of results: it is
  stored on the class it describes, for the class's lifetime (as :mod:`dataclasses` stores the ``__init__``
  it generates), see :mod:`harness.ir.canonical` and :mod:`harness.ir.base`.

``tests/test_session.py`` checks the rules, and that no module of ``harness`` keeps module-level mutable
state (a mutable container, a ``functools`` cache) or calls ``exec``/``eval``.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import threading
from typing import Any, Callable, Generic, Hashable, Iterator, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
_MISSING = object()


def _evict_oldest(entries: collections.OrderedDict) -> None:
    try:
        entries.popitem(last=False)
    except KeyError:  # emptied by another thread meanwhile
        pass


class Memo(Generic[K, V]):
    """A bounded (LRU), thread-safe map of keys to memoized values (see the module rules)."""

    __slots__ = ("name", "limit", "_entries", "_lock")

    def __init__(self, name: str, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"memo {name!r}: limit {limit} must be at least 1")
        self.name, self.limit = name, limit
        self._entries: collections.OrderedDict[K, V] = collections.OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K, default: Any = None) -> V | Any:
        """The value remembered for ``key`` (now the most recently used), or ``default``."""
        entries = self._entries
        value = entries.get(key, _MISSING)
        if value is _MISSING:
            return default
        try:
            entries.move_to_end(key)
        except KeyError:  # evicted by another thread between the two operations: still a correct value
            pass
        return value

    def put(self, key: K, value: V) -> V:
        """Remember ``value`` for ``key`` (dropping the least recently used entry past the limit); ``value``."""
        entries = self._entries
        entries.pop(key, None)  # a stored key moves to the end
        entries[key] = value
        if len(entries) > self.limit:
            _evict_oldest(entries)
        return value

    def get_or_put(self, key: K, compute: Callable[[], V]) -> V:
        """The value of ``key``, computed by ``compute()`` and remembered if absent."""
        value = self.get(key, _MISSING)
        return self.put(key, compute()) if value is _MISSING else value

    def setdefault(self, key: K, compute: Callable[[], V]) -> V:
        """Like :meth:`get_or_put`, but atomic: every thread gets the same value (``compute`` runs under the
        lock, once per key; for shared mutable values such as a search's running top K)."""
        with self._lock:
            value = self._entries.get(key, _MISSING)
            if value is _MISSING:
                value = self._entries[key] = compute()
                if len(self._entries) > self.limit:
                    self._entries.popitem(last=False)
            return value

    def pop(self, key: K) -> None:
        """Forget ``key`` (if remembered)."""
        with self._lock:
            self._entries.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


class IdentityMemo(Generic[V]):
    """A bounded (LRU), thread-safe memo keyed by the identity of one object, or of a pair (frozen IRs,
    pricers: costly to hash by value). The objects are held while remembered, so their ids cannot be reused,
    and a hit is checked by identity (the rules of :class:`Memo`). Values and held objects are kept in two
    maps of atoms (no tuple per entry: fewer objects for the garbage collector to track and walk)."""

    __slots__ = ("name", "limit", "_values", "_held")

    def __init__(self, name: str, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"memo {name!r}: limit {limit} must be at least 1")
        self.name, self.limit = name, limit
        self._values: collections.OrderedDict[Any, V] = collections.OrderedDict()  # key -> value, LRU order
        self._held: dict[Any, Any] = {}  # key -> the object (or the pair) whose identity the key is

    def __len__(self) -> int:
        return len(self._values)

    def get(self, first: Any, second: Any = None) -> V | None:
        """The value remembered for ``first`` (and ``second``), or None."""
        if second is None:
            key = id(first)
            if self._held.get(key) is not first:
                return None
        else:
            key = (id(first), id(second))
            held = self._held.get(key)
            if held is None or held[0] is not first or held[1] is not second:
                return None
        values = self._values
        value = values.get(key)
        try:
            values.move_to_end(key)
        except KeyError:  # evicted by another thread meanwhile
            return None
        return value

    def put(self, value: V, first: Any, second: Any = None) -> V:
        """Remember ``value`` for ``first`` (and ``second``); ``value``."""
        key = id(first) if second is None else (id(first), id(second))
        values = self._values
        values.pop(key, None)  # a stored key moves to the end
        self._held[key] = first if second is None else (first, second)
        values[key] = value
        if len(values) > self.limit:
            try:
                oldest, _ = values.popitem(last=False)
            except KeyError:  # emptied by another thread meanwhile
                return value
            self._held.pop(oldest, None)
        return value

    def clear(self) -> None:
        self._values.clear()
        self._held.clear()


class Session:
    """Every memo of the estimate path, bounded, and the compatibility rules switched off (a value).

    The limits are the bounds of the memos (entries); the defaults hold a batch of a few thousand distinct
    inputs. :meth:`clear` forgets every memo of lowering and pricing (to measure a cold estimate); the
    profile files read stay remembered (each use checks them against the file, :mod:`harness.evidence.profile`).
    """

    def __init__(self, rules_off: frozenset[str] = frozenset(), *, lowerings: int = 4096, facts: int = 8192,
                 interned: int = 1 << 16, texts: int = 1 << 16, pricers: int = 64, prices: int = 1 << 16,
                 profiles: int = 256) -> None:
        self.rules_off = frozenset(rules_off)
        self.prices_limit = prices
        #: ModelIR digest -> its :class:`harness.pipeline.Lowering`.
        self.lowerings: Memo[str, Any] = Memo("lowerings", lowerings)
        #: Lowering -> its ConcretePlanIR.
        self.concrete: IdentityMemo[Any] = IdentityMemo("concrete", lowerings)
        #: (ConcretePlanIR, pricer) -> its Calculon projection.
        self.projections: IdentityMemo[Any] = IdentityMemo("projections", lowerings)
        #: (profile id, view, datatype) -> (profile, its shared Pricer).
        self.pricers: Memo[tuple, Any] = Memo("pricers", pricers)
        #: Per-shape facts of the rules and messages of the plan (keys: class and field values).
        self.facts: Memo[tuple, Any] = Memo("facts", facts)
        self.messages: Memo[tuple, Any] = Memo("messages", facts)
        #: The output layer's tasks and plan tasks, the accumulation works (keys: their arguments).
        self.output_tasks: Memo[tuple, Any] = Memo("output_tasks", facts)
        #: (task id, element size, shards, training[, tier, stride]) -> (the task, its PlanTask).
        self.plan_tasks: Memo[tuple, Any] = Memo("plan_tasks", interned)
        #: Instance -> its canonical text (classes with CANONICAL_MEMO or INTERNED).
        self.texts: IdentityMemo[str] = IdentityMemo("texts", texts)
        #: Profile path -> what was read of it.
        self.profiles: Memo[Any, Any] = Memo("profiles", profiles)
        #: Search token -> the running top K of that search (shared by the threads of a worker).
        self.running_tops: Memo[str, Any] = Memo("running_tops", 16)
        self._interned_limit = interned
        self._interned: dict[type, Memo] = {}
        self._lock = threading.Lock()

    def interned(self, cls: type) -> Memo:
        """The table of shared instances of ``cls`` (hash-consing, :meth:`harness.ir.base.Frozen.trusted`)."""
        table = self._interned.get(cls)
        if table is None:
            with self._lock:
                table = self._interned.setdefault(cls, Memo(f"interned {cls.__name__}", self._interned_limit))
        return table

    def memos(self) -> tuple[Memo | IdentityMemo, ...]:
        """Every memo of lowering and pricing (not the profile files)."""
        return (self.lowerings, self.concrete, self.projections, self.pricers, self.facts, self.messages,
                self.output_tasks, self.plan_tasks, self.texts, self.running_tops, *self._interned.values())

    def clear(self) -> None:
        """Forget every memo of lowering and pricing (results never depend on them)."""
        for memo in self.memos():
            memo.clear()


_CURRENT: contextvars.ContextVar[Session] = contextvars.ContextVar("harness_session")


def current() -> Session:
    """The current context's session (created on first use in a context that has none: see the module rules)."""
    found = _CURRENT.get(None)
    if found is None:
        found = Session()
        _CURRENT.set(found)
    return found


def interned(cls: type) -> Memo:
    """The current session's table of shared instances of ``cls`` (``current().interned(cls)`` in one call:
    :meth:`harness.ir.base.Frozen.trusted` asks for it once per interned construction, ~100 per estimate)."""
    found = _CURRENT.get(None)
    if found is not None:
        table = found._interned.get(cls)
        if table is not None:
            return table
    return current().interned(cls)


@contextlib.contextmanager
def using(session: Session) -> Iterator[Session]:
    """Make ``session`` the current one inside the block (the previous one after it)."""
    token = _CURRENT.set(session)
    try:
        yield session
    finally:
        _CURRENT.reset(token)


_NOT_DERIVED = object()


def derived(cls: type, attribute: str, compute: Callable[[type], V]) -> V:
    """Code derived from ``cls`` (a writer, a construction spec), computed once and stored on the class itself
    under ``attribute`` (its own ``__dict__``: a subclass derives its own). Not a memo of results: see the
    module rules. Idempotent, so two threads deriving at once store equal values."""
    value = cls.__dict__.get(attribute, _NOT_DERIVED)
    if value is _NOT_DERIVED:
        value = compute(cls)
        type.__setattr__(cls, attribute, value)
    return value
