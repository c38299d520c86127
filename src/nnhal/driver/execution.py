"""One execution of a prepared model on a request: map the request pools,
read the inputs, run the executor, check output sizes, write the outputs and
measure timing.  Shared by every execution path (async, sync, fenced,
burst), which differ only in how they report."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from nnhal import hal
from nnhal import memory as hal_memory
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
    """The mapped pools of one request (hidlMemory pools; token pools are
    resolved by a buffer tracker when memory domains are supported)."""

    def __init__(self, request: hal.Request, buffer_lookup: Any = None):
        self.views: list[memoryview] = []
        self._maps: list[hal_memory.MappedPool] = []
        # NOTE: a pool that receives outputs must be writable (a read-only
        # mmap_fd or hardware buffer there is a bad argument, not a crash);
        # pools only read are mapped read-only.
        out_pools = {a.location.poolIndex for a in request.outputs if not a.hasNoValue}
        for k, pool in enumerate(request.pools):
            if pool.hidlMemory is not None:
                try:
                    mp = hal_memory.MappedPool(pool.hidlMemory, writable=True if k in out_pools else False)
                except hal_memory.InvalidMemory as e:
                    self.close()
                    raise ValidationError(f"request pool {k}: {e}") from None
                self._maps.append(mp)
                self.views.append(mp.view)
            else:
                buf = buffer_lookup(pool.token) if buffer_lookup else None
                if buf is None:
                    self.close()
                    raise ValidationError(f"request pool {k}: unknown memory token {pool.token}")
                self.views.append(buf)

    def close(self) -> None:
        for mp in self._maps:
            mp.close()
        self._maps = []


def run_request(model: hal.Model, executor: Executor, request: hal.Request, pools: RequestPools,
                measure: hal.MeasureTiming, deadline_ns: Optional[int], loop_timeout_ns: int,
                driver_start_ns: int) -> Result:
    """Runs a validated request; never raises."""
    main = model.main
    try:
        inputs: list[Optional[np.ndarray]] = []
        for k, (arg, idx) in enumerate(zip(request.inputs, main.inputIndexes)):
            o = main.operands[idx]
            if arg.hasNoValue:
                inputs.append(None)
                continue
            dims = list(arg.dimensions) if arg.dimensions else list(o.dimensions)
            if is_tensor(o) and any(d == 0 for d in (arg.dimensions or [])):
                pass  # a zero-sized input dimension given by the request
            dtype = NUMPY_DTYPE[hal.OperandType(o.type)]
            n = int(np.prod(dims)) if dims else 1
            need = n * dtype.itemsize
            loc = arg.location
            if loc.length < need:
                raise ValidationError(f"request input {k}: {need} bytes needed for {hal.OperandType(o.type).name} "
                                      f"{dims}, the location has {loc.length}")
            view = pools.views[loc.poolIndex]
            raw = np.frombuffer(view, dtype=np.uint8, count=need, offset=loc.offset)
            if dtype == np.bool_:
                arr = raw != 0
            else:
                arr = raw.view(dtype).copy()  # NOTE: a copy, so the client may reuse its buffer at once
            inputs.append(arr.reshape(dims))
    except ValidationError as e:
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
        ok = arg.hasNoValue or arr.nbytes <= arg.location.length
        if arg.dimensions and any(d and d != a for d, a in zip(arg.dimensions, dims)):
            log.error("output %d has shape %s, the request said %s", k, dims, list(arg.dimensions))
            return Result(S.GENERAL_FAILURE)
        if not ok:
            log.error("output %d needs %d bytes, the request gives %d", k, arr.nbytes, arg.location.length)
        sufficient &= ok
        shapes.append(hal.OutputShape(dimensions=dims, isSufficient=ok))
    if not sufficient:
        return Result(S.OUTPUT_INSUFFICIENT_SIZE, shapes)
    try:
        for arg, arr in zip(request.outputs, outputs):
            if arg.hasNoValue or arr.nbytes == 0:
                continue
            view = pools.views[arg.location.poolIndex]
            off = arg.location.offset
            view[off: off + arr.nbytes] = np.ascontiguousarray(arr).view(np.uint8).reshape(-1)
    except (TypeError, ValueError, IndexError) as e:  # never let a bad pool reach the client as an exception
        log.error("writing the outputs failed: %s", e)
        return Result(S.GENERAL_FAILURE)
    timing = hal.Timing()
    if measure == hal.MeasureTiming.YES:
        end = time.monotonic_ns()
        timing = hal.Timing(timeOnDevice=_us(device_end - device_start), timeInDriver=_us(end - driver_start_ns))
    return Result(S.NONE, shapes, timing)


def output_sizes_known(model: hal.Model, request: hal.Request) -> bool:
    """Whether every output's size is fully specified (fenced execution needs it)."""
    for arg, idx in zip(request.outputs, model.main.outputIndexes):
        o = model.main.operands[idx]
        dims = list(arg.dimensions) or list(o.dimensions)
        if is_tensor(o) and (not dims or operand_byte_size(o, dims) == 0):
            return False
    return True
