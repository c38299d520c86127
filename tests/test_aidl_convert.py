"""The conversions between AIDL and the canonical types (nnhal.hal.aidl.convert):
canonical -> AIDL -> canonical is the identity over conformance models (a
quick sample of every version's vectors), memories of every kind, timings,
capabilities and roles; what AIDL cannot mean is an InvalidArgument; and a
sample of the vectors runs through the AIDL face to the HIDL face's bytes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import nnhal
from nnhal import aidl, hal
from nnhal import memory as hal_memory
from nnhal.conformance import vectors
from nnhal.hal.aidl.convert import InvalidArgument, from_canonical, number_of_consumers, optional_ns, to_canonical
from tests.aidl_util import prepare, raised
from tests.conftest import vectors_root
from tests.driver_util import prepared_model, vector_pools

SAMPLE = 7  # every SAMPLE-th vector file of each version


def _sample() -> list[Path]:
    files = sorted(vectors_root().glob("V1_*/*.json.gz"))
    return files[::SAMPLE]


@pytest.fixture(scope="module")
def models() -> list[vectors.VectorModel]:
    return [m for f in _sample() for m in vectors.load_file(f)]


def test_models_round_trip(models: list) -> None:
    assert len(models) > 50
    for vm in models:
        model = vm.build_model()
        try:
            if any(int(o.type) in (hal.OperandType.OEM, hal.OperandType.TENSOR_OEM_BYTE)
                   for sg in [model.main, *model.referenced] for o in sg.operands):
                with pytest.raises(InvalidArgument):
                    from_canonical(model)
                continue
            there = from_canonical(model)
            assert type(there) is aidl.Model and type(there.main.operands[0]) is aidl.Operand
            back = to_canonical(there)
            assert back == model, vm.name
        finally:
            for p in model.pools:
                hal_memory.free(p)


def test_number_of_consumers_is_computed() -> None:
    ops = [hal.Operation(0, [0, 1, 0], [2]), hal.Operation(0, [2, 9, -1], [3])]
    assert number_of_consumers([None] * 4, ops) == [2, 1, 1, 0]


@pytest.mark.parametrize("name", ["ashmem", "mmap_fd", "hardware_buffer_blob", "hardware_buffer"])
def test_memories_round_trip(name: str) -> None:
    m = hal_memory.allocate(64, name, offset=4096) if name == "mmap_fd" else hal_memory.allocate(64, name)
    try:
        there = from_canonical(m)
        member = {"ashmem": "ashmem", "mmap_fd": "mappableFile"}.get(name, "hardwareBuffer")
        assert [f.name for f in dataclasses.fields(there) if getattr(there, f.name) is not None] == [member]
        if name == "mmap_fd":
            assert there.mappableFile.offset == 4096 and there.mappableFile.length == 64
        if name.startswith("hardware_buffer"):
            assert there.hardwareBuffer.description.format == (0x21 if name == "hardware_buffer_blob" else 1)
            assert there.hardwareBuffer.handle == aidl.NativeHandle(fds=m.handle.fds)
        assert to_canonical(there) == m
    finally:
        hal_memory.free(m)


def test_memories_aidl_cannot_mean() -> None:
    bad = [aidl.Memory(), aidl.Memory(ashmem=aidl.Ashmem(3, 8), mappableFile=aidl.MappableFile()),
           aidl.Memory(mappableFile=aidl.MappableFile(8, 3, 3, -1)), aidl.Memory(ashmem="fd"),
           aidl.Memory(hardwareBuffer=aidl.HardwareBuffer(handle=aidl.NativeHandle([3], [1])))]
    for m in bad:
        with pytest.raises(InvalidArgument):
            to_canonical(m)
    with pytest.raises(InvalidArgument):
        from_canonical(hal.Memory(name="gralloc", handle=hal.Handle([3]), size=8))


def test_requests() -> None:
    m = hal_memory.allocate(64)
    try:
        req = hal.Request(inputs=[hal.RequestArgument(location=hal.DataLocation(0, 8, 16), dimensions=[4])],
                          outputs=[hal.RequestArgument(hasNoValue=True)],
                          pools=[hal.MemoryPool(hidlMemory=m), hal.MemoryPool(token=5)])
        there = from_canonical(req)
        assert there.pools[1] == aidl.RequestMemoryPool(token=5) and there.inputs[0].location.padding == 0
        assert to_canonical(there) == req
        there.inputs[0].location.padding = 40  # 8 + 16 + 40 = 64: within the pool
        assert to_canonical(there) == req
        for edit in ("padding past the pool", "padding of an omitted operand", "negative token", "no member"):
            bad = from_canonical(req)
            if edit == "padding past the pool":
                bad.inputs[0].location.padding = 41
            elif edit == "padding of an omitted operand":
                bad.outputs[0].location.padding = 1
            elif edit == "negative token":
                bad.pools[1].token = -1
            else:
                bad.pools[0] = aidl.RequestMemoryPool()
            with pytest.raises(InvalidArgument):
                to_canonical(bad)
    finally:
        hal_memory.free(m)


def test_timings_capabilities_roles() -> None:
    assert from_canonical(hal.Timing()) == aidl.Timing(-1, -1)
    assert from_canonical(hal.Timing(3, 7)) == aidl.Timing(3000, 7000)
    assert to_canonical(aidl.Timing(3999, -1)) == hal.Timing(3, hal.UINT64_MAX)
    with pytest.raises(InvalidArgument):
        to_canonical(aidl.Timing(-2, 0))
    caps = nnhal.get_device("sample-all").getCapabilities_1_3()[1]
    there = from_canonical(caps)
    assert len(there.operandPerformance) == len(caps.operandPerformance) - 2  # no OEM types in AIDL
    assert to_canonical(there).operandPerformance == [p for p in caps.operandPerformance
                                                      if p.type < hal.OperandType.OEM]
    assert from_canonical(hal.BufferRole(1, 2, 0.5)) == aidl.BufferRole(1, 2, 0.5)
    assert to_canonical([aidl.BufferRole(1, 2, 0.5)]) == [hal.BufferRole(1, 2, 0.5)]
    assert optional_ns(-1, "t") is None and optional_ns(0, "t") == 0
    for bad in (-2, True, 1.0, None, 2**63):
        with pytest.raises(InvalidArgument):
            optional_ns(bad, "t")


def test_vectors_run_through_the_aidl_face_as_through_hidl(models: list) -> None:
    """A few vector models: the AIDL face answers as the HIDL face, to the output bytes."""
    hidl, face = nnhal.get_device("sample-all"), aidl.get_device("sample-all")
    ran = 0
    for vm in models[::5]:
        model = vm.build_model()
        try:
            if not all(hidl.getSupportedOperations_1_3(model)[1]):
                continue
            pm, hidl_pm = prepare(face, from_canonical(model)), prepared_model(model, hidl)
            with vector_pools(vm) as a, vector_pools(vm) as b:
                status, shapes, _ = hidl_pm.executeSynchronously_1_3(
                    b.request(), hal.MeasureTiming.NO, hal.OptionalTimePoint(), hal.OptionalTimeoutDuration())
                if status != hal.ErrorStatus.NONE:
                    assert raised(pm.executeSynchronously, from_canonical(a.request()), False, -1, -1) == status
                    continue
                result = pm.executeSynchronously(from_canonical(a.request()), False, -1, -1)
                assert result.outputSufficientSize and result.outputShapes == shapes, vm.name
                assert bytes(hal_memory.map(a.out_mem)) == bytes(hal_memory.map(b.out_mem)), vm.name
            ran += 1
        finally:
            for p in model.pools:
                hal_memory.free(p)
    assert ran >= 5


def test_wrong_objects_are_invalid_arguments() -> None:
    for obj in (aidl.Model(main="x"), aidl.Request(inputs=None), aidl.Model(pools=[hal.Memory()])):
        with pytest.raises(InvalidArgument):
            to_canonical(obj)
    assert to_canonical(aidl.OutputShape([1], True)) == hal.OutputShape([1], True)
