"""Recipes of the operations the AIDL HAL adds (BATCH_MATMUL and PACK in
version 2, MIRROR_PAD and REVERSE in version 3): registered only where
``OperationType`` has them, drawn only at an AIDL version
(``--hal-version AIDL_V3``)."""

from __future__ import annotations

from typing import Callable, Optional

from nnhal.conformance.randgraph.generator import Recipe
from nnhal.conformance.randgraph.recipes.common import OT, Build, StepFailed, T, recipe


def _aidl(name: str, family: str, anchor_input: int = 0) -> Callable[[Callable[[Build], None]], Optional[Recipe]]:
    op = OT.__members__.get(name)

    def wrap(fn: Callable[[Build], None]) -> Optional[Recipe]:
        return recipe(op, family, anchor_input=anchor_input)(fn) if op is not None else None
    return wrap


@_aidl("BATCH_MATMUL", "conv")
def batch_matmul(b: Build) -> None:
    x = b.main(ranks=(2, 3, 4), fits=lambda d: d[-1] <= 16 and d[-2] <= 16)
    o = b.operand(x)
    adj_x, adj_y = b.d.flag(0.3), b.d.flag(0.3)
    k = o.dims[-2] if adj_x else o.dims[-1]
    n = b.d.integer(1, 6)
    dims = o.dims[:-2] + ((n, k) if adj_y else (k, n))
    if o.type == T.TENSOR_QUANT8_ASYMM_SIGNED:
        b.tensor(o.type, dims, scale=b.d.pick((0.05, 0.1, 0.02)), zp=0, role="weight")
    else:
        b.tensor(o.type, dims, domain="unit" if o.type != T.TENSOR_INT32 else "small", role="weight")
    b.param("adj_x", T.BOOL, adj_x)
    b.param("adj_y", T.BOOL, adj_y)
    b.out(o.type, "auto")


@_aidl("PACK", "shape", anchor_input=1)
def pack(b: Build) -> None:
    t = b.type(1)
    a = b.operand(b.anchor) if b.anchor is not None and b.operand(b.anchor).type == t else None
    dims = a.dims if a is not None and len(a.dims) <= 3 else b.shape(b.d.integer(1, 3))
    axis = b.d.integer(0, len(dims))
    b.param("axis", T.INT32, axis)
    x = b.main(t, dims=dims)
    o = b.operand(x)
    for _ in range(b.d.integer(0, 3, simplest=1)):
        b.tensor(t, dims, scale=o.scale if o.scale else None, zp=o.zero_point if o.scale else None)
    b.out(t)


@_aidl("MIRROR_PAD", "shape")
def mirror_pad(b: Build) -> None:
    x = b.main(ranks=(1, 2, 3, 4))
    o = b.operand(x)
    mode = b.d.integer(0, 1)  # NOTE: 0 REFLECT (padding < size), 1 SYMMETRIC (padding <= size)
    pads = []
    for d in o.dims:
        limit = d - 1 if mode == 0 else d
        pads += [b.d.integer(0, min(limit, 3)), b.d.integer(0, min(limit, 3))]
    if not any(pads):
        raise StepFailed("no padding")
    b.ints("paddings", pads, (len(o.dims), 2))
    b.param("mode", T.INT32, mode, ("REFLECT", "SYMMETRIC")[mode])
    b.out(o.type)


@_aidl("REVERSE", "shape")
def reverse(b: Build) -> None:
    x = b.main(ranks=(1, 2, 3, 4))
    o = b.operand(x)
    b.ints("axis", [b.d.integer(0, len(o.dims) - 1)])
    b.out(o.type)
