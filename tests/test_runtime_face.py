"""The client runtime's faces (nnhal.runtime.face): a device's AIDL face when it has one (in process: every
device of the device table and every front-end device object; a service through nnhal.aidl.connect), the
HIDL face of a duck-typed HIDL-only device, at the feature level the model needs; the partitioner's support
queries at that level; every execution mode through the AIDL face; the AIDL burst's memory tokens."""

from __future__ import annotations

import numpy as np
import pytest

import nnhal
from nnhal import aidl, hal, runtime
from nnhal.memory import allocate, free
from nnhal.runtime import Compilation, Model
from nnhal.runtime.face import AidlBurst, AidlFace, HidlFace, model_version, open_face

OT = hal.OperationType
V = hal.HalVersion


class HidlOnly:
    """A duck-typed device: sample-all's HIDL methods, no AIDL face."""

    name = "hidl-only"

    def __getattr__(self, name: str):
        return getattr(nnhal.get_device("sample-all"), name)


def add_tanh() -> Model:
    m = Model()
    a, b = m.input("a", np.float32, [2, 3]), m.input("b", np.float32, [2, 3])
    m.output(m.operation(OT.TANH, [m.operation(OT.ADD, [a, b, 0], (np.float32, [2, 3]))], (np.float32, [2, 3])), "y")
    return m


def add_matmul() -> Model:
    """ADD then BATCH_MATMUL (AIDL v2, feature level 6) by a constant."""
    m = Model()
    a = m.input("a", np.float32, [2, 3, 4])
    s = m.operation(OT.ADD, [a, a, 0], (np.float32, [2, 3, 4]))
    w = np.arange(40, dtype=np.float32).reshape(2, 4, 5) / 10
    m.output(m.operation(OT.BATCH_MATMUL, [s, w, False, False], (np.float32, [2, 3, 5])), "y")
    return m


def test_open_face_gives_the_aidl_face_when_there_is_one():
    face = open_face("sample-all")
    assert isinstance(face, AidlFace) and face.version == V.AIDL_V4 and face.interface == "AIDL v4"
    assert open_face("sample-all", V.AIDL_V2).device.getInterfaceVersion() == 2
    front = open_face(nnhal.get_device("sample-quant"), V.AIDL_V1)  # NOTE: a front-end object serves both
    assert isinstance(front, AidlFace) and front.version == V.AIDL_V1 and front.name == "sample-quant"
    assert isinstance(open_face(aidl.get_device("sample-all", 3)), AidlFace)
    hidl = open_face("sample-all", V.V1_2)
    assert isinstance(hidl, HidlFace) and hidl.version == V.V1_2 and hidl.method("prepareModel") == "prepareModel_1_2"
    duck = open_face(HidlOnly())
    assert isinstance(duck, HidlFace) and duck.version == V.V1_3 and duck.name == "hidl-only"
    assert face.method("getSupportedOperations") == "IDevice.getSupportedOperations (AIDL v4)"
    with pytest.raises(LookupError):
        open_face("nothing-here")


def test_model_version_is_the_feature_level_the_model_needs():
    assert model_version(add_tanh().finish()) == V.V1_3
    assert model_version(add_matmul().finish()) == V.AIDL_V2


def test_the_runtime_speaks_aidl_at_the_models_level():
    """A 1.3 model through AIDL v1, a BATCH_MATMUL model through AIDL v2; with ``version`` below AIDL 1
    (as Android 11's runtime) HIDL 1.3; a HIDL-only device is not asked about a model newer than 1.3."""
    with Compilation(add_tanh(), ["sample-minimal", "sample-float-fast"]) as c:
        assert [c.face(d).interface for d in c.devices] == ["AIDL v1", "AIDL v1"]
        y = c.run({"a": np.ones((2, 3), np.float32), "b": np.ones((2, 3), np.float32)})["y"]
        np.testing.assert_allclose(y, np.tanh(np.full((2, 3), 2.0, np.float32)), rtol=1e-6)
    with Compilation(add_tanh(), ["sample-all"], version=V.V1_3) as c:
        assert c.face(c.devices[0]).interface == "HAL 1.3"
    c = Compilation(add_matmul(), ["sample-minimal", HidlOnly(), "sample-all"])
    with c:
        assert [c.face(d).interface for d in c.devices] == ["AIDL v2", "HAL 1.3", "AIDL v2"]
        p = c.placement()
        assert p.operations[1].device == "sample-all"
        assert p.operations[1].refused["hidl-only"] == "the model needs AIDL v2; hidl-only is spoken to through HAL 1.3"
        assert "not BATCH_MATMUL" in p.operations[1].refused["sample-minimal"]  # NOTE: the device's own reason


@pytest.mark.parametrize("mode", ["sync", "async", "burst", "fenced"])
def test_every_mode_through_the_aidl_face(mode):
    """Two partitions (ADD on sample-minimal, BATCH_MATMUL on sample-all) through their AIDL v2 faces in
    every mode give the reference's result; a burst keeps its memory tokens across executions."""
    x = np.linspace(-1, 1, 24, dtype=np.float32).reshape(2, 3, 4)
    want = np.matmul(2 * x, np.arange(40, dtype=np.float32).reshape(2, 4, 5) / 10)
    with Compilation(add_matmul(), ["sample-minimal", "sample-all"]) as c:
        assert [s.device.name for s in c.steps] == ["sample-minimal", "sample-all"]
        for _ in range(2):
            np.testing.assert_allclose(c.run({"a": x}, mode=mode)["y"], want, rtol=1e-5)
        if mode == "burst":
            assert all(isinstance(s.burst, AidlBurst) and s.burst.tokens for s in c.steps)


def test_device_memory_through_the_aidl_face():
    """runtime.Memory: IDevice.allocate and IBuffer.copyFrom / copyTo through the AIDL face."""
    with Compilation(add_tanh(), ["sample-all"]) as c:
        mem = runtime.Memory(c, inputs=["a"])
        mem.copy_from(np.full((2, 3), 0.5, np.float32))
        np.testing.assert_array_equal(mem.copy_to(), np.full((2, 3), 0.5, np.float32))
        y = c.run({"a": mem, "b": np.zeros((2, 3), np.float32)})["y"]
        np.testing.assert_allclose(y, np.tanh(np.full((2, 3), 0.5, np.float32)), rtol=1e-6)


class _CountingBurst:
    def __init__(self):
        self.released: list[int] = []
        self.tokens: list[list[int]] = []

    def executeSynchronously(self, request, tokens, measure, deadline, loop):
        self.tokens.append(list(tokens))
        return aidl.ExecutionResult(outputSufficientSize=True)

    def releaseMemoryResource(self, token):
        self.released.append(token)


def test_the_aidl_burst_names_memories_by_token():
    """One token per memory (what it refers to), kept across executions; at most ``max_tokens``: the least
    recently used one not in the request is released (IBurst.releaseMemoryResource); a token pool is -1."""
    raw = _CountingBurst()
    burst = AidlBurst(raw, max_tokens=2)
    mems = [allocate(64) for _ in range(3)]
    try:
        def request(*ms):
            return hal.Request(pools=[hal.MemoryPool(hidlMemory=m) if m is not None else hal.MemoryPool(token=1)
                                      for m in ms])

        assert burst.execute(request(mems[0], mems[1]), False)[0] == hal.ErrorStatus.NONE
        burst.execute(request(mems[1], None), False)
        burst.execute(request(mems[2]), False)
        assert raw.tokens == [[0, 1], [1, -1], [2]] and raw.released == [0]
        burst.execute(request(mems[0], mems[2]), False)
        assert raw.tokens[-1] == [3, 2] and raw.released == [0, 1]
    finally:
        for m in mems:
            free(m)


def test_refusals_of_a_later_feature_level_model_come_with_the_devices_reason():
    """nnhal's reasons query takes a canonical model of any version: a refused BATCH_MATMUL (AIDL v2) says why."""
    model = add_matmul().finish()
    status, flags, reasons = open_face("sample-minimal").supported(model)
    assert status == hal.ErrorStatus.NONE and flags == [True, False]
    assert reasons[0] == "" and "not BATCH_MATMUL" in reasons[1], reasons
    status, flags, _ = open_face("sample-minimal", V.V1_3).supported(model)
    assert status == hal.ErrorStatus.INVALID_ARGUMENT and flags == []  # NOTE: HIDL 1.3 has no BATCH_MATMUL
