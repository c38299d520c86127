"""Helpers for the driver interface tests: small hand-built models, requests
over shared-memory pools, preparing and running through the public HAL API."""

from __future__ import annotations

import struct
import time
from typing import Any, Callable, Optional, Sequence

import numpy as np

import nnhal
from nnhal import hal
from nnhal.conformance import vectors
from nnhal.conformance.runner import RequestPools
from tests.conftest import vectors_root

S = hal.ErrorStatus
T = hal.OperandType
L = hal.OperandLifeTime
OT = hal.OperationType

NO_TIMING = hal.Timing(timeOnDevice=hal.UINT64_MAX, timeInDriver=hal.UINT64_MAX)
WAIT_S = 30.0


def device() -> Any:
    return nnhal.get_device("sample-all")


# --------------------------------------------------------------------------
# models


def tensor(t: T, dims: Sequence[int], lifetime: L = L.TEMPORARY_VARIABLE, consumers: int = 0,
           scale: float = 0.0, zp: int = 0, loc: Optional[hal.DataLocation] = None) -> hal.Operand:
    return hal.Operand(type=t, dimensions=list(dims), numberOfConsumers=consumers, scale=scale, zeroPoint=zp,
                       lifetime=lifetime, location=loc or hal.DataLocation())


class Builder:
    """Builds one subgraph; constants go to a shared operandValues buffer."""

    def __init__(self, values: Optional[bytearray] = None):
        self.operands: list[hal.Operand] = []
        self.operations: list[hal.Operation] = []
        self.inputs: list[int] = []
        self.outputs: list[int] = []
        self.values = values if values is not None else bytearray()

    def operand(self, t: T, dims: Sequence[int] = (), lifetime: L = L.TEMPORARY_VARIABLE, **kw: Any) -> int:
        self.operands.append(tensor(t, dims, lifetime, **kw))
        return len(self.operands) - 1

    def input(self, t: T, dims: Sequence[int], **kw: Any) -> int:
        i = self.operand(t, dims, L.SUBGRAPH_INPUT, **kw)
        self.inputs.append(i)
        return i

    def output(self, t: T, dims: Sequence[int], **kw: Any) -> int:
        i = self.operand(t, dims, L.SUBGRAPH_OUTPUT, **kw)
        self.outputs.append(i)
        return i

    def const(self, t: T, value: Any, dims: Sequence[int] = ()) -> int:
        raw = np.ascontiguousarray(value).tobytes() if not isinstance(value, bytes) else value
        off = (len(self.values) + 7) // 8 * 8
        self.values.extend(b"\0" * (off - len(self.values)))
        self.values.extend(raw)
        return self.operand(t, dims, L.CONSTANT_COPY, loc=hal.DataLocation(0, off, len(raw)))

    def i32(self, v: int) -> int:
        return self.const(T.INT32, struct.pack("<i", v))

    def f32(self, v: float) -> int:
        return self.const(T.FLOAT32, struct.pack("<f", v))

    def subgraph_ref(self, k: int) -> int:
        return self.operand(T.SUBGRAPH, (), L.SUBGRAPH, loc=hal.DataLocation(0, k, 0))

    def op(self, type_: OT, ins: Sequence[int], outs: Sequence[int]) -> None:
        self.operations.append(hal.Operation(type_, list(ins), list(outs)))

    def subgraph(self) -> hal.Subgraph:
        ops = self.operations
        for o in self.operands:
            o.numberOfConsumers = 0
        for op in ops:
            for i in op.inputs:
                self.operands[i].numberOfConsumers += 1
        return hal.Subgraph(operands=self.operands, operations=ops, inputIndexes=list(self.inputs),
                            outputIndexes=list(self.outputs))


def make_model(main: Builder, *referenced: Builder, relaxed: bool = False) -> hal.Model:
    return hal.Model(main=main.subgraph(), referenced=[r.subgraph() for r in referenced],
                     operandValues=bytes(main.values), relaxComputationFloat32toFloat16=relaxed)


def add_model(dims: Sequence[int] = (2, 2), out_dims: Optional[Sequence[int]] = None,
              t: T = T.TENSOR_FLOAT32) -> hal.Model:
    """out = a + b (float32 ADD, no activation)."""
    b = Builder()
    a, c = b.input(t, dims), b.input(t, dims)
    act = b.i32(0)
    out = b.output(t, dims if out_dims is None else out_dims)
    b.op(OT.ADD, [a, c, act], [out])
    return make_model(b)


def add_model_v1_0(dims: Sequence[int] = (2, 2)) -> Any:
    """The same ADD as a HAL 1.0 model (flat operands, MODEL_INPUT/OUTPUT)."""
    v0 = hal.v1_0
    ops = [
        v0.Operand(type=v0.OperandType.TENSOR_FLOAT32, dimensions=list(dims), numberOfConsumers=1,
                   lifetime=v0.OperandLifeTime.MODEL_INPUT),
        v0.Operand(type=v0.OperandType.TENSOR_FLOAT32, dimensions=list(dims), numberOfConsumers=1,
                   lifetime=v0.OperandLifeTime.MODEL_INPUT),
        v0.Operand(type=v0.OperandType.INT32, numberOfConsumers=1, lifetime=v0.OperandLifeTime.CONSTANT_COPY,
                   location=hal.DataLocation(0, 0, 4)),
        v0.Operand(type=v0.OperandType.TENSOR_FLOAT32, dimensions=list(dims), numberOfConsumers=0,
                   lifetime=v0.OperandLifeTime.MODEL_OUTPUT),
    ]
    return v0.Model(operands=ops, operations=[v0.Operation(v0.OperationType.ADD, [0, 1, 2], [3])],
                    inputIndexes=[0, 1], outputIndexes=[3], operandValues=struct.pack("<i", 0), pools=[])


# --------------------------------------------------------------------------
# conformance models


_CACHE: dict[str, list] = {}


def vector_models(rel: str) -> list[vectors.VectorModel]:
    """The models of one vector file (``V1_3/while_infinite_loop``)."""
    if rel not in _CACHE:
        _CACHE[rel] = vectors.load_file(vectors_root() / f"{rel}.json.gz")
    return _CACHE[rel]


def vector_model(rel: str, name: Optional[str] = None) -> vectors.VectorModel:
    for m in vector_models(rel):
        if name is None or m.name == name:
            return m
    raise KeyError(name)


# --------------------------------------------------------------------------
# preparing


def prepare(model: Any, dev: Any = None, priority: hal.Priority = hal.Priority.MEDIUM,
            deadline: Optional[hal.OptionalTimePoint] = None,
            preference: hal.ExecutionPreference = hal.ExecutionPreference.FAST_SINGLE_ANSWER) -> tuple:
    """(launch status, callback status, prepared model) of prepareModel_1_3."""
    dev = dev or device()
    cb = CountingPreparedCallback()
    launch = dev.prepareModel_1_3(model, preference, priority, deadline or hal.OptionalTimePoint(), [], [],
                                  bytes(32), cb)
    status, prepared = cb.wait(WAIT_S)
    # the rules everywhere: notified exactly once, through notify_1_3; a failed launch with the same status
    assert [c[0] for c in cb.calls] == ["notify_1_3"], cb.calls
    assert launch == S.NONE or launch == status, (launch, status)
    assert (prepared is None) == (status != S.NONE), (status, prepared)
    return launch, status, prepared


def prepared_model(model: Any, dev: Any = None) -> Any:
    launch, status, prepared = prepare(model, dev)
    assert launch == S.NONE and status == S.NONE and prepared is not None, (launch, status)
    return prepared


# --------------------------------------------------------------------------
# requests


class Pools(RequestPools):
    """The conformance runner's request layout, plus the 1.0 form of the request."""

    def request_v1_0(self) -> Any:
        return hal.v1_0.Request(inputs=self.in_args, outputs=self.out_args, pools=[self.in_mem, self.out_mem])


def vector_pools(vm: vectors.VectorModel, short: int = 0, **kw: Any) -> Pools:
    """Pools for a conformance model's request (output 0 ``short`` bytes short)."""
    sizes = []
    for o in vm.output_operands():
        dt = np.dtype(vectors.DTYPES[_dtype_name(o)]) if o.data is not None else np.dtype(np.float32)
        n = int(np.prod(o.dimensions)) if o.dimensions else 1
        sizes.append(max(n * dt.itemsize, 1))
    sizes[0] -= short
    return Pools(vm.input_values(), sizes, **kw)


def _dtype_name(o: vectors.VectorOperand) -> str:
    return {np.dtype(v): k for k, v in vectors.DTYPES.items()}[o.data.dtype]


def execute_async(prepared: Any, request: Any, measure: hal.MeasureTiming = hal.MeasureTiming.NO,
                  deadline: Optional[hal.OptionalTimePoint] = None,
                  loop_timeout: Optional[hal.OptionalTimeoutDuration] = None) -> tuple:
    """(launch, status, shapes, timing) of execute_1_3."""
    cb = CountingExecutionCallback()
    launch = prepared.execute_1_3(request, measure, deadline or hal.OptionalTimePoint(),
                                  loop_timeout or hal.OptionalTimeoutDuration(), cb)
    status, shapes, timing = cb.wait(WAIT_S)
    _check_result(status, shapes, timing, measure)
    assert [c[0] for c in cb.calls] == ["notify_1_3"], cb.calls
    assert launch == S.NONE or launch == status, (launch, status)
    return launch, status, shapes, timing


def _check_result(status: Any, shapes: list, timing: hal.Timing, measure: Any) -> None:
    """The rules everywhere: shapes only with NONE / OUTPUT_INSUFFICIENT_SIZE,
    timing only when measured and NONE, and then timeOnDevice <= timeInDriver."""
    if status not in (S.NONE, S.OUTPUT_INSUFFICIENT_SIZE):
        assert shapes == [], (status, shapes)
    if status == S.OUTPUT_INSUFFICIENT_SIZE:
        assert shapes and not all(s.isSufficient for s in shapes), shapes
    if status != S.NONE or measure != hal.MeasureTiming.YES:
        assert timing == NO_TIMING, (status, timing)
    elif timing.timeOnDevice != hal.UINT64_MAX and timing.timeInDriver != hal.UINT64_MAX:
        assert timing.timeOnDevice <= timing.timeInDriver, timing


def execute_sync(prepared: Any, request: Any, measure: hal.MeasureTiming = hal.MeasureTiming.NO,
                 deadline: Optional[hal.OptionalTimePoint] = None,
                 loop_timeout: Optional[hal.OptionalTimeoutDuration] = None) -> tuple:
    result = prepared.executeSynchronously_1_3(request, measure, deadline or hal.OptionalTimePoint(),
                                               loop_timeout or hal.OptionalTimeoutDuration())
    _check_result(*result, measure)
    return result


class CountingPreparedCallback(hal.PreparedModelCallback):
    """Counts every notify call (the ready callback ignores repeats)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple] = []

    def notify(self, status: Any, preparedModel: Any) -> None:
        self.calls.append(("notify", status))
        super().notify(status, preparedModel)

    def notify_1_2(self, status: Any, preparedModel: Any) -> None:
        self.calls.append(("notify_1_2", status))
        super().notify_1_2(status, preparedModel)

    def notify_1_3(self, status: Any, preparedModel: Any) -> None:
        self.calls.append(("notify_1_3", status))
        super().notify_1_3(status, preparedModel)


class CountingExecutionCallback(hal.ExecutionCallback):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple] = []

    def notify(self, status: Any) -> None:
        self.calls.append(("notify", status))
        super().notify(status)

    def notify_1_2(self, status: Any, outputShapes: list, timing: Any) -> None:
        self.calls.append(("notify_1_2", status))
        super().notify_1_2(status, outputShapes, timing)

    def notify_1_3(self, status: Any, outputShapes: list, timing: Any) -> None:
        self.calls.append(("notify_1_3", status))
        super().notify_1_3(status, outputShapes, timing)


def ms_from_now(ms: float) -> hal.OptionalTimePoint:
    import time

    return hal.OptionalTimePoint(nanosecondsSinceEpoch=time.monotonic_ns() + int(ms * 1e6))


INT64_MAX = 2**63 - 1


def ipc_pools() -> Any:
    """The one-ADD request of ``nnhal.tools.ipcbench`` (inputs 0..7, output [4, 6, 8, 10]) on
    fresh memories: a context manager that frees them."""
    import contextlib

    from nnhal.tools import ipcbench

    @contextlib.contextmanager
    def made() -> Any:
        p = ipcbench.Pools()
        try:
            yield p
        finally:
            p.close()

    return made()


def sync_status(pm: Any, req: hal.Request) -> hal.ErrorStatus:
    """The status of ``executeSynchronously_1_3(req)`` without timing, deadline or loop timeout."""
    return pm.executeSynchronously_1_3(req, hal.MeasureTiming.NO, None, None)[0]


def float_output(memory_: hal.Memory) -> np.ndarray:
    """A memory's bytes as float32."""
    from nnhal import memory

    return np.frombuffer(bytes(memory.map(memory_)), np.float32)



def wait_until(cond: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Whether ``cond()`` holds within ``timeout`` seconds (asked every 5 ms, and once more at the end)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.005)
    return cond()
