"""Process tuning for stable numbers: OpenBLAS threads (ctypes) and glibc malloc."""

from __future__ import annotations

# NOTE: numpy's OpenBLAS threads are the platform layer's (nnhal.platform.blas), named here as bench has them
from nnhal.platform.blas import set_threads as set_blas_threads
from nnhal.platform.blas import threads as blas_threads

__all__ = ["blas_threads", "set_blas_threads", "tune_malloc"]


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
