"""A device validates (and, for the reference executor, compiles) a model once while it keeps it
(nnhal.driver.prepared_states): getSupportedOperations then prepareModel, or the same model prepared
again; an equal model with equal pool bytes reuses the verdict and the compiled model, anything else
(another version, a constant changed in the model or in its pool, a replaced operation definition) is
validated again.  Bounded; prepared models sharing a compiled model compute the same bits."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal import hal
from nnhal.driver import device as device_mod
from nnhal.driver.prepared_states import PreparedStates
from nnhal.drivers.sample import sample_device
from tests.driver_util import Pools, add_model, execute_sync, float_output, prepare

S = hal.ErrorStatus


def _count_validations(monkeypatch) -> list:
    calls: list = []
    real = device_mod.validate_model

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(device_mod, "validate_model", counted)
    return calls


def test_supported_then_prepare_validates_once(monkeypatch):
    dev = sample_device("memo-dev")
    calls = _count_validations(monkeypatch)
    model = add_model()
    assert dev.getSupportedOperations_1_3(model)[0] == S.NONE
    _, status, prepared = prepare(model, dev)
    assert status == S.NONE and prepared is not None
    _, status, again = prepare(model, dev)
    assert status == S.NONE and len(calls) == 1
    assert again is not prepared and again.executor is prepared.executor  # NOTE: the compiled model shared
    a = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    for p in (prepared, again):
        assert execute_sync(p, Pools([a, a], [16]).request())[0] == S.NONE


def test_the_same_model_again_is_the_copy_kept(monkeypatch):
    """On a hit the driver's copy kept serves (no copy made again), and it stays the driver's own: the
    client's model changed afterwards is another model, the copy kept unchanged."""
    dev = sample_device("memo-copy")
    copies: list = []
    real = device_mod.own_copy

    def counted(x):
        copies.append(type(x).__name__)
        return real(x)

    monkeypatch.setattr(device_mod, "own_copy", counted)
    model = add_model()
    assert dev.getSupportedOperations_1_3(model)[0] == S.NONE
    assert copies.count("Model") == 1
    _, status, prepared = prepare(model, dev)
    assert status == S.NONE and copies.count("Model") == 1
    kept = prepared.model
    assert kept is not model and kept == model
    model.main.operands[0].dimensions = [2, 3]
    assert kept.main.operands[0].dimensions == [2, 2]
    assert dev.getSupportedOperations_1_3(model)[0] == S.NONE and copies.count("Model") == 2


def test_a_changed_model_or_version_is_validated_again(monkeypatch):
    dev = sample_device("memo-dev2")
    calls = _count_validations(monkeypatch)
    model = add_model()
    dev.getSupportedOperations_1_3(model)
    model.main.operands[0].dimensions = [2, 3]  # NOTE: the client changed its model between the calls
    model.main.operands[1].dimensions = [2, 3]
    model.main.operands[3].dimensions = [2, 3]
    assert prepare(model, dev)[1] == S.NONE and len(calls) == 2
    dev.getSupportedOperations_1_2(model)
    assert len(calls) == 3  # NOTE: asked at 1.2: not the same question as 1.3's


def test_pool_bytes_compared():
    """A constant in a pool the client rewrote between the calls, another model, a replaced operation
    definition, values that cannot be compared: not the same model."""
    import dataclasses

    from nnhal.engine.validation import validate_model
    from nnhal.hal.types import HalVersion
    from nnhal.ops import registry

    model = add_model()
    defs = validate_model(model, [], HalVersion.V1_3)
    states = PreparedStates()
    a = bytearray(b"\x01" * 64)
    states.add(model, [memoryview(bytes(a))], 3, defs)
    assert states.defs(add_model(), [memoryview(bytes(a))], 3) == defs
    a[10] = 2
    assert states.defs(model, [memoryview(bytes(a))], 3) is None
    assert states.defs(add_model(dims=(2, 3)), [memoryview(b"\x01" * 64)], 3) is None
    assert states.defs(model, [memoryview(b"\x01" * 64)], 2) is None
    add = registry.REGISTRY[hal.OperationType.ADD]
    registry.REGISTRY[hal.OperationType.ADD] = dataclasses.replace(add)
    try:
        assert states.defs(model, [memoryview(b"\x01" * 64)], 3) is None
    finally:
        registry.REGISTRY[hal.OperationType.ADD] = add
    assert states.defs(model, [memoryview(b"\x01" * 64)], 3) == defs
    states.add(np.zeros(3), [], 3, [])  # NOTE: not a model: nothing kept, nothing found
    assert states.defs(np.zeros(3), [], 3) is None


def test_bounded():
    """At most max_entries models and max_bytes of their constants; the least recently used go first."""
    from nnhal.engine.validation import validate_model
    from nnhal.hal.types import HalVersion

    states = PreparedStates(max_entries=3, max_bytes=4 * 1000)
    models = [add_model(dims=(2, k)) for k in range(1, 6)]
    for m in models:
        states.add(m, [], 3, validate_model(m, [], HalVersion.V1_3))
    assert [states.defs(m, [], 3) is not None for m in models] == [False, False, True, True, True]
    big = memoryview(bytes(900))
    states.add(models[0], [big], 3, validate_model(models[0], [], HalVersion.V1_3))
    states.add(models[1], [big], 3, validate_model(models[1], [], HalVersion.V1_3))
    kept = [states.defs(m, [big], 3) is not None for m in models[:2]]
    assert kept == [True, True] and states.defs(models[2], [], 3) is None  # NOTE: pushed out by count
    states.add(models[2], [memoryview(bytes(1100))], 3, [])  # NOTE: over a quarter of the bytes: not kept
    assert states.defs(models[2], [memoryview(bytes(1100))], 3) is None


@pytest.mark.parametrize("where", [0, 7, 8, (1 << 20) + 3, (3 << 20) - 1])
def test_pool_bytes_compared_whole(where):
    """A pool differing in any one byte (first word, word edge, a later 1 MiB chunk, the odd tail) is another
    pool; one of another length too."""
    from nnhal.driver.prepared_states import same_bytes

    a = np.random.default_rng(1).integers(0, 256, 3 << 20, dtype=np.uint8).tobytes()
    b = bytearray(a)
    assert same_bytes(memoryview(a), memoryview(b))
    b[where] ^= 1
    assert not same_bytes(memoryview(a), memoryview(b))
    assert not same_bytes(memoryview(a), memoryview(a)[:-1])


def _pool_model(n: int) -> tuple[hal.Model, np.ndarray]:
    """out = x + c with c (n float32) a CONSTANT_REFERENCE in a pool of its own."""
    from nnhal.platform import memory

    model = add_model(dims=(n,))
    c = np.arange(n, dtype=np.float32)
    o = model.main.operands[1]
    o.lifetime = hal.OperandLifeTime.CONSTANT_REFERENCE
    o.location = hal.DataLocation(poolIndex=0, offset=0, length=c.nbytes)
    model.main.inputIndexes = [0]
    model.pools = [memory.allocate_filled(c.tobytes())]
    return model, c


def _run_pool_model(prepared, x: np.ndarray) -> np.ndarray:
    """The output of a prepared :func:`_pool_model` on input ``x``."""
    pools = Pools([x], [4 * x.size])
    assert execute_sync(prepared, pools.request())[0] == S.NONE
    return float_output(pools.out_mem)


def _count_private_copies(monkeypatch) -> list:
    """The sizes of the PrivateCopy objects made from now on."""
    from nnhal.platform import memory

    copies: list = []
    real = memory.PrivateCopy.__init__

    def counted(self, m):
        copies.append(m.size)
        real(self, m)

    monkeypatch.setattr(memory.PrivateCopy, "__init__", counted)
    return copies


def test_pool_read_again_shares_the_private_copy(monkeypatch):
    """getSupportedOperations then prepareModel of a model whose pool holds the same bytes: one private
    copy of the pool (the second read compared, not kept); a pool the client rewrote in between is copied
    anew and its new bytes are what executions see."""
    from nnhal.platform import memory

    copies = _count_private_copies(monkeypatch)
    n = device_mod.SHARE_POOL_BYTES // 4
    model, c = _pool_model(n)
    dev = sample_device("memo-pool")
    assert dev.getSupportedOperations_1_3(model)[0] == S.NONE
    _, status, first = prepare(model, dev)
    assert status == S.NONE and len(copies) == 1
    x = np.ones(n, np.float32)

    def run(p):
        return _run_pool_model(p, x)

    assert np.array_equal(run(first), x + c)
    view = memory.map(model.pools[0])
    view[4:8] = np.float32(100.0).tobytes()  # NOTE: the client rewrote its constant
    view.release()
    _, status, second = prepare(model, dev)
    assert status == S.NONE and len(copies) == 2
    want = x + c
    want[1] += 99.0
    assert np.array_equal(run(second), want) and np.array_equal(run(first), x + c)
    memory.free(model.pools[0])


def test_private_copy_matching():
    """PrivateCopy.matching: the kept view shared where the memory holds its bytes (any chunk, the odd
    tail), None where one byte differs or the size does; a shrunk memory is refused as by the constructor."""
    import os

    from nnhal.platform import memory

    size = (2 << 20) + 5
    data = np.random.default_rng(2).integers(0, 256, size, dtype=np.uint8).tobytes()
    m = memory.allocate_filled(data)
    kept = memory.PrivateCopy(m).view
    same = memory.PrivateCopy.matching(m, kept)
    assert same is not None and same.view is kept and len(same) == size
    for where in (0, (1 << 20) + 9, size - 1):
        other = bytearray(data)
        other[where] ^= 1
        differs = memory.allocate_filled(bytes(other))
        assert memory.PrivateCopy.matching(differs, kept) is None
        memory.free(differs)
    shorter = memory.allocate_filled(data[:-1])
    assert memory.PrivateCopy.matching(shorter, kept) is None
    memory.free(shorter)
    memory.free(m)
    fd = os.memfd_create("client", 0)
    os.write(fd, data)
    shrunk = hal.Memory(name="ashmem", handle=hal.Handle(fds=[fd]), size=size)
    assert memory.PrivateCopy.matching(shrunk, kept) is not None
    os.ftruncate(fd, size - 100)
    with pytest.raises(memory.InvalidMemory):
        memory.PrivateCopy.matching(shrunk, kept)
    os.close(fd)


def test_frozen_pool_is_mapped_once_not_copied(monkeypatch):
    """A pool sealed read-only (memory.freeze: what the NNAPI delegate's plan hands the driver) is mapped,
    not copied: getSupportedOperations then prepareModel share one mapping (the equality test finds the
    views identical), and executions read the right constants, also after the client closed its fd; a pool
    sealed only against shrinking and future writes (F_SEAL_FUTURE_WRITE: a mapping made before still
    writes) is copied as any client's."""
    import fcntl

    from nnhal.platform import memory

    copies = _count_private_copies(monkeypatch)
    maps: list = []
    real_map = memory.FrozenPool.__init__

    def mapped(self, m, key, view=None):
        maps.append(view is None)
        real_map(self, m, key, view)

    monkeypatch.setattr(memory.FrozenPool, "__init__", mapped)
    n = device_mod.SHARE_POOL_BYTES // 4
    model, c = _pool_model(n)
    model.pools = [memory.freeze(model.pools[0])]
    assert model.pools[0].name == "mmap_fd" and memory.frozen_key(model.pools[0]) is not None
    dev = sample_device("memo-frozen")
    assert dev.getSupportedOperations_1_3(model)[0] == S.NONE
    _, status, first = prepare(model, dev)
    assert status == S.NONE and copies == [] and maps == [True, False]  # NOTE: mapped once, then shared
    x = np.ones(n, np.float32)

    def run(p):
        return _run_pool_model(p, x)

    assert np.array_equal(run(first), x + c)
    memory.free(model.pools[0])  # NOTE: the client's fd closed: the driver's mapping stays valid
    assert np.array_equal(run(first), x + c)

    other, _ = _pool_model(n)
    writer = memory.map(other.pools[0])  # NOTE: a writable shared mapping made before the seals
    writer[:] = (2 * c).tobytes()
    fd = other.pools[0].handle.fds[0]
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, 0x0010 | fcntl.F_SEAL_SHRINK)  # NOTE: F_SEAL_FUTURE_WRITE
    other.pools[0] = hal.Memory(name="mmap_fd", handle=hal.Handle(fds=[fd], ints=[memory.PROT_READ, 0, 0]),
                                size=4 * n)
    assert memory.frozen_key(other.pools[0]) is None
    _, status, second = prepare(other, dev)
    assert status == S.NONE and copies == [4 * n]
    writer[0:4] = np.float32(7.0).tobytes()  # NOTE: still possible: the driver's copy must not see it
    writer.release()
    assert np.array_equal(run(second), x + 2 * c)
    memory.free(other.pools[0])


def test_variants_of_a_model_compare_one_candidate(monkeypatch):
    """A model, its dynamic-shape variant (output dimensions 0), its relaxed variant and one with another
    operand type, all kept: a lookup of each compares the one entry that is its own (the fingerprint tells
    them apart), and finds it."""
    import copy

    from nnhal.driver import prepared_states
    from nnhal.engine.validation import validate_model
    from nnhal.hal.types import HalVersion

    base = add_model()
    dynamic = copy.deepcopy(base)
    dynamic.main.operands[dynamic.main.outputIndexes[0]].dimensions = [0, 0]
    relaxed = copy.deepcopy(base)
    relaxed.relaxComputationFloat32toFloat16 = True
    other_type = copy.deepcopy(base)
    other_type.main.operands[0].type = hal.OperandType.TENSOR_FLOAT16
    variants = [base, dynamic, relaxed, other_type]
    states = PreparedStates()
    for m in variants:
        states.add(m, [], 3, validate_model(base, [], HalVersion.V1_3))
    compared: list = []
    real = prepared_states.Entry.same

    def counted(self, *a):
        compared.append(self.model)
        return real(self, *a)

    monkeypatch.setattr(prepared_states.Entry, "same", counted)
    for m in variants:
        compared.clear()
        assert states.defs(copy.deepcopy(m), [], 3) is not None
        assert compared == [m]


def test_a_compiled_model_is_kept_only_once_it_is_one(monkeypatch):
    """A backend sharing its compiled models: what compile returns is kept with the model's entry only once
    the front end has checked it is a Compiled (a wrong result fails that preparation, GENERAL_FAILURE, and is
    not served to the next one); the next preparations of an equal model take the one kept, unchecked again,
    without compiling."""
    from nnhal.driver.device import Device
    from nnhal.drivers.sample import SampleBackend

    results: list = ["not a compiled model"]
    calls: list = []

    class Flaky(SampleBackend):
        def compile(self, model, pool_views, deadline_ns):
            calls.append(1)
            return results.pop(0) if results else super().compile(model, pool_views, deadline_ns)

    dev = Device("memo-flaky", Flaky())
    model = add_model()
    assert prepare(model, dev)[1] == S.GENERAL_FAILURE and len(calls) == 1
    _, status, first = prepare(model, dev)
    assert status == S.NONE and len(calls) == 2  # NOTE: compiled again: the wrong result was not kept
    checks: list = []
    real = device_mod.Compiled

    class Counting(type(real)):
        def __instancecheck__(cls, obj):
            checks.append(1)
            return super().__instancecheck__(obj)

    monkeypatch.setattr(device_mod, "Compiled", Counting("C", (real,), {}))
    for _ in range(2):
        _, status, again = prepare(model, dev)
        assert status == S.NONE and again.executor is first.executor
    assert len(calls) == 2 and not checks  # NOTE: neither compiled nor checked again
