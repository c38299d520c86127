"""Tests of the HAL 1.0-1.2 types (nnhal.hal.v1_0..v1_2) and the conversions
between versions (nnhal.hal.convert)."""

from __future__ import annotations

import dataclasses
import enum
import re
from pathlib import Path

import pytest

import nnhal.hal.v1_0
from nnhal import hal
from nnhal.hal import convert, v1_0, v1_1, v1_2
from nnhal.hal.convert import (
    FLT_MAX,
    NotRepresentable,
    compliant_with_v1_0,
    compliant_with_v1_1,
    compliant_with_v1_2,
    convert_to_v1_0,
    convert_to_v1_1,
    convert_to_v1_2,
    convert_to_v1_3,
)

SPEC = Path("/work/spec")
MODULES = {"1.0": v1_0, "1.1": v1_1, "1.2": v1_2, "1.3": hal}


# ---------------------------------------------------------------- a small types.hal reader


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _parse_types(version: str) -> tuple[dict, dict]:
    """(enums, structs) of one types.hal: enums as {name: (base, [(member, value-or-None-or-ref)])},
    structs as {name: [field names]} with nested ones as 'Outer.Inner'."""
    text = _strip_comments((SPEC / version / "types.hal").read_text())
    enums: dict = {}
    structs: dict = {}
    stack: list = []  # (kind, name, fields)
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("import") or line.startswith("package"):
            continue
        m = re.match(r"(enum|struct|safe_union)\s+(\w+)\s*(?::\s*([\w@.:]+))?\s*\{$", line)
        if m:
            kind, name, base = m.groups()
            full = ".".join([s[1] for s in stack] + [name])
            stack.append((kind, name, [], base, full))
            continue
        if line.startswith("}"):
            kind, name, items, base, full = stack.pop()
            if kind == "enum":
                enums[full] = (base, items)
            else:
                structs[full] = items
            fname = re.match(r"\}\s*(\w+)\s*;", line)
            if fname and stack:  # inline safe_union/struct declaring a field
                stack[-1][2].append(fname.group(1))
            continue
        if not stack:
            continue
        kind = stack[-1][0]
        if kind == "enum":
            m = re.match(r"(\w+)\s*(?:=\s*([^,]+))?,?$", line)
            if m:
                stack[-1][2].append((m.group(1), m.group(2)))
        else:
            m = re.match(r"(.+?)\s+(\w+)\s*;$", line)
            if m and m.group(1) != "Monostate":  # a safe_union's empty member: all fields None
                stack[-1][2].append(m.group(2))
    return enums, structs


def _enum_values(version: str, name: str, cache: dict = {}) -> dict[str, int]:  # noqa: B006
    key = (version, name)
    if key in cache:
        return cache[key]
    enums, _ = _parse_types(version)
    base, items = enums[name]
    values: dict[str, int] = {}
    if base and base.startswith("@"):
        bver, bname = re.match(r"@(\d\.\d)::(\w+)", base).groups()
        values.update(_enum_values(bver, bname))
    nxt = max(values.values()) + 1 if values else 0  # implicit values continue the base enum
    for member, val in items:
        if val is None:
            v = nxt
        elif val.strip().startswith("@"):
            bver, bname, bmember = re.match(r"@(\d\.\d)::(\w+):(\w+)", val.strip()).groups()
            v = _enum_values(bver, bname)[bmember]
        else:
            v = int(val.strip(), 0)
        values[member] = v
        nxt = v + 1
    cache[key] = values
    return values


needs_spec = pytest.mark.skipif(not (SPEC / "1.0" / "types.hal").exists(), reason="HAL spec files not available")


@needs_spec
@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2", "1.3"])
def test_every_enum_matches_the_hal_file(version):
    enums, _ = _parse_types(version)
    mod = MODULES[version]
    assert enums, "parser found no enums"
    for name in enums:
        expected = _enum_values(version, name)
        obj = mod
        for part in name.split("."):
            obj = getattr(obj, part)
        assert issubclass(obj, enum.IntEnum), name
        got = {k: m.value for k, m in obj.__members__.items()}
        if obj is hal.OperationType:
            # NOTE: the canonical enum also has the AIDL HAL's operations (102..105), not in HIDL 1.3's file
            got = {k: v for k, v in got.items() if v <= hal.OperationTypeRange.FUNDAMENTAL_MAX or v >= 10000}
        # aliases (OperandTypeRange.FUNDAMENTAL_MIN = BASE_MIN) appear in __members__ too
        assert got == expected, f"{version} {name}"


@needs_spec
@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2", "1.3"])
def test_every_struct_matches_the_hal_file(version):
    _, structs = _parse_types(version)
    mod = MODULES[version]
    assert structs, "parser found no structs"
    for name, field_names in structs.items():
        obj = mod
        for part in name.split("."):
            obj = getattr(obj, part)
        assert dataclasses.is_dataclass(obj), name
        assert [f.name for f in dataclasses.fields(obj)] == field_names, f"{version} {name}"
        obj()  # every field has a default


@needs_spec
@pytest.mark.parametrize("version", ["1.1", "1.2"])
def test_older_types_still_visible(version):
    """Every type of an older version not redefined by this one is exported here."""
    order = ["1.0", "1.1", "1.2"]
    mod = MODULES[version]
    defined_here = set(_parse_types(version)[0]) | set(_parse_types(version)[1])
    for older in order[: order.index(version)]:
        enums, structs = _parse_types(older)
        for name in list(enums) + list(structs):
            if "." in name or name in defined_here:
                continue
            assert getattr(mod, name) is getattr(MODULES[older], name), f"{version}.{name}"


def test_import_styles():
    assert nnhal.hal.v1_0.Model is hal.v1_0.Model is v1_0.Model
    assert hal.convert is convert


def test_selected_values():
    assert v1_0.OperandType.TENSOR_QUANT8_ASYMM == 5
    assert v1_0.OperandType.OEM == 10000 and v1_0.OperandType.TENSOR_OEM_BYTE == 10001
    assert len([m for m in v1_0.OperandType if m < 10000]) == 6
    assert max(m for m in v1_0.OperationType if m < 10000) == v1_0.OperationType.TANH == 28
    assert max(m for m in v1_1.OperationType if m < 10000) == v1_1.OperationType.TRANSPOSE == 37
    assert max(m for m in v1_2.OperationType if m < 10000) == v1_2.OperationType.RESIZE_NEAREST_NEIGHBOR == 94
    for mod in (v1_0, v1_1, v1_2):
        assert mod.OperationType.OEM_OPERATION == 10000
    assert v1_0.OperandLifeTime.MODEL_INPUT == 1 and v1_0.OperandLifeTime.MODEL_OUTPUT == 2
    assert not hasattr(v1_0.OperandLifeTime, "SUBGRAPH")
    assert [m.name for m in v1_0.ErrorStatus] == ["NONE", "DEVICE_UNAVAILABLE", "GENERAL_FAILURE",
                                                  "OUTPUT_INSUFFICIENT_SIZE", "INVALID_ARGUMENT"]
    assert v1_2.OperandType.TENSOR_QUANT8_SYMM == 13 and not hasattr(v1_2.OperandType, "SUBGRAPH")
    assert v1_2.OperandTypeRange.FUNDAMENTAL_MAX == 13 and v1_2.OperationTypeRange.FUNDAMENTAL_MAX == 94


def test_unchanged_types_are_reexported():
    assert v1_0.DataLocation is hal.DataLocation and v1_0.RequestArgument is hal.RequestArgument
    assert v1_0.PerformanceInfo is hal.PerformanceInfo and v1_0.Memory is hal.Memory
    assert v1_1.ExecutionPreference is hal.ExecutionPreference
    assert v1_1.Operand is v1_0.Operand and v1_1.Request is v1_0.Request and v1_1.ErrorStatus is v1_0.ErrorStatus
    assert v1_2.OutputShape is hal.OutputShape and v1_2.Timing is hal.Timing
    assert v1_2.MeasureTiming is hal.MeasureTiming and v1_2.Constant is hal.Constant
    assert v1_2.OperandLifeTime is v1_0.OperandLifeTime and v1_2.Request is v1_0.Request
    assert v1_2.Operand.ExtraParams is hal.OperandExtraParams
    assert v1_2.Model.ExtensionNameAndPrefix is hal.ExtensionNameAndPrefix
    assert v1_2.Capabilities.OperandPerformance is v1_2.OperandPerformance


def test_field_types():
    assert v1_0.Operand().lifetime is v1_0.OperandLifeTime.TEMPORARY_VARIABLE
    assert type(v1_1.Operation().type) is v1_1.OperationType
    assert v1_2.Operand().extraParams == hal.OperandExtraParams()
    assert v1_0.Request().pools == [] and v1_1.Model().relaxComputationFloat32toFloat16 is False


# ---------------------------------------------------------------- models


def _memory(name="ashmem"):
    return hal.Memory(name=name, handle=hal.Handle(fds=[99]), size=64)


def _model_v1_0() -> v1_0.Model:
    T, L = v1_0.OperandType, v1_0.OperandLifeTime
    operands = [
        v1_0.Operand(type=T.TENSOR_FLOAT32, dimensions=[1, 2], numberOfConsumers=1, lifetime=L.MODEL_INPUT),
        v1_0.Operand(type=T.TENSOR_FLOAT32, dimensions=[1, 2], numberOfConsumers=1, lifetime=L.CONSTANT_COPY,
                     location=hal.DataLocation(poolIndex=0, offset=0, length=8)),
        v1_0.Operand(type=T.INT32, numberOfConsumers=1, lifetime=L.CONSTANT_REFERENCE,
                     location=hal.DataLocation(poolIndex=0, offset=4, length=4)),
        v1_0.Operand(type=T.TENSOR_FLOAT32, dimensions=[1, 2], lifetime=L.MODEL_OUTPUT),
    ]
    return v1_0.Model(operands=operands,
                      operations=[v1_0.Operation(type=v1_0.OperationType.ADD, inputs=[0, 1, 2], outputs=[3])],
                      inputIndexes=[0], outputIndexes=[3], operandValues=bytes(8), pools=[_memory()])


def test_v1_0_model_converts_to_equivalent_v1_3():
    m0 = _model_v1_0()
    m = convert_to_v1_3(m0)
    assert type(m) is hal.Model
    assert m.relaxComputationFloat32toFloat16 is False and m.referenced == [] and m.extensionNameToPrefix == []
    assert m.main.inputIndexes == [0] and m.main.outputIndexes == [3]
    assert m.operandValues == bytes(8) and m.pools == m0.pools
    assert [o.lifetime for o in m.main.operands] == [
        hal.OperandLifeTime.SUBGRAPH_INPUT, hal.OperandLifeTime.CONSTANT_COPY,
        hal.OperandLifeTime.CONSTANT_REFERENCE, hal.OperandLifeTime.SUBGRAPH_OUTPUT]
    assert all(type(o.lifetime) is hal.OperandLifeTime for o in m.main.operands)
    assert all(type(o.type) is hal.OperandType for o in m.main.operands)
    assert m.main.operands[1].location == hal.DataLocation(0, 0, 8)
    assert m.main.operands[0].extraParams == hal.OperandExtraParams()
    op = m.main.operations[0]
    assert type(op) is hal.Operation and op.type is hal.OperationType.ADD and op.inputs == [0, 1, 2]
    # converted objects are copies
    m.main.operands[0].dimensions.append(5)
    m.main.operands[1].location.offset = 3
    assert m0.operands[0].dimensions == [1, 2] and m0.operands[1].location.offset == 0


def test_model_round_trips():
    m0 = _model_v1_0()
    assert convert_to_v1_0(convert_to_v1_3(m0)) == m0
    m1 = convert_to_v1_1(m0)
    assert type(m1) is v1_1.Model and m1.relaxComputationFloat32toFloat16 is False
    m1.relaxComputationFloat32toFloat16 = True
    m1.operations[0].type = v1_1.OperationType.DIV
    m13 = convert_to_v1_3(m1)
    assert m13.relaxComputationFloat32toFloat16 is True and m13.main.operations[0].type == hal.OperationType.DIV
    assert convert_to_v1_1(m13) == m1
    with pytest.raises(NotRepresentable, match="DIV"):
        convert_to_v1_0(m13)

    m2 = convert_to_v1_2(m1)
    assert type(m2) is v1_2.Model and type(m2.operands[0]) is v1_2.Operand
    m2.operands.append(v1_2.Operand(
        type=v1_2.OperandType.TENSOR_QUANT8_SYMM_PER_CHANNEL, dimensions=[2, 1], scale=0.0,
        lifetime=v1_2.OperandLifeTime.CONSTANT_COPY,
        extraParams=hal.OperandExtraParams(channelQuant=hal.SymmPerChannelQuantParams(scales=[0.5, 0.25]))))
    m2.extensionNameToPrefix = [hal.ExtensionNameAndPrefix(name="com.example.ext", prefix=3)]
    m13 = convert_to_v1_3(m2)
    assert m13.main.operands[-1].extraParams.channelQuant.scales == [0.5, 0.25]
    assert m13.extensionNameToPrefix == m2.extensionNameToPrefix
    assert convert_to_v1_2(m13) == m2
    with pytest.raises(NotRepresentable):
        convert_to_v1_1(m13)  # per-channel quantization does not exist in 1.1
    assert convert_to_v1_2(m2) is m2 and convert_to_v1_3(m13) is m13


def test_invalid_values_survive_upgrade():
    """VTS sends invalid models through the 1.0 entry points: the upgrade must
    keep the bad values for validation to reject them."""
    m0 = _model_v1_0()
    m0.operands[0].type = 9999
    m0.operands[1].lifetime = 77
    m0.operations[0].type = 10001
    m = convert_to_v1_3(m0)
    assert m.main.operands[0].type == 9999 and m.main.operands[1].lifetime == 77
    assert m.main.operations[0].type == 10001
    with pytest.raises(NotRepresentable):
        convert_to_v1_0(m)


def test_downgrade_rejects_1_3_only_values():
    m = convert_to_v1_3(_model_v1_0())
    m.main.operands[0].type = hal.OperandType.TENSOR_QUANT8_ASYMM_SIGNED
    with pytest.raises(NotRepresentable, match="TENSOR_QUANT8_ASYMM_SIGNED"):
        convert_to_v1_2(m)
    m = convert_to_v1_3(_model_v1_0())
    m.main.operands[2].lifetime = hal.OperandLifeTime.SUBGRAPH
    with pytest.raises(NotRepresentable, match="SUBGRAPH"):
        convert_to_v1_2(m)
    m = convert_to_v1_3(_model_v1_0())
    m.main.operations[0].type = hal.OperationType.IF
    with pytest.raises(NotRepresentable, match="IF"):
        convert_to_v1_2(m)
    assert issubclass(NotRepresentable, ValueError)
    # the AIDL HAL's operations (canonical here) exist in no HIDL version
    m.main.operations[0].type = hal.OperationType.BATCH_MATMUL
    with pytest.raises(NotRepresentable, match="BATCH_MATMUL"):
        convert_to_v1_2(m)
    assert not hal.convert.compliant_with_v1_2(m) and not hal.convert.compliant_with_v1_2(hal.OperationType.REVERSE)


def test_extension_types_pass_to_1_2():
    m = convert_to_v1_3(_model_v1_0())
    ext = (3 << 16) | 1
    m.main.operands[0].type = ext
    m.main.operations[0].type = ext
    m2 = convert_to_v1_2(m)
    assert m2.operands[0].type == ext and m2.operations[0].type == ext
    assert convert_to_v1_3(m2) == m


def test_part_conversions():
    assert convert_to_v1_3(v1_0.OperandType.TENSOR_INT32) is hal.OperandType.TENSOR_INT32
    assert convert_to_v1_3(v1_2.OperandType.TENSOR_FLOAT16) is hal.OperandType.TENSOR_FLOAT16
    assert convert_to_v1_3(v1_1.OperationType.SUB) is hal.OperationType.SUB
    assert convert_to_v1_3(v1_0.OperandLifeTime.MODEL_OUTPUT) is hal.OperandLifeTime.SUBGRAPH_OUTPUT
    assert convert_to_v1_3(v1_0.ErrorStatus.INVALID_ARGUMENT) is hal.ErrorStatus.INVALID_ARGUMENT
    assert convert_to_v1_0(hal.OperandLifeTime.SUBGRAPH_INPUT) is v1_0.OperandLifeTime.MODEL_INPUT
    assert convert_to_v1_2(hal.OperandType.TENSOR_BOOL8) is v1_2.OperandType.TENSOR_BOOL8
    assert convert_to_v1_1(hal.OperationType.TRANSPOSE) is v1_1.OperationType.TRANSPOSE
    with pytest.raises(NotRepresentable):
        convert_to_v1_1(hal.OperationType.ABS)
    with pytest.raises(NotRepresentable):
        convert_to_v1_0(hal.OperandLifeTime.SUBGRAPH)
    o = convert_to_v1_3(v1_0.Operand(type=v1_0.OperandType.TENSOR_INT32, dimensions=[3]))
    assert type(o) is hal.Operand and o.type is hal.OperandType.TENSOR_INT32
    assert convert_to_v1_0(o) == v1_0.Operand(type=v1_0.OperandType.TENSOR_INT32, dimensions=[3])
    assert type(convert_to_v1_2(o)) is v1_2.Operand
    op = convert_to_v1_3(v1_2.Operation(type=v1_2.OperationType.CAST, inputs=[0], outputs=[1]))
    assert op == hal.Operation(type=hal.OperationType.CAST, inputs=[0], outputs=[1])
    assert convert_to_v1_3([v1_0.ErrorStatus.NONE, v1_0.OperandType.INT32]) == [hal.ErrorStatus.NONE,
                                                                                 hal.OperandType.INT32]
    loc = hal.DataLocation(1, 2, 3)
    assert convert_to_v1_3(loc) is loc and convert_to_v1_0(loc) is loc


# ---------------------------------------------------------------- error status


def test_error_status():
    E, E0 = hal.ErrorStatus, v1_0.ErrorStatus
    for s in E0:
        assert convert_to_v1_3(s) == E[s.name] and convert_to_v1_0(E[s.name]) is E0[s.name]
    for s in (E.MISSED_DEADLINE_TRANSIENT, E.MISSED_DEADLINE_PERSISTENT, E.RESOURCE_EXHAUSTED_TRANSIENT,
              E.RESOURCE_EXHAUSTED_PERSISTENT):
        for down in (convert_to_v1_0, convert_to_v1_1, convert_to_v1_2):
            assert down(s) is E0.GENERAL_FAILURE
        assert not compliant_with_v1_0(s)
    assert compliant_with_v1_2(E.OUTPUT_INSUFFICIENT_SIZE)


# ---------------------------------------------------------------- requests


def test_request_conversions():
    args = [hal.RequestArgument(location=hal.DataLocation(0, 0, 8), dimensions=[1, 2])]
    r0 = v1_0.Request(inputs=args, outputs=[hal.RequestArgument(location=hal.DataLocation(1, 0, 8))],
                      pools=[_memory(), _memory("mmap_fd")])
    r = convert_to_v1_3(r0)
    assert type(r) is hal.Request
    assert r.pools == [hal.MemoryPool(hidlMemory=r0.pools[0]), hal.MemoryPool(hidlMemory=r0.pools[1])]
    assert r.pools[0].hidlMemory is r0.pools[0]  # the same memory, not a copy of its fds
    assert r.inputs == r0.inputs and r.inputs[0] is not r0.inputs[0]
    for down in (convert_to_v1_0, convert_to_v1_1, convert_to_v1_2):
        assert down(r) == r0
    assert compliant_with_v1_0(r) and compliant_with_v1_0(r0)
    r.pools.append(hal.MemoryPool(token=5))
    assert not compliant_with_v1_2(r)
    with pytest.raises(NotRepresentable, match="token"):
        convert_to_v1_0(r)
    r.pools[-1] = hal.MemoryPool(hidlMemory=_memory("hardware_buffer_blob"))
    assert not compliant_with_v1_1(r) and compliant_with_v1_2(r)


# ---------------------------------------------------------------- capabilities


def _pi(x: float) -> hal.PerformanceInfo:
    return hal.PerformanceInfo(execTime=x, powerUsage=x + 0.5)


def test_capabilities_upgrade_from_v1_0():
    c = convert_to_v1_3(v1_0.Capabilities(float32Performance=_pi(1), quantized8Performance=_pi(2)))
    assert type(c) is hal.Capabilities
    T = hal.OperandType
    assert [e.type for e in c.operandPerformance] == [T.FLOAT32, T.INT32, T.UINT32, T.TENSOR_FLOAT32, T.TENSOR_INT32,
                                                      T.TENSOR_QUANT8_ASYMM, T.OEM, T.TENSOR_OEM_BYTE]
    perf = {e.type: e.info for e in c.operandPerformance}
    assert perf[T.TENSOR_FLOAT32] == _pi(1) and perf[T.FLOAT32] == _pi(1) and perf[T.TENSOR_QUANT8_ASYMM] == _pi(2)
    assert c.relaxedFloat32toFloat16PerformanceScalar == _pi(1) == c.relaxedFloat32toFloat16PerformanceTensor
    assert c.ifPerformance == hal.PerformanceInfo(FLT_MAX, FLT_MAX) == c.whilePerformance


def test_capabilities_round_trips():
    c0 = v1_0.Capabilities(float32Performance=_pi(1), quantized8Performance=_pi(2))
    assert convert_to_v1_0(convert_to_v1_3(c0)) == c0
    assert convert_to_v1_0(convert_to_v1_2(c0)) == c0
    c1 = v1_1.Capabilities(_pi(1), _pi(2), _pi(3))
    assert convert_to_v1_1(convert_to_v1_3(c1)) == c1
    assert convert_to_v1_1(c0) == v1_1.Capabilities(_pi(1), _pi(2), _pi(1))
    assert convert_to_v1_0(c1) == v1_0.Capabilities(_pi(1), _pi(2))
    c2 = convert_to_v1_2(c1)
    assert type(c2) is v1_2.Capabilities and all(type(e) is v1_2.OperandPerformance for e in c2.operandPerformance)
    assert convert_to_v1_2(convert_to_v1_3(c2)) == c2


def test_capabilities_downgrade_from_v1_3():
    T = hal.OperandType
    c = hal.Capabilities(
        relaxedFloat32toFloat16PerformanceScalar=_pi(5), relaxedFloat32toFloat16PerformanceTensor=_pi(6),
        operandPerformance=[hal.OperandPerformance(type=t, info=_pi(10 + int(t) % 100))
                            for t in T if t != T.SUBGRAPH],
        ifPerformance=_pi(7), whilePerformance=_pi(8))
    assert convert_to_v1_0(c) == v1_0.Capabilities(float32Performance=_pi(13), quantized8Performance=_pi(15))
    assert convert_to_v1_1(c) == v1_1.Capabilities(_pi(13), _pi(15), _pi(6))
    c2 = convert_to_v1_2(c)
    assert T.TENSOR_QUANT8_ASYMM_SIGNED not in [int(e.type) for e in c2.operandPerformance]
    assert len(c2.operandPerformance) == len(T) - 2
    assert c2.relaxedFloat32toFloat16PerformanceScalar == _pi(5)
    # missing entries give the worst performance
    empty = convert_to_v1_0(hal.Capabilities())
    assert empty.float32Performance == hal.PerformanceInfo(FLT_MAX, FLT_MAX)


def test_capabilities_compliance():
    c0 = v1_0.Capabilities(_pi(1), _pi(2))
    c13 = convert_to_v1_3(c0)
    assert compliant_with_v1_0(c13) and compliant_with_v1_1(c13) and compliant_with_v1_2(c13)
    c13.relaxedFloat32toFloat16PerformanceTensor = _pi(9)
    assert not compliant_with_v1_0(c13) and not compliant_with_v1_1(c13) and compliant_with_v1_2(c13)
    c13 = convert_to_v1_3(c0)
    c13.operandPerformance[1].info = _pi(4)  # INT32 no longer like TENSOR_QUANT8_ASYMM
    assert not compliant_with_v1_0(c13) and not compliant_with_v1_1(c13)
    c1 = v1_1.Capabilities(_pi(1), _pi(2), _pi(3))
    assert not compliant_with_v1_0(c1) and compliant_with_v1_1(c1)


# ---------------------------------------------------------------- model compliance


def test_model_compliance():
    m0 = _model_v1_0()
    m = convert_to_v1_3(m0)
    assert compliant_with_v1_0(m) and compliant_with_v1_1(m) and compliant_with_v1_2(m)
    assert compliant_with_v1_0(m0) and compliant_with_v1_2(m0)

    div = convert_to_v1_3(m0)
    div.main.operations.append(hal.Operation(type=hal.OperationType.DIV, inputs=[0, 1, 2], outputs=[3]))
    bad: set = set()
    assert not compliant_with_v1_0(div, bad) and bad == {1}
    assert compliant_with_v1_1(div)
    assert not compliant_with_v1_0(convert_to_v1_1(div))  # a 1.1 model using a 1.1 operation
    assert compliant_with_v1_1(convert_to_v1_1(div))

    f16 = convert_to_v1_3(m0)
    f16.main.operands[0].type = hal.OperandType.TENSOR_FLOAT16
    assert not compliant_with_v1_1(f16) and compliant_with_v1_2(f16)

    signed = convert_to_v1_3(m0)
    signed.main.operands[3].type = hal.OperandType.TENSOR_QUANT8_ASYMM_SIGNED
    assert not compliant_with_v1_2(signed)

    unknown_rank = convert_to_v1_3(m0)
    unknown_rank.main.operands[3].dimensions = []
    assert not compliant_with_v1_0(unknown_rank) and compliant_with_v1_2(unknown_rank)

    hwb = convert_to_v1_3(m0)
    hwb.pools = [_memory("hardware_buffer_blob")]
    assert not compliant_with_v1_1(hwb) and compliant_with_v1_2(hwb)  # operand 2 is a CONSTANT_REFERENCE

    control = convert_to_v1_3(m0)
    control.main.operations[0].type = hal.OperationType.WHILE
    assert not compliant_with_v1_2(control)


def test_model_compliance_uses_operation_validator():
    m = convert_to_v1_3(_model_v1_0())
    calls = []

    def validator(op, operands, version):
        calls.append((op.type, len(operands), version))
        return version >= 1

    assert not compliant_with_v1_0(m, validate_operation=validator)
    assert compliant_with_v1_1(m, validate_operation=validator)
    assert calls == [(hal.OperationType.ADD, 4, 0), (hal.OperationType.ADD, 4, 1)]
    assert not compliant_with_v1_0(m, validate_operation=validator) and compliant_with_v1_2(m, validate_operation=validator)
    assert compliant_with_v1_0(m)  # without a validator: the operation type and operands only


def test_operand_compliance():
    o = hal.Operand(type=hal.OperandType.TENSOR_FLOAT16, dimensions=[1])
    assert not compliant_with_v1_0(o) and compliant_with_v1_2(o)
    assert compliant_with_v1_0(v1_0.Operand())
    assert not compliant_with_v1_2(hal.OperandType.SUBGRAPH) and compliant_with_v1_2(hal.OperandType.BOOL)
