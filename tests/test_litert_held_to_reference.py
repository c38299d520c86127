"""litert-cpu held to the reference (issue 17 item 6): on models no public
vector has, it gives sample-all's status at preparation and at execution.

Held-out style models are built by hand here (Android's
``depthwise_conv2d_invalid_filter_dims``, ``strided_slice_invalid``,
``transpose_v1_2`` forms), and mutants of vector models
(``nnhal.tools.status_diff``) are compared with the reference."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np
import pytest

from nnhal.drivers import litert as litert_backend

if not litert_backend.available():  # pragma: no cover - only without the optional dependency
    pytest.skip("ai-edge-litert is not installed: the litert-cpu driver does not exist here",
                allow_module_level=True)

import nnhal  # noqa: E402
from nnhal import hal  # noqa: E402
from nnhal.conformance import vectors  # noqa: E402
from nnhal.conformance.vectors import VectorModel, VectorOperand, VectorSubgraph  # noqa: E402
from nnhal.engine.reference_check import certain_operations, execution_gate, reference_rejection  # noqa: E402
from nnhal.tools import status_diff  # noqa: E402
from tests.conftest import vectors_root  # noqa: E402

S = hal.ErrorStatus
T = hal.OperandType
L = hal.OperandLifeTime
OT = hal.OperationType
F32 = np.float32


@pytest.fixture(scope="module")
def devices() -> tuple[Any, Any]:
    return nnhal.get_device("litert-cpu"), nnhal.get_device("sample-all")


def operand(t: T, dims: Sequence[int], lifetime: L, data: Any = None, scale: float = 0.0, zp: int = 0,
            channel_quant: Optional[hal.SymmPerChannelQuantParams] = None) -> VectorOperand:
    return VectorOperand("", int(t), list(dims), 0 if lifetime == L.SUBGRAPH_OUTPUT else 1, scale, zp, lifetime,
                         channel_quant, False, None if data is None else np.asarray(data))


def scalar(t: T, v: Any) -> VectorOperand:
    return operand(t, [], L.CONSTANT_COPY, np.array(v, {T.INT32: np.int32, T.BOOL: np.bool_}[t]))


def one_op(name: str, operands: list[VectorOperand], op: OT, expect_failure: bool) -> VectorModel:
    """A one-operation model: inputs and outputs in operand order, the operation reads every
    operand but the outputs."""
    ins = [i for i, o in enumerate(operands) if o.lifetime == L.SUBGRAPH_INPUT]
    outs = [i for i, o in enumerate(operands) if o.lifetime == L.SUBGRAPH_OUTPUT]
    sg = VectorSubgraph(operands, [hal.Operation(op, [i for i in range(len(operands)) if i not in outs], outs)],
                        ins, outs)
    return VectorModel(name, "held-out", "V1_2", False, expect_failure, 0.0, sg)


def depthwise_invalid_filter(quant: bool) -> VectorModel:
    """DEPTHWISE_CONV_2D whose filter's first dimension is 2, not 1 (depth multiplier 2, 2 channels in,
    4 out: the last dimension fits; Android's depthwise_conv2d_invalid_filter_dims)."""
    if quant:
        cq = hal.SymmPerChannelQuantParams(scales=[0.01, 0.005, 0.01, 0.005], channelDim=3)
        x = operand(T.TENSOR_QUANT8_ASYMM, [1, 3, 3, 2], L.SUBGRAPH_INPUT, np.zeros((1, 3, 3, 2), np.uint8), 0.5)
        f = operand(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, [2, 2, 2, 4], L.CONSTANT_COPY, np.zeros((2, 2, 2, 4), np.int8),
                    channel_quant=cq)
        b = operand(T.TENSOR_INT32, [4], L.CONSTANT_COPY, np.zeros(4, np.int32))
        y = operand(T.TENSOR_QUANT8_ASYMM, [1, 2, 2, 4], L.SUBGRAPH_OUTPUT, np.zeros((1, 2, 2, 4), np.uint8), 0.1)
    else:
        x = operand(T.TENSOR_FLOAT32, [1, 3, 3, 2], L.SUBGRAPH_INPUT, np.zeros((1, 3, 3, 2), F32))
        f = operand(T.TENSOR_FLOAT32, [2, 2, 2, 4], L.CONSTANT_COPY, np.zeros((2, 2, 2, 4), F32))
        b = operand(T.TENSOR_FLOAT32, [4], L.CONSTANT_COPY, np.zeros(4, F32))
        y = operand(T.TENSOR_FLOAT32, [1, 2, 2, 4], L.SUBGRAPH_OUTPUT, np.zeros((1, 2, 2, 4), F32))
    params = [scalar(T.INT32, v) for v in (0, 0, 0, 0, 1, 1, 2, 0)] + [scalar(T.BOOL, False)]
    return one_op("depthwise_conv2d_invalid_filter_dims", [x, f, b, *params, y], OT.DEPTHWISE_CONV_2D, True)


def strided_slice(begin: list, end: list, strides: list, shrink: int, params_as_inputs: bool = False,
                  out: Sequence[int] = (3,)) -> VectorModel:
    """STRIDED_SLICE of a [2, 3] input (Android's strided_slice_invalid: output_dims, neg_stride)."""
    lt = L.SUBGRAPH_INPUT if params_as_inputs else L.CONSTANT_COPY
    ops = [operand(T.TENSOR_FLOAT32, [2, 3], L.SUBGRAPH_INPUT, np.arange(1, 7, dtype=F32).reshape(2, 3)),
           *(operand(T.TENSOR_INT32, [2], lt, np.array(v, np.int32)) for v in (begin, end, strides)),
           scalar(T.INT32, 0), scalar(T.INT32, 0), scalar(T.INT32, shrink),
           operand(T.TENSOR_FLOAT32, list(out), L.SUBGRAPH_OUTPUT, np.zeros(out, F32))]
    return one_op("strided_slice_invalid", ops, OT.STRIDED_SLICE, True)


def transpose_perm_input(t: T, perm: Optional[list] = None) -> VectorModel:
    """TRANSPOSE with the permutation a model input (HAL 1.2's transpose_v1_2): the request omits it
    (empty data, hasNoValue: the axes reversed) or gives it."""
    scale, zp, dt = (0.0, 0, F32) if t == T.TENSOR_FLOAT32 else (0.5, 0, np.uint8)
    x = np.array([[1, 2], [3, 4]], F32)
    q = x if t == T.TENSOR_FLOAT32 else x / scale + zp
    p = np.zeros(0, np.int32) if perm is None else np.array(perm, np.int32)
    y = q.T if perm in (None, [1, 0]) else q
    ops = [operand(t, [2, 2], L.SUBGRAPH_INPUT, q.astype(dt), scale, zp),
           operand(T.TENSOR_INT32, [0] if perm is None else [2], L.SUBGRAPH_INPUT, p),
           operand(t, [2, 2], L.SUBGRAPH_OUTPUT, y.astype(dt), scale, zp)]
    return one_op("transpose_v1_2", ops, OT.TRANSPOSE, False)


def _same(devices: tuple[Any, Any], vm: VectorModel) -> tuple[status_diff.Outcome, status_diff.Outcome]:
    litert, sample = devices
    dev, ref = status_diff.outcome(litert, vm), status_diff.outcome(sample, vm)
    assert not dev.refused, "litert-cpu supports these operations: the test is about what it then does"
    assert (dev.prepare, dev.execute) == (ref.prepare, ref.execute), (dev, ref)
    assert status_diff.disagreement(vm, ref, dev) == ""
    return dev, ref


@pytest.mark.parametrize("quant", [False, True], ids=["float32", "quant8_per_channel"])
def test_depthwise_filter_contradicting_the_depth_multiplier(devices: tuple[Any, Any], quant: bool) -> None:
    dev, _ = _same(devices, depthwise_invalid_filter(quant))
    assert (dev.prepare, dev.execute) == (S.NONE, S.GENERAL_FAILURE)


@pytest.mark.parametrize("args", [([0, 0], [2, 3], [1, 1], 1), ([1, 0], [0, 3], [-1, 1], 1)],
                         ids=["output_dims", "neg_stride"])
def test_strided_slice_the_hal_forbids(devices: tuple[Any, Any], args: tuple) -> None:
    vm = strided_slice(*args)
    dev, _ = _same(devices, vm)
    assert (dev.prepare, dev.execute) == (S.NONE, S.GENERAL_FAILURE)
    model = vm.build_model()
    rejection = reference_rejection(model, [])
    assert rejection is not None and rejection.operation == 0 and "shrinking axis 0" in rejection.message


def test_strided_slice_parameters_from_the_request(devices: tuple[Any, Any]) -> None:
    """begin / end / strides as model inputs: the verdict is the request's, checked at each new key."""
    bad = strided_slice([1, 0], [0, 3], [-1, 1], 1, params_as_inputs=True)
    assert certain_operations(bad.build_model()) == [False]
    assert certain_operations(bad.build_model(), at_execution=True) == [True]
    dev, _ = _same(devices, bad)
    assert (dev.prepare, dev.execute) == (S.NONE, S.GENERAL_FAILURE)
    good = strided_slice([1, 0], [2, 3], [1, 1], 1, params_as_inputs=True)
    good.main.operands[-1].data = np.array([4, 5, 6], F32)
    dev, ref = _same(devices, good)
    assert dev.execute == S.NONE and np.array_equal(dev.outputs[0], [4, 5, 6])


@pytest.mark.parametrize("t", [T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM], ids=["float32", "quant8"])
@pytest.mark.parametrize("perm", [None, [1, 0]], ids=["omitted", "given"])
def test_transpose_permutation_as_a_model_input(devices: tuple[Any, Any], t: T, perm: Optional[list]) -> None:
    vm = transpose_perm_input(t, perm)
    dev, _ = _same(devices, vm)
    assert dev.execute == S.NONE
    assert np.array_equal(dev.outputs[0], vm.main.operands[2].data)


def test_lrn_negative_radius_is_refused(devices: tuple[Any, Any]) -> None:
    """Found by status_diff: LiteRT's LRN corrupts memory with a negative radius; the reference runs it."""
    ops = [operand(T.TENSOR_FLOAT32, [1, 1, 1, 6], L.SUBGRAPH_INPUT, np.arange(6, dtype=F32).reshape(1, 1, 1, 6)),
           scalar(T.INT32, -2), *(operand(T.FLOAT32, [], L.CONSTANT_COPY, np.array(v, F32)) for v in (1.0, 1.0, 0.5)),
           operand(T.TENSOR_FLOAT32, [1, 1, 1, 6], L.SUBGRAPH_OUTPUT, np.zeros((1, 1, 1, 6), F32))]
    vm = one_op("lrn", ops, OT.LOCAL_RESPONSE_NORMALIZATION, False)
    dev = status_diff.outcome(devices[0], vm)
    assert dev.refused
    vm.main.operands[1].data = np.array(2, np.int32)
    assert not status_diff.outcome(devices[0], vm).refused


def test_gate_only_where_the_request_decides() -> None:
    """Settled at preparation when shapes and parameters are the model's; a gate otherwise."""
    assert execution_gate(depthwise_invalid_filter(False).build_model(), []) is None
    assert execution_gate(strided_slice([0, 0], [2, 3], [1, 1], 0, out=(2, 3)).build_model(), []) is None
    assert execution_gate(strided_slice([0, 0], [2, 3], [1, 1], 0, True, out=(2, 3)).build_model(), []) is not None


def test_one_prepared_model_judged_per_request(devices: tuple[Any, Any]) -> None:
    """strides from the request: the same prepared model fails the request the reference fails and
    runs the one it runs (the gate's verdict per key, then looked up)."""
    from nnhal.conformance.runner import RequestPools

    litert, _ = devices
    vm = strided_slice([1, 0], [2, 3], [1, 1], 1, params_as_inputs=True)
    model = vm.build_model()
    cb = hal.PreparedModelCallback()
    litert.prepareModel_1_3(model, hal.ExecutionPreference.FAST_SINGLE_ANSWER, hal.Priority.MEDIUM,
                            hal.OptionalTimePoint(), [], [], bytes(32), cb)
    status, prepared = cb.wait(60)
    assert status == S.NONE
    x = np.arange(1, 7, dtype=F32).reshape(2, 3)
    for _ in range(2):
        for strides, want in (([1, 1], S.NONE), ([-1, 1], S.GENERAL_FAILURE)):
            begin, end = ([1, 0], [2, 3]) if strides[0] > 0 else ([1, 0], [0, 3])
            ins = [x, np.array(begin, np.int32), np.array(end, np.int32), np.array(strides, np.int32)]
            with RequestPools(ins, [12]) as pools:
                status, shapes, _ = prepared.executeSynchronously_1_3(
                    pools.request(), hal.MeasureTiming.NO, hal.OptionalTimePoint(), hal.OptionalTimeoutDuration())
                assert status == want
                if want == S.NONE:
                    assert np.array_equal(pools.output(0, F32, [3]), [4, 5, 6])


def test_parameter_computed_from_data_is_refused(devices: tuple[Any, Any], caplog: pytest.LogCaptureFixture) -> None:
    """RESHAPE to a shape CAST from float data: no key holds the reference's verdict, so litert-cpu says
    it does not support the RESHAPE (sample-all runs it)."""
    import logging

    litert, sample = devices
    ops = [operand(T.TENSOR_FLOAT32, [2], L.SUBGRAPH_INPUT, np.array([3, 2], F32)),
           operand(T.TENSOR_INT32, [2], L.TEMPORARY_VARIABLE),
           operand(T.TENSOR_FLOAT32, [6], L.SUBGRAPH_INPUT, np.arange(6, dtype=F32)),
           operand(T.TENSOR_FLOAT32, [3, 2], L.SUBGRAPH_OUTPUT, np.arange(6, dtype=F32).reshape(3, 2))]
    sg = VectorSubgraph(ops, [hal.Operation(OT.CAST, [0], [1]), hal.Operation(OT.RESHAPE, [2, 1], [3])], [0, 2], [3])
    vm = VectorModel("reshape_from_data", "held-out", "V1_3", False, False, 0.0, sg)
    model = vm.build_model()
    with caplog.at_level(logging.INFO, logger="nnhal.driver"):
        assert litert.getSupportedOperations_1_3(model) == (S.NONE, [True, False])
    assert "operation 1 (RESHAPE) not supported: the reference's checks of it depend on data values" in caplog.text
    assert sample.getSupportedOperations_1_3(model) == (S.NONE, [True, True])


def test_transpose_conv_output_size_tflite_cannot_derive(devices: tuple[Any, Any]) -> None:
    """Found by status_diff: SAME padding, output width 4 from width 2 at stride 2 (tail padding 1):
    lowered as VALID + SLICE, the reference's shape and values (XNNPACK made width 6 before)."""
    x = operand(T.TENSOR_FLOAT32, [1, 1, 2, 1], L.SUBGRAPH_INPUT, np.array([300, 500], F32).reshape(1, 1, 2, 1))
    f = operand(T.TENSOR_FLOAT32, [1, 3, 3, 1], L.CONSTANT_COPY, np.array([9, 5, 6, 9, 8, 5, 3, 1, 4], F32)
                .reshape(1, 3, 3, 1))
    b = operand(T.TENSOR_FLOAT32, [1], L.CONSTANT_COPY, np.array([-1000], F32))
    shape = operand(T.TENSOR_INT32, [4], L.CONSTANT_COPY, np.array([1, 3, 4, 1], np.int32))
    params = [scalar(T.INT32, v) for v in (1, 2, 3, 1)] + [scalar(T.BOOL, False)]
    y = operand(T.TENSOR_FLOAT32, [1, 3, 4, 1], L.SUBGRAPH_OUTPUT, np.zeros((1, 3, 4, 1), F32))
    vm = one_op("transpose_conv_tail", [x, f, b, shape, *params, y], OT.TRANSPOSE_CONV_2D, False)
    dev, ref = _same(devices, vm)
    assert dev.execute == S.NONE and dev.shapes == [[1, 3, 4, 1]]


def test_mean_keep_dims_positive(devices: tuple[Any, Any]) -> None:
    """Found by status_diff: MEAN's keep_dims is an INT32, "if positive" (2 did not lower)."""
    for keep, out in ((2, [1, 3, 1]), (-1, [3])):
        ops = [operand(T.TENSOR_FLOAT32, [4, 3, 2], L.SUBGRAPH_INPUT, np.arange(24, dtype=F32).reshape(4, 3, 2)),
               operand(T.TENSOR_INT32, [2], L.CONSTANT_COPY, np.array([0, 2], np.int32)), scalar(T.INT32, keep),
               operand(T.TENSOR_FLOAT32, out, L.SUBGRAPH_OUTPUT, np.zeros(out, F32))]
        dev, _ = _same(devices, one_op("mean", ops, OT.MEAN, False))
        assert dev.execute == S.NONE and dev.shapes == [out]


def test_what_litert_cannot_prepare_is_not_claimed(devices: tuple[Any, Any]) -> None:
    """Found by status_diff: HASHTABLE_LOOKUP with 4 keys for 3 value rows (the reference runs it,
    LiteRT refuses it when it prepares): getSupportedOperations_1_3 says so, with LiteRT's reason."""
    ops = [operand(T.TENSOR_INT32, [4], L.SUBGRAPH_INPUT, np.array([1, 2, 3, 4], np.int32)),
           operand(T.TENSOR_INT32, [4], L.SUBGRAPH_INPUT, np.array([1, 2, 3, 4], np.int32)),
           operand(T.TENSOR_FLOAT32, [3, 2], L.SUBGRAPH_INPUT, np.zeros((3, 2), F32)),
           operand(T.TENSOR_FLOAT32, [4, 2], L.SUBGRAPH_OUTPUT, np.zeros((4, 2), F32)),
           operand(T.TENSOR_QUANT8_ASYMM, [4], L.SUBGRAPH_OUTPUT, np.zeros(4, np.uint8), 1.0)]
    vm = one_op("hashtable", ops, OT.HASHTABLE_LOOKUP, False)
    assert status_diff.outcome(devices[0], vm).refused
    _, _, reasons = nnhal.supported_operations(devices[0], vm.build_model())
    assert reasons[0] and "LiteRT refuses it when it prepares the lowered model" in reasons[0]


# ---------------------------------------------------------------------------- mutants of vector models

MUTATED_SPECS = ["depthwise_conv2d_v1_2", "strided_slice_float_11", "transpose_float_1", "space_to_batch_v1_2",
                 "local_response_normalization_v1_2", "mean_float_2", "pad_v2_1_float", "transpose_conv2d",
                 "hashtable_lookup_float"]


@pytest.mark.parametrize("spec", MUTATED_SPECS)
def test_mutants_of_vector_models_as_on_the_reference(devices: tuple[Any, Any], spec: str) -> None:
    """Each one-place mutant (a parameter moved, a dimension grown) of a sample of the file's models:
    litert-cpu refuses it, or gives the reference's statuses and outputs."""
    files = sorted(vectors_root().rglob(f"{spec}.json*"))
    if not files:
        pytest.skip(f"no vector file {spec}.json")
    models = [vm for vm in vectors.load_file(str(files[0])) if not vm.expectFailure][::7]
    counts, problems = status_diff.run(*devices, models)
    assert not problems, "\n".join(problems[:20])
    assert counts["agree"] > 0, counts


def test_status_diff_command(capsys: pytest.CaptureFixture) -> None:
    """``python -m nnhal.tools.status_diff``: exit 2 on a bad device, 0 and the counts when all agree."""
    assert status_diff.main(["--device", "no-such-device"]) == 2
    assert "status_diff:" in capsys.readouterr().err
    files = sorted(vectors_root().rglob("transpose_float_1.json*"))
    if not files:
        pytest.skip("no vector file transpose_float_1.json")
    assert status_diff.main([str(files[0])]) == 0
    out = capsys.readouterr().out
    assert "litert-cpu vs sample-all:" in out and " 0 disagree" in out


def _model(operands: list[hal.Operand], ops: list[hal.Operation], ins: list[int], outs: list[int],
           values: bytes = b"") -> hal.Model:
    return hal.Model(main=hal.Subgraph(operands=operands, operations=ops, inputIndexes=ins, outputIndexes=outs),
                     operandValues=values)


def test_fixed_shapes_are_the_reference_dry_run() -> None:
    """fixed_shapes: an operand declared of unknown rank gets the shape the reference computes where the model
    fixes it (a RESHAPE to a constant shape; a SELECT whose condition is a model input: TENSOR_BOOL8 data); none
    where a shape parameter is a model input, or an input's dimensions are left to the request."""
    from nnhal.engine.reference_check import fixed_shapes

    shape = np.array([3, 2], np.int32).tobytes()

    def op(t: T, dims: list, life: L, loc: Optional[hal.DataLocation] = None) -> hal.Operand:
        return hal.Operand(type=t, dimensions=dims, lifetime=life, location=loc or hal.DataLocation())

    const = op(T.TENSOR_INT32, [2], L.CONSTANT_COPY, hal.DataLocation(poolIndex=0, offset=0, length=8))
    reshape = [hal.Operation(OT.RESHAPE, [0, 1], [2]), hal.Operation(OT.RELU, [2], [3])]
    m = _model([op(T.TENSOR_FLOAT32, [2, 3], L.SUBGRAPH_INPUT), const, op(T.TENSOR_FLOAT32, [], L.TEMPORARY_VARIABLE),
                op(T.TENSOR_FLOAT32, [0, 0], L.SUBGRAPH_OUTPUT)], reshape, [0], [3], shape)
    assert fixed_shapes(m, []) == {2: (3, 2), 3: (3, 2)}
    m.main.operands[1] = op(T.TENSOR_INT32, [2], L.SUBGRAPH_INPUT)
    m.main.inputIndexes = [0, 1]
    assert fixed_shapes(m, []) == {}  # NOTE: the shape is the request's
    m = _model([op(T.TENSOR_FLOAT32, [0, 3], L.SUBGRAPH_INPUT), const, op(T.TENSOR_FLOAT32, [], L.TEMPORARY_VARIABLE),
                op(T.TENSOR_FLOAT32, [0, 0], L.SUBGRAPH_OUTPUT)], reshape, [0], [3], shape)
    assert fixed_shapes(m, []) == {}  # NOTE: no dry run: the input's shape is the request's
    select = _model([op(T.TENSOR_BOOL8, [2], L.SUBGRAPH_INPUT), op(T.TENSOR_FLOAT32, [2], L.SUBGRAPH_INPUT),
                     op(T.TENSOR_FLOAT32, [2], L.SUBGRAPH_INPUT), op(T.TENSOR_FLOAT32, [], L.SUBGRAPH_OUTPUT)],
                    [hal.Operation(OT.SELECT, [0, 1, 2], [3])], [0, 1, 2], [3])
    assert fixed_shapes(select, []) == {3: (2,)}


@pytest.mark.parametrize("op", [OT.ADD, OT.SUB, OT.MUL])
@pytest.mark.parametrize("out_scale", [1e-9, 2.0], ids=["multiplier_over_one", "fine"])
def test_dry_run_checks_quantization_without_tables(devices: tuple[Any, Any], op: OT, out_scale: float) -> None:
    """The dry run checks a quantized ADD / SUB / MUL's multipliers without building its table: a
    requantization the reference refuses is the same refusal, with the message of a real run."""
    from nnhal.engine.executor import Executor
    from nnhal.ops.base import OpExecutionError

    x = np.array([[1, 2]], np.uint8)
    ops = [operand(T.TENSOR_QUANT8_ASYMM, [1, 2], L.SUBGRAPH_INPUT, x, 1.0),
           operand(T.TENSOR_QUANT8_ASYMM, [1, 2], L.CONSTANT_COPY, np.array([[3, 4]], np.uint8), 1.0),
           scalar(T.INT32, 0),
           operand(T.TENSOR_QUANT8_ASYMM, [1, 2], L.SUBGRAPH_OUTPUT, np.zeros((1, 2), np.uint8), out_scale)]
    vm = one_op("arith", ops, op, out_scale < 1e-3)
    model = vm.build_model()
    rejection = reference_rejection(model, [])
    try:
        Executor(model, []).run([x])
        real = None
    except OpExecutionError as e:
        real = str(e)
    if op == OT.MUL and out_scale < 1e-3:
        return  # NOTE: the validation refuses it (output scale <= the input scales' product): no run to compare
    assert (None if rejection is None else rejection.message) == real
    assert (real is not None) == (out_scale < 1e-3)
    if op == OT.ADD and real:
        # NOTE: LiteRT aborts the process preparing it: refused (nnhal.drivers.litert.lower)
        assert status_diff.outcome(devices[0], vm).refused
        return
    dev, _ = _same(devices, vm)
    assert dev.execute == (S.GENERAL_FAILURE if real else S.NONE)
