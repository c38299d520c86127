"""Section "basic": the device checks of each interface's VTS, through the
face judged (:mod:`nnhal.conformance.face`).  VTS 1.3's ``BasicTests.cpp``
(and ``VtsHalNeuralnetworks.cpp``): the device's status, capabilities,
version, type, extensions, cache file counts and instance name, and models
with a cycle (through operations, or through referenced subgraphs) rejected.
The AIDL VTS's ``BasicTests.cpp`` keeps the capabilities and the cycle
(``NeuralNetworksAidlTest``); the other 1.3 device checks ask the same of
the AIDL methods (AIDL has no ``getStatus``), and the interface version and
hash must be a frozen version's.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from nnhal import hal
from nnhal.conformance.face import AidlFace, Face, HidlFace, as_face
from nnhal.conformance.vts.case import Case, Recorder, name
from nnhal.conformance.vts.model import Mutation, judge

SECTION = "basic"
S = hal.ErrorStatus
T = hal.OperandType
L = hal.OperandLifeTime
Op = hal.OperationType


def _perf_ok(p: hal.PerformanceInfo) -> bool:
    return p.execTime > 0 and p.powerUsage > 0


def _capabilities(face: Face) -> tuple[str, str]:
    status, caps = face.capabilities()
    if status != S.NONE:
        return name(status), f"getCapabilities{face.method_suffix} gave {name(status)}"
    perfs = [caps.relaxedFloat32toFloat16PerformanceScalar, caps.relaxedFloat32toFloat16PerformanceTensor,
             caps.ifPerformance, caps.whilePerformance] + [p.info for p in caps.operandPerformance]
    if not all(_perf_ok(p) for p in perfs):
        return "NONE", "a performance value is not > 0"
    types = [int(p.type) for p in caps.operandPerformance]
    if types != sorted(types) or len(set(types)) != len(types):
        return "NONE", "operandPerformance is not sorted by type (without repeats)"
    if int(T.SUBGRAPH) in types:
        return "NONE", "operandPerformance has a SUBGRAPH entry"
    return "NONE", ""


def _status(face: HidlFace) -> tuple[str, str]:
    s = face.device_status()
    got = hal.DeviceStatus(s).name if s in hal.DeviceStatus._value2member_map_ else repr(s)
    return got, "" if s == hal.DeviceStatus.AVAILABLE else f"getStatus gave {got}"


def _version(face: Face) -> tuple[str, str]:
    status, version = face.version_string()
    return name(status), "" if status == S.NONE and version else f"{name(status)}, version {version!r}"


def _type(face: Face) -> tuple[str, str]:
    status, t = face.device_type()
    ok = status == S.NONE and t in hal.DeviceType._value2member_map_  # OTHER, CPU, GPU, ACCELERATOR
    return name(status), "" if ok else f"{name(status)}, type {t!r}"


_EXTENSION = re.compile(r"^[a-z0-9_.]+$")


def _extensions(face: Face) -> tuple[str, str]:
    status, extensions = face.extensions()
    if status != S.NONE:
        return name(status), f"getSupportedExtensions gave {name(status)}"
    for e in extensions:
        if not e.name or not _EXTENSION.match(e.name) or "." not in e.name:
            return "NONE", f"extension name {e.name!r}: non-empty [a-z0-9_.] with a '.'"
    return "NONE", ""


def _cache_files(face: Face) -> tuple[str, str]:
    status, n_model, n_data = face.cache_files()
    if status != S.NONE or not (0 <= n_model <= 32 and 0 <= n_data <= 32):
        return name(status), f"{name(status)}, {n_model} model and {n_data} data cache files"
    return "NONE", ""


def _instance_name(device_name: str) -> tuple[str, str]:
    ok = device_name.count("-") == 1 and not device_name.startswith("-") and not device_name.endswith("-")
    return device_name, "" if ok else "the instance name must have exactly one '-', not first or last"


def _float(lifetime: L, consumers: int) -> hal.Operand:
    return hal.Operand(type=T.TENSOR_FLOAT32, dimensions=[1], numberOfConsumers=consumers, lifetime=lifetime)


def cycle_model(order: tuple[int, ...] = (0, 1, 2)) -> hal.Model:
    """op0: t3 = ADD(in0, t4, act); op1: t4 = ADD(in1, t3, act); op2: out5 = ADD(t4, in0, act)."""
    operands = [_float(L.SUBGRAPH_INPUT, 2), _float(L.SUBGRAPH_INPUT, 1),
                hal.Operand(type=T.INT32, numberOfConsumers=3, lifetime=L.SUBGRAPH_INPUT),
                _float(L.TEMPORARY_VARIABLE, 1), _float(L.TEMPORARY_VARIABLE, 2), _float(L.SUBGRAPH_OUTPUT, 0)]
    ops = [hal.Operation(Op.ADD, [0, 4, 2], [3]), hal.Operation(Op.ADD, [1, 3, 2], [4]),
           hal.Operation(Op.ADD, [4, 0, 2], [5])]
    return hal.Model(main=hal.Subgraph(operands, [ops[k] for k in order], [0, 1, 2], [5]))


def if_model(then_index: int, else_index: int) -> hal.Model:
    """Every subgraph maps (cond, x) to y.  main: y = IF(cond, ref0, ref1, cond, x);
    referenced 0: y = IF(cond, ref[then_index], ref[else_index], cond, x);
    referenced 1: y = ADD(x, x, NONE)."""
    def cond() -> hal.Operand:
        return hal.Operand(type=T.TENSOR_BOOL8, dimensions=[1], numberOfConsumers=2, lifetime=L.SUBGRAPH_INPUT)

    def ref(k: int) -> hal.Operand:
        return hal.Operand(type=T.SUBGRAPH, numberOfConsumers=1, lifetime=L.SUBGRAPH,
                           location=hal.DataLocation(0, k, 0))

    def caller(then_k: int, else_k: int) -> hal.Subgraph:
        return hal.Subgraph(
            operands=[cond(), ref(then_k), ref(else_k), _float(L.SUBGRAPH_INPUT, 1), _float(L.SUBGRAPH_OUTPUT, 0)],
            operations=[hal.Operation(Op.IF, [0, 1, 2, 0, 3], [4])], inputIndexes=[0, 3], outputIndexes=[4])

    passthrough = hal.Subgraph(
        operands=[replace(cond(), numberOfConsumers=0), _float(L.SUBGRAPH_INPUT, 2),
                  hal.Operand(type=T.INT32, numberOfConsumers=1, lifetime=L.CONSTANT_COPY,
                              location=hal.DataLocation(0, 0, 4)),
                  _float(L.SUBGRAPH_OUTPUT, 0)],
        operations=[hal.Operation(Op.ADD, [1, 1, 2], [3])], inputIndexes=[0, 1], outputIndexes=[3])
    return hal.Model(main=caller(0, 1), referenced=[caller(then_index, else_index), passthrough],
                     operandValues=bytes(4))


def _interface_version(face: AidlFace) -> tuple[str, str]:
    from nnhal import aidl

    version, digest = face.device.getInterfaceVersion(), face.device.getInterfaceHash()
    if aidl.HASHES.get(version) != digest:
        return f"{version}", f"interface version {version!r} with hash {digest!r}: not a frozen version of the HAL"
    return f"{version}", ""


def _rejected(face: Face, model: hal.Model) -> tuple[str, str]:
    return judge(face, Mutation("cycle", "", model))


def run(device: Any, device_name: str = "") -> list[Case]:
    face = as_face(device)
    rec = Recorder(SECTION)
    t = face.vts_prefix
    checks: list[tuple[str, str, str, Any]] = []
    if isinstance(face, HidlFace):
        checks.append((f"{t}.StatusTest", "getStatus", "AVAILABLE", lambda: _status(face)))
    else:
        checks.append((f"{t}.InterfaceVersion", "getInterfaceVersion, getInterfaceHash", "a frozen version, its hash",
                       lambda: _interface_version(face)))
    v = face.method_suffix
    checks += [
        (f"{t}.GetCapabilitiesTest", f"getCapabilities{v}", "NONE; values > 0; sorted; no SUBGRAPH",
         lambda: _capabilities(face)),
        (f"{t}.GetDeviceVersionStringTest", "getVersionString", "NONE, non-empty", lambda: _version(face)),
        (f"{t}.GetDeviceTypeTest", "getType", "NONE, a DeviceType", lambda: _type(face)),
        (f"{t}.GetDeviceSupportedExtensionsTest", "getSupportedExtensions", "NONE, valid names",
         lambda: _extensions(face)),
        (f"{t}.GetNumberOfCacheFilesNeeded", "getNumberOfCacheFilesNeeded", "NONE, <= 32 each",
         lambda: _cache_files(face)),
    ]
    if device_name and ":" not in device_name:
        checks.append((f"{t}.InstanceName", device_name, "exactly one '-', not first or last",
                       lambda: _instance_name(device_name)))
    cycle = f"{t}.ModelWithCycle" if isinstance(face, HidlFace) else f"{t}.CycleTest"
    for order in ((0, 1, 2), (1, 0, 2), (2, 1, 0), (0, 2, 1)):
        checks.append((cycle, f"operations in order {list(order)}",
                       "INVALID_ARGUMENT", lambda order=order: _rejected(face, cycle_model(order))))
    checks.append((f"{t}.ModelWithSubgraphCycle", "referenced 0 calls itself (then)",
                   "INVALID_ARGUMENT", lambda: _rejected(face, if_model(0, 1))))
    checks.append((f"{t}.ModelWithSubgraphCycle", "referenced 0 calls itself (else)",
                   "INVALID_ARGUMENT", lambda: _rejected(face, if_model(1, 0))))
    for test, what, expected, fn in checks:
        rec.check(test, what, expected, fn)
    return rec.cases
