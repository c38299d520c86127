"""numpy's bundled OpenBLAS: how many threads its matrix products use (read and set through ctypes; numpy
has no API for it)."""

from __future__ import annotations

import ctypes
import glob
import os
from typing import Any

import numpy as np

__all__ = ["threads", "set_threads"]


def _openblas() -> Any:
    """numpy's bundled OpenBLAS (None if not found)."""
    here = os.path.dirname(np.__file__)
    for path in sorted(glob.glob(os.path.join(here, "..", "numpy.libs", "*openblas*"))) + \
            sorted(glob.glob(os.path.join(here, ".dylibs", "*openblas*"))):
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    return None


def _fn(suffix: str) -> Any:
    lib = _openblas()
    if lib is None:
        return None
    for name in (f"scipy_openblas_{suffix}64_", f"openblas_{suffix}64_", f"openblas_{suffix}"):
        fn = getattr(lib, name, None)
        if fn is not None:
            return fn
    return None


def threads() -> int | None:
    """The number of threads numpy's OpenBLAS uses (None if unknown)."""
    fn = _fn("get_num_threads")
    return int(fn()) if fn is not None else None


def set_threads(n: int) -> bool:
    """Set numpy's OpenBLAS thread count; False if it cannot be set."""
    fn = _fn("set_num_threads")
    if fn is None:
        return False
    fn(int(n))
    return True
