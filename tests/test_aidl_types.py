"""The AIDL binding (nnhal.aidl) against the frozen interface versions 1-4
(``aidl_api/android.hardware.neuralnetworks/N/`` of Android's
hardware/interfaces, read from a local mirror when there is one): every
parcelable's and union's fields in order, every enum's values, every
interface's methods with their parameters in order, the constants; the
version each name appeared in; and the mechanism that declares them
(nnhal.hal.derive), which v1_0 .. v1_2 use too."""

from __future__ import annotations

import dataclasses
import enum
import inspect
import re
import subprocess
import typing
from pathlib import Path

import pytest

from nnhal import aidl, hal
from nnhal.hal import derive, v1_0, v1_1, v1_2

MIRROR = Path("/work/.mirror/LineageOS+android_hardware_interfaces/repo")
API = "neuralnetworks/aidl/aidl_api/android.hardware.neuralnetworks/{}/android/hardware/neuralnetworks"
V = hal.HalVersion


def _frozen(version: int) -> dict[str, str]:
    """name -> the text of each .aidl file of a frozen version (skips without the mirror)."""
    if not (MIRROR / "HEAD").exists():
        pytest.skip(f"no mirror of Android's hardware/interfaces at {MIRROR}")
    path = API.format(version)
    names = subprocess.run(["git", "-C", str(MIRROR), "ls-tree", "--name-only", "HEAD", path + "/"],
                           capture_output=True, text=True, check=True).stdout.split()
    return {Path(n).stem: subprocess.run(["git", "-C", str(MIRROR), "show", f"HEAD:{n}"], capture_output=True,
                                         text=True, check=True).stdout for n in names}


def _body(text: str) -> tuple[str, str, list[str]]:
    """(kind, name, the declarations of the body, one per item)."""
    m = re.search(r"^(parcelable|union|enum|interface) (\w+) \{(.*)\}", text, re.S | re.M)
    assert m, text
    items = [i.strip() for i in re.split(r"[;,]\s*\n", m.group(3)) if i.strip()]
    return m.group(1), m.group(2), [i.rstrip(";,") for i in items]


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_every_frozen_type_and_interface_is_in_the_binding(version: int) -> None:
    frozen = _frozen(version)
    hal_version = V(V.AIDL_V1 + version - 1)
    for name, text in frozen.items():
        kind, decl, items = _body(text)
        assert decl == name
        ours = getattr(aidl, name)
        assert aidl.since(name) <= hal_version, name
        consts = {m.group(1): int(m.group(2), 0) for i in items
                  if (m := re.match(r"const \w+ (\w+) = (-?\w+)", i))}
        for const, value in consts.items():
            assert getattr(ours, const) == value, (name, const)
        items = [i for i in items if not i.startswith("const ")]
        if kind == "enum":
            members = dict((n.strip(), int(v, 0)) for n, v in (i.split("=") for i in items))
            got = {n: int(m) for n, m in ours.__members__.items() if aidl.since(f"{name}.{n}") <= hal_version}
            assert got == members, name
        elif kind in ("parcelable", "union"):
            fields = [re.sub(r"\s*=.*", "", i).split()[-1] for i in items]
            assert [f.name for f in dataclasses.fields(ours)] == fields, name
            hints = typing.get_type_hints(ours)
            if kind == "union":
                assert all(typing.get_origin(hints[f]) is typing.Union for f in fields), name  # Optional members
        else:
            methods = {}
            for i in items:
                m = re.match(r"(?:oneway )?\S+ (\w+)\((.*)\)", i, re.S)
                methods[m.group(1)] = [p.split()[-1] for p in m.group(2).split(",") if p.strip()]
            got = {m for m, v in aidl.METHODS[name].items() if v <= hal_version}
            assert got == set(methods), name
            for method, params in methods.items():
                assert list(inspect.signature(getattr(ours, method)).parameters)[1:] == params, (name, method)
    # and nothing of the binding's is missing from the frozen version it says it is in
    for name, since in aidl.SINCE.items():
        if "." not in name and since <= hal_version and name in frozen:
            assert name in frozen


def test_what_aidl_changed() -> None:
    """The differences from HIDL 1.3 the binding declares (aidl_api, version 4)."""
    assert aidl.OperandLifeTime.CONSTANT_POOL == 4 and "CONSTANT_REFERENCE" not in aidl.OperandLifeTime.__members__
    assert "OEM" not in aidl.OperandType.__members__ and "OEM_OPERATION" not in aidl.OperationType.__members__
    assert [f.name for f in dataclasses.fields(aidl.DataLocation)] == ["poolIndex", "offset", "length", "padding"]
    assert [f.name for f in dataclasses.fields(aidl.BufferRole)] == ["modelIndex", "ioIndex", "probability"]
    assert [f.name for f in dataclasses.fields(aidl.Timing)] == ["timeOnDeviceNs", "timeInDriverNs"]
    assert aidl.Timing() == aidl.Timing(-1, -1)
    assert "numberOfConsumers" not in {f.name for f in dataclasses.fields(aidl.Operand)}
    assert aidl.Operand().extraParams is None
    assert [f.name for f in dataclasses.fields(aidl.Memory)] == ["ashmem", "mappableFile", "hardwareBuffer"]
    assert [f.name for f in dataclasses.fields(aidl.RequestMemoryPool)] == ["pool", "token"]
    assert [f.name for f in dataclasses.fields(aidl.MappableFile)] == ["length", "prot", "fd", "offset"]
    assert aidl.IDevice.BYTE_SIZE_OF_CACHE_TOKEN == aidl.PrepareModelConfig.BYTE_SIZE_OF_CACHE_TOKEN == 32
    assert aidl.IPreparedModel.DEFAULT_LOOP_TIMEOUT_DURATION_NS == 2_000_000_000
    # what did not change is the canonical class itself
    for name in ("ErrorStatus", "OutputShape", "Operation", "Extension", "ExtensionNameAndPrefix", "PerformanceInfo",
                 "BufferDesc", "Priority", "ExecutionPreference", "DeviceType", "SymmPerChannelQuantParams",
                 "OperandExtraParams"):
        assert getattr(aidl, name) is getattr(hal, name), name
    assert aidl.NativeHandle is hal.Handle and aidl.ExtensionOperandTypeInformation is hal.OperandTypeInformation


def test_since() -> None:
    v1, v2, v3, v4 = V.AIDL_V1, V.AIDL_V2, V.AIDL_V3, V.AIDL_V4
    assert aidl.since("Model") == aidl.since("IDevice.prepareModel") == aidl.since("OperationType.RANK") == v1
    assert aidl.since("OperationType.BATCH_MATMUL") == aidl.since("OperationType.PACK") == v2
    assert aidl.since("OperationType.MIRROR_PAD") == aidl.since("OperationType.REVERSE") == v3
    for name in ("IExecution", "IExecution.executeFenced", "ExecutionConfig", "PrepareModelConfig", "TokenValuePair",
                 "IDevice.prepareModelWithConfig", "IPreparedModel.createReusableExecution",
                 "IPreparedModel.executeSynchronouslyWithConfig", "IPreparedModel.executeFencedWithConfig",
                 "IBurst.executeSynchronouslyWithConfig"):
        assert aidl.since(name) == v4, name
    with pytest.raises(KeyError):
        aidl.since("IDevice.prepareModel_1_3")


def test_service_specific_error() -> None:
    e = aidl.ServiceSpecificError(4, "bad")
    assert e.status is aidl.ErrorStatus.INVALID_ARGUMENT and e.message == "bad" and str(e) == "INVALID_ARGUMENT: bad"
    assert aidl.ServiceSpecificError(99).status == 99


# --------------------------------------------------------------------------
# the derivation


def _dataclasses(module: object) -> list[type]:
    return [c for n in module.__all__ if dataclasses.is_dataclass(c := getattr(module, n))]


@pytest.mark.parametrize("module", [v1_0, v1_1, v1_2, aidl], ids=["v1_0", "v1_1", "v1_2", "aidl"])
def test_every_type_resolves_and_has_defaults(module: object) -> None:
    for cls in _dataclasses(module):
        hints = typing.get_type_hints(cls)  # the service's wire decodes by them
        assert set(hints) >= {f.name for f in dataclasses.fields(cls)}, cls
        cls()


def test_unchanged_types_are_the_canonical_classes() -> None:
    assert v1_2.OutputShape is hal.OutputShape and v1_2.Timing is hal.Timing and v1_0.DataLocation is hal.DataLocation
    assert v1_1.Operand is v1_0.Operand and v1_2.Request is v1_0.Request
    assert v1_2.Operation is not hal.Operation  # the 1.2 enums: another HAL type, its own class
    assert v1_2.Capabilities.OperandPerformance is v1_2.OperandPerformance
    assert v1_2.OperandTypeRange.FUNDAMENTAL_MIN == 0 and v1_2.OperandTypeRange.FUNDAMENTAL_MAX == 13


def test_struct_and_enum() -> None:
    @dataclasses.dataclass
    class Base:
        a: int = 1
        b: list[int] = dataclasses.field(default_factory=list)
        c: str = "c"

    d = derive.struct("D", Base, module=__name__, drop=["c"], rename={"a": "x"}, retype={"b": (list[str], list)},
                      add=[("y", Base, Base)], attrs={"K": 3})
    assert [f.name for f in dataclasses.fields(d)] == ["x", "b", "y"]
    assert d() == d(1, [], Base()) and d().b is not d().b and d.K == 3 and d.__module__ == __name__
    assert typing.get_type_hints(d) == {"x": int, "b": list[str], "y": Base}
    with pytest.raises(ValueError):
        derive.struct("E", Base, module=__name__, rename={"nope": "z"})

    class Base2(enum.IntEnum):
        A = 0
        ALIAS = 0
        B = 5
        OEM = 10000

    e = derive.enum("E", Base2, module=__name__, keep=derive.below(1), rename={"A": "Z"}, extra={"C": 7, "Z": 9})
    assert {n: int(m) for n, m in e.__members__.items()} == {"Z": 0, "ALIAS": 0, "OEM": 10000, "C": 7}


def test_every_method_is_typed_for_a_transport() -> None:
    """Each interface method's parameters and return value resolve to AIDL types
    (what a service's wire encodes and decodes by)."""
    for iface in aidl.INTERFACES:
        for method in aidl.METHODS[iface.__name__]:
            fn = getattr(iface, method)
            hints = typing.get_type_hints(fn)
            params = [p for p in inspect.signature(fn).parameters if p != "self"]
            assert set(hints) == {*params, "return"}, (iface.__name__, method)
            assert all(h is not typing.Any and h is not list for h in hints.values()), (iface.__name__, method, hints)


def _is_pfd(hint: object) -> bool:
    """Whether an annotation is a ParcelFileDescriptor, bare, nullable or in an array."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return hint is aidl.ParcelFileDescriptor or (len(args) == 1 and _is_pfd(args[0]))


def _common(name: str) -> str:
    path = f"common/aidl/aidl_api/android.hardware.common/2/android/hardware/common/{name}.aidl"
    return subprocess.run(["git", "-C", str(MIRROR), "show", f"HEAD:{path}"], capture_output=True, text=True,
                          check=True).stdout


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_descriptors_and_out_parameters_are_marked(version: int) -> None:
    """Every ParcelFileDescriptor of the frozen version (field or parameter) is
    annotated ``aidl.ParcelFileDescriptor``, and nothing else is; every ``out``
    parameter is marked ``@out``: what a transport passes as a descriptor, and
    sends back rather than there (nnhal.service.aidl_wire)."""
    texts = {**_frozen(version), "Ashmem": _common("Ashmem"), "MappableFile": _common("MappableFile")}
    for name, text in texts.items():
        kind, _, items = _body(text)
        ours = getattr(aidl, name)
        items = [i for i in items if not i.startswith("const ")]
        if kind in ("parcelable", "union"):
            hints = typing.get_type_hints(ours)
            for item in items:
                decl = re.sub(r"\s*=.*", "", re.sub(r"@\w+\s*", "", item)).split()
                assert _is_pfd(hints[decl[-1]]) == decl[0].startswith("ParcelFileDescriptor"), (name, item)
        elif kind == "interface":
            for item in items:
                m = re.match(r"(?:oneway )?\S+ (\w+)\((.*)\)", item, re.S)
                params = [p.split() for p in m.group(2).split(",") if p.strip()]
                fn = getattr(ours, m.group(1))
                hints = typing.get_type_hints(fn)
                for p in params:
                    assert _is_pfd(hints[p[-1]]) == p[-2].startswith("ParcelFileDescriptor"), (name, m.group(1), p)
                assert set(getattr(fn, "aidl_out", ())) == {p[-1] for p in params if p[0] == "out"}, (name, p)
