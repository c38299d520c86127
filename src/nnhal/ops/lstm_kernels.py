"""LSTM cell kernels shared by the recurrent operations (HAL 1.3 LSTM,
BIDIRECTIONAL_SEQUENCE_LSTM, UNIDIRECTIONAL_SEQUENCE_LSTM, QUANTIZED_16BIT_LSTM
and QUANTIZED_LSTM).

* :func:`float_lstm_sequence` runs the float LSTM cell (CIFG, peephole,
  layer normalization, projection with clipping, auxiliary input) over a
  time-major sequence, one vectorized step per time step, in float32 as
  Android's reference does (float16 operands are computed in float32 too).
* The gemmlowp 16-bit fixed-point primitives (``FixedPoint<int16_t, N>``:
  saturating rounding doubling high multiply, rescale, exp on negative
  values, logistic, tanh) on numpy int64 arrays holding int16 values, with
  the same wrap-around and saturation as the C++ code.
* :func:`quantized_16bit_lstm_step` (QUANTIZED_16BIT_LSTM, TFLite's legacy
  uint8 LstmCell with 4 state integer bits) and :func:`qlstm_step`
  (QUANTIZED_LSTM, the integer LSTM of Android's QLSTM.cpp / QuantUtils).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from nnhal.ops import deadline, memo
from nnhal.ops.fixedpoint import (
    EXP_BARREL,
    EXP_MINUS_ONE_EIGHTH,
    INT16_MAX,
    INT16_MIN,
    ONE_THIRD,
    inv_sqrt_multiplier_int,
    round_half_away_int,
    saturating_rounding_multiply_by_pot,
    trunc_div,
    wrap16,
    wrap32,
)
from nnhal.ops.fixedpoint import (
    saturating_rounding_doubling_high_mul16 as srdhm16,
)
from nnhal.ops.quant import (
    quantize_multiplier,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul,
)

# ----------------------------------------------------------------------------
# float LSTM

# gate order of the stacked weight matrices and of the scratch buffer
GATE_INPUT, GATE_FORGET, GATE_CELL, GATE_OUTPUT = 0, 1, 2, 3


@dataclass
class FloatLstmWeights:
    """One direction's LSTM parameters as float32 arrays.

    Per-gate lists are indexed input, forget, cell, output; the input-gate
    entries are None under CIFG.  ``peephole`` / ``layer_norm`` are None when
    the variant is off (with CIFG their input-gate entry is None)."""

    input_w: list  # (n_cell, n_input) each
    recurrent_w: list  # (n_cell, n_output) each
    bias: list  # (n_cell,) each
    peephole: list | None = None  # (n_cell,) each
    layer_norm: list | None = None  # (n_cell,) each
    aux_w: list | None = None  # (n_cell, n_aux_input) each
    proj_w: np.ndarray | None = None  # (n_output, n_cell)
    proj_b: np.ndarray | None = None  # (n_output,)
    activation: int = 4
    cell_clip: float = 0.0
    proj_clip: float = 0.0
    # weights prepared once (constants) and shared by executions: a bounded,
    # locked memo of their stacked / transposed forms (None: built per call)
    cache: Any = None

    @property
    def cifg(self) -> bool:
        return self.input_w[GATE_INPUT] is None

    @property
    def n_cell(self) -> int:
        return int(self.input_w[GATE_FORGET].shape[0])

    @property
    def n_output(self) -> int:
        return int(self.recurrent_w[GATE_FORGET].shape[1])


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return (np.float32(1) / (np.float32(1) + np.exp(-x))).astype(np.float32)


def _activation(x: np.ndarray, act: int, previous: np.ndarray) -> np.ndarray:
    """TFLite ``ApplyActivationToVector(x, act, result)``.

    NOTE: for NONE (and unknown codes) TFLite returns without writing
    ``result``, so the caller's buffer keeps its ``previous`` contents; the
    reference relies on this for the cell output (see float_lstm_step)."""
    if act == 1:
        return np.maximum(x, np.float32(0))
    if act == 2:
        return np.clip(x, np.float32(-1), np.float32(1))
    if act == 3:
        return np.clip(x, np.float32(0), np.float32(6))
    if act == 4:
        return np.tanh(x)
    if act == 5:
        return np.signbit(x).astype(np.float32)
    if act == 6:
        return _sigmoid(x)
    return previous


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """TFLite MeanStddevNormalization per batch row, then weight and bias."""
    mean = x.mean(axis=-1, keepdims=True, dtype=np.float32)
    var = np.square(x - mean).mean(axis=-1, keepdims=True, dtype=np.float32)
    inv = np.float32(1) / np.sqrt(var + np.float32(1e-8))
    return ((x - mean) * inv * weight + bias).astype(np.float32)


def _stack(parts: list, gates: list[int]) -> np.ndarray:
    return np.concatenate([parts[g] for g in gates], axis=0).astype(np.float32)


def _cached(w: FloatLstmWeights, key: str, fn: Callable[[], np.ndarray]) -> np.ndarray:
    return fn() if w.cache is None else w.cache.get_or_compute(key, fn)


def float_lstm_sequence(x: np.ndarray, w: FloatLstmWeights, h0: np.ndarray, c0: np.ndarray,
                        aux: np.ndarray | None = None, forward: bool = True
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Runs the cell over time-major ``x`` (T, B, n_input) from states h0
    (B, n_output), c0 (B, n_cell); ``forward=False`` walks the sequence
    backwards (outputs stay at their time index).

    Returns (outputs (T, B, n_output), h_T, c_T, scratch) where scratch is
    the reference's scratch buffer after the last step, shaped (B, G*n_cell)."""
    x = np.asarray(x, np.float32)
    n_time, n_batch = x.shape[0], x.shape[1]
    n_cell, n_output = w.n_cell, w.n_output
    gates = [GATE_FORGET, GATE_CELL, GATE_OUTPUT] if w.cifg else [GATE_INPUT, GATE_FORGET, GATE_CELL, GATE_OUTPUT]
    n_g = len(gates)
    slot = {g: k for k, g in enumerate(gates)}

    # NOTE: the input (and aux input) contributions of every time step do not
    # depend on the recurrence, so they are one matrix product for the whole
    # sequence; only the recurrent part runs per step.
    wx = _cached(w, "wx", lambda: _stack(w.input_w, gates))
    pre = (x.reshape(n_time * n_batch, x.shape[2]) @ wx.T).reshape(n_time, n_batch, n_g, n_cell)
    if aux is not None and w.aux_w is not None:
        aux = np.asarray(aux, np.float32)
        pre = pre + (aux.reshape(n_time * n_batch, aux.shape[2]) @ _cached(w, "aux", lambda: _stack(w.aux_w, gates)).T).reshape(
            n_time, n_batch, n_g, n_cell)
    if w.layer_norm is None:
        pre = pre + _cached(w, "bias", lambda: _stack([None if b is None else b.reshape(1, -1) for b in w.bias],
                                                      gates).reshape(n_g, n_cell))
    wh_t = _cached(w, "wh_t", lambda: _stack(w.recurrent_w, gates).T)
    proj_t = None if w.proj_w is None else _cached(w, "proj_t", lambda: w.proj_w.T.astype(np.float32))
    peep = w.peephole
    ln = w.layer_norm

    h = np.asarray(h0, np.float32).reshape(n_batch, n_output)
    c = np.asarray(c0, np.float32).reshape(n_batch, n_cell)
    out = np.empty((n_time, n_batch, n_output), np.float32)
    scratch = np.zeros((n_g, n_batch, n_cell), np.float32)
    order = range(n_time) if forward else range(n_time - 1, -1, -1)
    for t in order:
        deadline.poll()  # NOTE: a long sequence ends at the execution's deadline, not after it
        z = pre[t] + (h @ wh_t).reshape(n_batch, n_g, n_cell)

        def gate(g: int, cell: np.ndarray, z: np.ndarray = z) -> np.ndarray:
            v = z[:, slot[g], :]
            if peep is not None and g != GATE_CELL:
                v = v + peep[g] * cell
            if ln is not None:
                v = _layer_norm(v, ln[g], w.bias[g])
            return v

        i_gate = None if w.cifg else _sigmoid(gate(GATE_INPUT, c))
        f_gate = _sigmoid(gate(GATE_FORGET, c))
        g_in = gate(GATE_CELL, c)
        g_act = _activation(g_in, w.activation, g_in)
        new_c = f_gate * c + (np.float32(1) - f_gate if w.cifg else i_gate) * g_act
        if w.cell_clip > 0:
            new_c = np.clip(new_c, np.float32(-w.cell_clip), np.float32(w.cell_clip))
        o_gate = _sigmoid(gate(GATE_OUTPUT, new_c))
        # NOTE: with activation NONE the reference multiplies the output gate by
        # the untouched cell scratch (the cell gate input), not by the new cell
        # state: TFLite's ApplyActivationToVector writes nothing for NONE.
        c_act = _activation(new_c, w.activation, g_act)
        hidden = (o_gate * c_act).astype(np.float32)
        if w.proj_w is not None:
            y = hidden @ proj_t
            if w.proj_b is not None:
                y = y + w.proj_b
            if w.proj_clip > 0:
                y = np.clip(y, np.float32(-w.proj_clip), np.float32(w.proj_clip))
        else:
            # NOTE: the reference copies batch * output_size values flat
            y = hidden.reshape(-1)[: n_batch * n_output].reshape(n_batch, n_output)
        y = y.astype(np.float32)
        out[t] = y
        h, c = y, new_c.astype(np.float32)
        parts = {GATE_FORGET: (np.float32(1) - f_gate) if w.cifg else f_gate, GATE_CELL: c_act, GATE_OUTPUT: hidden}
        if not w.cifg:
            parts[GATE_INPUT] = i_gate
        # reference scratch layout: [input,] cell, forget, output blocks
        for k, g in enumerate(([] if w.cifg else [GATE_INPUT]) + [GATE_CELL, GATE_FORGET, GATE_OUTPUT]):
            scratch[k] = parts[g]
    if n_time == 0:
        h = np.asarray(h0, np.float32).reshape(n_batch, n_output)
        c = np.asarray(c0, np.float32).reshape(n_batch, n_cell)
    return out, h, c, scratch.reshape(n_batch, n_g * n_cell)


# ----------------------------------------------------------------------------
# gemmlowp FixedPoint<int16_t, N> on int64 arrays


def sat_add16(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.clip(np.asarray(a, np.int64) + b, INT16_MIN, INT16_MAX)


def rescale16(x: np.ndarray, src_bits: int, dst_bits: int) -> np.ndarray:
    """gemmlowp Rescale<dst>(FixedPoint<int16_t, src>)."""
    e = src_bits - dst_bits
    if e > 0:
        return saturating_rounding_multiply_by_pot(x, e, 16)
    if e < 0:
        return rounding_divide_by_pot(x, -e)
    return np.asarray(x, np.int64)


def const16(v32: int) -> int:
    """GEMMLOWP_CHECKED_FIXEDPOINT_CONSTANT for int16: the int32 constant
    rounding-shifted right by 16."""
    return int(rounding_divide_by_pot(np.int64(v32), 16))


def _exp_on_interval(a: np.ndarray) -> np.ndarray:
    """exp(a) for a in [-1/4, 0), F0 -> F0."""
    constant_term = const16(EXP_MINUS_ONE_EIGHTH)
    one_third = const16(ONE_THIRD)
    x = wrap16(a + (1 << 12))
    x2 = srdhm16(x, x)
    x3 = srdhm16(x2, x)
    x4 = srdhm16(x2, x2)
    x4_over_4 = rounding_divide_by_pot(x4, 2)
    poly = wrap16(srdhm16(wrap16(x4_over_4 + x3), one_third) + x2)
    poly = rounding_divide_by_pot(poly, 1)
    return sat_add16(constant_term, srdhm16(constant_term, wrap16(x + poly)))


def exp_on_negative_values16(a: np.ndarray, int_bits: int) -> np.ndarray:
    """gemmlowp exp_on_negative_values(FixedPoint<int16_t, int_bits>) -> F0."""
    a = np.asarray(a, np.int64)
    frac = 15 - int_bits
    quarter = 1 << (frac - 2)
    a_mod = wrap16((a & (quarter - 1)) - quarter)
    result = _exp_on_interval(rescale16(a_mod, int_bits, 0))
    remainder = wrap16(a_mod - a)
    for exponent, multiplier in EXP_BARREL:
        if int_bits > exponent:
            bit = 1 << (frac + exponent)
            result = np.where((remainder & bit) != 0, srdhm16(result, const16(multiplier)), result)
    if int_bits > 5:
        clamp = const16(-(1 << (36 - int_bits)))
        result = np.where(a < clamp, 0, result)
    return np.where(a == 0, INT16_MAX, result)


def _newton_reciprocal(a: np.ndarray) -> np.ndarray:
    """Shared Newton-Raphson part of 1/(1+x) and (1-x)/(1+x): returns F2 x."""
    s = np.asarray(a, np.int64) + INT16_MAX
    half_den = trunc_div(s + np.where(s >= 0, 1, -1), 2)
    x = wrap16(const16(1515870810) + srdhm16(half_den, const16(-1010580540)))
    one_f2 = 1 << 13
    for _ in range(3):
        one_minus = wrap16(one_f2 - srdhm16(half_den, x))
        x = wrap16(x + rescale16(srdhm16(x, one_minus), 4, 2))
    return x


def logistic16(a: np.ndarray, int_bits: int) -> np.ndarray:
    """gemmlowp logistic(FixedPoint<int16_t, int_bits>) -> F0 raw."""
    a = np.asarray(a, np.int64)
    positive = a > 0
    abs_in = np.where(positive, a, wrap16(-a))
    e = exp_on_negative_values16(wrap16(-abs_in), int_bits)
    # one_over_one_plus_x: Rescale<0>(ExactMulByPot<-1>(x)) of an F2 value
    r_pos = rescale16(_newton_reciprocal(e), 1, 0)
    r_neg = wrap16(INT16_MAX - r_pos)
    return np.where(a == 0, const16(1 << 30), np.where(positive, r_pos, r_neg))


def tanh16(a: np.ndarray, int_bits: int) -> np.ndarray:
    """gemmlowp tanh(FixedPoint<int16_t, int_bits>) -> F0 raw."""
    a = np.asarray(a, np.int64)
    negative = a < 0
    n = np.where(negative, a, wrap16(-a))
    e = exp_on_negative_values16(n, int_bits + 1)  # ExactMulByPot<1>: same raw, one more integer bit
    t = rescale16(wrap16(_newton_reciprocal(e) - (1 << 13)), 2, 0)
    return np.where(a == 0, 0, np.where(negative, wrap16(-t), t))


# ----------------------------------------------------------------------------
# the int16 activations as tables: every gate input is an int16 value, so
# logistic16 / tanh16 of a given number of integer bits are functions of
# 65536 inputs, evaluated once per process (bit-identical by construction)

_INT16_ALL = np.arange(INT16_MIN, INT16_MAX + 1, dtype=np.int64)
_TABLES = memo.Memo(16)


def activation_table(kind: str, int_bits: int) -> np.ndarray:
    """logistic16 ("logistic") or tanh16 ("tanh") of every int16 value with
    ``int_bits`` integer bits, as int64 indexed by value + 32768."""
    fn = logistic16 if kind == "logistic" else tanh16
    return _TABLES.get_or_compute((kind, int_bits), lambda: np.ascontiguousarray(fn(_INT16_ALL, int_bits)))


def logistic16_lut(a: np.ndarray, int_bits: int) -> np.ndarray:
    """logistic16 of int16 values (held in any integer array)."""
    return activation_table("logistic", int_bits)[np.asarray(a, np.int64) + 32768]


def tanh16_lut(a: np.ndarray, int_bits: int) -> np.ndarray:
    """tanh16 of int16 values (held in any integer array)."""
    return activation_table("tanh", int_bits)[np.asarray(a, np.int64) + 32768]


# ----------------------------------------------------------------------------
# QUANTIZED_16BIT_LSTM


def q16_weights(weights: np.ndarray, weights_zp: int) -> np.ndarray:
    """The QUANTIZED_16BIT_LSTM weight matrix as the step multiplies it:
    (w - zp) transposed, in float64 (every product and partial sum of the
    matrix product is an integer below 2^53: exact)."""
    return np.ascontiguousarray((weights.astype(np.float64) - weights_zp).T)


def quantized_16bit_lstm_step(x: np.ndarray, prev_out: np.ndarray, weights_t: np.ndarray, bias: np.ndarray,
                              prev_cell: np.ndarray, accum_q: int, accum_shift: int
                              ) -> tuple[np.ndarray, np.ndarray]:
    """One QUANTIZED_16BIT_LSTM step.

    ``weights_t`` is :func:`q16_weights` of the reference's concatenated
    (4*n_out, n_out + n_in) uint8 matrix (gate blocks input, cell, forget,
    output; columns recurrent then input) and ``bias`` the concatenated int32
    biases as int64.  Returns (new cell state int16, output uint8)."""
    n_out = prev_out.shape[1]
    # NOTE: the reference concatenates [input, prev_output] but lays the
    # weight columns out as [recurrent, input]; the two are paired by index,
    # exactly as the reference does.
    concat = np.concatenate([x, prev_out], axis=1).astype(np.float64)
    concat -= 128
    acc = bias[None, :] + (concat @ weights_t).astype(np.int64)
    acc = np.clip(mbqm32(wrap32(acc), accum_q, accum_shift), INT16_MIN, INT16_MAX)
    acc = acc.reshape(acc.shape[0], 4, n_out)
    in_gate = logistic16_lut(acc[:, 0], 3)
    mod_gate = tanh16_lut(acc[:, 1], 3)
    forget_gate = logistic16_lut(acc[:, 2], 3)
    out_gate = logistic16_lut(acc[:, 3], 3)
    in_times_mod = srdhm16(in_gate, mod_gate)  # F0
    prev_times_forget = srdhm16(forget_gate, prev_cell.astype(np.int64))  # F0 * F4 -> F4
    new_state = sat_add16(rescale16(in_times_mod, 0, 4), prev_times_forget)
    out_f0 = srdhm16(out_gate, tanh16_lut(rescale16(new_state, 4, 3), 3))
    out8 = np.clip(rounding_divide_by_pot(out_f0, 8), -128, 127) + 128
    return new_state.astype(np.int16), out8.astype(np.uint8)


# ----------------------------------------------------------------------------
# QUANTIZED_LSTM (Android QLSTM.cpp + QuantUtils)


def mbqm32(x: np.ndarray, q: int, shift: int) -> np.ndarray:
    """QuantUtils MultiplyByQuantizedMultiplier with int32 wrap of the left shift."""
    left = max(shift, 0)
    right = max(-shift, 0)
    v = wrap32(np.asarray(x, np.int64) << left)
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(v, q), right)


def layer_norm_int16(v: np.ndarray, weight: np.ndarray, bias: np.ndarray, scale_q: int, scale_shift: int,
                     variance_limit: int) -> np.ndarray:
    """QuantUtils ApplyLayerNorm on (B, n) int16 values."""
    v = np.asarray(v, np.int64)
    n = v.shape[1]
    out = np.empty_like(v)
    guard = 1 << 20
    for b in range(v.shape[0]):  # NOTE: the inverse stddev multiplier is a per-batch scalar
        row = v[b]
        s = int(row.sum())
        sq = int((row * row).sum())
        mean = int(wrap32(np.int64(_c_div(s * 1024, n))))
        variance = sq * (guard // n) - mean * mean
        variance2 = int(wrap32(np.int64(_c_div(variance, guard))))
        if variance2 < 1:
            variance2 = variance_limit
        inv_q, inv_shift = inv_sqrt_multiplier_int(variance2, -1)
        shifted = wrap32(1024 * row - mean)
        rescaled = mbqm32(shifted, inv_q, inv_shift)
        val3 = wrap32(rescaled * weight.astype(np.int64) + bias.astype(np.int64))
        val4 = trunc_div(val3 + np.where(val3 > 0, 512, -512), 1024)
        val5 = mbqm32(val4, scale_q, scale_shift + 12)
        out[b] = np.clip(val5, INT16_MIN, INT16_MAX)
    return out


def _c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def checked_log2(x: float) -> tuple[bool, int]:
    """QuantUtils CheckedLog2 (single precision): (is a power of two, log2)."""
    lg = np.float32(np.log(np.float32(x))) * (np.float32(1.0) / np.float32(np.log(np.float32(2.0))))
    rounded = np.float32(round_half_away_int(lg))  # std::round of the float
    return bool(abs(float(np.float32(lg - rounded))) < 1e-3), int(rounded)


@dataclass
class QlstmTensors:
    """QUANTIZED_LSTM operands (int arrays; per-gate lists input, forget,
    cell, output with None for omitted tensors) and their scales."""

    x: np.ndarray
    x_scale: float
    x_zp: int
    prev_out: np.ndarray
    prev_out_scale: float
    prev_out_zp: int
    prev_cell: np.ndarray
    cell_scale: float
    cell_shift: int  # log2 of the cell state scale
    input_w: list
    input_w_scale: list
    recurrent_w: list
    recurrent_w_scale: list
    peephole: list
    peephole_scale: list
    bias: list
    layer_norm: list
    layer_norm_scale: list
    proj_w: np.ndarray | None
    proj_w_scale: float
    proj_b: np.ndarray | None
    cell_clip: float
    proj_clip: float
    intermediate_scale: list
    hidden_zp: int
    hidden_scale: float


def _f32(v: float) -> np.float32:
    return np.float32(v)


def _eff_scale(w_scale: float, in_scale: float, inter: float) -> tuple[int, int]:
    # NOTE: the reference multiplies and divides the scales in single precision
    return quantize_multiplier(float(_f32(_f32(w_scale) * _f32(in_scale)) / _f32(inter)))


def _zp_bias(zp: int, w: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    acc = np.zeros(w.shape[0], np.int64) if bias is None else bias.astype(np.int64)
    return wrap32(acc + zp * w.astype(np.int64).sum(axis=1))


def _t64(w: np.ndarray) -> np.ndarray:
    """A weight matrix transposed, as float64: its product with int8 / int16
    values is exact (integers below 2^53), and a BLAS product."""
    return np.ascontiguousarray(w.astype(np.float64).T)


@dataclass(frozen=True)
class QlstmPlan:
    """Everything of a QUANTIZED_LSTM step that depends only on the weights,
    biases, scales and scalars (TFLite computes it in Prepare): per gate
    (input, forget, cell, output; None for the CIFG input gate) the
    transposed weights, zero-point row sums folded into the biases,
    multipliers, peephole and layer-norm parameters; then the cell clip,
    hidden and projection parameters."""

    gates: tuple
    qclip: int
    hidden_mult: tuple[int, int]
    proj: tuple | None  # (w_t, bias with hidden zp row sums, q, shift, clip)


def qlstm_plan(p: QlstmTensors) -> QlstmPlan:
    """The :class:`QlstmPlan` of ``p`` (which needs no run-time tensor: x,
    prev_out and prev_cell are not read).  Raises ValueError where a
    multiplier cannot be formed."""
    gates = []
    for g in range(4):
        wx, wh = p.input_w[g], p.recurrent_w[g]
        if wx is None:
            gates.append(None)
            continue
        inter = p.intermediate_scale[g]
        xq, xs = _eff_scale(p.input_w_scale[g], p.x_scale, inter)
        hq, hs = _eff_scale(p.recurrent_w_scale[g], p.prev_out_scale, inter)
        peep = None
        if p.peephole[g] is not None:
            real = float(_f32((2.0 ** p.cell_shift) * float(_f32(p.peephole_scale[g])) / float(_f32(inter))))
            peep = (p.peephole[g].astype(np.int64)[None, :], *quantize_multiplier(real))
        ln = None
        if p.layer_norm[g] is not None:
            ln_scale = p.layer_norm_scale[g]
            q, sh = quantize_multiplier(float(_f32(ln_scale)))
            ln = (p.layer_norm[g], p.bias[g], q, sh, min(1, int(_f32(10000) * _f32(ln_scale))))
        gates.append((_t64(wx), _zp_bias(-p.x_zp, wx), xq, xs, _t64(wh), _zp_bias(-p.prev_out_zp, wh), hq, hs,
                      peep, ln))
    qclip = 0
    if p.cell_clip > 0:
        qclip = int(wrap16(np.int64(int(min(max(float(_f32(p.cell_clip) / _f32(p.cell_scale)), -32768.0),
                                             32767.0)))))
    hidden_mult = quantize_multiplier(float(_f32(2.0 ** -15 / float(_f32(p.hidden_scale)) * 2.0 ** -15)))
    proj = None
    if p.proj_w is not None:
        pq, ps = quantize_multiplier(float(_f32(_f32(p.proj_w_scale) * _f32(p.hidden_scale)) / _f32(p.prev_out_scale)))
        qpc = 0
        if p.proj_clip > 0 and p.proj_w_scale > 0:
            qpc = int(min(max(float(_f32(p.proj_clip) / _f32(p.proj_w_scale)), -128.0), 127.0))
            qpc = ((qpc + 128) & 0xFF) - 128
        # NOTE: the reference adds hidden_zp * row sums to the projection bias
        proj = (_t64(p.proj_w), _zp_bias(p.hidden_zp, p.proj_w, p.proj_b), pq, ps, qpc)
    return QlstmPlan(tuple(gates), qclip, hidden_mult, proj)


def _accumulate(x: np.ndarray, eff_bias: np.ndarray, w_t: np.ndarray, q: int, shift: int, out_zp: int,
                acc_in: np.ndarray | None, lo: int, hi: int) -> np.ndarray:
    """QuantUtils MatrixBatchVectorMultiplyAccumulate: clamp(MBQM(bias + x.W^T) + zp (+ acc_in)),
    with the plan's float64 transposed weights ``w_t`` and ``x`` as float64."""
    acc = wrap32(eff_bias[None, :] + (x @ w_t).astype(np.int64))
    acc = mbqm32(acc, q, shift) + out_zp
    if acc_in is not None:
        acc += acc_in
    return np.clip(acc, lo, hi)


def qlstm_step(p: QlstmTensors, plan: QlstmPlan | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One QUANTIZED_LSTM step; returns (output state, cell state, output).
    ``plan``: :func:`qlstm_plan` of ``p``'s constants, computed once (else here)."""
    if plan is None:
        plan = qlstm_plan(p)
    batch = p.x.shape[0]
    n_out = p.recurrent_w[GATE_FORGET].shape[1]
    cifg = p.input_w[GATE_INPUT] is None
    x = p.x.astype(np.float64)
    h_prev = p.prev_out.astype(np.float64)
    c_prev = p.prev_cell.astype(np.int64)

    def gate_pre(g: int, cell: np.ndarray) -> np.ndarray:
        wx_t, x_bias, xq, xs, wh_t, h_bias, hq, hs, peep, ln = plan.gates[g]
        buf = _accumulate(x, x_bias, wx_t, xq, xs, 0, None, INT16_MIN, INT16_MAX)
        buf = _accumulate(h_prev, h_bias, wh_t, hq, hs, 0, buf, INT16_MIN, INT16_MAX)
        if peep is not None:
            w, q, s = peep
            buf = np.clip(mbqm32(w * cell, q, s) + buf, INT16_MIN, INT16_MAX)
        if ln is not None:
            buf = layer_norm_int16(buf, *ln)
        return buf

    # NOTE: the reference reads the peephole cell state of the input and forget
    # gates from the not yet written cell state output (and sizes the peephole
    # product by output_size); its contents are undefined there, so this
    # follows TFLite's integer LSTM, which uses the previous cell state and
    # num_units.
    forget = logistic16_lut(gate_pre(GATE_FORGET, c_prev), 3)
    cell_gate = tanh16_lut(gate_pre(GATE_CELL, c_prev), 3)
    if cifg:
        in_gate = INT16_MAX - forget
    else:
        in_gate = logistic16_lut(gate_pre(GATE_INPUT, c_prev), 3)
    c_new = sat_add16(wrap16(rounding_divide_by_pot(forget * c_prev, 15)),
                      wrap16(rounding_divide_by_pot(in_gate * cell_gate, 30 + p.cell_shift)))
    if plan.qclip > 0:
        c_new = np.clip(c_new, -plan.qclip, plan.qclip)
    out_gate = logistic16_lut(gate_pre(GATE_OUTPUT, c_new), 3)
    int_bits = p.cell_shift + 15
    # NOTE: the reference's tanh dispatch handles 0..6 integer bits; otherwise
    # it leaves its destination (the input gate buffer) untouched.
    cell_act = tanh16_lut(c_new, int_bits) if 0 <= int_bits <= 6 else in_gate
    hq, hs = plan.hidden_mult
    hidden = np.clip(mbqm32(out_gate * cell_act, hq, hs) - p.hidden_zp, -128, 127)
    if plan.proj is not None:
        w_t, bias, pq, ps, qpc = plan.proj
        out = _accumulate(hidden.astype(np.float64), bias, w_t, pq, ps, p.prev_out_zp, None, -128, 127)
        if qpc > 0:
            out = np.clip(out, -qpc, qpc)
    else:
        # NOTE: a flat copy of batch * output_size values, as the reference does
        out = hidden.reshape(-1)[: batch * n_out].reshape(batch, n_out)
    out = out.astype(np.int8)
    return out.copy(), c_new.astype(np.int16), out
