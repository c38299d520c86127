"""Model and request validation, as HAL 1.3 ``types.hal`` and Android's
``ValidateHal.cpp`` define it; shared by the driver and any client.

Everything here raises :class:`ValidationError` (reported as
INVALID_ARGUMENT) with a message naming the operand, operation or argument
at fault.  Operation signatures come from the operation registry
(:mod:`nnhal.ops`), so validation, ``getSupportedOperations`` and error
messages share one declaration per operation.

Control-flow nesting: types.hal sets no limit on how deeply IF / WHILE
operations may nest referenced subgraphs, so a deep model is *valid*, and
this driver runs any depth: validation never recurses (:func:`subgraph_depths`
is an iterative search visiting each subgraph once) and neither does the
executor (it keeps its own stack of running subgraphs).  INVALID_ARGUMENT is
kept for models the spec calls invalid (a circular reference among them).
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import logging
import math
import numbers
import re
from typing import Any, Optional, Sequence

import numpy as np

from nnhal import hal
from nnhal.hal import HalVersion
from nnhal.hal.aidl.types import TokenValuePair
from nnhal.ops import registry
from nnhal.ops.base import MAX_RANK, OpDef, OpInfo, OpValidationError, match_signature
from nnhal.ops.extension import (
    Extension,
    ExtensionOperandType,
    ModelExtensions,
    check_params,
    operand_type,
    type_name,
)
from nnhal.ops.extension import resolve as resolve_extensions
from nnhal.ops.operands import constant_value, operand_info

log = logging.getLogger("nnhal.engine.validation")

T = hal.OperandType
L = hal.OperandLifeTime

MEMORY_NAMES_V1_0 = ("ashmem", "mmap_fd")
MEMORY_NAMES_V1_2 = ("ashmem", "mmap_fd", "hardware_buffer_blob", "hardware_buffer")

_SCALAR = {T.FLOAT16, T.FLOAT32, T.INT32, T.UINT32, T.BOOL, T.SUBGRAPH, T.OEM}
_TENSOR = {T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED,
           T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT16_ASYMM, T.TENSOR_QUANT16_SYMM, T.TENSOR_BOOL8,
           T.TENSOR_QUANT8_SYMM_PER_CHANNEL, T.TENSOR_OEM_BYTE}
# scale must be exactly 0
_ZERO_SCALE = {T.FLOAT16, T.FLOAT32, T.INT32, T.UINT32, T.BOOL, T.SUBGRAPH, T.TENSOR_FLOAT16, T.TENSOR_FLOAT32,
               T.TENSOR_BOOL8, T.TENSOR_QUANT8_SYMM_PER_CHANNEL}
_POSITIVE_SCALE = {T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT16_ASYMM,
                   T.TENSOR_QUANT16_SYMM}
# zeroPoint range per type (others: must be 0)
_ZERO_POINT_RANGE = {T.TENSOR_QUANT8_ASYMM: (0, 255), T.TENSOR_QUANT8_ASYMM_SIGNED: (-128, 127),
                     T.TENSOR_QUANT16_ASYMM: (0, 65535)}
_NO_EXTRA_PARAMS = (_SCALAR | _TENSOR) - {T.TENSOR_QUANT8_SYMM_PER_CHANNEL, T.OEM, T.TENSOR_OEM_BYTE}

EXTENSION_TYPE_BITS = 16
UINT32_MAX = 0xFFFFFFFF


class ValidationError(ValueError):
    """The model, request or argument is invalid: INVALID_ARGUMENT, or the
    ``status`` given (a request refused at launch for what the execution would
    answer anyway: a required operand omitted, a rank the kernels cannot hold)."""

    def __init__(self, msg: str, status: hal.ErrorStatus = hal.ErrorStatus.INVALID_ARGUMENT):
        super().__init__(msg)
        self.status = status


def _fail(msg: str, status: hal.ErrorStatus = hal.ErrorStatus.INVALID_ARGUMENT) -> ValidationError:
    return ValidationError(msg, status)


def is_extension_type(t: int) -> bool:
    return (int(t) >> EXTENSION_TYPE_BITS) != 0


def _fundamental_operand_type(t: int) -> bool:
    return t in T._value2member_map_


# NOTE: a model sent through a 1.0-1.2 method may only use the operand types of
# that version's enum (as ValidateHal's validOperandType per versioned type).
_OPERAND_TYPES_V1_0 = frozenset({T.FLOAT32, T.INT32, T.UINT32, T.TENSOR_FLOAT32, T.TENSOR_INT32,
                                 T.TENSOR_QUANT8_ASYMM, T.OEM, T.TENSOR_OEM_BYTE})
_OPERAND_TYPES_V1_2 = frozenset(t for t in T if t not in (T.TENSOR_QUANT8_ASYMM_SIGNED, T.SUBGRAPH))


def valid_operand_type(t: int, model: hal.Model, version: HalVersion = HalVersion.V1_3) -> bool:
    if _fundamental_operand_type(t):
        if version < HalVersion.V1_2:
            return t in _OPERAND_TYPES_V1_0
        return version >= HalVersion.V1_3 or t in _OPERAND_TYPES_V1_2
    return version >= HalVersion.V1_2 and is_extension_type(t) and _extension_prefix_known(t, model)


def _extension_prefix_known(t: int, model: hal.Model) -> bool:
    prefix = int(t) >> EXTENSION_TYPE_BITS
    return any(p.prefix == prefix for p in model.extensionNameToPrefix)


def operand_byte_size(operand: hal.Operand, dims: Optional[Sequence[int]] = None) -> int:
    """Bytes of a non-extension operand's value (0 if a dimension is unknown)."""
    dims = list(operand.dimensions if dims is None else dims)
    t = operand.type
    if t.__class__ is ExtensionOperandType:  # NOTE: resolved against the device's declaration
        size = t.byte_size
        if not t.is_tensor:
            return size
    else:
        size = hal.OPERAND_TYPE_BYTE_SIZE.get(T(t), 0) if _fundamental_operand_type(t) else 0
    for d in dims:
        size *= d
    return size


# --------------------------------------------------------------------------
# by value: HIDL passes models, requests and capabilities by value, so what a
# driver keeps must be its own.  The copies are made before validation, so
# the model (request) validated is the one prepared (executed).

_KIND: dict[type, int] = {int: 0, float: 0, bool: 0, str: 0, bytes: 0, type(None): 0, list: 1, tuple: 2,
                          bytearray: 4, memoryview: 4}


def _kind(t: type) -> int:
    """0 immutable, 1 list, 2 tuple, 3 dataclass, 4 bytes-like, 5 other (cached per type)."""
    k = _KIND.get(t)
    if k is None:
        if issubclass(t, (enum.Enum, np.generic)):
            k = 0
        elif dataclasses.is_dataclass(t) and not getattr(t, "__slots__", None):
            k = 3
        else:
            k = 5
        _KIND[t] = k
    return k


def _own(x: Any) -> Any:
    """A deep copy of a HAL value: dataclasses and lists rebuilt, immutable
    leaves shared.  NOTE: a dataclass is rebuilt from its ``__dict__`` (a
    fraction of a microsecond an object, several times faster than
    ``copy.deepcopy``); anything unexpected (junk that validation will
    reject) goes to ``copy.deepcopy``."""
    k = _kind(type(x))
    if k == 0:
        return x
    if k == 3:
        new = object.__new__(type(x))
        # NOTE: the dict copied whole, then its mutable values replaced by their copies (the keys stay: no
        # resize during the loop); ~20% faster than a comprehension building a new dict
        d = x.__dict__.copy()
        for n, v in d.items():
            if _KIND.get(type(v)) != 0:
                d[n] = _own(v)
        new.__dict__ = d
        return new
    if k == 1:
        return [v if _KIND.get(type(v)) == 0 else _own(v) for v in x]
    if k == 2:
        return tuple(_own(v) for v in x)
    if k == 4:
        return bytes(x)
    return copy.deepcopy(x)


def own_copy(value: Any) -> Any:
    """The driver's own deep copy of a model, request or capabilities (any
    HAL value); ``bytearray`` / ``memoryview`` fields (``operandValues``)
    become ``bytes``, copied once.  Raises ValidationError if ``value`` cannot
    be copied (a hostile object)."""
    try:
        return _own(value)
    except Exception as e:  # NOTE: RecursionError on absurdly nested junk included
        raise _fail(f"malformed argument ({type(e).__name__}: {e})") from None


def _own_dims(d: Any) -> list:
    if type(d) is list:
        c = d.copy()
        for v in c:
            if type(v) is not int:
                return _own(d)
        return c
    return _own(d)


def _own_arg(a: Any) -> Any:
    if type(a) is not hal.RequestArgument:
        return _own(a)
    d = a.__dict__
    loc = d.get("location")
    if type(loc) is not hal.DataLocation or len(d) != 3:
        return _own(a)
    ld = loc.__dict__
    if len(ld) != 3 or type(ld.get("poolIndex")) is not int or type(ld.get("offset")) is not int \
            or type(ld.get("length")) is not int:
        return _own(a)
    new_loc = object.__new__(hal.DataLocation)
    new_loc.__dict__ = ld.copy()  # NOTE: three ints: immutable leaves
    has = d.get("hasNoValue")
    new = object.__new__(hal.RequestArgument)
    new.__dict__ = {"hasNoValue": has if _KIND.get(type(has)) == 0 else _own(has), "location": new_loc,
                    "dimensions": _own_dims(d.get("dimensions"))}
    return new


def _own_pool(p: Any) -> Any:
    if type(p) is not hal.MemoryPool or len(p.__dict__) != 2:
        return _own(p)
    m = p.hidlMemory
    if m is None:
        token = p.token
        new = object.__new__(hal.MemoryPool)
        new.__dict__ = {"hidlMemory": None, "token": token if _KIND.get(type(token)) == 0 else _own(token)}
        return new
    if type(m) is not hal.Memory or len(m.__dict__) != 3:
        return _own(p)
    h = m.handle
    if type(h) is not hal.Handle or len(h.__dict__) != 2 or type(m.name) is not str or type(m.size) is not int:
        return _own(p)
    new_h = object.__new__(hal.Handle)
    new_h.__dict__ = {"fds": _own_dims(h.fds), "ints": _own_dims(h.ints)}
    new_m = object.__new__(hal.Memory)
    new_m.__dict__ = {"name": m.name, "handle": new_h, "size": m.size}
    token = p.token
    new = object.__new__(hal.MemoryPool)
    new.__dict__ = {"hidlMemory": new_m, "token": token if _KIND.get(type(token)) == 0 else _own(token)}
    return new


def own_request(request: Any) -> Any:
    """:func:`own_copy` of a ``hal.Request``, specialized: NOTE: the generic
    copy reflects on every object (a third of a small model's execution
    time); this one rebuilds the known HAL classes directly and leaves
    anything unexpected (subclasses, extra attributes, odd leaves, which
    validation will judge) to the generic copy, so the result is the same."""
    try:
        if type(request) is not hal.Request or len(request.__dict__) != 3:
            return _own(request)
        ins, outs, pools = request.inputs, request.outputs, request.pools
        if type(ins) is not list or type(outs) is not list or type(pools) is not list:
            return _own(request)
        new = object.__new__(hal.Request)
        new.__dict__ = {"inputs": [_own_arg(a) for a in ins], "outputs": [_own_arg(a) for a in outs],
                        "pools": [_own_pool(p) for p in pools]}
        return new
    except Exception as e:  # NOTE: RecursionError on absurdly nested junk included
        raise _fail(f"malformed argument ({type(e).__name__}: {e})") from None


def _args_key(args: list) -> Optional[tuple]:
    keys = []
    for a in args:
        if type(a) is not hal.RequestArgument:
            return None
        loc, has, dims = a.location, a.hasNoValue, a.dimensions
        if type(loc) is not hal.DataLocation or type(has) is not bool or type(dims) is not list:
            return None
        p, o, n = loc.poolIndex, loc.offset, loc.length
        if type(p) is not int or type(o) is not int or type(n) is not int:
            return None
        for v in dims:
            if type(v) is not int:
                return None
        keys.append((has, p, o, n, tuple(dims)))
    return tuple(keys)


def _pools_key(pools: list) -> Optional[tuple]:
    keys = []
    for p in pools:
        if type(p) is not hal.MemoryPool:
            return None
        m, token = p.hidlMemory, p.token
        if token is not None and type(token) is not int:
            return None
        if m is None:
            keys.append((None, token))
            continue
        if type(m) is not hal.Memory:
            return None
        h, name, size = m.handle, m.name, m.size
        if type(h) is not hal.Handle or type(name) is not str or type(size) is not int:
            return None
        fds, ints = h.fds, h.ints
        if type(fds) is not list or type(ints) is not list:
            return None
        for v in fds:
            if type(v) is not int:
                return None
        for v in ints:
            if type(v) is not int:
                return None
        keys.append(((name, tuple(fds), tuple(ints), size), token))
    return tuple(keys)


def request_key(request: Any) -> Optional[tuple]:
    """An exact, hashable image of a 1.3 request made of the plain HAL classes
    and plain values (``int``, ``bool``, ``str``, lists): ``(inputs, outputs,
    pools)``, every value the request carries read once; None for anything
    else (a subclass, an ``IntEnum`` or numpy scalar, a tuple where a list
    belongs, junk), which a driver copies and validates in full.  NOTE: two
    requests with equal keys are the same request to validation (the key
    holds exact types, so ``1.0`` or ``True`` never stand for ``1``), so a
    driver may remember the keys it validated; :func:`request_from_key`
    rebuilds the request from the key, the driver's own copy (HIDL passes
    requests by value)."""
    if type(request) is not hal.Request:
        return None
    try:
        ins, outs, pools = request.inputs, request.outputs, request.pools
        if type(ins) is not list or type(outs) is not list or type(pools) is not list:
            return None
        ik, ok, pk = _args_key(ins), _args_key(outs), _pools_key(pools)
    except Exception:  # NOTE: a hostile attribute (a property raising): the full path judges it
        return None
    if ik is None or ok is None or pk is None:
        return None
    return ik, ok, pk


def _arg_from_key(k: tuple) -> hal.RequestArgument:
    loc = object.__new__(hal.DataLocation)
    loc.__dict__ = {"poolIndex": k[1], "offset": k[2], "length": k[3]}
    a = object.__new__(hal.RequestArgument)
    a.__dict__ = {"hasNoValue": k[0], "location": loc, "dimensions": list(k[4])}
    return a


def _pool_from_key(k: tuple) -> hal.MemoryPool:
    p = object.__new__(hal.MemoryPool)
    mk = k[0]
    if mk is None:
        p.__dict__ = {"hidlMemory": None, "token": k[1]}
        return p
    h = object.__new__(hal.Handle)
    h.__dict__ = {"fds": list(mk[1]), "ints": list(mk[2])}
    m = object.__new__(hal.Memory)
    m.__dict__ = {"name": mk[0], "handle": h, "size": mk[3]}
    p.__dict__ = {"hidlMemory": m, "token": k[1]}
    return p


def request_from_key(key: tuple) -> hal.Request:
    """The ``hal.Request`` whose :func:`request_key` is ``key`` (new objects
    throughout: nothing shared with the caller's request)."""
    r = object.__new__(hal.Request)
    r.__dict__ = {"inputs": [_arg_from_key(k) for k in key[0]], "outputs": [_arg_from_key(k) for k in key[1]],
                  "pools": [_pool_from_key(k) for k in key[2]]}
    return r


# --------------------------------------------------------------------------
# structure: what the HIDL types guarantee in C++ (field types, unsigned
# ranges) has to be checked in Python before any rule can be applied.


def _is_int(x: Any) -> bool:
    if isinstance(x, int):  # NOTE: the fast path (ints and IntEnums); bool is an int but not an integer here
        return not isinstance(x, bool)
    return isinstance(x, (np.integer, numbers.Integral)) and not isinstance(x, np.bool_)


def _is_u32(x: Any) -> bool:
    return _is_int(x) and 0 <= x <= UINT32_MAX


def _is_i32(x: Any) -> bool:
    return _is_int(x) and -(2**31) <= x < 2**31


def _u32_list(x: Any) -> bool:
    if not isinstance(x, (list, tuple)):
        return False
    if all(type(v) is int for v in x):  # NOTE: the common case, checked in one pass
        return not x or (min(x) >= 0 and max(x) <= UINT32_MAX)
    return all(_is_u32(v) for v in x)


def _is_bool(x: Any) -> bool:
    return isinstance(x, (bool, np.bool_))


def _list_of(x: Any, cls: type) -> bool:
    return isinstance(x, (list, tuple)) and all(isinstance(v, cls) for v in x)


def _check_location(loc: Any, where: str) -> None:
    if not isinstance(loc, hal.DataLocation):
        raise _fail(f"{where}: location is not a DataLocation")
    if not (_is_u32(loc.poolIndex) and _is_u32(loc.offset) and _is_u32(loc.length)):
        raise _fail(f"{where}: location {loc} is not three uint32 values")


_INTS = (int, hal.OperandType, hal.OperandLifeTime)  # NOTE: what the fast path takes as ints (no bool)


def _plain_operand(o: Any) -> bool:
    """Whether ``o`` is an Operand whose fields have exactly the expected Python types and ranges (what
    every well-formed model holds): then :func:`_check_operand_structure` has nothing to say, found in
    one pass of exact type tests instead of the general (isinstance / ABC) checks."""
    if type(o) is not hal.Operand:
        return False
    t, dims, loc, extra, scale = o.type, o.dimensions, o.location, o.extraParams, o.scale
    if not (type(t) in _INTS and 0 <= t <= UINT32_MAX and type(o.lifetime) in _INTS
            and type(o.numberOfConsumers) is int and 0 <= o.numberOfConsumers <= UINT32_MAX
            and type(o.zeroPoint) is int and -(2**31) <= o.zeroPoint < 2**31
            and (type(scale) is float and scale == scale or type(scale) is int)
            and type(dims) is list and all(type(v) is int for v in dims)
            and (not dims or (min(dims) >= 0 and max(dims) <= UINT32_MAX))):
        return False
    if not (type(loc) is hal.DataLocation and type(loc.poolIndex) is int and type(loc.offset) is int
            and type(loc.length) is int and 0 <= loc.poolIndex <= UINT32_MAX and 0 <= loc.offset <= UINT32_MAX
            and 0 <= loc.length <= UINT32_MAX):
        return False
    if type(extra) is not hal.OperandExtraParams or extra.extension is not None:
        return False
    cq = extra.channelQuant
    return cq is None or (type(cq) is hal.SymmPerChannelQuantParams and type(cq.channelDim) is int
                          and 0 <= cq.channelDim <= UINT32_MAX and type(cq.scales) in (list, tuple)
                          and all(type(v) is float for v in cq.scales))


def _check_operand_structure(o: Any, where: str) -> None:
    if _plain_operand(o):
        return
    if not isinstance(o, hal.Operand):
        raise _fail(f"{where} is not an Operand")
    if not _is_u32(o.type) or not _is_int(o.lifetime):
        raise _fail(f"{where}: type {o.type!r} or lifetime {o.lifetime!r} is not an enum value")
    if not _u32_list(o.dimensions):
        raise _fail(f"{where}: dimensions {o.dimensions!r} are not uint32 values")
    if not _is_u32(o.numberOfConsumers):
        raise _fail(f"{where}: numberOfConsumers {o.numberOfConsumers!r} is not a uint32")
    if not isinstance(o.scale, numbers.Real) or isinstance(o.scale, (bool, np.bool_)) or math.isnan(o.scale):
        raise _fail(f"{where}: scale {o.scale!r} is not a number")
    if not _is_i32(o.zeroPoint):
        raise _fail(f"{where}: zeroPoint {o.zeroPoint!r} is not an int32")
    _check_location(o.location, where)
    extra = o.extraParams
    if not isinstance(extra, hal.OperandExtraParams):
        raise _fail(f"{where}: extraParams is not an OperandExtraParams")
    cq = extra.channelQuant
    if cq is not None:
        if not isinstance(cq, hal.SymmPerChannelQuantParams) or not _is_u32(cq.channelDim) or not (
                isinstance(cq.scales, (list, tuple))
                and all(isinstance(v, numbers.Real) and not _is_bool(v) for v in cq.scales)):
            raise _fail(f"{where}: malformed channelQuant {cq!r}")
    if extra.extension is not None and not isinstance(extra.extension, (bytes, bytearray)):
        raise _fail(f"{where}: extraParams.extension is not bytes")


def _check_subgraph_structure(sg: Any, where: str) -> None:
    if not isinstance(sg, hal.Subgraph):
        raise _fail(f"{where} is not a Subgraph")
    if not isinstance(sg.operands, (list, tuple)) or not isinstance(sg.operations, (list, tuple)):
        raise _fail(f"{where}: operands / operations are not lists")
    for i, o in enumerate(sg.operands):
        _check_operand_structure(o, f"{where} operand {i}")
    for k, op in enumerate(sg.operations):
        if not isinstance(op, hal.Operation) or not _is_u32(op.type) or not _u32_list(op.inputs) \
                or not _u32_list(op.outputs):
            raise _fail(f"{where} operation {k} is malformed: {op!r}")
    if not _u32_list(sg.inputIndexes) or not _u32_list(sg.outputIndexes):
        raise _fail(f"{where}: inputIndexes / outputIndexes are not uint32 lists")


def _plain_ints(x: Any, lo: int, hi: int) -> bool:
    if type(x) is not list:
        return False
    for v in x:
        if type(v) is not int or not lo <= v < hi:
            return False
    return True


def _check_memory_structure(m: Any, where: str) -> None:
    # NOTE: the common case (exact classes, plain ints) first; anything else takes the full checks
    if type(m) is hal.Memory and type(m.name) is str and type(m.size) is int and 0 <= m.size < 2**64 \
            and type(m.handle) is hal.Handle and _plain_ints(m.handle.fds, 0, 2**31) \
            and _plain_ints(m.handle.ints, -(2**31), 2**31):
        return
    if not isinstance(m, hal.Memory) or not isinstance(m.name, str) or not _is_int(m.size) or m.size < 0 \
            or m.size >= 2**64:
        raise _fail(f"{where} is not a valid memory")
    h = m.handle
    if not isinstance(h, hal.Handle) or not isinstance(h.fds, (list, tuple)) or not isinstance(h.ints, (list, tuple)) \
            or not all(_is_int(fd) and 0 <= fd < 2**31 for fd in h.fds) or not all(_is_i32(v) for v in h.ints):
        raise _fail(f"{where}: malformed handle {h!r}")


def _check_model_structure(model: hal.Model) -> None:
    _check_subgraph_structure(model.main, "main subgraph")
    if not isinstance(model.referenced, (list, tuple)):
        raise _fail("referenced is not a list")
    for k, sg in enumerate(model.referenced):
        _check_subgraph_structure(sg, f"referenced subgraph {k}")
    if not isinstance(model.operandValues, (bytes, bytearray, memoryview)):
        raise _fail(f"operandValues is not bytes: {type(model.operandValues).__name__}")
    if not isinstance(model.pools, (list, tuple)):
        raise _fail("pools is not a list")
    for k, m in enumerate(model.pools):
        _check_memory_structure(m, f"model pool {k}")
    relax = model.relaxComputationFloat32toFloat16
    if not (_is_bool(relax) or (_is_int(relax) and relax in (0, 1))):
        raise _fail("relaxComputationFloat32toFloat16 is not a bool")
    if not _list_of(model.extensionNameToPrefix, hal.ExtensionNameAndPrefix) or not all(
            isinstance(e.name, str) and _is_int(e.prefix) for e in model.extensionNameToPrefix):
        raise _fail("malformed extensionNameToPrefix")


def _size_overflows_uint32(t: T, dims: Sequence[int]) -> bool:
    """As the NNAPI runtime, which refuses such operands when they are added."""
    if t in _SCALAR or not dims:
        return False
    size = hal.OPERAND_TYPE_BYTE_SIZE.get(t, 1)
    for d in dims:
        size *= d
        if size > UINT32_MAX:
            return True
    return False


def _check_extension_operand(o: hal.Operand, where: str, types: ModelExtensions) -> Optional[ExtensionOperandType]:
    """The rules of an extension operand type: the HAL's (no scale, zeroPoint or
    channelQuant), then, for an extension this device declares, the
    declaration's (a declared type, a scalar of rank 0, a size that fits, the
    parameters it accepts).  Returns the resolved type (None: not declared here)."""
    if o.scale != 0.0 or o.zeroPoint != 0:
        raise _fail(f"{where}: extension operand with a non-zero scale or zeroPoint")
    if o.extraParams.channelQuant is not None:
        raise _fail(f"{where}: extension operand with channelQuant params")
    if not types.declares(o.type):
        return None
    t = types.operand_type(o.type)
    if t is None:
        raise _fail(f"{where}: extension {types.extension_name(o.type)} has no operand type "
                    f"{int(o.type) & 0xFFFF}")
    if not t.is_tensor and o.dimensions:
        raise _fail(f"{where}: scalar {t.name} has dimensions of rank {len(o.dimensions)}")
    size = t.byte_size
    for d in o.dimensions if t.is_tensor else ():
        size *= d
        if size > UINT32_MAX:
            raise _fail(f"{where}: {t.name} {list(o.dimensions)} is larger than 4 GiB")
    try:
        check_params(t, o.extraParams.extension)
    except OpValidationError as e:
        raise _fail(f"{where}: {e}") from None
    return t


def _check_operand(model: hal.Model, sg: hal.Subgraph, index: int, version: HalVersion,
                   types: Optional[ModelExtensions] = None) -> None:
    o = sg.operands[index]
    where = f"operand {index}"
    t = int(o.type)
    if not valid_operand_type(t, model, version):
        raise _fail(f"{where}: invalid operand type {t} for HAL {version.name}")
    ext = is_extension_type(t)
    if not ext:
        t = operand_type(t)
        if t in _SCALAR and len(o.dimensions) != 0:
            raise _fail(f"{where}: scalar {t.name} has dimensions of rank {len(o.dimensions)}")
        if t in _TENSOR and len(o.dimensions) == 0 and (
                version < HalVersion.V1_2 or o.lifetime in (L.CONSTANT_COPY, L.CONSTANT_REFERENCE)):
            raise _fail(f"{where}: tensor {t.name} has dimensions of rank 0")
        if any(d < 0 or d > UINT32_MAX for d in o.dimensions):
            raise _fail(f"{where}: dimensions {o.dimensions} out of range")
        if _size_overflows_uint32(t, o.dimensions):
            raise _fail(f"{where}: {t.name} {list(o.dimensions)} is larger than 4 GiB")
        scale = o.scale
        if not isinstance(scale, (int, float)) or math.isnan(scale):
            raise _fail(f"{where}: scale {scale!r} is not a number")
        if t in _ZERO_SCALE and scale != 0.0:
            raise _fail(f"{where}: {t.name} with a non-zero scale ({scale})")
        if t == T.TENSOR_INT32 and scale < 0.0:
            raise _fail(f"{where}: TENSOR_INT32 with a negative scale ({scale})")
        if t in _POSITIVE_SCALE and not scale > 0.0:
            raise _fail(f"{where}: {t.name} with a non-positive scale ({scale})")
        lo, hi = _ZERO_POINT_RANGE.get(t, (0, 0))
        if not lo <= o.zeroPoint <= hi:
            raise _fail(f"{where}: {t.name} with an invalid zeroPoint {o.zeroPoint}, must be in [{lo}, {hi}]")
        extra = o.extraParams
        if extra.channelQuant is not None and extra.extension is not None:
            raise _fail(f"{where}: extraParams has several members set")
        if t in _NO_EXTRA_PARAMS and (extra.channelQuant is not None or extra.extension is not None):
            raise _fail(f"{where}: {t.name} has extraParams, none allowed")
        if t == T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
            cq = extra.channelQuant
            if cq is None:
                raise _fail(f"{where}: TENSOR_QUANT8_SYMM_PER_CHANNEL without channelQuant params")
            if not 0 <= cq.channelDim < len(o.dimensions):
                raise _fail(f"{where}: channelQuant.channelDim {cq.channelDim} not in [0, {len(o.dimensions)})")
            n = o.dimensions[cq.channelDim]
            if n == 0:
                raise _fail(f"{where}: channel dimension {cq.channelDim} is unknown (0)")
            if len(cq.scales) != n:
                raise _fail(f"{where}: channelQuant has {len(cq.scales)} scales, expected {n}")
            if not all(s > 0.0 for s in cq.scales):
                raise _fail(f"{where}: channelQuant scales must be positive")
    else:
        ext_type = _check_extension_operand(o, where, types or resolve_extensions(model, ()))
        if ext_type is not None and ext_type.is_tensor and not o.dimensions and o.lifetime in (
                L.CONSTANT_COPY, L.CONSTANT_REFERENCE):
            raise _fail(f"{where}: tensor {ext_type.name} has dimensions of rank 0")

    loc = o.location
    life = o.lifetime
    if life not in L._value2member_map_:
        raise _fail(f"{where}: invalid lifetime {life}")
    life = L(life)
    if life == L.SUBGRAPH and version < HalVersion.V1_3:
        raise _fail(f"{where}: SUBGRAPH lifetime needs HAL 1.3")
    if life == L.CONSTANT_COPY:
        if loc.poolIndex != 0:
            raise _fail(f"{where}: CONSTANT_COPY with a non-zero poolIndex {loc.poolIndex}")
        if loc.offset + loc.length > len(model.operandValues):
            raise _fail(f"{where}: operandValues location [{loc.offset}, +{loc.length}) out of range "
                        f"({len(model.operandValues)} bytes)")
    elif life == L.CONSTANT_REFERENCE:
        if loc.poolIndex >= len(model.pools):
            raise _fail(f"{where}: invalid poolIndex {loc.poolIndex}/{len(model.pools)}")
        size = model.pools[loc.poolIndex].size
        if loc.offset + loc.length > size:
            raise _fail(f"{where}: pool {loc.poolIndex} location [{loc.offset}, +{loc.length}) exceeds the "
                        f"pool size {size}")
    elif life == L.SUBGRAPH:
        if loc.poolIndex != 0 or loc.length != 0:
            raise _fail(f"{where}: SUBGRAPH with a non-zero poolIndex or length")
        if loc.offset >= len(model.referenced):
            raise _fail(f"{where}: subgraph index {loc.offset} out of range ({len(model.referenced)} referenced)")
    else:
        if loc.poolIndex != 0 or loc.offset != 0 or loc.length != 0:
            raise _fail(f"{where}: unexpected location {loc} for lifetime {life.name}")
    if (not ext and t == T.SUBGRAPH) != (life == L.SUBGRAPH):
        raise _fail(f"{where}: type {T(o.type).name if not ext else o.type} cannot have lifetime {life.name}")
    if life in (L.CONSTANT_COPY, L.CONSTANT_REFERENCE) and not ext and t not in (T.OEM, T.TENSOR_OEM_BYTE):
        expected = operand_byte_size(o)
        if loc.length != expected:
            raise _fail(f"{where}: {t.name} {list(o.dimensions)} needs {expected} bytes, location has {loc.length}")
    if life in (L.CONSTANT_COPY, L.CONSTANT_REFERENCE) and ext and ext_type is not None:
        expected = operand_byte_size(dataclasses.replace(o, type=ext_type))
        if loc.length != expected:
            raise _fail(f"{where}: {ext_type.name} {list(o.dimensions)} needs {expected} bytes, location has "
                        f"{loc.length}")


def _check_io_indexes(sg: hal.Subgraph, indexes: Sequence[int], life: L, what: str) -> None:
    n = len(sg.operands)
    for i in indexes:
        if not 0 <= i < n:
            raise _fail(f"{what} index {i} out of range ({n} operands)")
        if sg.operands[i].lifetime != life:
            raise _fail(f"{what} operand {i} has lifetime {L(sg.operands[i].lifetime).name}, expected {life.name}")
    if len(set(indexes)) != len(indexes):
        raise _fail(f"{what} indexes {list(indexes)} contain duplicates")
    listed = set(indexes)
    for i, o in enumerate(sg.operands):
        if o.lifetime == life and i not in listed:
            raise _fail(f"operand {i} is {life.name} but not in the subgraph's {what} indexes")


def validate_operation(model: hal.Model, sg: hal.Subgraph, op: hal.Operation, pools: Optional[Sequence[Any]],
                       version: HalVersion = HalVersion.V1_3,
                       types: Optional[ModelExtensions] = None) -> Optional[OpDef]:
    """Checks one operation; returns its OpDef, or None for a valid operation
    this driver has no implementation of (OEM operations, extension operations
    of an extension it does not declare or that it does not know); ``types``:
    the model's extensions resolved against the device's declarations, whose
    operations are checked by their declared signatures and validate."""
    n = len(sg.operands)
    for what, idx in (("input", op.inputs), ("output", op.outputs)):
        for i in idx:
            if not 0 <= i < n:
                raise _fail(f"operation {hal.operation_name(op.type)}: {what} operand index {i} out of range ({n} operands)")
    t = int(op.type)
    if is_extension_type(t):
        if version < HalVersion.V1_2:
            raise _fail("extension operations need HAL 1.2")
        if not _extension_prefix_known(t, model):
            raise _fail(f"operation type {t}: extension prefix {t >> EXTENSION_TYPE_BITS} not in extensionNameToPrefix")
        opdef = types.operation(t) if types is not None else None
        if opdef is None:
            return None  # NOTE: valid (ValidateHal); not supported by this device
        # NOTE: the operation's operands as the declaring device knows them (its extension types resolved)
        ins = [_resolved(sg.operands[i], types) for i in op.inputs]
        outs = [_resolved(sg.operands[i], types) for i in op.outputs]
        return _check_signature(model, sg, op, opdef, ins, outs, pools, version)
    if t == hal.OperationType.OEM_OPERATION:
        return None
    if t not in hal.OperationType._value2member_map_:
        raise _fail(f"invalid operation type {t}")
    opdef = registry.find(t)
    if opdef is None:
        raise _fail(f"operation {hal.operation_name(t)} is not registered")
    ins = [sg.operands[i] for i in op.inputs]
    outs = [sg.operands[i] for i in op.outputs]
    for o in ins + outs:
        if is_extension_type(o.type):
            raise _fail(f"{opdef.name} does not accept extension operand types")
    return _check_signature(model, sg, op, opdef, ins, outs, pools, version)


def _resolved(o: hal.Operand, types: ModelExtensions) -> hal.Operand:
    t = types.operand_type(o.type) if is_extension_type(o.type) else None
    return o if t is None else dataclasses.replace(o, type=t)


def _check_signature(model: hal.Model, sg: hal.Subgraph, op: hal.Operation, opdef: OpDef, ins: list, outs: list,
                     pools: Optional[Sequence[Any]], version: HalVersion) -> OpDef:
    try:
        match_signature(opdef, [o.type if o.type.__class__ is ExtensionOperandType else int(o.type) for o in ins],
                        [o.type if o.type.__class__ is ExtensionOperandType else int(o.type) for o in outs], version)
        if opdef.validate is not None:
            info = OpInfo(type=opdef.type,
                          inputs=[operand_info(o, _safe_constant(model, o, pools)) for o in ins],
                          outputs=[operand_info(o, None) for o in outs], version=version,
                          relaxed=model.relaxComputationFloat32toFloat16, subgraphs=model.referenced)
            opdef.validate(info)
    except OpValidationError as e:
        raise _fail(str(e)) from None
    except ValidationError:
        raise
    except Exception as e:
        # NOTE: decided: a validator that crashes on a model still refuses it with INVALID_ARGUMENT (the
        # client's model is what it could not check, and a hostile model must never crash the driver),
        # but never silently: the crash is a driver bug, logged as one with its traceback
        log.error("%s: the validator crashed on this model (a driver bug): %s: %s", opdef.name, type(e).__name__, e)
        log.debug("validator traceback", exc_info=True)
        raise _fail(f"{opdef.name}: validator crashed ({type(e).__name__}: {e})") from None
    for i in op.outputs:
        if sg.operands[i].lifetime not in (L.TEMPORARY_VARIABLE, L.SUBGRAPH_OUTPUT):
            raise _fail(f"operation {opdef.name} writes operand {i} of lifetime {L(sg.operands[i].lifetime).name}")
    return opdef


def _safe_constant(model: hal.Model, o: hal.Operand, pools: Optional[Sequence[Any]]) -> Any:
    if o.lifetime == L.CONSTANT_REFERENCE and pools is None:
        return None
    if o.type.__class__ is ExtensionOperandType:
        return constant_value(model, o, pools or [])  # NOTE: a declared extension type: its size was checked
    if is_extension_type(o.type) or o.type in (T.OEM, T.TENSOR_OEM_BYTE):
        return None
    if len(o.dimensions) > MAX_RANK:
        return None  # NOTE: no array of that rank: the operation is unsupported (drivers/sample.py), not invalid
    return constant_value(model, o, pools or [])


def _check_graph(sg: hal.Subgraph) -> None:
    """Operations in execution order, one writer per operand, exact consumer counts."""
    known = [o.lifetime in (L.SUBGRAPH_INPUT, L.CONSTANT_COPY, L.CONSTANT_REFERENCE, L.NO_VALUE, L.SUBGRAPH)
             for o in sg.operands]
    consumers = [0] * len(sg.operands)
    for k, op in enumerate(sg.operations):
        for j, i in enumerate(op.inputs):
            if not known[i]:
                raise _fail(f"operation {k} ({hal.operation_name(op.type)}) input {j} (operand {i}) is read before it is "
                            "written (operations must be in execution order, without cycles)")
            consumers[i] += 1
        for j, i in enumerate(op.outputs):
            if known[i]:
                raise _fail(f"operation {k} ({hal.operation_name(op.type)}) output {j} (operand {i}) has already been "
                            "written")
            known[i] = True
    for i, o in enumerate(sg.operands):
        if o.numberOfConsumers != consumers[i]:
            raise _fail(f"operand {i} has numberOfConsumers {o.numberOfConsumers}, expected {consumers[i]}")
    for i, k in enumerate(known):
        if not k:
            raise _fail(f"operand {i} is never written")


def subgraph_references(model: hal.Model) -> list[list[int]]:
    """For the main subgraph (node 0) and each referenced subgraph k (node
    k + 1): the nodes its SUBGRAPH operands name, each once, in order.
    Assumes the SUBGRAPH locations were checked (``_check_operand``)."""
    refs = []
    for sg in [model.main, *model.referenced]:
        seen: dict[int, None] = {}
        for o in sg.operands:
            if o.lifetime == L.SUBGRAPH:
                seen[int(o.location.offset) + 1] = None
        refs.append(list(seen))
    return refs


_WHITE, _GREY, _BLACK = 0, 1, 2


def subgraph_depths(model: hal.Model, refs: Optional[list[list[int]]] = None) -> list[int]:
    """The nesting depth below each subgraph (node 0 the main subgraph, node
    k + 1 referenced subgraph k): 0 for a subgraph that references none, else
    1 + the deepest subgraph it references; -1 for a subgraph the main one
    never reaches.  Raises ValidationError for a circular reference.

    NOTE: an iterative depth-first search with colours (an explicit stack, no
    Python recursion): each subgraph is expanded once, so a model of any depth,
    or a DAG with exponentially many paths (40 nested IFs whose then and else
    name the same subgraph), costs time linear in its operands."""
    if refs is None:
        refs = subgraph_references(model)
    depth = [-1] * len(refs)
    colour = [_WHITE] * len(refs)
    colour[0], depth[0] = _GREY, 0
    stack = [(0, iter(refs[0]))]
    while stack:
        g, it = stack[-1]
        for r in it:
            c = colour[r]
            if c == _GREY:
                raise _fail("the model contains a circular subgraph reference")
            if c == _WHITE:
                colour[r], depth[r] = _GREY, 0
                stack.append((r, iter(refs[r])))
                break
            depth[g] = max(depth[g], depth[r] + 1)
        else:
            stack.pop()
            colour[g] = _BLACK
            if stack:
                parent = stack[-1][0]
                depth[parent] = max(depth[parent], depth[g] + 1)
    return depth


def _check_no_cycles(model: hal.Model) -> None:
    subgraph_depths(model)


_EXT_NAME = re.compile(r"^[a-z0-9_.]+$")


def _check_extensions(model: hal.Model) -> None:
    check_extension_names(model.extensionNameToPrefix)


def check_extension_names(entries: Any) -> None:
    """A model's or a config's ``extensionNameToPrefix``: valid names
    (``[a-z0-9_.]`` with a '.'), each name and each prefix (1..0xFFFF) once."""
    if not _list_of(entries, hal.ExtensionNameAndPrefix):
        raise _fail(f"extensionNameToPrefix is not a list of ExtensionNameAndPrefix: {entries!r:.200}")
    names, prefixes = set(), set()
    for e in entries:
        if not e.name or not _EXT_NAME.match(e.name) or "." not in e.name:
            raise _fail(f"invalid extension name {e.name!r}")
        if e.name in names or e.prefix in prefixes:
            raise _fail(f"extension name {e.name!r} or prefix {e.prefix} declared twice")
        if not _is_int(e.prefix) or not 0 < e.prefix <= 0xFFFF:
            raise _fail(f"extension prefix {e.prefix!r} out of range")
        names.add(e.name)
        prefixes.add(e.prefix)


def validate_memory_names(pools: Sequence[hal.Memory], version: HalVersion) -> None:
    allowed = MEMORY_NAMES_V1_2 if version >= HalVersion.V1_2 else MEMORY_NAMES_V1_0
    for k, m in enumerate(pools):
        if not isinstance(m, hal.Memory):
            raise _fail(f"pool {k} is not a memory")
        if m.name not in allowed:
            raise _fail(f"pool {k}: unsupported memory type {m.name!r}")
        if m.handle is None or not m.handle.fds:
            raise _fail(f"pool {k}: memory of type {m.name} has a null handle")


def validate_model(model: hal.Model, pools: Optional[Sequence[Any]] = None,
                   version: HalVersion = HalVersion.V1_3,
                   extensions: Sequence[Extension] = ()) -> list[Optional[OpDef]]:
    """Validates a (1.3 or upgraded) model.  ``pools`` are the mapped model
    pools (for constant values that operations inspect), or None to skip
    those checks; ``extensions``: what the device declares
    (``nnhal.ops.extension``), whose operand and operation types are checked
    by their declarations.  Returns the OpDef of every main-subgraph operation (None
    for valid but unimplemented OEM / extension operations)."""
    if not isinstance(model, hal.Model):
        raise _fail(f"not a Model: {type(model).__name__}")
    _check_model_structure(model)
    if not model.main.operations or not model.main.operands:
        raise _fail("invalid empty model")
    _check_extensions(model)
    validate_memory_names(model.pools, version)
    types = resolve_extensions(model, extensions)
    result: list[Optional[OpDef]] = []
    for g, sg in enumerate([model.main, *model.referenced]):
        try:
            for i in range(len(sg.operands)):
                _check_operand(model, sg, i, version, types)
            defs = [validate_operation(model, sg, op, pools, version, types) for op in sg.operations]
            _check_io_indexes(sg, sg.inputIndexes, L.SUBGRAPH_INPUT, "input")
            _check_io_indexes(sg, sg.outputIndexes, L.SUBGRAPH_OUTPUT, "output")
            _check_graph(sg)
        except ValidationError as e:
            raise _fail(f"{'main subgraph' if g == 0 else f'referenced subgraph {g - 1}'}: {e}") from None
        if g == 0:
            result = defs
    _check_no_cycles(model)
    return result


def validate_hints(hints: Any, extension_name_to_prefix: Any) -> None:
    """The compilation or execution hints of an AIDL version 4 call
    (``TokenValuePair``s) and the extension names they use, as Android's
    canonical validation checks them: (int32 token, bytes value) pairs, no
    token twice, the names and prefixes as a model's.  What a hint says is
    the driver's to take or leave: this driver takes none ("The driver must
    validate the data and ignore invalid hints")."""
    if not _list_of(hints, TokenValuePair):
        raise _fail(f"hints are not a list of TokenValuePair: {hints!r:.200}")
    tokens: set[int] = set()
    for k, h in enumerate(hints):
        if not _is_i32(h.token) or not isinstance(h.value, (bytes, bytearray)):
            raise _fail(f"hint {k} is malformed: {h!r:.200}")
        if h.token in tokens:
            raise _fail(f"hint token {h.token:#x} given twice")
        tokens.add(h.token)
    check_extension_names(extension_name_to_prefix)


def validate_preference(preference: Any) -> None:
    if not _is_int(preference) or preference not in hal.ExecutionPreference._value2member_map_:
        raise _fail(f"invalid execution preference {preference!r}")


def validate_priority(priority: Any) -> None:
    if not _is_int(priority) or priority not in hal.Priority._value2member_map_:
        raise _fail(f"invalid priority {priority!r}")


def _pool_sizes(request: hal.Request) -> list[int]:
    sizes = []
    if not isinstance(request.pools, (list, tuple)):
        raise _fail("request pools are not a list")
    for k, p in enumerate(request.pools):
        if not isinstance(p, hal.MemoryPool):
            raise _fail(f"request pool {k} is not a MemoryPool")
        if p.hidlMemory is not None and p.token is not None:
            raise _fail(f"request pool {k} has both hidlMemory and token set")
        if p.hidlMemory is not None:
            _check_memory_structure(p.hidlMemory, f"request pool {k}")
            validate_memory_names([p.hidlMemory], HalVersion.V1_3)
            sizes.append(p.hidlMemory.size)
        elif p.token is not None:
            if not _is_u32(p.token) or not p.token > 0:
                raise _fail(f"request pool {k}: token {p.token} is not positive")
            sizes.append(0)  # a driver-managed buffer: offset and length must be 0
        else:
            raise _fail(f"request pool {k} has no value (neither hidlMemory nor token)")
    return sizes


def _check_arguments(args: Sequence[hal.RequestArgument], indexes: Sequence[int], sg: hal.Subgraph,
                     sizes: Sequence[int], allow_unspecified: bool, what: str,
                     token_pools: frozenset = frozenset()) -> None:
    if not isinstance(args, (list, tuple)):
        raise _fail(f"request {what}s are not a list")
    if len(args) != len(indexes):
        raise _fail(f"request has {len(args)} {what}s but the model has {len(indexes)}")
    for k, (a, i) in enumerate(zip(args, indexes)):
        o = sg.operands[i]
        # NOTE: the common case (exact HAL classes, plain ints in range) in one expression;
        # anything else takes the full checks and their messages
        loc = a.location if type(a) is hal.RequestArgument else None
        if not (type(loc) is hal.DataLocation and type(a.hasNoValue) is bool and type(loc.poolIndex) is int
                and type(loc.offset) is int and type(loc.length) is int and 0 <= loc.poolIndex <= UINT32_MAX
                and 0 <= loc.offset <= UINT32_MAX and 0 <= loc.length <= UINT32_MAX and _u32_list(a.dimensions)):
            if not isinstance(a, hal.RequestArgument) or not _is_bool(a.hasNoValue) or not _u32_list(a.dimensions):
                raise _fail(f"request {what} {k} is malformed: {a!r}")
            loc = a.location
            _check_location(loc, f"request {what} {k}")
        if a.hasNoValue:
            if loc.poolIndex or loc.offset or loc.length or a.dimensions:
                raise _fail(f"request {what} {k} has no value yet has a location or dimensions")
            continue
        if not 0 <= loc.poolIndex < len(sizes):
            raise _fail(f"request {what} {k}: invalid poolIndex {loc.poolIndex}/{len(sizes)}")
        if loc.offset < 0 or loc.length < 0 or loc.offset + loc.length > sizes[loc.poolIndex]:
            raise _fail(f"request {what} {k}: location [{loc.offset}, +{loc.length}) exceeds pool "
                        f"{loc.poolIndex} of size {sizes[loc.poolIndex]}")
        model_rank, unspecified, tensor, checked, static_need = _operand_facts(o)
        dims = list(a.dimensions)
        if not dims:
            # NOTE: a driver-managed buffer (token pool) has a shape of its own (driver/buffers.py checks it)
            if loc.poolIndex in token_pools:
                pass
            elif not allow_unspecified and unspecified:
                raise _fail(f"request {what} {k}: the model leaves a dimension unspecified and the request "
                            "does not specify it")
            elif not allow_unspecified and model_rank == 0 and tensor:
                raise _fail(f"request {what} {k}: the model leaves the rank unspecified and the request "
                            "does not specify it")
        else:
            if not tensor and not is_extension_type(o.type):
                raise _fail(f"request {what} {k} gives dimensions {dims} to a scalar {T(o.type).name}")
            if model_rank and len(dims) != model_rank:
                raise _fail(f"request {what} {k} has rank {len(dims)}, the model's is {model_rank}")
            if len(dims) > MAX_RANK:
                raise _fail(f"request {what} {k} has rank {len(dims)}; this driver runs tensors of rank up to "
                            f"{MAX_RANK}", hal.ErrorStatus.GENERAL_FAILURE)
            for d in range(len(dims)):
                if model_rank and o.dimensions[d] and dims[d] != o.dimensions[d]:
                    raise _fail(f"request {what} {k} has dimension {d} of {dims[d]}, the model's is "
                                f"{o.dimensions[d]}")
                if dims[d] == 0 and not allow_unspecified:
                    raise _fail(f"request {what} {k} has dimension {d} of zero")
        if what == "input" and checked and sizes[loc.poolIndex]:
            # NOTE: the executor reads exactly this many bytes; checked here so that a short
            # input is refused at launch rather than in the execution callback.
            full = dims or list(o.dimensions)
            need = static_need if not dims else operand_byte_size(o, full) if not tensor or all(full) else -1
            if loc.length < need:
                raise _fail(f"request input {k}: {need} bytes needed for {type_name(o.type)} {full}, the "
                            f"location has {loc.length}")


# NOTE: what request validation needs of an operand depends only on its type and
# dimensions: computed once per (type, dimensions), not per execution.  Bounded.
_OPERAND_FACTS: dict[tuple, tuple[int, bool, bool, bool, int]] = {}


def _operand_facts(o: hal.Operand) -> tuple[int, bool, bool, bool, int]:
    """(rank, a dimension unspecified, tensor, input size checked, bytes needed
    when the request gives no dimensions or -1 when unknown)."""
    if o.type.__class__ is ExtensionOperandType:
        # NOTE: never cached: the same number is another type in another model or device
        dims = list(o.dimensions)
        need = operand_byte_size(o, dims) if not o.type.is_tensor or (dims and all(dims)) else -1
        return len(dims), any(d == 0 for d in dims), o.type.is_tensor, True, need
    key = (o.type, tuple(o.dimensions))
    facts = _OPERAND_FACTS.get(key)
    if facts is None:
        dims = list(o.dimensions)
        tensor = is_tensor(o)
        checked = not is_extension_type(o.type) and int(o.type) not in (T.OEM, T.TENSOR_OEM_BYTE)
        need = operand_byte_size(o, dims) if checked and (not tensor or (dims and all(dims))) else -1
        facts = (len(dims), any(d == 0 for d in dims), tensor, checked, need)
        if len(_OPERAND_FACTS) >= 4096:
            _OPERAND_FACTS.clear()
        _OPERAND_FACTS[key] = facts
    return facts


def is_tensor(o: hal.Operand) -> bool:
    if o.type.__class__ is ExtensionOperandType:
        return o.type.is_tensor
    return int(o.type) not in _SCALAR and not is_extension_type(o.type)


def validate_request(request: hal.Request, model: hal.Model, allow_unspecified_output: bool = True) -> None:
    """Validates a 1.3 request against a 1.3 model (argument counts, locations
    within pools, dimensions compatible with the model, hasNoValue rules)."""
    if not isinstance(request, hal.Request):
        raise _fail(f"not a Request: {type(request).__name__}")
    try:
        _validate_request(request, model, allow_unspecified_output)
    except ValidationError:
        raise
    except Exception as e:  # NOTE: odd objects in a request are a bad argument, never a crash
        raise _fail(f"malformed request ({type(e).__name__}: {e})") from None


def _validate_request(request: hal.Request, model: hal.Model, allow_unspecified_output: bool) -> None:
    sizes = _pool_sizes(request)
    tokens = frozenset(k for k, p in enumerate(request.pools) if p.hidlMemory is None)
    _check_arguments(request.inputs, model.main.inputIndexes, model.main, sizes, False, "input", tokens)
    _check_arguments(request.outputs, model.main.outputIndexes, model.main, sizes, allow_unspecified_output,
                     "output", tokens)
    main = model.main
    omitted_in = {main.inputIndexes[k] for k, a in enumerate(request.inputs) if a.hasNoValue}
    omitted_out = {main.outputIndexes[k] for k, a in enumerate(request.outputs) if a.hasNoValue}
    # NOTE: a NO_VALUE operand of the model where an operation requires a value is the same failure
    omitted_in.update(i for i, o in enumerate(main.operands) if o.lifetime == L.NO_VALUE)
    if omitted_in or omitted_out:
        _check_omitted(model, omitted_in, omitted_out)


def _check_omitted(model: hal.Model, omitted_in: set, omitted_out: set) -> None:
    """A request that omits (hasNoValue) an operand some main-subgraph operation
    requires (an input position its signature does not let be omitted, an
    output it must write), or a model that gives it NO_VALUE there, is refused
    at launch, on every execution path, with the status its execution would
    end in: INVALID_ARGUMENT for the operations Android's CpuExecutor runs in
    its own switch (BAD_DATA), GENERAL_FAILURE for the others (the reference's
    OP_FAILED; ``OpDef.bad_data_on_missing_operand``).  NOTE: every
    main-subgraph operation runs, so this is exactly what the executor would
    find, in the same order."""
    main = model.main
    for op in main.operations:
        opdef = registry.find(op.type)
        if opdef is None:
            continue
        status = hal.ErrorStatus.INVALID_ARGUMENT if opdef.bad_data_on_missing_operand \
            else hal.ErrorStatus.GENERAL_FAILURE
        for n, i in enumerate(op.inputs):
            if i in omitted_in and n not in opdef.omittable_inputs:
                raise _fail(f"{opdef.name} input {n} (operand {i}) is required, the request or the model gives it "
                            "no value", status)
        if omitted_out and not opdef.omittable_inputs and not opdef.allow_omitted_outputs:
            for j, i in enumerate(op.outputs):
                if i in omitted_out:
                    raise _fail(f"{opdef.name} output {j} (operand {i}) is required, the request omits it", status)


_LOOP_DEFAULT_NS = int(hal.LoopTimeoutDurationNs.DEFAULT)
_LOOP_MAXIMUM_NS = int(hal.LoopTimeoutDurationNs.MAXIMUM)


def loop_timeout_ns(ns: Optional[int]) -> int:
    """The loop timeout an execution runs with, in ns, for a valid one asked
    (None: the default, 2 s; at most the maximum, 15 s)."""
    return _LOOP_DEFAULT_NS if ns is None else min(ns, _LOOP_MAXIMUM_NS)


def validate_timeout(loop_timeout: Any) -> int:
    """The loop timeout of an execution in ns from a HIDL 1.3
    ``OptionalTimeoutDuration`` (:func:`loop_timeout_ns`)."""
    if loop_timeout is None:
        return _LOOP_DEFAULT_NS
    if not isinstance(loop_timeout, hal.OptionalTimeoutDuration):
        raise _fail(f"loop timeout is not an OptionalTimeoutDuration: {loop_timeout!r}")
    ns = loop_timeout.nanoseconds
    if ns is None:
        return _LOOP_DEFAULT_NS
    if not _is_int(ns) or not 0 <= ns < 2**64:
        raise _fail(f"invalid loop timeout {ns!r}")
    return min(ns, _LOOP_MAXIMUM_NS)
