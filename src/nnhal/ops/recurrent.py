"""The LSTM operations of the HAL 1.3 spec (types.hal): LSTM,
BIDIRECTIONAL_SEQUENCE_LSTM, UNIDIRECTIONAL_SEQUENCE_LSTM,
QUANTIZED_16BIT_LSTM and QUANTIZED_LSTM.

Operand types and HAL versions follow the spec and Android's reference
validation (Utils.cpp ``validateOperation`` for LSTM, BIDIRECTIONAL_SEQUENCE_LSTM
and QUANTIZED_16BIT_LSTM; the ``validate`` functions of
UnidirectionalSequenceLSTM.cpp and QLSTM.cpp).  The reference checks only
types at model time; its tensor-shape rules (``LSTMCell::
CheckInputTensorDimensions`` and the ops' prepare steps) run at execution
time, so they live in ``execute`` here and fail with GENERAL_FAILURE.
The cells themselves are in :mod:`nnhal.ops.lstm_kernels`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nnhal.hal import OperandLifeTime, OperationType
from nnhal.ops import memo
from nnhal.ops.base import V1_0, V1_2, V1_3, ExecContext, OpDef, OpExecutionError, OpInfo, Signature, Tensor
from nnhal.ops.base import T as OT
from nnhal.ops.lstm_kernels import (
    GATE_CELL,
    GATE_FORGET,
    GATE_INPUT,
    GATE_OUTPUT,
    FloatLstmWeights,
    QlstmPlan,
    QlstmTensors,
    activation_table,
    checked_log2,
    float_lstm_sequence,
    q16_weights,
    qlstm_plan,
    qlstm_step,
    quantized_16bit_lstm_step,
)
from nnhal.ops.quant import quantize_multiplier

FLOAT_TYPES = (OT.TENSOR_FLOAT32, OT.TENSOR_FLOAT16)


def _clip_scalar(t: OT) -> OT:
    return OT.FLOAT32 if t == OT.TENSOR_FLOAT32 else OT.FLOAT16


# ----------------------------------------------------------------------------
# operand positions of one float LSTM direction


class _Layout:
    """Input positions of one LSTM direction's tensors (gate order input,
    forget, cell, output; peephole entries for input, forget, output)."""

    def __init__(self, input_w: tuple, recurrent_w: tuple, peephole: tuple, bias: tuple, proj_w: int,
                 proj_b: int, h: int, c: int, layer_norm: tuple, aux_w: tuple = ()):
        self.input_w, self.recurrent_w, self.bias = input_w, recurrent_w, bias
        self.peephole = (peephole[0], peephole[1], None, peephole[2])
        self.proj_w, self.proj_b, self.h, self.c = proj_w, proj_b, h, c
        self.layer_norm, self.aux_w = layer_norm, aux_w


LSTM_LAYOUT = _Layout((1, 2, 3, 4), (5, 6, 7, 8), (9, 10, 11), (12, 13, 14, 15), 16, 17, 18, 19,
                      (23, 24, 25, 26))
UNI_LAYOUT = _Layout((1, 2, 3, 4), (5, 6, 7, 8), (9, 10, 11), (12, 13, 14, 15), 16, 17, 18, 19,
                     (24, 25, 26, 27))
BIDI_FW = _Layout((1, 2, 3, 4), (5, 6, 7, 8), (9, 10, 11), (12, 13, 14, 15), 16, 17, 35, 36,
                  (53, 54, 55, 56), (40, 41, 42, 43))
BIDI_BW = _Layout((18, 19, 20, 21), (22, 23, 24, 25), (26, 27, 28), (29, 30, 31, 32), 33, 34, 37, 38,
                  (57, 58, 59, 60), (44, 45, 46, 47))


class _Flags:
    """The LSTMParams flags the reference derives from which tensors are present."""

    def __init__(self, cifg: bool, peephole: bool, layer_norm: bool, projection: bool, projection_bias: bool):
        self.cifg, self.peephole, self.layer_norm = cifg, peephole, layer_norm
        self.projection, self.projection_bias = projection, projection_bias


def _get(ctx: ExecContext, i: int | None) -> np.ndarray | None:
    if i is None or not ctx.has(i):
        return None
    return ctx.inputs[i].data


def _check_dims(ctx: ExecContext, lay: _Layout, n_input: int, n_output: int, n_cell: int,
                cell_clip: float, proj_clip: float) -> _Flags:
    """LSTMCell::CheckInputTensorDimensions (run-time shape rules)."""

    def need(cond: bool, msg: Callable[[], str] | str) -> None:
        # NOTE: a message is formatted only on failure (this runs on every execution)
        if not cond:
            raise ctx.fail(msg() if callable(msg) else msg)

    def shape_is(i: int, shape: tuple, what: str) -> None:
        a = _get(ctx, i)
        need(a is not None and a.shape == shape,
             lambda: f"input {i} ({what}) must have shape {list(shape)}, got {None if a is None else list(a.shape)}")

    def present(i: int | None) -> bool:
        return _get(ctx, i) is not None

    need(cell_clip >= 0, lambda: f"cell_clip must be >= 0, got {cell_clip}")
    need(proj_clip >= 0, lambda: f"proj_clip must be >= 0, got {proj_clip}")
    for k, i in enumerate(lay.input_w[:3]):
        if k != GATE_INPUT or present(i):
            shape_is(i, (n_cell, n_input), "input weights")
    for k, i in enumerate(lay.recurrent_w[:3]):
        if k != GATE_INPUT or present(i):
            shape_is(i, (n_cell, n_output), "recurrent weights")
    need(present(lay.input_w[0]) == present(lay.recurrent_w[0]),
         "input-to-input and recurrent-to-input weights must be both present or both omitted (CIFG)")
    for i in lay.peephole:
        if i is not None and present(i):
            shape_is(i, (n_cell,), "peephole weights")
    cifg = not present(lay.input_w[0])
    pi, pf, _, po = (present(i) for i in lay.peephole)
    need(((pi or cifg) and pf and po) or not (pi or pf or po), "peephole weights must be all present or all omitted")
    if cifg:
        need(not present(lay.bias[0]), "the input gate bias must be omitted with CIFG")
    else:
        shape_is(lay.bias[0], (n_cell,), "input gate bias")
    for i in lay.bias[1:]:
        shape_is(i, (n_cell,), "gate bias")
    if present(lay.proj_w):
        shape_is(lay.proj_w, (n_output, n_cell), "projection weights")
    if present(lay.proj_b):
        shape_is(lay.proj_b, (n_output,), "projection bias")
    need(present(lay.proj_w) or not present(lay.proj_b), "projection bias given without projection weights")
    ln = [present(i) if i < len(ctx.inputs) else False for i in lay.layer_norm]
    for i, p in zip(lay.layer_norm, ln, strict=True):
        if p:
            shape_is(i, (n_cell,), "layer normalization weights")
    if cifg:
        need(not ln[0], "input layer normalization weights are given while CIFG is used")
        need(all(ln[1:]) or not any(ln[1:]), "layer normalization weights must be all present or all omitted")
    else:
        need(all(ln) or not any(ln), "layer normalization weights must be all present or all omitted")
    return _Flags(cifg, po, ln[3], present(lay.proj_w), present(lay.proj_b))


def _weights(ctx: ExecContext, lay: _Layout, flags: _Flags, activation: int, cell_clip: float,
             proj_clip: float, with_aux: bool) -> FloatLstmWeights:
    """One direction's float32 parameters, using the variant ``flags``."""

    def f32(i: int | None) -> np.ndarray | None:
        a = _get(ctx, i)
        return None if a is None else a.astype(np.float32)

    def need(i: int | None) -> np.ndarray:
        a = f32(i)
        if a is None:
            raise ctx.fail(f"input {i} is omitted but the LSTM variant needs it")
        return a

    gates = [GATE_FORGET, GATE_CELL, GATE_OUTPUT] if flags.cifg else [GATE_INPUT, GATE_FORGET, GATE_CELL, GATE_OUTPUT]

    def per_gate(idx: tuple, skip_cell: bool = False) -> list:
        return [need(idx[g]) if g in gates and not (skip_cell and g == GATE_CELL) else None for g in range(4)]

    return FloatLstmWeights(
        input_w=per_gate(lay.input_w),
        recurrent_w=per_gate(lay.recurrent_w),
        bias=per_gate(lay.bias),
        peephole=per_gate(lay.peephole, skip_cell=True) if flags.peephole else None,
        layer_norm=per_gate(lay.layer_norm) if flags.layer_norm else None,
        aux_w=per_gate(lay.aux_w) if with_aux else None,
        proj_w=need(lay.proj_w) if flags.projection else None,
        proj_b=need(lay.proj_b) if flags.projection_bias else None,
        activation=activation, cell_clip=cell_clip, proj_clip=proj_clip)


def _flags_key(f: _Flags) -> tuple:
    return (f.cifg, f.peephole, f.layer_norm, f.projection, f.projection_bias)


class _FloatState:
    """A float LSTM direction's weights prepared once: (flags key, activation,
    cell clip, projection clip, FloatLstmWeights) when every weight, bias and
    scalar is a constant (or omitted), else None.  The execution checks every
    shape first, as the reference, and uses them only for the same variant."""

    __slots__ = ("weights",)

    def __init__(self) -> None:
        self.weights: tuple | None = None


def _constant_ctx(info: OpInfo, used: list) -> ExecContext | None:
    """An ExecContext over the operation's constants (an omitted operand has no
    data), for the execution's own accessors; None if an input in ``used`` is
    neither a constant nor omitted (the execution computes what depends on it)."""
    ins = info.inputs

    def omitted(i: int | None) -> bool:
        return i is None or i >= len(ins) or ins[i].lifetime == OperandLifeTime.NO_VALUE

    if not all(omitted(i) or ins[i].value is not None for i in used):
        return None
    return ExecContext(info.type, [Tensor(t.type, None if omitted(k) else t.value, t.scale, t.zero_point)
                                   for k, t in enumerate(ins)], [])


def _layout_inputs(lay: _Layout) -> list:
    return [*lay.input_w, *lay.recurrent_w, *lay.bias, *lay.peephole, lay.proj_w, lay.proj_b, *lay.layer_norm]


def _variant(ctx: ExecContext, lay: _Layout) -> _Flags:
    """The variant _check_dims derives from the presences of ``lay``'s tensors."""

    def present(i: int | None) -> bool:
        return _get(ctx, i) is not None

    ln = [present(i) if i < len(ctx.inputs) else False for i in lay.layer_norm]
    return _Flags(not present(lay.input_w[0]), present(lay.peephole[3]), ln[3], present(lay.proj_w),
                  present(lay.proj_b))


_PREPARE_ERRORS = (OpExecutionError, ValueError, ArithmeticError, TypeError, AttributeError, IndexError)


def _prepare_float_lstm(lay: _Layout, act_i: int, clip_i: int) -> Callable[[OpInfo], _FloatState]:
    def prepare(info: OpInfo) -> _FloatState:
        st = _FloatState()
        ctx = _constant_ctx(info, [*_layout_inputs(lay), act_i, clip_i, clip_i + 1])
        if ctx is None:
            return st
        try:
            act, cell_clip, proj_clip = _scalars(ctx, act_i, clip_i)
            flags = _variant(ctx, lay)
            w = _weights(ctx, lay, flags, act, cell_clip, proj_clip, with_aux=False)
        except _PREPARE_ERRORS:
            return st  # NOTE: the execution fails where the reference does
        w.cache = memo.Memo(8)
        st.weights = (_flags_key(flags), act, cell_clip, proj_clip, w)
        return st

    return prepare


def _prepared_weights(ctx: ExecContext, lay: _Layout, flags: _Flags, act: int, cell_clip: float,
                      proj_clip: float) -> FloatLstmWeights:
    st = ctx.state
    pw = st.weights if isinstance(st, _FloatState) else None
    if pw is not None and pw[:4] == (_flags_key(flags), act, cell_clip, proj_clip):
        return pw[4]
    return _weights(ctx, lay, flags, act, cell_clip, proj_clip, with_aux=False)


def _sizes(ctx: ExecContext, lay: _Layout, n_input: int) -> tuple[int, int]:
    """(n_cell, n_output) from the input-to-output and recurrent-to-output weights."""
    wo = _get(ctx, lay.input_w[3])
    ro = _get(ctx, lay.recurrent_w[3])
    if wo is None or wo.ndim != 2 or wo.shape[1] != n_input:
        raise ctx.fail(f"input-to-output weights must have shape [num_units, {n_input}], got "
                       f"{None if wo is None else list(wo.shape)}")
    if ro is None or ro.ndim != 2 or ro.shape[0] != wo.shape[0]:
        raise ctx.fail(f"recurrent-to-output weights must have shape [{wo.shape[0]}, output_size], got "
                       f"{None if ro is None else list(ro.shape)}")
    return int(wo.shape[0]), int(ro.shape[1])


def _state(ctx: ExecContext, i: int, shape: tuple, what: str) -> np.ndarray:
    a = _get(ctx, i)
    if a is None or a.shape != shape:
        raise ctx.fail(f"{what} (input {i}) must have shape {list(shape)}, got {None if a is None else list(a.shape)}")
    return a.astype(np.float32)


def _scalars(ctx: ExecContext, act_i: int, clip_i: int) -> tuple[int, float, float]:
    return int(ctx.scalar(act_i, 0)), float(ctx.scalar(clip_i, 0.0)), float(ctx.scalar(clip_i + 1, 0.0))


# ----------------------------------------------------------------------------
# LSTM


def _execute_lstm(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0].data
    if x.ndim != 2:
        raise ctx.fail(f"input must be 2-D [batch_size, input_size], got shape {list(x.shape)}")
    n_batch, n_input = x.shape
    n_cell, n_output = _sizes(ctx, LSTM_LAYOUT, n_input)
    act, cell_clip, proj_clip = _scalars(ctx, 20, 21)
    flags = _check_dims(ctx, LSTM_LAYOUT, n_input, n_output, n_cell, cell_clip, proj_clip)
    w = _prepared_weights(ctx, LSTM_LAYOUT, flags, act, cell_clip, proj_clip)
    h0 = _state(ctx, 18, (n_batch, n_output), "output state")
    c0 = _state(ctx, 19, (n_batch, n_cell), "cell state")
    out, h, c, scratch = float_lstm_sequence(x[None].astype(np.float32), w, h0, c0)
    dt = ctx.outputs[0].dtype
    return [scratch.astype(dt), h.astype(dt), c.astype(dt), out[0].astype(dt)]


def _lstm_signatures() -> list[Signature]:
    sigs = []
    for t in FLOAT_TYPES:
        base = (t,) * 20 + (OT.INT32, _clip_scalar(t), _clip_scalar(t))
        v = V1_0 if t == OT.TENSOR_FLOAT32 else V1_2
        sigs.append(Signature(base, (t,) * 4, v))
        sigs.append(Signature(base + (t,) * 4, (t,) * 4, V1_2))
    return sigs


# ----------------------------------------------------------------------------
# UNIDIRECTIONAL_SEQUENCE_LSTM


def _to_time_major(a: np.ndarray, time_major: bool) -> np.ndarray:
    return a if time_major else np.swapaxes(a, 0, 1)


def _execute_unidirectional(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0].data
    if x.ndim != 3:
        raise ctx.fail(f"input must be 3-D, got shape {list(x.shape)}")
    time_major = bool(ctx.scalar(23, False))
    xt = _to_time_major(x, time_major).astype(np.float32)
    n_batch, n_input = xt.shape[1], xt.shape[2]
    n_cell, n_output = _sizes(ctx, UNI_LAYOUT, n_input)
    act, cell_clip, proj_clip = _scalars(ctx, 20, 21)
    flags = _check_dims(ctx, UNI_LAYOUT, n_input, n_output, n_cell, cell_clip, proj_clip)
    h0 = _state(ctx, 18, (n_batch, n_output), "output state")
    c0 = _state(ctx, 19, (n_batch, n_cell), "cell state")
    w = _prepared_weights(ctx, UNI_LAYOUT, flags, act, cell_clip, proj_clip)
    out, h, c, _ = float_lstm_sequence(xt, w, h0, c0)
    dt = ctx.outputs[0].dtype
    result = [_to_time_major(out, time_major).astype(dt)]
    if len(ctx.outputs) == 3:
        result += [h.astype(dt), c.astype(dt)]
    return result


def _unidirectional_signatures() -> list[Signature]:
    sigs = []
    for t in FLOAT_TYPES:
        ins = (t,) * 20 + (OT.INT32, _clip_scalar(t), _clip_scalar(t), OT.BOOL) + (t,) * 4
        sigs.append(Signature(ins, (t,), V1_2))
        sigs.append(Signature(ins, (t,) * 3, V1_3))
    return sigs


# ----------------------------------------------------------------------------
# BIDIRECTIONAL_SEQUENCE_LSTM


class _BidiState:
    """BIDIRECTIONAL_SEQUENCE_LSTM's prepared scalars (activation, cell clip,
    projection clip, merge outputs, time major) and both directions' weights
    (the backward variant's flags key, activation, clips, whether with the
    auxiliary weights, forward and backward FloatLstmWeights), each None when
    an operand it needs is not a constant.  The execution checks every shape
    first, as the reference, and uses the weights only for the same variant."""

    __slots__ = ("params", "weights")

    def __init__(self) -> None:
        self.params: tuple | None = None
        self.weights: tuple | None = None


_BIDI_SCALARS = (48, 49, 50, 51, 52)


def _bidi_params(ctx: ExecContext) -> tuple:
    act, cell_clip, proj_clip = _scalars(ctx, 48, 49)
    return act, cell_clip, proj_clip, bool(ctx.scalar(51, False)), bool(ctx.scalar(52, False))


def _prepare_bidirectional(info: OpInfo) -> _BidiState:
    st = _BidiState()
    sctx = _constant_ctx(info, list(_BIDI_SCALARS))
    if sctx is None:
        return st
    try:
        st.params = _bidi_params(sctx)
    except _PREPARE_ERRORS:
        return st  # NOTE: the execution fails where the reference does
    ctx = _constant_ctx(info, [*_layout_inputs(BIDI_FW), *_layout_inputs(BIDI_BW), *BIDI_FW.aux_w, *BIDI_BW.aux_w])
    if ctx is None:
        return st
    act, cell_clip, proj_clip = st.params[:3]
    # NOTE: both directions run with the backward variant's flags (see the execution); the auxiliary
    # weights are used exactly when they are given (given without an auxiliary input, the execution fails)
    flags = _variant(ctx, BIDI_BW)
    with_aux = _get(ctx, BIDI_FW.aux_w[1]) is not None
    try:
        fw = _weights(ctx, BIDI_FW, flags, act, cell_clip, proj_clip, with_aux=with_aux)
        bw = _weights(ctx, BIDI_BW, flags, act, cell_clip, proj_clip, with_aux=with_aux)
    except _PREPARE_ERRORS:
        return st
    fw.cache, bw.cache = memo.Memo(8), memo.Memo(8)
    st.weights = (_flags_key(flags), act, cell_clip, proj_clip, with_aux, fw, bw)
    return st


def _execute_bidirectional(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0].data
    if x.ndim != 3:
        raise ctx.fail(f"input must be 3-D, got shape {list(x.shape)}")
    st = ctx.state if isinstance(ctx.state, _BidiState) else _BidiState()
    act, cell_clip, proj_clip, merge, time_major = st.params if st.params is not None else _bidi_params(ctx)
    n_out = len(ctx.outputs)
    if (merge and n_out not in (1, 5)) or (not merge and n_out not in (2, 6)):
        raise ctx.fail(f"{n_out} outputs do not match merge_outputs={merge}")
    with_state = n_out in (5, 6)
    xt = _to_time_major(x, time_major).astype(np.float32)
    n_batch, n_input = xt.shape[1], xt.shape[2]

    fw_cell, fw_output = _sizes(ctx, BIDI_FW, n_input)
    bw_wo = _get(ctx, BIDI_BW.input_w[3])
    bw_ro = _get(ctx, BIDI_BW.recurrent_w[3])
    if bw_wo is None or bw_ro is None or bw_ro.ndim != 2 or bw_wo.ndim < 1 or bw_ro.shape[0] != bw_wo.shape[0]:
        raise ctx.fail("backward input-to-output / recurrent-to-output weights have inconsistent shapes")
    bw_cell, bw_output = int(bw_wo.shape[0]), int(bw_ro.shape[1])
    fw_flags = _check_dims(ctx, BIDI_FW, n_input, fw_output, fw_cell, cell_clip, proj_clip)

    def has(i: int) -> bool:
        return ctx.has(i)

    fa, ba = BIDI_FW.aux_w, BIDI_BW.aux_w
    if fw_flags.cifg and (has(fa[0]) or has(ba[0])):
        raise ctx.fail("auxiliary input-to-input weights must be omitted with CIFG")
    for aux_w in (fa, ba):
        given = [has(i) for i in aux_w]
        if not (((fw_flags.cifg or given[0]) and all(given[1:])) or not any(given)):
            raise ctx.fail("auxiliary weights must be all present or all omitted")
    has_aux = has(39)
    has_fw_aux_w, has_bw_aux_w = has(fa[1]), has(ba[1])
    if has_fw_aux_w != has_bw_aux_w:
        raise ctx.fail("forward and backward auxiliary weights must be both present or both omitted")
    if has_fw_aux_w and not has_aux:
        raise ctx.fail("auxiliary weights given without an auxiliary input")
    aux_t = None
    if has_aux:
        aux = ctx.inputs[39].data
        if aux.ndim != 3 or aux.shape[:2] != x.shape[:2]:
            raise ctx.fail(f"auxiliary input shape {list(aux.shape)} does not match the input {list(x.shape)}")
        aux_t = _to_time_major(aux, time_major).astype(np.float32)
    if has_fw_aux_w:
        # NOTE: the reference sizes the auxiliary weights by the input size and
        # requires all four of them (so cross-linking with CIFG fails there too)
        for i, cells in [(i, fw_cell) for i in fa] + [(i, bw_cell) for i in ba]:
            a = _get(ctx, i)
            if a is None or a.shape != (cells, n_input):
                raise ctx.fail(f"auxiliary weights (input {i}) must have shape [{cells}, {n_input}]")
        if aux_t.shape[2] != n_input:
            raise ctx.fail("the auxiliary input size must equal the input size in cross-linking mode")
    parallel = has_aux and not has_fw_aux_w
    bw_x = aux_t if parallel else xt
    bw_flags = _check_dims(ctx, BIDI_BW, bw_x.shape[2], bw_output, bw_cell, cell_clip, proj_clip)

    # NOTE: the reference keeps one LSTMParams for both directions and the
    # backward check overwrites it, so both directions run with the backward
    # variant flags; a forward tensor those flags need but that is omitted
    # would be dereferenced there, here it is an error.
    cross = has_aux and has_fw_aux_w
    pw = st.weights
    if pw is not None and pw[:5] == (_flags_key(bw_flags), act, cell_clip, proj_clip, cross):
        fw, bw = pw[5], pw[6]
    else:
        fw = _weights(ctx, BIDI_FW, bw_flags, act, cell_clip, proj_clip, with_aux=cross)
        bw = _weights(ctx, BIDI_BW, bw_flags, act, cell_clip, proj_clip, with_aux=cross)
    fw_h0 = _state(ctx, 35, (n_batch, fw_output), "forward activation state")
    fw_c0 = _state(ctx, 36, (n_batch, fw_cell), "forward cell state")
    bw_h0 = _state(ctx, 37, (n_batch, bw_output), "backward activation state")
    bw_c0 = _state(ctx, 38, (n_batch, bw_cell), "backward cell state")
    fw_out, fw_h, fw_c, _ = float_lstm_sequence(xt, fw, fw_h0, fw_c0, aux=aux_t if cross else None)
    bw_out, bw_h, bw_c, _ = float_lstm_sequence(bw_x, bw, bw_h0, bw_c0, aux=aux_t if cross else None, forward=False)
    dt = ctx.outputs[0].dtype
    if merge:
        result = [_to_time_major(np.concatenate([fw_out, bw_out], axis=2), time_major).astype(dt)]
    else:
        result = [_to_time_major(fw_out, time_major).astype(dt), _to_time_major(bw_out, time_major).astype(dt)]
    if with_state:
        result += [fw_h.astype(dt), fw_c.astype(dt), bw_h.astype(dt), bw_c.astype(dt)]
    return result


def _bidirectional_signatures() -> list[Signature]:
    sigs = []
    for t in FLOAT_TYPES:
        ins = (t,) * 48 + (OT.INT32, _clip_scalar(t), _clip_scalar(t), OT.BOOL, OT.BOOL) + (t,) * 8
        for n_out, v in ((1, V1_2), (2, V1_2), (5, V1_3), (6, V1_3)):
            sigs.append(Signature(ins, (t,) * n_out, v))
    return sigs


# ----------------------------------------------------------------------------
# QUANTIZED_16BIT_LSTM


def _execute_quantized_16bit(ctx: ExecContext) -> list[np.ndarray]:
    t: list[Tensor] = ctx.inputs

    def need(cond: bool, msg: Callable[[], str] | str) -> None:
        # NOTE: a message is formatted only on failure (f-strings per check cost more than the step)
        if not cond:
            raise ctx.fail(msg() if callable(msg) else msg)

    x, prev_out, prev_cell = t[0], t[14], t[13]
    need(x.data.ndim == 2, lambda: f"input must be 2-D, got shape {list(x.shape)}")
    need(x.scale == 1.0 / 128.0 and x.zero_point == 128, "input must have scale 1/128 and zeroPoint 128")
    n_batch, n_input = x.shape
    need(prev_out.data.ndim == 2 and prev_out.shape[0] == n_batch,
         lambda: f"previous output must have shape [{n_batch}, outputSize], got {list(prev_out.shape)}")
    need(prev_out.scale == 1.0 / 128.0 and prev_out.zero_point == 128,
         "previous output must have scale 1/128 and zeroPoint 128")
    n_output = prev_out.shape[1]
    w_scale, w_zp = t[1].scale, t[1].zero_point
    need(w_scale != 0, "weights scale must not be 0")
    for i in range(1, 9):
        cols = n_input if i <= 4 else n_output
        need(t[i].shape == (n_output, cols), lambda i=i, cols=cols: f"weights (input {i}) must have shape [{n_output}, {cols}]")
        need(t[i].scale == w_scale and t[i].zero_point == w_zp,
             lambda i=i: f"weights (input {i}) must share the scale and zeroPoint of input 1")
    b_scale = t[9].scale
    need(float(np.float32(b_scale)) == float(np.float32(w_scale)) / 128.0,
         "bias scale must be weights scale / 128")
    need(t[9].zero_point == 0, "bias zeroPoint must be 0")
    for i in range(9, 13):
        need(t[i].shape == (n_output,), lambda i=i: f"bias (input {i}) must have shape [{n_output}]")
        need(t[i].scale == b_scale and t[i].zero_point == 0, lambda i=i: f"bias (input {i}) must share the bias scale")
    need(prev_cell.shape == (n_batch, n_output), lambda: f"cell state must have shape [{n_batch}, {n_output}]")
    need(prev_cell.zero_point == 0, "cell state zeroPoint must be 0")
    st = ctx.state if isinstance(ctx.state, _Q16State) else _Q16State()
    ok, log2 = st.cell_log2 if st.cell_log2 is not None else checked_log2(prev_cell.scale)
    need(ok and log2 + 15 == 4, "cell state scale must be 2^-11 (4 integer bits)")

    weights_t = st.weights_t if st.weights_t is not None else _q16_weights([t[i].data for i in range(1, 9)], w_zp)
    bias = st.bias if st.bias is not None else _q16_bias([t[i].data for i in range(9, 13)])
    q, shift = st.mult if st.mult is not None else _q16_multiplier(b_scale)
    cell, out = quantized_16bit_lstm_step(x.data, prev_out.data, weights_t, bias, prev_cell.data, q, shift)
    return [cell, out]


class _Q16State:
    """QUANTIZED_16BIT_LSTM's prepared weights, bias and multiplier (None
    where an operand is not a constant: the execution builds it).  The
    execution still checks every shape and scale first, as the reference."""

    __slots__ = ("weights_t", "bias", "mult", "cell_log2")

    def __init__(self) -> None:
        self.weights_t: np.ndarray | None = None
        self.bias: np.ndarray | None = None
        self.mult: tuple[int, int] | None = None
        self.cell_log2: tuple[bool, int] | None = None  # checked_log2 of the cell state's scale


def _q16_weights(w: list, zp: int) -> np.ndarray:
    """w = inputs 1..8; reference layout: gate rows input, cell, forget,
    output; columns recurrent, input."""
    order_in, order_rec = (0, 2, 1, 3), (4, 6, 5, 7)
    weights = np.concatenate(
        [np.concatenate([w[r], w[i]], axis=1) for i, r in zip(order_in, order_rec, strict=True)], axis=0)
    return q16_weights(weights, zp)


def _q16_bias(b: list) -> np.ndarray:
    """b = inputs 9..12, in the gate order input, cell, forget, output."""
    return np.concatenate([b[0], b[2], b[1], b[3]]).astype(np.int64)


def _q16_multiplier(b_scale: float) -> tuple[int, int]:
    q, shift = quantize_multiplier(float(np.float32(4096) * np.float32(b_scale)))
    return int(q), int(shift)


def _prepare_quantized_16bit(info: OpInfo) -> _Q16State:
    st = _Q16State()
    ins = info.inputs
    w = [ins[i].value for i in range(1, 9)]
    b = [ins[i].value for i in range(9, 13)]
    try:
        # NOTE: only when the shapes are those the execution checks for (else it fails first)
        if all(v is not None and v.ndim == 2 and v.shape[0] == w[0].shape[0] for v in w) \
                and len({v.shape[1] for v in w[:4]}) == 1 and len({v.shape[1] for v in w[4:]}) == 1:
            st.weights_t = _q16_weights(w, ins[1].zero_point)
        if all(v is not None and v.ndim == 1 for v in b):
            st.bias = _q16_bias(b)
        st.mult = _q16_multiplier(ins[9].scale)
    except (ValueError, ArithmeticError):
        st.mult = None  # NOTE: the execution fails where the reference does
    try:
        with np.errstate(all="ignore"):
            st.cell_log2 = checked_log2(ins[13].scale)
    except (ValueError, OverflowError):
        st.cell_log2 = None  # NOTE: a scale the execution refuses its own way (as before)
    activation_table("logistic", 3)
    activation_table("tanh", 3)
    return st


_Q16_IN = ((OT.TENSOR_QUANT8_ASYMM,) * 9 + (OT.TENSOR_INT32,) * 4 + (OT.TENSOR_QUANT16_SYMM, OT.TENSOR_QUANT8_ASYMM))


# ----------------------------------------------------------------------------
# QUANTIZED_LSTM


def _execute_qlstm(ctx: ExecContext) -> list[np.ndarray]:
    t: list[Tensor] = ctx.inputs

    def need(cond: bool, msg: Callable[[], str] | str) -> None:
        # NOTE: a message is formatted only on failure
        if not cond:
            raise ctx.fail(msg() if callable(msg) else msg)

    def arr(i: int) -> np.ndarray | None:
        return t[i].data if ctx.has(i) else None

    x = t[0]
    need(x.data.ndim == 2, lambda: f"input must be 2-D, got shape {list(x.shape)}")
    n_batch, n_input = x.shape
    wo, ro = t[4].data, t[8].data
    need(wo.ndim == 2 and wo.shape[1] == n_input, lambda: f"input-to-output weights must be [numUnits, {n_input}]")
    n_units = wo.shape[0]
    need(ro.ndim == 2 and ro.shape[0] == n_units, lambda: f"recurrent-to-output weights must be [{n_units}, outputSize]")
    n_output = ro.shape[1]

    def shape_is(i: int, shape: tuple) -> None:
        need(arr(i) is not None and arr(i).shape == shape,
             lambda: f"input {i} must have shape {list(shape)}, got {None if arr(i) is None else list(arr(i).shape)}")

    def present(i: int) -> bool:
        return arr(i) is not None

    for i in (1, 2, 3):
        if i != 1 or present(i):
            shape_is(i, (n_units, n_input))
    for i in (5, 6, 7):
        if i != 5 or present(i):
            shape_is(i, (n_units, n_output))
    need(present(1) == present(5), "input-to-input and recurrent-to-input weights must be both present or omitted")
    for i in (9, 10, 11):
        if present(i):
            shape_is(i, (n_units,))
    cifg = not present(1)
    need(((present(9) or cifg) and present(10) and present(11)) or not (present(9) or present(10) or present(11)),
         "peephole weights must be all present or all omitted")
    if cifg:
        need(not present(12), "the input gate bias must be omitted with CIFG")
    else:
        shape_is(12, (n_units,))
    for i in (13, 14, 15):
        shape_is(i, (n_units,))
    if present(16):
        shape_is(16, (n_output, n_units))
    if present(17):
        shape_is(17, (n_output,))
    shape_is(18, (n_batch, n_output))
    shape_is(19, (n_batch, n_units))
    ln = [present(i) for i in (20, 21, 22, 23)]
    for i, p in zip((20, 21, 22, 23), ln, strict=True):
        if p:
            shape_is(i, (n_units,))
    if cifg:
        need(not ln[0], "input layer normalization weights are given while CIFG is used")
        need(all(ln[1:]) or not any(ln[1:]), "layer normalization weights must be all present or all omitted")
    else:
        need(all(ln) or not any(ln), "layer normalization weights must be all present or all omitted")
    st = ctx.state if isinstance(ctx.state, _QlstmState) else None
    ok, cell_shift = st.cell_log2 if st is not None and st.cell_log2 is not None else checked_log2(t[19].scale)
    need(ok and cell_shift <= -9, lambda: f"cell state scale {t[19].scale} must be a power of two <= 2^-9")

    if st is not None and st.checks is not None:
        inter_zero, hidden_zero = st.checks
    else:
        inter_zero = [ctx.has(1 + g) and float(ctx.scalar(26 + g, 0.0)) == 0 for g in range(4)]
        hidden_zero = float(ctx.scalar(31, 0.0)) == 0
    for g in range(4):
        if inter_zero[g]:
            raise ctx.fail(f"intermediate scale of gate {g} must not be 0")
    if hidden_zero:
        raise ctx.fail("hidden state scale must not be 0")
    p = _qlstm_tensors(arr, lambda i: t[i].scale, lambda i: t[i].zero_point, ctx.scalar, cell_shift)
    p.x, p.prev_out, p.prev_cell = x.data, t[18].data, t[19].data
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        plan = st.plan if st is not None and st.plan is not None else None
        return list(qlstm_step(p, plan))


def _qlstm_tensors(arr: Callable[[int], np.ndarray | None], scale: Callable[[int], float], zp: Callable[[int], int],
                   scalar: Callable[[int, object], object], cell_shift: int) -> QlstmTensors:
    """The QUANTIZED_LSTM operands (x, prev_out and prev_cell left None: the
    execution sets them) from accessors of values, scales and scalars."""

    def gates(idx: tuple) -> list:
        return [arr(i) for i in idx]

    def scales(idx: tuple) -> list:
        return [scale(i) for i in idx]

    hidden_zp = int(scalar(30, 0))
    hidden_zp = ((hidden_zp + 128) & 0xFF) - 128  # NOTE: the reference reads this INT32 as int8_t
    return QlstmTensors(
        x=None, x_scale=scale(0), x_zp=zp(0),
        prev_out=None, prev_out_scale=scale(18), prev_out_zp=zp(18),
        prev_cell=None, cell_scale=scale(19), cell_shift=cell_shift,
        input_w=gates((1, 2, 3, 4)), input_w_scale=scales((1, 2, 3, 4)),
        recurrent_w=gates((5, 6, 7, 8)), recurrent_w_scale=scales((5, 6, 7, 8)),
        peephole=[arr(9), arr(10), None, arr(11)], peephole_scale=[scale(9), scale(10), 0.0, scale(11)],
        bias=gates((12, 13, 14, 15)),
        layer_norm=gates((20, 21, 22, 23)), layer_norm_scale=scales((20, 21, 22, 23)),
        proj_w=arr(16), proj_w_scale=scale(16), proj_b=arr(17),
        cell_clip=float(scalar(24, 0.0)), proj_clip=float(scalar(25, 0.0)),
        intermediate_scale=[float(scalar(i, 0.0)) for i in (26, 27, 28, 29)],
        hidden_zp=hidden_zp, hidden_scale=float(scalar(31, 0.0)))


class _QlstmState:
    """QUANTIZED_LSTM's prepared scalar checks and :class:`QlstmPlan` (None
    where an operand is not a constant: the execution computes them)."""

    __slots__ = ("checks", "plan", "cell_log2")

    def __init__(self) -> None:
        self.checks: tuple | None = None  # ([intermediate scale of gate g is 0], hidden scale is 0)
        self.plan: QlstmPlan | None = None
        self.cell_log2: tuple[bool, int] | None = None  # checked_log2 of the cell state's scale


def _prepare_qlstm(info: OpInfo) -> _QlstmState:
    st = _QlstmState()
    ins = info.inputs

    def omitted(i: int) -> bool:
        return i >= len(ins) or ins[i].lifetime == OperandLifeTime.NO_VALUE

    def known(i: int) -> bool:
        return omitted(i) or ins[i].value is not None

    def arr(i: int) -> np.ndarray | None:
        return None if omitted(i) else ins[i].value

    def scalar(i: int, d: object) -> object:
        return d if omitted(i) else ins[i].value.item()

    if not all(known(i) for i in range(1, 5)) or not all(known(i) for i in range(24, 32)):
        return st
    try:
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            st.checks = ([not omitted(1 + g) and float(scalar(26 + g, 0.0)) == 0 for g in range(4)],
                         float(scalar(31, 0.0)) == 0)
            ok, cell_shift = checked_log2(ins[19].scale)
            st.cell_log2 = (ok, cell_shift)
            if not (ok and cell_shift <= -9) or any(st.checks[0]) or st.checks[1]:
                return st  # NOTE: every execution fails first
            if all(known(i) for i in range(1, 24) if i not in (18, 19)):  # NOTE: 18, 19: the states
                st.plan = qlstm_plan(_qlstm_tensors(arr, lambda i: ins[i].scale, lambda i: ins[i].zero_point, scalar,
                                                    cell_shift))
            if 0 <= cell_shift + 15 <= 6:
                activation_table("tanh", cell_shift + 15)
    except (ValueError, ArithmeticError, TypeError, AttributeError, IndexError):
        st.plan = None  # NOTE: the execution computes it and fails where the reference does
    activation_table("logistic", 3)
    activation_table("tanh", 3)
    return st


_QLSTM_IN = ((OT.TENSOR_QUANT8_ASYMM_SIGNED,) + (OT.TENSOR_QUANT8_SYMM,) * 8 + (OT.TENSOR_QUANT16_SYMM,) * 3
             + (OT.TENSOR_INT32,) * 4 + (OT.TENSOR_QUANT8_SYMM, OT.TENSOR_INT32, OT.TENSOR_QUANT8_ASYMM_SIGNED,
                                          OT.TENSOR_QUANT16_SYMM) + (OT.TENSOR_QUANT16_SYMM,) * 4
             + (OT.FLOAT32,) * 6 + (OT.INT32, OT.FLOAT32))
_QLSTM_OUT = (OT.TENSOR_QUANT8_ASYMM_SIGNED, OT.TENSOR_QUANT16_SYMM, OT.TENSOR_QUANT8_ASYMM_SIGNED)


def _guard(fn: Callable[[ExecContext], list]) -> Callable[[ExecContext], list]:
    """Turns an omitted required input into a clean run-time failure."""

    def run(ctx: ExecContext) -> list:
        try:
            return fn(ctx)
        except AttributeError as e:
            if any(t.data is None for t in ctx.inputs):
                raise OpExecutionError(f"{ctx.type.name}: a required input is omitted ({e})") from e
            raise

    return run


OPS: list[OpDef] = [
    # NOTE: the reference runs LSTM and BIDIRECTIONAL_SEQUENCE_LSTM outside the
    # operation resolver without a zero-sized input check (an empty batch or
    # sequence gives empty outputs); the resolver ops reject zero-sized inputs.
    OpDef(type=OperationType.LSTM, signatures=_lstm_signatures(), execute=_guard(_execute_lstm),
          prepare=_prepare_float_lstm(LSTM_LAYOUT, 20, 21),
          omittable_inputs=frozenset({1, 5, 9, 10, 11, 12, 16, 17, 23, 24, 25, 26}), allow_zero_sized=True, allow_omitted_outputs=True),
    OpDef(type=OperationType.BIDIRECTIONAL_SEQUENCE_LSTM, signatures=_bidirectional_signatures(),
          execute=_guard(_execute_bidirectional), prepare=_prepare_bidirectional,
          omittable_inputs=frozenset({1, 5, 9, 10, 11, 12, 16, 17, 18, 22, 26, 27, 28, 29, 33, 34,
                                      *range(39, 48), *range(53, 61)}), allow_zero_sized=True, allow_omitted_outputs=True),
    OpDef(type=OperationType.UNIDIRECTIONAL_SEQUENCE_LSTM, signatures=_unidirectional_signatures(),
          execute=_guard(_execute_unidirectional), prepare=_prepare_float_lstm(UNI_LAYOUT, 20, 21),
          omittable_inputs=frozenset({1, 5, 9, 10, 11, 12, 16, 17, 24, 25, 26, 27})),
    OpDef(type=OperationType.QUANTIZED_16BIT_LSTM, signatures=[Signature(_Q16_IN, (OT.TENSOR_QUANT16_SYMM,
                                                                                     OT.TENSOR_QUANT8_ASYMM), V1_2)],
          execute=_guard(_execute_quantized_16bit), prepare=_prepare_quantized_16bit,
          bad_data_on_missing_operand=True),
    OpDef(type=OperationType.QUANTIZED_LSTM, signatures=[Signature(_QLSTM_IN, _QLSTM_OUT, V1_3)],
          execute=_guard(_execute_qlstm), prepare=_prepare_qlstm,
          omittable_inputs=frozenset({1, 5, 9, 10, 11, 12, 16, 17, 20, 21, 22, 23, 24, 25})),
]
