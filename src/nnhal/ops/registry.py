"""The one explicit table of operations: OperationType -> OpDef.

Each family module lists its operations in ``OPS``; this module collects
them and checks that no type is registered twice.
"""

from __future__ import annotations

import importlib
from typing import Optional

from nnhal.hal import OperationType
from nnhal.ops.base import OpDef

# The family modules, each with its ``OPS`` list (nnhal/ops/<family>.py).
FAMILY_NAMES = (
    "activation", "broadcast", "comparison", "control_flow", "conversion", "conv", "detection", "elementwise",
    "lookup", "normalization", "pooling", "random", "recurrent", "reduce", "rnn", "shape", "softmax", "spatial",
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

_OT = OperationType
# NOTE: flags that mirror how Android 11's CpuExecutor dispatches operations
# rather than what each operation computes, kept together in one table: the
# operations its own switch runs (a missing operand there is BAD_DATA), and
# the ones that may leave a request output omitted.
for _t in (_OT.RESHAPE, _OT.DEPTH_TO_SPACE, _OT.SPACE_TO_DEPTH, _OT.EMBEDDING_LOOKUP, _OT.HASHTABLE_LOOKUP,
           _OT.RANDOM_MULTINOMIAL, _OT.RNN, _OT.BATCH_TO_SPACE_ND, _OT.SPACE_TO_BATCH_ND, _OT.PAD, _OT.PAD_V2,
           _OT.CAST, _OT.MEAN, _OT.ARGMAX, _OT.ARGMIN, _OT.EXPAND_DIMS, _OT.SPLIT, _OT.MAXIMUM, _OT.MINIMUM,
           _OT.GROUPED_CONV_2D, _OT.TILE, _OT.QUANTIZED_16BIT_LSTM, _OT.POW):
    REGISTRY[_t].bad_data_on_missing_operand = True
for _t in (_OT.IF, _OT.WHILE, _OT.LSH_PROJECTION, _OT.LSTM, _OT.BIDIRECTIONAL_SEQUENCE_LSTM, _OT.SVDF):
    REGISTRY[_t].allow_omitted_outputs = True


def find(op_type: int) -> Optional[OpDef]:
    """The OpDef of an operation type, or None if the type is unknown or not implemented."""
    try:
        return REGISTRY.get(OperationType(op_type))
    except ValueError:
        return None
