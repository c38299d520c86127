"""Request memories cached by slot on a service call channel.

A synchronous execution through the service would otherwise send every
request pool's descriptors with every call, and the service would check and
open each pool (fstat, seals, access mode) every time: with a one-operation
model that is a third of the cost of crossing the process boundary.  As the
1.2 burst does for its memories, a client thread's call channel gives each
shared memory it sends a slot number the first time, and from then on sends
only the slot:

* the client (:class:`ClientSlots`, one per call channel) knows a memory by
  what it refers to (:func:`memory_key`: the kind, size, ints and the
  device/inode of each descriptor), so a recycled descriptor number never
  aliases an old slot and a new ``hal.Memory`` for the same shared memory
  reuses it.  It keeps at most :data:`CLIENT_SLOTS` memories and
  :data:`CLIENT_BYTES` bytes; the least recently used one is forgotten with
  the next call (``forget``), one the client frees (``hal_memory.free``) or
  whose ``hal.Memory`` is garbage collected at once (a ``Release`` with
  ``slots`` on the channel, sent by the connection's forgetter thread), so
  the service holds no memory the client has let go of;
* the service (:class:`ServiceSlots`, one per call channel) keeps its own
  duplicate of each slot's descriptors and the pool opened on it (mapped
  once when sealed against shrinking, else read and written with
  pread/pwrite: no client action can make it fault), substitutes them for the
  slots in the request, and drops them when told (:meth:`ServiceSlots.forget`), when over
  :data:`SERVICE_SLOTS` (least recently used first), or when the channel
  closes (the client thread ended or the client died).

Only ``executeSynchronously_1_3`` uses slots: its channel runs one call at a
time, so a slot is never dropped while an execution uses it.  A slot the
service does not know (a hostile or confused client) is INVALID_ARGUMENT
with :data:`UNKNOWN_SLOT` in the message; the client then forgets its slots
and sends the memories again.
"""

from __future__ import annotations

import collections
import logging
import threading
import weakref
from typing import Any, Callable, Optional

from nnhal import hal
from nnhal.hal import aidl
from nnhal.platform import memory as hal_memory
from nnhal.service.transport import close_fds

log = logging.getLogger("nnhal.service")

CLIENT_SLOTS = 32
CLIENT_BYTES = 256 * 1024 * 1024
SERVICE_SLOTS = 2 * CLIENT_SLOTS  # NOTE: room for slots whose forget is still on its way
UNKNOWN_SLOT = "unknown memory slot"
_PLACEHOLDER = hal.MemoryPool()  # a pool sent as its slot only: the service puts the memory back


def memory_key(memory: hal.Memory) -> Optional[tuple]:
    """What a memory refers to, or None if it cannot be cached (no
    descriptors, or one that is closed or not an int)."""
    ids = hal_memory.file_ids(memory)
    if ids is None:
        return None
    return memory.name, memory.size, tuple(memory.handle.ints), ids


class MemoryKeys:
    """:func:`memory_key` with a memo per ``hal.Memory`` object: the same
    object as before, with the same fds, name, size and ints, is taken to
    refer to the same file without an fstat (2-3 us each on a VM).
    NOTE: a client that closes a descriptor a live hal.Memory still names
    (and reuses the number) breaks that memory in process too."""

    def __init__(self, max_entries: int = 256):
        self._max = max_entries
        self._known: dict[int, tuple] = {}  # id(hal.Memory) -> (weak ref, fds, name, size, ints, key)

    def key(self, memory: hal.Memory) -> Optional[tuple]:
        h = memory.handle
        if type(h) is not hal.Handle:
            return None
        known = self._known.get(id(memory))
        if known is not None and known[0]() is memory and h.fds == known[1] and memory.size == known[3] \
                and memory.name == known[2] and h.ints == known[4]:
            return known[5]
        key = memory_key(memory)
        if key is not None:
            self._remember(memory, key)
        return key

    def clear(self) -> None:
        self._known.clear()

    def _remember(self, memory: hal.Memory, key: tuple) -> None:
        known = self._known
        if len(known) >= self._max:
            known.clear()  # NOTE: bounded; what is dropped is only looked up again
        k = id(memory)

        def drop(ref: Any, k: int = k) -> None:
            entry = known.get(k)
            if entry is not None and entry[0] is ref:
                known.pop(k, None)

        h = memory.handle
        known[k] = (weakref.ref(memory, drop), list(h.fds), memory.name, memory.size, list(h.ints), key)


class _ClientEntry:
    __slots__ = ("slot", "size", "finalizer")

    def __init__(self, slot: int, size: int, finalizer: Any):
        self.slot, self.size, self.finalizer = slot, size, finalizer


class ClientSlots:
    """One call channel's memories, client side.  Used by the channel's
    thread; a memory freed or garbage collected is forgotten from any thread
    (``wake()`` then asks for the forget to be sent at once, by a thread that
    can: a finalizer may run inside the channel's own send)."""

    def __init__(self, max_slots: int = CLIENT_SLOTS, max_bytes: int = CLIENT_BYTES,
                 wake: Optional[Callable[["ClientSlots"], None]] = None):
        self._max, self._max_bytes = max_slots, max_bytes
        self._lru: collections.OrderedDict[tuple, _ClientEntry] = collections.OrderedDict()
        self._bytes = 0
        self._next = 1
        # NOTE: re-entrant: a finalizer (a memory collected) may run on this thread inside prepare
        self._lock = threading.RLock()
        self._forget: list[int] = []
        self._wake = wake
        self._keys = MemoryKeys(4 * max_slots)
        _ALL.add(self)

    def prepare(self, request: Any) -> tuple[Any, Optional[list[int]], list[int]]:
        """(the request to send, its pools' slots or None, slots to forget).
        The caller's request is left alone; pools that cannot be cached (a
        token, an unusable memory, a 1.0 request) travel as they are."""
        pools = getattr(request, "pools", None)
        if type(request) is not hal.Request or type(pools) is not list or not pools:
            return request, None, self.take_forgets()
        out: list = []
        slots: list[int] = []
        keys = self._keys
        with self._lock:
            for p in pools:
                m = p.hidlMemory if type(p) is hal.MemoryPool and p.token is None else None
                key = keys.key(m) if type(m) is hal.Memory else None
                if key is None:
                    out.append(p)
                    slots.append(0)
                    continue
                entry = self._lru.get(key)
                if entry is not None:  # NOTE: also the same memory twice in one request: sent once
                    self._lru.move_to_end(key)
                    out.append(_PLACEHOLDER)
                else:
                    entry = self._add(key, m)
                    out.append(p)
                slots.append(entry.slot)
            if len(self._lru) > self._max or self._bytes > self._max_bytes:
                self._evict(set(slots))
            forget, self._forget = self._forget, []
        return hal.Request(inputs=request.inputs, outputs=request.outputs, pools=out), slots, forget

    def reset(self) -> None:
        """Forget every slot here (the service did not know one of them)."""
        with self._lock:
            for entry in self._lru.values():
                entry.finalizer.detach()
            self._lru.clear()
            self._keys.clear()
            self._bytes = 0
            self._forget = []

    def __len__(self) -> int:
        return len(self._lru)

    def _add(self, key: tuple, memory: hal.Memory) -> _ClientEntry:
        slot = self._next
        self._next += 1
        size = memory.size if type(memory.size) is int and memory.size > 0 else 0
        # NOTE: the client dropping its hal.Memory frees the service's copy at once; the
        # finalizer holds this table weakly (a table must go with its channel's thread)
        fin = weakref.finalize(memory, _collected, weakref.ref(self), key, slot)
        fin.atexit = False
        entry = self._lru[key] = _ClientEntry(slot, size, fin)
        self._bytes += size
        return entry

    def _evict(self, in_use: set[int]) -> None:
        while len(self._lru) > self._max or self._bytes > self._max_bytes:
            key, entry = next(iter(self._lru.items()))
            if entry.slot in in_use:
                break
            self._drop(key)

    def _drop(self, key: tuple) -> None:
        entry = self._lru.pop(key)
        entry.finalizer.detach()
        self._bytes -= entry.size
        self._forget.append(entry.slot)

    def _gone(self, key: tuple, slot: int) -> None:
        with self._lock:
            entry = self._lru.get(key)
            if entry is None or entry.slot != slot:
                return
            self._drop(key)
        if self._wake is not None:
            self._wake(self)

    def freed(self, key: tuple) -> None:
        """The memory known as ``key`` is being freed: forget it now."""
        with self._lock:
            entry = self._lru.get(key)
            if entry is None:
                return
            self._gone(key, entry.slot)

    def take_forgets(self) -> list[int]:
        """The slots forgotten since the last call (for the caller to send)."""
        if not self._forget:
            return []
        with self._lock:
            forget, self._forget = self._forget, []
        return forget


_ALL: "weakref.WeakSet[ClientSlots]" = weakref.WeakSet()


def _collected(table_ref: "weakref.ref[ClientSlots]", key: tuple, slot: int) -> None:
    table = table_ref()
    if table is not None:
        table._gone(key, slot)


def _freed(memory: hal.Memory) -> None:
    """hal_memory.free's listener: every table that knows the memory forgets it."""
    if not _ALL or type(memory) is not hal.Memory or type(memory.handle) is not hal.Handle:
        return
    key = memory_key(memory)
    if key is not None:
        for table in list(_ALL):
            table.freed(key)


hal_memory.on_free(_freed)


class _ServiceEntry:
    __slots__ = ("memory", "pool_arg", "pools")

    def __init__(self, memory: hal.Memory):
        self.memory = memory
        # NOTE: one MemoryPool per slot, put in every request that names it (the driver never
        # changes a request's pools)
        self.pool_arg = hal.MemoryPool(hidlMemory=memory)
        self.pools: dict[bool, Any] = {}

    def close(self) -> None:
        for pool in self.pools.values():
            pool.close()
        self.pools = {}
        hal_memory.free(self.memory)


class ServiceSlots:
    """One call channel's memories, service side (used by the channel's
    thread only)."""

    def __init__(self, max_slots: int = SERVICE_SLOTS):
        self._max = max_slots
        self._entries: collections.OrderedDict[int, _ServiceEntry] = collections.OrderedDict()
        self._by_memory: dict[int, _ServiceEntry] = {}
        self._gen = 0  # NOTE: bumped whenever a slot is added or dropped: a kept call is stale then
        self._memo: Optional[tuple] = None

    def resolve(self, request: Any, slots: Optional[list[int]], forget: list[int]) -> tuple[str, bool]:
        """Drop the ``forget`` slots, cache the new memories of ``request``
        and put the cached ones back in place of their slots (``request`` is
        the service's own, decoded for this call).  Returns (error, whether
        every shared-memory pool of the request is a cached one)."""
        self.forget(forget)
        if slots is None:
            return "", False
        pools = getattr(request, "pools", None)
        if type(request) is not hal.Request or type(pools) is not list or len(slots) != len(pools):
            return f"{len(slots)} memory slots for {len(pools or [])} pools", False
        all_cached = True
        in_use = {s for s in slots if s}
        for k, (s, p) in enumerate(zip(slots, pools)):
            if s == 0:
                if p.hidlMemory is not None:
                    all_cached = False
                continue
            if s < 0:
                return f"memory slot {s} of pool {k} is negative", False
            if p.hidlMemory is None and p.token is None:
                entry = self._entries.get(s)
                if entry is None:
                    return f"{UNKNOWN_SLOT} {s} (pool {k})", False
                self._entries.move_to_end(s)
            elif p.hidlMemory is not None and p.token is None:
                entry = self._add(s, p.hidlMemory, in_use)
                if entry is None:  # NOTE: not cached: the memory is used as sent (the driver checks it)
                    all_cached = False
                    continue
            else:
                return f"pool {k} has a memory slot and a token", False
            pools[k] = entry.pool_arg
        return "", all_cached

    def forget(self, slots: list[int]) -> None:
        for s in slots:
            entry = self._entries.pop(s, None)
            if entry is not None:
                self._close(entry)

    def keep(self, target: bytes, raw: Any, slots: list[int], args: list) -> None:
        """Remember a resolved call whose shared memories are all cached ones
        (and that names no driver buffer token): the same call again, over the
        same slots, reuses it (:meth:`recall`)."""
        request = args[0] if args else None
        if type(request) is hal.Request and all(p.token is None for p in request.pools):
            self._memo = (self._gen, target, raw, list(slots), args)

    def recall(self, target: bytes, raw: Any, slots: list[int]) -> Optional[list]:
        """The arguments of the last kept call if this one is byte for byte the
        same and no slot changed since (the driver never changes a request)."""
        m = self._memo
        if m is not None and m[0] == self._gen and m[1] == target and m[3] == slots and m[2] == raw:
            return m[4]
        return None

    def pool(self, memory: hal.Memory, writable: bool) -> Any:
        """The view of a cached memory's open pool (a driver's ``pool_cache``);
        raises hal_memory.InvalidMemory as open_pool does."""
        entry = self._by_memory[id(memory)]
        pool = entry.pools.get(writable)
        if pool is None:
            pool = entry.pools[writable] = hal_memory.open_pool(memory, writable=writable)
        return pool.view

    def close(self) -> None:
        entries = list(self._entries.values())
        self._entries.clear()
        for entry in entries:
            self._close(entry)

    def __len__(self) -> int:
        return len(self._entries)

    def _add(self, slot: int, memory: hal.Memory, in_use: set[int]) -> Optional[_ServiceEntry]:
        try:
            own = hal_memory.dup(memory)
        except (hal_memory.InvalidMemory, TypeError, AttributeError) as e:
            log.error("memory slot %d not cached: %s", slot, e)
            return None
        old = self._entries.pop(slot, None)
        if old is not None:
            self._close(old)
        entry = self._entries[slot] = _ServiceEntry(own)
        self._by_memory[id(own)] = entry
        self._gen += 1
        while len(self._entries) > self._max:
            oldest = next(iter(self._entries))
            if oldest in in_use:
                break
            self._close(self._entries.pop(oldest))
        return entry

    def _close(self, entry: _ServiceEntry) -> None:
        self._gen += 1
        self._memo = None
        self._by_memory.pop(id(entry.memory), None)
        entry.close()


# --------------------------------------------------------------------------
# AIDL bursts: memories by identifier token
#
# An AIDL ``IBurst`` names each request pool's memory by a token the client
# chooses (-1: none), and "the token names the memory" for the burst's life
# (driver/burst.py's TokenBurst keeps the first memory of a token until
# releaseMemoryResource).  So once the service holds a memory for a token,
# the client sends that pool empty and marks it in ``Call.slots`` (1: "the
# memory you keep for this pool's token", 0: sent as it is): no descriptor
# passing per execution.  The client remembers which tokens the service holds
# (:class:`ClientTokens`, at most :data:`CLIENT_TOKENS`, least recently used
# ones forgotten with the next call in ``Call.forget``); the service keeps the
# received descriptors themselves (:class:`ServiceTokens`, at most
# :data:`SERVICE_TOKENS`) until the token is forgotten, released, replaced
# or the burst dropped.  A token the service does not hold is
# INVALID_ARGUMENT with :data:`UNKNOWN_SLOT` in the message; the client then
# forgets them all and sends the memories again.

CLIENT_TOKENS = 64
SERVICE_TOKENS = 2 * CLIENT_TOKENS


class ClientTokens:
    """One AIDL burst's tokens whose memory the service holds, client side."""

    def __init__(self, max_tokens: Optional[int] = None):
        self._max = CLIENT_TOKENS if max_tokens is None else max_tokens
        self._known: collections.OrderedDict[int, None] = collections.OrderedDict()
        self._forget: list[int] = []
        self._lock = threading.Lock()

    def prepare(self, request: Any, tokens: Any) -> tuple[Any, Optional[list[int]], list[int], list[int]]:
        """(the request to send, its pools' slots or None, tokens to forget, the
        tokens whose memory this call sends).  The caller's request is left
        alone; pools without a memory or a token travel as they are."""
        pools = getattr(request, "pools", None)
        with self._lock:
            forget, self._forget = self._forget, []
            if type(request) is not aidl.Request or type(pools) is not list or type(tokens) not in (list, tuple) \
                    or len(tokens) != len(pools):
                return request, None, forget, []
            out, slots, sent = [], [], []
            for p, t in zip(pools, tokens):
                by_token = type(t) is int and t >= 0 and getattr(p, "pool", None) is not None \
                    and getattr(p, "token", None) is None
                if by_token and t in self._known:
                    self._known.move_to_end(t)
                    out.append(aidl.RequestMemoryPool())
                    slots.append(1)
                else:
                    out.append(p)
                    slots.append(0)
                    if by_token:
                        sent.append(t)
        return aidl.Request(inputs=request.inputs, outputs=request.outputs, pools=out), slots, forget, sent

    def confirm(self, sent: list[int]) -> None:
        """The service answered a call that sent the memories of ``sent``: it holds them."""
        with self._lock:
            for t in sent:
                self._known[t] = None
                self._known.move_to_end(t)
            while len(self._known) > self._max:
                self._forget.append(self._known.popitem(last=False)[0])

    def release(self, token: Any) -> None:
        """``releaseMemoryResource(token)``: the service drops its copy itself."""
        with self._lock:
            self._known.pop(token, None)

    def reset(self) -> None:
        """Forget every token (the service did not hold one of them)."""
        with self._lock:
            self._known.clear()
            self._forget = []

    def __len__(self) -> int:
        return len(self._known)


class ServiceTokens:
    """One AIDL burst's memories by token, service side: the received
    descriptors, kept.  ``lock`` is held by the burst's running execution
    (one at a time, as IBurst allows), so a memory is never dropped while an
    execution uses it."""

    def __init__(self, fds_of: Callable[[Any], list[int]], max_tokens: Optional[int] = None):
        self._fds_of = fds_of  # NOTE: the descriptors of an aidl.Memory (nnhal.service.aidl_wire)
        self._max = SERVICE_TOKENS if max_tokens is None else max_tokens
        self._memories: collections.OrderedDict[int, Any] = collections.OrderedDict()
        self.lock = threading.Lock()
        self._gen = 0  # NOTE: bumped whenever a memory is kept or dropped: a remembered call is stale then
        self._memo: Optional[tuple] = None

    def remember(self, raw: Any, slots: list[int], args: list) -> None:
        """Remember a resolved call that sent no memory and names no driver buffer
        token: the same call again (:meth:`recall`) reuses its arguments (the face
        never changes a request).  Lock held."""
        if all(s == 1 for s in slots) and all(p.token is None for p in args[0].pools):
            self._memo = (self._gen, raw, list(slots), args)

    def recall(self, raw: Any, slots: Optional[list[int]]) -> Optional[list]:
        """The arguments of the remembered call if this one is byte for byte the
        same and no memory was kept or dropped since.  Lock held."""
        m = self._memo
        if m is not None and m[0] == self._gen and m[2] == slots and m[1] == raw:
            return m[3]
        return None

    def resolve(self, request: Any, tokens: list[int], slots: Optional[list[int]], forget: list[int],
                fds: list[int]) -> str:
        """Drop the ``forget`` tokens, keep the memories the request sends with a
        token (taking their descriptors out of the call's ``fds``: they are kept,
        not closed with the call) and put the kept ones in the pools sent empty
        (``request`` is the service's own, decoded for this call).  Returns an
        error ("" if none).  Lock held."""
        self.forget(forget)
        if slots is None:
            return ""
        pools = request.pools
        if len(slots) != len(pools) or len(tokens) != len(pools):
            return f"{len(slots)} memory slots and {len(tokens)} tokens for {len(pools)} pools"
        in_use = set(tokens)
        seen: set[int] = set()
        for k, (s, p, t) in enumerate(zip(slots, pools, tokens)):
            if s == 0:
                if t >= 0 and p.pool is not None and p.token is None and t not in seen:
                    seen.add(t)  # NOTE: a token twice in one request: the first memory is kept
                    self._keep(t, p.pool, fds, in_use)
                continue
            if s != 1 or t < 0 or p.pool is not None or p.token is not None:
                return f"pool {k}: memory slot {s} with token {t} and a {'full' if p.pool or p.token else 'empty'} pool"
            entry = self._memories.get(t)
            if entry is None:
                return f"{UNKNOWN_SLOT}: token {t} (pool {k})"
            self._memories.move_to_end(t)
            p.pool = entry[0]
        return ""

    def _keep(self, token: int, memory: Any, fds: list[int], in_use: set[int]) -> None:
        own = self._fds_of(memory)
        if not all(fd in fds for fd in own):
            return  # NOTE: not the call's own descriptors (cannot happen for a decoded call): not kept
        for fd in own:
            fds.remove(fd)
        self.release(token)
        self._gen += 1
        self._memories[token] = (memory, own)
        while len(self._memories) > self._max:
            oldest = next(iter(self._memories))
            if oldest in in_use:
                break
            self.release(oldest)

    def release(self, token: Any) -> None:
        entry = self._memories.pop(token, None)
        if entry is not None:
            self._gen += 1
            close_fds(entry[1])

    def forget(self, tokens: list[int]) -> None:
        for t in tokens:
            self.release(t)

    def close(self) -> None:
        with self.lock:
            for t in list(self._memories):
                self.release(t)

    def __len__(self) -> int:
        return len(self._memories)
