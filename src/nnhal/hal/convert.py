"""Conversions between the HAL 1.0, 1.1, 1.2 and 1.3 versions of the
Neural Networks HAL types, and the compliance checks that tell whether a 1.3
object can be expressed at an older version (as Android's ``Utils.cpp``
``convertToV1_x`` / ``compliantWithV1_x``).

- :func:`convert_to_v1_3` upgrades a Model, Request, Operand, Operation,
  OperandType, OperationType, OperandLifeTime, ErrorStatus, Capabilities or
  OperandPerformance of any version exactly (a 1.0 model gets
  ``relaxComputationFloat32toFloat16 = False``, MODEL_INPUT becomes
  SUBGRAPH_INPUT, request pools become ``MemoryPool(hidlMemory=...)``).
  Values that are not members of their enum (invalid models, extension
  types) are kept as plain ints, so that validation after the upgrade sees
  exactly what the client sent.
- :func:`convert_to_v1_0`, :func:`convert_to_v1_1`, :func:`convert_to_v1_2`
  convert an object of any version to that version.  Capabilities and
  ErrorStatus always convert (statuses without a 1.0 equivalent become
  GENERAL_FAILURE; performance comes from the TENSOR_FLOAT32 and
  TENSOR_QUANT8_ASYMM entries).  Models, requests and their parts raise
  :class:`NotRepresentable` when a value has no equivalent at the target
  version (an operation or operand type, the SUBGRAPH lifetime, per-channel
  extraParams before 1.2, a driver-allocated memory token in a request).
- :func:`compliant_with_v1_0`, ..._v1_1, ..._v1_2 tell whether a model,
  request, operand or capabilities keeps its meaning at the older version.
  For models, operation signatures are checked by the operation validator
  passed as ``validate_operation`` (the hal package knows no operation
  signatures); without one, only the operation type and the operands are
  checked.

Lists of any of these are converted element by element.  Objects of types
that did not change between versions (DataLocation, OutputShape, ...) are
returned unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from copy import deepcopy
from typing import Any

from nnhal.hal import types as v1_3
from nnhal.hal import v1_0, v1_1, v1_2

__all__ = [
    "FLT_MAX",
    "NotRepresentable",
    "OperationValidator",
    "compliant_with_v1_0",
    "compliant_with_v1_1",
    "compliant_with_v1_2",
    "convert_to_v1_0",
    "convert_to_v1_1",
    "convert_to_v1_2",
    "convert_to_v1_3",
    "no_performance_info",
]

FLT_MAX = 3.4028234663852886e38

# HAL versions as small ints (HalVersion's values)
_V1_0, _V1_1, _V1_2, _V1_3 = (int(v) for v in (v1_3.HalVersion.V1_0, v1_3.HalVersion.V1_1, v1_3.HalVersion.V1_2,
                                                 v1_3.HalVersion.V1_3))

# Called as validator(operation_1_3, operands_1_3, version) -> bool, with
# version 0..3 for HAL 1.0..1.3: does the operation, as used in the model,
# exist at that version (operation type, operand type signature, inputs)?
OperationValidator = Callable[[v1_3.Operation, list, int], bool]


class NotRepresentable(ValueError):
    """An object cannot be expressed in the types of the target HAL version."""


def no_performance_info() -> v1_3.PerformanceInfo:
    """``kNoPerformanceInfo``: the worst performance, FLT_MAX for both fields."""
    return v1_3.PerformanceInfo(execTime=FLT_MAX, powerUsage=FLT_MAX)


# --------------------------------------------------------------------------
# small helpers

_TYPE_EXTENSION_BITS = 16
# operand types in HAL order that 1.0 capabilities describe with quantized8Performance
_QUANT8_PERFORMANCE_CONSISTENT_WITH_P = (
    v1_3.OperandType.INT32,
    v1_3.OperandType.UINT32,
    v1_3.OperandType.TENSOR_INT32,
    v1_3.OperandType.OEM,
    v1_3.OperandType.TENSOR_OEM_BYTE,
)


def _is_extension(value: int) -> bool:
    return int(value) >> _TYPE_EXTENSION_BITS != 0


def _up(enum_cls: Any, value: int) -> int:
    """``value`` as a member of ``enum_cls`` if it is one, else as a plain int."""
    member = enum_cls._value2member_map_.get(int(value))
    return member if member is not None else int(value)


def _down(enum_cls: Any, value: int, what: str, allow_extension: bool = False) -> int:
    member = enum_cls._value2member_map_.get(int(value))
    if member is not None:
        return member
    if allow_extension and _is_extension(value):
        return int(value)
    raise NotRepresentable(f"{what} {_name(value)} does not exist in {enum_cls.__module__.rsplit('.', 1)[-1]}")


def _name(value: Any) -> str:
    return f"{value.name} ({int(value)})" if hasattr(value, "name") else str(value)


def _loc(loc: v1_3.DataLocation) -> v1_3.DataLocation:
    return v1_3.DataLocation(poolIndex=loc.poolIndex, offset=loc.offset, length=loc.length)


def _arg(a: v1_3.RequestArgument) -> v1_3.RequestArgument:
    return v1_3.RequestArgument(hasNoValue=a.hasNoValue, location=_loc(a.location), dimensions=list(a.dimensions))


def _perf(p: v1_3.PerformanceInfo) -> v1_3.PerformanceInfo:
    return v1_3.PerformanceInfo(execTime=p.execTime, powerUsage=p.powerUsage)


def _lookup(operand_performance: list, operand_type: int) -> v1_3.PerformanceInfo:
    for entry in operand_performance:
        if int(entry.type) == int(operand_type):
            return _perf(entry.info)
    return no_performance_info()


def _same_perf(a: v1_3.PerformanceInfo, b: v1_3.PerformanceInfo) -> bool:
    return a.execTime == b.execTime and a.powerUsage == b.powerUsage


def _version_of(obj: Any) -> int:
    """The HAL version of a versioned object (the newest that defines its type)."""
    t = type(obj)
    for version, classes in _VERSIONED.items():
        if t in classes:
            return version
    raise TypeError(f"not a versioned HAL type: {t.__module__}.{t.__qualname__}")


# --------------------------------------------------------------------------
# upgrade to 1.3


def _operand_to_v1_3(o: Any) -> v1_3.Operand:
    extra = getattr(o, "extraParams", None)  # 1.2 operands only
    extra = deepcopy(extra) if extra is not None else v1_3.OperandExtraParams()
    return v1_3.Operand(
        type=_up(v1_3.OperandType, o.type),
        dimensions=list(o.dimensions),
        numberOfConsumers=o.numberOfConsumers,
        scale=o.scale,
        zeroPoint=o.zeroPoint,
        # NOTE: MODEL_INPUT/MODEL_OUTPUT have the values of SUBGRAPH_INPUT/OUTPUT.
        lifetime=_up(v1_3.OperandLifeTime, o.lifetime),
        location=_loc(o.location),
        extraParams=extra,
    )


def _operation_to_v1_3(op: Any) -> v1_3.Operation:
    return v1_3.Operation(type=_up(v1_3.OperationType, op.type), inputs=list(op.inputs), outputs=list(op.outputs))


def _model_to_v1_3(m: Any) -> v1_3.Model:
    return v1_3.Model(
        main=v1_3.Subgraph(
            operands=[_operand_to_v1_3(o) for o in m.operands],
            operations=[_operation_to_v1_3(op) for op in m.operations],
            inputIndexes=list(m.inputIndexes),
            outputIndexes=list(m.outputIndexes),
        ),
        referenced=[],
        operandValues=m.operandValues,
        pools=list(m.pools),
        relaxComputationFloat32toFloat16=bool(getattr(m, "relaxComputationFloat32toFloat16", False)),
        extensionNameToPrefix=[v1_3.ExtensionNameAndPrefix(name=e.name, prefix=e.prefix)
                               for e in getattr(m, "extensionNameToPrefix", [])],
    )


def _request_to_v1_3(r: v1_0.Request) -> v1_3.Request:
    return v1_3.Request(
        inputs=[_arg(a) for a in r.inputs],
        outputs=[_arg(a) for a in r.outputs],
        pools=[v1_3.MemoryPool(hidlMemory=p) for p in r.pools],
    )


def _capabilities_v1_2_from_v1_0(float32: v1_3.PerformanceInfo, quant8: v1_3.PerformanceInfo,
                                 relaxed: v1_3.PerformanceInfo) -> v1_2.Capabilities:
    # NOTE: Android 11's table omits TENSOR_QUANT8_ASYMM itself, so that 1.0
    # capabilities lose quantized8Performance on a round trip (fixed in
    # Android 12's canonical conversions); we include it: the upgrade is exact.
    quant8_types = (*_QUANT8_PERFORMANCE_CONSISTENT_WITH_P, v1_3.OperandType.TENSOR_QUANT8_ASYMM)
    perf = [v1_2.OperandPerformance(type=v1_2.OperandType(int(t)), info=_perf(quant8)) for t in quant8_types]
    perf.append(v1_2.OperandPerformance(type=v1_2.OperandType.TENSOR_FLOAT32, info=_perf(float32)))
    perf.append(v1_2.OperandPerformance(type=v1_2.OperandType.FLOAT32, info=_perf(float32)))
    perf.sort(key=lambda e: int(e.type))
    return v1_2.Capabilities(relaxedFloat32toFloat16PerformanceScalar=_perf(relaxed),
                             relaxedFloat32toFloat16PerformanceTensor=_perf(relaxed),
                             operandPerformance=perf)


def _capabilities_to_v1_2(c: Any) -> v1_2.Capabilities:
    if isinstance(c, v1_2.Capabilities):
        return c
    if isinstance(c, v1_1.Capabilities):
        return _capabilities_v1_2_from_v1_0(c.float32Performance, c.quantized8Performance,
                                            c.relaxedFloat32toFloat16Performance)
    if isinstance(c, v1_0.Capabilities):
        return _capabilities_v1_2_from_v1_0(c.float32Performance, c.quantized8Performance, c.float32Performance)
    # 1.3 -> 1.2: keep the entries of types that exist in 1.2
    perf = [v1_2.OperandPerformance(type=_up(v1_2.OperandType, e.type), info=_perf(e.info))
            for e in c.operandPerformance
            if int(e.type) in v1_2.OperandType._value2member_map_ or _is_extension(e.type)]
    return v1_2.Capabilities(
        relaxedFloat32toFloat16PerformanceScalar=_perf(c.relaxedFloat32toFloat16PerformanceScalar),
        relaxedFloat32toFloat16PerformanceTensor=_perf(c.relaxedFloat32toFloat16PerformanceTensor),
        operandPerformance=perf,
    )


def _capabilities_to_v1_3(c: Any) -> v1_3.Capabilities:
    c12 = _capabilities_to_v1_2(c)
    return v1_3.Capabilities(
        relaxedFloat32toFloat16PerformanceScalar=_perf(c12.relaxedFloat32toFloat16PerformanceScalar),
        relaxedFloat32toFloat16PerformanceTensor=_perf(c12.relaxedFloat32toFloat16PerformanceTensor),
        operandPerformance=[v1_3.OperandPerformance(type=_up(v1_3.OperandType, e.type), info=_perf(e.info))
                            for e in c12.operandPerformance],
        ifPerformance=no_performance_info(),
        whilePerformance=no_performance_info(),
    )


def convert_to_v1_3(obj: Any) -> Any:
    """Upgrade a HAL 1.0-1.2 object (or a list of them) to its 1.3 type;
    1.3 objects and unchanged types are returned as they are."""
    if isinstance(obj, list):
        return [convert_to_v1_3(x) for x in obj]
    t = type(obj)
    if t in (v1_0.Model, v1_1.Model, v1_2.Model):
        return _model_to_v1_3(obj)
    if t is v1_0.Request:
        return _request_to_v1_3(obj)
    if t in (v1_0.Operand, v1_2.Operand):
        return _operand_to_v1_3(obj)
    if t in (v1_0.Operation, v1_1.Operation, v1_2.Operation):
        return _operation_to_v1_3(obj)
    if t in (v1_0.Capabilities, v1_1.Capabilities, v1_2.Capabilities):
        return _capabilities_to_v1_3(obj)
    if t is v1_2.OperandPerformance:
        return v1_3.OperandPerformance(type=_up(v1_3.OperandType, obj.type), info=_perf(obj.info))
    if t in (v1_0.OperandType, v1_2.OperandType):
        return v1_3.OperandType(int(obj))
    if t in (v1_0.OperationType, v1_1.OperationType, v1_2.OperationType):
        return v1_3.OperationType(int(obj))
    if t is v1_0.OperandLifeTime:
        return v1_3.OperandLifeTime(int(obj))
    if t is v1_0.ErrorStatus:
        return v1_3.ErrorStatus(int(obj))
    if t is v1_2.OperandTypeRange or t is v1_2.OperationTypeRange:
        raise TypeError(f"{t.__qualname__} values are version-specific limits, not convertible")
    return obj


# --------------------------------------------------------------------------
# downgrade from 1.3

_ERROR_TO_V1_0 = {
    v1_3.ErrorStatus.NONE: v1_0.ErrorStatus.NONE,
    v1_3.ErrorStatus.DEVICE_UNAVAILABLE: v1_0.ErrorStatus.DEVICE_UNAVAILABLE,
    v1_3.ErrorStatus.GENERAL_FAILURE: v1_0.ErrorStatus.GENERAL_FAILURE,
    v1_3.ErrorStatus.OUTPUT_INSUFFICIENT_SIZE: v1_0.ErrorStatus.OUTPUT_INSUFFICIENT_SIZE,
    v1_3.ErrorStatus.INVALID_ARGUMENT: v1_0.ErrorStatus.INVALID_ARGUMENT,
}

_OPERAND_TYPE = {_V1_0: v1_0.OperandType, _V1_1: v1_0.OperandType, _V1_2: v1_2.OperandType}
_OPERATION_TYPE = {_V1_0: v1_0.OperationType, _V1_1: v1_1.OperationType, _V1_2: v1_2.OperationType}
_OPERATION = {_V1_0: v1_0.Operation, _V1_1: v1_1.Operation, _V1_2: v1_2.Operation}


def _error_down(status: int) -> v1_0.ErrorStatus:
    return _ERROR_TO_V1_0.get(int(status), v1_0.ErrorStatus.GENERAL_FAILURE)  # type: ignore[call-overload]


def _operand_down(o: v1_3.Operand, version: int) -> Any:
    otype = _down(_OPERAND_TYPE[version], o.type, "operand type", allow_extension=version >= _V1_2)
    if int(o.lifetime) == v1_3.OperandLifeTime.SUBGRAPH:
        raise NotRepresentable("operand lifetime SUBGRAPH does not exist before HAL 1.3")
    lifetime = _down(v1_0.OperandLifeTime, o.lifetime, "operand lifetime")
    common = dict(type=otype, dimensions=list(o.dimensions), numberOfConsumers=o.numberOfConsumers,
                  scale=o.scale, zeroPoint=o.zeroPoint, lifetime=lifetime, location=_loc(o.location))
    if version >= _V1_2:
        return v1_2.Operand(**common, extraParams=deepcopy(o.extraParams))
    if o.extraParams is not None and v1_3.safe_union_discriminator(o.extraParams) is not None:
        raise NotRepresentable("operand extraParams do not exist before HAL 1.2")
    return v1_0.Operand(**common)


def _operation_down(op: v1_3.Operation, version: int) -> Any:
    otype = _down(_OPERATION_TYPE[version], op.type, "operation type", allow_extension=version >= _V1_2)
    return _OPERATION[version](type=otype, inputs=list(op.inputs), outputs=list(op.outputs))


def _model_down(m: v1_3.Model, version: int) -> Any:
    # NOTE: as the reference, referenced subgraphs are dropped: without IF,
    # WHILE and SUBGRAPH operands (all rejected below) nothing can use them.
    g = m.main
    common = dict(
        operands=[_operand_down(o, version) for o in g.operands],
        operations=[_operation_down(op, version) for op in g.operations],
        inputIndexes=list(g.inputIndexes),
        outputIndexes=list(g.outputIndexes),
        operandValues=m.operandValues,
        pools=list(m.pools),
    )
    if version == _V1_0:
        return v1_0.Model(**common)
    if version == _V1_1:
        return v1_1.Model(**common, relaxComputationFloat32toFloat16=m.relaxComputationFloat32toFloat16)
    return v1_2.Model(**common, relaxComputationFloat32toFloat16=m.relaxComputationFloat32toFloat16,
                      extensionNameToPrefix=[v1_3.ExtensionNameAndPrefix(name=e.name, prefix=e.prefix)
                                             for e in m.extensionNameToPrefix])


def _pool_down(pool: Any, i: int) -> v1_3.Memory:
    which = v1_3.safe_union_discriminator(pool)
    if which != "hidlMemory":
        what = "a driver-allocated memory token" if which == "token" else "no memory"
        raise NotRepresentable(f"request pool {i} is {what}; only hidl_memory pools exist before HAL 1.3")
    return pool.hidlMemory


def _request_down(r: v1_3.Request) -> v1_0.Request:
    return v1_0.Request(inputs=[_arg(a) for a in r.inputs], outputs=[_arg(a) for a in r.outputs],
                        pools=[_pool_down(p, i) for i, p in enumerate(r.pools)])


def _capabilities_down(c: Any, version: int) -> Any:
    if version == _V1_2:
        return _capabilities_to_v1_2(c)
    c13 = _capabilities_to_v1_3(c)
    float32 = _lookup(c13.operandPerformance, v1_3.OperandType.TENSOR_FLOAT32)
    quant8 = _lookup(c13.operandPerformance, v1_3.OperandType.TENSOR_QUANT8_ASYMM)
    if version == _V1_1:
        if type(c) is v1_0.Capabilities:
            return v1_1.Capabilities(_perf(c.float32Performance), _perf(c.quantized8Performance),
                                     _perf(c.float32Performance))
        if type(c) is v1_1.Capabilities:
            return c
        return v1_1.Capabilities(float32, quant8, _perf(c13.relaxedFloat32toFloat16PerformanceTensor))
    if type(c) is v1_0.Capabilities:
        return c
    if type(c) is v1_1.Capabilities:
        return v1_0.Capabilities(_perf(c.float32Performance), _perf(c.quantized8Performance))
    return v1_0.Capabilities(float32, quant8)


def _convert_down(obj: Any, version: int) -> Any:
    if isinstance(obj, list):
        return [_convert_down(x, version) for x in obj]
    t = type(obj)
    if t in (v1_0.Capabilities, v1_1.Capabilities, v1_2.Capabilities, v1_3.Capabilities):
        return _capabilities_down(obj, version)
    if t in (v1_3.ErrorStatus, v1_0.ErrorStatus):
        return _error_down(obj)
    if t in (v1_0.Request, v1_3.Request):
        return _request_down(convert_to_v1_3(obj))
    if t in (v1_0.Model, v1_1.Model, v1_2.Model, v1_3.Model):
        if _version_of(obj) == version:
            return obj
        return _model_down(convert_to_v1_3(obj), version)
    if t in (v1_0.Operand, v1_2.Operand, v1_3.Operand):
        return _operand_down(convert_to_v1_3(obj), version)
    if t in (v1_0.Operation, v1_1.Operation, v1_2.Operation, v1_3.Operation):
        return _operation_down(convert_to_v1_3(obj), version)
    if t in (v1_0.OperandType, v1_2.OperandType, v1_3.OperandType):
        return _down(_OPERAND_TYPE[version], obj, "operand type")
    if t in (v1_0.OperationType, v1_1.OperationType, v1_2.OperationType, v1_3.OperationType):
        return _down(_OPERATION_TYPE[version], obj, "operation type")
    if t in (v1_0.OperandLifeTime, v1_3.OperandLifeTime):
        if t is v1_3.OperandLifeTime and obj == v1_3.OperandLifeTime.SUBGRAPH:
            raise NotRepresentable("operand lifetime SUBGRAPH does not exist before HAL 1.3")
        return v1_0.OperandLifeTime(int(obj))
    if t in (v1_2.OperandPerformance, v1_3.OperandPerformance):
        if version < _V1_2:
            raise NotRepresentable("OperandPerformance does not exist before HAL 1.2")
        return v1_2.OperandPerformance(type=_down(v1_2.OperandType, obj.type, "operand type", True),
                                       info=_perf(obj.info))
    return obj


def convert_to_v1_0(obj: Any) -> Any:
    """Convert a HAL object of any version to its 1.0 type (see the module doc)."""
    return _convert_down(obj, _V1_0)


def convert_to_v1_1(obj: Any) -> Any:
    """Convert a HAL object of any version to its 1.1 type (Operand, Request and
    ErrorStatus of 1.1 are those of 1.0)."""
    return _convert_down(obj, _V1_1)


def convert_to_v1_2(obj: Any) -> Any:
    """Convert a HAL object of any version to its 1.2 type (Request and
    ErrorStatus of 1.2 are those of 1.0)."""
    return _convert_down(obj, _V1_2)


# --------------------------------------------------------------------------
# compliance

_SCALAR_TYPES = frozenset(int(t) for t in v1_3.SCALAR_TYPES) - {int(v1_3.OperandType.SUBGRAPH)}


def _valid_operand_type(t: int, version: int) -> bool:
    if version >= _V1_3:
        return int(t) in v1_3.OperandType._value2member_map_ or _is_extension(t)
    if version == _V1_2:
        return int(t) in v1_2.OperandType._value2member_map_ or _is_extension(t)
    return int(t) in v1_0.OperandType._value2member_map_


# NOTE: the canonical OperationType also has the AIDL HAL's operations (BATCH_MATMUL = 102, ...): HIDL 1.3's
# are those up to its OperationTypeRange.FUNDAMENTAL_MAX, and OEM_OPERATION
_HIDL_1_3_OPERATIONS = frozenset(int(t) for t in v1_3.OperationType
                                 if t <= v1_3.OperationTypeRange.FUNDAMENTAL_MAX or t == v1_3.OperationType.OEM_OPERATION)


def _valid_operation_type(t: int, version: int) -> bool:
    if version >= _V1_3:
        return int(t) in _HIDL_1_3_OPERATIONS or _is_extension(t)
    enum_cls = {_V1_0: v1_0.OperationType, _V1_1: v1_1.OperationType, _V1_2: v1_2.OperationType}[version]
    return int(t) in enum_cls._value2member_map_ or (version >= _V1_2 and _is_extension(t))


def _valid_pool(pool: Any, version: int) -> bool:
    if pool is None or getattr(pool, "handle", None) is None:
        return False
    names = ("ashmem", "mmap_fd") if version < _V1_2 else ("ashmem", "mmap_fd", "hardware_buffer_blob",
                                                             "hardware_buffer")
    return pool.name in names


def _operand_compliant(o: v1_3.Operand, version: int) -> bool:
    if version >= _V1_3:
        return True
    if int(o.lifetime) == v1_3.OperandLifeTime.SUBGRAPH:
        return False
    if not _valid_operand_type(o.type, version):
        return False
    if version < _V1_2:
        # NOTE: 1.0 has no tensors of unknown rank.
        return int(o.type) in _SCALAR_TYPES or len(o.dimensions) != 0
    return True


def _model_compliant(m: v1_3.Model, version: int, noncompliant: set | None,
                     validator: OperationValidator | None) -> bool:
    operands = m.main.operands
    pool_ok = [_valid_pool(p, version) for p in m.pools]

    def operand_ok(i: int) -> bool:
        if not 0 <= i < len(operands):
            return False
        o = operands[i]
        if not _operand_compliant(o, version):
            return False
        if int(o.lifetime) == v1_3.OperandLifeTime.CONSTANT_REFERENCE:
            p = o.location.poolIndex
            return 0 <= p < len(pool_ok) and pool_ok[p]
        return True

    def operation_ok(op: v1_3.Operation) -> bool:
        if not all(operand_ok(i) for i in op.inputs) or not all(operand_ok(i) for i in op.outputs):
            return False
        if not _valid_operation_type(op.type, version):
            return False
        return validator is None or bool(validator(op, operands, version))

    bad = {i for i, op in enumerate(m.main.operations) if not operation_ok(op)}
    if noncompliant is not None:
        noncompliant.update(bad)
    return not bad


def _capabilities_compliant(c: Any, version: int) -> bool:
    if version >= _V1_2:
        return True
    t = type(c)
    if t is v1_0.Capabilities:
        return True
    if t is v1_1.Capabilities:
        return version == _V1_1 or _same_perf(c.relaxedFloat32toFloat16Performance, c.float32Performance)
    c13 = _capabilities_to_v1_3(c)
    perf = c13.operandPerformance
    tensor_f32 = _lookup(perf, v1_3.OperandType.TENSOR_FLOAT32)
    scalar_f32 = _lookup(perf, v1_3.OperandType.FLOAT32)
    if version == _V1_0:
        if not (_same_perf(tensor_f32, scalar_f32)
                and _same_perf(tensor_f32, c13.relaxedFloat32toFloat16PerformanceTensor)
                and _same_perf(scalar_f32, c13.relaxedFloat32toFloat16PerformanceScalar)):
            return False
    else:
        if not (_same_perf(c13.relaxedFloat32toFloat16PerformanceTensor,
                           c13.relaxedFloat32toFloat16PerformanceScalar)
                and _same_perf(tensor_f32, scalar_f32)):
            return False
    quant8 = _lookup(perf, v1_3.OperandType.TENSOR_QUANT8_ASYMM)
    return all(_same_perf(quant8, _lookup(perf, t)) for t in _QUANT8_PERFORMANCE_CONSISTENT_WITH_P)


def _compliant(obj: Any, version: int, noncompliant_operations: set | None,
               validate_operation: OperationValidator | None) -> bool:
    t = type(obj)
    if t in (v1_0.Capabilities, v1_1.Capabilities, v1_2.Capabilities, v1_3.Capabilities):
        return _capabilities_compliant(obj, version)
    if t is v1_0.Request:
        return True
    if t is v1_3.Request:
        return all(v1_3.safe_union_discriminator(p) == "hidlMemory" and _valid_pool(p.hidlMemory, version)
                   for p in obj.pools)
    if t in (v1_0.Model, v1_1.Model, v1_2.Model, v1_3.Model):
        if _version_of(obj) <= version:
            return True
        return _model_compliant(convert_to_v1_3(obj), version, noncompliant_operations, validate_operation)
    if t in (v1_0.Operand, v1_2.Operand, v1_3.Operand):
        return _version_of(obj) <= version or _operand_compliant(convert_to_v1_3(obj), version)
    if t in (v1_0.OperandType, v1_2.OperandType, v1_3.OperandType):
        return _valid_operand_type(obj, version)
    if t in (v1_0.OperationType, v1_1.OperationType, v1_2.OperationType, v1_3.OperationType):
        return _valid_operation_type(obj, version)
    if t in (v1_0.OperandLifeTime, v1_3.OperandLifeTime):
        return not (t is v1_3.OperandLifeTime and obj == v1_3.OperandLifeTime.SUBGRAPH)
    if t in (v1_0.ErrorStatus, v1_3.ErrorStatus):
        return int(obj) in v1_0.ErrorStatus._value2member_map_
    raise TypeError(f"no compliance rule for {t.__module__}.{t.__qualname__}")


def compliant_with_v1_0(obj: Any, noncompliant_operations: set | None = None,
                        validate_operation: OperationValidator | None = None) -> bool:
    """True if ``obj`` (a Model, Request, Operand, Capabilities, ... of any
    version) means the same at HAL 1.0.  For a model, the indexes of the
    operations that do not comply are added to ``noncompliant_operations``."""
    return _compliant(obj, _V1_0, noncompliant_operations, validate_operation)


def compliant_with_v1_1(obj: Any, noncompliant_operations: set | None = None,
                        validate_operation: OperationValidator | None = None) -> bool:
    """As :func:`compliant_with_v1_0`, for HAL 1.1."""
    return _compliant(obj, _V1_1, noncompliant_operations, validate_operation)


def compliant_with_v1_2(obj: Any, noncompliant_operations: set | None = None,
                        validate_operation: OperationValidator | None = None) -> bool:
    """As :func:`compliant_with_v1_0`, for HAL 1.2."""
    return _compliant(obj, _V1_2, noncompliant_operations, validate_operation)


# the newest version defining each versioned type
_VERSIONED: dict[int, tuple] = {
    _V1_0: (v1_0.Model, v1_0.Operand, v1_0.Operation, v1_0.Capabilities, v1_0.Request, v1_0.OperandType,
            v1_0.OperationType, v1_0.OperandLifeTime, v1_0.ErrorStatus),
    _V1_1: (v1_1.Model, v1_1.Operation, v1_1.Capabilities, v1_1.OperationType),
    _V1_2: (v1_2.Model, v1_2.Operand, v1_2.Operation, v1_2.Capabilities, v1_2.OperandType, v1_2.OperationType,
            v1_2.OperandPerformance),
    _V1_3: (v1_3.Model, v1_3.Operand, v1_3.Operation, v1_3.Capabilities, v1_3.Request, v1_3.OperandType,
            v1_3.OperationType, v1_3.OperandLifeTime, v1_3.ErrorStatus, v1_3.OperandPerformance),
}
