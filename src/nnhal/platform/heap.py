"""The C heap's policy for the arrays an execution allocates and frees on
every run (numpy's data buffers come from ``malloc``).

glibc serves a request of ``M_MMAP_THRESHOLD`` bytes or more (128 KiB at
start) with a fresh ``mmap`` and unmaps it on ``free``: each such array of
every execution then costs its pages' faults again (palm detection: ~5,000
faults and ~7 ms of a 16 ms execution).  glibc raises the threshold by
itself ("dynamic mmap threshold", mallopt(3)) the first time the process
frees a mapped block, to that block's size -- so whether a process pays the
faults depended on what it happened to free before (a large model copy
freed after validation did; kept in ``nnhal.driver.prepared_states``, it
did not, and palm's execution went from 16 to 24 ms).

:func:`keep_freed_memory` makes the choice once and explicitly: blocks
below glibc's own upper bound for the dynamic threshold (32 MiB on 64-bit)
come from the heap, and up to twice that is kept at its top when freed (the
trim threshold glibc's dynamic rule sets).  A process whose environment sets
its own policy (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``,
``GLIBC_TUNABLES``) or ``NNHAL_MALLOC_POLICY=0`` keeps it; other C
libraries are left alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import os
import threading
from typing import Iterator

from nnhal.platform.threads import CountedSection

M_TRIM_THRESHOLD = -1  # glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # NOTE: DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: the dynamic rule's own upper bound
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD  # NOTE: what the dynamic rule sets beside a raised mmap threshold

_ENV_POLICIES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")
_lock = threading.Lock()
_state: dict[str, bool] = {}


def _mallopt() -> object | None:
    if os.name != "posix":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018 - glibc only: mallopt's parameters are glibc's numbers
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return fn


def keep_freed_memory() -> bool:
    """Sets the heap policy above once per process (later calls only answer); True when it is in force."""
    with _lock:
        if "set" not in _state:
            _state["set"] = _apply()
        return _state["set"]


def _apply() -> bool:
    if os.environ.get("NNHAL_MALLOC_POLICY", "1") == "0" or any(k in os.environ for k in _ENV_POLICIES):
        return False
    fn = _mallopt()
    if fn is None:
        return False
    # NOTE: the trim threshold first: mallopt(M_MMAP_THRESHOLD) ends the dynamic rule for both
    return bool(fn(M_TRIM_THRESHOLD, TRIM_THRESHOLD)) and bool(fn(M_MMAP_THRESHOLD, MMAP_THRESHOLD))


# --------------------------------------------------------------------------
# the garbage collector and long-lived data


def _freeze() -> bool:
    """Freezes what exists; whether the section's end unfreezes (not when the process had frozen objects of
    its own already: those stay frozen, and so do the section's)."""
    unfreeze = gc.get_freeze_count() == 0
    gc.freeze()
    return unfreeze


def _unfreeze(unfreeze: bool) -> None:
    if unfreeze:
        gc.unfreeze()


_frozen = CountedSection(_freeze, _unfreeze)


@contextlib.contextmanager
def frozen() -> Iterator[None]:
    """Within the block, the garbage collector's full collections pass over
    none of the objects alive when it began (``gc.freeze``): for a command
    that loads a large, long-lived data set and then does many small jobs
    (``nnhal vts`` holds ~280,000 objects of vector models; each full
    collection over them took ~120 ms, 30 of them in one section).  The
    objects become collectable again after the block (``gc.unfreeze``, by
    the outermost block of nested ones): a process calling the command
    in-process (tests) keeps nothing for good -- unless the process had
    frozen objects of its own before (``nnhal bench`` freezes what its
    start-up made): those stay frozen, and so do the block's.  Objects made
    within the block are collected as always."""
    with _frozen():
        yield
