"""The in-process driver against a hostile client (issue 7, section 0).

Deep and exponentially-branching control-flow graphs, pools shrunk under the
driver's feet (SIGBUS), arguments changed after the call returned (HIDL's
by-value semantics) and fenced executions that must not block the caller.
Each test here failed before the driver was hardened.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np
import pytest

from nnhal import hal
from nnhal.engine.validation import subgraph_depths
from tests.driver_util import (
    OT,
    Builder,
    Pools,
    S,
    T,
    device,
    execute_sync,
    make_model,
    prepare,
    prepared_model,
)

F32 = T.TENSOR_FLOAT32
BOOL8 = T.TENSOR_BOOL8


# --------------------------------------------------------------------------
# deep and branching control flow


def _plus_one(b: Builder, x: int, out: int) -> None:
    one = b.const(F32, np.ones(1, np.float32), (1,))
    b.op(OT.ADD, [x, one, b.i32(0)], [out])


def if_chain(depth: int, two_refs: bool = False) -> hal.Model:
    """``main`` and referenced subgraphs 0 .. depth-1: each level runs IF(cond,
    next, next) and adds 1; the last one only adds 1.  Result: x + depth + 1.
    ``two_refs``: then and else are two SUBGRAPH operands naming the same next
    subgraph (a DAG with 2**depth paths)."""
    main = Builder()
    levels = [main] + [Builder(main.values) for _ in range(depth)]
    for k, b in enumerate(levels):
        cond, x = b.input(BOOL8, (1,)), b.input(F32, (1,))
        out = b.output(F32, (1,))
        if k == depth:
            _plus_one(b, x, out)
            continue
        then = b.subgraph_ref(k)  # levels[k + 1] is referenced subgraph k
        other = b.subgraph_ref(k) if two_refs else then
        t = b.operand(F32, (1,))
        b.op(OT.IF, [cond, then, other, cond, x], [t])
        _plus_one(b, t, out)
    return make_model(main, *levels[1:])


def while_chain(depth: int) -> hal.Model:
    """WHILE nested ``depth`` deep: referenced 0 is the condition x < 1; body k
    (referenced k + 1) runs WHILE(cond, body k + 1, x) and adds 1, the last
    body only adds 1.  From x = 0 each loop turns once: the result is depth."""
    main = Builder()
    cond = Builder(main.values)
    cx = cond.input(F32, (1,))
    c_out = cond.output(BOOL8, (1,))
    cond.op(OT.LESS, [cx, cond.const(F32, np.ones(1, np.float32), (1,))], [c_out])
    bodies = [Builder(main.values) for _ in range(depth)]
    for k, b in enumerate([main] + bodies):
        x = b.input(F32, (1,))
        out = b.output(F32, (1,))
        if k == depth:
            _plus_one(b, x, out)
            continue
        if k == 0:
            b.op(OT.WHILE, [b.subgraph_ref(0), b.subgraph_ref(1), x], [out])
            continue
        t = b.operand(F32, (1,))
        b.op(OT.WHILE, [b.subgraph_ref(0), b.subgraph_ref(k + 1), x], [t])
        _plus_one(b, t, out)
    return make_model(main, cond, *bodies)


def _run(model: hal.Model, inputs: list, out_bytes: int = 4) -> np.ndarray:
    pm = prepared_model(model)
    with Pools(inputs, [out_bytes]) as p:
        status, _, _ = execute_sync(pm, p.request())
        assert status == S.NONE
        return p.output(0, np.float32, (1,))


def _answers_within(fn: Any, seconds: float) -> Any:
    """fn() in a thread; fails (instead of hanging the suite) if it takes longer."""
    box: list = []
    t = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    t.start()
    t.join(seconds)
    assert box, f"no answer within {seconds} s"
    return box[0]


def test_depth_of_the_chains() -> None:
    assert subgraph_depths(if_chain(3))[0] == 3
    assert subgraph_depths(while_chain(3))[0] == 3
    assert subgraph_depths(if_chain(40, two_refs=True))[0] == 40


@pytest.mark.parametrize("make, depth", [(if_chain, 100), (while_chain, 100), (if_chain, 1000),
                                         (while_chain, 1000)])
def test_deep_control_flow_runs(make: Any, depth: int) -> None:
    """Issue 17 item 5: control flow nested deeper than the 64 levels the driver
    once refused (IF 100 deep is valid and Android's reference runs it): the
    executor keeps its own stack, so every depth validation accepts is
    supported, prepared and run."""
    model = make(depth)
    assert all(device().getSupportedOperations_1_3(model)[1])
    if make is if_chain:
        for cond in (True, False):
            out = _run(model, [np.array([cond]), np.array([2.0], np.float32)])
            assert out[0] == 2.0 + depth + 1
    else:
        assert _run(model, [np.array([0.0], np.float32)])[0] == depth


def test_very_deep_model_validates_and_runs_without_recursion() -> None:
    depth = 3 * sys.getrecursionlimit()  # deeper than any recursion could go
    model = if_chain(depth)
    status, supported = _answers_within(lambda: device().getSupportedOperations_1_3(model), 30)
    assert status == S.NONE and all(supported)
    out = _answers_within(lambda: _run(model, [np.array([True]), np.array([0.0], np.float32)]), 120)
    assert out[0] == depth + 1


def test_deep_model_in_a_deep_caller_stack() -> None:
    """The executor does not recurse per level: a deep model runs even when the
    caller is itself deep in its stack."""
    depth = 500
    model = if_chain(depth)
    pm = prepared_model(model)

    def nested(n: int) -> Any:
        if n:
            return nested(n - 1)
        with Pools([np.array([True]), np.array([0.0], np.float32)], [4]) as p:
            status = pm.executeSynchronously_1_3(p.request(), hal.MeasureTiming.NO, hal.OptionalTimePoint(),
                                                 hal.OptionalTimeoutDuration())[0]
            return status, p.output(0, np.float32, (1,))[0]

    assert nested(sys.getrecursionlimit() - 100) == (S.NONE, depth + 1)


def test_shared_subgraph_dag_is_checked_once() -> None:
    """40 nested IFs whose then and else name the same subgraph: 2**40 paths,
    41 subgraphs; validation, getSupportedOperations and preparation visit
    each subgraph once."""
    model = if_chain(40, two_refs=True)
    t0 = time.monotonic()
    status, supported = _answers_within(lambda: device().getSupportedOperations_1_3(model), 10)
    assert status == S.NONE and all(supported)
    assert time.monotonic() - t0 < 1.0
    t0 = time.monotonic()
    launch, status, prepared = _answers_within(lambda: prepare(model), 10)
    assert status == S.NONE
    assert time.monotonic() - t0 < 1.0
    with Pools([np.array([False]), np.array([1.0], np.float32)], [4]) as p:
        assert execute_sync(prepared, p.request())[0] == S.NONE
        assert p.output(0, np.float32, (1,))[0] == 1.0 + 41


def test_shared_subgraph_cycle_still_rejected() -> None:
    model = if_chain(30, two_refs=True)
    # the deepest level refers back to the first: a cycle below a 2**29-path DAG
    last = model.referenced[-1]
    x = len(last.operands)
    last.operands.append(hal.Operand(type=T.SUBGRAPH, lifetime=hal.OperandLifeTime.SUBGRAPH,
                                     location=hal.DataLocation(0, 0, 0)))
    assert x
    status, _ = _answers_within(lambda: device().getSupportedOperations_1_3(model), 10)
    assert status == S.INVALID_ARGUMENT



# --------------------------------------------------------------------------
# by-value semantics: what the driver keeps is its own


A = np.arange(4, dtype=np.float32).reshape(2, 2)
B = np.full((2, 2), 10.0, np.float32)


def _add_const_model(values_type: Any = bytes) -> hal.Model:
    """out = x + C, C a CONSTANT_COPY operand in operandValues."""
    b = Builder()
    x = b.input(F32, (2, 2))
    c = b.const(F32, B, (2, 2))
    out = b.output(F32, (2, 2))
    b.op(OT.ADD, [x, c, b.i32(0)], [out])
    model = make_model(b)
    model.operandValues = values_type(model.operandValues)
    return model


def test_request_changed_after_execute_returns() -> None:
    """A request relaunched with other locations right after execute_1_3
    returns: each execution writes where its own request said."""
    from tests.driver_util import CountingExecutionCallback, add_model

    pm = prepared_model(add_model())
    with Pools([A, B, A * 3], [16, 16]) as p:
        args, outs = list(p.in_args), list(p.out_args)
        req = p.request()
        req.inputs, req.outputs = [], []
        cbs = []
        for ins, out in (([0, 1], 0), ([2, 1], 1)):
            # the client reuses one request object, changed at once after each launch
            req.inputs[:] = [args[k] for k in ins]
            req.outputs[:] = [outs[out]]
            cb = CountingExecutionCallback()
            assert pm.execute_1_3(req, hal.MeasureTiming.NO, hal.OptionalTimePoint(),
                                  hal.OptionalTimeoutDuration(), cb) == S.NONE
            cbs.append(cb)
        for cb in cbs:
            assert cb.wait(30)[0] == S.NONE
        np.testing.assert_array_equal(p.output(0, np.float32, (2, 2)), A + B)
        np.testing.assert_array_equal(p.output(1, np.float32, (2, 2)), A * 3 + B)


def test_model_changed_after_prepare_returns() -> None:
    """The model prepared is the model validated: changes made by the client
    after prepareModel_1_3 returns (before or after the preparation ends)
    change nothing."""
    from tests.driver_util import CountingPreparedCallback

    model = _add_const_model()
    cb = CountingPreparedCallback()
    assert device().prepareModel_1_3(model, hal.ExecutionPreference.FAST_SINGLE_ANSWER, hal.Priority.MEDIUM,
                                     hal.OptionalTimePoint(), [], [], bytes(32), cb) == S.NONE
    model.main.operations[0].type = OT.MUL  # at once, while the driver prepares
    model.main.operations[0].inputs[2] = 0  # and an invalid model besides
    status, pm = cb.wait(30)
    assert status == S.NONE
    main = model.main
    main.operands[main.outputIndexes[0]].dimensions = [4, 4]  # after preparation
    main.inputIndexes.clear()
    with Pools([A], [16]) as p:
        assert execute_sync(pm, p.request())[0] == S.NONE
        np.testing.assert_array_equal(p.output(0, np.float32, (2, 2)), A + B)


def test_operand_values_rewritten_after_prepare() -> None:
    model = _add_const_model(bytearray)
    pm = prepared_model(model)
    model.operandValues[:] = bytes(len(model.operandValues))  # the client zeroes its buffer
    with Pools([A], [16]) as p:
        assert execute_sync(pm, p.request())[0] == S.NONE
        np.testing.assert_array_equal(p.output(0, np.float32, (2, 2)), A + B)


def test_capabilities_edited_by_a_client() -> None:
    dev = device()
    caps = dev.getCapabilities_1_3()[1]
    before = copy.deepcopy(caps)
    caps.operandPerformance[0].info.execTime = 1e9
    caps.operandPerformance.clear()
    caps.ifPerformance.execTime = -1.0
    caps.relaxedFloat32toFloat16PerformanceTensor.powerUsage = 0.0
    assert dev.getCapabilities_1_3()[1] == before
    older = dev.getCapabilities()[1]
    older.float32Performance.execTime = 1e9
    assert dev.getCapabilities_1_3()[1] == before


# --------------------------------------------------------------------------
# SIGBUS: pools shrunk (ftruncate) after validation, in a child process so
# that a fault shows as a killed child, not a dead test run

_SHRINK_CHILD = r"""
import json, os, sys, tempfile
import numpy as np
from nnhal import hal, memory
from tests.driver_util import (Builder, CountingExecutionCallback, OT, S, T, make_model, prepared_model)

kind, which = sys.argv[1], sys.argv[2]
N = 1 << 18  # 1 MB of float32 per tensor
X = np.arange(N, dtype=np.float32)
Y = np.full(N, 0.5, np.float32)


def unsealed(size):
    # a client's own memory, not sealed against shrinking
    if kind == "ashmem":
        fd = os.memfd_create("hostile", 0)
        os.ftruncate(fd, size)
        return hal.Memory("ashmem", hal.Handle([fd], []), size), fd
    f = tempfile.TemporaryFile()
    fd = os.dup(f.fileno())
    f.close()
    os.ftruncate(fd, size)
    return hal.Memory("mmap_fd", hal.Handle([fd], [memory.PROT_READ | memory.PROT_WRITE, 0, 0]), size), fd


def arg(pool, k):
    return hal.RequestArgument(location=hal.DataLocation(pool, k * 4 * N, 4 * N))


out = {"statuses": [], "wrong": 0}
if which == "constant":
    cmem, cfd = unsealed(4 * N)
    os.pwrite(cfd, Y.tobytes(), 0)
    b = Builder()
    x = b.input(T.TENSOR_FLOAT32, (N,))
    c = b.operand(T.TENSOR_FLOAT32, (N,), hal.OperandLifeTime.CONSTANT_REFERENCE, loc=hal.DataLocation(0, 0, 4 * N))
    o = b.output(T.TENSOR_FLOAT32, (N,))
    b.op(OT.ADD, [x, c, b.i32(0)], [o])
    model = make_model(b)
    model.pools = [cmem]
    pm = prepared_model(model)
    os.ftruncate(cfd, 0)  # the client shrinks the constants' pool after preparation
    inp, outp = memory.allocate(4 * N), memory.allocate(4 * N)
    memory.map(inp)[:] = X.tobytes()
    req = hal.Request(inputs=[arg(0, 0)], outputs=[arg(1, 0)],
                      pools=[hal.MemoryPool(hidlMemory=inp), hal.MemoryPool(hidlMemory=outp)])
    status = pm.executeSynchronously_1_3(req, hal.MeasureTiming.NO, hal.OptionalTimePoint(),
                                         hal.OptionalTimeoutDuration())[0]
    out["statuses"].append(int(status))
    if status == S.NONE and not np.array_equal(np.frombuffer(memory.map(outp), np.float32), X + Y):
        out["wrong"] += 1
else:
    b = Builder()
    x, y = b.input(T.TENSOR_FLOAT32, (N,)), b.input(T.TENSOR_FLOAT32, (N,))
    o = b.output(T.TENSOR_FLOAT32, (N,))
    b.op(OT.ADD, [x, y, b.i32(0)], [o])
    pm = prepared_model(make_model(b))
    if which == "input":
        inp, fd = unsealed(8 * N)
        outp = memory.allocate(4 * N)
    else:
        inp, (outp, fd) = memory.allocate(8 * N), unsealed(4 * N)
    for attempt in range(20):
        if which == "input":
            os.ftruncate(fd, 8 * N)
            os.pwrite(fd, X.tobytes() + Y.tobytes(), 0)
        else:
            memory.map(inp)[:] = X.tobytes() + Y.tobytes()
            os.ftruncate(fd, 4 * N)
        req = hal.Request(inputs=[arg(0, 0), arg(0, 1)], outputs=[arg(1, 0)],
                          pools=[hal.MemoryPool(hidlMemory=inp), hal.MemoryPool(hidlMemory=outp)])
        cb = CountingExecutionCallback()
        launch = pm.execute_1_3(req, hal.MeasureTiming.NO, hal.OptionalTimePoint(), hal.OptionalTimeoutDuration(),
                                cb)
        os.ftruncate(fd, 0)  # at once, while the driver executes
        status = cb.wait(30)[0]
        out["statuses"].append(int(launch))
        out["statuses"].append(int(status))
        if which == "input" and status == S.NONE:
            if not np.array_equal(np.frombuffer(memory.map(outp), np.float32), X + Y):
                out["wrong"] += 1
print(json.dumps(out))
"""


@pytest.mark.parametrize("kind", ["ashmem", "mmap_fd"])
@pytest.mark.parametrize("which", ["input", "output", "constant"])
def test_shrunk_pool_is_an_error_not_a_crash(kind: str, which: str) -> None:
    """A client ftruncate()s an unsealed request input or output pool right
    after execute_1_3 returns (20 times), or a model's CONSTANT_REFERENCE
    pool after preparation: the driver answers with an error status (or the
    right result, for reads done before the shrink, and for constants, which
    it copied) and its process survives."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", _SHRINK_CHILD, kind, which], cwd=root, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode != -signal.SIGBUS, "the driver's process died of SIGBUS"
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    allowed = {int(S.NONE), int(S.INVALID_ARGUMENT), int(S.GENERAL_FAILURE)}
    assert set(result["statuses"]) <= allowed, result
    assert result["wrong"] == 0
    if which == "constant":
        assert result["statuses"] == [int(S.NONE)]  # the driver's own copy of the constants
