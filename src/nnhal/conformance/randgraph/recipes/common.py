"""What the recipes share: fused activations, layouts, broadcast partners,
axes, and the guards that keep values away from discontinuities (a
comparison of two nearly equal computed values, FLOOR of a computed value
next to an integer, ties under ARGMAX): there a device's last-bit
difference would turn into a different result that no tolerance accepts."""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from nnhal import hal
from nnhal.conformance.randgraph.generator import Build, Recipe, StepFailed, dequantize, first_types
from nnhal.conformance.randgraph.graph import QUANT, Operand

T = hal.OperandType
OT = hal.OperationType

ACT_NAMES = ("NONE", "RELU", "RELU1", "RELU6")
FLOATS = frozenset({T.TENSOR_FLOAT32, T.TENSOR_FLOAT16})
Q8 = frozenset({T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED})

__all__ = ["ACT_NAMES", "FLOATS", "OT", "Build", "Q8", "Recipe", "StepFailed", "T", "act", "axis", "first_types",
           "layout", "partner_dims", "margin", "scalar_type", "gap_guard", "away_from_integers", "nhwc", "recipe"]


def recipe(op: OT, family: str, preserving: bool = False, anchor_input: int = 0) -> "callable":
    """Registers the decorated ``build(b)`` as ``op``'s recipe (its anchor at input ``anchor_input``)."""
    def wrap(fn: "callable") -> Recipe:
        return Recipe(op, fn, family, preserving, lambda s: first_types(s, anchor_input))
    return wrap


def act(b: Build, name: str = "act") -> int:
    """A fused activation (NONE the simplest; only NONE for TENSOR_INT32)."""
    if b.ins and b.operand(b.ins[0]).type == T.TENSOR_INT32:
        b.param(name, T.INT32, 0, ACT_NAMES[0])
        return 0
    v = b.d.index(4, weights=(0.55, 0.2, 0.1, 0.15))
    b.param(name, T.INT32, v, ACT_NAMES[v])
    return v


def layout(b: Build, name: str = "layout") -> bool:
    """The data layout flag (False: NHWC, the simplest)."""
    v = b.d.flag(0.35)
    b.param(name, T.BOOL, v, "NCHW" if v else "NHWC")
    return v


def nhwc(dims: Sequence[int], nchw: bool) -> tuple[int, int, int, int]:
    """(N, H, W, C) of a 4-D shape in either layout."""
    n, a, b_, c = dims
    return (n, b_, c, a) if nchw else (n, a, b_, c)


def scalar_type(t: T) -> T:
    """The scalar type of a float parameter beside a tensor of type ``t``."""
    return T.FLOAT16 if t == T.TENSOR_FLOAT16 else T.FLOAT32


def axis(b: Build, rank: int, name: str = "axis") -> int:
    """An axis in [-rank, rank), drawn positive or negative (0 the simplest)."""
    a = b.d.integer(0, rank - 1)
    if b.d.flag(0.35):
        a -= rank
    b.param(name, T.INT32, a)
    return a % rank


def partner_dims(b: Build, dims: Sequence[int], within: bool = False) -> tuple[tuple[int, ...], bool]:
    """The shape of a second operand broadcast against ``dims``, and whether it
    goes first: the same shape, some axes (a middle one included) 1, a lower
    rank, or (unless ``within``) a larger one the anchor broadcasts into."""
    dims = tuple(dims)
    kind = b.d.index(3 if within else 5, weights=(0.35, 0.45, 0.2) if within else (0.25, 0.35, 0.15, 0.15, 0.1))
    if kind == 0:
        return dims, False
    if kind == 1:
        out = tuple(1 if b.d.flag(0.45) else x for x in dims)
        return out, b.d.flag(0.3)
    if kind == 2:
        k = b.d.integer(1, len(dims))
        out = dims[len(dims) - k:]
        out = tuple(1 if b.d.flag(0.3) else x for x in out)
        return out, b.d.flag(0.3)
    if kind == 3 and len(dims) < 4:
        return tuple(b.d.integer(1, 3) for _ in range(b.d.integer(1, 4 - len(dims)))) + dims, b.d.flag(0.5)
    if 1 in dims:
        return tuple(b.d.integer(2, 4) if x == 1 and b.d.flag(0.6) else x for x in dims), b.d.flag(0.5)
    return dims, False


def margin(o: Operand, relaxed: bool) -> float:
    """How far apart two computed values must be for the comparison of them to be stable."""
    if o.type in QUANT:
        return 2.5 * (o.scale if o.channel is None else max(o.channel[0]))
    if o.type == T.TENSOR_FLOAT16 or relaxed:
        return 2e-2
    if o.type == T.TENSOR_INT32:
        return 0.5
    return 1e-3


def gap_guard(b: Build, which: Sequence[int], axis_of: Optional[int] = None) -> None:
    """Refuses values of computed inputs ``which`` that nearly tie: across the
    two inputs (elementwise, broadcast) or, with ``axis_of`` (a negative axis
    from the end, or a positive one), between values along that axis of input
    ``which[0]``."""
    relaxed = b.gen.model.relaxed

    def check(ins: list[Operand], outs: list[np.ndarray]) -> str:
        if not any(b.computed(b.ins[k]) for k in which):
            return ""
        m = max(margin(ins[k], relaxed) for k in which)
        if axis_of is not None:
            x = dequantize(ins[which[0]])
            if x.ndim == 0 or x.shape[axis_of] < 2:
                return ""
            s = np.sort(np.moveaxis(x, axis_of, -1), axis=-1)
            scale = np.maximum(1.0, np.abs(s[..., 1:])) if ins[which[0]].type not in QUANT else 1.0
            return "" if (np.diff(s, axis=-1) >= m * scale).all() else "values too close to a tie"
        a, c = dequantize(ins[which[0]]), dequantize(ins[which[1]])
        try:
            diff = np.abs(a - c)
        except ValueError:
            return ""
        scale = np.maximum(1.0, np.abs(a)) if ins[which[0]].type not in QUANT else 1.0
        return "" if (diff >= m * scale).all() else "values too close to a tie"
    b.guard(check)


def away_from_integers(b: Build, k: int = 0, offset: float = 0.0) -> None:
    """Refuses a computed input ``k`` with values next to an integer (+ ``offset``): FLOOR, CAST."""
    relaxed = b.gen.model.relaxed

    def check(ins: list[Operand], outs: list[np.ndarray]) -> str:
        if not b.computed(b.ins[k]):
            return ""
        x = dequantize(ins[k]) - offset
        m = margin(ins[k], relaxed) * np.maximum(1.0, np.abs(x))
        return "" if (np.abs(x - np.rint(x)) >= m).all() else "values next to a whole number"
    b.guard(check)
