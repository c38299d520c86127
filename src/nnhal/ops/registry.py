"""The one explicit table of operations: OperationType -> OpDef.

Each family module lists its operations in ``OPS``; this module collects
them and checks that no type is registered twice.
"""

from __future__ import annotations

import importlib
from typing import Optional

from nnhal.hal import OperationType
from nnhal.ops.base import OpDef
from nnhal.ops.extension import ExtensionOperationType

# The family modules, each with its ``OPS`` list (nnhal/ops/<family>.py).
FAMILY_NAMES = (
    "activation", "broadcast", "comparison", "control_flow", "conversion", "conv", "detection", "elementwise",
    "lookup", "matmul", "normalization", "pooling", "random", "recurrent", "reduce", "rnn", "shape", "softmax",
    "spatial",
)
FAMILIES = tuple(importlib.import_module(f"nnhal.ops.{name}") for name in FAMILY_NAMES)


def _build() -> dict[OperationType, OpDef]:
    table: dict[OperationType, OpDef] = {}
    for module in FAMILIES:
        for op in module.OPS:
            if op.type in table:
                raise RuntimeError(f"{op.type.name} registered twice ({module.__name__})")
            table[op.type] = op
    return table


REGISTRY: dict[OperationType, OpDef] = _build()



def find(op_type: int) -> Optional[OpDef]:
    """The OpDef of an operation type, or None if the type is unknown or not implemented.  A resolved
    extension operation type (``nnhal.ops.extension.ExtensionOperationType``) carries its own."""
    if op_type.__class__ is ExtensionOperationType:
        return op_type.opdef  # type: ignore[attr-defined]
    try:
        # NOTE: the table's keys are the members, equal (and hashing equal) to their numbers: looked up
        # directly first (the Enum call costs ~1 us, and a prepare asks once per operation and more)
        found = REGISTRY.get(op_type)
        return found if found is not None else REGISTRY.get(OperationType(op_type))
    except (ValueError, TypeError):
        return None
