"""The executor directly (IF / WHILE semantics, deadlines, zero-sized and
dynamically shaped tensors) and the same behaviour through the driver."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest

from nnhal import hal
from nnhal.engine.executor import DeadlineMissed, Executor
from nnhal.ops.base import OpExecutionError
from tests.driver_util import (
    NO_TIMING,
    Builder,
    Pools,
    S,
    T,
    device,
    execute_async,
    execute_sync,
    make_model,
    prepare,
    prepared_model,
    vector_model,
    vector_pools,
)

OT = hal.OperationType
M = hal.MeasureTiming
F32 = T.TENSOR_FLOAT32
I32 = T.TENSOR_INT32
BOOL = T.TENSOR_BOOL8


def _valid(model: hal.Model) -> hal.Model:
    """The hand-built model must be a valid HAL model the driver supports."""
    status, supported = device().getSupportedOperations_1_3(model)
    assert status == S.NONE and all(supported), (status, supported)
    return model


def _run(model: hal.Model, *inputs, deadline_ns=None, loop_timeout_ns=hal.LoopTimeoutDurationNs.DEFAULT):  # noqa: ANN001, ANN002, ANN202
    return Executor(model, []).run(list(inputs), deadline_ns, loop_timeout_ns)


def f32(*v: float) -> np.ndarray:
    return np.array(v, np.float32)


def i32(*v: int) -> np.ndarray:
    return np.array(v, np.int32)


# --------------------------------------------------------------------------
# IF


def if_model(out_dims=(2,), then_op: OT = OT.ADD, else_op: OT = OT.MUL) -> hal.Model:  # noqa: ANN001
    """out = cond ? x + y : x * y."""
    main = Builder()
    branches = []
    for op in (then_op, else_op):
        b = Builder(main.values)
        x, y = b.input(F32, (2,)), b.input(F32, (2,))
        o = b.output(F32, out_dims)
        b.op(op, [x, y, b.i32(0)], [o])
        branches.append(b)
    c = main.input(BOOL, (1,))
    x, y = main.input(F32, (2,)), main.input(F32, (2,))
    out = main.output(F32, out_dims)
    main.op(OT.IF, [c, main.subgraph_ref(0), main.subgraph_ref(1), x, y], [out])
    return _valid(make_model(main, *branches))


def test_if_selects_branch() -> None:
    model = if_model()
    x, y = f32(2, 3), f32(4, 5)
    (out,) = _run(model, np.array([True]), x, y)
    np.testing.assert_array_equal(out, x + y)
    (out,) = _run(model, np.array([False]), x, y)
    np.testing.assert_array_equal(out, x * y)


def test_if_dynamic_output_shape() -> None:
    model = if_model(out_dims=(0,))
    (out,) = _run(model, np.array([False]), f32(2, 3), f32(4, 5))
    assert out.shape == (2,)
    np.testing.assert_array_equal(out, [8, 15])


def test_if_conformance_models() -> None:
    vm = vector_model("V1_3/if_constant", None)
    model = vm.build_model()
    outs = Executor(model, [memoryview_of(m) for m in model.pools]).run(vm.input_values())
    for got, want in zip(outs, vm.expected_outputs()):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_if_without_condition_fails() -> None:
    """if_no_value (expectFailure): the condition operand has no value."""
    vm = vector_model("V1_3/if_no_value", "if_no_value")
    assert vm.expectFailure
    model = vm.build_model()
    with pytest.raises(OpExecutionError):
        Executor(model, []).run(vm.input_values())
    launch, status, prepared = prepare(model)
    if status == S.NONE:
        with vector_pools(vm) as p:
            status, shapes, timing = execute_sync(prepared, p.request(), M.YES)
            assert status == S.GENERAL_FAILURE and shapes == [] and timing == NO_TIMING
    else:
        assert launch == status and prepared is None


def memoryview_of(mem: hal.Memory) -> memoryview:
    from nnhal import memory

    return memory.map(mem)


# --------------------------------------------------------------------------
# WHILE: m input-output, k state-only, n input-only operands


def while_model(nested: bool = False) -> hal.Model:
    """acc (m=1), i (k=1), limit (n=1):
        while i < limit: acc, i = f(acc, i), i + 1
    with f(acc, i) = acc + acc, or when ``nested`` an IF inside the body:
    (i < 2) ? acc + acc : acc + 1."""
    main = Builder()
    cond = Builder(main.values)
    a, i, n = cond.input(F32, (1,)), cond.input(I32, (1,)), cond.input(I32, (1,))
    b = cond.output(BOOL, (1,))
    cond.op(OT.LESS, [i, n], [b])

    body = Builder(main.values)
    a, i, n = body.input(F32, (1,)), body.input(I32, (1,)), body.input(I32, (1,))
    a2, i2 = body.output(F32, (1,)), body.output(I32, (1,))
    one = body.const(I32, i32(1), (1,))
    subgraphs = [cond, body]
    if nested:
        two = body.const(I32, i32(2), (1,))
        c = body.operand(BOOL, (1,))
        body.op(OT.LESS, [i, two], [c])
        then, else_ = Builder(main.values), Builder(main.values)
        x = then.input(F32, (1,))
        o = then.output(F32, (1,))
        then.op(OT.ADD, [x, x, then.i32(0)], [o])
        x = else_.input(F32, (1,))
        o = else_.output(F32, (1,))
        else_.op(OT.ADD, [x, else_.const(F32, f32(1), (1,)), else_.i32(0)], [o])
        body.op(OT.IF, [c, body.subgraph_ref(2), body.subgraph_ref(3), a], [a2])
        subgraphs += [then, else_]
    else:
        body.op(OT.ADD, [a, a, body.i32(0)], [a2])
    body.op(OT.ADD, [i, one, body.i32(0)], [i2])

    acc = main.input(F32, (1,))
    limit = main.input(I32, (1,))
    i0 = main.const(I32, i32(0), (1,))
    out = main.output(F32, (1,))
    main.op(OT.WHILE, [main.subgraph_ref(0), main.subgraph_ref(1), acc, i0, limit], [out])
    return _valid(make_model(main, *subgraphs))


@pytest.mark.parametrize("limit", [0, 1, 5])
def test_while_m_k_n(limit: int) -> None:
    (out,) = _run(while_model(), f32(3), i32(limit))
    np.testing.assert_array_equal(out, [3 * 2**limit])


def test_while_only_m_outputs() -> None:
    """The state-only operand (i) is not an output of the WHILE."""
    outs = _run(while_model(), f32(1), i32(3))
    assert len(outs) == 1 and outs[0].dtype == np.float32


@pytest.mark.parametrize("limit,expected", [(0, 1), (1, 2), (2, 4), (4, 6)])
def test_while_with_nested_if(limit: int, expected: float) -> None:
    (out,) = _run(while_model(nested=True), f32(1), i32(limit))
    np.testing.assert_array_equal(out, [expected])


def test_if_containing_while() -> None:
    """IF whose then-branch runs a WHILE (doubling) and else-branch negates... via MUL."""
    main = Builder()
    inner = while_model()  # reuse its subgraphs as the then-branch's loop
    # then-branch: the WHILE model's main as a subgraph (referencing cond/body at 2, 3)
    then = inner.main
    for o in then.operands:
        if o.lifetime == hal.OperandLifeTime.SUBGRAPH:
            o.location = hal.DataLocation(0, o.location.offset + 2, 0)
        elif o.lifetime == hal.OperandLifeTime.SUBGRAPH_INPUT or o.lifetime == hal.OperandLifeTime.SUBGRAPH_OUTPUT:
            pass
    # its constants live in the inner model's operandValues: append them to ours
    base = len(main.values)
    main.values.extend(inner.operandValues)
    for sg in [then, *inner.referenced]:
        for o in sg.operands:
            if o.lifetime == hal.OperandLifeTime.CONSTANT_COPY:
                o.location = hal.DataLocation(0, o.location.offset + base, o.location.length)
    else_ = Builder(main.values)
    a, n = else_.input(F32, (1,)), else_.input(I32, (1,))
    o = else_.output(F32, (1,))
    else_.op(OT.MUL, [a, else_.const(F32, f32(-1), (1,)), else_.i32(0)], [o])
    c = main.input(BOOL, (1,))
    a, n = main.input(F32, (1,)), main.input(I32, (1,))
    out = main.output(F32, (1,))
    main.op(OT.IF, [c, main.subgraph_ref(0), main.subgraph_ref(1), a, n], [out])
    model = hal.Model(main=main.subgraph(), referenced=[then, else_.subgraph(), *inner.referenced],
                      operandValues=bytes(main.values))
    _valid(model)
    np.testing.assert_array_equal(_run(model, np.array([True]), f32(3), i32(2))[0], [12])
    np.testing.assert_array_equal(_run(model, np.array([False]), f32(3), i32(2))[0], [-3])


def growing_model() -> hal.Model:
    """x doubles its length each iteration (CONCATENATION(x, x)): the loop
    operand's shape is only known at run time."""
    main = Builder()
    cond = Builder(main.values)
    cond.input(F32, (0,))
    i, n = cond.input(I32, (1,)), cond.input(I32, (1,))
    b = cond.output(BOOL, (1,))
    cond.op(OT.LESS, [i, n], [b])
    body = Builder(main.values)
    x, i, n = body.input(F32, (0,)), body.input(I32, (1,)), body.input(I32, (1,))
    x2, i2 = body.output(F32, (0,)), body.output(I32, (1,))
    body.op(OT.CONCATENATION, [x, x, body.i32(0)], [x2])
    body.op(OT.ADD, [i, body.const(I32, i32(1), (1,)), body.i32(0)], [i2])
    x = main.input(F32, (0,))
    n = main.input(I32, (1,))
    out = main.output(F32, (0,))
    main.op(OT.WHILE, [main.subgraph_ref(0), main.subgraph_ref(1), x, main.const(I32, i32(0), (1,)), n], [out])
    return _valid(make_model(main, cond, body))


def test_while_dynamic_shape_grows() -> None:
    (out,) = _run(growing_model(), f32(1, 2), i32(3))
    assert out.shape == (16,)
    np.testing.assert_array_equal(out, np.tile([1, 2], 8))


def test_while_dynamic_shape_through_driver() -> None:
    prepared = prepared_model(growing_model())
    with Pools([f32(1, 2, 3), i32(2)], [48], out_dims=[[0]]) as p:
        req = p.request()
        req.inputs[0].dimensions = [3]
        status, shapes, _ = execute_sync(prepared, req)
        assert status == S.NONE and shapes[0].dimensions == [12] and shapes[0].isSufficient
        np.testing.assert_array_equal(p.output(0, np.float32, (12,)), np.tile([1, 2, 3], 4))
    with Pools([f32(1, 2, 3), i32(2)], [44]) as p:
        req = p.request()
        req.inputs[0].dimensions = [3]
        status, shapes, timing = execute_sync(prepared, req, M.YES)
        assert status == S.OUTPUT_INSUFFICIENT_SIZE and timing == NO_TIMING
        assert [(s.dimensions, s.isSufficient) for s in shapes] == [([12], False)]


def test_while_loop_timeout() -> None:
    vm = vector_model("V1_3/while_infinite_loop", "while_infinite_loop")
    model = vm.build_model()
    t0 = time.monotonic()
    with pytest.raises(DeadlineMissed):
        Executor(model, [memoryview_of(m) for m in model.pools]).run(vm.input_values(), None, 1_000_000)
    assert time.monotonic() - t0 < 1.0


def test_while_zero_iterations_with_zero_timeout() -> None:
    """The loop timeout is checked only when the body is about to run."""
    (out,) = _run(while_model(), f32(3), i32(0), loop_timeout_ns=0)
    np.testing.assert_array_equal(out, [3])
    with pytest.raises(DeadlineMissed):
        time.sleep(0.001)
        _run(while_model(), f32(3), i32(1000), loop_timeout_ns=0)


def test_while_conformance_model() -> None:
    vm = vector_model("V1_3/while_sum_of_powers_quant8", None)
    model = vm.build_model()
    outs = Executor(model, [memoryview_of(m) for m in model.pools]).run(vm.input_values())
    for got, want in zip(outs, vm.expected_outputs()):
        np.testing.assert_array_equal(got, want)


# --------------------------------------------------------------------------
# deadlines between operations


def chain_model(n: int = 3) -> hal.Model:
    b = Builder()
    x = b.input(F32, (2,))
    prev = x
    for k in range(n):
        o = b.output(F32, (2,)) if k == n - 1 else b.operand(F32, (2,))
        b.op(OT.ADD, [prev, x, b.i32(0)], [o])
        prev = o
    return _valid(make_model(b))


def test_deadline_checked_between_operations() -> None:
    ex = Executor(chain_model(3), [])
    calls = []
    steps = ex.graphs[0].steps
    for k, step in enumerate(steps):
        orig = step.opdef.execute

        def slow(ctx, orig=orig, k=k):  # noqa: ANN001, ANN202
            calls.append(k)
            time.sleep(0.05)
            return orig(ctx)

        step.opdef = dataclasses.replace(step.opdef, execute=slow)
    with pytest.raises(DeadlineMissed):
        ex.run([f32(1, 2)], time.monotonic_ns() + 20_000_000)
    assert calls == [0]  # the second operation never started
    calls.clear()
    np.testing.assert_array_equal(ex.run([f32(1, 2)], time.monotonic_ns() + 10**10)[0], [4, 8])
    assert calls == [0, 1, 2]


def test_deadline_passed_before_start() -> None:
    with pytest.raises(DeadlineMissed):
        _run(chain_model(1), f32(1, 2), deadline_ns=time.monotonic_ns() - 1)


def test_deadline_inside_loop_body() -> None:
    """A deadline also stops a long loop (checked at each body operation)."""
    vm = vector_model("V1_3/while_infinite_loop", "while_infinite_loop")
    model = vm.build_model()
    t0 = time.monotonic()
    with pytest.raises(DeadlineMissed):
        Executor(model, [memoryview_of(m) for m in model.pools]).run(
            vm.input_values(), time.monotonic_ns() + 10_000_000, 10**10)
    assert time.monotonic() - t0 < 1.0


def test_deadline_through_driver_is_missed() -> None:
    prepared = prepared_model(chain_model(2))
    with Pools([f32(1, 2)], [8]) as p:
        status, shapes, timing = execute_sync(prepared, p.request(), M.YES,
                                              hal.OptionalTimePoint(nanosecondsSinceEpoch=time.monotonic_ns()))
        assert status in (S.MISSED_DEADLINE_TRANSIENT, S.MISSED_DEADLINE_PERSISTENT)
        assert shapes == [] and timing == NO_TIMING


# --------------------------------------------------------------------------
# zero-sized tensors


def test_zero_sized_tensors() -> None:
    b = Builder()
    x, y = b.input(F32, (0, 2)), b.input(F32, (0, 2))
    out = b.output(F32, (0, 2))
    b.op(OT.ADD, [x, y, b.i32(0)], [out])
    model = _valid(make_model(b))
    empty = np.zeros((0, 2), np.float32)
    (out,) = _run(model, empty, empty)
    assert out.shape == (0, 2) and out.dtype == np.float32


def test_zero_sized_input_rejected_by_op_without_support() -> None:
    b = Builder()
    x = b.input(F32, (0, 2))
    out = b.output(F32, (0, 2))
    b.op(OT.FLOOR, [x], [out])
    model = _valid(make_model(b))
    with pytest.raises(OpExecutionError):
        _run(model, np.zeros((0, 2), np.float32))


def test_zero_sized_input_dimension_rejected_in_request() -> None:
    """As the reference's request validation: a request input dimension of 0 is
    invalid (zero-sized tensors arise inside a model; an empty model input is
    passed as hasNoValue)."""
    b = Builder()
    x, y = b.input(F32, (0, 2)), b.input(F32, (1, 2))
    out = b.output(F32, (0, 2))
    b.op(OT.ADD, [x, y, b.i32(0)], [out])
    prepared = prepared_model(make_model(b))
    with Pools([np.zeros((0, 2), np.float32), f32(1, 2).reshape(1, 2)], [1]) as p:
        req = p.request()
        req.inputs[0] = hal.RequestArgument(location=hal.DataLocation(0, 0, 0), dimensions=[0, 2])
        assert execute_sync(prepared, req)[0] == S.INVALID_ARGUMENT


@pytest.mark.parametrize("dynamic", [False, True])
def test_zero_sized_through_driver(dynamic: bool) -> None:
    """concat_zero_sized: BOX_WITH_NMS_LIMIT selects no box, ROI_ALIGN and
    CONCATENATION run on zero-sized tensors; zero-sized outputs are reported
    with their shapes (a 1-byte buffer each)."""
    vm = vector_model("V1_2/concat_zero_sized", "concat_zero_sized")
    model = vm.build_model()
    if dynamic:
        for i in model.main.outputIndexes:
            o = model.main.operands[i]
            o.dimensions = [0] * len(o.dimensions)
    prepared = prepared_model(model)
    with vector_pools(vm) as p:
        status, shapes, _ = execute_sync(prepared, p.request())
        assert status == S.NONE
        assert [s.dimensions for s in shapes] == [o.dimensions for o in vm.output_operands()]
        assert all(s.isSufficient for s in shapes)
        assert any(0 in s.dimensions for s in shapes)


# --------------------------------------------------------------------------
# outputs with unknown dimensions, OUTPUT_INSUFFICIENT_SIZE


def two_output_model(dims0=(0, 0), dims1=(0,)) -> hal.Model:  # noqa: ANN001
    """out0 = a + b (shape of a); out1 = TRANSPOSE-free: a reshaped flat via RESHAPE."""
    b = Builder()
    a, c = b.input(F32, (2, 3)), b.input(F32, (2, 3))
    o0, o1 = b.output(F32, dims0), b.output(F32, dims1)
    b.op(OT.ADD, [a, c, b.i32(0)], [o0])
    b.op(OT.RESHAPE, [a, b.const(I32, i32(-1), (1,))], [o1])
    return _valid(make_model(b))


def test_unknown_dimensions_resolved() -> None:
    a, c = np.arange(6, dtype=np.float32).reshape(2, 3), np.ones((2, 3), np.float32)
    for dims0, dims1 in [((0, 0), (0,)), ((2, 0), (6,)), ((), ())]:
        o0, o1 = _run(two_output_model(dims0, dims1), a, c)
        assert o0.shape == (2, 3) and o1.shape == (6,)
        np.testing.assert_array_equal(o0, a + c)


def test_declared_dimension_conflict_is_failure() -> None:
    b = Builder()
    a = b.input(F32, (2, 3))
    o = b.output(F32, (0,))
    b.op(OT.RESHAPE, [a, b.const(I32, i32(3, 2), (2,))], [o])  # rank 2 result, rank 1 declared
    with pytest.raises(OpExecutionError):
        _run(make_model(b), np.zeros((2, 3), np.float32))


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("short", [0, 1])
def test_output_insufficient_size_full_shapes(mode: str, short: int) -> None:
    """Either output too small: OUTPUT_INSUFFICIENT_SIZE with every output's
    shape and the right isSufficient flags; no timing; nothing else."""
    prepared = prepared_model(two_output_model())
    a, c = np.arange(6, dtype=np.float32).reshape(2, 3), np.ones((2, 3), np.float32)
    sizes = [24, 24]
    sizes[short] -= 4
    with Pools([a, c], sizes) as p:
        if mode == "sync":
            status, shapes, timing = execute_sync(prepared, p.request(), M.YES)
        else:
            launch, status, shapes, timing = execute_async(prepared, p.request(), M.YES)
            assert launch == S.NONE
        assert status == S.OUTPUT_INSUFFICIENT_SIZE and timing == NO_TIMING
        assert [s.dimensions for s in shapes] == [[2, 3], [6]]
        assert [s.isSufficient for s in shapes] == [short != 0, short != 1]
        # no output was written
        assert not p.output(1 - short, np.float32, (2, 3) if short else (6,)).any()
    with Pools([a, c], [24, 24]) as p:
        status, shapes, _ = execute_sync(prepared, p.request())
        assert status == S.NONE and [s.dimensions for s in shapes] == [[2, 3], [6]]
        np.testing.assert_array_equal(p.output(1, np.float32, (6,)), a.reshape(-1))


def test_insufficient_size_conformance_dynamic() -> None:
    """A conformance model with its output dimensions unknown, one byte short."""
    vm = vector_model("V1_2/conv2d_dilation", None)
    model = vm.build_model()
    for i in model.main.outputIndexes:
        o = model.main.operands[i]
        o.dimensions = [0] * len(o.dimensions)
    prepared = prepared_model(model)
    o = vm.output_operands()[0]
    with vector_pools(vm, short=1) as p:
        status, shapes, _ = execute_sync(prepared, p.request())
        assert status == S.OUTPUT_INSUFFICIENT_SIZE
        assert shapes[0].dimensions == list(o.dimensions) and not shapes[0].isSufficient
    with vector_pools(vm) as p:
        status, shapes, _ = execute_sync(prepared, p.request())
        assert status == S.NONE and shapes[0].dimensions == list(o.dimensions)


def test_while_two_input_outputs_and_input_only() -> None:
    """m = 2 (counter, acc), k = 0, n = 1 (x, read by the body every iteration):
    while counter < 3: counter, acc = counter + 1, acc + x."""
    main = Builder()
    cond = Builder(main.values)
    c, _, _ = cond.input(I32, (1,)), cond.input(F32, (2,)), cond.input(F32, (2,))
    b = cond.output(BOOL, (1,))
    cond.op(OT.LESS, [c, cond.const(I32, i32(3), (1,))], [b])
    body = Builder(main.values)
    c, acc, x = body.input(I32, (1,)), body.input(F32, (2,)), body.input(F32, (2,))
    c2, acc2 = body.output(I32, (1,)), body.output(F32, (2,))
    body.op(OT.ADD, [c, body.const(I32, i32(1), (1,)), body.i32(0)], [c2])
    body.op(OT.ADD, [acc, x, body.i32(0)], [acc2])
    c0, acc0, x = main.input(I32, (1,)), main.input(F32, (2,)), main.input(F32, (2,))
    oc, oacc = main.output(I32, (1,)), main.output(F32, (2,))
    main.op(OT.WHILE, [main.subgraph_ref(0), main.subgraph_ref(1), c0, acc0, x], [oc, oacc])
    model = _valid(make_model(main, cond, body))
    counter, acc = _run(model, i32(0), f32(1, 2), f32(10, 20))
    assert counter.tolist() == [3]
    np.testing.assert_array_equal(acc, [31, 62])
    counter, acc = _run(model, i32(5), f32(1, 2), f32(10, 20))  # no iteration: the initial values
    assert counter.tolist() == [5]
    np.testing.assert_array_equal(acc, [1, 2])
    # the same through the driver
    prepared = prepared_model(model)
    with Pools([i32(1), f32(1, 2), f32(10, 20)], [4, 8]) as p:
        status, shapes, _ = execute_sync(prepared, p.request())
        assert status == S.NONE and [s.dimensions for s in shapes] == [[1], [2]]
        assert p.output(0, np.int32, (1,)).tolist() == [3]
        np.testing.assert_array_equal(p.output(1, np.float32, (2,)), [21, 42])
