"""Compilation caching (VTS CompilationCachingTests, VTS.md section 5): saving
through prepareModel_1_3 / _1_2 / the draft saveToCache, loading through
prepareModelFromCache_1_3 / prepareModelFromCache, bad handles and access
modes, a tampered model or data cache, TOCTOU, restarts and other versions."""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Optional

import msgspec
import numpy as np
import pytest

from nnhal import hal
from nnhal import memory as hal_memory
from nnhal.driver import cache as driver_cache
from nnhal.drivers.sample import sample_device
from nnhal.ops import conv as conv_ops
from nnhal.tools import bench
from tests.conftest import ROOT
from tests.driver_util import (
    WAIT_S,
    CountingPreparedCallback,
    S,
    execute_sync,
    vector_model,
    vector_pools,
)

M = hal.MeasureTiming
TOKEN = bytes(range(32))
RW, RO, WO = os.O_RDWR, os.O_RDONLY, os.O_WRONLY


@pytest.fixture(scope="module")
def key_dir(tmp_path_factory) -> Path:  # noqa: ANN001
    return tmp_path_factory.mktemp("cache-key")


@pytest.fixture(scope="module")
def dev(key_dir: Path) -> Any:
    return sample_device("sample-cachetest", cache_key_dir=str(key_dir))


class Files:
    """Cache files in a directory, reopened with any access mode."""

    def __init__(self, d: Path, n_model: int = 1, n_data: int = 1):
        self.d = d
        d.mkdir(parents=True, exist_ok=True)
        self.model = [d / f"model{k}" for k in range(n_model)]
        self.data = [d / f"data{k}" for k in range(n_data)]
        for p in self.model + self.data:
            p.touch()
        self.fds: list[int] = []

    def _open(self, p: Path, flags: int) -> hal.Handle:
        fd = os.open(p, flags)
        self.fds.append(fd)
        return hal.Handle(fds=[fd])

    def handles(self, model_modes: Optional[list[int]] = None, data_modes: Optional[list[int]] = None) -> tuple:
        mm = model_modes or [RW] * len(self.model)
        dm = data_modes or [RW] * len(self.data)
        return ([self._open(p, m) for p, m in zip(self.model, mm)], [self._open(p, m) for p, m in zip(self.data, dm)])

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []


@pytest.fixture
def files(tmp_path: Path):  # noqa: ANN201
    f = Files(tmp_path / "cache")
    yield f
    f.close()


def save(dev: Any, model: hal.Model, mc: list, dc: list, token: Any = TOKEN, version: str = "1_3") -> Any:
    cb = CountingPreparedCallback()
    if version == "1_3":
        launch = dev.prepareModel_1_3(model, hal.ExecutionPreference.FAST_SINGLE_ANSWER, hal.Priority.MEDIUM,
                                      hal.OptionalTimePoint(), mc, dc, token, cb)
    else:
        launch = dev.prepareModel_1_2(model, hal.ExecutionPreference.FAST_SINGLE_ANSWER, mc, dc, token, cb)
    status, prepared = cb.wait(WAIT_S)
    assert launch == S.NONE and status == S.NONE and prepared is not None, (launch, status)
    return prepared


def load(dev: Any, mc: list, dc: list, token: Any = TOKEN, deadline: Any = None, version: str = "1_3") -> tuple:
    """(status, prepared) of prepareModelFromCache_1_3 (or the 1.2 one)."""
    cb = CountingPreparedCallback()
    if version == "1_3":
        launch = dev.prepareModelFromCache_1_3(deadline or hal.OptionalTimePoint(), mc, dc, token, cb)
        name = "notify_1_3"
    else:
        launch = dev.prepareModelFromCache(mc, dc, token, cb)
        name = "notify_1_2"
    status, prepared = cb.wait(WAIT_S)
    assert [c[0] for c in cb.calls] == [name], cb.calls
    assert launch == S.NONE or launch == status, (launch, status)
    assert (prepared is None) == (status != S.NONE), (status, prepared)
    return status, prepared


# --------------------------------------------------------------------------
# a small quantized MobileNet: CONSTANT_REFERENCE pools, conv prepare states


class Net:
    def __init__(self, seed: int = 0, classes: int = 10):
        net = bench.mobilenet_v1(32, 0.25, classes, seed=seed)
        self.x = np.random.default_rng(seed).random((1, 32, 32, 3), np.float32)
        self.g = bench.lower(net, quant=True, ranges=bench.calibrate(net, self.x))
        self.model = bench.to_model(self.g)
        out = self.g.operands[self.g.outputs[0]]
        self.out_shape, self.out_dtype = out.dims, np.dtype(np.uint8)
        self.expected: Optional[np.ndarray] = None

    def run(self, prepared: Any) -> np.ndarray:
        nbytes = int(np.prod(self.out_shape))
        in_mem, out_mem = hal_memory.allocate(self.x.nbytes), hal_memory.allocate(nbytes)
        try:
            hal_memory.map(in_mem)[:] = self.x.tobytes()
            req = hal.Request(inputs=[hal.RequestArgument(location=hal.DataLocation(0, 0, self.x.nbytes))],
                              outputs=[hal.RequestArgument(location=hal.DataLocation(1, 0, nbytes))],
                              pools=[hal.MemoryPool(hidlMemory=in_mem), hal.MemoryPool(hidlMemory=out_mem)])
            status, _, _ = execute_sync(prepared, req)
            assert status == S.NONE
            return np.frombuffer(bytes(hal_memory.map(out_mem)), np.uint8).reshape(self.out_shape).copy()
        finally:
            hal_memory.free(in_mem)
            hal_memory.free(out_mem)


@pytest.fixture(scope="module")
def net(dev) -> Net:  # noqa: ANN001
    n = Net()
    cb = CountingPreparedCallback()
    dev.prepareModel_1_3(n.model, hal.ExecutionPreference.FAST_SINGLE_ANSWER, hal.Priority.MEDIUM,
                         hal.OptionalTimePoint(), [], [], TOKEN, cb)
    status, prepared = cb.wait(WAIT_S)
    assert status == S.NONE
    n.expected = n.run(prepared)
    return n


@pytest.fixture(scope="module")
def other_net(dev) -> Net:  # noqa: ANN001
    return Net(seed=5, classes=12)


def saved(dev: Any, net: Net, files: Files) -> None:
    mc, dc = files.handles()
    save(dev, net.model, mc, dc)


# --------------------------------------------------------------------------
# basics


def test_cache_files_needed_and_caching_supported(dev) -> None:  # noqa: ANN001
    status, n_model, n_data = dev.getNumberOfCacheFilesNeeded()
    assert status == S.NONE and 1 <= n_model <= 32 and 1 <= n_data <= 32
    assert dev.isCachingSupported() == (S.NONE, True)


def test_interfaces_declare_the_draft_methods() -> None:
    assert hasattr(hal.IDevice, "isCachingSupported") and hasattr(hal.IPreparedModel, "saveToCache")


@pytest.mark.parametrize("version", ["1_3", "1_2"])
def test_save_and_load_same_results(dev, net, files, version: str) -> None:  # noqa: ANN001
    mc, dc = files.handles()
    prepared = save(dev, net.model, mc, dc, version=version)
    np.testing.assert_array_equal(net.run(prepared), net.expected)
    assert os.path.getsize(files.model[0]) > 0 and os.path.getsize(files.data[0]) > 0
    status, loaded = load(dev, *files.handles(), version=version)
    assert status == S.NONE
    # the quantized filter matrices are built from the weights (kept in their stored width) by the first
    # execution, not by the load
    loaded_states = [s for s in loaded.executor.prepared_states()[0] if hasattr(s, "requant")]
    lazy = [s for s in loaded_states if s.filter is not None and s.filter[1] is None]
    assert lazy and all(len(s.lazy_matrix) == 0 for s in lazy)
    np.testing.assert_array_equal(net.run(loaded), net.expected)
    assert all(len(s.lazy_matrix) == 1 for s in lazy)
    np.testing.assert_array_equal(net.run(loaded), net.expected)
    # loading skips the prepare work: the restored states are the saved ones, verified float32 paths included
    # (the convolutions' states: the ones saved; the other operations prepare again at load)
    fresh_states = [s for s in prepared.executor.prepared_states()[0] if hasattr(s, "requant")]
    assert len(fresh_states) == len(loaded_states) > 0
    for a, b in zip(fresh_states, loaded_states):
        assert (a.filter is None) == (b.filter is None)
        if a.filter is not None:
            np.testing.assert_array_equal(a.filter[1], conv_ops._matrix(b))
        assert sorted(a.requant) == sorted(b.requant)
        for act, rq in a.requant.items():
            assert (rq.f32 is None) == (b.requant[act].f32 is None)
            if rq.f32 is not None:
                np.testing.assert_array_equal(rq.f32[0], b.requant[act].f32[0])
                np.testing.assert_array_equal(rq.f32[1], b.requant[act].f32[1])


def test_loaded_model_keeps_priority_and_executes_all_paths(dev, net, files) -> None:  # noqa: ANN001
    mc, dc = files.handles()
    cb = CountingPreparedCallback()
    dev.prepareModel_1_3(net.model, hal.ExecutionPreference.FAST_SINGLE_ANSWER, hal.Priority.HIGH,
                         hal.OptionalTimePoint(), mc, dc, TOKEN, cb)
    assert cb.wait(WAIT_S)[0] == S.NONE
    status, loaded = load(dev, *files.handles())
    assert status == S.NONE and loaded.priority == hal.Priority.HIGH


def test_non_zero_offsets(dev, net, files) -> None:  # noqa: ANN001
    """VTS CacheSavingAndRetrievalNonZeroOffset: placeholder bytes already in
    the files and the offsets past them when saving; offsets advanced by one
    byte when loading."""
    mc, dc = files.handles()
    for h in mc + dc:
        assert os.write(h.fds[0], b"\0" * 1024) == 1024
    save(dev, net.model, mc, dc)
    mc, dc = files.handles()
    for h in mc + dc:
        os.read(h.fds[0], 1)
    status, loaded = load(dev, mc, dc)
    assert status == S.NONE
    np.testing.assert_array_equal(net.run(loaded), net.expected)


def test_descriptors_closed_after_the_launch(dev, net, files) -> None:  # noqa: ANN001
    """The client may close its descriptors once the call returns (a service
    transport does): the driver works on its own duplicates."""
    mc, dc = files.handles()
    cb = CountingPreparedCallback()
    assert dev.prepareModel_1_3(net.model, hal.ExecutionPreference.FAST_SINGLE_ANSWER, hal.Priority.MEDIUM,
                                hal.OptionalTimePoint(), mc, dc, TOKEN, cb) == S.NONE
    files.close()
    assert cb.wait(WAIT_S)[0] == S.NONE
    mc, dc = files.handles()
    cb = CountingPreparedCallback()
    assert dev.prepareModelFromCache_1_3(hal.OptionalTimePoint(), mc, dc, TOKEN, cb) == S.NONE
    files.close()
    status, loaded = cb.wait(WAIT_S)
    assert status == S.NONE
    np.testing.assert_array_equal(net.run(loaded), net.expected)


def test_save_to_cache_draft_method(dev, net, files) -> None:  # noqa: ANN001
    cb = CountingPreparedCallback()
    dev.prepareModel_1_3(net.model, hal.ExecutionPreference.FAST_SINGLE_ANSWER, hal.Priority.MEDIUM,
                         hal.OptionalTimePoint(), [], [], TOKEN, cb)
    _, prepared = cb.wait(WAIT_S)
    mc, dc = files.handles()
    assert prepared.saveToCache(mc[0], dc[0], TOKEN) == S.NONE
    status, loaded = load(dev, *files.handles())
    assert status == S.NONE
    np.testing.assert_array_equal(net.run(loaded), net.expected)
    # invalid arguments: INVALID_ARGUMENT, nothing written
    ro_m, ro_d = files.handles([RO], [RO])
    assert prepared.saveToCache(ro_m[0], ro_d[0], TOKEN) == S.INVALID_ARGUMENT
    assert prepared.saveToCache(hal.Handle(fds=[]), dc[0], TOKEN) == S.INVALID_ARGUMENT
    assert prepared.saveToCache(mc[0], dc[0], TOKEN[:31]) == S.INVALID_ARGUMENT
    assert prepared.saveToCache("junk", dc[0], TOKEN) == S.INVALID_ARGUMENT


def test_cache_of_a_model_with_only_inline_constants_and_control_flow(dev, files) -> None:  # noqa: ANN001
    vm = vector_model("V1_3/while_sum_of_powers_quant8", None)
    mc, dc = files.handles()
    save(dev, vm.build_model(), mc, dc)
    status, loaded = load(dev, *files.handles())
    assert status == S.NONE
    with vector_pools(vm) as p:
        status, shapes, _ = execute_sync(loaded, p.request())
        assert status == S.NONE
        o = vm.output_operands()[0]
        np.testing.assert_array_equal(p.output(0, o.data.dtype, shapes[0].dimensions), o.data)


# --------------------------------------------------------------------------
# bad arguments


def _empty(files: Files) -> bool:
    return all(os.path.getsize(p) == 0 for p in files.model + files.data)


@pytest.mark.parametrize("n_model,n_data", [(0, 1), (1, 0), (2, 1), (1, 2), (2, 2)])
def test_wrong_number_of_handles(dev, net, tmp_path, n_model: int, n_data: int) -> None:  # noqa: ANN001
    """Saving with the wrong number of handles still prepares (no cache
    written); loading with them fails; loading the right number then fails
    as nothing was saved."""
    bad = Files(tmp_path / "bad", n_model, n_data)
    good = Files(tmp_path / "good")
    try:
        mc, dc = bad.handles()
        good_mc, good_dc = good.handles()
        mc = good_mc + mc[1:] if n_model else []
        dc = good_dc + dc[1:] if n_data else []
        prepared = save(dev, net.model, mc, dc)
        np.testing.assert_array_equal(net.run(prepared), net.expected)
        assert _empty(good) and _empty(bad)
        status, loaded = load(dev, mc, dc)
        assert status in (S.INVALID_ARGUMENT, S.GENERAL_FAILURE) and loaded is None
        status, _ = load(dev, *good.handles())
        assert status == S.GENERAL_FAILURE
    finally:
        bad.close()
        good.close()


@pytest.mark.parametrize("where", ["model", "data"])
@pytest.mark.parametrize("nfds", [0, 2])
def test_wrong_number_of_fds(dev, net, files, tmp_path, where: str, nfds: int) -> None:  # noqa: ANN001
    extra = os.open(tmp_path / "extra", os.O_RDWR | os.O_CREAT)
    try:
        mc, dc = files.handles()
        bad = hal.Handle(fds=[] if nfds == 0 else [(mc if where == "model" else dc)[0].fds[0], extra])
        args = ([bad], dc) if where == "model" else (mc, [bad])
        save(dev, net.model, *args)
        assert _empty(files)
        status, loaded = load(dev, *args)
        assert status in (S.INVALID_ARGUMENT, S.GENERAL_FAILURE) and loaded is None
        status, _ = load(dev, *files.handles())
        assert status == S.GENERAL_FAILURE
    finally:
        os.close(extra)


@pytest.mark.parametrize("where", ["model", "data"])
def test_read_only_fd_on_save(dev, net, files, where: str) -> None:  # noqa: ANN001
    """VTS SaveToCacheInvalidAccessMode: the model is prepared, nothing saved."""
    modes = ([RO], [RW]) if where == "model" else ([RW], [RO])
    mc, dc = files.handles(*modes)
    prepared = save(dev, net.model, mc, dc)
    np.testing.assert_array_equal(net.run(prepared), net.expected)
    assert _empty(files)
    status, loaded = load(dev, mc, dc)
    assert status in (S.INVALID_ARGUMENT, S.GENERAL_FAILURE) and loaded is None


@pytest.mark.parametrize("where", ["model", "data"])
def test_write_only_fd_on_load(dev, net, files, where: str) -> None:  # noqa: ANN001
    """VTS PrepareModelFromCacheInvalidAccessMode: GENERAL_FAILURE, no model."""
    saved(dev, net, files)
    modes = ([WO], [RW]) if where == "model" else ([RW], [WO])
    status, loaded = load(dev, *files.handles(*modes))
    assert status == S.GENERAL_FAILURE and loaded is None


@pytest.mark.parametrize("token", [TOKEN[:31], TOKEN + b"\0", "x" * 32, None, [256] * 32])
def test_bad_token(dev, net, files, token: Any) -> None:  # noqa: ANN001
    mc, dc = files.handles()
    save(dev, net.model, mc, dc, token=token)  # still prepares, saves nothing
    assert _empty(files)
    status, loaded = load(dev, mc, dc, token=token)
    assert status == S.INVALID_ARGUMENT and loaded is None


def test_token_as_list_of_ints(dev, net, files) -> None:  # noqa: ANN001
    mc, dc = files.handles()
    save(dev, net.model, mc, dc, token=list(TOKEN))
    assert load(dev, mc, dc, token=np.frombuffer(TOKEN, np.uint8))[0] == S.NONE


def test_same_file_for_both_caches_is_refused(dev, net, files) -> None:  # noqa: ANN001
    mc, _ = files.handles()
    save(dev, net.model, mc, mc)
    assert _empty(files)
    assert load(dev, mc, mc)[0] == S.INVALID_ARGUMENT


def test_junk_handles(dev, net) -> None:  # noqa: ANN001
    for mc, dc in [([hal.Handle(fds=[-1])], [hal.Handle(fds=[-1])]), (["junk"], [None]), ("x", "y"),
                   ([hal.Handle(fds=[10**6])], [hal.Handle(fds=[10**6 + 1])])]:
        save(dev, net.model, mc, dc)
        status, loaded = load(dev, mc, dc)
        assert status in (S.INVALID_ARGUMENT, S.GENERAL_FAILURE) and loaded is None


# --------------------------------------------------------------------------
# security


def _flip(path: Path, byte: int, bit: int = 0) -> None:
    data = bytearray(path.read_bytes())
    data[byte] ^= 1 << bit
    path.write_bytes(bytes(data))


def test_model_cache_bit_flips(dev, net, files) -> None:  # noqa: ANN001
    saved(dev, net, files)
    good = files.model[0].read_bytes()
    n = len(good)
    for pos in sorted({0, 8, 12, 16, 24, 25, n // 3, n // 2, n - 40, n - 33, n - 32, n - 1} |
                      set(range(30, n - 32, max(1, n // 24)))):
        files.model[0].write_bytes(good)
        _flip(files.model[0], pos, pos % 8)
        status, loaded = load(dev, *files.handles())
        assert status == S.GENERAL_FAILURE and loaded is None, pos
    files.model[0].write_bytes(good)
    assert load(dev, *files.handles())[0] == S.NONE


@pytest.mark.parametrize("extra", [b"\0", b"junk" * 100])
def test_model_cache_appended_bytes(dev, net, files, extra: bytes) -> None:  # noqa: ANN001
    saved(dev, net, files)
    with open(files.model[0], "ab") as f:
        f.write(extra)
    status, loaded = load(dev, *files.handles())
    assert status == S.GENERAL_FAILURE and loaded is None


def test_model_cache_truncated_or_empty(dev, net, files) -> None:  # noqa: ANN001
    saved(dev, net, files)
    good = files.model[0].read_bytes()
    for cut in (0, 10, 24, len(good) // 2, len(good) - 1):
        files.model[0].write_bytes(good[:cut])
        assert load(dev, *files.handles()) == (S.GENERAL_FAILURE, None)


def test_another_models_cache(dev, net, other_net, tmp_path) -> None:  # noqa: ANN001
    """A model cache replaced by another model's (same token), alone or with
    its data cache, or with the first model's data cache."""
    a, b = Files(tmp_path / "a"), Files(tmp_path / "b")
    try:
        saved(dev, net, a)
        saved(dev, other_net, b)
        a_model = a.model[0].read_bytes()
        a.model[0].write_bytes(b.model[0].read_bytes())
        # b's model cache with a's data: the data hash does not match
        assert load(dev, *a.handles()) == (S.GENERAL_FAILURE, None)
        # both of b's files: that is b's model, not a's (the driver cannot tell
        # a token collision): it loads and computes b's results
        a.data[0].write_bytes(b.data[0].read_bytes())
        status, loaded = load(dev, *a.handles())
        assert status == S.NONE and other_net.run(loaded).shape == tuple(other_net.out_shape)
        # a's model cache with b's data
        a.model[0].write_bytes(a_model)
        assert load(dev, *a.handles()) == (S.GENERAL_FAILURE, None)
    finally:
        a.close()
        b.close()


def test_token_bit_flips(dev, net, files) -> None:  # noqa: ANN001
    saved(dev, net, files)
    for byte in (0, 7, 31):
        for bit in (0, 7):
            tok = bytearray(TOKEN)
            tok[byte] ^= 1 << bit
            status, loaded = load(dev, *files.handles(), token=bytes(tok))
            assert status == S.GENERAL_FAILURE and loaded is None


def test_data_cache_corruption_never_gives_wrong_results(dev, net, files) -> None:  # noqa: ANN001
    saved(dev, net, files)
    good = files.data[0].read_bytes()
    n = len(good)
    for pos in [0, 1, n // 7, n // 3, n // 2, n - 1]:
        files.data[0].write_bytes(good)
        _flip(files.data[0], pos, 3)
        status, loaded = load(dev, *files.handles())
        assert status == S.GENERAL_FAILURE and loaded is None
    for data in (good + b"\0", good[:-1], b""):
        files.data[0].write_bytes(data)
        assert load(dev, *files.handles()) == (S.GENERAL_FAILURE, None)
    files.data[0].write_bytes(good)
    status, loaded = load(dev, *files.handles())
    assert status == S.NONE
    np.testing.assert_array_equal(net.run(loaded), net.expected)


def test_authentic_payload_must_match_the_schema(dev, key_dir, files, net) -> None:  # noqa: ANN001
    """Even a payload with a valid tag is decoded against the schema (never
    pickle): a forged record made with the key is refused, not executed."""
    key = driver_cache.load_key(key_dir)
    version = dev.getVersionString()[1]
    for payload in (msgspec.msgpack.encode({"x": 1}), msgspec.msgpack.encode([1, 2, 3]), b"\xc1",
                    b"\x80\x03cos\nsystem\n."):
        header = struct.pack("<8sIIQ", driver_cache.MAGIC, driver_cache.FORMAT_VERSION, 0, len(payload))
        msg = hmac.new(key, b"nnhal compilation cache\x00", hashlib.sha256)
        msg.update(struct.pack("<I", len(version.encode())) + version.encode() + TOKEN + header + payload)
        files.model[0].write_bytes(header + payload + msg.digest())
        assert load(dev, *files.handles()) == (S.GENERAL_FAILURE, None)


def test_toctou_overwrite_while_loading(dev, net, other_net, files, tmp_path) -> None:  # noqa: ANN001
    """Another thread keeps replacing the cache files (with another model's,
    saved with another token as in VTS SaveToCache_TOCTOU, with garbage, with
    the right ones) while loading: every load fails cleanly or gives the
    right model."""
    other = Files(tmp_path / "other")
    try:
        save(dev, other_net.model, *other.handles(), token=bytes([TOKEN[0] + 1]) + TOKEN[1:])
        saved(dev, net, files)
        right = (files.model[0].read_bytes(), files.data[0].read_bytes())
        wrong = (other.model[0].read_bytes(), other.data[0].read_bytes())
        junk = (os.urandom(len(right[0])), os.urandom(len(right[1])))
        stop = threading.Event()

        def overwrite() -> None:
            k = 0
            while not stop.is_set():
                m, d = (right, wrong, junk)[k % 3]
                k += 1
                for path, data in ((files.model[0], m), (files.data[0], d)):
                    with open(path, "r+b") as f:  # NOTE: in place (truncate + write): the loader's fds see it
                        f.truncate(0)
                        f.write(data)

        th = threading.Thread(target=overwrite, daemon=True)
        th.start()
        results = []
        try:
            for _ in range(40):
                status, loaded = load(dev, *files.handles())
                results.append(status)
                if status == S.NONE:
                    np.testing.assert_array_equal(net.run(loaded), net.expected)
                else:
                    assert status == S.GENERAL_FAILURE
                files.close()
        finally:
            stop.set()
            th.join(10)
        assert S.GENERAL_FAILURE in results
    finally:
        other.close()


# --------------------------------------------------------------------------
# keys, restarts, versions


def test_key_file_is_private_and_persistent(dev, key_dir) -> None:  # noqa: ANN001
    dev.cache_key()
    key_file = key_dir / driver_cache.KEY_FILE
    assert (key_file.stat().st_mode & 0o777) == 0o600
    assert (key_dir.stat().st_mode & 0o777) == 0o700
    assert len(key_file.read_bytes()) == 32
    assert driver_cache.load_key(key_dir) == key_file.read_bytes()
    assert not [p for p in key_dir.iterdir() if p.name != driver_cache.KEY_FILE]  # no temporary left behind


def test_key_dir_default_location(monkeypatch, tmp_path) -> None:  # noqa: ANN001
    monkeypatch.delenv(driver_cache.KEY_ENV, raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert driver_cache.key_dir() == tmp_path / "state" / "nnhal"
    monkeypatch.setenv(driver_cache.KEY_ENV, str(tmp_path / "k"))
    assert driver_cache.key_dir() == tmp_path / "k"


def test_fresh_device_same_key_loads_other_version_or_key_does_not(dev, key_dir, net, files, tmp_path) -> None:  # noqa: ANN001
    saved(dev, net, files)
    again = sample_device("sample-cachetest", cache_key_dir=str(key_dir))
    status, loaded = load(again, *files.handles())
    assert status == S.NONE
    np.testing.assert_array_equal(net.run(loaded), net.expected)
    newer = sample_device("sample-cachetest", cache_key_dir=str(key_dir), version_string="nnhal-sample-all 0.2")
    assert load(newer, *files.handles()) == (S.GENERAL_FAILURE, None)
    stranger = sample_device("sample-cachetest", cache_key_dir=str(tmp_path / "other-key"))
    assert load(stranger, *files.handles()) == (S.GENERAL_FAILURE, None)


def test_a_key_others_can_read_is_not_used(net, files, tmp_path) -> None:  # noqa: ANN001
    kd = tmp_path / "lax"
    d1 = sample_device("sample-lax", cache_key_dir=str(kd))
    saved(d1, net, files)
    os.chmod(kd / driver_cache.KEY_FILE, 0o644)
    d2 = sample_device("sample-lax", cache_key_dir=str(tmp_path / "lax2"))
    os.makedirs(tmp_path / "lax2", mode=0o700)
    (tmp_path / "lax2" / driver_cache.KEY_FILE).write_bytes((kd / driver_cache.KEY_FILE).read_bytes())
    os.chmod(tmp_path / "lax2" / driver_cache.KEY_FILE, 0o644)
    assert load(d2, *files.handles()) == (S.GENERAL_FAILURE, None)
    # saving with an unusable key: still prepares, writes nothing
    f2 = Files(tmp_path / "c2")
    try:
        save(d2, net.model, *f2.handles())
        assert _empty(f2)
    finally:
        f2.close()


_CHILD = r"""
import os, sys
import numpy as np
from nnhal import hal
from nnhal.drivers.sample import sample_device
model_path, data_path, key_dir, version = sys.argv[1:5]
dev = sample_device("sample-child", cache_key_dir=key_dir, version_string=version)
fds = [os.open(model_path, os.O_RDWR), os.open(data_path, os.O_RDWR)]
cb = hal.PreparedModelCallback()
dev.prepareModelFromCache_1_3(hal.OptionalTimePoint(), [hal.Handle(fds=[fds[0]])], [hal.Handle(fds=[fds[1]])],
                              bytes(range(32)), cb)
status, prepared = cb.wait(60)
print(hal.ErrorStatus(status).name, prepared is not None)
"""


def test_second_process_loads_the_cache(dev, key_dir, net, files) -> None:  # noqa: ANN001
    """A restart: another process with the same key directory loads the cache;
    with another driver version it does not."""
    saved(dev, net, files)
    version = dev.getVersionString()[1]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    for v, expected in ((version, "NONE True"), ("nnhal-sample-all 9.9", "GENERAL_FAILURE False")):
        out = subprocess.run([sys.executable, "-c", _CHILD, str(files.model[0]), str(files.data[0]), str(key_dir), v],
                             capture_output=True, text=True, timeout=120, env=env)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == expected


# --------------------------------------------------------------------------
# deadlines


def test_load_deadlines(dev, net, files) -> None:  # noqa: ANN001
    import time

    saved(dev, net, files)
    past = hal.OptionalTimePoint(nanosecondsSinceEpoch=max(0, time.monotonic_ns() - 10**9))
    status, loaded = load(dev, *files.handles(), deadline=past)
    assert status in (S.MISSED_DEADLINE_TRANSIENT, S.MISSED_DEADLINE_PERSISTENT) and loaded is None
    far = hal.OptionalTimePoint(nanosecondsSinceEpoch=2**63 - 1)
    assert load(dev, *files.handles(), deadline=far)[0] == S.NONE
    bad = hal.OptionalTimePoint(nanosecondsSinceEpoch=-5)
    assert load(dev, *files.handles(), deadline=bad) == (S.INVALID_ARGUMENT, None)


# --------------------------------------------------------------------------
# conformance models: cache-loaded results equal freshly prepared ones


_SAMPLE = ["V1_0/conv_quant8", "V1_0/depthwise_conv2d_quant8", "V1_0/fully_connected_quant8", "V1_0/lstm3",
           "V1_0/rnn", "V1_0/svdf", "V1_2/conv2d_dilation", "V1_2/conv2d_per_channel",
           "V1_2/depthwise_conv2d_per_channel", "V1_2/grouped_conv2d", "V1_2/transpose_conv2d",
           "V1_2/fully_connected_v1_2", "V1_2/quantized_lstm", "V1_2/unidirectional_sequence_lstm_1step",
           "V1_3/fully_connected_quant8_signed", "V1_3/grouped_conv2d_quant8_signed", "V1_3/if_constant",
           "V1_3/qlstm_projection", "V1_3/while_sum_of_powers_quant8_signed"]


@pytest.mark.parametrize("rel", _SAMPLE)
def test_conformance_models_through_the_cache(dev, tmp_path, rel: str) -> None:  # noqa: ANN001
    from tests.driver_util import vector_models

    path = ROOT.parent / "shared" / "conformance" / f"{rel}.json.gz"
    if not path.exists():
        pytest.skip(f"{rel} not in the vectors")
    for k, vm in enumerate(vector_models(rel)[:4]):
        f = Files(tmp_path / f"m{k}")
        try:
            mc, dc = f.handles()
            fresh = save(dev, vm.build_model(), mc, dc)
            status, loaded = load(dev, *f.handles())
            assert status == S.NONE, vm.name
            outs = []
            for prepared in (fresh, loaded):
                with vector_pools(vm) as p:
                    st, shapes, _ = execute_sync(prepared, p.request())
                    assert st == S.NONE, vm.name
                    outs.append([p.output(j, o.data.dtype, shapes[j].dimensions)
                                 for j, o in enumerate(vm.output_operands()) if o.data is not None])
            for a, b in zip(*outs):
                np.testing.assert_array_equal(a, b, err_msg=vm.name)
        finally:
            f.close()


def test_toctou_overwrite_while_saving(dev, net, other_net, files, tmp_path) -> None:  # noqa: ANN001
    """VTS SaveToCache_TOCTOU: another model's cache (another token) copied
    over the files while saving; the load then fails cleanly or gives the
    right model."""
    other = Files(tmp_path / "other")
    try:
        save(dev, other_net.model, *other.handles(), token=bytes([TOKEN[0] + 1]) + TOKEN[1:])
        wrong = (other.model[0].read_bytes(), other.data[0].read_bytes())
        outcomes = set()
        for _ in range(8):
            stop = threading.Event()

            def overwrite(stop: threading.Event = stop) -> None:
                while not stop.is_set():
                    for path, data in zip((files.model[0], files.data[0]), wrong):
                        with open(path, "r+b") as f:
                            f.truncate(0)
                            f.write(data)

            th = threading.Thread(target=overwrite, daemon=True)
            th.start()
            try:
                save(dev, net.model, *files.handles())
            finally:
                stop.set()
                th.join(10)
            status, loaded = load(dev, *files.handles())
            outcomes.add(status)
            if status == S.NONE:
                np.testing.assert_array_equal(net.run(loaded), net.expected)
            else:
                assert status == S.GENERAL_FAILURE and loaded is None
            files.close()
    finally:
        other.close()


def test_state_without_codec_is_prepared_again_on_load(dev, key_dir, net, files, monkeypatch) -> None:  # noqa: ANN001
    """An operation whose state cannot be saved (no OpDef.save_state) is
    recorded as "prepare": loading runs its prepare again, results unchanged."""
    from nnhal.ops import registry

    for t in (hal.OperationType.CONV_2D, hal.OperationType.DEPTHWISE_CONV_2D):
        monkeypatch.setattr(registry.find(t), "save_state", None)
    saved(dev, net, files)
    status, loaded = load(dev, *files.handles())
    assert status == S.NONE
    np.testing.assert_array_equal(net.run(loaded), net.expected)
    record = driver_cache.verify(files.model[0].read_bytes(), driver_cache.load_key(key_dir),
                                 dev.getVersionString()[1], TOKEN)
    kinds = [st.kind for st in record.states[0]]
    assert "prepare" in kinds and "saved" in kinds  # NOTE: convolutions prepared again, fully connected restored


_KEY_CHILD = r"""
import sys
from pathlib import Path
from nnhal.driver import cache
print(cache.load_key(Path(sys.argv[1])).hex())
"""


def test_concurrent_key_creation_gives_one_key(tmp_path) -> None:  # noqa: ANN001
    """Processes racing to create the key all end up with the same one (a
    private temporary file hard-linked into place, never replaced)."""
    kd = tmp_path / "race"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    procs = [subprocess.Popen([sys.executable, "-c", _KEY_CHILD, str(kd)], stdout=subprocess.PIPE, text=True, env=env)
             for _ in range(3)]
    outs = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        outs.append(out.strip())
    assert len(set(outs)) == 1 and len(outs[0]) == 64
    assert (kd / driver_cache.KEY_FILE).read_bytes().hex() == outs[0]
    assert [p.name for p in kd.iterdir()] == [driver_cache.KEY_FILE]


def test_symlinked_or_foreign_key_is_refused(tmp_path) -> None:  # noqa: ANN001
    kd = tmp_path / "sym"
    kd.mkdir(mode=0o700)
    target = tmp_path / "elsewhere"
    target.write_bytes(os.urandom(32))
    os.chmod(target, 0o600)
    (kd / driver_cache.KEY_FILE).symlink_to(target)
    with pytest.raises(OSError):
        driver_cache.load_key(kd)
    short = tmp_path / "short"
    short.mkdir(mode=0o700)
    (short / driver_cache.KEY_FILE).write_bytes(b"abc")
    os.chmod(short / driver_cache.KEY_FILE, 0o600)
    with pytest.raises(PermissionError):
        driver_cache.load_key(short)


def test_a_driver_without_caching_refuses_prepare_from_cache_with_general_failure() -> None:
    """As Android's sample driver and VTS's CompilationCachingTest (caching not supported): GENERAL_FAILURE,
    notified once, whatever the (empty) handles; found by running nnhal vts on the README's example driver."""
    from nnhal.driver import Backend, Device

    d = Device("no-cache", Backend())
    assert d.getNumberOfCacheFilesNeeded() == (S.NONE, 0, 0)
    cb = hal.PreparedModelCallback()
    assert d.prepareModelFromCache_1_3(hal.OptionalTimePoint(), [], [], bytes(32), cb) == S.GENERAL_FAILURE
    assert cb.wait(5) == (S.GENERAL_FAILURE, None)


@pytest.mark.parametrize("size", [0, 1, driver_cache.DIGEST_PIECE - 1, driver_cache.DIGEST_PIECE,
                                  driver_cache.DIGEST_PIECE + 1, 5 * driver_cache.DIGEST_PIECE + 7,
                                  9 * driver_cache.DIGEST_PIECE])
def test_data_digest_is_the_digest_of_the_pieces_digests(size: int) -> None:
    """The data cache's digest: SHA-256 over each 1 MiB piece's SHA-256, the same whether the data comes in
    one buffer (a load; two threads from 4 MiB on) or in arbitrary chunks (a save), and it changes with
    any byte."""
    data = np.random.default_rng(size).integers(0, 256, size, np.uint8).tobytes()
    piece = driver_cache.DIGEST_PIECE
    pieces = [data[i:i + piece] for i in range(0, len(data), piece)] or [b""]
    want = hashlib.sha256(b"".join(hashlib.sha256(p).digest() for p in pieces)).digest()
    assert driver_cache.data_digest(data) == want
    assert driver_cache.data_digest(np.frombuffer(data, np.uint8)) == want
    for cuts in ([], [3], [piece - 5, piece + 9], list(range(0, size, 333_333))):
        d = driver_cache.DataDigest()
        edges = [0, *[c for c in cuts if 0 < c < size], size]
        for a, b in zip(edges, edges[1:]):
            d.update(data[a:b])
        assert d.digest() == want, cuts
    if size:
        flipped = bytearray(data)
        flipped[size // 2] ^= 1
        assert driver_cache.data_digest(flipped) != want
    assert not [t for t in threading.enumerate() if t.name == "nnhal-cache-digest"]
