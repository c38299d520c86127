"""The client runtime: what Android's NNAPI runtime (``libneuralnetworks``)
is to the HAL, in Python.  Build a model in a few lines (:class:`Model`),
compile it across devices (:class:`Compilation`: per-operation placement by
``getSupportedOperations_1_3`` and capabilities, contiguous partitions,
CPU-reference fallback, a placement report), run it with numpy arrays
(:class:`Execution`: sync, async with an :class:`Event`, burst, fenced;
deadlines, loop timeouts, dynamic output shapes) and keep state on a device
(:class:`Memory`).  Uses only the public API: ``nnhal.hal``,
``nnhal.memory``, ``nnhal.fence``, ``nnhal.burst``, ``nnhal.get_device`` /
``connect`` / ``list_devices`` and, for :meth:`Model.finish`, the driver's
own validation (``nnhal.engine.validation``).

>>> import numpy as np
>>> from nnhal import hal, runtime
>>> m = runtime.Model()
>>> a, b = m.input("a", np.float32, [2]), m.input("b", np.float32, [2])
>>> _ = m.output(m.operation(hal.OperationType.ADD, [a, b, 0], (np.float32, [2])), "sum")
>>> runtime.Compilation(m, ["sample-all"]).run({"a": [1, 2], "b": [3, 4]})["sum"].tolist()
[4.0, 6.0]
"""

from nnhal.runtime.compilation import Compilation, CompilationError, Placement
from nnhal.runtime.discovery import Device, devices, names
from nnhal.runtime.execution import Event, Execution, ExecutionError
from nnhal.runtime.memory import Memory
from nnhal.runtime.model import Model, Operand

__all__ = ["Compilation", "CompilationError", "Device", "Event", "Execution", "ExecutionError", "Memory", "Model",
           "Operand", "Placement", "devices", "names"]
