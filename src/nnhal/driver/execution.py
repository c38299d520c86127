"""One execution of a prepared model on a request: map the request pools,
read the inputs, run the executor, check output sizes, write the outputs and
measure timing.  Shared by every execution path (async, sync, fenced,
burst), which differ only in how they report."""

from __future__ import annotations

import logging
import math
import time
from typing import Any, Optional

import numpy as np

from nnhal import hal
from nnhal.driver import buffers, hardware_buffer
from nnhal.driver.pool_cache import PoolCache, cache_key
from nnhal.engine.executor import BadData, DeadlineMissed, Executor
from nnhal.engine.validation import ValidationError, is_tensor, operand_byte_size
from nnhal.ops.base import NUMPY_DTYPE, OpExecutionError
from nnhal.ops.extension import ExtensionOperandType, operand_type, storage_dtype, type_name
from nnhal.platform import memory as hal_memory

log = logging.getLogger("nnhal.driver")

S = hal.ErrorStatus
# NOTE: a member read from an Enum class goes through EnumType.__getattr__ (Python 3.11), ~0.1 us each:
# the per-execution path reads the module's own name
_NONE = S.NONE


_Timing, _OutputShape = hal.Timing, hal.OutputShape
_new = object.__new__


def _us(ns: int) -> int:
    return max(0, ns // 1000)


class Result:
    """An execution's outcome: (status, outputShapes, timing) as the HAL returns them."""

    __slots__ = ("status", "outputShapes", "timing")

    def __init__(self, status: hal.ErrorStatus, outputShapes: Optional[list[hal.OutputShape]] = None,
                 timing: Optional[hal.Timing] = None):
        self.status = status
        self.outputShapes = [] if outputShapes is None else outputShapes
        # NOTE: a Timing of the call's own (the client may change what it is given); the dataclass's own
        # __init__ with its defaults (measured: cheaper than object.__new__ and a __dict__ of ours)
        self.timing = _Timing() if timing is None else timing

    def as_tuple(self) -> tuple:
        return self.status, self.outputShapes, self.timing

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Result) and self.as_tuple() == other.as_tuple()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.status!r}, {self.outputShapes!r}, {self.timing!r})"


class Refusal(Result):
    """A request refused at launch by the checks every execution path shares
    (the model and the request alone show it cannot run)."""


_NO_BUFFERS: dict = {}  # NOTE: shared empty dicts of a request with neither (never written to: see RequestPools)
_NO_IMAGES: dict = {}
_NO_MAPS: list = []  # NOTE: likewise, the pools of a request whose memories are all kept mapped (nothing to close)


class RequestPools:
    """The mapped pools of one request: shared memories (``views``),
    driver-managed buffers named by token (``buffers``, checked against
    their roles by ``buffer_lookup``, a :class:`buffers.TokenLookup`) and
    non-BLOB hardware buffers (``images``).  ``failure`` is set when a pool
    is well formed but cannot be used by this driver (GENERAL_FAILURE when
    the execution runs, as the memory guide recommends)."""

    __slots__ = ("views", "buffers", "images", "failure", "_maps")

    def __init__(self, request: hal.Request, buffer_lookup: Any = None, pool_cache: Any = None,
                 out_pools: Optional[frozenset] = None, keys: Optional[tuple] = None):
        """``pool_cache(memory, writable)``, when given, returns the view of a
        shared memory it keeps open across requests (a burst's memories by
        slot, the service's by slot), not closed with this object; None from
        it: the memory is opened for this request.  A device's
        :class:`~nnhal.driver.pool_cache.PoolCache` itself opens each memory
        once, kept or for this request (``PoolCache.open``; ``keys``: the
        pools' ``cache_key``, :attr:`RequestPlan.pool_keys`).
        ``out_pools``: the pools receiving outputs (:class:`RequestPlan`), when known."""
        opener = kept = None
        self.buffers: dict[int, buffers.DeviceBuffer] = _NO_BUFFERS
        self.images: dict[int, hardware_buffer.Image] = _NO_IMAGES
        self.failure = ""
        self._maps: list[hal_memory.MappedPool | hal_memory.FdPool] = _NO_MAPS
        if pool_cache.__class__ is PoolCache:
            if keys is not None:
                kept = pool_cache.kept_views(keys)  # NOTE: the memories kept mapped, checked all at once
                # NOTE: ``is`` tests, not ``None in kept``: that compares None with each memoryview (==), whose
                # failed buffer request formats an exception message per pool
                for v in kept:
                    if v is None:
                        break
                else:
                    self.views: list[Optional[memoryview]] = kept  # NOTE: the common case: every pool kept mapped
                    return
            opener = pool_cache.open
        self._maps = []
        self.views = []
        self.buffers, self.images = {}, {}
        # NOTE: a pool that receives outputs must be writable (a read-only
        # mmap_fd or hardware buffer there is a bad argument, not a crash);
        # pools only read are mapped read-only.
        if out_pools is None:
            out_pools = frozenset(a.location.poolIndex for a in request.outputs if not a.hasNoValue)
        tokens = False
        for k, pool in enumerate(request.pools):
            m = pool.hidlMemory
            if m is None:
                self.views.append(None)
                tokens = True
            elif m.name == "hardware_buffer":
                self.views.append(None)
                try:
                    self.images[k] = hardware_buffer.open_image(m, writable=k in out_pools)
                except hardware_buffer.ImageError as e:
                    if e.status != S.GENERAL_FAILURE:
                        self.close()
                        raise ValidationError(f"request pool {k}: {e}") from None
                    self.failure = self.failure or f"request pool {k}: {e}"
            else:
                try:
                    # NOTE: mapped only if sealed against shrinking, else pread/pwrite: no SIGBUS
                    if kept is not None and kept[k] is not None:
                        view = kept[k]
                    elif opener is not None:  # NOTE: a device's PoolCache: opened once, kept or for this request
                        view, mp = opener(m, k in out_pools, None if keys is None else keys[k])
                        if mp is not None:
                            self._maps.append(mp)
                    else:
                        view = pool_cache(m, k in out_pools) if pool_cache is not None else None
                        if view is None:
                            # NOTE: small pools used once are cheaper to pread/pwrite than to map and unmap
                            mp = hal_memory.open_pool(m, writable=k in out_pools,
                                                      map_min_bytes=hal_memory.MAP_MIN_BYTES)
                            self._maps.append(mp)
                            view = mp.view
                except hal_memory.InvalidMemory as e:
                    self.close()
                    raise ValidationError(f"request pool {k}: {e}") from None
                self.views.append(view)
        if tokens:  # NOTE: without token pools there is no buffer to resolve
            try:
                self.buffers = buffers.resolve_request(request, buffer_lookup,
                                                       getattr(buffer_lookup, "prepared", None))
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
        if self._maps:
            for mp in self._maps:
                mp.close()
            self._maps = []
        if self.images:
            for img in self.images.values():
                img.close()
            self.images = {}


class RequestPlan:
    """What an execution needs of a validated request, read once from the
    request and the model (plain values, nothing shared with either): per
    input None (hasNoValue) or ``(pool index, offset, length, operand, the
    request's dimensions, dims (the request's or else the model's), dtype or
    None, bytes needed, dims as a tuple, boolean)``; per output ``(hasNoValue, pool index, offset,
    length, the request's dimensions)``; the omitted outputs; the pools that
    receive outputs.  NOTE: a prepared model keeps the plan of each request
    structure it validated (``PreparedModel._validated_request``), so
    an execution of a known structure reads nothing twice."""

    __slots__ = ("inputs", "outputs", "omitted", "out_pools", "tokens", "pool_keys", "simple_inputs")

    def __init__(self, model: hal.Model, request: hal.Request):
        main = model.main
        self.inputs: list[Optional[tuple]] = []
        for arg, idx in zip(request.inputs, main.inputIndexes):
            if arg.hasNoValue:
                self.inputs.append(None)
                continue
            o = main.operands[idx]
            loc = arg.location
            given = list(arg.dimensions)
            dims = given or list(o.dimensions)
            # NOTE: an IntEnum-keyed dict finds the plain int too (same hash); an extension type of the
            # driver's carries its own
            dtype = NUMPY_DTYPE.get(o.type) if o.type.__class__ is not ExtensionOperandType else o.type.dtype
            # NOTE: math.prod: no numpy reduction per input
            need = math.prod(dims) * dtype.itemsize if dtype is not None else 0
            self.inputs.append((loc.poolIndex, loc.offset, loc.length, o, given, dims, dtype, need, tuple(dims),
                                dtype is not None and dtype.kind == "b"))
        self.outputs = [(a.hasNoValue, a.location.poolIndex, a.location.offset, a.location.length,
                         list(a.dimensions)) for a in request.outputs]
        self.omitted = [k for k, a in enumerate(self.outputs) if a[0]]
        self.out_pools = frozenset(a[1] for a in self.outputs if not a[0])
        self.tokens = any(p.hidlMemory is None for p in request.pools)  # driver-managed buffers named
        # NOTE: each pool's key in a device's PoolCache (None: not a memory it keeps), read once
        self.pool_keys = tuple(None if p.hidlMemory is None else cache_key(p.hidlMemory, k in self.out_pools)
                               for k, p in enumerate(request.pools))
        # NOTE: what a remembered request has proven once for all its executions: every input present, of a
        # known dtype other than bool, its location long enough: then per input (pool index, offset, shape,
        # dtype, bytes), all an execution reads of it (None: the general path checks each input)
        simple = [(p, off, shape, dtype, need) for p, off, length, _, _, _, dtype, need, shape, boolean
                  in filter(None, self.inputs) if dtype is not None and not boolean and length >= need]
        self.simple_inputs = simple if len(simple) == len(self.inputs) else None


class PoolInput:
    """An input still in its request pool, given to a backend that reads its
    inputs itself (``Compiled.reads_inputs``) so that it copies the bytes
    straight into its own buffer: ``shape``, ``dtype`` and ``nbytes`` as an
    array's, ``read_into(buffer)`` (a writable byte buffer of ``nbytes``)
    and ``array()`` (a private copy).  Reading raises
    ``nnhal.memory.InvalidMemory`` when the pool cannot be read (an unsealed
    memory shrunk since the launch): the backend lets it through and the
    execution answers INVALID_ARGUMENT, as for an input the front end reads."""

    __slots__ = ("shape", "dtype", "nbytes", "_view", "_offset")

    def __init__(self, view: Any, offset: int, shape: tuple, dtype: np.dtype, nbytes: int):
        self._view, self._offset = view, offset
        self.shape, self.dtype, self.nbytes = shape, dtype, nbytes

    def read_into(self, buf: memoryview) -> None:
        view = self._view
        if view.__class__ is hal_memory.FdPool:
            view.read_into(self._offset, buf)  # NOTE: pread straight into the buffer
        else:
            buf[:] = view[self._offset: self._offset + self.nbytes]

    def array(self) -> np.ndarray:
        arr = np.empty(self.nbytes // self.dtype.itemsize, self.dtype)
        self.read_into(memoryview(arr).cast("B"))
        return arr.reshape(self.shape)


def _failed(request: hal.Request, pools: RequestPools, status: hal.ErrorStatus,
            shapes: Optional[list[hal.OutputShape]] = None) -> Result:
    """The result of an execution that did not succeed, its output buffers made uninitialized (settled)."""
    pools.settle(request, status)
    return Result(status, shapes)


def _pool_input(view: Any, offset: int, shape: tuple, dtype: np.dtype, need: int, direct: bool) -> Any:
    """The input of ``need`` bytes at ``offset`` of a request pool's ``view`` (its dtype not bool): for a
    backend that reads its inputs itself (``direct``), an array over the bytes of a mapped pool (valid
    during the execution only: the backend copies it at once) or a :class:`PoolInput` of another; else
    an array of its own (the client may reuse its buffer at once)."""
    if view.__class__ is memoryview:
        # NOTE: one array over the pool's bytes (then a copy of its own): no intermediate slice nor byte array
        arr = np.ndarray(shape, dtype, view, offset)
        return arr if direct else arr.copy()
    if direct:
        return PoolInput(view, offset, shape, dtype, need)
    if view.__class__ is hal_memory.FdPool:
        # NOTE: pread straight into the input array (no intermediate buffer)
        arr = np.empty(need // dtype.itemsize, dtype)
        view.read_into(offset, memoryview(arr).cast("B"))
        return arr.reshape(shape)
    chunk = view[offset: offset + need]
    raw = np.frombuffer(chunk, dtype=np.uint8)
    # NOTE: a slice of a mapping is copied; anything else read is a private copy already (pread)
    return (raw.view(dtype).copy() if chunk.__class__ is memoryview else raw.view(dtype)).reshape(shape)


def _special_input(pools: RequestPools, p: int, given: list, o: hal.Operand, k: int) -> Optional[np.ndarray]:
    """An input from a driver-managed buffer or a hardware buffer image; None
    when the buffer is uninitialized."""
    buf = pools.buffers.get(p)
    if buf is not None:
        arr = buf.read(list(given))
        if arr is None:
            log.error("execution failed: input %d reads the uninitialized buffer of token %d", k, buf.token)
        return arr
    img = pools.images[p]
    dims = list(given) if given else list(o.dimensions)
    dtype = storage_dtype(operand_type(o.type))
    need = (int(np.prod(dims)) if dims else 1) * dtype.itemsize
    if need > img.capacity:
        raise ValidationError(f"request input {k}: {need} bytes needed, the hardware buffer {img.desc} holds "
                              f"{img.capacity}")
    try:
        raw = np.frombuffer(img.read(need), dtype=np.uint8)
    except hardware_buffer.ImageError as e:
        raise ValidationError(f"request input {k}: {e}") from None
    return (raw != 0 if dtype == np.bool_ else raw.view(dtype).copy()).reshape(dims)


def run_request(model: hal.Model, executor: Executor, request: hal.Request, pools: RequestPools,
                measure: hal.MeasureTiming, deadline_ns: Optional[int], loop_timeout_ns: int,
                driver_start_ns: int, plan: Optional[RequestPlan] = None) -> Result:
    """Runs a validated request (``plan``: its :class:`RequestPlan`, made here
    when not given); never raises.  An execution that does not succeed leaves
    its output buffers uninitialized (:func:`_failed`)."""
    if plan is None:
        plan = RequestPlan(model, request)
    if pools.failure:
        log.error("execution failed: %s", pools.failure)
        return _failed(request, pools, S.GENERAL_FAILURE)
    views = pools.views
    special = pools.buffers or pools.images  # NOTE: the common case has neither: one test per request
    # NOTE: a backend that reads its inputs itself (``reads_inputs``) is given arrays over the mapped
    # pools' bytes and PoolInputs of the others: it copies each straight into its own buffer (one copy,
    # no array of ours in between)
    direct = executor.reads_inputs
    simple = plan.simple_inputs if not special else None
    try:
        inputs: list[Any] = []
        if simple is not None:
            # NOTE: a request whose inputs the plan proved plain (RequestPlan.simple_inputs): only the reads
            for p, offset, shape, dtype, need in simple:
                inputs.append(_pool_input(views[p], offset, shape, dtype, need, direct))
        else:
            for k, spec in enumerate(plan.inputs):
                if spec is None:
                    inputs.append(None)
                    continue
                p, offset, length, o, given, dims, dtype, need, shape, boolean = spec
                if special and (p in pools.buffers or p in pools.images):
                    arr = _special_input(pools, p, given, o, k)
                    if arr is None:
                        return _failed(request, pools, S.GENERAL_FAILURE)
                    inputs.append(arr)
                    continue
                if dtype is None:
                    dtype = storage_dtype(operand_type(o.type))
                if length < need:
                    raise ValidationError(f"request input {k}: {need} bytes needed for {type_name(o.type)} "
                                          f"{dims}, the location has {length}")
                view = views[p]
                if not boolean:
                    inputs.append(_pool_input(view, offset, shape, dtype, need, direct))
                    continue
                raw = np.frombuffer(view[offset: offset + need], dtype=np.uint8)  # NOTE: an FdPool reads it here
                inputs.append((raw != 0).reshape(dims))
    except (ValidationError, hal_memory.InvalidMemory) as e:  # NOTE: InvalidMemory: a pool shrunk since the launch
        log.error("execution rejected: %s", e)
        return _failed(request, pools, S.INVALID_ARGUMENT)
    except Exception:  # NOTE: a driver bug reading the inputs: logged, never raised to the client
        log.exception("reading the execution's inputs failed unexpectedly")
        return _failed(request, pools, S.GENERAL_FAILURE)

    timed = measure == _YES
    device_start = time.monotonic_ns() if timed else 0
    try:
        outputs = executor.run(inputs, deadline_ns, loop_timeout_ns, plan.omitted)
    except hal_memory.InvalidMemory as e:  # NOTE: a PoolInput's pool shrunk since the launch
        log.error("execution rejected: %s", e)
        return _failed(request, pools, S.INVALID_ARGUMENT)
    except DeadlineMissed as e:
        log.error("execution: %s", e)
        return _failed(request, pools, S.MISSED_DEADLINE_TRANSIENT)
    except BadData as e:
        log.error("execution failed: %s", e)
        return _failed(request, pools, S.INVALID_ARGUMENT)
    except OpExecutionError as e:
        log.error("execution failed: %s", e)
        return _failed(request, pools, S.GENERAL_FAILURE)
    except Exception:  # never let a bug reach the client as an exception
        log.exception("execution failed unexpectedly")
        return _failed(request, pools, S.GENERAL_FAILURE)
    device_end = time.monotonic_ns() if timed else 0

    shapes: list[hal.OutputShape] = []
    sufficient = True
    for k, ((none, p, _, length, given), arr) in enumerate(zip(plan.outputs, outputs)):
        dims = list(arr.shape)  # NOTE: numpy shapes hold plain ints
        buf = pools.buffers.get(p) if special and not none else None
        if buf is not None and not buf.fits(dims):
            # NOTE: as Android's reference: a device memory too small for the output is the
            # driver's GENERAL_FAILURE, not OUTPUT_INSUFFICIENT_SIZE (the client cannot grow it)
            log.error("output %d has shape %s, the buffer of token %d is fixed to %s", k, dims, buf.token,
                      list(buf.fixed_dims))
            return _failed(request, pools, S.GENERAL_FAILURE)
        ok = none or buf is not None or arr.nbytes <= (_capacity(pools, p, length) if special else length)
        if given and any(d and d != a for d, a in zip(given, dims)):
            log.error("output %d has shape %s, the request said %s", k, dims, given)
            return _failed(request, pools, S.GENERAL_FAILURE)
        if not ok:
            log.error("output %d needs %d bytes, the request gives %d", k, arr.nbytes, _capacity(pools, p, length))
        sufficient &= ok
        shape = _new(_OutputShape)  # NOTE: the dataclass's __init__, without its call overhead
        shape.__dict__ = {"dimensions": dims, "isSufficient": ok is True or bool(ok)}
        shapes.append(shape)
    if not sufficient:
        return _failed(request, pools, S.OUTPUT_INSUFFICIENT_SIZE, shapes)
    written: list[tuple[buffers.DeviceBuffer, bytes, list[int]]] = [] if special else _NOTHING_WRITTEN
    try:
        for (none, p, off, _, _), arr, shape in zip(plan.outputs, outputs, shapes):
            if none:
                continue
            if special and p in pools.buffers:  # NOTE: stored once every output is written (all or nothing)
                written.append((pools.buffers[p], buffers.DeviceBuffer.encode(arr), list(shape.dimensions)))
                continue
            n = arr.nbytes
            if n == 0:
                continue
            if special and p in pools.images:
                pools.images[p].write(buffers.DeviceBuffer.encode(arr))
                continue
            view = views[p]
            if n <= _SMALL_OUTPUT:
                data = arr.tobytes()  # NOTE: for a few KiB, a copy costs less than a cast byte view of the array
            else:
                try:
                    data = memoryview(arr).cast("B")  # NOTE: the array's own bytes, no copy
                except TypeError:  # not C-contiguous (or an odd format): one contiguous copy
                    data = np.ascontiguousarray(arr).view(np.uint8).reshape(-1)
            if view.__class__ is hal_memory.FdPool:
                view.write_at(off, data)
            else:
                view[off: off + n] = data
    except (TypeError, ValueError, IndexError, OSError) as e:  # never let a bad pool reach the client as an exception
        log.error("writing the outputs failed: %s", e)
        return _failed(request, pools, S.GENERAL_FAILURE)
    for buf, data, dims in written:
        buf.store(data, dims)
    # NOTE: the success made with object.__new__ and its slots set (no class call, no __init__ frame)
    result = _new(Result)
    result.status, result.outputShapes = _NONE, shapes
    if timed:
        end = time.monotonic_ns()
        result.timing = hal.Timing(timeOnDevice=_us(device_end - device_start), timeInDriver=_us(end - driver_start_ns))
    else:
        result.timing = _Timing()  # NOTE: the call's own (the client may change what it is given)
    return result


_YES = hal.MeasureTiming.YES
_NOTHING_WRITTEN: list = []  # NOTE: never appended to (only requests with driver-managed buffers store any)
_SMALL_OUTPUT = 4096  # bytes: outputs up to this size are written from a copy (arr.tobytes())


def _capacity(pools: RequestPools, p: int, length: int) -> int:
    img = pools.images.get(p)
    return img.capacity if img is not None else length


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
