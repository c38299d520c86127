"""LSTM, BIDIRECTIONAL_SEQUENCE_LSTM, UNIDIRECTIONAL_SEQUENCE_LSTM,
QUANTIZED_16BIT_LSTM and QUANTIZED_LSTM: float kernels against a float64
reference written from the spec equations, the gemmlowp fixed-point functions
against float math, signatures, and run-time error paths."""

from __future__ import annotations

import gzip
import json
import math
import os

import numpy as np
import pytest

from nnhal.hal import OperandType, OperationType
from nnhal.ops import fixedpoint as FP
from nnhal.ops import lstm_kernels as K
from nnhal.ops.base import (
    V1_0,
    V1_1,
    V1_2,
    V1_3,
    OpExecutionError,
    OpValidationError,
    OutputSpec,
    Tensor,
    match_signature,
)
from nnhal.ops.registry import REGISTRY
from nnhal.ops.run import run_operation

# every kernel test through validate, prepare (scalars as the model's constants) and execute
PHASES = {"scalar_constants": True, "validate": True}

T = OperandType
OP = OperationType
RNG = np.random.default_rng(11)
CONFORMANCE = "/work/shared/conformance"


def f32(*shape: int, scale: float = 0.5) -> np.ndarray:
    return (RNG.uniform(-1, 1, size=shape) * scale).astype(np.float32)


def tensor(v, float_type: T = T.TENSOR_FLOAT32) -> Tensor:
    if isinstance(v, Tensor):
        return v
    if v is None:
        return Tensor(float_type, None)
    if isinstance(v, bool):
        return Tensor(T.BOOL, np.array(v))
    if isinstance(v, int):
        return Tensor(T.INT32, np.array(v, np.int32))
    if isinstance(v, float):
        if float_type == T.TENSOR_FLOAT16:
            return Tensor(T.FLOAT16, np.array(v, np.float16))
        return Tensor(T.FLOAT32, np.array(v, np.float32))
    v = np.asarray(v)
    return Tensor(float_type, v.astype(np.float16 if float_type == T.TENSOR_FLOAT16 else np.float32))


def run(op: OperationType, inputs: list, out_types: list, float_type: T = T.TENSOR_FLOAT32) -> list[np.ndarray]:
    return run_operation(op, [tensor(v, float_type) for v in inputs], [OutputSpec(t, ()) for t in out_types],
                         **PHASES)


# ----------------------------------------------------------------------------
# float64 reference from the spec equations


def make_params(n_input: int, n_cell: int, n_output: int | None = None, cifg: bool = False,
                peephole: bool = False, layer_norm: bool = False, projection: bool = False,
                proj_bias: bool = False) -> dict:
    n_output = n_cell if n_output is None else n_output
    p = {
        "wx": [None if (cifg and g == 0) else f32(n_cell, n_input) for g in range(4)],
        "wh": [None if (cifg and g == 0) else f32(n_cell, n_output) for g in range(4)],
        "b": [None if (cifg and g == 0) else f32(n_cell) for g in range(4)],
        "peep": [None if (not peephole or g == 2 or (cifg and g == 0)) else f32(n_cell) for g in range(4)],
        "ln": [None if (not layer_norm or (cifg and g == 0)) else (1 + f32(n_cell)) for g in range(4)],
        "pw": f32(n_output, n_cell) if projection else None,
        "pb": f32(n_output) if proj_bias else None,
    }
    return p


def ref_step(x, h, c, p, act=4, cell_clip=0.0, proj_clip=0.0):
    """One LSTM step in float64, per batch row (gate order i, f, c, o)."""
    x, h, c = (np.asarray(a, np.float64) for a in (x, h, c))
    cifg = p["wx"][0] is None
    acts = {0: lambda v: v, 1: lambda v: np.maximum(v, 0), 3: lambda v: np.clip(v, 0, 6), 4: np.tanh,
            6: lambda v: 1 / (1 + np.exp(-v))}
    sig = acts[6]
    hs, cs = [], []
    for bi in range(x.shape[0]):
        def pre(g, cell, bi=bi):
            v = p["wx"][g].astype(np.float64) @ x[bi] + p["wh"][g].astype(np.float64) @ h[bi]
            if p["peep"][g] is not None:
                v = v + p["peep"][g] * cell
            if p["ln"][1] is not None:
                v = (v - v.mean()) / np.sqrt(v.var() + 1e-8) * p["ln"][g] + p["b"][g]
            else:
                v = v + p["b"][g]
            return v

        f = sig(pre(1, c[bi]))
        i = 1 - f if cifg else sig(pre(0, c[bi]))
        g = acts[act](pre(2, c[bi]))
        cn = f * c[bi] + i * g
        if cell_clip > 0:
            cn = np.clip(cn, -cell_clip, cell_clip)
        o = sig(pre(3, cn))
        hn = o * (acts[act](cn) if act != 0 else g)
        if p["pw"] is not None:
            hn = p["pw"].astype(np.float64) @ hn + (0 if p["pb"] is None else p["pb"])
            if proj_clip > 0:
                hn = np.clip(hn, -proj_clip, proj_clip)
        hs.append(hn)
        cs.append(cn)
    return np.array(hs), np.array(cs)


def ref_sequence(xs, h, c, p, act=4, cell_clip=0.0, proj_clip=0.0, reverse=False):
    outs = [None] * len(xs)
    order = range(len(xs) - 1, -1, -1) if reverse else range(len(xs))
    for t in order:
        h, c = ref_step(xs[t], h, c, p, act, cell_clip, proj_clip)
        outs[t] = h
    return np.array(outs), h, c


def direction_inputs(p: dict) -> list:
    """Inputs 1..17 of LSTM (weights, peephole, biases, projection)."""
    return [*p["wx"], *p["wh"], p["peep"][0], p["peep"][1], p["peep"][3], *p["b"], p["pw"], p["pb"]]


def lstm_inputs(x, h, c, p, act=4, cell_clip=0.0, proj_clip=0.0, with_ln=None) -> list:
    ins = [x, *direction_inputs(p), h, c, act, cell_clip, proj_clip]
    if with_ln or p["ln"][1] is not None:
        ins += p["ln"]
    return ins


def n_out_of(p: dict) -> int:
    return p["wh"][1].shape[1]


# ----------------------------------------------------------------------------
# LSTM

VARIANTS = {
    "basic": {},
    "cifg_peephole": {"cifg": True, "peephole": True},
    "peephole_projection": {"peephole": True, "projection": True, "proj_bias": True, "n_output": 3},
    "projection_no_bias": {"projection": True, "n_output": 2},
    "layer_norm": {"layer_norm": True, "peephole": True, "projection": True, "n_output": 3},
    "layer_norm_cifg": {"layer_norm": True, "cifg": True},
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("act", [4, 1, 6])
def test_lstm_matches_reference(variant, act):
    kw = dict(VARIANTS[variant])
    n_output = kw.pop("n_output", None)
    p = make_params(3, 4, n_output, **kw)
    x, h, c = f32(2, 3), f32(2, n_out_of(p)), f32(2, 4)
    scratch, h_out, c_out, out = run(OP.LSTM, lstm_inputs(x, h, c, p, act), [T.TENSOR_FLOAT32] * 4)
    rh, rc = ref_step(x, h, c, p, act)
    np.testing.assert_allclose(out, rh, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c_out, rc, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(h_out, out)
    assert scratch.shape == (2, 4 * (3 if kw.get("cifg") else 4))


def test_lstm_clipping():
    p = make_params(3, 4, 2, projection=True)
    for a in p["wx"] + p["wh"]:
        a *= 8
    x, h, c = f32(2, 3), f32(2, 2), f32(2, 4) * 8
    _, _, c_out, out = run(OP.LSTM, lstm_inputs(x, h, c, p, 4, 0.3, 0.05), [T.TENSOR_FLOAT32] * 4)
    rh, rc = ref_step(x, h, c, p, 4, 0.3, 0.05)
    assert np.abs(c_out).max() <= np.float32(0.3) and np.abs(out).max() <= np.float32(0.05)
    np.testing.assert_allclose(out, rh, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c_out, rc, rtol=1e-5, atol=1e-6)


def test_lstm_activation_none_uses_cell_gate():
    """With activation NONE the reference's output is o * (cell gate input)."""
    p = make_params(3, 4)
    x, h, c = f32(2, 3), f32(2, 4), f32(2, 4)
    _, _, c_out, out = run(OP.LSTM, lstm_inputs(x, h, c, p, 0), [T.TENSOR_FLOAT32] * 4)
    rh, rc = ref_step(x, h, c, p, 0)
    np.testing.assert_allclose(out, rh, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c_out, rc, rtol=1e-5, atol=1e-6)


def test_lstm_float16():
    p = make_params(3, 4, cifg=True, peephole=True)
    for lst in (p["wx"], p["wh"], p["b"], p["peep"]):
        for k, a in enumerate(lst):
            if a is not None:
                lst[k] = a.astype(np.float16).astype(np.float32)
    x, h, c = (a.astype(np.float16) for a in (f32(2, 3), f32(2, 4), f32(2, 4)))
    outs = run(OP.LSTM, lstm_inputs(x, h, c, p, 4, 0.0, 0.0), [T.TENSOR_FLOAT16] * 4, T.TENSOR_FLOAT16)
    assert all(o.dtype == np.float16 for o in outs)
    rh, rc = ref_step(x, h, c, p)
    np.testing.assert_allclose(outs[3], rh, atol=3e-3)
    np.testing.assert_allclose(outs[2], rc, atol=3e-3)


def test_lstm_errors():
    p = make_params(3, 4)
    x, h, c = f32(2, 3), f32(2, 4), f32(2, 4)
    outs = [T.TENSOR_FLOAT32] * 4
    bad = lstm_inputs(x, h, c, p)
    bad[2] = f32(4, 2)  # input-to-forget weights with the wrong input size
    with pytest.raises(OpExecutionError):
        run(OP.LSTM, bad, outs)
    bad = lstm_inputs(x, h, c, p)
    bad[5] = None  # recurrent-to-input omitted while input-to-input is given
    with pytest.raises(OpExecutionError):
        run(OP.LSTM, bad, outs)
    bad = lstm_inputs(x, h, c, p)
    bad[10] = f32(4)  # a lone peephole weight
    with pytest.raises(OpExecutionError):
        run(OP.LSTM, bad, outs)
    bad = lstm_inputs(x, h, c, p)
    bad[17] = f32(4)  # projection bias without projection weights
    with pytest.raises(OpExecutionError):
        run(OP.LSTM, bad, outs)
    with pytest.raises(OpExecutionError):
        run(OP.LSTM, lstm_inputs(x, h, c, p, 4, -1.0), outs)  # negative cell clip
    with pytest.raises(OpExecutionError):
        run(OP.LSTM, lstm_inputs(f32(2, 3, 1), h, c, p), outs)  # rank 3 input
    bad = lstm_inputs(x, h, c, p)
    bad[13] = None  # required forget gate bias omitted
    with pytest.raises(OpExecutionError):
        run(OP.LSTM, bad, outs)
    bad = lstm_inputs(x, h, c, p, with_ln=True)
    bad[24] = f32(4)  # partial layer normalization weights
    with pytest.raises(OpExecutionError):
        run(OP.LSTM, bad, outs)


def test_lstm_signatures():
    op = REGISTRY[OP.LSTM]
    f, h = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16
    ins = [f] * 20 + [T.INT32, T.FLOAT32, T.FLOAT32]
    assert match_signature(op, ins, [f] * 4, V1_0).version == V1_0
    with pytest.raises(OpValidationError):
        match_signature(op, ins + [f] * 4, [f] * 4, V1_1)  # layer norm inputs are HAL 1.2
    match_signature(op, ins + [f] * 4, [f] * 4, V1_2)
    with pytest.raises(OpValidationError):
        match_signature(op, ins + [f] * 2, [f] * 4, V1_3)  # 23 or 27 inputs only
    hins = [h] * 20 + [T.INT32, T.FLOAT16, T.FLOAT16]
    with pytest.raises(OpValidationError):
        match_signature(op, hins, [h] * 4, V1_1)
    match_signature(op, hins, [h] * 4, V1_2)
    with pytest.raises(OpValidationError):
        match_signature(op, [h] * 20 + [T.INT32, T.FLOAT32, T.FLOAT32], [h] * 4, V1_3)  # clip type
    with pytest.raises(OpValidationError):
        match_signature(op, ins, [f] * 3 + [h], V1_3)


# ----------------------------------------------------------------------------
# UNIDIRECTIONAL_SEQUENCE_LSTM


def uni_inputs(x, h, c, p, act=4, time_major=True, cell_clip=0.0, proj_clip=0.0) -> list:
    return [x, *direction_inputs(p), h, c, act, cell_clip, proj_clip, time_major, *p["ln"]]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_unidirectional_matches_reference(variant):
    kw = dict(VARIANTS[variant])
    n_output = kw.pop("n_output", None)
    p = make_params(3, 4, n_output, **kw)
    no = n_out_of(p)
    xs, h, c = f32(5, 2, 3), f32(2, no), f32(2, 4)
    out, h_out, c_out = run(OP.UNIDIRECTIONAL_SEQUENCE_LSTM, uni_inputs(xs, h, c, p), [T.TENSOR_FLOAT32] * 3)
    r_out, rh, rc = ref_sequence(xs, h, c, p)
    np.testing.assert_allclose(out, r_out, rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(h_out, rh, rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(c_out, rc, rtol=1e-5, atol=2e-6)
    # batch-major gives the transposed result
    (bm,) = run(OP.UNIDIRECTIONAL_SEQUENCE_LSTM, uni_inputs(np.swapaxes(xs, 0, 1), h, c, p, time_major=False),
                [T.TENSOR_FLOAT32])
    np.testing.assert_allclose(bm, np.swapaxes(out, 0, 1), rtol=1e-6, atol=1e-7)


def test_unidirectional_errors_and_signatures():
    p = make_params(3, 4)
    xs, h, c = f32(5, 2, 3), f32(2, 4), f32(2, 4)
    with pytest.raises(OpExecutionError):
        run(OP.UNIDIRECTIONAL_SEQUENCE_LSTM, uni_inputs(xs, f32(3, 4), c, p), [T.TENSOR_FLOAT32])  # state batch
    with pytest.raises(OpExecutionError):
        run(OP.UNIDIRECTIONAL_SEQUENCE_LSTM, uni_inputs(f32(2, 3), h, c, p), [T.TENSOR_FLOAT32])  # rank 2
    op = REGISTRY[OP.UNIDIRECTIONAL_SEQUENCE_LSTM]
    f = T.TENSOR_FLOAT32
    ins = [f] * 20 + [T.INT32, T.FLOAT32, T.FLOAT32, T.BOOL] + [f] * 4
    match_signature(op, ins, [f], V1_2)
    with pytest.raises(OpValidationError):
        match_signature(op, ins, [f] * 3, V1_2)  # state outputs are HAL 1.3
    match_signature(op, ins, [f] * 3, V1_3)
    with pytest.raises(OpValidationError):
        match_signature(op, ins[:-1], [f], V1_3)
    with pytest.raises(OpValidationError):
        match_signature(op, ins[:23] + [T.INT32] + ins[24:], [f], V1_3)


# ----------------------------------------------------------------------------
# BIDIRECTIONAL_SEQUENCE_LSTM


def bidi_inputs(x, fw, bw, states, aux=None, fw_aux=None, bw_aux=None, act=4, merge=False,
                time_major=True) -> list:
    fw_aux = fw_aux or [None] * 4
    bw_aux = bw_aux or [None] * 4
    return [x, *direction_inputs(fw), *direction_inputs(bw), *states, aux, *fw_aux, *bw_aux,
            act, 0.0, 0.0, merge, time_major, *fw["ln"], *bw["ln"]]


def _states(fw, bw, batch):
    return [f32(batch, n_out_of(fw)), f32(batch, 4), f32(batch, n_out_of(bw)), f32(batch, 4)]


@pytest.mark.parametrize("variant", ["basic", "cifg_peephole", "layer_norm", "peephole_projection"])
def test_bidirectional_matches_reference(variant):
    kw = dict(VARIANTS[variant])
    n_output = kw.pop("n_output", None)
    fw, bw = make_params(3, 4, n_output, **kw), make_params(3, 4, n_output, **kw)
    xs = f32(4, 2, 3)
    st = _states(fw, bw, 2)
    outs = run(OP.BIDIRECTIONAL_SEQUENCE_LSTM, bidi_inputs(xs, fw, bw, st), [T.TENSOR_FLOAT32] * 6)
    rf, rfh, rfc = ref_sequence(xs, st[0], st[1], fw)
    rb, rbh, rbc = ref_sequence(xs, st[2], st[3], bw, reverse=True)
    for got, want in zip(outs, [rf, rb, rfh, rfc, rbh, rbc], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6)
    (merged,) = run(OP.BIDIRECTIONAL_SEQUENCE_LSTM, bidi_inputs(xs, fw, bw, st, merge=True), [T.TENSOR_FLOAT32])
    np.testing.assert_array_equal(merged, np.concatenate(outs[:2], axis=2))
    bm = run(OP.BIDIRECTIONAL_SEQUENCE_LSTM, bidi_inputs(np.swapaxes(xs, 0, 1), fw, bw, st, time_major=False),
             [T.TENSOR_FLOAT32] * 2)
    np.testing.assert_allclose(bm[0], np.swapaxes(outs[0], 0, 1), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(bm[1], np.swapaxes(outs[1], 0, 1), rtol=1e-6, atol=1e-7)


def test_bidirectional_aux_linking():
    fw, bw = make_params(3, 4), make_params(3, 4)
    xs, aux = f32(4, 2, 3), f32(4, 2, 3)
    st = _states(fw, bw, 2)
    # parallel linking: the backward cell reads the auxiliary input instead
    f_out, b_out = run(OP.BIDIRECTIONAL_SEQUENCE_LSTM, bidi_inputs(xs, fw, bw, st, aux=aux), [T.TENSOR_FLOAT32] * 2)
    np.testing.assert_allclose(f_out, ref_sequence(xs, st[0], st[1], fw)[0], rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(b_out, ref_sequence(aux, st[2], st[3], bw, reverse=True)[0], rtol=1e-5, atol=2e-6)
    # cross linking: aux weights add W_aux . aux to every gate; equivalent to a wider input
    fa, ba = [f32(4, 3) for _ in range(4)], [f32(4, 3) for _ in range(4)]
    f_out, b_out = run(OP.BIDIRECTIONAL_SEQUENCE_LSTM, bidi_inputs(xs, fw, bw, st, aux, fa, ba),
                       [T.TENSOR_FLOAT32] * 2)
    wide = np.concatenate([xs, aux], axis=2)
    fw_w = dict(fw, wx=[np.concatenate([a, b], axis=1) for a, b in zip(fw["wx"], fa, strict=True)])
    bw_w = dict(bw, wx=[np.concatenate([a, b], axis=1) for a, b in zip(bw["wx"], ba, strict=True)])
    np.testing.assert_allclose(f_out, ref_sequence(wide, st[0], st[1], fw_w)[0], rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(b_out, ref_sequence(wide, st[2], st[3], bw_w, reverse=True)[0], rtol=1e-5, atol=2e-6)


def test_bidirectional_errors_and_signatures():
    fw, bw = make_params(3, 4), make_params(3, 4)
    xs = f32(4, 2, 3)
    st = _states(fw, bw, 2)
    with pytest.raises(OpExecutionError):  # merge_outputs with two outputs
        run(OP.BIDIRECTIONAL_SEQUENCE_LSTM, bidi_inputs(xs, fw, bw, st, merge=True), [T.TENSOR_FLOAT32] * 2)
    with pytest.raises(OpExecutionError):  # aux weights without aux input
        run(OP.BIDIRECTIONAL_SEQUENCE_LSTM, bidi_inputs(xs, fw, bw, st, None, [f32(4, 3)] * 4, [f32(4, 3)] * 4),
            [T.TENSOR_FLOAT32] * 2)
    with pytest.raises(OpExecutionError):  # aux input with another batch size
        run(OP.BIDIRECTIONAL_SEQUENCE_LSTM, bidi_inputs(xs, fw, bw, st, aux=f32(4, 3, 3)), [T.TENSOR_FLOAT32] * 2)
    op = REGISTRY[OP.BIDIRECTIONAL_SEQUENCE_LSTM]
    f, h = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16
    ins = [f] * 48 + [T.INT32, T.FLOAT32, T.FLOAT32, T.BOOL, T.BOOL] + [f] * 8
    for n in (1, 2):
        match_signature(op, ins, [f] * n, V1_2)
    for n in (5, 6):
        with pytest.raises(OpValidationError):
            match_signature(op, ins, [f] * n, V1_2)
        match_signature(op, ins, [f] * n, V1_3)
    with pytest.raises(OpValidationError):
        match_signature(op, ins, [f] * 3, V1_3)
    hins = [h] * 48 + [T.INT32, T.FLOAT16, T.FLOAT16, T.BOOL, T.BOOL] + [h] * 8
    match_signature(op, hins, [h] * 2, V1_2)
    with pytest.raises(OpValidationError):
        match_signature(op, hins, [f] * 2, V1_3)


# ----------------------------------------------------------------------------
# gemmlowp fixed point


@pytest.mark.parametrize("int_bits", [0, 1, 3, 4, 6])
def test_fixed_point_logistic_tanh_accuracy(int_bits):
    raw = np.arange(-32768, 32768, dtype=np.int64)
    real = raw / 2.0 ** (15 - int_bits)
    lg = K.logistic16(raw, int_bits) / 32768.0
    th = K.tanh16(raw, int_bits) / 32768.0
    assert np.abs(lg - 1 / (1 + np.exp(-real))).max() < 3e-4
    assert np.abs(th - np.tanh(real)).max() < 4e-4
    assert K.logistic16(np.array([0]), int_bits)[0] == 16384
    assert K.tanh16(np.array([0]), int_bits)[0] == 0
    assert lg.min() >= 0 and th.min() >= -1 and th.max() < 1
    assert np.diff(K.tanh16(raw, int_bits)).min() >= -16  # monotonic up to fixed-point noise


@pytest.mark.parametrize("int_bits", [0, 3, 6])
def test_activation_tables_equal_the_fixed_point_functions(int_bits):
    """The 65536-entry tables the LSTM kernels index are the functions
    themselves, on shapes and integer dtypes the kernels pass."""
    rng = np.random.default_rng(int_bits)
    for a in (rng.integers(-32768, 32768, (3, 7)), np.array([-32768, -1, 0, 1, 32767], np.int16)):
        np.testing.assert_array_equal(K.logistic16_lut(a, int_bits), K.logistic16(a.astype(np.int64), int_bits))
        np.testing.assert_array_equal(K.tanh16_lut(a, int_bits), K.tanh16(a.astype(np.int64), int_bits))
    assert K.activation_table("tanh", int_bits) is K.activation_table("tanh", int_bits)  # built once


def test_fixed_point_primitives():
    assert FP.saturating_rounding_doubling_high_mul16(np.array([-32768]), -32768)[0] == 32767
    assert FP.saturating_rounding_doubling_high_mul16(np.array([16384]), 16384)[0] == 8192
    assert FP.saturating_rounding_doubling_high_mul16(np.array([-3]), 16384)[0] == -1  # -1.5: gemmlowp's nudge rounds it toward zero
    assert list(FP.wrap16(np.array([32768, -32769]))) == [-32768, 32767]
    assert list(K.rescale16(np.array([5000, -5000, 3000]), 3, 0)) == [32767, -32768, 24000]
    assert K.const16(1 << 30) == 16384


@pytest.mark.parametrize("value", [2, 3, 100, 4096, 123457, (1 << 29) + 5, (1 << 31) - 1])
def test_inv_sqrt_multiplier(value):
    q, shift = FP.inv_sqrt_multiplier(value, -1)
    got = q * 2.0 ** (shift - 31)
    # the reference's multiplier represents 2^15 / sqrt(value)... up to its fixed scale; compare ratios
    ref_q, ref_shift = FP.inv_sqrt_multiplier(4, -1)
    ratio = got / (ref_q * 2.0 ** (ref_shift - 31))
    assert ratio == pytest.approx(math.sqrt(4 / value), rel=1e-5)


def test_checked_log2():
    assert K.checked_log2(2.0 ** -11) == (True, -11)
    assert K.checked_log2(1 / 2048.0 * 1.0001)[0]
    assert not K.checked_log2(0.0003)[0]


# ----------------------------------------------------------------------------
# QUANTIZED_16BIT_LSTM


def q16_inputs(batch=2, n_in=2, n_out=4, in_scale=1 / 128, cell_scale=2.0 ** -11, seed=3) -> list[Tensor]:
    rng = np.random.default_rng(seed)
    w_scale = 0.00408021
    ins = [Tensor(T.TENSOR_QUANT8_ASYMM, rng.integers(0, 256, (batch, n_in), dtype=np.uint8), in_scale, 128)]
    for k in range(8):
        cols = n_in if k < 4 else n_out
        ins.append(Tensor(T.TENSOR_QUANT8_ASYMM, rng.integers(0, 256, (n_out, cols), dtype=np.uint8), w_scale, 100))
    b_scale = float(np.float32(w_scale)) / 128
    for _ in range(4):
        ins.append(Tensor(T.TENSOR_INT32, rng.integers(-60000, 60000, n_out).astype(np.int32), b_scale, 0))
    ins.append(Tensor(T.TENSOR_QUANT16_SYMM, rng.integers(-2000, 2000, (batch, n_out)).astype(np.int16),
                      cell_scale, 0))
    ins.append(Tensor(T.TENSOR_QUANT8_ASYMM, rng.integers(100, 156, (batch, n_out), dtype=np.uint8), 1 / 128, 128))
    return ins


def run_q(op, ins, outs):
    return run_operation(op, ins, [OutputSpec(t, ()) for t in outs], **PHASES)


Q16_OUT = [T.TENSOR_QUANT16_SYMM, T.TENSOR_QUANT8_ASYMM]


def _conformance(path: str, model: int = 0):
    full = os.path.join(CONFORMANCE, path)
    if not os.path.exists(full):
        pytest.skip("conformance vectors not available")
    m = json.load(gzip.open(full))["models"][model]
    ops = [o for o in m["main"]["operations"] if o["type"] != "ADD"][0]
    opnds = m["main"]["operands"]
    dt = {"TENSOR_QUANT8_ASYMM": np.uint8, "TENSOR_INT32": np.int32, "TENSOR_QUANT16_SYMM": np.int16,
          "TENSOR_QUANT8_ASYMM_SIGNED": np.int8, "TENSOR_QUANT8_SYMM": np.int8, "FLOAT32": np.float32,
          "INT32": np.int32}
    ins = []
    for i in ops["inputs"]:
        o = opnds[i]
        vals = (o.get("data") or {}).get("values") or []
        data = None if not vals else np.array(vals, dt[o["type"]]).reshape(o["dimensions"])
        ins.append(Tensor(T[o["type"]], data, o["scale"], o["zeroPoint"]))
    outs = [(T[opnds[i]["type"]], np.array(opnds[i]["data"]["values"]).reshape(opnds[i]["dimensions"]))
            for i in ops["outputs"]]
    return ins, outs


def test_quantized_16bit_lstm_regression():
    ins, outs = _conformance("V1_2/quantized_lstm.json.gz")
    got = run_q(OP.QUANTIZED_16BIT_LSTM, ins, [t for t, _ in outs])
    for g, (_t, want) in zip(got, outs, strict=True):
        np.testing.assert_array_equal(g.astype(np.int64), want)


def test_quantized_16bit_lstm_tracks_float():
    """The fixed-point cell stays within a few quanta of the float equations."""
    ins = q16_inputs()
    cell, out = run_q(OP.QUANTIZED_16BIT_LSTM, ins, Q16_OUT)
    assert cell.dtype == np.int16 and out.dtype == np.uint8
    deq = [t.dequantize() for t in ins]
    x = np.concatenate([deq[0], deq[14]], axis=1)
    # the reference pairs [input, prev_output] with weight columns [recurrent, input]
    w = [np.concatenate([deq[r], deq[i]], axis=1) for i, r in ((1, 5), (2, 6), (3, 7), (4, 8))]
    b = [ins[k].data * ins[k].scale for k in (9, 10, 11, 12)]
    ig, fg, cg, og = (x @ w[k].T + b[k] for k in range(4))
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    c = sig(fg) * deq[13] + sig(ig) * np.tanh(cg)
    h = sig(og) * np.tanh(c)
    assert np.abs(cell * 2.0 ** -11 - c).max() < 4 * 2.0 ** -11 + 1e-3
    assert np.abs((out.astype(np.int64) - 128) / 128.0 - h).max() <= 2 / 128


def test_quantized_16bit_lstm_errors_and_signature():
    with pytest.raises(OpExecutionError):
        run_q(OP.QUANTIZED_16BIT_LSTM, q16_inputs(in_scale=1 / 64), Q16_OUT)
    with pytest.raises(OpExecutionError):
        run_q(OP.QUANTIZED_16BIT_LSTM, q16_inputs(cell_scale=2.0 ** -10), Q16_OUT)  # 5 integer bits
    bad = q16_inputs()
    bad[6] = Tensor(T.TENSOR_QUANT8_ASYMM, bad[6].data, 0.5, 100)  # a different weight scale
    with pytest.raises(OpExecutionError):
        run_q(OP.QUANTIZED_16BIT_LSTM, bad, Q16_OUT)
    op = REGISTRY[OP.QUANTIZED_16BIT_LSTM]
    types = [t.type for t in q16_inputs()]
    with pytest.raises(OpValidationError):
        match_signature(op, types, Q16_OUT, V1_1)
    match_signature(op, types, Q16_OUT, V1_2)
    with pytest.raises(OpValidationError):
        match_signature(op, types[:-1] + [T.TENSOR_QUANT8_ASYMM_SIGNED], Q16_OUT, V1_3)


# ----------------------------------------------------------------------------
# QUANTIZED_LSTM

QLSTM_OUT = [T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT16_SYMM, T.TENSOR_QUANT8_ASYMM_SIGNED]


@pytest.mark.parametrize("model", [("V1_3/qlstm_noprojection.json.gz", 0), ("V1_3/qlstm_projection.json.gz", 0),
                                   ("V1_3/qlstm_projection.json.gz", 2)])
def test_qlstm_regression(model):
    ins, outs = _conformance(*model)
    got = run_q(OP.QUANTIZED_LSTM, ins, [t for t, _ in outs])
    for g, (t, want) in zip(got, outs, strict=True):
        assert g.dtype == {T.TENSOR_QUANT8_ASYMM_SIGNED: np.int8, T.TENSOR_QUANT16_SYMM: np.int16}[t]
        np.testing.assert_array_equal(g.astype(np.int64), want)


def qlstm_inputs(batch=2, n_in=5, units=4, n_out=4, cifg=False, layer_norm=True, projection=False,
                 cell_scale=2.0 ** -11, seed=5) -> list[Tensor]:
    rng = np.random.default_rng(seed)

    def q8(shape, scale):
        return Tensor(T.TENSOR_QUANT8_SYMM, rng.integers(-127, 128, shape).astype(np.int8), scale, 0)

    ins = [Tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, rng.integers(-128, 128, (batch, n_in)).astype(np.int8), 0.0078, 1)]
    ins += [Tensor(T.TENSOR_QUANT8_SYMM, None) if cifg and k == 0 else q8((units, n_in), 0.01) for k in range(4)]
    ins += [Tensor(T.TENSOR_QUANT8_SYMM, None) if cifg and k == 0 else q8((units, n_out), 0.01) for k in range(4)]
    ins += [Tensor(T.TENSOR_QUANT16_SYMM, None)] * 3
    ins += [Tensor(T.TENSOR_INT32, None if (cifg and k == 0) else rng.integers(-300, 300, units).astype(np.int32),
                   0.0, 0) for k in range(4)]
    ins += [q8((n_out, units), 0.02) if projection else Tensor(T.TENSOR_QUANT8_SYMM, None),
            Tensor(T.TENSOR_INT32, rng.integers(-50, 50, n_out).astype(np.int32) if projection else None)]
    ins += [Tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, rng.integers(-20, 20, (batch, n_out)).astype(np.int8), 0.0078, 1)]
    ins += [Tensor(T.TENSOR_QUANT16_SYMM, rng.integers(-3000, 3000, (batch, units)).astype(np.int16), cell_scale, 0)]
    ins += [Tensor(T.TENSOR_QUANT16_SYMM, None if (not layer_norm or (cifg and k == 0))
                   else rng.integers(8000, 30000, units).astype(np.int16), 3.0517578125e-05, 0) for k in range(4)]
    ins += [Tensor(T.FLOAT32, np.array(v, np.float32)) for v in (0.0, 0.0, 0.007, 0.007, 0.007, 0.007)]
    ins += [Tensor(T.INT32, np.array(0, np.int32)), Tensor(T.FLOAT32, np.array(0.004, np.float32))]
    return ins


@pytest.mark.parametrize("cifg", [False, True])
@pytest.mark.parametrize("projection", [False, True])
def test_qlstm_runs_and_is_consistent(cifg, projection):
    ins = qlstm_inputs(cifg=cifg, projection=projection, n_out=3 if projection else 4)
    state, cell, out = run_q(OP.QUANTIZED_LSTM, ins, QLSTM_OUT)
    assert state.dtype == np.int8 and cell.dtype == np.int16 and out.dtype == np.int8
    np.testing.assert_array_equal(state, out)
    assert cell.shape == (2, 4) and out.shape == (2, 3 if projection else 4)
    # deterministic
    np.testing.assert_array_equal(run_q(OP.QUANTIZED_LSTM, ins, QLSTM_OUT)[1], cell)


def test_qlstm_cell_clip():
    ins = qlstm_inputs()
    ins[24] = Tensor(T.FLOAT32, np.array(2.0 ** -11 * 100, np.float32))
    _, cell, _ = run_q(OP.QUANTIZED_LSTM, ins, QLSTM_OUT)
    assert np.abs(cell.astype(np.int64)).max() <= 100


def test_qlstm_errors_and_signature():
    with pytest.raises(OpExecutionError):  # cell state scale not a power of two
        run_q(OP.QUANTIZED_LSTM, qlstm_inputs(cell_scale=0.0003), QLSTM_OUT)
    with pytest.raises(OpExecutionError):  # cell state scale above 2^-9
        run_q(OP.QUANTIZED_LSTM, qlstm_inputs(cell_scale=2.0 ** -8), QLSTM_OUT)
    bad = qlstm_inputs()
    bad[20] = Tensor(T.TENSOR_QUANT16_SYMM, None)  # partial layer norm
    with pytest.raises(OpExecutionError):
        run_q(OP.QUANTIZED_LSTM, bad, QLSTM_OUT)
    bad = qlstm_inputs()
    bad[18] = Tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, np.zeros((3, 4), np.int8), 0.0078, 1)  # batch mismatch
    with pytest.raises(OpExecutionError):
        run_q(OP.QUANTIZED_LSTM, bad, QLSTM_OUT)
    op = REGISTRY[OP.QUANTIZED_LSTM]
    types = [t.type for t in qlstm_inputs()]
    match_signature(op, types, QLSTM_OUT, V1_3)
    with pytest.raises(OpValidationError):
        match_signature(op, types, QLSTM_OUT, V1_2)
    with pytest.raises(OpValidationError):
        match_signature(op, [T.TENSOR_QUANT8_ASYMM] + types[1:], QLSTM_OUT, V1_3)
    assert REGISTRY[OP.QUANTIZED_LSTM].omittable_inputs >= {1, 5, 9, 10, 11, 12, 16, 17, 20}


def test_zero_sized_batch_and_sequence():
    p = make_params(3, 4)
    x, h, c = f32(0, 3), f32(0, 4), f32(0, 4)
    outs = run(OP.LSTM, lstm_inputs(x, h, c, p), [T.TENSOR_FLOAT32] * 4)
    assert [o.shape for o in outs] == [(0, 16), (0, 4), (0, 4), (0, 4)]
    fw, bw = make_params(3, 4), make_params(3, 4)
    st = _states(fw, bw, 2)
    outs = run(OP.BIDIRECTIONAL_SEQUENCE_LSTM, bidi_inputs(f32(0, 2, 3), fw, bw, st), [T.TENSOR_FLOAT32] * 6)
    assert [o.shape for o in outs] == [(0, 2, 4), (0, 2, 4), (2, 4), (2, 4), (2, 4), (2, 4)]
    np.testing.assert_array_equal(outs[2], st[0])  # no step: the states pass through
    assert REGISTRY[OP.LSTM].allow_zero_sized and REGISTRY[OP.BIDIRECTIONAL_SEQUENCE_LSTM].allow_zero_sized
    assert not REGISTRY[OP.UNIDIRECTIONAL_SEQUENCE_LSTM].allow_zero_sized
    assert not REGISTRY[OP.QUANTIZED_LSTM].allow_zero_sized


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("op", [OP.LSTM, OP.UNIDIRECTIONAL_SEQUENCE_LSTM])
def test_float_lstm_prepared_weights_equal_run_time_weights(op, variant):
    """Constant weights, biases and scalars are converted and stacked once, at
    prepare (the conformance vectors pass them as inputs): the outputs are
    those of the run-time path, bit for bit, execution after execution."""
    from nnhal.hal import OperandLifeTime
    from nnhal.ops.base import OperandInfo
    from nnhal.ops.recurrent import _FloatState
    from nnhal.ops.run import prepare_operation, tensor_info

    kw = dict(VARIANTS[variant])
    n_output = kw.pop("n_output", None)
    p = make_params(3, 4, n_output, **kw)
    no = n_out_of(p)
    if op == OP.LSTM:
        x, h, c = f32(2, 3), f32(2, no), f32(2, 4)
        ins = [tensor(v) for v in lstm_inputs(x, h, c, p, 4, 0.5, 0.0, with_ln=True)]
        outs = [OutputSpec(T.TENSOR_FLOAT32, ())] * 4
    else:
        x, h, c = f32(5, 2, 3), f32(2, no), f32(2, 4)
        ins = [tensor(v) for v in uni_inputs(x, h, c, p, 4, True, 0.5, 0.0)]
        outs = [OutputSpec(T.TENSOR_FLOAT32, ())] * 3
    state_inputs = {0, 18, 19}

    def info(k: int, t: Tensor):
        if t.data is None:
            return OperandInfo(t.type, (), lifetime=OperandLifeTime.NO_VALUE)
        return tensor_info(t, constant=k not in state_inputs)

    const = prepare_operation(op, [info(k, t) for k, t in enumerate(ins)], outs)
    assert isinstance(const.state, _FloatState) and const.state.weights is not None
    dynamic = prepare_operation(op, [tensor_info(t, constant=t.data is not None and t.data.ndim == 0) for t in ins],
                                outs)
    assert dynamic.state.weights is None
    want = dynamic.run(ins)
    for _ in range(2):
        got = const.run(ins)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("cifg", [False, True])
@pytest.mark.parametrize("projection", [False, True])
@pytest.mark.parametrize("layer_norm", [False, True])
def test_qlstm_prepared_plan_equals_run_time_plan(cifg, projection, layer_norm):
    """Constant weights, biases and scalars give a QlstmPlan built once at
    prepare (the vectors pass weights as inputs): the same outputs, bit for
    bit, as the plan an execution builds, with peepholes, clips, non-zero
    input / output / hidden zero points."""
    from nnhal.hal import OperandLifeTime
    from nnhal.ops.base import OperandInfo
    from nnhal.ops.run import prepare_operation, tensor_info

    rng = np.random.default_rng(11)
    ins = qlstm_inputs(cifg=cifg, projection=projection, layer_norm=layer_norm, n_out=3 if projection else 4)
    for k in (9, 10, 11):
        if not (cifg and k == 9):
            ins[k] = Tensor(T.TENSOR_QUANT16_SYMM, rng.integers(-2000, 2000, 4).astype(np.int16), 0.001, 0)
    ins[24] = Tensor(T.FLOAT32, np.array(2.0 ** -11 * 900, np.float32))  # cell clip
    ins[25] = Tensor(T.FLOAT32, np.array(0.5, np.float32))  # projection clip
    ins[30] = Tensor(T.INT32, np.array(3, np.int32))  # hidden zero point
    outs = [OutputSpec(t, (), 0.0078 if t != T.TENSOR_QUANT16_SYMM else 2.0 ** -11, 1 if t != T.TENSOR_QUANT16_SYMM
                       else 0) for t in QLSTM_OUT]

    def info(k: int, t: Tensor):
        if t.data is None:
            return OperandInfo(t.type, (), t.scale, t.zero_point, lifetime=OperandLifeTime.NO_VALUE)
        return tensor_info(t, constant=k not in (0, 18, 19))

    const = prepare_operation(OP.QUANTIZED_LSTM, [info(k, t) for k, t in enumerate(ins)], outs)
    assert const.state.plan is not None
    dynamic = prepare_operation(OP.QUANTIZED_LSTM, [tensor_info(t, constant=t.data is not None and t.data.ndim == 0)
                                                    for t in ins], outs)
    assert dynamic.state.plan is None
    want = dynamic.run(ins)
    for _ in range(2):
        for a, b in zip(const.run(ins), want):
            np.testing.assert_array_equal(a, b)


def _bidi_split_case(variant: str, aux: str) -> tuple[list, int]:
    kw = dict(VARIANTS[variant])
    n_output = kw.pop("n_output", None)
    fw, bw = make_params(3, 4, n_output, **kw), make_params(3, 4, n_output, **kw)
    xs = f32(4, 2, 3)
    st = _states(fw, bw, 2)
    if aux == "none":
        ins = bidi_inputs(xs, fw, bw, st)
    elif aux == "parallel":
        ins = bidi_inputs(xs, fw, bw, st, aux=f32(4, 2, 3))
    else:
        fa = [None if (g == 0 and fw["wx"][0] is None) else f32(4, 3) for g in range(4)]
        ba = [None if (g == 0 and bw["wx"][0] is None) else f32(4, 3) for g in range(4)]
        ins = bidi_inputs(xs, fw, bw, st, f32(4, 2, 3), fa, ba)
    return [tensor(v) for v in ins], 6


_BIDI_DATA = {0, 35, 36, 37, 38, 39}  # the input, the four states, the auxiliary input


def _const_info(k: int, t: Tensor, data: set):
    from nnhal.hal import OperandLifeTime
    from nnhal.ops.base import OperandInfo
    from nnhal.ops.run import tensor_info

    if t.data is None:
        return OperandInfo(t.type, (), t.scale, t.zero_point, lifetime=OperandLifeTime.NO_VALUE)
    return tensor_info(t, constant=k not in data)


@pytest.mark.parametrize("variant,aux", [("basic", "none"), ("cifg_peephole", "none"), ("layer_norm", "none"),
                                         ("peephole_projection", "none"), ("basic", "parallel"),
                                         ("basic", "cross"), ("projection_no_bias", "cross")])
def test_bidirectional_prepared_weights_equal_run_time_weights(variant, aux):
    """Both directions' constant weights (and the auxiliary weights) are
    converted and stacked once, at prepare, with the scalars parsed once: the
    outputs are those of the run-time path (the vectors' weights are model
    inputs), bit for bit, execution after execution, and the same through
    the compilation cache (prepared again on load: nothing of the float32
    copies is stored)."""
    from tests.prepared_util import assert_cache_round_trip, assert_same_outputs

    from nnhal.ops.run import prepare_operation, tensor_info

    ins, n_out = _bidi_split_case(variant, aux)
    outs = [OutputSpec(T.TENSOR_FLOAT32, ())] * n_out
    const = prepare_operation(OP.BIDIRECTIONAL_SEQUENCE_LSTM, [_const_info(k, t, _BIDI_DATA)
                                                               for k, t in enumerate(ins)], outs)
    assert const.state.params is not None and const.state.weights is not None
    assert const.state.weights[4] == (aux == "cross")
    dynamic = prepare_operation(OP.BIDIRECTIONAL_SEQUENCE_LSTM, [tensor_info(t) for t in ins], outs)
    assert dynamic.state.params is None and dynamic.state.weights is None
    want = dynamic.run(ins)
    for _ in range(2):
        assert_same_outputs(const.run(ins), want)
    assert_cache_round_trip(OP.BIDIRECTIONAL_SEQUENCE_LSTM, ins, outs, [k not in _BIDI_DATA for k in range(len(ins))],
                            want)


def test_bidirectional_prepared_weights_unused_for_another_variant():
    """Cross-linking weights prepared for an auxiliary input the request omits:
    the execution fails as the run-time path does (weights without an auxiliary
    input), not with the prepared weights."""
    from nnhal.ops.run import prepare_operation

    ins, n_out = _bidi_split_case("basic", "cross")
    outs = [OutputSpec(T.TENSOR_FLOAT32, ())] * n_out
    const = prepare_operation(OP.BIDIRECTIONAL_SEQUENCE_LSTM, [_const_info(k, t, _BIDI_DATA)
                                                               for k, t in enumerate(ins)], outs)
    assert const.state.weights is not None
    no_aux = list(ins)
    no_aux[39] = Tensor(T.TENSOR_FLOAT32, None)
    with pytest.raises(OpExecutionError, match="without an auxiliary input"):
        const.run(no_aux)


@pytest.mark.parametrize("pos,bad,n_out", [(49, -1.0, 6), (50, -0.5, 6), (51, True, 6), (51, False, 5)])
def test_bidirectional_bad_constant_parameter_fails_every_execution(pos, bad, n_out):
    """A negative clip or merge_outputs that does not match the outputs, as a
    constant: prepared without error, every execution fails (GENERAL_FAILURE)."""
    from nnhal.ops.run import prepare_operation, tensor_info

    ins, _ = _bidi_split_case("basic", "none")
    ins[pos] = tensor(bad)
    outs = [OutputSpec(T.TENSOR_FLOAT32, ())] * n_out
    const = prepare_operation(OP.BIDIRECTIONAL_SEQUENCE_LSTM, [_const_info(k, t, _BIDI_DATA)
                                                               for k, t in enumerate(ins)], outs)
    dynamic = prepare_operation(OP.BIDIRECTIONAL_SEQUENCE_LSTM, [tensor_info(t) for t in ins], outs)
    for prepared in (const, dynamic, const):
        with pytest.raises(OpExecutionError):
            prepared.run(ins)
