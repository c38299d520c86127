"""One execution of a prepared model on a request: map the request pools,
read the inputs, run the executor, check output sizes, write the outputs and
measure timing.  Shared by every execution path (async, sync, fenced,
burst), which differ only in how they report."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from nnhal import hal
from nnhal import memory as hal_memory
from nnhal.driver import buffers, hardware_buffer
from nnhal.executor import BadData, DeadlineMissed, Executor
from nnhal.ops.base import NUMPY_DTYPE, OpExecutionError
from nnhal.validation import ValidationError, is_tensor, operand_byte_size

log = logging.getLogger("nnhal.driver")

S = hal.ErrorStatus


def _us(ns: int) -> int:
    return max(0, ns // 1000)


@dataclass
class Result:
    status: hal.ErrorStatus
    outputShapes: list[hal.OutputShape] = field(default_factory=list)
    timing: hal.Timing = field(default_factory=hal.Timing)

    def as_tuple(self) -> tuple:
        return self.status, self.outputShapes, self.timing


class RequestPools:
    """The mapped pools of one request: shared memories (``views``),
    driver-managed buffers named by token (``buffers``, checked against
    their roles by ``buffer_lookup``, a :class:`buffers.TokenLookup`) and
    non-BLOB hardware buffers (``images``).  ``failure`` is set when a pool
    is well formed but cannot be used by this driver (GENERAL_FAILURE when
    the execution runs, as the memory guide recommends)."""

    def __init__(self, request: hal.Request, buffer_lookup: Any = None, pool_cache: Any = None):
        """``pool_cache(memory, writable)``, when given, opens the shared
        memories instead and keeps them open across requests (a burst's
        memories by slot); they are not closed with this object."""
        self.views: list[Optional[memoryview]] = []
        self.buffers: dict[int, buffers.DeviceBuffer] = {}
        self.images: dict[int, hardware_buffer.Image] = {}
        self.failure = ""
        self._maps: list[hal_memory.MappedPool | hal_memory.FdPool] = []
        # NOTE: a pool that receives outputs must be writable (a read-only
        # mmap_fd or hardware buffer there is a bad argument, not a crash);
        # pools only read are mapped read-only.
        out_pools = {a.location.poolIndex for a in request.outputs if not a.hasNoValue}
        for k, pool in enumerate(request.pools):
            if pool.hidlMemory is not None and pool.hidlMemory.name == "hardware_buffer":
                self.views.append(None)
                try:
                    self.images[k] = hardware_buffer.open_image(pool.hidlMemory, writable=k in out_pools)
                except hardware_buffer.ImageError as e:
                    if e.status != S.GENERAL_FAILURE:
                        self.close()
                        raise ValidationError(f"request pool {k}: {e}") from None
                    self.failure = self.failure or f"request pool {k}: {e}"
            elif pool.hidlMemory is not None:
                try:
                    # NOTE: mapped only if sealed against shrinking, else pread/pwrite: no SIGBUS
                    if pool_cache is not None:
                        mp = pool_cache(pool.hidlMemory, k in out_pools)
                    else:
                        # NOTE: small pools used once are cheaper to pread/pwrite than to map and unmap
                        mp = hal_memory.open_pool(pool.hidlMemory, writable=True if k in out_pools else False,
                                                  map_min_bytes=hal_memory.MAP_MIN_BYTES)
                        self._maps.append(mp)
                except hal_memory.InvalidMemory as e:
                    self.close()
                    raise ValidationError(f"request pool {k}: {e}") from None
                self.views.append(mp.view)
            else:
                self.views.append(None)
        try:
            self.buffers = buffers.resolve_request(request, buffer_lookup, getattr(buffer_lookup, "prepared", None))
        except ValidationError:
            self.close()
            raise
        for k in self.images:
            if any(a.location.offset for a in [*request.inputs, *request.outputs]
                   if not a.hasNoValue and a.location.poolIndex == k):
                self.close()
                raise ValidationError(f"request pool {k}: a hardware buffer holds one operand at offset 0")

    def settle(self, request: hal.Request, status: hal.ErrorStatus) -> None:
        """After an execution that did not succeed: its output buffers become
        uninitialized (IDevice::allocate)."""
        if status != S.NONE:
            for a in request.outputs:
                buf = self.buffers.get(a.location.poolIndex) if not a.hasNoValue else None
                if buf is not None:
                    buf.invalidate()

    def close(self) -> None:
        for mp in self._maps:
            mp.close()
        self._maps = []
        for img in self.images.values():
            img.close()
        self.images = {}


def run_request(model: hal.Model, executor: Executor, request: hal.Request, pools: RequestPools,
                measure: hal.MeasureTiming, deadline_ns: Optional[int], loop_timeout_ns: int,
                driver_start_ns: int) -> Result:
    """Runs a validated request; never raises."""
    result = _run_request(model, executor, request, pools, measure, deadline_ns, loop_timeout_ns, driver_start_ns)
    pools.settle(request, result.status)
    return result


def _special_input(pools: RequestPools, arg: hal.RequestArgument, o: hal.Operand, k: int) -> Optional[np.ndarray]:
    """An input from a driver-managed buffer or a hardware buffer image; None
    when the buffer is uninitialized."""
    p = arg.location.poolIndex
    buf = pools.buffers.get(p)
    if buf is not None:
        arr = buf.read(list(arg.dimensions))
        if arr is None:
            log.error("execution failed: input %d reads the uninitialized buffer of token %d", k, buf.token)
        return arr
    img = pools.images[p]
    dims = list(arg.dimensions) if arg.dimensions else list(o.dimensions)
    dtype = NUMPY_DTYPE[hal.OperandType(o.type)]
    need = (int(np.prod(dims)) if dims else 1) * dtype.itemsize
    if need > img.capacity:
        raise ValidationError(f"request input {k}: {need} bytes needed, the hardware buffer {img.desc} holds "
                              f"{img.capacity}")
    try:
        raw = np.frombuffer(img.read(need), dtype=np.uint8)
    except hardware_buffer.ImageError as e:
        raise ValidationError(f"request input {k}: {e}") from None
    return (raw != 0 if dtype == np.bool_ else raw.view(dtype).copy()).reshape(dims)


def _run_request(model: hal.Model, executor: Executor, request: hal.Request, pools: RequestPools,
                 measure: hal.MeasureTiming, deadline_ns: Optional[int], loop_timeout_ns: int,
                 driver_start_ns: int) -> Result:
    main = model.main
    if pools.failure:
        log.error("execution failed: %s", pools.failure)
        return Result(S.GENERAL_FAILURE)
    try:
        inputs: list[Optional[np.ndarray]] = []
        for k, (arg, idx) in enumerate(zip(request.inputs, main.inputIndexes)):
            o = main.operands[idx]
            if arg.hasNoValue:
                inputs.append(None)
                continue
            if arg.location.poolIndex in pools.buffers or arg.location.poolIndex in pools.images:
                special = _special_input(pools, arg, o, k)
                if special is None:
                    return Result(S.GENERAL_FAILURE)
                inputs.append(special)
                continue
            dims = list(arg.dimensions) if arg.dimensions else list(o.dimensions)
            dtype = NUMPY_DTYPE[o.type]  # NOTE: an IntEnum-keyed dict finds the plain int too (same hash)
            need = int(math.prod(dims)) * dtype.itemsize  # NOTE: math.prod: no numpy reduction per input
            loc = arg.location
            if loc.length < need:
                raise ValidationError(f"request input {k}: {need} bytes needed for {hal.OperandType(o.type).name} "
                                      f"{dims}, the location has {loc.length}")
            view = pools.views[loc.poolIndex]
            if view.__class__ is hal_memory.FdPool and dtype != np.bool_:
                # NOTE: pread straight into the input array (no intermediate buffer)
                arr = np.empty(need // dtype.itemsize, dtype)
                view.read_into(loc.offset, memoryview(arr).cast("B"))
                inputs.append(arr.reshape(dims))
                continue
            chunk = view[loc.offset: loc.offset + need]  # NOTE: an FdPool (unsealed memory) reads it here
            raw = np.frombuffer(chunk, dtype=np.uint8)
            if dtype == np.bool_:
                arr = raw != 0
            elif isinstance(chunk, memoryview):
                arr = raw.view(dtype).copy()  # NOTE: a copy, so the client may reuse its buffer at once
            else:
                arr = raw.view(dtype)  # already a private copy (pread)
            inputs.append(arr.reshape(dims))
    except (ValidationError, hal_memory.InvalidMemory) as e:  # NOTE: InvalidMemory: a pool shrunk since the launch
        log.error("execution rejected: %s", e)
        return Result(S.INVALID_ARGUMENT)

    device_start = time.monotonic_ns()
    try:
        omitted = [k for k, a in enumerate(request.outputs) if a.hasNoValue]
        outputs = executor.run(inputs, deadline_ns, loop_timeout_ns, omitted)
    except DeadlineMissed as e:
        log.error("execution: %s", e)
        return Result(S.MISSED_DEADLINE_TRANSIENT)
    except BadData as e:
        log.error("execution failed: %s", e)
        return Result(S.INVALID_ARGUMENT)
    except OpExecutionError as e:
        log.error("execution failed: %s", e)
        return Result(S.GENERAL_FAILURE)
    except Exception:  # never let a bug reach the client as an exception
        log.exception("execution failed unexpectedly")
        return Result(S.GENERAL_FAILURE)
    device_end = time.monotonic_ns()

    shapes: list[hal.OutputShape] = []
    sufficient = True
    for k, (arg, arr) in enumerate(zip(request.outputs, outputs)):
        dims = [int(d) for d in arr.shape]
        buf = pools.buffers.get(arg.location.poolIndex) if not arg.hasNoValue else None
        if buf is not None and not buf.fits(dims):
            # NOTE: as Android's reference: a device memory too small for the output is the
            # driver's GENERAL_FAILURE, not OUTPUT_INSUFFICIENT_SIZE (the client cannot grow it)
            log.error("output %d has shape %s, the buffer of token %d is fixed to %s", k, dims, buf.token,
                      list(buf.fixed_dims))
            return Result(S.GENERAL_FAILURE)
        ok = arg.hasNoValue or buf is not None or arr.nbytes <= _capacity(pools, arg)
        if arg.dimensions and any(d and d != a for d, a in zip(arg.dimensions, dims)):
            log.error("output %d has shape %s, the request said %s", k, dims, list(arg.dimensions))
            return Result(S.GENERAL_FAILURE)
        if not ok:
            log.error("output %d needs %d bytes, the request gives %d", k, arr.nbytes, _capacity(pools, arg))
        sufficient &= ok
        shapes.append(hal.OutputShape(dimensions=dims, isSufficient=ok))
    if not sufficient:
        return Result(S.OUTPUT_INSUFFICIENT_SIZE, shapes)
    written: list[tuple[buffers.DeviceBuffer, bytes, list[int]]] = []
    try:
        for arg, arr, shape in zip(request.outputs, outputs, shapes):
            if arg.hasNoValue:
                continue
            p = arg.location.poolIndex
            if p in pools.buffers:  # NOTE: stored once every output is written (all or nothing)
                written.append((pools.buffers[p], buffers.DeviceBuffer.encode(arr), list(shape.dimensions)))
                continue
            if arr.nbytes == 0:
                continue
            if p in pools.images:
                pools.images[p].write(buffers.DeviceBuffer.encode(arr))
                continue
            view = pools.views[p]
            off = arg.location.offset
            view[off: off + arr.nbytes] = np.ascontiguousarray(arr).view(np.uint8).reshape(-1)
    except (TypeError, ValueError, IndexError, OSError) as e:  # never let a bad pool reach the client as an exception
        log.error("writing the outputs failed: %s", e)
        return Result(S.GENERAL_FAILURE)
    for buf, data, dims in written:
        buf.store(data, dims)
    timing = hal.Timing()
    if measure == hal.MeasureTiming.YES:
        end = time.monotonic_ns()
        timing = hal.Timing(timeOnDevice=_us(device_end - device_start), timeInDriver=_us(end - driver_start_ns))
    return Result(S.NONE, shapes, timing)


def _capacity(pools: RequestPools, arg: hal.RequestArgument) -> int:
    img = pools.images.get(arg.location.poolIndex)
    return img.capacity if img is not None else arg.location.length


def output_sizes_known(model: hal.Model, request: hal.Request, buffer_lookup: Any = None) -> bool:
    """Whether every output's size is fully specified (fenced execution needs
    it); a driver-managed buffer's fixed dimensions count (``buffer_lookup``)."""
    for arg, idx in zip(request.outputs, model.main.outputIndexes):
        o = model.main.operands[idx]
        dims = list(arg.dimensions) or list(o.dimensions)
        pool = request.pools[arg.location.poolIndex] if not arg.hasNoValue else None
        buf = buffer_lookup(pool.token) if buffer_lookup is not None and pool is not None and pool.token else None
        if buf is not None:
            dims = buffers.combine_dims(dims, list(buf.fixed_dims)) or []
        if is_tensor(o) and (not dims or operand_byte_size(o, dims) == 0):
            return False
    return True
