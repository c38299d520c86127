"""Operations of the HAL: one module per family, declared as data (see base.py).

``nnhal.ops.run_operation`` / ``prepare_operation`` run one operation outside a
model (see :mod:`nnhal.ops.run`)."""

from __future__ import annotations

from typing import Any

_RUN_NAMES = frozenset({"run_operation", "prepare_operation", "PreparedOperation"})


def __getattr__(name: str) -> Any:
    # NOTE: lazily: importing nnhal.ops.base must not load every operation family (the registry)
    if name in _RUN_NAMES:
        from nnhal.ops import run

        return getattr(run, name)
    raise AttributeError(f"module 'nnhal.ops' has no attribute {name!r}")
