"""The estimator session: the one owner of every memo of the estimate path, and of the compatibility setting.

Lowering, pricing and projection are pure functions of frozen values; they memoize results so that repeated
inputs (recompute clones, layouts that repeat a shape, the two cost views of one plan, the search's families)
are computed once. Every such memo is a named, bounded, thread-safe :class:`Memo` (or :class:`IdentityMemo`)
of one :class:`Session`. Rules:

- **bounded**: a memo holds at most its ``limit`` entries, in two generations: an entry is stored in the young
  one; when that holds half the limit (rounded up), it becomes the old one and the previous old one is dropped;
  a read that finds an entry only in the old generation stores it again in the young one. So an entry read or
  written survives at least the next ``ceil(limit / 2) - 1`` stores (an approximation of least-recently-used
  eviction whose hit is one dict lookup, with no reordering), and a long-lived session (a search worker, a
  batch of thousands) keeps a fixed footprint;
- **thread-safe** (CPython, whose GIL makes each ``dict`` operation and each attribute store atomic for the
  keys used here: tuples of atoms, ids, strings, classes, whose hash and equality run no Python code): a read
  is one lookup (two when it misses the young generation, and a store when it finds the entry in the old
  one), a write one store and at most one generation change (the young map becomes the old one, a new one
  the young one); a read that races a generation change finds the value or misses; two writes racing one
  generation change may both make it (a value stored between them is dropped: a later miss), and a
  generation may so hold one entry more per racing thread; an :class:`IdentityMemo` replaces a generation's
  pair of maps as a whole, so a read checks the held object and reads the value of one pair. A value may be
  computed twice by two threads, never wrongly (the functions memoized are pure). Creating a shared mutable
  value (:meth:`Memo.setdefault`) takes the memo's lock;
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

import contextlib
import contextvars
import threading
from typing import Any, Callable, Generic, Hashable, Iterator, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
_MISSING = object()


class Memo(Generic[K, V]):
    """A bounded, thread-safe map of keys to memoized values, kept in two generations (see the module rules)."""

    __slots__ = ("name", "limit", "_generation", "_young", "_old", "_lock")

    def __init__(self, name: str, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"memo {name!r}: limit {limit} must be at least 1")
        self.name, self.limit = name, limit
        #: Entries per generation: a full old one and a young one below it hold at most ``limit``.
        self._generation = (limit + 1) // 2
        self._young: dict[K, V] = {}
        self._old: dict[K, V] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._young.keys() | self._old.keys())

    def values(self) -> list[V]:
        """The values remembered (for inspection: sizes, tests)."""
        return list((self._old | self._young).values())

    def get(self, key: K, default: Any = None) -> V | Any:
        """The value remembered for ``key`` (moved to the young generation if found in the old), or ``default``."""
        value = self._young.get(key, _MISSING)
        if value is not _MISSING:
            return value
        value = self._old.get(key, _MISSING)
        return default if value is _MISSING else self.put(key, value)

    def put(self, key: K, value: V) -> V:
        """Remember ``value`` for ``key`` in the young generation (which becomes the old one when full, the old
        one dropped); ``value``."""
        young = self._young
        young[key] = value
        if len(young) >= self._generation:
            self._old, self._young = young, {}
        return value

    def get_or_put(self, key: K, compute: Callable[[], V]) -> V:
        """The value of ``key``, computed by ``compute()`` and remembered if absent."""
        value = self._young.get(key, _MISSING)
        if value is not _MISSING:
            return value
        value = self._old.get(key, _MISSING)  # found there: stored again in the young generation, as get does
        return self.put(key, compute() if value is _MISSING else value)

    def setdefault(self, key: K, compute: Callable[[], V]) -> V:
        """Like :meth:`get_or_put`, but atomic: every thread gets the same value (``compute`` runs under the
        lock, once per key while remembered; for shared mutable values such as a search's running top K)."""
        with self._lock:
            value = self.get(key, _MISSING)
            return self.put(key, compute()) if value is _MISSING else value

    def pop(self, key: K) -> None:
        """Forget ``key`` (if remembered)."""
        with self._lock:
            self._young.pop(key, None)
            self._old.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._young, self._old = {}, {}


class IdentityMemo(Generic[V]):
    """A bounded, thread-safe memo keyed by the identity of one object, or of a pair (frozen IRs, pricers:
    costly to hash by value), in two generations like :class:`Memo`. The objects are held while remembered,
    so their ids cannot be reused meanwhile: a key found is a hit (:meth:`get`). A generation is one pair of maps
    of atoms, values and held objects (no tuple per entry: fewer objects for the garbage collector to track and
    walk), replaced as a whole."""

    __slots__ = ("name", "limit", "_generation", "_young", "_old")

    def __init__(self, name: str, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"memo {name!r}: limit {limit} must be at least 1")
        self.name, self.limit = name, limit
        self._generation = (limit + 1) // 2
        #: (key -> the object, or the pair, whose identity the key is; key -> value), young and old.
        self._young: tuple[dict[Any, Any], dict[Any, V]] = ({}, {})
        self._old: tuple[dict[Any, Any], dict[Any, V]] = ({}, {})

    def __len__(self) -> int:
        return len(self._young[1].keys() | self._old[1].keys())

    def get(self, first: Any, second: Any = None) -> V | None:
        """The value remembered for ``first`` (and ``second``), or None.

        A key found is a hit without comparing the held object: ``first`` (and ``second``) is alive while the
        caller holds it, and so is the object the memo holds under that key (as long as the generation holds
        the entry), and two live objects never share an id."""
        key = id(first) if second is None else (id(first), id(second))
        value = self._young[1].get(key)
        if value is not None:
            return value
        value = self._old[1].get(key)
        return None if value is None else self.put(value, first, second)

    def put(self, value: V, first: Any, second: Any = None) -> V:
        """Remember ``value`` for ``first`` (and ``second``) in the young generation (see :meth:`Memo.put`);
        ``value``."""
        young = self._young
        held, values = young
        if second is None:
            key = id(first)
            held[key] = first
        else:
            key = (id(first), id(second))
            held[key] = (first, second)
        values[key] = value
        if len(values) >= self._generation:
            self._old, self._young = young, ({}, {})
        return value

    def clear(self) -> None:
        self._young, self._old = ({}, {}), ({}, {})


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
