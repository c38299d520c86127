"""Bounded, thread-safe memos: what an execution may remember across executions.

Executions of one prepared model run concurrently and share only read-only
prepared state.  Where ``prepare`` cannot decide something (shapes known only
at run time, tables keyed by run-time quantization parameters), a kernel keeps
it in a :class:`Memo`: a small dict whose writes (and evictions) hold a lock.
The value is computed outside the lock (two threads may compute the same
entry; both results are equal, one is kept), so a slow computation never
blocks other executions, and an eviction never races another.

The bounds are configurable: ``NNHAL_MEMO_LIMIT`` in the environment caps
every memo (at least 1), and :func:`limit` does the same for a ``with`` block
(the thread-safety test runs with every memo bounded to 1 entry, so entries
are evicted while other threads read them).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable, Hashable, Optional

_override: Optional[int] = None


def _env_limit() -> Optional[int]:
    v = os.environ.get("NNHAL_MEMO_LIMIT", "").strip()
    if not v:
        return None
    try:
        return max(1, int(v))
    except ValueError:
        return None


_ENV_LIMIT = _env_limit()


@contextmanager
def limit(n: int) -> Iterator[None]:
    """Caps every memo at ``n`` entries (>= 1) while the block runs (a test hook)."""
    global _override
    old = _override
    _override = max(1, int(n))
    try:
        yield
    finally:
        _override = old


def current_limit(default: int) -> int:
    """The bound a memo declared with ``default`` has now."""
    if _override is not None:
        return min(default, _override)
    if _ENV_LIMIT is not None:
        return min(default, _ENV_LIMIT)
    return default


class Memo:
    """A thread-safe dict of at most ``size`` entries (see :func:`current_limit`),
    the oldest evicted first; writes hold a lock."""

    __slots__ = ("size", "_d", "_lock")

    def __init__(self, size: int) -> None:
        self.size = int(size)
        self._d: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any:
        """The value remembered for ``key``, or None.  No lock: one dict lookup
        is atomic (the GIL), and a value once stored is never changed; entries
        are evicted oldest first (a hit does not renew one: the memos are small
        and their keys few, so recency buys nothing worth a lock per read)."""
        return self._d.get(key)

    def put(self, key: Hashable, value: Any) -> Any:
        """Remembers ``value`` (evicting the least recently used beyond the
        bound) and returns the value now held for ``key``."""
        bound = current_limit(self.size)
        with self._lock:
            old = self._d.get(key)
            if old is not None:
                return old  # NOTE: another thread computed it first; keep one object
            self._d[key] = value
            while len(self._d) > bound:
                self._d.popitem(last=False)  # NOTE: a reader holding an evicted value keeps using it
        return value

    def get_or_compute(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """The memoized value for ``key``, computing it (outside the lock) if absent.
        ``compute`` must not return None; an exception it raises is not remembered."""
        v = self.get(key)
        if v is None:
            v = self.put(key, compute())
        return v

    def __len__(self) -> int:
        with self._lock:
            return len(self._d)

    def clear(self) -> None:
        with self._lock:
            self._d.clear()
