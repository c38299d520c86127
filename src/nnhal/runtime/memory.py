"""Device memories for the client runtime (NNAPI 1.3's
``ANeuralNetworksMemory_createFromDesc``): a buffer allocated by the device
that runs the partitions using it (``IDevice.allocate`` with the roles of
the prepared partitions, through the compilation's face of that device: HAL
1.3 or AIDL), so state can stay on the device between executions; filled and
read through ``IBuffer.copyFrom`` / ``copyTo``."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from nnhal import hal
from nnhal.platform import memory as hal_memory
from nnhal.runtime.compilation import Compilation

S = hal.ErrorStatus


class MemoryError_(RuntimeError):
    """Allocation or copy of a device memory failed (``status`` the HAL's)."""

    def __init__(self, message: str, status: S):
        super().__init__(message)
        self.status = status


class Memory:
    """A device memory usable as the named ``inputs`` and ``outputs`` of
    ``compilation`` (every partition using it must be on one device)."""

    def __init__(self, compilation: Compilation, inputs: Sequence[str] = (), outputs: Sequence[str] = (),
                 dimensions: Optional[Sequence[int]] = None):
        comp = compilation.finish()
        main = comp.hal_model.main
        prepared: list[Any] = []
        roles: tuple[list, list] = ([], [])
        operand: Optional[hal.Operand] = None
        device = None
        for is_input, names in ((True, inputs), (False, outputs)):
            for name in names:
                table = comp.input_names if is_input else comp.output_names
                if name not in table:
                    raise ValueError(f"no {'input' if is_input else 'output'} named {name!r}")
                index = (main.inputIndexes if is_input else main.outputIndexes)[table.index(name)]
                operand = main.operands[index]
                for step in comp.steps:
                    io = step.inputs if is_input else step.outputs
                    if index not in io:
                        continue
                    if device is not None and step.device is not device:
                        raise MemoryError_(f"{name!r} is used on {device.name} and {step.device.name}: a device "
                                           "memory belongs to one device", S.INVALID_ARGUMENT)
                    device = step.device
                    if step.prepared not in prepared:
                        prepared.append(step.prepared)
                    roles[0 if is_input else 1].append(
                        hal.BufferRole(modelIndex=prepared.index(step.prepared), ioIndex=io.index(index),
                                       frequency=1.0))
        if device is None or operand is None:
            raise MemoryError_("no partition uses these inputs / outputs", S.INVALID_ARGUMENT)
        desc = hal.BufferDesc(dimensions=list(dimensions) if dimensions is not None else [])
        status, buffer, token = comp.face(device).allocate(desc, prepared, roles[0], roles[1])
        if status != S.NONE or buffer is None:
            raise MemoryError_(f"IDevice.allocate on {device.name} gave {S(status).name}", S(status))
        self.device, self.buffer, self.token, self.operand = device, buffer, token, operand
        self.dtype = comp.numpy_dtype(operand.type)
        self.dimensions = list(dimensions) if dimensions is not None else list(operand.dimensions)

    def copy_from(self, array: Any) -> None:
        """``IBuffer.copyFrom``: the buffer takes ``array``'s values and shape."""
        a = np.ascontiguousarray(array, dtype=self.dtype)
        mem = hal_memory.allocate(max(a.nbytes, 1))
        try:
            hal_memory.map(mem)[:a.nbytes] = a.reshape(-1).view(np.uint8)
            status = self.buffer.copy_from(mem, list(a.shape))
        finally:
            hal_memory.free(mem)
        if status != S.NONE:
            raise MemoryError_(f"IBuffer.copyFrom gave {S(status).name}", S(status))
        self.dimensions = list(a.shape)

    def copy_to(self, shape: Optional[Sequence[int]] = None) -> np.ndarray:
        """``IBuffer.copyTo``: the buffer's values (of ``shape``, default the last known one)."""
        shape = list(shape) if shape is not None else self.dimensions
        n = int(np.prod(shape)) * np.dtype(self.dtype).itemsize if shape else np.dtype(self.dtype).itemsize
        mem = hal_memory.allocate(max(n, 1))
        try:
            status = self.buffer.copy_to(mem)
            if status != S.NONE:
                raise MemoryError_(f"IBuffer.copyTo gave {S(status).name}", S(status))
            return np.frombuffer(bytes(hal_memory.map(mem)[:n]), dtype=self.dtype).reshape(shape).copy()
        finally:
            hal_memory.free(mem)
