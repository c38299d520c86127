"""RNN, SVDF, BIDIRECTIONAL_SEQUENCE_RNN and UNIDIRECTIONAL_SEQUENCE_RNN kernels
against straightforward per-element references."""

from __future__ import annotations

import numpy as np
import pytest
from tests.prepared_util import assert_cache_round_trip, assert_same_outputs

from nnhal.hal import OperandType, OperationType
from nnhal.ops.base import (
    V1_0,
    V1_2,
    OpExecutionError,
    OpValidationError,
    OutputSpec,
    Tensor,
    match_signature,
)
from nnhal.ops.registry import REGISTRY
from nnhal.ops.run import prepare_operation, run_operation, tensor_info

# every kernel test through validate, prepare (scalars as the model's constants) and execute;
# a test of a kernel's own run-time checks skips validation explicitly (kernel_only)
PHASES = {"scalar_constants": True, "validate": True}

T = OperandType
RNG = np.random.default_rng(7)


def run(op: OperationType, inputs: list, out_types: list) -> list[np.ndarray]:
    ins = []
    for v in inputs:
        if isinstance(v, Tensor):
            ins.append(v)
        elif v is None:
            ins.append(Tensor(T.TENSOR_FLOAT32, None))
        elif isinstance(v, bool):
            ins.append(Tensor(T.BOOL, np.array(v)))
        elif isinstance(v, int):
            ins.append(Tensor(T.INT32, np.array(v, np.int32)))
        else:
            v = np.asarray(v)
            ins.append(Tensor(T.TENSOR_FLOAT16 if v.dtype == np.float16 else T.TENSOR_FLOAT32, v))
    return run_operation(op, ins, [OutputSpec(t, ()) for t in out_types], **PHASES)


def f32(*shape: int) -> np.ndarray:
    return RNG.uniform(-1, 1, size=shape).astype(np.float32)


def ref_step(x, h, w, rw, b, act):
    """Per-unit loops, as the definition reads."""
    batch, units = x.shape[0], w.shape[0]
    out = np.zeros((batch, units))
    for bi in range(batch):
        for u in range(units):
            s = float(b[u])
            s += sum(float(x[bi, i]) * float(w[u, i]) for i in range(x.shape[1]))
            s += sum(float(h[bi, k]) * float(rw[u, k]) for k in range(units))
            out[bi, u] = {0: s, 1: max(s, 0.0), 3: min(max(s, 0.0), 6.0), 4: np.tanh(s)}[act]
    return out


# ---------------------------------------------------------------- RNN

@pytest.mark.parametrize("act", [0, 1, 3, 4])
def test_rnn_matches_reference(act):
    x, w, rw, b, h = f32(3, 5), f32(4, 5), f32(4, 4), f32(4), f32(3, 4)
    state, out = run(OperationType.RNN, [x, w, rw, b, h, act], [T.TENSOR_FLOAT32] * 2)
    np.testing.assert_allclose(out, ref_step(x, h, w, rw, b, act), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(state, out)
    assert out.dtype == np.float32


def test_rnn_float16():
    x, w, rw, b, h = (a.astype(np.float16) for a in (f32(2, 3), f32(4, 3), f32(4, 4), f32(4), f32(2, 4)))
    state, out = run(OperationType.RNN, [x, w, rw, b, h, 1], [T.TENSOR_FLOAT16] * 2)
    assert out.dtype == np.float16
    np.testing.assert_allclose(out, ref_step(x, h, w, rw, b, 1), atol=3e-3)


def test_rnn_bad_shapes():
    with pytest.raises(OpExecutionError):
        run(OperationType.RNN, [f32(2, 3), f32(4, 5), f32(4, 4), f32(4), f32(2, 4), 0], [T.TENSOR_FLOAT32] * 2)
    with pytest.raises(OpExecutionError):  # hidden state of the wrong batch
        run(OperationType.RNN, [f32(2, 3), f32(4, 3), f32(4, 4), f32(4), f32(3, 4), 0], [T.TENSOR_FLOAT32] * 2)


def test_rnn_signatures():
    op = REGISTRY[OperationType.RNN]
    f, h = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16
    match_signature(op, [f] * 5 + [T.INT32], [f, f])
    with pytest.raises(OpValidationError):
        match_signature(op, [h] * 5 + [T.INT32], [h, h], version=V1_0)  # float16 only since 1.2
    match_signature(op, [h] * 5 + [T.INT32], [h, h], version=V1_2)
    with pytest.raises(OpValidationError):
        match_signature(op, [f] * 4 + [h, T.INT32], [f, f])
    with pytest.raises(OpValidationError):
        match_signature(op, [f] * 5 + [T.INT32], [f])


# ---------------------------------------------------------------- SVDF

def ref_svdf(x, wf, wt, bias, state, rank, act):
    batch = x.shape[0]
    n_filters, memory = wt.shape
    units = n_filters // rank
    mem = state.reshape(batch, n_filters, memory).astype(np.float64)
    # the state's last entry per filter is the free slot (zeroed by the previous step's shift):
    # the new feature activation goes there
    new = np.concatenate([mem[:, :, :-1], (x @ wf.T)[:, :, None]], axis=2)
    filt = (new * wt[None]).sum(axis=2)
    out = np.array([[filt[b, u * rank:(u + 1) * rank].sum() for u in range(units)] for b in range(batch)])
    if bias is not None:
        out = out + bias
    if act == 1:
        out = np.maximum(out, 0)
    next_state = np.concatenate([new[:, :, 1:], np.zeros((batch, n_filters, 1))], axis=2)
    return next_state.reshape(batch, -1), out


@pytest.mark.parametrize("rank,with_bias,act", [(1, False, 0), (2, True, 1), (2, False, 0)])
def test_svdf_matches_reference(rank, with_bias, act):
    batch, inp, units, memory = 2, 3, 4, 5
    n_filters = units * rank
    x, wf, wt = f32(batch, inp), f32(n_filters, inp), f32(n_filters, memory)
    bias = f32(units) if with_bias else None
    state = f32(batch, n_filters * memory)
    st, out = run(OperationType.SVDF, [x, wf, wt, bias, state, rank, act], [T.TENSOR_FLOAT32] * 2)
    ref_st, ref_out = ref_svdf(x, wf, wt, bias, state, rank, act)
    np.testing.assert_allclose(out, ref_out, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(st, ref_st, rtol=1e-5, atol=1e-6)
    # the memory shifts left each step: the last entry of every filter is zero
    assert np.all(st.reshape(batch, n_filters, memory)[:, :, -1] == 0)


def test_svdf_float16_and_errors(kernel_only):
    x, wf, wt, state = (a.astype(np.float16) for a in (f32(1, 3), f32(2, 3), f32(2, 4), f32(1, 8)))
    st, out = run(OperationType.SVDF, [x, wf, wt, None, state, 1, 0], [T.TENSOR_FLOAT16] * 2)
    assert st.dtype == out.dtype == np.float16 and out.shape == (1, 2) and st.shape == (1, 8)
    with pytest.raises(OpExecutionError):  # rank does not divide the filters
        run(OperationType.SVDF, [f32(1, 3), f32(3, 3), f32(3, 4), None, f32(1, 12), 2, 0], [T.TENSOR_FLOAT32] * 2)
    with pytest.raises(OpExecutionError):  # rank 0
        run(OperationType.SVDF, [f32(1, 3), f32(2, 3), f32(2, 4), None, f32(1, 8), 0, 0], [T.TENSOR_FLOAT32] * 2)
    with pytest.raises(OpExecutionError):  # state shape
        run(OperationType.SVDF, [f32(1, 3), f32(2, 3), f32(2, 4), None, f32(1, 6), 1, 0], [T.TENSOR_FLOAT32] * 2)
    assert 3 in REGISTRY[OperationType.SVDF].omittable_inputs


# ---------------------------------------------------------------- sequence RNNs

def ref_sequence(xs_tm, h, w, rw, b, act, reverse=False, aux=None, aux_w=None):
    out = np.zeros((xs_tm.shape[0], xs_tm.shape[1], w.shape[0]))
    order = range(xs_tm.shape[0] - 1, -1, -1) if reverse else range(xs_tm.shape[0])
    for t in order:
        x = xs_tm[t]
        bb = b + (aux[t] @ aux_w.T if aux is not None else 0)
        h = _step(x, h, w, rw, bb, act)
        out[t] = h
    return out, h


def _step(x, h, w, rw, b, act):
    s = x @ w.T + h @ rw.T + b
    return {0: s, 1: np.maximum(s, 0), 4: np.tanh(s)}[act]


@pytest.mark.parametrize("time_major", [0, 1])
def test_unidirectional(time_major):
    n_t, batch, inp, units = 4, 2, 3, 5
    x_tm = f32(n_t, batch, inp)
    w, rw, b, h = f32(units, inp), f32(units, units), f32(units), f32(batch, units)
    x = x_tm if time_major else x_tm.transpose(1, 0, 2).copy()
    out, state = run(OperationType.UNIDIRECTIONAL_SEQUENCE_RNN, [x, w, rw, b, h, 4, time_major],
                     [T.TENSOR_FLOAT32] * 2)
    ref, last = ref_sequence(x_tm, h, w, rw, b, 4)
    if not time_major:
        ref = ref.transpose(1, 0, 2)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state, last, rtol=1e-5, atol=1e-6)
    (only,) = run(OperationType.UNIDIRECTIONAL_SEQUENCE_RNN, [x, w, rw, b, h, 4, time_major], [T.TENSOR_FLOAT32])
    np.testing.assert_array_equal(only, out)


def test_unidirectional_errors_and_signatures():
    x, w, rw, b, h = f32(2, 3, 4), f32(5, 4), f32(5, 5), f32(5), f32(2, 5)
    with pytest.raises(OpExecutionError):
        run(OperationType.UNIDIRECTIONAL_SEQUENCE_RNN, [x, w, rw, b, h, 0, 2], [T.TENSOR_FLOAT32])
    with pytest.raises(OpExecutionError):  # hidden state batch does not match time-major input
        run(OperationType.UNIDIRECTIONAL_SEQUENCE_RNN, [x, w, rw, b, h, 0, 1], [T.TENSOR_FLOAT32])
    op = REGISTRY[OperationType.UNIDIRECTIONAL_SEQUENCE_RNN]
    f = T.TENSOR_FLOAT32
    match_signature(op, [f] * 5 + [T.INT32, T.INT32], [f])
    with pytest.raises(OpValidationError):  # the state output arrived in 1.3
        match_signature(op, [f] * 5 + [T.INT32, T.INT32], [f, f], version=V1_2)
    with pytest.raises(OpValidationError):  # timeMajor is INT32 here, not BOOL
        match_signature(op, [f] * 5 + [T.INT32, T.BOOL], [f])


def bidi_inputs(time_major, mode, n_t=3, batch=2, inp=4, fw_u=5, bw_u=3):
    x_tm, aux_tm = f32(n_t, batch, inp), f32(n_t, batch, inp)
    fw = [f32(fw_u, inp), f32(fw_u, fw_u), f32(fw_u), f32(batch, fw_u)]
    bw = [f32(bw_u, inp), f32(bw_u, bw_u), f32(bw_u), f32(batch, bw_u)]
    aux_w = [f32(fw_u, inp), f32(bw_u, inp)] if mode == "cross" else [None, None]
    lay = (lambda a: a) if time_major else (lambda a: a.transpose(1, 0, 2).copy())
    aux = lay(aux_tm) if mode != "none" else None
    return x_tm, aux_tm, fw, bw, aux_w, [lay(x_tm), *fw, *bw, aux, *aux_w]


@pytest.mark.parametrize("time_major", [False, True])
@pytest.mark.parametrize("mode", ["none", "parallel", "cross"])
@pytest.mark.parametrize("merge", [False, True])
def test_bidirectional(time_major, mode, merge):
    x_tm, aux_tm, fw, bw, aux_w, ins = bidi_inputs(time_major, mode)
    act = 1
    n_out = 3 if merge else 4
    outs = run(OperationType.BIDIRECTIONAL_SEQUENCE_RNN, ins + [act, time_major, merge], [T.TENSOR_FLOAT32] * n_out)
    cross = mode == "cross"
    fw_ref, fw_last = ref_sequence(x_tm, fw[3], fw[0], fw[1], fw[2], act,
                                   aux=aux_tm if cross else None, aux_w=aux_w[0])
    bw_ref, bw_last = ref_sequence(aux_tm if mode == "parallel" else x_tm, bw[3], bw[0], bw[1], bw[2], act,
                                   reverse=True, aux=aux_tm if cross else None, aux_w=aux_w[1])
    lay = (lambda a: a) if time_major else (lambda a: a.transpose(1, 0, 2))
    if merge:
        np.testing.assert_allclose(outs[0], lay(np.concatenate([fw_ref, bw_ref], axis=2)), rtol=1e-5, atol=1e-6)
        states = outs[1:]
    else:
        np.testing.assert_allclose(outs[0], lay(fw_ref), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(outs[1], lay(bw_ref), rtol=1e-5, atol=1e-6)
        states = outs[2:]
    # the backward cell's last state is the one after time step 0
    np.testing.assert_allclose(states[0], fw_last, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(states[1], bw_last, rtol=1e-5, atol=1e-6)


def test_bidirectional_float16_without_states():
    _, _, _, _, _, ins = bidi_inputs(True, "none")
    ins = [a.astype(np.float16) if a is not None else Tensor(T.TENSOR_FLOAT16, None) for a in ins]
    fw_out, bw_out = run(OperationType.BIDIRECTIONAL_SEQUENCE_RNN, ins + [0, True, False], [T.TENSOR_FLOAT16] * 2)
    assert fw_out.dtype == np.float16 and fw_out.shape == (3, 2, 5) and bw_out.shape == (3, 2, 3)


def test_bidirectional_empty_aux_counts_as_omitted():
    _, _, _, _, _, ins = bidi_inputs(True, "none")
    ref = run(OperationType.BIDIRECTIONAL_SEQUENCE_RNN, ins + [0, True, True], [T.TENSOR_FLOAT32])
    ins[9:12] = [np.zeros((0,), np.float32)] * 3
    got = run(OperationType.BIDIRECTIONAL_SEQUENCE_RNN, ins + [0, True, True], [T.TENSOR_FLOAT32])
    np.testing.assert_array_equal(got[0], ref[0])


def test_bidirectional_errors():
    _, _, _, _, _, ins = bidi_inputs(True, "cross")
    with pytest.raises(OpExecutionError):  # merged outputs with 2 outputs
        run(OperationType.BIDIRECTIONAL_SEQUENCE_RNN, ins + [0, True, True], [T.TENSOR_FLOAT32] * 2)
    with pytest.raises(OpExecutionError):  # separate outputs with 1 output
        run(OperationType.BIDIRECTIONAL_SEQUENCE_RNN, ins + [0, True, False], [T.TENSOR_FLOAT32])
    bad = list(ins)
    bad[11] = None  # only one of the aux weights
    with pytest.raises(OpExecutionError):
        run(OperationType.BIDIRECTIONAL_SEQUENCE_RNN, bad + [0, True, False], [T.TENSOR_FLOAT32] * 2)
    bad = list(ins)
    bad[4] = f32(7, 5)  # fw hidden state batch
    with pytest.raises(OpExecutionError):
        run(OperationType.BIDIRECTIONAL_SEQUENCE_RNN, bad + [0, True, False], [T.TENSOR_FLOAT32] * 2)
    bad = list(ins)
    bad[0] = np.zeros((0, 2, 4), np.float32)  # zero-sized regular input
    with pytest.raises(OpExecutionError):
        run(OperationType.BIDIRECTIONAL_SEQUENCE_RNN, bad + [0, True, False], [T.TENSOR_FLOAT32] * 2)


def test_bidirectional_signatures():
    op = REGISTRY[OperationType.BIDIRECTIONAL_SEQUENCE_RNN]
    f, h = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16
    params = [T.INT32, T.BOOL, T.BOOL]
    for n in (1, 2):
        match_signature(op, [f] * 12 + params, [f] * n, version=V1_2)
    for n in (3, 4):
        match_signature(op, [h] * 12 + params, [h] * n)
        with pytest.raises(OpValidationError):
            match_signature(op, [h] * 12 + params, [h] * n, version=V1_2)
    with pytest.raises(OpValidationError):
        match_signature(op, [f] * 12 + [T.INT32, T.INT32, T.BOOL], [f, f])
    with pytest.raises(OpValidationError):
        match_signature(op, [f] * 11 + [h] + params, [f, f])
    with pytest.raises(OpValidationError):
        match_signature(op, [f] * 12 + params, [f] * 5)


# ---------------------------------------------------------------- the Prepare/Eval split

def _tensors(inputs: list) -> list[Tensor]:
    out = []
    for v in inputs:
        if isinstance(v, Tensor):
            out.append(v)
        elif v is None:
            out.append(Tensor(T.TENSOR_FLOAT32, None))
        elif isinstance(v, bool):
            out.append(Tensor(T.BOOL, np.array(v)))
        elif isinstance(v, int):
            out.append(Tensor(T.INT32, np.array(v, np.int32)))
        else:
            v = np.asarray(v)
            out.append(Tensor(T.TENSOR_FLOAT16 if v.dtype == np.float16 else T.TENSOR_FLOAT32, v))
    return out


def _split_cases() -> dict:
    """op -> (inputs, number of outputs, positions of the data inputs: the rest may be constants)."""
    x, w, rw, b, h = f32(3, 5), f32(4, 5), f32(4, 4), f32(4), f32(3, 4)
    n_f, mem = 4, 3
    svdf = [f32(2, 5), f32(n_f, 5), f32(n_f, mem), f32(2), f32(2, n_f * mem), 2, 1]
    xs = f32(2, 4, 5)
    _, _, _, _, _, bidi = bidi_inputs(False, "cross")
    return {
        OperationType.RNN: ([x, w, rw, b, h, 4], 2, {0, 4}),
        OperationType.SVDF: (svdf, 2, {0, 4}),
        OperationType.UNIDIRECTIONAL_SEQUENCE_RNN: ([xs, w, rw, b, f32(2, 4), 1, 0], 2, {0, 4}),
        OperationType.BIDIRECTIONAL_SEQUENCE_RNN: (bidi + [1, False, False], 4, {0, 4, 8, 9}),
    }


@pytest.mark.parametrize("op", list(_split_cases()))
def test_prepared_weights_equal_run_time_weights(op):
    """Constant weights, biases and scalars are converted and parsed once, at
    prepare (the conformance vectors pass them as model inputs): the outputs
    are those of the run-time path, bit for bit, execution after execution,
    and the same through the compilation cache (prepared again on load: the
    float64 copies are rebuilt from the model's own constants, not stored)."""
    inputs, n_out, data = _split_cases()[op]
    ins = _tensors(inputs)
    outs = [OutputSpec(T.TENSOR_FLOAT32, ())] * n_out
    const = prepare_operation(op, [tensor_info(t, constant=k not in data and t.data is not None)
                                   for k, t in enumerate(ins)], outs)
    assert const.state.params is not None and const.state.f64
    dynamic = prepare_operation(op, [tensor_info(t) for t in ins], outs)
    assert dynamic.state.params is None and not dynamic.state.f64
    want = dynamic.run(ins)
    for _ in range(2):
        assert_same_outputs(const.run(ins), want)
    assert_cache_round_trip(op, ins, outs, [k not in data for k in range(len(ins))], want)


@pytest.mark.parametrize("op,pos,bad", [
    (OperationType.RNN, 5, 9),  # no such activation
    (OperationType.SVDF, 5, 0),  # rank 0
    (OperationType.SVDF, 5, 3),  # rank does not divide the filters
    (OperationType.UNIDIRECTIONAL_SEQUENCE_RNN, 6, 2),  # timeMajor 2
    (OperationType.BIDIRECTIONAL_SEQUENCE_RNN, 14, True),  # merged outputs with 4 outputs
])
def test_bad_constant_parameter_fails_every_execution(op, pos, bad):
    """A bad constant parameter is prepared without error; every execution
    fails with OpExecutionError (GENERAL_FAILURE), as when it is an input."""
    inputs, n_out, data = _split_cases()[op]
    inputs = list(inputs)
    inputs[pos] = bad
    ins = _tensors(inputs)
    outs = [OutputSpec(T.TENSOR_FLOAT32, ())] * n_out
    const = prepare_operation(op, [tensor_info(t, constant=k not in data and t.data is not None)
                                   for k, t in enumerate(ins)], outs)
    dynamic = prepare_operation(op, [tensor_info(t) for t in ins], outs)
    for prepared in (const, dynamic, const):
        with pytest.raises(OpExecutionError):
            prepared.run(ins)
