"""Fuzzing the surfaces a hostile client reaches (issue 17).

    python -m nnhal.tools.fuzz_driver SURFACE [--minutes N | --seconds N] [--seed S] [--json FILE]

Surfaces (``SURFACES``; another module adds its own with :func:`register`):

* ``cache``: compilation cache files given to ``prepareModelFromCache_1_3``:
  the files of a saved model mutated byte-wise (the tag must refuse them),
  and payloads mutated as msgpack trees and *signed again with the driver's
  key* (what authentication cannot catch: the schema and the loader must),
  with the data cache mutated and re-bound; a loaded model is executed.
* ``wire``: frames to a running ``nnhal serve``: valid calls of every kind
  (with descriptors) mutated as bytes, as msgpack trees, in their descriptor
  count and header; on the main connection and on call channels.
* ``burst``: request packets on a burst configured through a running service,
  mutated datum- and byte-wise, and a burst callback answering garbage.
* ``hal``: HAL models (mutated msgpack trees of a few seed models) through
  ``getSupportedOperations_1_3`` / ``prepareModel_1_3``, and mutated requests
  through ``executeSynchronously_1_3``, ``execute_1_3`` and ``executeFenced``.

Checks (each violation is a *finding*, with the input's description): a HAL
method never raises and returns a status its spec names for it; a callback
is notified exactly once; no exception is logged as a driver bug (the HAL
guard's "raised (a driver bug)"); the service answers every call that names
a call id, or closes the connection; after each batch its descriptor and
thread counts come back to their baseline and it still computes a correct
result.  Every run is seeded (same seed, same inputs), bounded in time (the
deadline is checked between inputs, every execution has a deadline and a
short loop timeout) and in memory (the address space of this process is
limited while it runs; services get the same limit).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import copy
import json
import logging
import os
import random
import resource
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import msgspec
import numpy as np

from nnhal import hal

S = hal.ErrorStatus
T = hal.OperandType
L = hal.OperandLifeTime
OT = hal.OperationType

MAX_FINDINGS = 50
MEMORY_BUDGET_MB = 3072  # NOTE: address space allowed beyond what the process uses when a run starts
CALL_TIMEOUT_S = 30.0


# --------------------------------------------------------------------------
# the report


@dataclass
class Report:
    surface: str
    seed: int
    inputs: int = 0
    seconds: float = 0.0
    outcomes: collections.Counter = field(default_factory=collections.Counter)
    findings: list[str] = field(default_factory=list)
    finding_count: int = 0

    def finding(self, what: str) -> None:
        self.finding_count += 1
        if len(self.findings) < MAX_FINDINGS:
            self.findings.append(what)

    def outcome(self, what: str) -> None:
        self.outcomes[what] += 1

    def as_dict(self) -> dict:
        return {"surface": self.surface, "seed": self.seed, "inputs": self.inputs, "seconds": round(self.seconds, 1),
                "findings": self.finding_count, "finding_examples": self.findings,
                "outcomes": dict(self.outcomes.most_common())}

    def summary(self) -> str:
        top = ", ".join(f"{k} {v}" for k, v in self.outcomes.most_common(12))
        return (f"{self.surface}: {self.inputs} inputs in {self.seconds:.0f} s (seed {self.seed}), "
                f"{self.finding_count} findings; outcomes: {top}")


# (rng, monotonic end time, report): tries inputs until the end time
Surface = Callable[[random.Random, float, Report], None]
SURFACES: dict[str, Surface] = {}


def register(name: str) -> Callable[[Surface], Surface]:
    """Decorator: a fuzz surface (``fn(rng, end, report)``) runnable by name."""

    def add(fn: Surface) -> Surface:
        SURFACES[name] = fn
        return fn

    return add


@contextlib.contextmanager
def memory_limit(budget_mb: Optional[int] = MEMORY_BUDGET_MB) -> Iterator[None]:
    """Limits this process's address space to what it uses now plus
    ``budget_mb`` (the old limit is put back after)."""
    if not budget_mb:
        yield
        return
    old = resource.getrlimit(resource.RLIMIT_AS)
    try:
        vm_kb = next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
                     if line.startswith("VmSize:"))
        limit = vm_kb * 1024 + budget_mb * (1 << 20)
        if old[1] != resource.RLIM_INFINITY:
            limit = min(limit, old[1])
        resource.setrlimit(resource.RLIMIT_AS, (limit, old[1]))
    except (OSError, ValueError, StopIteration):
        pass
    try:
        yield
    finally:
        with contextlib.suppress(OSError, ValueError):
            resource.setrlimit(resource.RLIMIT_AS, old)


class _BugLog(logging.Handler):
    """Collects the log records that say a driver bug was caught (the HAL
    guard's and the service's tracebacks)."""

    MARKS = ("raised (a driver bug)", "failed unexpectedly", "the driver raised", "failed in the service",
             "the server thread failed", "reader failed", "call channel failed")

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if any(m in msg for m in self.MARKS):
            exc = record.exc_info[1] if record.exc_info else None
            self.records.append(f"{msg} ({type(exc).__name__}: {exc})" if exc else msg)

    def take(self) -> list[str]:
        out, self.records = self.records, []
        return out


_ACTIVE: list[_BugLog] = []


def _bug_log() -> Optional[_BugLog]:
    return _ACTIVE[-1] if _ACTIVE else None


def run(surface: str, seconds: float, seed: int = 0, memory_mb: Optional[int] = MEMORY_BUDGET_MB) -> Report:
    """Fuzz ``surface`` for ``seconds``; the report of what was tried and found."""
    fn = SURFACES[surface]
    report = Report(surface, seed)
    rng = random.Random(f"{surface}:{seed}")
    logger = logging.getLogger("nnhal")
    level, propagate = logger.level, logger.propagate
    bugs = _BugLog()
    logger.addHandler(bugs)
    _ACTIVE.append(bugs)
    logger.setLevel(logging.ERROR)
    logger.propagate = False  # NOTE: thousands of expected rejections: not printed
    t0 = time.monotonic()
    try:
        with memory_limit(memory_mb), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # NOTE: numpy's overflow / invalid-value warnings on random data
            fn(rng, t0 + seconds, report)
    finally:
        logger.removeHandler(bugs)
        _ACTIVE.remove(bugs)
        logger.setLevel(level)
        logger.propagate = propagate
        report.seconds = time.monotonic() - t0
    for b in bugs.take():
        report.finding(f"driver bug logged: {b}")
    return report


# --------------------------------------------------------------------------
# mutators

_INTERESTING = (0, 1, 2, 3, 4, 7, 8, 16, 31, 32, 33, 63, 64, 65, 100, 127, 128, 255, 256, 1000, 4096, 65535,
                65536, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, -1, -2, -128, -(2**31))
_INTERESTING_BYTES = (0x00, 0x01, 0x7F, 0x80, 0xFF, 0xC0, 0xC1, 0xC2, 0xDC, 0xDD, 0xDE, 0xDF, 0x90, 0x9F, 0xA0,
                      0xBF, 0xC4, 0xD9, 0xCE, 0xCF)


def mutate_bytes(rng: random.Random, data: bytes, max_len: int = 1 << 16) -> bytes:
    """A few random edits of ``data`` (bit flips, interesting bytes and
    integers, insertions, deletions, duplications, truncation)."""
    b = bytearray(data)
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 5, 8))):
        op = rng.randrange(9)
        n = len(b)
        if op == 0 and n:
            b[rng.randrange(n)] ^= 1 << rng.randrange(8)
        elif op == 1 and n:
            b[rng.randrange(n)] = rng.randrange(256)
        elif op == 2 and n:
            b[rng.randrange(n)] = rng.choice(_INTERESTING_BYTES)
        elif op == 3:
            k = rng.randrange(n + 1)
            b[k:k] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif op == 4 and n:
            k = rng.randrange(n)
            del b[k:k + rng.randint(1, 16)]
        elif op == 5 and n:
            k = rng.randrange(n)
            b[k:k] = b[k:k + rng.randint(1, 32)]
        elif op == 6 and n >= 8:
            k = rng.randrange(n - 7)
            v = rng.choice(_INTERESTING) & 0xFFFFFFFFFFFFFFFF
            size, order = rng.choice(((1, "little"), (2, "little"), (4, "little"), (8, "little"), (2, "big"),
                                      (4, "big"), (8, "big")))
            b[k:k + size] = (v & ((1 << (8 * size)) - 1)).to_bytes(size, order)
        elif op == 7 and n:
            del b[rng.randrange(n):]
        elif op == 8 and n >= 2:
            i, j = rng.randrange(n), rng.randrange(n)
            b[i:i] = b[j:j + rng.randint(1, 16)]
    return bytes(b[:max_len])


def _new_value(rng: random.Random, old: Any, depth: int = 0) -> Any:
    r = rng.random()
    if isinstance(old, bool) or r < 0.08:
        return rng.choice((True, False, None, 0, 1))
    if isinstance(old, int) and r < 0.7:
        return rng.choice((old + 1, old - 1, rng.choice(_INTERESTING), rng.randrange(48), old ^ (1 << rng.randrange(32))))
    if isinstance(old, float) and r < 0.7:
        return rng.choice((0.0, -0.0, 1.0, -1.0, 1e-45, 3.4e38, 1e300, float("nan"), float("inf"), old * 2))
    if isinstance(old, str) and r < 0.7:
        return rng.choice(("", old + "x", old[:-1], "\u00e9" * 3, "a" * 300, str(rng.randrange(100))))
    if isinstance(old, bytes) and r < 0.7:
        return mutate_bytes(rng, old, 4096)
    if isinstance(old, list) and r < 0.7 and depth < 3:
        return _mutate_list(rng, old, depth)
    return rng.choice((0, -1, 2**32, "", b"", [], {}, None, 1.5, [0] * rng.randrange(70), {"x": 1}))


def _mutate_list(rng: random.Random, lst: list, depth: int = 0) -> list:
    out = list(lst)
    op = rng.randrange(6)
    if op == 0 and out:
        del out[rng.randrange(len(out))]
    elif op == 1 and out:
        out.insert(rng.randrange(len(out) + 1), copy.deepcopy(rng.choice(out)))
    elif op == 2 and out:
        rng.shuffle(out)
    elif op == 3:
        out = [rng.choice((0, 1, 2, 4)) for _ in range(rng.choice((0, 1, 4, 5, 32, 33, 65, 104)))]
    elif op == 4 and out:
        k = rng.randrange(len(out))
        out[k] = _new_value(rng, out[k], depth + 1)
    else:
        out.append(_new_value(rng, out[-1] if out else 0, depth + 1))
    return out


def _nodes(tree: Any, path: tuple = (), out: Optional[list] = None) -> list:
    out = [] if out is None else out
    out.append(path)
    if isinstance(tree, dict):
        for k, v in tree.items():
            _nodes(v, path + (k,), out)
    elif isinstance(tree, list):
        for k, v in enumerate(tree):
            _nodes(v, path + (k,), out)
    return out


def mutate_tree(rng: random.Random, tree: Any, edits: int = 0) -> Any:
    """A copy of a msgpack-able tree (dicts, lists, scalars) with a few
    random edits at random nodes (values replaced by near or odd ones, lists
    grown, shrunk, shuffled, dict keys dropped or added)."""
    tree = copy.deepcopy(tree)
    for _ in range(edits or rng.choice((1, 1, 1, 2, 3, 6))):
        paths = _nodes(tree)
        path = rng.choice(paths)
        if not path:
            continue
        parent = tree
        for k in path[:-1]:
            parent = parent[k]
        key = path[-1]
        old = parent[key]
        if isinstance(parent, dict) and rng.random() < 0.1:
            del parent[key]
            continue
        parent[key] = _mutate_list(rng, old) if isinstance(old, list) and rng.random() < 0.6 else _new_value(rng, old)
    return tree


# --------------------------------------------------------------------------
# seed models


def _operand(t: T, dims: list, life: L = L.TEMPORARY_VARIABLE, loc: Optional[hal.DataLocation] = None,
             scale: float = 0.0, zp: int = 0) -> hal.Operand:
    return hal.Operand(type=t, dimensions=list(dims), numberOfConsumers=0, scale=scale, zeroPoint=zp, lifetime=life,
                       location=loc or hal.DataLocation())


class _SG:
    """A subgraph builder over a shared operandValues buffer."""

    def __init__(self, values: bytearray):
        self.values = values
        self.operands: list[hal.Operand] = []
        self.ops: list[hal.Operation] = []
        self.ins: list[int] = []
        self.outs: list[int] = []

    def add(self, o: hal.Operand) -> int:
        self.operands.append(o)
        return len(self.operands) - 1

    def inp(self, t: T, dims: list, **kw: Any) -> int:
        i = self.add(_operand(t, dims, L.SUBGRAPH_INPUT, **kw))
        self.ins.append(i)
        return i

    def out(self, t: T, dims: list, **kw: Any) -> int:
        i = self.add(_operand(t, dims, L.SUBGRAPH_OUTPUT, **kw))
        self.outs.append(i)
        return i

    def tmp(self, t: T, dims: list, **kw: Any) -> int:
        return self.add(_operand(t, dims, **kw))

    def const(self, t: T, arr: Any, dims: list, **kw: Any) -> int:
        raw = np.ascontiguousarray(arr).tobytes()
        off = (len(self.values) + 7) // 8 * 8
        self.values.extend(b"\0" * (off - len(self.values)) + raw)
        return self.add(_operand(t, dims, L.CONSTANT_COPY, hal.DataLocation(0, off, len(raw)), **kw))

    def i32(self, v: int) -> int:
        return self.const(T.INT32, np.int32(v), [])

    def ref(self, k: int) -> int:
        return self.add(_operand(T.SUBGRAPH, [], L.SUBGRAPH, hal.DataLocation(0, k, 0)))

    def op(self, t: OT, ins: list, outs: list) -> None:
        self.ops.append(hal.Operation(t, list(ins), list(outs)))

    def subgraph(self) -> hal.Subgraph:
        for o in self.operands:
            o.numberOfConsumers = 0
        for op in self.ops:
            for i in op.inputs:
                self.operands[i].numberOfConsumers += 1
        return hal.Subgraph(self.operands, self.ops, self.ins, self.outs)


def seed_models() -> list[hal.Model]:
    """A few small valid models covering common structures: ADD, a float
    CONV_2D chain, a quantized FULLY_CONNECTED, IF and WHILE."""
    F32, Q8 = T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM
    models = []
    v = bytearray()
    m = _SG(v)
    a, b = m.inp(F32, [2, 2]), m.inp(F32, [2, 2])
    o = m.out(F32, [2, 2])
    m.op(OT.ADD, [a, b, m.i32(0)], [o])
    models.append(hal.Model(main=m.subgraph(), operandValues=bytes(v)))

    v = bytearray()
    m = _SG(v)
    x = m.inp(F32, [1, 4, 4, 2])
    w = m.const(F32, np.arange(24, dtype=np.float32) / 24, [3, 2, 2, 2])
    bias = m.const(F32, np.ones(3, np.float32), [3])
    t = m.tmp(F32, [1, 3, 3, 3])
    m.op(OT.CONV_2D, [x, w, bias, m.i32(0), m.i32(0), m.i32(0), m.i32(0), m.i32(1), m.i32(1), m.i32(1)], [t])
    r = m.tmp(F32, [1, 3, 3, 3])
    m.op(OT.RELU, [t], [r])
    o = m.out(F32, [1, 27])
    m.op(OT.RESHAPE, [r, m.const(T.TENSOR_INT32, np.array([1, 27], np.int32), [2])], [o])
    models.append(hal.Model(main=m.subgraph(), operandValues=bytes(v)))

    v = bytearray()
    m = _SG(v)
    x = m.inp(Q8, [2, 3], scale=0.5, zp=128)
    w = m.const(Q8, np.arange(12, dtype=np.uint8) + 120, [4, 3], scale=0.25, zp=128)
    bias = m.const(T.TENSOR_INT32, np.arange(4, dtype=np.int32), [4], scale=0.125)
    o = m.out(Q8, [2, 4], scale=1.0, zp=100)
    m.op(OT.FULLY_CONNECTED, [x, w, bias, m.i32(1)], [o])
    models.append(hal.Model(main=m.subgraph(), operandValues=bytes(v)))

    # IF: then adds, else multiplies
    v = bytearray()
    m, then_, else_ = _SG(v), _SG(v), _SG(v)
    for sg, op in ((then_, OT.ADD), (else_, OT.MUL)):
        p, q = sg.inp(F32, [2]), sg.inp(F32, [2])
        r = sg.out(F32, [2])
        sg.op(op, [p, q, sg.i32(0)], [r])
    c, a, b = m.inp(T.TENSOR_BOOL8, [1]), m.inp(F32, [2]), m.inp(F32, [2])
    o = m.out(F32, [2])
    m.op(OT.IF, [c, m.ref(0), m.ref(1), a, b], [o])
    models.append(hal.Model(main=m.subgraph(), referenced=[then_.subgraph(), else_.subgraph()], operandValues=bytes(v)))

    # WHILE: x += 1 while x < limit
    v = bytearray()
    m, cond, body = _SG(v), _SG(v), _SG(v)
    cx, cl = cond.inp(F32, [1]), cond.inp(F32, [1])
    co = cond.out(T.TENSOR_BOOL8, [1])
    cond.op(OT.LESS, [cx, cl], [co])
    bx, _ = body.inp(F32, [1]), body.inp(F32, [1])
    bo = body.out(F32, [1])
    body.op(OT.ADD, [bx, body.const(F32, np.ones(1, np.float32), [1]), body.i32(0)], [bo])
    x, lim = m.inp(F32, [1]), m.inp(F32, [1])
    o = m.out(F32, [1])
    m.op(OT.WHILE, [m.ref(0), m.ref(1), x, lim], [o])
    models.append(hal.Model(main=m.subgraph(), referenced=[cond.subgraph(), body.subgraph()], operandValues=bytes(v)))
    return models


def _dtype(t: int) -> np.dtype:
    from nnhal.ops.base import NUMPY_DTYPE

    return NUMPY_DTYPE.get(t, np.dtype(np.uint8))


class _Pools:
    """One shared-memory pool holding a model's inputs (random values) and room for its outputs."""

    def __init__(self, model: hal.Model, rng: random.Random):
        from nnhal.platform import memory

        main = model.main
        self.args_in, self.args_out = [], []
        chunks = []
        off = 0
        for i in main.inputIndexes:
            o = main.operands[i]
            dt = _dtype(o.type)
            n = int(np.prod(o.dimensions)) * dt.itemsize if o.dimensions else dt.itemsize
            chunks.append((off, bytes(rng.randrange(256) for _ in range(n))))
            self.args_in.append(hal.RequestArgument(False, hal.DataLocation(0, off, n), []))
            off += (n + 7) // 8 * 8
        for i in main.outputIndexes:
            o = main.operands[i]
            dt = _dtype(o.type)
            n = int(np.prod(o.dimensions)) * dt.itemsize if o.dimensions else dt.itemsize
            self.args_out.append(hal.RequestArgument(False, hal.DataLocation(0, off, n), []))
            off += (n + 7) // 8 * 8
        self.mem = memory.allocate(max(off, 8))
        view = memory.map(self.mem)
        for o, data in chunks:
            view[o:o + len(data)] = data
        del view

    def request(self) -> hal.Request:
        return hal.Request(inputs=copy.deepcopy(self.args_in), outputs=copy.deepcopy(self.args_out),
                           pools=[hal.MemoryPool(hidlMemory=self.mem)])

    def close(self) -> None:
        from nnhal.platform import memory

        memory.free(self.mem)


# --------------------------------------------------------------------------
# statuses the spec names per method

_LAUNCH = {S.NONE, S.DEVICE_UNAVAILABLE, S.GENERAL_FAILURE, S.INVALID_ARGUMENT, S.MISSED_DEADLINE_TRANSIENT,
           S.MISSED_DEADLINE_PERSISTENT, S.RESOURCE_EXHAUSTED_TRANSIENT, S.RESOURCE_EXHAUSTED_PERSISTENT}
_EXEC = _LAUNCH | {S.OUTPUT_INSUFFICIENT_SIZE}
_SUPPORTED = {S.NONE, S.DEVICE_UNAVAILABLE, S.GENERAL_FAILURE, S.INVALID_ARGUMENT}


def _status(x: Any) -> Optional[S]:
    try:
        return S(x) if type(x) is not bool else None
    except (ValueError, TypeError):
        return None


class _Watch:
    """Fails a call that does not return within CALL_TIMEOUT_S (a hang is a
    finding; the harness cannot interrupt it, so it says which input): one
    watchdog thread per run, looking at the call under way."""

    def __init__(self, report: Report):
        self.report = report
        self._current: Optional[tuple[str, float]] = None
        self._stop = threading.Event()
        threading.Thread(target=self._watch, daemon=True, name="nnhal-fuzz-watch").start()

    def _watch(self) -> None:
        reported = None
        while not self._stop.wait(1.0):
            cur = self._current
            if cur is not None and cur is not reported and time.monotonic() - cur[1] > CALL_TIMEOUT_S:
                reported = cur
                self.report.finding(f"hang: {cur[0]} did not return within {CALL_TIMEOUT_S:.0f} s")

    def stop(self) -> None:
        self._stop.set()

    @contextlib.contextmanager
    def __call__(self, what: str) -> Iterator[None]:
        outer = self._current
        self._current = (what, time.monotonic())
        try:
            yield
        finally:
            self._current = outer


def _call(report: Report, what: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - the finding
        report.finding(f"{what} raised {type(e).__name__}: {e}")
        return None


# --------------------------------------------------------------------------
# surface: HAL models and requests (in process)


def _model_tree(model: hal.Model) -> Any:
    return msgspec.to_builtins(model, builtin_types=(bytes,))


def _as_model(rng: random.Random, tree: Any, seed: hal.Model) -> Any:
    try:
        return msgspec.convert(tree, hal.Model, strict=False)
    except (msgspec.ValidationError, TypeError, ValueError, RecursionError):
        # NOTE: ill-typed: the in-process driver is also given odd Python objects
        m = copy.deepcopy(seed)
        target = rng.choice([m, m.main, *(m.main.operands or [m.main]), *(m.main.operations or [m.main])])
        names = [f for f in getattr(target, "__dataclass_fields__", {})]
        if names:
            setattr(target, rng.choice(names), _new_value(rng, 0))
        return m


def _prepare(dev: Any, model: Any, report: Report, watch: _Watch) -> Optional[Any]:
    cb = hal.PreparedModelCallback()
    calls: list = []
    orig = cb.notify_1_3

    def notify_1_3(status: Any, pm: Any) -> None:
        calls.append(status)
        orig(status, pm)

    cb.notify_1_3 = notify_1_3  # type: ignore[method-assign]
    with watch("prepareModel_1_3"):
        launch = _call(report, "prepareModel_1_3", lambda: dev.prepareModel_1_3(
            model, hal.ExecutionPreference.FAST_SINGLE_ANSWER, hal.Priority.MEDIUM,
            hal.OptionalTimePoint(time.monotonic_ns() + 5_000_000_000), [], [], bytes(32), cb))
        if launch is None:
            return None
        try:
            status, pm = cb.wait(CALL_TIMEOUT_S)
        except TimeoutError:
            report.finding("prepareModel_1_3: callback never notified")
            return None
    ls = _status(launch)
    if ls not in _LAUNCH:
        report.finding(f"prepareModel_1_3 returned {launch!r}")
    if ls not in (S.NONE, None) and ls != status:
        report.finding(f"prepareModel_1_3 launched {launch!r} but notified {status!r}")
    if len(calls) != 1:
        report.finding(f"prepareModel_1_3 notified {len(calls)} times")
    report.outcome(f"prepare {S(status).name}")
    return pm if status == S.NONE else None


def _mutate_request(rng: random.Random, req: hal.Request) -> Any:
    r = rng.random()
    if r < 0.15:
        return req
    if r < 0.85:
        tree = msgspec.to_builtins(req, builtin_types=(bytes,), enc_hook=lambda x: None)
        tree = mutate_tree(rng, tree)
        try:
            out = msgspec.convert(tree, hal.Request, strict=False)
        except (msgspec.ValidationError, TypeError, ValueError):
            return rng.choice((None, "junk", hal.Request(), tree))
        # NOTE: the memory's descriptors were placeholders in the tree: the real memory back, or a junk one
        for k, p in enumerate(out.pools):
            if k < len(req.pools) and p.hidlMemory is not None and rng.random() < 0.8:
                p.hidlMemory = req.pools[k].hidlMemory
        return out
    # an odd pool: a pipe, a closed descriptor, a too-small memory
    out = copy.copy(req)
    out.pools = [hal.MemoryPool(hidlMemory=hal.Memory(rng.choice(("ashmem", "mmap_fd", "hardware_buffer_blob",
                                                                   "junk")),
                                                      hal.Handle(fds=[rng.choice((0, 1, 2, 999, -1))]),
                                                      rng.choice((0, 8, 1 << 40))))]
    return out


_DEADLINE_NS = 1_000_000_000  # NOTE: every execution ends within a second
_LOOP = hal.OptionalTimeoutDuration(nanoseconds=20_000_000)


def _execute(report: Report, pm: Any, req: Any, mode: str, watch: _Watch) -> None:
    from nnhal.platform import fence

    dl = hal.OptionalTimePoint(time.monotonic_ns() + _DEADLINE_NS)
    with watch(f"{mode} execution of {str(req)[:300]}"):
        if mode == "sync":
            res = _call(report, "executeSynchronously_1_3",
                        lambda: pm.executeSynchronously_1_3(req, hal.MeasureTiming.YES, dl, _LOOP))
            if res is None:
                return
            st = _status(res[0]) if isinstance(res, tuple) and len(res) == 3 else None
            if st not in _EXEC:
                report.finding(f"executeSynchronously_1_3 returned {res!r:.200}")
                return
            report.outcome(f"sync {st.name}")
        elif mode == "async":
            cb = hal.ExecutionCallback()
            launch = _call(report, "execute_1_3", lambda: pm.execute_1_3(req, hal.MeasureTiming.NO, dl, _LOOP, cb))
            if launch is None:
                return
            try:
                st = cb.wait(CALL_TIMEOUT_S)[0]
            except TimeoutError:
                report.finding("execute_1_3: callback never notified")
                return
            if _status(launch) not in _LAUNCH or (launch != S.NONE and launch != st) or st not in _EXEC:
                report.finding(f"execute_1_3 launched {launch!r}, notified {st!r}")
            report.outcome(f"async {S(st).name}")
        else:
            res = _call(report, "executeFenced",
                        lambda: pm.executeFenced(req, [], hal.MeasureTiming.NO, dl, _LOOP, hal.OptionalTimeoutDuration()))
            if res is None:
                return
            st = _status(res[0]) if isinstance(res, tuple) and len(res) == 3 else None
            if st not in _LAUNCH:
                report.finding(f"executeFenced returned {res!r:.200}")
                return
            if st == S.NONE:
                sync, info = res[1], res[2]
                if sync is not None and not fence.is_null(sync):
                    fence.sync_wait(sync, CALL_TIMEOUT_S)
                    fence.close(sync)
                final = _status(info.getExecutionInfo()[0]) if info is not None else None
                if final not in _EXEC:
                    report.finding(f"executeFenced: getExecutionInfo gave {final!r}")
                report.outcome(f"fenced NONE -> {final.name if final is not None else None}")
            else:
                if res[1] is not None or res[2] is not None:
                    report.finding(f"executeFenced failed with {st.name} but returned a fence or callback")
                report.outcome(f"fenced {st.name}")


@register("hal")
def fuzz_hal(rng: random.Random, end: float, report: Report) -> None:
    import nnhal

    dev = nnhal.get_device("sample-all")
    watch = _Watch(report)
    seeds = seed_models()
    trees = [_model_tree(m) for m in seeds]
    prepared = []
    for m in seeds:
        pm = _prepare(dev, m, report, watch)
        if pm is None:
            report.finding("a seed model does not prepare")
            continue
        prepared.append((m, pm, _Pools(m, rng)))
    try:
        while time.monotonic() < end:
            report.inputs += 1
            if rng.random() < 0.45:
                # a mutated model: supported operations, then preparation
                k = rng.randrange(len(seeds))
                model = _as_model(rng, mutate_tree(rng, trees[k]), seeds[k])
                with watch("getSupportedOperations_1_3"):
                    res = _call(report, "getSupportedOperations_1_3", lambda m=model: dev.getSupportedOperations_1_3(m))
                if res is None:
                    continue
                st = _status(res[0]) if isinstance(res, tuple) and len(res) == 2 else None
                if st not in _SUPPORTED:
                    report.finding(f"getSupportedOperations_1_3 returned {res!r:.200}")
                    continue
                report.outcome(f"supported {st.name}")
                if st == S.NONE:
                    n = len(model.main.operations)
                    if len(res[1]) != n:
                        report.finding(f"getSupportedOperations_1_3: {len(res[1])} flags for {n} operations")
                    if all(res[1]) and _small(model):
                        pm = _prepare(dev, model, report, watch)
                        if pm is not None:
                            pools = _Pools(model, rng)
                            try:
                                for _ in range(2):
                                    _execute(report, pm, _mutate_request(rng, pools.request()),
                                             rng.choice(("sync", "async", "fenced")), watch)
                            finally:
                                pools.close()
            else:
                model, pm, pools = rng.choice(prepared)
                _execute(report, pm, _mutate_request(rng, pools.request()), rng.choice(("sync", "async", "fenced")),
                         watch)
    finally:
        for _, _, p in prepared:
            p.close()


def _small(model: Any, limit: int = 16 << 20) -> bool:
    """Whether every operand of a model is small enough to execute within the harness's memory bound."""
    try:
        for sg in [model.main, *model.referenced]:
            for o in sg.operands:
                if int(np.prod([max(int(d), 1) for d in o.dimensions], dtype=np.float64)) * 8 > limit:
                    return False
        return True
    except Exception:  # noqa: BLE001
        return False


# --------------------------------------------------------------------------
# surface: compilation cache files


@register("cache")
def fuzz_cache(rng: random.Random, end: float, report: Report) -> None:
    from nnhal.driver import cache as dc
    from nnhal.drivers.sample import sample_device

    watch = _Watch(report)
    with tempfile.TemporaryDirectory(prefix="nnhal-fuzz-cache-") as d:
        key_dir = Path(d) / "key"
        key_dir.mkdir(mode=0o700)
        dev = sample_device("fuzz-cache", cache_key_dir=str(key_dir))
        key = dev.cache_key()
        version = dev.getVersionString()[1]
        token = bytes(range(32))
        mpath, dpath = Path(d) / "model", Path(d) / "data"
        originals = []
        for m in seed_models():
            mpath.write_bytes(b"")
            dpath.write_bytes(b"")
            mfd, dfd = os.open(mpath, os.O_RDWR), os.open(dpath, os.O_RDWR)
            try:
                cb = hal.PreparedModelCallback()
                dev.prepareModel_1_3(m, 0, hal.Priority.MEDIUM, None, [hal.Handle(fds=[mfd])],
                                     [hal.Handle(fds=[dfd])], token, cb)
                cb.wait(CALL_TIMEOUT_S)
            finally:
                os.close(mfd)
                os.close(dfd)
            originals.append((m, mpath.read_bytes(), dpath.read_bytes()))
        hsize = struct.calcsize("<8sIIQ")
        while time.monotonic() < end:
            report.inputs += 1
            model, mbytes, dbytes = rng.choice(originals)
            mode = rng.random()
            if mode < 0.25:
                # byte mutations of either file: authentication must refuse them
                if rng.random() < 0.6:
                    mbytes = mutate_bytes(rng, mbytes, 1 << 20)
                else:
                    dbytes = mutate_bytes(rng, dbytes, 1 << 20)
                kind = "raw"
            else:
                # authentic but malformed: the payload mutated as a tree and signed again with the key,
                # the data cache mutated and re-bound by its hash
                payload = mbytes[hsize:-32]
                tree = msgspec.msgpack.decode(payload)
                if rng.random() < 0.4:
                    dbytes = mutate_bytes(rng, dbytes, 1 << 20)
                    tree["data_size"] = len(dbytes)
                    tree["data_sha256"] = dc.data_digest(dbytes)
                if mode < 0.9 or rng.random() < 0.5:
                    tree = mutate_tree(rng, tree)
                payload = msgspec.msgpack.encode(tree) if mode < 0.95 else mutate_bytes(rng, payload, 1 << 20)
                header = struct.pack("<8sIIQ", dc.MAGIC, dc.FORMAT_VERSION, 0, len(payload))
                mbytes = header + payload + dc.mac(key, version, token, header, payload)
                kind = "signed"
            mpath.write_bytes(mbytes)
            dpath.write_bytes(dbytes)
            mfd, dfd = os.open(mpath, os.O_RDONLY), os.open(dpath, os.O_RDONLY)
            try:
                cb = hal.PreparedModelCallback()
                with watch(f"prepareModelFromCache_1_3 ({kind})"):
                    launch = _call(report, "prepareModelFromCache_1_3", lambda m=mfd, d=dfd, c=cb:
                                   dev.prepareModelFromCache_1_3(None, [hal.Handle(fds=[m])], [hal.Handle(fds=[d])],
                                                                 token, c))
                    if launch is None:
                        continue
                    try:
                        status, pm = cb.wait(CALL_TIMEOUT_S)
                    except TimeoutError:
                        report.finding("prepareModelFromCache_1_3: callback never notified")
                        continue
            finally:
                os.close(mfd)
                os.close(dfd)
            if status not in (S.NONE, S.GENERAL_FAILURE) or (launch != S.NONE and launch != status):
                report.finding(f"prepareModelFromCache_1_3 ({kind}): launch {launch!r}, notified {status!r}")
            if kind == "raw" and status == S.NONE and (mbytes, dbytes) not in [(o[1], o[2]) for o in originals]:
                report.finding("a cache modified without the key was loaded")
            report.outcome(f"{kind} {S(status).name}")
            if pm is not None and _small(pm.model):
                try:
                    pools = _Pools(pm.model, rng)
                except Exception:  # noqa: BLE001 - an authentic but corrupt model: no request can be made for it
                    report.outcome("signed NONE, no request possible")
                    continue
                try:
                    if kind == "signed":
                        # NOTE: a cache only the key's holder can write: what a model corrupted so is run
                        # into (a driver bug caught at the HAL boundary) is counted, not a finding
                        bugs = _bug_log()
                        before = len(bugs.records) if bugs is not None else 0
                    _execute(report, pm, pools.request(), rng.choice(("sync", "fenced")), watch)
                    if kind == "signed" and bugs is not None and len(bugs.records) > before:
                        del bugs.records[before:]
                        report.outcome("signed NONE, execution hit a caught driver error")
                finally:
                    pools.close()


# --------------------------------------------------------------------------
# a service to fuzz


class _Service:
    """``nnhal serve`` in a private runtime directory, under the same memory limit."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="nnhal-fuzz-svc-"))
        os.chmod(self.dir, 0o700)
        self.name = f"fuzz-{uuid.uuid4().hex[:8]}"
        env = dict(os.environ, NNHAL_RUNTIME_DIR=str(self.dir))
        limit = MEMORY_BUDGET_MB * (1 << 20) + (1 << 30)

        def cap() -> None:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

        self.proc = subprocess.Popen([sys.executable, "-m", "nnhal", "serve", "--name", self.name], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=cap)
        self._err: list[bytes] = []
        threading.Thread(target=self._drain, daemon=True).start()
        self.path = self.dir / f"{self.name}.sock"
        end = time.monotonic() + 60
        while not self.path.exists():
            if self.proc.poll() is not None or time.monotonic() > end:
                self.stop()
                raise RuntimeError("the fuzz service did not start")
            time.sleep(0.02)
        self.device = self._connect()

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if len(self._err) < 10000:
                self._err.append(line)

    def bug_lines(self) -> list[str]:
        """Lines of the service's log that report a caught driver bug (a traceback's first line)."""
        out = []
        for line in self._err:
            text = line.decode(errors="replace").strip()
            if any(m in text for m in _BugLog.MARKS):
                out.append(text)
        self._err = []
        return out

    def _connect(self) -> Any:
        import nnhal

        return nnhal.connect(self.name, runtime_dir=self.dir)

    def counts(self) -> tuple[int, int]:
        fds = len(os.listdir(f"/proc/{self.proc.pid}/fd"))
        threads = int(next(line.split()[1] for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines()
                           if line.startswith("Threads:")))
        return fds, threads

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.device.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        import shutil

        shutil.rmtree(self.dir, ignore_errors=True)


def _serving(svc: _Service, report: Report, rng: random.Random) -> bool:
    """A correct ADD through the service's proxy."""
    import nnhal.platform.memory as memory

    model = seed_models()[0]
    cb = hal.PreparedModelCallback()
    if svc.device.prepareModel_1_3(model, 0, hal.Priority.MEDIUM, None, [], [], bytes(32), cb) != S.NONE:
        report.finding("the service no longer prepares a valid model")
        return False
    status, pm = cb.wait(CALL_TIMEOUT_S)
    pools = _Pools(model, rng)
    try:
        if status != S.NONE or pm.executeSynchronously_1_3(pools.request(), 0, None, None)[0] != S.NONE:
            report.finding("the service no longer executes a valid request")
            return False
        # NOTE: a fenced execution too (its first one creates the fence watcher's eventfd, once per process)
        st, sync, _info = pm.executeFenced(pools.request(), [], 0, None, None, None)
        if st != S.NONE:
            report.finding(f"the service no longer runs a valid fenced execution: {st!r}")
            return False
        if sync is not None:
            from nnhal.platform import fence

            fence.sync_wait(sync, CALL_TIMEOUT_S)
            fence.close(sync)
        view = memory.map(pools.mem)
        a = np.frombuffer(bytes(view[0:16]), np.float32)
        b = np.frombuffer(bytes(view[16:32]), np.float32)
        c = np.frombuffer(bytes(view[32:48]), np.float32)
        del view
        if not np.array_equal(a + b, c, equal_nan=True):
            report.finding("the service computed a wrong ADD")
            return False
    finally:
        pools.close()
        del pm
    return True


def _check_service(svc: _Service, base: tuple[int, int], report: Report, rng: random.Random, what: str) -> None:
    if not svc.alive():
        report.finding(f"the service died ({what}): exit {svc.proc.returncode}")
        raise RuntimeError("service died")
    svc.device.getStatus()  # NOTE: the proxy sends the releases of dropped objects with its next call
    end = time.monotonic() + 10
    fds, threads = svc.counts()
    while (fds > base[0] or threads > base[1] + 4) and time.monotonic() < end:
        time.sleep(0.05)
        fds, threads = svc.counts()
    if fds > base[0]:
        kinds = collections.Counter()
        for name in os.listdir(f"/proc/{svc.proc.pid}/fd"):
            with contextlib.suppress(OSError):
                kinds[os.readlink(f"/proc/{svc.proc.pid}/fd/{name}").split(":")[0].split("/")[-1][:20]] += 1
        report.finding(f"descriptor leak in the service ({what}): {fds} open, {base[0]} at the start "
                       f"({dict(kinds)})")
    if threads > base[1] + 4:
        report.finding(f"thread leak in the service ({what}): {threads}, {base[1]} at the start")
    _serving(svc, report, rng)
    for line in svc.bug_lines():
        report.finding(f"service logged a driver bug ({what}): {line[:300]}")


# --------------------------------------------------------------------------
# surface: wire frames


class _Raw:
    """A raw connection (the main one, or a call channel joining a session)."""

    def __init__(self, path: Path, session: Optional[bytes] = None):
        from nnhal.service import wire
        from nnhal.service.transport import Channel

        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(str(path))
        self.sock.settimeout(CALL_TIMEOUT_S)
        self.chan = Channel(self.sock)
        self.chan.send(wire.ENCODER.encode(wire.Hello() if session is None else wire.Attach(session)), [])
        body, fds = self.chan.recv()
        _close(fds)
        self.hello = wire.ENVELOPE.decode(body)

    def close(self) -> None:
        self.chan.close()


def _close(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _junk_fds(rng: random.Random) -> list[int]:
    out = []
    for _ in range(rng.choice((0, 0, 1, 1, 2, 3, 5))):
        kind = rng.randrange(4)
        if kind == 0:
            fd = os.memfd_create("fuzz", os.MFD_CLOEXEC)
            os.ftruncate(fd, rng.choice((0, 8, 64, 4096)))
            out.append(fd)
        elif kind == 1:
            r, w = os.pipe()
            out.append(r)
            os.close(w)
        elif kind == 2:
            out.append(os.open(os.devnull, os.O_RDONLY))
        else:
            a, b = socket.socketpair()
            out.append(a.detach())
            b.close()
    return out


def _wire_corpus(model: hal.Model, pm_ref: Optional[bytes], mem: hal.Memory) -> list[tuple[Any, int]]:
    """(envelope as a builtin tree, descriptors it needs) of valid messages."""
    from nnhal.service import wire

    def tree(env: Any) -> Any:
        return msgspec.msgpack.decode(wire.ENCODER.encode(env))

    m = msgspec.to_builtins(model, builtin_types=(bytes,))
    a = hal.RequestArgument(False, hal.DataLocation(0, 0, 16), [])
    o = hal.RequestArgument(False, hal.DataLocation(0, 32, 16), [])
    req = hal.Request([a, copy.deepcopy(a)], [o], [hal.MemoryPool(hidlMemory=hal.Memory("ashmem", hal.Handle([0]),
                                                                                       mem.size))])
    out: list[tuple[Any, int]] = [
        (tree(wire.CallOut(1, b"", "getStatus", [])), 0),
        (tree(wire.CallOut(2, b"", "getCapabilities_1_3", [])), 0),
        (tree(wire.CallOut(3, b"", "getSupportedOperations_1_3", [m])), 0),
        (tree(wire.CallOut(4, b"", "prepareModel_1_3", [m, 0, 1, None, [], [], bytes(32), b"cb"])), 0),
        (tree(wire.CallOut(5, b"", "prepareModel_1_2", [m, 0, b"cb2"])), 0),
        (tree(wire.CallOut(6, b"", "allocate", [{"dimensions": [2, 2]}, [pm_ref], [{"modelIndex": 0, "ioIndex": 0,
                                                                                  "frequency": 1.0}], []])), 0),
        (tree(wire.Release([b"x" * 16])), 0),
        (tree(wire.ReplyOut(99, None)), 0),
        (tree(wire.Fail(98, 1, "x")), 0),
    ]
    if pm_ref is not None:
        out += [
            (tree(wire.CallOut(7, pm_ref, "executeSynchronously_1_3", [req, 0, None, None])), 1),
            (tree(wire.CallOut(8, pm_ref, "execute_1_3", [req, 0, None, None, b"ecb"])), 1),
            (tree(wire.CallOut(9, pm_ref, "executeFenced", [req, [], 0, None, None, None])), 1),
            (tree(wire.CallOut(10, pm_ref, "executeSynchronously_1_3", [req, 0, None, None], [1], [])), 1),
        ]
    return out


def _pm_ref(raw: _Raw, model: hal.Model) -> Optional[bytes]:
    """Prepares ``model`` on a raw connection: the prepared model's ref."""
    from nnhal.service import wire

    m = msgspec.to_builtins(model, builtin_types=(bytes,))
    raw.chan.send(wire.ENCODER.encode(wire.CallOut(1, b"", "prepareModel_1_3",
                                                   [m, 0, 1, None, [], [], bytes(32), b"setup"])), [])
    ref = None
    got_reply = False
    while ref is None or not got_reply:
        body, fds = raw.chan.recv()
        _close(fds)
        env = wire.ENVELOPE.decode(body)
        if type(env) is wire.Call and env.method == "notify_1_3":
            ref = msgspec.msgpack.decode(env.args)[1]
        elif type(env) is wire.Reply:
            got_reply = True
    return ref


def _answers(raw: _Raw, cids: set, report: Report, what: str) -> bool:
    """Reads until every call id in ``cids`` is answered (Reply / Fail with a
    valid status) or the service closes the connection; False when closed."""
    from nnhal.service import wire
    from nnhal.service.transport import PeerClosed, ProtocolError

    raw.sock.settimeout(CALL_TIMEOUT_S)
    try:
        while cids:
            body, fds = raw.chan.recv()
            _close(fds)
            env = wire.ENVELOPE.decode(body)
            if type(env) is wire.Fail:
                if _status(env.status) is None:
                    report.finding(f"{what}: Fail with status {env.status}")
                cids.discard(env.cid)
            elif type(env) is wire.Reply:
                cids.discard(env.cid)
            elif type(env) is wire.Call and env.cid:
                # NOTE: a call from the service (a burst callback's getMemories): refused
                raw.chan.send(wire.ENCODER.encode(wire.Fail(env.cid, int(S.INVALID_ARGUMENT), "fuzz")), [])
        return True
    except (PeerClosed, ProtocolError, ConnectionError):
        return False
    except TimeoutError:
        report.finding(f"{what}: no answer for calls {sorted(cids)} within {CALL_TIMEOUT_S:.0f} s, connection open")
        return False


def _call_id(body: bytes) -> int:
    """The call id the service answers under: the decoded call's, else what it can peek of a malformed one."""
    from nnhal.service import server, wire

    try:
        env = wire.ENVELOPE.decode(body)
    except Exception:  # noqa: BLE001
        return server.peek_call_id(body)
    return env.cid if type(env) is wire.Call and env.cid > 0 else 0


CHECK_EVERY = int(os.environ.get("NNHAL_FUZZ_CHECK_EVERY", "300"))


@register("wire")
def fuzz_wire(rng: random.Random, end: float, report: Report) -> None:
    from nnhal.platform import memory
    from nnhal.service import wire

    svc = _Service()
    mem = memory.allocate(64)
    try:
        model = seed_models()[0]
        _serving(svc, report, rng)
        time.sleep(0.2)
        base = svc.counts()
        batch = 0
        main: Optional[_Raw] = None
        corpus: list = []
        while time.monotonic() < end:
            if main is None:
                main = _Raw(svc.path)
                corpus = _wire_corpus(model, _pm_ref(main, model), mem)
            report.inputs += 1
            batch += 1
            env, nfds = rng.choice(corpus)
            target = main
            side = None
            if rng.random() < 0.3:
                try:
                    side = _Raw(svc.path, main.hello.session)  # a call channel of this session
                except Exception:  # noqa: BLE001 - refused: the session ended (its main connection was closed)
                    main.close()
                    main = None
                    report.outcome("session gone")
                    continue
                if type(side.hello).__name__ != "Reply":
                    report.finding(f"a call channel of a live session was refused: {side.hello!r}")
                target = side
            fds = [memory.dup(mem).handle.fds[0] for _ in range(nfds)]
            r = rng.random()
            if r < 0.4:
                body = msgspec.msgpack.encode(mutate_tree(rng, env))
            elif r < 0.8:
                body = mutate_bytes(rng, msgspec.msgpack.encode(env))
            else:
                body = msgspec.msgpack.encode(env)
            if rng.random() < 0.3:
                _close(fds)
                fds = _junk_fds(rng)
            cid = _call_id(body)
            try:
                if rng.random() < 0.05:
                    # a broken header: over the limits, or fewer descriptors than announced
                    target.sock.sendall(struct.pack("<II", rng.choice((len(body), 1 << 30)), rng.choice((0, 7, 200)))
                                        + body)
                    open_ = _answers(target, set(), report, "broken header")
                else:
                    target.chan.send(body, fds)
                    open_ = _answers(target, {cid} if cid > 0 else set(), report, f"frame {body[:80]!r}")
                if open_ and rng.random() < 0.2:
                    # still serving on this channel after the frame
                    target.chan.send(wire.ENCODER.encode(wire.CallOut(77, b"", "getStatus", [])), [])
                    _answers(target, {77}, report, "getStatus after a fuzzed frame")
            except (OSError, Exception) as e:  # noqa: BLE001 - the service closing on us mid-send
                open_ = False
                if not isinstance(e, OSError) and type(e).__name__ not in ("PeerClosed", "ProtocolError"):
                    report.finding(f"wire harness: {type(e).__name__}: {e}")
            finally:
                _close(fds)
            report.outcome("answered" if open_ else "closed")
            if CHECK_EVERY == 1:
                report.outcome(f"input {report.inputs}: {body[:150]!r} fds {len(fds)}")
            if side is not None:
                side.close()
                if not open_:
                    pass
            elif not open_:
                main.close()
                main = None
            if batch >= CHECK_EVERY:
                batch = 0
                if main is not None:
                    main.close()
                    main = None
                _check_service(svc, base, report, rng, f"after input {report.inputs}")
        if main is not None:
            main.close()
        _check_service(svc, base, report, rng, "at the end")
    finally:
        memory.free(mem)
        svc.stop()


# --------------------------------------------------------------------------
# surface: burst packets


@register("burst")
def fuzz_burst(rng: random.Random, end: float, report: Report) -> None:
    from nnhal.platform import burst_packets as bp
    from nnhal.platform.fmq import MessageQueue

    svc = _Service()
    try:
        model = seed_models()[0]
        _serving(svc, report, rng)
        time.sleep(0.2)
        base = svc.counts()
        while time.monotonic() < end:
            cb = hal.PreparedModelCallback()
            svc.device.prepareModel_1_3(model, 0, hal.Priority.MEDIUM, None, [], [], bytes(32), cb)
            status, pm = cb.wait(CALL_TIMEOUT_S)
            pools = _Pools(model, rng)
            memories = {0: pools.mem}
            behaviour = {"mode": "good"}

            class Memories(hal.IBurstCallback):
                def getMemories(self, slots: list, behaviour: dict = behaviour, memories: dict = memories) -> tuple:
                    mode = behaviour["mode"]
                    if mode == "raise":
                        raise RuntimeError("fuzz")
                    if mode == "garbage":
                        return rng.choice(((S.NONE, [None]), (S.NONE, []), ("junk",), (S.GENERAL_FAILURE, []),
                                           (S.NONE, [hal.Memory("ashmem", hal.Handle([0]), 64)] * len(slots))))
                    try:
                        return S.NONE, [memories[s] for s in slots]
                    except KeyError:
                        return S.INVALID_ARGUMENT, []

            requests = MessageQueue.create(bp.DATUM_SIZE, 256, "writer")
            results = MessageQueue.create(bp.DATUM_SIZE, 256, "reader")
            try:
                st, ctx = pm.configureExecutionBurst(Memories(), requests.descriptor(), results.descriptor())
                if st != S.NONE:
                    report.finding(f"configureExecutionBurst: {st!r}")
                    break
                requests.release_descriptor()
                results.release_descriptor()
                req = pools.request()
                good = bp.encode_request(req.inputs, req.outputs, [0], 0)
                for _ in range(200):
                    if time.monotonic() >= end:
                        break
                    report.inputs += 1
                    behaviour["mode"] = rng.choice(("good", "good", "good", "garbage", "raise"))
                    if rng.random() < 0.05:
                        ctx.freeMemory(rng.choice((0, 1, -1, 2**31 - 1)))
                    datums = [good[k:k + bp.DATUM_SIZE] for k in range(0, len(good), bp.DATUM_SIZE)]
                    r = rng.random()
                    if r < 0.5:
                        packet = mutate_bytes(rng, good, 200 * bp.DATUM_SIZE)
                    else:
                        for _ in range(rng.randint(1, 4)):
                            k = rng.randrange(len(datums))
                            op = rng.randrange(4)
                            if op == 0 and len(datums) > 1:
                                del datums[k]
                            elif op == 1:
                                datums.insert(k, rng.choice(datums))
                            elif op == 2:
                                datums[k] = mutate_bytes(rng, datums[k], bp.DATUM_SIZE)
                            else:
                                datums[k] = bytes(rng.randrange(256) for _ in range(bp.DATUM_SIZE))
                        packet = b"".join(datums)
                    packet += b"\0" * ((-len(packet)) % bp.DATUM_SIZE)
                    if not packet or len(packet) // bp.DATUM_SIZE > requests.capacity:
                        packet = good
                    try:
                        requests.write_blocking(packet, CALL_TIMEOUT_S)
                        out = results.read_packet_blocking(CALL_TIMEOUT_S)
                        res = bp.decode_result(out)
                    except Exception as e:  # noqa: BLE001
                        report.finding(f"burst: no valid result for packet {packet.hex()[:200]}: "
                                       f"{type(e).__name__}: {e}")
                        break
                    if _status(res[0]) not in _EXEC:
                        report.finding(f"burst: result status {res[0]!r}")
                    report.outcome(f"burst {S(res[0]).name}" if _status(res[0]) is not None else "burst ?")
                behaviour["mode"] = "good"
                requests.write_blocking(good, CALL_TIMEOUT_S)
                if bp.decode_result(results.read_packet_blocking(CALL_TIMEOUT_S))[0] != S.NONE:
                    report.finding("burst: a good packet failed after the fuzzed ones")
                ctx.close()
            finally:
                requests.close()
                results.close()
                pools.close()
                del pm
            _check_service(svc, base, report, rng, f"after input {report.inputs}")
    finally:
        svc.stop()


# --------------------------------------------------------------------------
# the command


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nnhal.tools.fuzz_driver", description=__doc__.split("\n\n")[0])
    ap.add_argument("surface", choices=sorted(SURFACES) + ["all"])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--minutes", type=float, help="how long per surface")
    g.add_argument("--seconds", type=float, help="how long per surface (default 30)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="write the reports here")
    ap.add_argument("--memory-mb", type=int, default=MEMORY_BUDGET_MB,
                    help="address space allowed beyond what the process uses at the start (0: no limit)")
    args = ap.parse_args(argv)
    seconds = args.minutes * 60 if args.minutes is not None else args.seconds if args.seconds is not None else 30.0
    surfaces = sorted(SURFACES) if args.surface == "all" else [args.surface]
    reports = []
    for s in surfaces:
        r = run(s, seconds, args.seed, args.memory_mb or None)
        reports.append(r)
        print(r.summary(), flush=True)
        for f in r.findings:
            print(f"  finding: {f}", flush=True)
    if args.json:
        args.json.write_text(json.dumps([r.as_dict() for r in reports], indent=1))
    return 1 if any(r.finding_count for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
