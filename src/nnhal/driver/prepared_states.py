"""What a device keeps of the models it validated and compiled lately, so
that the same model given again (``getSupportedOperations`` then
``prepareModel``, as every NNAPI client does; the same model prepared again
with another priority or deadline, as VTS and apps relaunching do) is not
validated, nor compiled, again.

Validation is a function of the model, the bytes of its constant pools, the
interface version and the operations' definitions (the registry's; a
definition replaced since, as tests do, is a miss) alone, so a model equal in
all of them -- the driver's own copies compared: dataclass equality, the
pools' bytes compared whole -- has the answer validated before.  A
backend's compiled model is shared only where the backend says one serves
any number of prepared models at once (``Backend.shares_compiled``: the
reference executor, whose executions share only read-only prepared state).

Bounded (entries and bytes of constants kept, least recently used first
out) and thread-safe; a lookup costs a fingerprint (sizes, indexes, the hash
of the inline constants) and, for a candidate, the equality test.
"""

from __future__ import annotations

import collections
import threading
from typing import Any, Optional, Sequence

import numpy as np

from nnhal.ops import registry

MAX_ENTRIES = 32
MAX_BYTES = 128 << 20  # constants (inline and pools) the entries keep alive at most
_CHUNK = 1 << 17  # 8-byte words compared at a time (1 MiB): bounds the comparison's temporary


def same_bytes(a: Any, b: Any) -> bool:
    """Whether two buffers hold the same bytes, compared as 8-byte words (memoryview's own == compares
    item by item: ~12 ms for a MobileNet's 16 MB of weights, this ~1 ms)."""
    if a is b:
        return True  # NOTE: one private copy shared (PrivateCopy.matching): the same bytes, nothing to read
    x, y = np.frombuffer(a, np.uint8), np.frombuffer(b, np.uint8)
    if x.size != y.size:
        return False
    n = x.size // 8 * 8
    xw, yw = x[:n].view(np.uint64), y[:n].view(np.uint64)
    for s in range(0, xw.size, _CHUNK):
        if not np.array_equal(xw[s:s + _CHUNK], yw[s:s + _CHUNK]):
            return False
    return bool(np.array_equal(x[n:], y[n:]))


def _fingerprint(model: Any, views: list, version: Any) -> Optional[tuple]:
    # NOTE: the operand types, the outputs' dimensions and the relaxed flag tell apart the variants of one model
    # a client prepares one after another (quant8 and its signed coupling, fixed and dynamic output shapes,
    # float32 and relaxed): each lookup then compares one candidate, not every variant kept
    try:
        main = model.main
        operands = main.operands
        key = (int(version), len(operands), len(main.operations), len(model.referenced),
               tuple(main.inputIndexes), tuple(main.outputIndexes), len(model.operandValues),
               hash(bytes(model.operandValues)), tuple(v.nbytes for v in views),
               tuple([o.type for o in operands]), tuple([tuple(operands[i].dimensions) for i in main.outputIndexes]),
               model.relaxComputationFloat32toFloat16)
        hash(key)
        return key
    except Exception:  # noqa: BLE001 - a value this cannot read is no known model
        return None


class Entry:
    """A model validated lately: ``model`` (the driver's own copy), its pools' ``views``, the operation
    definitions ``defs`` and, once one is kept (:meth:`keep_compiled`), its ``compiled`` model."""

    __slots__ = ("model", "views", "keys", "version", "defs", "compiled", "nbytes")

    def __init__(self, model: Any, views: list, version: Any, defs: list, keys: Sequence = ()):
        self.model, self.views, self.version, self.defs = model, list(views), version, tuple(defs)
        self.keys = tuple(keys) or (None,) * len(self.views)
        self.compiled: Any = None
        self.nbytes = len(model.operandValues) + sum(v.nbytes for v in views)

    def same(self, model: Any, views: list, version: Any) -> bool:
        try:
            return bool(self.version == version and len(self.views) == len(views)
                        and all(same_bytes(a, b) for a, b in zip(self.views, views))
                        and self.model == model
                        # NOTE: the operations' definitions are still the registered ones
                        and all(d is None or registry.find(op.type) is d
                                for op, d in zip(model.main.operations, self.defs)))
        except Exception:  # noqa: BLE001 - values that cannot be compared are not the same model
            return False

    def keep_compiled(self, compiled: Any) -> None:
        """Keeps the backend's compiled model for the next preparation of an equal model (the first kept
        stays: two preparations compiling at once both serve)."""
        if self.compiled is None:
            self.compiled = compiled


class PreparedStates:
    """Recently validated models (and compiled ones, where shareable) of one device (thread-safe)."""

    def __init__(self, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES):
        self._max, self._max_bytes = max_entries, max_bytes
        self._lru: collections.OrderedDict[int, tuple[tuple, Entry]] = collections.OrderedDict()  # by age
        self._by_key: dict[tuple, list[int]] = {}  # fingerprint -> entry numbers
        self._next = 0
        self._bytes = 0
        self._lock = threading.Lock()

    def _find(self, model: Any, views: list, version: Any) -> Optional[Entry]:
        key = _fingerprint(model, views, version)
        if key is None:
            return None
        with self._lock:
            found = [(n, self._lru[n][1]) for n in self._by_key.get(key, ())]
        for n, e in reversed(found):  # NOTE: newest first; compared outside the lock (a large pool takes a while)
            if e.same(model, views, version):
                with self._lock:
                    if n in self._lru:
                        self._lru.move_to_end(n)
                return e
        return None

    def defs(self, model: Any, views: list, version: Any) -> Optional[list]:
        """The operation definitions validated for an equal model, pools and version, or None."""
        e = self._find(model, views, version)
        return None if e is None else list(e.defs)

    def validated(self, model: Any, views: list, version: Any) -> Optional[Entry]:
        """The entry of an equal model validated with equal pools at ``version`` (its ``model``: the driver's
        own copy kept; its ``defs``; its ``compiled`` model, if one is kept), or None.  ``model`` may be the
        client's own (it is only compared): on a hit the kept copy serves, so the same model sent again is
        neither validated nor copied again, and a preparation takes the compiled model from the entry
        without looking it up again."""
        return self._find(model, views, version)

    def add(self, model: Any, views: list, version: Any, defs: list, keys: Sequence = ()) -> Optional[Entry]:
        """Remembers a model just validated (the driver's own copy and its pools' private bytes; ``keys``:
        per pool, the identity of a mapping of final bytes, ``memory.FrozenPool.key``, or None): its entry,
        or None when it is not kept."""
        key = _fingerprint(model, views, version)
        if key is None:
            return None
        e = Entry(model, views, version, defs, keys)
        if e.nbytes > self._max_bytes // 4:
            return None  # NOTE: a model this large is prepared seldom; kept, it would push out many others
        with self._lock:
            n, self._next = self._next, self._next + 1
            self._lru[n] = (key, e)
            self._by_key.setdefault(key, []).append(n)
            self._bytes += e.nbytes
            while len(self._lru) > self._max or self._bytes > self._max_bytes:
                old, (k, dropped) = self._lru.popitem(last=False)
                self._bytes -= dropped.nbytes
                left = [m for m in self._by_key[k] if m != old]
                if left:
                    self._by_key[k] = left
                else:
                    del self._by_key[k]
        return e

    def kept_pools(self, nbytes: int, limit: int = 2) -> list:
        """The pools' private bytes (read-only views) of the latest entries holding a pool of ``nbytes``
        bytes, newest first, at most ``limit``: what a pool read again may turn out to equal."""
        out: list = []
        with self._lock:
            for _, e in reversed(self._lru.values()):
                for v in e.views:
                    if v.nbytes == nbytes and all(v is not o for o in out):
                        out.append(v)
                        if len(out) >= limit:
                            return out
        return out

    def kept_frozen(self, key: tuple) -> Optional[memoryview]:
        """The view kept of a pool mapped from final bytes with this identity (``memory.FrozenPool.key``),
        newest first, or None: the same model's pool mapped by getSupportedOperations then by prepareModel
        is one mapping, so that the equality test finds the views identical without reading them."""
        with self._lock:
            for _, e in reversed(self._lru.values()):
                for v, k in zip(e.views, e.keys):
                    if k is not None and k == key:
                        return v
        return None

    def clear(self) -> None:
        with self._lock:
            self._lru.clear()
            self._by_key.clear()
            self._bytes = 0
