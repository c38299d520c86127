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
             dtype: str = "float32") -> bytes:
    """x -> ADD(x, 1) -> OP(that, constants...) -> ADD(., 1) -> y: an NNAPI operator on each side of ``op``
    (``mid_in``: the op's inputs after the first, constants or not; the first is ADD's result)."""
    one = Tensor([1], dtype, data=np.ones(1, dtype))
    ts = [Tensor(list(x_shape), dtype), one, Tensor(list(x_shape), dtype)] + list(mid_in) + [mid_out,
                                                                                         Tensor(mid_out.shape, mid_out.dtype)]
    n_mid = len(mid_in)
    mid = 3 + n_mid
    one2 = len(ts)
    ts.append(Tensor([1], mid_out.dtype, data=np.ones(1, mid_out.dtype)))
    ops = [("ADD", [0, 1], [2], options("AddOptions")),
           (op, [2] + list(range(3, 3 + n_mid)), [mid], opts),
           ("ADD", [mid, one2], [mid + 1], options("AddOptions"))]
    return graph(ts, ops, inputs=[0], outputs=[mid + 1])
