"""Running a lowered graph op by op through the operation registry
(nnhal.ops.run): every intermediate value, for calibration and per-layer timing."""

from __future__ import annotations

import numpy as np

from nnhal.hal import OperandLifeTime
from nnhal.ops.base import OperandInfo, Tensor
from nnhal.ops.run import prepare_operation
from nnhal.tools.bench.lowering import Graph, Opnd, lower
from nnhal.tools.bench.zoo import Net

# --------------------------------------------------------------------------
# running through the registry (calibration, per-layer timing)


def _info(o: Opnd) -> OperandInfo:
    life = OperandLifeTime.CONSTANT_COPY if o.value is not None else OperandLifeTime.TEMPORARY_VARIABLE
    return OperandInfo(o.type, o.dims, o.scale, o.zp, None, life, o.value)


class RegistryRunner:
    """Runs a Graph op by op (every intermediate value kept, for calibration and
    per-layer timing), each operation validated and prepared once through
    :func:`nnhal.ops.run.prepare_operation`."""

    def __init__(self, g: Graph) -> None:
        self.g = g
        self.steps = []
        for t, ins, outs in g.ops:
            prepared = prepare_operation(t, [_info(g.operands[i]) for i in ins], [_info(g.operands[i]) for i in outs])
            self.steps.append((prepared, ins, outs))

    def tensors(self, k: int, values: dict[int, np.ndarray]) -> list[Tensor]:
        _, ins, _ = self.steps[k]
        tensors = []
        for i in ins:
            o = self.g.operands[i]
            data = o.value if o.value is not None else values[i]
            tensors.append(Tensor(o.type, data, o.scale, o.zp))
        return tensors

    def run(self, x: np.ndarray) -> dict[int, np.ndarray]:
        values = {self.g.inputs[0]: x}
        for k, (prepared, _, outs) in enumerate(self.steps):
            for i, r in zip(outs, prepared.run(self.tensors(k, values))):
                values[i] = r
        return values


def calibrate(net: Net, x: np.ndarray) -> dict[str, tuple[float, float]]:
    g = lower(net, quant=False)
    values = RegistryRunner(g).run(x)
    return {name: (float(values[i].min()), float(values[i].max())) for name, i in g.names.items()}
