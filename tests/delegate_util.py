"""Small .tflite models for the delegate tests, written with nnhal's writer, and a plan runner."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

import nnhal
from nnhal.delegate.model import Graph
from nnhal.delegate.plan import Options, Plan, build_plan
from nnhal.delegate.run import LiteRT, diff, make_inputs
from nnhal.delegate.runner import Runner, input_descs, output_descs
from nnhal.tflite.loader import IODescription
from nnhal.tflite.writer import Tensor, graph, options

MODELS = Path(os.environ.get("NNHAL_MODELS") or Path(__file__).resolve().parents[1] / ".." / "shared" / "models")


def plan_of(data: Any, api: int = 30, **kw: Any) -> Plan:
    return build_plan(data if isinstance(data, Graph) else Graph(data), Options(android_api=api, **kw),
                      nnhal.get_device)


def where(plan: Plan) -> list[str]:
    return [o.where for o in plan.operators]


def run_and_compare(plan: Plan, kernels: str = "builtin", seed: int = 0,
                    inputs: Optional[Sequence[np.ndarray]] = None) -> list:
    """Runs the plan and LiteRT on the original file with the same inputs: the Diff per output."""
    g = plan.graph
    x = list(inputs) if inputs is not None else make_inputs(IODescription(inputs=input_descs(g)), seed=seed)
    r = Runner(plan, nnhal.get_device, kernels=kernels)
    try:
        outs = r.run(x)
    finally:
        r.close()
    ref = LiteRT(g.original, kernels=kernels).run(x)
    return [diff(a, b, d) for a, b, d in zip(outs, ref, output_descs(g))]


def sandwich(op: str, mid_in: Sequence[Tensor], mid_out: Tensor, opts: Any = None, x_shape=(1, 8),
             dtype: str = "float32", quant: Optional[dict] = None) -> bytes:
    """x -> ADD(x, 1) -> OP(that, constants...) -> ADD(., 1) -> y: an NNAPI operator on each side of ``op``
    (``mid_in``: the op's inputs after the first, constants or not; the first is ADD's result; ``quant``: the
    scale / zero_point of x and the first ADD's tensors, the second ADD's are ``mid_out``'s)."""
    q = quant or {}
    qo = dict(scale=mid_out.scale, zero_point=mid_out.zero_point) if mid_out.scale is not None else {}
    one = Tensor([1], dtype, data=np.ones(1, dtype), **q)
    ts = [Tensor(list(x_shape), dtype, **q), one, Tensor(list(x_shape), dtype, **q)] + list(mid_in) + [
        mid_out, Tensor(mid_out.shape, mid_out.dtype, **qo)]
    n_mid = len(mid_in)
    mid = 3 + n_mid
    one2 = len(ts)
    ts.append(Tensor([1], mid_out.dtype, data=np.ones(1, mid_out.dtype), **qo))
    ops = [("ADD", [0, 1], [2], options("AddOptions")),
           (op, [2] + list(range(3, 3 + n_mid)), [mid], opts),
           ("ADD", [mid, one2], [mid + 1], options("AddOptions"))]
    return graph(ts, ops, inputs=[0], outputs=[mid + 1])


def batch_matmul_model(b_shape: Sequence[int] = (1, 8, 5), dtype: str = "float32") -> bytes:
    """x [1, 2, 8] -> ADD -> BATCH_MATMUL by a constant ``b_shape`` -> ADD -> y (float32 or int8)."""
    rng = np.random.default_rng(1)
    out = [1, 2, int(b_shape[-1])]
    if dtype == "int8":
        w = rng.integers(-128, 128, size=tuple(b_shape)).astype(np.int8)
        q = dict(scale=0.05, zero_point=0)
        return sandwich("BATCH_MATMUL", [Tensor(list(b_shape), "int8", data=w, **q)],
                        Tensor(out, "int8", scale=0.5, zero_point=-3), options("BatchMatMulOptions"),
                        x_shape=(1, 2, 8), dtype="int8", quant=q)
    w = rng.normal(size=tuple(b_shape)).astype(np.float32)
    return sandwich("BATCH_MATMUL", [Tensor(list(b_shape), data=w)], Tensor(out), options("BatchMatMulOptions"),
                    x_shape=(1, 2, 8))


def pack_model(dtype: str = "float32", axis: int = 0) -> bytes:
    """x [2, 3] -> ADD -> PACK with a constant along ``axis`` -> ADD -> y."""
    c = np.arange(6).reshape(2, 3).astype(dtype)
    out = [2, 3]
    out.insert(axis if axis >= 0 else len(out) + 1 + axis, 2)
    return sandwich("PACK", [Tensor([2, 3], dtype, data=c)], Tensor(out, dtype),
                    options("PackOptions", valuesCount=2, axis=axis), x_shape=(2, 3), dtype=dtype)


def mirror_pad_model(mode: int = 0) -> bytes:
    """x [1, 4, 4, 2] -> ADD -> MIRROR_PAD (REFLECT 0 / SYMMETRIC 1) by constant paddings -> ADD -> y."""
    pads = np.array([[0, 0], [1, 2], [2, 1], [0, 0]], np.int32)
    return sandwich("MIRROR_PAD", [Tensor([4, 2], "int32", data=pads)], Tensor([1, 7, 7, 2]),
                    options("MirrorPadOptions", mode=mode), x_shape=(1, 4, 4, 2))


def reverse_model(axes: Sequence[int] = (1,)) -> bytes:
    """x [2, 5, 3] -> ADD -> REVERSE_V2 along constant ``axes`` -> ADD -> y."""
    return sandwich("REVERSE_V2", [Tensor([len(axes)], "int32", data=np.asarray(axes, np.int32))],
                    Tensor([2, 5, 3]), None, x_shape=(2, 5, 3))
