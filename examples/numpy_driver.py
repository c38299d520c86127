"""numpy_driver.py: a small nnhal driver.  ADD, MUL and RELU on float32
tensors, computed by numpy; every other operation refused with a reason."""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from nnhal import hal
from nnhal.driver import Backend, Compiled
from nnhal.driver.backend import constant_value

OP, T, L = hal.OperationType, hal.OperandType, hal.OperandLifeTime
CONSTANT = (L.CONSTANT_COPY, L.CONSTANT_REFERENCE)
BINARY = {OP.ADD: np.add, OP.MUL: np.multiply}
# the fused activation (hal FusedActivationFunc NONE, RELU, RELU1, RELU6) as clip bounds
CLAMP = {0: None, 1: (0.0, None), 2: (-1.0, 1.0), 3: (0.0, 6.0)}


class NumpyCompiled(Compiled):
    """The model as a list of steps, made once; ``run`` keeps the values of
    one execution in a local dict, so executions can run at the same time."""

    def __init__(self, model: hal.Model, pool_views: list) -> None:
        sg = model.main
        self.inputs, self.outputs = list(sg.inputIndexes), list(sg.outputIndexes)
        self.constants = {k: constant_value(model, o, pool_views) for k, o in enumerate(sg.operands)
                          if o.lifetime in CONSTANT}
        self.steps = []
        for op in sg.operations:
            if op.type == OP.RELU:
                self.steps.append((np.maximum, [op.inputs[0]], 0.0, None, op.outputs[0]))
            else:
                clamp = CLAMP[int(self.constants[op.inputs[2]])]  # supported() checked it is a constant
                self.steps.append((BINARY[op.type], op.inputs[:2], *(clamp or (None, None)), op.outputs[0]))

    def run(self, inputs: Sequence[Optional[np.ndarray]], deadline_ns: Optional[int] = None,
            loop_timeout_ns: int = 0, omitted: Sequence[int] = ()) -> list[np.ndarray]:
        values = dict(self.constants)
        values.update(zip(self.inputs, inputs))
        for fn, ins, lo, hi, out in self.steps:
            x = fn(values[ins[0]], 0.0) if len(ins) == 1 else fn(values[ins[0]], values[ins[1]])
            values[out] = np.asarray(x if lo is None else np.clip(x, lo, hi), dtype=np.float32)
        return [values[k] for k in self.outputs]


class NumpyDriver(Backend):
    name = "numpy-driver"
    version_string = "numpy-driver 1.0"

    def supported(self, model: hal.Model, defs: list) -> list[tuple[bool, str]]:
        sg = model.main
        answers = []
        for op in sg.operations:
            if op.type not in (OP.ADD, OP.MUL, OP.RELU):
                answers.append((False, f"numpy-driver runs ADD, MUL and RELU only, not {hal.operation_name(op.type)}"))
            elif sg.operands[op.inputs[0]].type != T.TENSOR_FLOAT32:
                answers.append((False, f"numpy-driver takes TENSOR_FLOAT32 only, not "
                                       f"{T(sg.operands[op.inputs[0]].type).name}"))
            elif op.type != OP.RELU and sg.operands[op.inputs[2]].lifetime not in CONSTANT:
                answers.append((False, "numpy-driver needs the fused activation as a constant"))
            else:
                answers.append((True, ""))
        return answers

    def compile(self, model: hal.Model, pool_views: list, deadline_ns: Optional[int]) -> NumpyCompiled:
        return NumpyCompiled(model, pool_views)
