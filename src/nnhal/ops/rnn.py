"""Basic recurrent operations of the HAL spec: RNN, SVDF,
BIDIRECTIONAL_SEQUENCE_RNN and UNIDIRECTIONAL_SEQUENCE_RNN (``OperationType``
docs in ``types.hal``), with the optional inputs and outputs of HAL 1.2/1.3
(auxiliary inputs, time-major layouts, merged outputs, state outputs).

Every step is a batch of matrix products computed in float64; the hidden state
carried between time steps is rounded to the operand's storage type each
step, as the reference stores it in its buffers.  Float16 operands are
computed the same way and cast back.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nnhal.hal import OperandType, OperationType
from nnhal.ops import deadline
from nnhal.ops.base import V1_0, V1_2, V1_3, ExecContext, OpDef, OpExecutionError, OpInfo, Signature
from nnhal.ops.prepared import Ready, frozen, prepared

T = OperandType
FLOATS = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)


def activation(x: np.ndarray, act: int) -> np.ndarray:
    """TFLite's fused activation functions (kTfLiteActNone .. kTfLiteActSigmoid)."""
    if act == 0:
        return x
    if act == 1:
        return np.maximum(x, 0)
    if act == 2:
        return np.clip(x, -1, 1)
    if act == 3:
        return np.clip(x, 0, 6)
    if act == 4:
        return np.tanh(x)
    if act == 5:
        return np.signbit(x).astype(x.dtype)
    if act == 6:
        return 1.0 / (1.0 + np.exp(-x))
    raise OpExecutionError(f"unsupported activation function {act}")


# --------------------------------------------------------------------------
# the Prepare/Eval split: what depends only on the model


class _State:
    """An operation's prepared parameters: float64 copies of its constant
    weights and biases by input position (read-only, shared by executions),
    and its parsed scalars (``Ready``; None when one is not a constant: the
    execution parses them with the same function)."""

    __slots__ = ("f64", "params")

    def __init__(self, f64: dict[int, np.ndarray], params: Ready | None) -> None:
        self.f64 = f64
        self.params = params


def _prepare(weights: tuple, scalars: tuple, parse: Callable[..., tuple]) -> Callable[[OpInfo], _State]:
    """prepare: the float64 copies of the constant inputs at ``weights`` and
    ``parse(*scalar values)`` when every scalar is a constant."""

    def prepare(info: OpInfo) -> _State:
        f64 = {}
        for i in weights:
            v = info.constant(i)
            if v is not None:
                f64[i] = frozen(v.astype(np.float64))
        vals = [info.constant(i) for i in scalars]
        params = None
        if all(v is not None and v.size == 1 for v in vals):
            params = prepared(parse, *(v.item() for v in vals))
        return _State(f64, params)

    return prepare


def _params(ctx: ExecContext, scalars: tuple, parse: Callable[..., tuple]) -> tuple:
    """The parsed scalars: prepared, else parsed from this execution's values."""
    st = ctx.state
    if st is not None and st.params is not None:
        return st.params.value(ctx)
    return parse(*[ctx.scalar(i) for i in scalars])


_NONE: dict = {}


def _f64s(ctx: ExecContext, indexes: tuple) -> list[np.ndarray]:
    """Inputs in float64: the prepared copies of constants, the others converted now."""
    st = ctx.state
    pre = _NONE if st is None else st.f64
    ins = ctx.inputs
    if not pre:
        return [ins[i].data.astype(np.float64) for i in indexes]
    return [pre[i] if i in pre else ins[i].data.astype(np.float64) for i in indexes]


def _f64(ctx: ExecContext, i: int) -> np.ndarray:
    """Input i in float64: the prepared copy of a constant, else converted now."""
    return _f64s(ctx, (i,))[0]


def _require(ctx: ExecContext, indexes: range | tuple) -> None:
    for i in indexes:
        if not ctx.has(i):
            raise ctx.fail(f"required input {i} is omitted")


def _check_rank(ctx: ExecContext, name: str, x: np.ndarray, rank: int) -> None:
    if x.ndim != rank:
        raise ctx.fail(f"{name} must have rank {rank}, got shape {list(x.shape)}")


def _rnn_sequence(xs: np.ndarray, h: np.ndarray, w: np.ndarray, rw: np.ndarray, b: np.ndarray, act: int,
                  store: np.dtype, aux: np.ndarray | None = None, aux_w: np.ndarray | None = None,
                  reverse: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Runs a simple RNN over time-major ``xs`` [time, batch, input]; returns
    the outputs [time, batch, units] and the last hidden state."""
    n_time = xs.shape[0]
    # NOTE: the input and auxiliary projections do not depend on the state: one product for all steps
    proj = xs @ w.T + b
    if aux is not None:
        proj = proj + aux @ aux_w.T
    outs = np.empty(proj.shape, dtype=np.float64)
    steps = range(n_time - 1, -1, -1) if reverse else range(n_time)
    for t in steps:
        deadline.poll()  # NOTE: a long sequence ends at the execution's deadline
        h = activation(proj[t] + h @ rw.T, act).astype(store).astype(np.float64)
        outs[t] = h
    return outs, h


# --------------------------------------------------------------------------
# RNN


def execute_rnn(ctx: ExecContext) -> list[np.ndarray]:
    _require(ctx, range(6))
    x, w, rw, b, h = _f64s(ctx, (0, 1, 2, 3, 4))
    for name, arr, rank in (("input", x, 2), ("weights", w, 2), ("recurrent_weights", rw, 2), ("bias", b, 1),
                            ("hidden state", h, 2)):
        _check_rank(ctx, name, arr, rank)
    batch, units = x.shape[0], w.shape[0]
    if x.shape[1] != w.shape[1] or b.shape[0] != units or rw.shape != (units, units):
        raise ctx.fail(f"inconsistent shapes: input {list(x.shape)}, weights {list(w.shape)}, "
                       f"recurrent weights {list(rw.shape)}, bias {list(b.shape)}")
    if h.shape != (batch, units):
        raise ctx.fail(f"hidden state shape {list(h.shape)} is not {[batch, units]}")
    dtype = ctx.outputs[0].dtype
    (act,) = _params(ctx, _RNN_SCALARS, _parse_rnn)
    out = activation(x @ w.T + h @ rw.T + b, act).astype(dtype)
    return [out, out.copy()]


_RNN_WEIGHTS, _RNN_SCALARS = (1, 2, 3), (5,)


def _parse_rnn(act: int) -> tuple:
    return (int(act),)


# --------------------------------------------------------------------------
# SVDF


def execute_svdf(ctx: ExecContext) -> list[np.ndarray]:
    _require(ctx, (0, 1, 2, 4, 5, 6))
    x, wf, wt, state = _f64s(ctx, (0, 1, 2, 4))
    rank, act = _params(ctx, _SVDF_SCALARS, _parse_svdf)
    for name, arr in (("input", x), ("weights_feature", wf), ("weights_time", wt), ("state", state)):
        _check_rank(ctx, name, arr, 2)
    batch, n_filters, memory = x.shape[0], wf.shape[0], wt.shape[1]
    if rank <= 0 or n_filters % rank:
        raise ctx.fail(f"rank {rank} does not divide the {n_filters} filters")
    units = n_filters // rank
    if x.shape[1] != wf.shape[1] or wt.shape[0] != n_filters:
        raise ctx.fail(f"inconsistent shapes: input {list(x.shape)}, weights_feature {list(wf.shape)}, "
                       f"weights_time {list(wt.shape)}")
    if state.shape != (batch, memory * n_filters):
        raise ctx.fail(f"state shape {list(state.shape)} is not {[batch, memory * n_filters]}")
    bias = None
    if ctx.has(3):
        bias = _f64(ctx, 3)
        if bias.shape != (units,):
            raise ctx.fail(f"bias shape {list(bias.shape)} is not {[units]}")
    # NOTE: the reference keeps, per filter, memory_size activations with the newest last; the
    # newest is written in place of the last column, used, and the whole memory shifted left after.
    mem = state.reshape(batch, n_filters, memory).copy()
    mem[:, :, -1] = x @ wf.T
    scratch = np.einsum("bfm,fm->bf", mem, wt)
    out = scratch.reshape(batch, units, rank).sum(axis=2)
    if bias is not None:
        out = out + bias
    out = activation(out, act)
    new_state = np.zeros_like(mem)
    new_state[:, :, :-1] = mem[:, :, 1:]
    dtype = ctx.outputs[0].dtype
    return [new_state.reshape(batch, memory * n_filters).astype(dtype), out.astype(dtype)]


_SVDF_WEIGHTS, _SVDF_SCALARS = (1, 2, 3), (5, 6)


def _parse_svdf(rank: int, act: int) -> tuple:
    return int(rank), int(act)


# --------------------------------------------------------------------------
# UNIDIRECTIONAL_SEQUENCE_RNN


def execute_unidirectional_rnn(ctx: ExecContext) -> list[np.ndarray]:
    _require(ctx, range(7))
    x, w, rw, b, h = _f64s(ctx, (0, 1, 2, 3, 4))
    act, time_major = _params(ctx, _UNI_SCALARS, _parse_uni)
    if time_major not in (0, 1):
        raise ctx.fail(f"timeMajor must be 0 or 1, got {time_major}")
    for name, arr, rank in (("input", x, 3), ("weights", w, 2), ("recurrent_weights", rw, 2), ("bias", b, 1),
                            ("hidden state", h, 2)):
        _check_rank(ctx, name, arr, rank)
    if not time_major:
        x = x.transpose(1, 0, 2)
    batch, units = x.shape[1], w.shape[0]
    if x.shape[2] != w.shape[1] or b.shape[0] != units or rw.shape != (units, units) or h.shape != (batch, units):
        raise ctx.fail(f"inconsistent shapes: input {list(ctx.inputs[0].shape)}, weights {list(w.shape)}, "
                       f"recurrent weights {list(rw.shape)}, bias {list(b.shape)}, hidden state {list(h.shape)}")
    dtype = ctx.outputs[0].dtype
    outs, last = _rnn_sequence(x, h, w, rw, b, act, dtype)
    if not time_major:
        outs = outs.transpose(1, 0, 2)
    result = [np.ascontiguousarray(outs).astype(dtype)]
    if len(ctx.outputs) == 2:
        result.append(last.astype(dtype))
    return result


_UNI_WEIGHTS, _UNI_SCALARS = (1, 2, 3), (5, 6)


def _parse_uni(act: int, time_major: int) -> tuple:
    return int(act), int(time_major)


# --------------------------------------------------------------------------
# BIDIRECTIONAL_SEQUENCE_RNN


_BIDI_AUX = (9, 10, 11)
_BIDI_WEIGHTS, _BIDI_SCALARS = (1, 2, 3, 5, 6, 7, 10, 11), (12, 13, 14)


def _parse_bidi(act: int, time_major: bool, merge: bool) -> tuple:
    return int(act), bool(time_major), bool(merge)


def execute_bidirectional_rnn(ctx: ExecContext) -> list[np.ndarray]:
    _require(ctx, (0, 1, 2, 3, 4, 5, 6, 7, 8, 12, 13, 14))
    x, fw_w, fw_rw, fw_b, fw_h, bw_w, bw_rw, bw_b, bw_h = _f64s(ctx, (0, 1, 2, 3, 4, 5, 6, 7, 8))
    act, time_major, merge = _params(ctx, _BIDI_SCALARS, _parse_bidi)
    n_out = len(ctx.outputs)
    if merge and n_out not in (1, 3):
        raise ctx.fail(f"merged outputs need 1 or 3 outputs, got {n_out}")
    if not merge and n_out not in (2, 4):
        raise ctx.fail(f"separate outputs need 2 or 4 outputs, got {n_out}")
    for i, t in enumerate(ctx.inputs):
        if i not in _BIDI_AUX and t.data is not None and t.data.ndim and t.data.size == 0:
            raise ctx.fail(f"input {i} is zero-sized ({list(t.data.shape)})")
    # NOTE: an empty auxiliary tensor counts as omitted: test harnesses pass omitted optional
    # inputs as empty [0] tensors, and a real one could never match the 3-D / 2-D shape rules.
    has_aux, has_fw_aux, has_bw_aux = (ctx.has(i) and ctx.inputs[i].data.size > 0 for i in _BIDI_AUX)
    if not has_aux and not has_fw_aux and not has_bw_aux:
        mode = "none"
    elif has_aux and not has_fw_aux and not has_bw_aux:
        mode = "parallel"  # the auxiliary input is the backward cell's input
    elif has_aux and has_fw_aux and has_bw_aux:
        mode = "cross"  # both cells add aux_input * aux_weights
    else:
        raise ctx.fail("unsupported combination of auxiliary tensors")

    for name, arr, rank in (("input", x, 3), ("fw weights", fw_w, 2), ("fw recurrent weights", fw_rw, 2),
                            ("fw bias", fw_b, 1), ("fw hidden state", fw_h, 2), ("bw weights", bw_w, 2),
                            ("bw recurrent weights", bw_rw, 2), ("bw bias", bw_b, 1), ("bw hidden state", bw_h, 2)):
        _check_rank(ctx, name, arr, rank)
    aux = _f64(ctx, 9) if mode != "none" else None
    if aux is not None:
        _check_rank(ctx, "aux input", aux, 3)
        if aux.shape[:2] != x.shape[:2]:
            raise ctx.fail(f"aux input shape {list(aux.shape)} does not match input {list(x.shape)}")
    if not time_major:
        x = x.transpose(1, 0, 2)
        aux = aux.transpose(1, 0, 2) if aux is not None else None
    batch, in_size = x.shape[1], x.shape[2]
    fw_units, bw_units = fw_w.shape[0], bw_w.shape[0]
    if (in_size != fw_w.shape[1] or fw_b.shape[0] != fw_units or fw_rw.shape != (fw_units, fw_units)
            or fw_h.shape != (batch, fw_units)):
        raise ctx.fail("forward cell shapes do not match the input")
    if (bw_b.shape[0] != bw_units or bw_rw.shape != (bw_units, bw_units) or bw_h.shape != (batch, bw_units)):
        raise ctx.fail("backward cell shapes do not match the input")
    fw_aux_w = bw_aux_w = None
    if mode == "cross":
        fw_aux_w, bw_aux_w = _f64s(ctx, (10, 11))
        _check_rank(ctx, "fw aux weights", fw_aux_w, 2)
        _check_rank(ctx, "bw aux weights", bw_aux_w, 2)
        if fw_aux_w.shape != (fw_units, aux.shape[2]) or bw_aux_w.shape != (bw_units, aux.shape[2]):
            raise ctx.fail("aux weights shapes do not match the aux input")
        # NOTE: the reference's step loops over input_size elements of the aux input and weights
        if aux.shape[2] != in_size:
            raise ctx.fail(f"aux input size {aux.shape[2]} differs from the input size {in_size}")
    if mode != "parallel" and in_size != bw_w.shape[1]:
        raise ctx.fail("backward weights do not match the input size")
    if mode == "parallel":
        if aux.shape[2] != bw_w.shape[1]:
            raise ctx.fail("backward weights do not match the aux input size")
        # NOTE: the reference walks the aux input with the regular input's row size
        if aux.shape[2] != in_size:
            raise ctx.fail(f"aux input size {aux.shape[2]} differs from the input size {in_size}")

    dtype = ctx.outputs[0].dtype
    fw_out, fw_last = _rnn_sequence(x, fw_h, fw_w, fw_rw, fw_b, act, dtype,
                                    aux if mode == "cross" else None, fw_aux_w)
    bw_in = aux if mode == "parallel" else x
    bw_out, bw_last = _rnn_sequence(bw_in, bw_h, bw_w, bw_rw, bw_b, act, dtype,
                                    aux if mode == "cross" else None, bw_aux_w, reverse=True)

    def layout(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a if time_major else a.transpose(1, 0, 2)).astype(dtype)

    result = [layout(np.concatenate([fw_out, bw_out], axis=2))] if merge else [layout(fw_out), layout(bw_out)]
    if n_out in (3, 4):
        result += [fw_last.astype(dtype), bw_last.astype(dtype)]
    return result


# --------------------------------------------------------------------------


def _bidi_signatures() -> list[Signature]:
    sigs = []
    for t in FLOATS:
        ins = (t,) * 12 + (T.INT32, T.BOOL, T.BOOL)
        for n_out, version in ((1, V1_2), (2, V1_2), (3, V1_3), (4, V1_3)):
            sigs.append(Signature(ins, (t,) * n_out, version))
    return sigs


OPS = [
    OpDef(
        type=OperationType.RNN,
        signatures=[Signature((t,) * 5 + (T.INT32,), (t, t), v) for t, v in ((T.TENSOR_FLOAT32, V1_0),
                                                                            (T.TENSOR_FLOAT16, V1_2))],
        execute=execute_rnn, prepare=_prepare(_RNN_WEIGHTS, _RNN_SCALARS, _parse_rnn), bad_data_on_missing_operand=True
    ),
    OpDef(
        type=OperationType.SVDF,
        signatures=[Signature((t,) * 5 + (T.INT32, T.INT32), (t, t), v) for t, v in ((T.TENSOR_FLOAT32, V1_0),
                                                                                    (T.TENSOR_FLOAT16, V1_2))],
        execute=execute_svdf, prepare=_prepare(_SVDF_WEIGHTS, _SVDF_SCALARS, _parse_svdf),
        omittable_inputs=frozenset({3}), allow_omitted_outputs=True
    ),
    OpDef(
        type=OperationType.BIDIRECTIONAL_SEQUENCE_RNN,
        signatures=_bidi_signatures(),
        execute=execute_bidirectional_rnn, prepare=_prepare(_BIDI_WEIGHTS, _BIDI_SCALARS, _parse_bidi),
        omittable_inputs=frozenset(_BIDI_AUX),
        allow_zero_sized=True,  # only for the auxiliary tensors (see the kernel)
    ),
    OpDef(
        type=OperationType.UNIDIRECTIONAL_SEQUENCE_RNN,
        signatures=[Signature((t,) * 5 + (T.INT32, T.INT32), (t,) * n, v)
                    for t in FLOATS for n, v in ((1, V1_2), (2, V1_3))],
        execute=execute_unidirectional_rnn, prepare=_prepare(_UNI_WEIGHTS, _UNI_SCALARS, _parse_uni),
    ),
]
