"""Section "caching": compilation caching and its security as the
``CompilationCachingTests.cpp`` of VTS 1.3 and of the AIDL VTS check them,
through the face judged and its public HAL only
(``getNumberOfCacheFilesNeeded``, ``prepareModel(_1_3)`` with cache files and
a token, ``prepareModelFromCache(_1_3)``), for a float32 and a quant8 asymm
model of two CONV_2Ds.  A HAL 1.3 cache file is a ``hidl_handle`` (the
tests with 0 or 2 fds in one are 1.3's); an AIDL one a
``ParcelFileDescriptor``.

``CompilationCachingTest``: saving then loading gives the same results (also
with files at a non-zero offset); the wrong number of handles or of fds, or
a read-only fd, still prepares the model when saving but nothing loads from
it; loading with such handles or a write-only fd fails with no model; files
rewritten by another thread while saving or loading (TOCTOU) load the right
model or fail cleanly; a model cache replaced by another model's fails.
``CompilationCachingSecurityTest``: a model cache with one bit flipped or
bytes appended, or a token with one bit flipped: GENERAL_FAILURE and no
model; a corrupted data cache: the model is null exactly when the status is
not NONE, and a loaded model computes the right results.

A driver that needs no cache files does not cache: VTS then only checks that
``prepareModelFromCache_1_3`` gives GENERAL_FAILURE; the other tests are
reported unsupported.
"""

from __future__ import annotations

import os
import random
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

from nnhal import hal
from nnhal.conformance.face import Face, as_face
from nnhal.conformance.vts.case import Case, Recorder, name
from nnhal.platform import memory as hal_memory

SECTION = "caching"
S = hal.ErrorStatus
T = hal.OperandType
L = hal.OperandLifeTime
OT = hal.OperationType
TOKEN = bytes(range(32))
RW, RO, WO = os.O_RDWR, os.O_RDONLY, os.O_WRONLY
IN_DIMS = [1, 8, 8, 4]
TYPES = {T.TENSOR_FLOAT32: np.float32, T.TENSOR_QUANT8_ASYMM: np.uint8}
SECURITY_SEEDS = range(4)


class Net:
    """Two 3x3 CONV_2Ds (SAME, stride 1) with seeded weights, and its input."""

    def __init__(self, t: T, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.type = t
        quant = t == T.TENSOR_QUANT8_ASYMM
        scale, zp = (0.5, 128) if quant else (0.0, 0)
        c = IN_DIMS[3]
        values = bytearray()

        def const(arr: np.ndarray, ot: T, s: float = 0.0, z: int = 0) -> hal.Operand:
            off = (len(values) + 3) // 4 * 4
            raw = np.ascontiguousarray(arr).tobytes()
            values.extend(bytes(off - len(values)) + raw)
            return hal.Operand(type=ot, dimensions=list(arr.shape), numberOfConsumers=1, scale=s, zeroPoint=z,
                               lifetime=L.CONSTANT_COPY, location=hal.DataLocation(0, off, len(raw)))

        def scalar(v: int) -> hal.Operand:
            off = len(values)
            values.extend(np.int32(v).tobytes())
            return hal.Operand(type=T.INT32, numberOfConsumers=1, lifetime=L.CONSTANT_COPY,
                               location=hal.DataLocation(0, off, 4))

        def tensor(lifetime: L, consumers: int) -> hal.Operand:
            return hal.Operand(type=t, dimensions=list(IN_DIMS), numberOfConsumers=consumers, scale=scale,
                               zeroPoint=zp, lifetime=lifetime)

        operands = [tensor(L.SUBGRAPH_INPUT, 1)]
        ops = []
        for layer in range(2):
            if quant:
                w = const(rng.integers(0, 256, (c, 3, 3, c)).astype(np.uint8), t, 0.01, 128)
                b = const(rng.integers(-50, 50, (c,)).astype(np.int32), T.TENSOR_INT32, scale * 0.01)
            else:
                w = const(rng.uniform(-1, 1, (c, 3, 3, c)).astype(np.float32), t)
                b = const(rng.uniform(-1, 1, (c,)).astype(np.float32), t)
            first = len(operands)
            operands += [w, b, scalar(1), scalar(1), scalar(1), scalar(0)]
            operands.append(tensor(L.TEMPORARY_VARIABLE if layer == 0 else L.SUBGRAPH_OUTPUT, 1 - layer))
            src = 0 if layer == 0 else first - 1
            ops.append(hal.Operation(OT.CONV_2D, [src] + list(range(first, first + 6)), [first + 6]))
        self.model = hal.Model(main=hal.Subgraph(operands, ops, [0], [len(operands) - 1]),
                               operandValues=bytes(values))
        dt = TYPES[t]
        self.x = (rng.integers(0, 256, IN_DIMS).astype(dt) if quant else rng.uniform(-1, 1, IN_DIMS).astype(dt))
        self.expected: Optional[np.ndarray] = None

    def run(self, face: Face, prepared: Any) -> tuple[Any, Optional[np.ndarray]]:
        """(status, the output) of one synchronous execution."""
        n = self.x.nbytes
        in_mem, out_mem = hal_memory.allocate(n), hal_memory.allocate(n)
        try:
            view = hal_memory.map(in_mem)
            view[:n] = self.x.tobytes()
            view.release()
            req = hal.Request(inputs=[hal.RequestArgument(location=hal.DataLocation(0, 0, n))],
                              outputs=[hal.RequestArgument(location=hal.DataLocation(1, 0, n))],
                              pools=[hal.MemoryPool(hidlMemory=in_mem), hal.MemoryPool(hidlMemory=out_mem)])
            status = face.execute(prepared, face.request(req), "sync", False).status
            if status != S.NONE:
                return status, None
            view = hal_memory.map(out_mem)
            out = np.frombuffer(bytes(view[:n]), TYPES[self.type]).reshape(IN_DIMS).copy()
            view.release()
            return status, out
        finally:
            hal_memory.free(in_mem)
            hal_memory.free(out_mem)


class Files:
    """The cache files of one test, reopened with any access mode."""

    def __init__(self, d: Path, n_model: int, n_data: int):
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

    def handles(self, model_mode: int = RW, data_mode: int = RW) -> tuple[list, list]:
        return [self._open(p, model_mode) for p in self.model], [self._open(p, data_mode) for p in self.data]

    def empty(self) -> bool:
        return all(os.path.getsize(p) == 0 for p in self.model + self.data)

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []


class Tests:
    def __init__(self, face: Face, t: T, rec: Recorder, root: Path, n_model: int, n_data: int):
        self.face, self.t, self.rec, self.root = face, t, rec, root
        self.n_model, self.n_data = n_model, n_data
        self.net = Net(t)
        self.other = Net(t, seed=7)
        self._k = 0
        self.files: list[Files] = []

    def new_files(self, n_model: Optional[int] = None, n_data: Optional[int] = None) -> Files:
        self._k += 1
        f = Files(self.root / f"{self.t.name}-{self._k}", self.n_model if n_model is None else n_model,
                  self.n_data if n_data is None else n_data)
        self.files.append(f)
        return f

    def save(self, model: hal.Model, mc: list, dc: list, token: bytes = TOKEN) -> tuple[Any, Any]:
        launch, status, prepared = self.face.prepare(model, model_cache=mc, data_cache=dc, token=token)
        if launch != S.NONE:
            return launch, None
        return status, prepared

    def load(self, mc: list, dc: list, token: bytes = TOKEN) -> tuple[Any, Any, str]:
        """(status, prepared model, a rule broken or "")."""
        launch, status, prepared = self.face.prepare_from_cache(None, mc, dc, token)
        if launch != S.NONE and launch != status:
            return status, prepared, f"launch {name(launch)} but callback {name(status)}"
        if (prepared is None) != (status != S.NONE):
            return status, prepared, f"{name(status)} with prepared model {prepared!r}"
        return status, prepared, ""

    def expected(self, net: Net) -> np.ndarray:
        if net.expected is None:
            status, prepared = self.save(net.model, [], [])
            if status != S.NONE:
                raise _Skip(f"the {self.t.name} model did not prepare ({name(status)})")
            status, out = net.run(self.face, prepared)
            if out is None:
                raise _Skip(f"the {self.t.name} model did not run ({name(status)})")
            net.expected = out
        return net.expected

    def saved(self, f: Files, net: Optional[Net] = None, token: bytes = TOKEN) -> None:
        status, prepared = self.save((net or self.net).model, *f.handles(), token=token)
        if status != S.NONE:
            raise AssertionError(f"preparing with the cache gave {name(status)}")

    def test(self, test: str, body: Callable[[Callable[..., None]], None]) -> None:
        start = len(self.rec.cases)

        def check(what: str, expected: str, run: Callable[[], tuple[str, str]]) -> None:
            self.rec.check(test, what, expected, run, model=self.t.name)

        try:
            self.expected(self.net)
            body(check)
        except _Skip as e:
            self.rec.unsupported(test, "", "", str(e), model=self.t.name)
        except Exception as e:  # noqa: BLE001 - a driver that raises (or breaks a set-up rule) fails the test
            self.rec.add(test, "set-up", "", "raised", False, f"{type(e).__name__}: {e}", model=self.t.name)
        if len(self.rec.cases) == start:
            self.rec.add(test, "", "", "", True, model=self.t.name)

    def close(self) -> None:
        for f in self.files:
            f.close()


class _Skip(Exception):
    pass


FAILED = "INVALID_ARGUMENT or GENERAL_FAILURE, no model"


def _fails(got: tuple, allowed: Sequence[S] = (S.INVALID_ARGUMENT, S.GENERAL_FAILURE)) -> tuple[str, str]:
    status, prepared, broken = got
    if broken:
        return name(status), broken
    if status not in allowed or prepared is not None:
        return name(status), f"loading gave {name(status)} (model {prepared is not None})"
    return name(status), ""


def caching_tests(x: Tests) -> None:
    C = "CompilationCachingTest"

    def loads_right(got: tuple, net: Optional[Net] = None) -> tuple[str, str]:
        status, prepared, broken = got
        if broken or status != S.NONE:
            return name(status), broken or f"loading gave {name(status)}"
        st, out = (net or x.net).run(x.face, prepared)
        if out is None or not np.array_equal(out, x.expected(net or x.net)):
            return name(status), f"the loaded model computes other results ({name(st)})"
        return "NONE", ""

    def saving_and_retrieval(check: Callable) -> None:
        f = x.new_files()
        x.saved(f)
        check("save, then load", "NONE and the same results", lambda: loads_right(x.load(*f.handles())))

    def non_zero_offset(check: Callable) -> None:
        f = x.new_files()
        mc, dc = f.handles()
        for h in mc + dc:
            os.write(h.fds[0], bytes(1024))
        status, _ = x.save(x.net.model, mc, dc)
        if status != S.NONE:
            raise AssertionError(f"preparing with the cache gave {name(status)}")
        mc, dc = f.handles()
        for h in mc + dc:
            os.read(h.fds[0], 1)
        check("files 1024 bytes in when saving, 1 byte in when loading", "NONE and the same results",
              lambda: loads_right(x.load(mc, dc)))

    def wrong_counts() -> list[tuple[str, int, int]]:
        out = [(f"{x.n_model + 1} model cache handles", x.n_model + 1, x.n_data),
               (f"{x.n_model - 1} model cache handles", x.n_model - 1, x.n_data)]
        if x.n_data:
            out += [(f"{x.n_data + 1} data cache handles", x.n_model, x.n_data + 1),
                    (f"{x.n_data - 1} data cache handles", x.n_model, x.n_data - 1)]
        else:
            out.append((f"{x.n_data + 1} data cache handles", x.n_model, x.n_data + 1))
        return out

    def save_invalid_num_cache(check: Callable) -> None:
        for what, nm, nd in wrong_counts():
            bad = x.new_files(nm, nd)
            good = x.new_files()

            def run(bad: Files = bad, good: Files = good) -> tuple[str, str]:
                status, prepared = x.save(x.net.model, *bad.handles())
                if status != S.NONE or prepared is None:
                    return name(status), f"saving with the wrong handles gave {name(status)}: it must still prepare"
                _, out = x.net.run(x.face, prepared)
                if out is None or not np.array_equal(out, x.expected(x.net)):
                    return "NONE", "the model prepared with the wrong handles computes other results"
                return _fails(x.load(*good.handles()), (S.GENERAL_FAILURE,))
            check(f"save with {what}, then load with the right ones", "prepared; loading GENERAL_FAILURE", run)

    def load_invalid_num_cache(check: Callable) -> None:
        f = x.new_files()
        x.saved(f)
        for what, nm, nd in wrong_counts():
            mc, dc = f.handles()
            extra = x.new_files(1, 1).handles()
            mc = (mc + extra[0])[:nm]
            dc = (dc + extra[1])[:nd]
            check(f"load with {what}", FAILED, lambda mc=mc, dc=dc: _fails(x.load(mc, dc)))

    def fds_variants(f: Files) -> list[tuple[str, list, list]]:
        spare = x.new_files(1, 1)
        out = []
        for where in ("model", "data"):
            if (x.n_model if where == "model" else x.n_data) == 0:
                continue
            for nfds in (0, 2):
                mc, dc = f.handles()
                handles = mc if where == "model" else dc
                fds = [] if nfds == 0 else [handles[0].fds[0], spare.handles()[0][0].fds[0]]
                handles[0] = hal.Handle(fds=fds)
                out.append((f"{where} cache handle 0 with {nfds} fds", mc, dc))
        return out

    def save_invalid_num_fd(check: Callable) -> None:
        for what, mc, dc in fds_variants(x.new_files()):
            good = x.new_files()

            def run(mc: list = mc, dc: list = dc, good: Files = good) -> tuple[str, str]:
                status, prepared = x.save(x.net.model, mc, dc)
                if status != S.NONE or prepared is None:
                    return name(status), f"saving gave {name(status)}: it must still prepare"
                return _fails(x.load(*good.handles()), (S.GENERAL_FAILURE,))
            check(f"save with the {what}", "prepared; loading GENERAL_FAILURE", run)

    def load_invalid_num_fd(check: Callable) -> None:
        f = x.new_files()
        x.saved(f)
        for what, mc, dc in fds_variants(f):
            check(f"load with the {what}", FAILED, lambda mc=mc, dc=dc: _fails(x.load(mc, dc)))

    def modes() -> list[tuple[str, int, int]]:
        out = [("model", 1, 0)]
        if x.n_data:
            out.append(("data", 0, 1))
        return out

    def save_invalid_access(check: Callable) -> None:
        for where, m, d in modes():
            f = x.new_files()

            def run(f: Files = f, m: int = m, d: int = d) -> tuple[str, str]:
                status, prepared = x.save(x.net.model, *f.handles(RO if m else RW, RO if d else RW))
                if status != S.NONE or prepared is None:
                    return name(status), f"saving gave {name(status)}: it must still prepare"
                return _fails(x.load(*f.handles()), (S.GENERAL_FAILURE,))
            check(f"save with a read-only {where} cache fd", "prepared; loading GENERAL_FAILURE", run)

    def load_invalid_access(check: Callable) -> None:
        f = x.new_files()
        x.saved(f)
        for where, m, d in modes():
            check(f"load with a write-only {where} cache fd", "GENERAL_FAILURE, no model",
                  lambda m=m, d=d: _fails(x.load(*f.handles(WO if m else RW, WO if d else RW)), (S.GENERAL_FAILURE,)))

    def toctou(while_saving: bool) -> Callable:
        def body(check: Callable) -> None:
            f, other = x.new_files(), x.new_files()
            x.saved(other, x.other, token=bytes([TOKEN[0] ^ 1]) + TOKEN[1:])
            x.expected(x.other)
            wrong = [p.read_bytes() for p in other.model + other.data]
            x.saved(f)
            right = [p.read_bytes() for p in f.model + f.data]
            paths = f.model + f.data
            stop = threading.Event()

            def overwrite() -> None:
                k = 0
                while not stop.is_set():
                    for path, data in zip(paths, (right, wrong)[k % 2]):
                        with open(path, "r+b") as fh:  # NOTE: in place: the driver's fds see it
                            fh.truncate(0)
                            fh.write(data)
                    k += 1

            th = threading.Thread(target=overwrite, daemon=True)
            th.start()
            try:
                for k in range(8):
                    if while_saving:
                        x.saved(f)

                    def run() -> tuple[str, str]:
                        status, prepared, broken = x.load(*f.handles())
                        if broken:
                            return name(status), broken
                        if status == S.NONE:
                            return loads_right((status, prepared, ""))
                        return _fails((status, prepared, ""), (S.GENERAL_FAILURE,))
                    check(f"load {k} while another thread rewrites the files", "the right model or GENERAL_FAILURE",
                          run)
            finally:
                stop.set()
                th.join(10)
        return body

    def replace_sensitive(check: Callable) -> None:
        f, other = x.new_files(), x.new_files()
        x.saved(f)
        x.saved(other, x.other)
        for a, b in zip(f.model, other.model):
            a.write_bytes(b.read_bytes())
        check("model cache replaced by another model's", "GENERAL_FAILURE, no model",
              lambda: _fails(x.load(*f.handles()), (S.GENERAL_FAILURE,)))

    for test, body in (("CacheSavingAndRetrieval", saving_and_retrieval),
                       ("CacheSavingAndRetrievalNonZeroOffset", non_zero_offset),
                       ("SaveToCacheInvalidNumCache", save_invalid_num_cache),
                       ("PrepareModelFromCacheInvalidNumCache", load_invalid_num_cache),
                       ("SaveToCacheInvalidNumFd", save_invalid_num_fd),
                       ("PrepareModelFromCacheInvalidNumFd", load_invalid_num_fd),
                       ("SaveToCacheInvalidAccessMode", save_invalid_access),
                       ("PrepareModelFromCacheInvalidAccessMode", load_invalid_access),
                       ("SaveToCache_TOCTOU", toctou(True)), ("PrepareFromCache_TOCTOU", toctou(False)),
                       ("ReplaceSecuritySensitiveCache", replace_sensitive)):
        if test.endswith("NumFd") and not x.face.cache_handles_hold_fds:
            continue  # NOTE: an AIDL cache file is one ParcelFileDescriptor: the AIDL VTS has no such test
        x.test(f"{C}.{test}", body)


def security_tests(x: Tests) -> None:
    C = "CompilationCachingSecurityTest"

    def flip(path: Path, rng: random.Random) -> str:
        data = bytearray(path.read_bytes())
        if not data:
            return "empty file"
        pos, bit = rng.randrange(len(data)), rng.randrange(8)
        data[pos] ^= 1 << bit
        path.write_bytes(bytes(data))
        return f"byte {pos} bit {bit}"

    def corrupted_model(check: Callable) -> None:
        for seed in SECURITY_SEEDS:
            f = x.new_files()
            x.saved(f)
            where = flip(f.model[seed % len(f.model)], random.Random(seed))
            check(f"seed {seed}: model cache {where} flipped", "GENERAL_FAILURE, no model",
                  lambda f=f: _fails(x.load(*f.handles()), (S.GENERAL_FAILURE,)))

    def wrong_length_model(check: Callable) -> None:
        for seed in SECURITY_SEEDS:
            f = x.new_files()
            x.saved(f)
            extra = random.Random(seed).randrange(1, 64)
            with open(f.model[seed % len(f.model)], "ab") as fh:
                fh.write(bytes(extra))
            check(f"seed {seed}: {extra} bytes appended to the model cache", "GENERAL_FAILURE, no model",
                  lambda f=f: _fails(x.load(*f.handles()), (S.GENERAL_FAILURE,)))

    def data_cache(change: str) -> Callable:
        def body(check: Callable) -> None:
            if not x.n_data:
                raise _Skip("the driver keeps no data cache")
            for seed in SECURITY_SEEDS:
                f = x.new_files()
                x.saved(f)
                path = f.data[seed % len(f.data)]
                if change == "flip":
                    where = flip(path, random.Random(seed)) + " flipped"
                else:
                    extra = random.Random(seed).randrange(1, 64)
                    with open(path, "ab") as fh:
                        fh.write(bytes(extra))
                    where = f"{extra} bytes appended"

                def run(f: Files = f) -> tuple[str, str]:
                    status, prepared, broken = x.load(*f.handles())
                    if broken:
                        return name(status), broken
                    if status == S.NONE:
                        _, out = x.net.run(x.face, prepared)
                        if out is None or not np.array_equal(out, x.expected(x.net)):
                            return "NONE", "a model loaded from a corrupted data cache computes other results"
                    return name(status), ""
                check(f"seed {seed}: data cache {where}", "no crash; a model exactly when NONE", run)
        return body

    def wrong_token(check: Callable) -> None:
        for seed in SECURITY_SEEDS:
            f = x.new_files()
            x.saved(f)
            rng = random.Random(seed)
            token = bytearray(TOKEN)
            byte, bit = rng.randrange(32), rng.randrange(8)
            token[byte] ^= 1 << bit
            check(f"seed {seed}: token byte {byte} bit {bit} flipped", "GENERAL_FAILURE, no model",
                  lambda f=f, token=bytes(token): _fails(x.load(*f.handles(), token=token), (S.GENERAL_FAILURE,)))

    for test, body in (("CorruptedModelCache", corrupted_model), ("WrongLengthModelCache", wrong_length_model),
                       ("CorruptedDataCache", data_cache("flip")), ("WrongLengthDataCache", data_cache("append")),
                       ("WrongToken", wrong_token)):
        x.test(f"{C}.{test}", body)


def run(device: Any, types: Sequence[T] = tuple(TYPES)) -> list[Case]:
    face = as_face(device)
    rec = Recorder(SECTION)
    status, n_model, n_data = face.cache_files()
    if status != S.NONE or n_model > 32 or n_data > 32:
        rec.add("CompilationCachingTest.getNumberOfCacheFilesNeeded", "", "NONE, at most 32 files each",
                name(status), False, f"{name(status)}, {n_model} model and {n_data} data cache files")
        return rec.cases
    if n_model == 0 and n_data == 0:
        def not_cached() -> tuple[str, str]:
            _, st, pm = face.prepare_from_cache(None, [], [], TOKEN)
            return name(st), "" if st == S.GENERAL_FAILURE and pm is None else f"gave {name(st)}"
        rec.check("CompilationCachingTest.CacheNotSupported", f"prepareModelFromCache{face.method_suffix}",
                  "GENERAL_FAILURE", not_cached)
        rec.unsupported("CompilationCachingTest", "", "", "the driver does not cache (0 model and 0 data files)")
        return rec.cases
    with tempfile.TemporaryDirectory(prefix="nnhal-vts-cache-") as d:
        for t in types:
            x = Tests(face, t, rec, Path(d), n_model, n_data)
            try:
                caching_tests(x)
                security_tests(x)
            finally:
                x.close()
    return rec.cases
