"""A driver plugin with a vendor extension of its own, implementing a TFLite
custom operator (docs/extensions.md walks through it).

``com.example.cube`` has one operation, ``EXAMPLE_CUBE`` (0): x -> x**3,
element by element, on a ``TENSOR_FLOAT32``.  The extension says that it
implements the TFLite custom operator ``Cube`` as that operation, so

    nnhal run cube.tflite --device examples/cube_extension.py:CubeBackend

sends the model's ``Cube`` operators to this device.  Every other operation
is the reference's (the backend is the sample backend plus the extension).
"""

from __future__ import annotations

import numpy as np

from nnhal import hal
from nnhal.drivers.sample import SampleBackend
from nnhal.ops.base import V1_2, ExecContext, Signature
from nnhal.ops.extension import Extension, ExtensionOperation

EXAMPLE_CUBE = 0


def _cube(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0].data
    return [x * x * x]


CUBE = Extension(
    name="com.example.cube",
    operations=(ExtensionOperation(EXAMPLE_CUBE, "EXAMPLE_CUBE", execute=_cube, allow_zero_sized=True,
                                   signatures=[Signature((hal.OperandType.TENSOR_FLOAT32,),
                                                         (hal.OperandType.TENSOR_FLOAT32,), V1_2)]),),
    custom_ops={"Cube": EXAMPLE_CUBE},
)


class CubeBackend(SampleBackend):
    """The device ``example-cube``: the reference executor plus ``com.example.cube``."""

    name = "example-cube"

    def __init__(self) -> None:
        super().__init__("example-cube 0.1 (com.example.cube on the CPU reference)")

    def extensions(self) -> tuple[Extension, ...]:
        return (CUBE,)
