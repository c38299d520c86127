"""Drivers with planted bugs, for tests/test_vts_random_planted.py: copies of
the README's example driver (examples/numpy_driver.py, patched as text so
they stay copies of it) and of the reference (the sample backend compiling a
rewritten model).  Each bug is one a driver engineer could write and the
conformance vectors never exercise."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Optional

from nnhal import hal
from nnhal.driver.backend import constant_value
from nnhal.drivers.sample import SampleBackend
from nnhal.engine.executor import Executor

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "numpy_driver.py"
OP, T, L = hal.OperationType, hal.OperandType, hal.OperandLifeTime

_STEP = "            x = fn(values[ins[0]], 0.0) if len(ins) == 1 else fn(values[ins[0]], values[ins[1]])\n"
_STEPS = "        self.steps = []\n"

# (what the bug is, the text replaced in the example, its replacement)
_INPLACE = ("            a = values[ins[0]]\n"
            "            b = values[ins[1]] if len(ins) > 1 else 0.0\n"
            "            inplace = ins[0] in self.temps and np.broadcast_shapes(np.shape(a), np.shape(b)) == np.shape(a)\n"
            "            x = fn(a, b, out=a if inplace else None)\n")

# (what the bug is, [(text of the example, its replacement)])
PATCHES = {
    # the result written into its first input's buffer when that input is a temporary, as if every
    # temporary had one reader: a second reader of it gets the first one's result
    "consumed_twice": (
        "a temporary read by two operations is overwritten by the first",
        [(_STEPS, _STEPS + "        self.temps = {k for op in sg.operations for k in op.outputs} - set(self.outputs)\n"),
         (_STEP, _INPLACE)]),
    # the same in-place write, counting the readers right but forgetting that the client reads a model output
    "output_consumed": (
        "a model output that a later operation reads comes back overwritten by that operation",
        [(_STEPS, _STEPS + "        reads = [k for op in sg.operations for k in op.inputs]\n"
                           "        self.temps = {k for op in sg.operations for k in op.outputs if reads.count(k) == 1}\n"),
         (_STEP, _INPLACE)]),
    # broadcasting along a middle axis done by repeating the smaller operand's values (np.resize)
    "middle_broadcast": (
        "an operand broadcast along a middle axis is repeated, not broadcast",
        [(_STEP, "            x = fn(values[ins[0]], 0.0) if len(ins) == 1 else fn(*_resized(values[ins[0]], "
                 "values[ins[1]]))\n"),
         ("class NumpyCompiled(Compiled):",
          "def _resized(a, b):\n"
          "    a, b = np.asarray(a), np.asarray(b)\n"
          "    big, small = (a, b) if a.size >= b.size else (b, a)\n"
          "    pad = (1,) * (big.ndim - small.ndim) + small.shape\n"
          "    if any(s == 1 and g > 1 for s, g in zip(pad[1:-1], big.shape[1:-1])):\n"
          "        small = np.resize(small, big.shape)\n"
          "    return (big, small) if a.size >= b.size else (small, big)\n\n\n"
          "class NumpyCompiled(Compiled):")]),
}


def example_copy(bug: str, directory: Path) -> str:
    """The example driver with ``bug`` planted, written in ``directory``: its ``--device`` spec."""
    text = EXAMPLE.read_text()
    _, patches = PATCHES[bug]
    for old, new in patches:
        assert old in text, f"the example driver changed: cannot plant {bug}"
        text = text.replace(old, new, 1)
    text = text.replace('name = "numpy-driver"', f'name = "planted-{bug}"')
    path = directory / f"planted_{bug}.py"
    path.write_text(text)
    return f"{path}:NumpyDriver"


class _PlantedReference(SampleBackend):
    """The reference over a rewritten model (``rewrite``: the planted bug)."""

    caching = False

    def __init__(self) -> None:
        super().__init__(f"nnhal-{self.name} 0.1 (the reference with a planted bug)")

    def rewrite(self, model: hal.Model, pool_views: list) -> None:
        raise NotImplementedError

    def compile(self, model: hal.Model, pool_views: list, deadline_ns: Optional[int]) -> Executor:
        m = copy.deepcopy(model)
        self.rewrite(m, pool_views)
        return Executor(m, pool_views)


def _int(model: hal.Model, k: int, pool_views: list) -> Optional[int]:
    o = model.main.operands[k]
    v = constant_value(model, o, pool_views)
    return None if v is None else int(v)


class DilationIgnoredWithStride(_PlantedReference):
    """CONV_2D with explicit padding ignores its dilation factors when a stride is above 1.  (With implicit
    padding the vectors see it: conv2d_dilation_nhwc_3 has stride 2 and dilation 3.)"""

    name = "planted-dilation"

    def rewrite(self, model: hal.Model, pool_views: list) -> None:
        for op in model.main.operations:
            if op.type == OP.CONV_2D and len(op.inputs) == 13:
                strides = [_int(model, op.inputs[k], pool_views) for k in (7, 8)]
                if any(s is not None and s > 1 for s in strides):
                    op.inputs = op.inputs[:-2]


class AddZeroPoint(_PlantedReference):
    """A quantized ADD computed with its first input's zero point for both inputs."""

    name = "planted-add-zero-point"

    def rewrite(self, model: hal.Model, pool_views: list) -> None:
        sg = model.main
        for op in sg.operations:
            if op.type == OP.ADD and sg.operands[op.inputs[0]].type in (T.TENSOR_QUANT8_ASYMM,
                                                                       T.TENSOR_QUANT8_ASYMM_SIGNED):
                a, b = sg.operands[op.inputs[0]], sg.operands[op.inputs[1]]
                b.zeroPoint = a.zeroPoint


class _Crashing:
    """The reference's executor, killing its process (SIGSEGV, as a native crash) on ``crashes(inputs)``."""

    def __init__(self, inner: Executor, crashes: object) -> None:
        self.inner, self.crashes = inner, crashes

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def run(self, inputs: list, *args: object, **kwargs: object) -> list:
        if self.crashes:
            import os
            import signal

            os.kill(os.getpid(), signal.SIGSEGV)
        return self.inner.run(inputs, *args, **kwargs)


class CrashOnBroadcastMul(_PlantedReference):
    """The process dies executing a MUL whose inputs have different shapes (a native crash in a driver)."""

    name = "planted-crash"

    def rewrite(self, model: hal.Model, pool_views: list) -> None:
        pass

    def compile(self, model: hal.Model, pool_views: list, deadline_ns: Optional[int]) -> Executor:
        sg = model.main
        crashes = any(op.type == OP.MUL and sg.operands[op.inputs[0]].dimensions != sg.operands[op.inputs[1]].dimensions
                      for op in sg.operations)
        return _Crashing(Executor(model, pool_views), crashes)
