"""HAL operands as numpy values (HAL 1.3 ``types.hal`` ``Operand``, ``DataLocation``).

How a model's operand becomes an array (its type, dimensions and, for
constants, the bytes at its location) and the :class:`OperandInfo` an
operation's ``validate`` sees.  Shared by the executor (running a model) and
by validation (checking one), so neither imports the other.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from nnhal import hal
from nnhal.ops.base import OperandInfo
from nnhal.ops.extension import member_lookup, operand_type, storage_dtype

L = hal.OperandLifeTime
_lifetime = member_lookup(L)


def operand_array(operand: hal.Operand, raw: bytes | memoryview) -> np.ndarray:
    """The value of an operand stored in ``raw`` as a numpy array of its shape."""
    t = operand_type(operand.type)
    if t == hal.OperandType.SUBGRAPH:
        return np.array(operand.location.offset, dtype=np.uint32)
    dtype = storage_dtype(t)
    if dtype == np.bool_:
        arr = np.frombuffer(raw, dtype=np.uint8) != 0
    else:
        arr = np.frombuffer(raw, dtype=dtype)
    return arr.reshape(tuple(operand.dimensions)) if operand.dimensions else arr.reshape(())


def constant_value(model: hal.Model, operand: hal.Operand, pools: Sequence[Any]) -> Optional[np.ndarray]:
    """The value of a CONSTANT_COPY / CONSTANT_REFERENCE / SUBGRAPH operand (a
    read-only view, no copy), or None for other lifetimes.  ``pools`` are the
    mapped model pools (buffer objects)."""
    loc = operand.location
    if operand.lifetime == L.CONSTANT_COPY:
        return operand_array(operand, memoryview(model.operandValues)[loc.offset: loc.offset + loc.length])
    if operand.lifetime == L.CONSTANT_REFERENCE:
        return operand_array(operand, memoryview(pools[loc.poolIndex])[loc.offset: loc.offset + loc.length])
    if operand.lifetime == L.SUBGRAPH:
        return np.array(loc.offset, dtype=np.uint32)
    return None


def operand_info(operand: hal.Operand, value: Optional[np.ndarray]) -> OperandInfo:
    """What an operation's validate / prepare sees of an operand (``value`` for constants)."""
    return OperandInfo(type=operand_type(operand.type), dimensions=tuple(operand.dimensions), scale=operand.scale,
                       zero_point=operand.zeroPoint, channel_quant=operand.extraParams.channelQuant,
                       lifetime=_lifetime(operand.lifetime), value=value,
                       extension=operand.extraParams.extension)
