"""Driver-managed buffers: the memory domains of NN HAL 1.3 (``IDevice.allocate``,
``IBuffer.copyTo`` / ``copyFrom`` and ``Request.MemoryPool.token``).

Implements the rules of ``IDevice::allocate`` and ``IBuffer`` (1.3) and of the
memory-domain guide, as VTS's MemoryDomainTests check them:

- ``allocate`` validates the descriptor and the roles (no roles, a null or
  foreign prepared model, modelIndex / ioIndex out of range, frequency
  outside (0, 1], a role given twice, operands that differ in type, scale,
  zeroPoint or extraParams, dimensions that conflict between the roles and
  the descriptor): INVALID_ARGUMENT, no buffer and token 0.  Extension and
  OEM operand types, or a buffer too large for a ``uint32`` byte size, are
  GENERAL_FAILURE ("a certain role or property is not supported").
- A buffer starts uninitialized; a successful ``copyFrom`` or a successful
  execution that writes it as an output initializes it; a failed
  ``copyFrom`` or a failed execution that had it as an output makes it
  uninitialized again.  Reading an uninitialized buffer (``copyTo``, or an
  execution input) is GENERAL_FAILURE.
- Unlike Android's reference driver, buffers of unknown dimensions or rank
  are supported, as the guide describes: the allocation keeps the combined
  dimensions of the descriptor and the roles (0 = unknown axis, [] = unknown
  rank) as the buffer's *fixed* axes; ``copyFrom`` (with fully specified
  dimensions) or an execution output sets the current shape, which may
  differ from one execution to the next as long as the fixed axes hold.
  When read as an input, the current shape is the input's shape (a request
  that names other dimensions is INVALID_ARGUMENT).
- At most ``MAX_LIVE_BUFFERS`` buffers live per device (beyond: GENERAL_FAILURE).
- Tokens are positive ``uint32``, never reused while the process lives
  (until 2**32 - 1 allocations wrap around, skipping live tokens), so a
  freed buffer's token is INVALID_ARGUMENT afterwards.  A buffer is freed
  when its ``IBuffer`` is garbage-collected or ``close()``-d; an execution
  already running keeps the storage it resolved.
- Concurrency: each buffer's content and shape are one immutable snapshot
  replaced under a per-buffer lock that is held only to swap references
  (never during an execution or a copy).  Concurrent readers therefore
  always see a complete content; concurrent writers never block each other
  for long or crash, and the last writer to finish wins (the guide leaves
  concurrent writes undefined; here every read sees one whole write).
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from nnhal import hal
from nnhal.driver.guard import hal_methods
from nnhal.driver.hardware_buffer import ImageError, open_image
from nnhal.engine.validation import ValidationError, is_tensor, operand_byte_size
from nnhal.ops.base import MAX_RANK, NUMPY_DTYPE
from nnhal.ops.extension import ExtensionOperandType, operand_type, storage_dtype, type_name
from nnhal.platform import memory as hal_memory

log = logging.getLogger("nnhal.driver")

S = hal.ErrorStatus
T = hal.OperandType

INPUT, OUTPUT = "input", "output"
UINT32_MAX = 2**32 - 1
# NOTE: the guide lets a driver refuse what its memory limits cannot hold; a bound on live
# buffers keeps a client from growing the registry without limit (GENERAL_FAILURE beyond it)
MAX_LIVE_BUFFERS = 1 << 16


class AllocateError(Exception):
    """An allocation refused with ``status`` (the message says why)."""

    def __init__(self, status: S, message: str):
        super().__init__(message)
        self.status = status


# --------------------------------------------------------------------------
# dimensions


def combine_dims(a: Sequence[int], b: Sequence[int]) -> Optional[list[int]]:
    """The most specific dimensions compatible with both (``[]`` is an unknown
    rank, ``0`` an unknown axis), or None when some axis is fully specified
    in both with different values, or the ranks differ."""
    if not a:
        return list(b)
    if not b:
        return list(a)
    if len(a) != len(b):
        return None
    out = []
    for x, y in zip(a, b):
        if x and y and x != y:
            return None
        out.append(x or y)
    return out


def fully_specified(dims: Sequence[int], tensor: bool) -> bool:
    return not tensor or (len(dims) > 0 and all(dims))


# --------------------------------------------------------------------------
# the buffer


@dataclass(frozen=True)
class Snapshot:
    """One consistent state of a buffer: content bytes, shape, initialized."""

    data: bytes
    dims: tuple[int, ...]
    initialized: bool


class DeviceBuffer:
    """The driver side of one allocated buffer (what a token resolves to)."""

    def __init__(self, token: int, operand: hal.Operand, dims: list[int], roles: set):
        self.token = token
        self.type = operand_type(operand.type)  # NOTE: an extension type of the driver's stays resolved
        self.dtype = storage_dtype(self.type)
        self.scale, self.zeroPoint = operand.scale, operand.zeroPoint
        self.tensor = is_tensor(operand)
        self.fixed_dims = tuple(dims)  # the combined dimensions of the descriptor and the roles
        self._operand = hal.Operand(type=self.type, dimensions=list(dims))
        self.roles = roles  # {(weakref to prepared model, INPUT | OUTPUT, ioIndex)}
        self._lock = threading.Lock()
        self._state = Snapshot(b"", tuple(dims), False)

    # ------------------------------------------------------------------ state
    def snapshot(self) -> Snapshot:
        with self._lock:
            return self._state

    def store(self, data: bytes, dims: Sequence[int]) -> None:
        state = Snapshot(data, tuple(int(d) for d in dims), True)
        with self._lock:
            self._state = state

    def invalidate(self) -> None:
        with self._lock:
            self._state = Snapshot(b"", self.fixed_dims, False)

    def byte_size(self, dims: Sequence[int]) -> int:
        return operand_byte_size(self._operand, list(dims))

    def has_role(self, prepared: Any, io: str, index: int) -> bool:
        try:
            ref = weakref.ref(prepared)
        except TypeError:
            return False
        return (ref, io, index) in self.roles

    def check_dims(self, dims: Sequence[int], what: str) -> list[int]:
        """``dims`` combined with the fixed axes, or ValidationError."""
        combined = combine_dims(self.fixed_dims, dims)
        if combined is None:
            raise ValidationError(f"{what}: dimensions {list(dims)} conflict with the buffer's "
                                  f"{list(self.fixed_dims)}")
        return combined

    # ------------------------------------------------------------------ execution I/O
    def read(self, request_dims: Sequence[int]) -> Optional[np.ndarray]:
        """The content as an execution input (a private copy), or None when
        the buffer is uninitialized (GENERAL_FAILURE)."""
        state = self.snapshot()
        if not state.initialized:
            return None
        if request_dims and combine_dims(state.dims, request_dims) is None:
            raise ValidationError(f"the request's dimensions {list(request_dims)} conflict with the buffer's "
                                  f"current shape {list(state.dims)}")
        raw = np.frombuffer(state.data, dtype=np.uint8)
        arr = (raw != 0) if self.dtype == np.bool_ else raw.view(self.dtype).copy()
        return arr.reshape(state.dims)

    def fits(self, shape: Sequence[int]) -> bool:
        """Whether an output of ``shape`` may be written here (the fixed axes hold)."""
        return combine_dims(self.fixed_dims, shape) is not None

    @staticmethod
    def encode(arr: np.ndarray) -> bytes:
        return np.ascontiguousarray(arr).view(np.uint8).tobytes()


# --------------------------------------------------------------------------
# IBuffer


@hal_methods
class Buffer(hal.IBuffer):
    """``IBuffer`` of the sample driver.  Dropping it (or ``close()``) frees
    the buffer: its token is unknown from then on."""

    def __init__(self, buffer: DeviceBuffer, registry: "BufferRegistry"):
        self._buffer: Optional[DeviceBuffer] = buffer
        self.token = buffer.token
        self._free = weakref.finalize(self, registry.release, buffer.token)

    def close(self) -> None:
        """Frees the buffer now (idempotent)."""
        self._buffer = None
        self._free()

    def _live(self, what: str) -> Optional[DeviceBuffer]:
        buf = self._buffer
        if buf is None:
            log.error("IBuffer.%s: the buffer (token %d) has been freed", what, self.token)
        return buf

    def copyTo(self, dst: Any) -> S:
        buf = self._live("copyTo")
        if buf is None:
            return S.GENERAL_FAILURE
        try:
            target = _open(dst, writable=True)
        except ValidationError as e:
            log.error("IBuffer.copyTo: invalid destination memory: %s", e)
            return S.INVALID_ARGUMENT
        except ImageError as e:
            log.error("IBuffer.copyTo: %s", e)
            return e.status
        try:
            state = buf.snapshot()
            if not state.initialized:
                log.error("IBuffer.copyTo: the buffer (token %d) is uninitialized", buf.token)
                return S.GENERAL_FAILURE
            if target.size != len(state.data):
                log.error("IBuffer.copyTo: the destination has %d bytes, the buffer %d (%s %s)", target.size,
                          len(state.data), buf.type.name, list(state.dims))
                return S.INVALID_ARGUMENT
            target.write(state.data)
            return S.NONE
        except (hal_memory.InvalidMemory, ImageError) as e:  # the client shrank or closed its memory meanwhile
            log.error("IBuffer.copyTo: %s", e)
            return S.INVALID_ARGUMENT
        except Exception:  # NOTE: never let a bad memory reach the client as an exception
            log.exception("IBuffer.copyTo failed")
            return S.GENERAL_FAILURE
        finally:
            target.close()

    def copyFrom(self, src: Any, dimensions: Any) -> S:
        buf = self._live("copyFrom")
        if buf is None:
            return S.GENERAL_FAILURE
        status = self._copy_from(buf, src, dimensions)
        if status != S.NONE:
            buf.invalidate()  # NOTE: the spec: a failed copyFrom leaves the buffer uninitialized
        return status

    @staticmethod
    def _copy_from(buf: DeviceBuffer, src: Any, dimensions: Any) -> S:
        try:
            dims = _u32_list(dimensions, "dimensions")
            if len(dims) > MAX_RANK:
                log.error("IBuffer.copyFrom: dimensions of rank %d; this driver holds tensors of rank up to %d",
                          len(dims), MAX_RANK)
                return S.GENERAL_FAILURE
            if not buf.tensor and dims:
                raise ValidationError(f"a {buf.type.name} buffer takes no dimensions, got {dims}")
            if buf.tensor:
                if not dims and not fully_specified(buf.fixed_dims, True):
                    raise ValidationError(f"the buffer's dimensions {list(buf.fixed_dims)} are not fully specified "
                                          "and copyFrom gives none")
                if dims and not fully_specified(dims, True):
                    raise ValidationError(f"copyFrom dimensions {dims} are not fully specified")
                dims = buf.check_dims(dims, "copyFrom")
            source = _open(src, writable=False)
        except ValidationError as e:
            log.error("IBuffer.copyFrom: %s", e)
            return S.INVALID_ARGUMENT
        except ImageError as e:
            log.error("IBuffer.copyFrom: %s", e)
            return e.status
        try:
            need = buf.byte_size(dims)
            if source.size != need:
                log.error("IBuffer.copyFrom: the source has %d bytes, %s %s needs %d", source.size, buf.type.name,
                          dims, need)
                return S.INVALID_ARGUMENT
            buf.store(source.read(need), dims)
            return S.NONE
        except (hal_memory.InvalidMemory, ImageError) as e:  # the client shrank or closed its memory meanwhile
            log.error("IBuffer.copyFrom: %s", e)
            return S.INVALID_ARGUMENT
        except Exception:
            log.exception("IBuffer.copyFrom failed")
            return S.GENERAL_FAILURE
        finally:
            source.close()


class _Mapped:
    """A client memory opened for one copy: ``size``, ``read``, ``write``."""

    def __init__(self, memory: hal.Memory, writable: bool):
        self._image: Any = None
        self._pool: Any = None
        if memory.name == "hardware_buffer":
            # NOTE: the guide makes non-BLOB hardware buffers optional for IBuffer copies;
            # the same emulation as for execution inputs and outputs serves them.
            self._image = open_image(memory, writable)
            self.size = self._image.capacity
        else:
            # NOTE: read or written once: pread/pwrite (no SIGBUS, no mapping made and torn down per copy), as a
            # request pool used once; a memory of MAP_MIN_BYTES and more, mapped when the client cannot shrink it
            self._pool = hal_memory.open_pool(memory, writable=writable, map_min_bytes=hal_memory.MAP_MIN_BYTES)
            self.size = self._pool.size

    def read(self, n: int) -> bytes:
        return self._image.read(n) if self._image is not None else bytes(self._pool.view[:n])

    def write(self, data: bytes) -> None:
        if self._image is not None:
            self._image.write(data)
        else:
            self._pool.view[: len(data)] = data

    def close(self) -> None:
        if self._image is not None:
            self._image.close()
        if self._pool is not None:
            self._pool.close()


def _open(memory: Any, writable: bool) -> _Mapped:
    if not isinstance(memory, hal.Memory):
        raise ValidationError(f"not a hal.Memory: {type(memory).__name__}")
    try:
        return _Mapped(memory, writable)
    except ImageError:
        raise  # NOTE: carries its own status (GENERAL_FAILURE for an unsupported format or usage)
    except hal_memory.InvalidMemory as e:
        raise ValidationError(str(e)) from None
    except Exception as e:  # NOTE: junk inside the Memory (handle, fds, size) is a bad argument too
        raise ValidationError(f"malformed memory ({type(e).__name__}: {e})") from None


def _u32_list(x: Any, what: str) -> list[int]:
    if not isinstance(x, (list, tuple)) or not all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) and 0 <= v <= UINT32_MAX for v in x):
        raise ValidationError(f"{what} is not a list of uint32: {x!r}")
    return [int(v) for v in x]


# --------------------------------------------------------------------------
# allocation and tokens

# NOTE: one token sequence for every registry of the process, so a token is
# never valid on two devices at once (a mix-up is then an unknown token).
_TOKENS = itertools.count(0)
_TOKENS_LOCK = threading.Lock()


class BufferRegistry:
    """The live buffers of one device, by token (Android's BufferTracker)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buffers: dict[int, DeviceBuffer] = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._buffers)

    def lookup(self, token: Any) -> Optional[DeviceBuffer]:
        if not _is_u32(token):
            return None
        with self._lock:
            return self._buffers.get(int(token))

    def release(self, token: int) -> None:
        with self._lock:
            self._buffers.pop(token, None)

    def _new_token(self) -> int:
        with _TOKENS_LOCK:
            while True:
                t = next(_TOKENS) % UINT32_MAX + 1  # NOTE: wraps around after 2**32 - 1 tokens, skipping live ones
                with self._lock:
                    if t not in self._buffers:
                        return t

    def allocate(self, device: Any, desc: Any, preparedModels: Any, inputRoles: Any, outputRoles: Any) -> tuple:
        """``IDevice.allocate`` for ``device``: (status, IBuffer or None, token)."""
        try:
            operand, dims, roles = validate_allocation(device, desc, preparedModels, inputRoles, outputRoles)
        except AllocateError as e:
            log.error("allocate: %s", e)
            return e.status, None, 0
        except Exception as e:  # NOTE: odd objects in the arguments are a bad argument, never a crash
            log.error("allocate: malformed argument (%s: %s)", type(e).__name__, e)
            return S.INVALID_ARGUMENT, None, 0
        if len(self) >= MAX_LIVE_BUFFERS:
            log.error("allocate: %d buffers are alive, the most this driver keeps", MAX_LIVE_BUFFERS)
            return S.GENERAL_FAILURE, None, 0
        token = self._new_token()
        buf = DeviceBuffer(token, operand, dims, roles)
        with self._lock:
            self._buffers[token] = buf
        log.debug("allocate: token %d, %s %s, %d role(s)", token, buf.type.name, dims, len(roles))
        return S.NONE, Buffer(buf, self), token


def _role_list(x: Any, what: str) -> list[hal.BufferRole]:
    if not isinstance(x, (list, tuple)):
        raise AllocateError(S.INVALID_ARGUMENT, f"{what} is not a list")
    for k, r in enumerate(x):
        if not isinstance(r, hal.BufferRole):
            raise AllocateError(S.INVALID_ARGUMENT, f"{what}[{k}] is not a BufferRole")
    return list(x)


def validate_allocation(device: Any, desc: Any, preparedModels: Any, inputRoles: Any,
                        outputRoles: Any) -> tuple[hal.Operand, list[int], set]:
    """The operand of the roles, the combined dimensions and the role set, or
    AllocateError with the status and the reason."""
    bad = S.INVALID_ARGUMENT
    if not isinstance(desc, hal.BufferDesc):
        raise AllocateError(bad, f"desc is not a BufferDesc: {type(desc).__name__}")
    try:
        desc_dims = _u32_list(desc.dimensions, "desc.dimensions")
    except ValidationError as e:
        raise AllocateError(bad, str(e)) from None
    if len(desc_dims) > MAX_RANK:
        raise AllocateError(S.GENERAL_FAILURE, f"desc.dimensions of rank {len(desc_dims)}: this driver holds "
                                               f"tensors of rank up to {MAX_RANK}")
    if not isinstance(preparedModels, (list, tuple)) or not preparedModels:
        raise AllocateError(bad, "no prepared models")
    for k, pm in enumerate(preparedModels):
        if pm is None:
            raise AllocateError(bad, f"preparedModels[{k}] is null")
        if getattr(pm, "device", None) is not device or not isinstance(getattr(pm, "model", None), hal.Model):
            raise AllocateError(bad, f"preparedModels[{k}] was not prepared by this device "
                                     f"({type(pm).__name__})")
    ins, outs = _role_list(inputRoles, "inputRoles"), _role_list(outputRoles, "outputRoles")
    if not ins and not outs:
        raise AllocateError(bad, "no input or output roles")
    roles: set = set()
    operands: list[tuple[str, hal.Operand]] = []
    for io, role_list in ((INPUT, ins), (OUTPUT, outs)):
        for k, r in enumerate(role_list):
            where = f"{io} role {k}"
            if not _is_u32(r.modelIndex) or r.modelIndex >= len(preparedModels):
                raise AllocateError(bad, f"{where}: modelIndex {r.modelIndex!r} out of range "
                                         f"({len(preparedModels)} prepared models)")
            pm = preparedModels[r.modelIndex]
            main = pm.model.main
            indexes = main.inputIndexes if io == INPUT else main.outputIndexes
            if not _is_u32(r.ioIndex) or r.ioIndex >= len(indexes):
                raise AllocateError(bad, f"{where}: ioIndex {r.ioIndex!r} out of range (the model has "
                                         f"{len(indexes)} {io}s)")
            f = r.frequency
            if not isinstance(f, (int, float, np.floating)) or isinstance(f, bool) or math.isnan(f) \
                    or not 0.0 < f <= 1.0:
                raise AllocateError(bad, f"{where}: frequency {f!r} is not in (0, 1]")
            key = (weakref.ref(pm), io, int(r.ioIndex))
            if key in roles:
                raise AllocateError(bad, f"{where}: the role ({io} {r.ioIndex} of model {r.modelIndex}) is "
                                         "given twice")
            roles.add(key)
            operands.append((where, main.operands[indexes[r.ioIndex]]))
    first_where, first = operands[0]
    dims = desc_dims
    for where, o in operands:
        if int(o.type) != int(first.type):
            raise AllocateError(bad, f"{where}: operand type {_type_name(o.type)} differs from "
                                     f"{_type_name(first.type)} ({first_where})")
        if o.scale != first.scale or o.zeroPoint != first.zeroPoint:
            raise AllocateError(bad, f"{where}: scale/zeroPoint {o.scale}/{o.zeroPoint} differ from "
                                     f"{first.scale}/{first.zeroPoint} ({first_where})")
        if o.extraParams != first.extraParams:
            raise AllocateError(bad, f"{where}: extraParams differ from {first_where}'s")
        combined = combine_dims(dims, list(o.dimensions))
        if combined is None:
            raise AllocateError(bad, f"{where}: dimensions {list(o.dimensions)} conflict with {dims} (the "
                                     "descriptor and the other roles)")
        dims = combined
    if first.type.__class__ is not ExtensionOperandType and (
            int(first.type) not in T._value2member_map_ or T(first.type) not in NUMPY_DTYPE
            or T(first.type) in (T.TENSOR_OEM_BYTE,)):
        raise AllocateError(S.GENERAL_FAILURE, f"operand type {_type_name(first.type)} is not supported in "
                                               "driver-managed buffers")
    if not is_tensor(first) and dims:
        raise AllocateError(bad, f"a {_type_name(first.type)} scalar buffer cannot have dimensions {dims}")
    if fully_specified(dims, is_tensor(first)) and operand_byte_size(first, dims) > UINT32_MAX:
        raise AllocateError(S.GENERAL_FAILURE, f"a buffer of {_type_name(first.type)} {dims} is larger than "
                                               "4 GiB")
    return first, dims, roles


def _is_u32(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool) and 0 <= x <= UINT32_MAX


def _type_name(t: Any) -> str:
    return type_name(t)


# --------------------------------------------------------------------------
# requests


class TokenLookup:
    """Resolves the memory tokens of one prepared model's requests."""

    def __init__(self, registry: BufferRegistry, prepared: Any):
        self.registry, self.prepared = registry, prepared

    def __call__(self, token: Any) -> Optional[DeviceBuffer]:
        return self.registry.lookup(token)


def resolve_request(request: hal.Request, lookup: Any, prepared: Any) -> dict[int, DeviceBuffer]:
    """The buffers of a request's token pools, by pool index, after checking
    every use against the roles given at allocation (VTS MemoryDomainTests):
    an unknown token, a role not allocated for this prepared model and
    input/output index, one buffer as input and output or as two outputs,
    or dimensions that conflict with the buffer: ValidationError
    (INVALID_ARGUMENT).  An uninitialized buffer read as an input is left
    for the execution to report (GENERAL_FAILURE)."""
    buffers: dict[int, DeviceBuffer] = {}
    for k, pool in enumerate(request.pools):
        if pool.hidlMemory is None:
            buf = lookup(pool.token) if lookup is not None else None
            if buf is None:
                raise ValidationError(f"request pool {k}: unknown memory token {pool.token}")
            buffers[k] = buf
    if not buffers:
        return buffers
    # NOTE: uses are tracked per buffer, not per pool: two pools may name the same token
    as_input: set[int] = set()
    as_output: set[int] = set()
    for io, args in ((INPUT, request.inputs), (OUTPUT, request.outputs)):
        for i, arg in enumerate(args):
            if arg.hasNoValue or arg.location.poolIndex not in buffers:
                continue
            p = arg.location.poolIndex
            buf = buffers[p]
            if not buf.has_role(prepared, io, i):
                raise ValidationError(f"request {io} {i}: the buffer of pool {p} (token {buf.token}) was not "
                                      f"allocated for {io} {i} of this prepared model")
            if (io == OUTPUT and (buf.token in as_input or buf.token in as_output)) or \
                    (io == INPUT and buf.token in as_output):
                raise ValidationError(f"request {io} {i}: the buffer of pool {p} (token {buf.token}) is "
                                      "already used as an output or an input")
            buf.check_dims(list(arg.dimensions), f"request {io} {i}")
            if io == INPUT and arg.dimensions:
                state = buf.snapshot()
                if state.initialized and combine_dims(state.dims, list(arg.dimensions)) is None:
                    raise ValidationError(f"request input {i}: dimensions {list(arg.dimensions)} conflict with "
                                          f"the buffer's current shape {list(state.dims)}")
            (as_input if io == INPUT else as_output).add(buf.token)
    return buffers
