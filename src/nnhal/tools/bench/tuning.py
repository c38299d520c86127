"""Process tuning for stable numbers: OpenBLAS threads (ctypes) and glibc malloc."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

# --------------------------------------------------------------------------
# BLAS threads


def _openblas() -> Any:
    """numpy's bundled OpenBLAS through ctypes (None if not found)."""
    import ctypes
    import glob

    here = os.path.dirname(np.__file__)
    for path in sorted(glob.glob(os.path.join(here, "..", "numpy.libs", "*openblas*"))) + \
            sorted(glob.glob(os.path.join(here, ".dylibs", "*openblas*"))):
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    return None


def _blas_fn(suffix: str) -> Any:
    lib = _openblas()
    if lib is None:
        return None
    for name in (f"scipy_openblas_{suffix}64_", f"openblas_{suffix}64_", f"openblas_{suffix}"):
        fn = getattr(lib, name, None)
        if fn is not None:
            return fn
    return None


def blas_threads() -> int | None:
    """The number of threads numpy's OpenBLAS uses (None if unknown)."""
    fn = _blas_fn("get_num_threads")
    return int(fn()) if fn is not None else None


def set_blas_threads(n: int) -> bool:
    """Set numpy's OpenBLAS thread count; False if it cannot be set."""
    fn = _blas_fn("set_num_threads")
    if fn is None:
        return False
    fn(int(n))
    return True


def tune_malloc() -> bool:
    """glibc: serve large allocations from the heap and never trim it
    (``mallopt`` M_MMAP_THRESHOLD / M_TRIM_THRESHOLD), so the multi-MB
    activations of each execution reuse pages instead of faulting fresh ones
    in.  A process-wide choice (for a driver service); False if unavailable."""
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        return bool(libc.mallopt(m_mmap_threshold, 1 << 30)) and bool(libc.mallopt(m_trim_threshold, (1 << 31) - 1))
    except (OSError, AttributeError):
        return False
