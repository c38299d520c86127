"""Convolutions and fully connected: HAL 1.3 ``CONV_2D``,
``DEPTHWISE_CONV_2D``, ``GROUPED_CONV_2D``, ``TRANSPOSE_CONV_2D`` and
``FULLY_CONNECTED`` (types.hal), with the validation rules and run-time
checks of Android's reference (Conv2D.cpp, DepthwiseConv2D.cpp,
GroupedConv2D.cpp, TransposeConv2D.cpp, FullyConnected.cpp, OperationsUtils).

Every data type the spec lists: float32 (and relaxed), float16 (computed in
float32), quant8 asymm and asymm signed sharing one integer kernel on
``q - zeroPoint``, and per-channel symmetric filters.  Convolutions are BLAS
matrix products (im2col views, 1x1 as plain GEMM); depthwise is a tap sum
vectorized over channels; quantized results are exact integers requantized
with the TFLite rounding (see :mod:`nnhal.ops.conv_kernels`).  Filter
re-layouts and quantization multipliers are computed once, in ``prepare``,
when the operands are constants.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any, Callable, Generator, Optional

import numpy as np
from numpy.lib.stride_tricks import as_strided

from nnhal.hal import OperandType, OperationType
from nnhal.ops import conv_kernels as ck
from nnhal.ops import memo
from nnhal.ops.base import (
    NUMPY_DTYPE,
    QUANT8_ASYMM_TYPES,
    V1_0,
    V1_2,
    V1_3,
    ExecContext,
    OpDef,
    OpExecutionError,
    OpInfo,
    OutputSpec,
    PrepareJob,
    Signature,
    Tensor,
    prepare_now,
)
from nnhal.ops.prepared import Deferred
from nnhal.ops.quant import QUANT_RANGE, activation_range, quantize_multiplier, quantize_multipliers
from nnhal.platform.memory import private_array

T = OperandType
F32, F16, I32, B = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.INT32, T.BOOL
Q8A, Q8S, PC, TI32 = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM_PER_CHANNEL, T.TENSOR_INT32

# (input, filter, bias, first HAL version) of the spatial convolutions
_CONV_TYPES = [
    (F32, F32, F32, V1_0),
    (F16, F16, F16, V1_2),
    (Q8A, Q8A, TI32, V1_0),
    (Q8A, PC, TI32, V1_2),
    (Q8S, Q8S, TI32, V1_3),
    (Q8S, PC, TI32, V1_3),
]


def _conv_signatures(n_implicit: int, n_explicit: int) -> list[Signature]:
    """CONV_2D / DEPTHWISE_CONV_2D: implicit or explicit padding, then the
    optional (layout, dilation w, dilation h) of HAL 1.2."""
    sigs = []
    for ti, tf, tb, ver in _CONV_TYPES:
        for n in (n_implicit, n_explicit):
            base = (ti, tf, tb) + (I32,) * (n - 3)
            sigs.append(Signature(base, (ti,), ver))
            sigs.append(Signature(base, (ti,), max(ver, V1_2), optional=(B, I32, I32)))
    return sigs


def _grouped_signatures() -> list[Signature]:
    sigs = []
    for ti, tf, tb, ver in _CONV_TYPES:
        ver = max(ver, V1_2)
        sigs.append(Signature((ti, tf, tb) + (I32,) * 5 + (B,), (ti,), ver))
        sigs.append(Signature((ti, tf, tb) + (I32,) * 8 + (B,), (ti,), ver))
    return sigs


def _transpose_signatures() -> list[Signature]:
    sigs = []
    for ti, tf, tb, ver in _CONV_TYPES:
        ver = max(ver, V1_2)
        sigs.append(Signature((ti, tf, tb, TI32) + (I32,) * 4 + (B,), (ti,), ver))
        sigs.append(Signature((ti, tf, tb) + (I32,) * 7 + (B,), (ti,), ver))
    return sigs


_FC_SIGNATURES = [
    Signature((F32, F32, F32, I32), (F32,), V1_0),
    Signature((F16, F16, F16, I32), (F16,), V1_2),
    Signature((Q8A, Q8A, TI32, I32), (Q8A,), V1_0),
    Signature((Q8S, Q8S, TI32, I32), (Q8S,), V1_3),
]


# --------------------------------------------------------------------------
# validation (model time)


def _check_scale_before_v1_2(info: OpInfo) -> None:
    """Before HAL 1.2 a TENSOR_QUANT8_ASYMM output needs outputScale >
    inputScale * filterScale (compared in single precision)."""
    if info.inputs[0].type != Q8A or info.version >= V1_2:
        return
    prod = np.float32(info.inputs[0].scale) * np.float32(info.inputs[1].scale)
    if not np.float32(info.outputs[0].scale) > prod:
        raise info.fail("output scale must exceed input scale * filter scale before HAL V1_2")


def _check_channel_dim(info: OpInfo, dim: int) -> None:
    f = info.inputs[1]
    if f.type == PC:
        cq = f.channel_quant
        if cq is None or cq.channelDim != dim:
            raise info.fail(f"per-channel filter must have channelDim {dim}")


def _dilation_count_check(info: OpInfo, layout_pos: int) -> None:
    """Only one of the two dilation factors given (CONV_2D, DEPTHWISE)."""
    n = len(info.inputs)
    if n >= layout_pos + 1:
        explicit = info.inputs[layout_pos].type == I32 and n >= layout_pos + 3
        off = 3 if explicit else 0
        if n == layout_pos + 2 + off:
            raise info.fail("only one dilation factor given, both are required")


def _validate_conv(info: OpInfo) -> None:
    _dilation_count_check(info, 7)
    for i, what in ((0, "input"), (1, "filter")):
        if info.inputs[i].rank not in (0, 4):
            raise info.fail(f"{what} must have rank 4")
    _check_channel_dim(info, 0)
    _check_scale_before_v1_2(info)


def _validate_depthwise(info: OpInfo) -> None:
    _dilation_count_check(info, 8)
    _check_channel_dim(info, 3)
    _check_scale_before_v1_2(info)


def _validate_grouped(info: OpInfo) -> None:
    _check_channel_dim(info, 0)


def _validate_transpose(info: OpInfo) -> None:
    _check_channel_dim(info, 0)


def _fc_shape_error(in_dims: tuple, w_dims: tuple, b_dims: tuple) -> str | None:
    """FullyConnected ``validateShapes``; 0 dimensions count as unknown."""
    if not 2 <= len(in_dims) <= 4:
        return "input must have rank 2 to 4"
    if len(w_dims) != 2:
        return "weights must have rank 2"
    if len(b_dims) != 1:
        return "bias must have rank 1"
    n_elem = math.prod(in_dims) if in_dims else 0
    units, in_size = w_dims
    batch = 0 if in_size == 0 else n_elem // in_size
    if batch != 0 and in_size * batch != n_elem:
        return f"input of {n_elem} values is not a whole number of rows of {in_size}"
    if units != 0 and b_dims[0] != 0 and b_dims[0] != units:
        return f"bias has {b_dims[0]} values for {units} units"
    return None


def _validate_fc(info: OpInfo) -> None:
    _check_scale_before_v1_2(info)
    ins = info.inputs
    if ins[0].rank and ins[1].rank and ins[2].rank:
        err = _fc_shape_error(ins[0].dimensions, ins[1].dimensions, ins[2].dimensions)
        if err:
            raise info.fail(err)


# --------------------------------------------------------------------------
# prepared state: filter layouts and quantization multipliers


class _State:
    """Per-model precomputation (from constants only).  ``filters`` and
    ``requants`` are filled in prepare when the operands are constants; an
    execution builds what is missing itself (non-constant filter or bias)."""

    def __init__(self) -> None:
        self.filter: tuple | None = None  # (key, matrix, max |w - zw|); matrix None: see matrix()
        self.filter_derived = False  # the matrix is _build_filter of the constant filter (quantized)
        # a state loaded from the compilation cache builds its quantized filter matrix from the
        # model's weights (kept in their stored width) when an execution first needs it: loading
        # stays a read of the cache, the conversion is paid once, by the first execution
        self.lazy_filter: Callable[[], np.ndarray] | None = None
        self.lazy_matrix = memo.Memo(1)
        self.mult: tuple | None = None  # (q[C], shift[C]) or None
        self.mult_error: str | None = None
        self.requant: dict = {}  # act -> Requant (constant bias only)
        # NOTE: the memos below are filled by executions (shapes known only at
        # run time); locked and bounded: executions share this state
        self.wt_cache = memo.Memo(8)  # depthwise tiled weights (constant filter only)
        self.bias_const = False
        self.bias_tiled = memo.Memo(8)  # float bias tiled over the output width (constant bias only)
        self.params_const = False  # every input after the bias is a constant
        self.geometry = memo.Memo(16)  # (input, filter, bias shapes) -> padding, strides, output size...
        # act -> Requant of the GEMM on raw input codes (CONV_2D): the input zero
        # point folded into the bias as -zp * sum(w - zw), see _fold_input_zp
        self.fold: dict = {}
        # 1x1 CONV_2D without a fold: the filter with a last row -zp * sum(w - zw)
        # (multiplying a column of ones appended to the raw input codes)
        self.zrow: np.ndarray | None = None
        self.l1: float | None = None  # largest column L1 norm of the (constant) filter matrix
        self.plan: _Plan | None = None  # the static plan (shapes known at prepare), see _make_plan
        # ("plain" | "fold", act) -> Requant whose float32 constants hold only for the accumulators this
        # layer can reach (see _bounded_requants): for the static plan, where the general search fell short
        self.bounded: dict = {}


def _f32(v: float) -> float:
    return float(np.float32(v))


def _multipliers(in_scale: float, f_type: OperandType, f_scale: float, f_cq: Any, b_scale: float,
                 out_scale: float, nch: int) -> tuple[np.ndarray, np.ndarray]:
    """Android ``GetQuantizedConvolutionMultipler`` + ``QuantizeMultiplier``
    per output channel; raises ValueError where the reference fails."""
    s_in, s_out = _f32(in_scale), _f32(out_scale)
    if f_type == PC:
        scales = np.asarray(f_cq.scales if f_cq is not None else [], np.float32)
        if scales.shape != (nch,):
            raise ValueError(f"per-channel filter has {scales.size} scales for {nch} channels")
        with np.errstate(over="ignore"):  # NOTE: an infinite product is refused below (the multiplier)
            products = (np.float32(s_in) * scales).astype(np.float64)
    else:
        ips = _f32(np.float32(s_in) * np.float32(f_scale))
        bs = _f32(b_scale)
        if not abs(ips - bs) <= 1e-6 * min(ips, bs):
            raise ValueError(f"bias scale {bs} != input scale * filter scale {ips}")
        products = np.full(nch, ips)
    if not (np.all(np.isfinite(products)) and np.all(products >= 0) and 0 < s_out < math.inf):
        return _multipliers_each(products, s_out)  # NOTE: the reference's own failures, in its order
    return quantize_multipliers(products / s_out)  # NOTE: the same doubles as one by one


def _multipliers_each(products: np.ndarray, s_out: float) -> tuple[np.ndarray, np.ndarray]:
    qs, shifts = [], []
    for ips in products.tolist():
        if ips < 0:
            raise ValueError("negative input * filter scale")
        q, sh = quantize_multiplier(ips / s_out)
        qs.append(q)
        shifts.append(sh)
    return np.array(qs, np.int64), np.array(shifts, np.int64)


@dataclass(frozen=True)
class _Form:
    """What differs between the five convolution-like operations, as data:
    the filter's rank and re-layout for the kernel, where its output channels
    are, and the positions of the groups / activation / layout inputs."""

    name: str  # the prepared filter's cache key
    filter_rank: int
    layout: Callable[[np.ndarray, int], np.ndarray]  # (filter as float32, groups) -> kernel matrix
    out_channel_axis: int  # of the filter
    act_input: Callable[[int, list], int]  # (input count, input types) -> activation input
    groups_input: Optional[Callable[[int], int]] = None  # GROUPED_CONV_2D: (input count) -> groups input
    layout_flag: Optional[int] = None  # CONV_2D / DEPTHWISE: position of the implicit-padding layout flag
    multiplier: bool = False  # DEPTHWISE: the depth multiplier input shifts the tail
    fold_input_zp: bool = False  # CONV_2D: the input zero point folded into the bias at prepare


def _grouped_layout(wf: np.ndarray, groups: int) -> np.ndarray:
    return wf.reshape(groups, wf.shape[0] // groups, -1).transpose(0, 2, 1)


CONV = _Form("conv", 4, lambda wf, g: wf.reshape(wf.shape[0], -1).T, 0,  # [Cout, kh, kw, Cin] -> [kh*kw*Cin, Cout]
             lambda n, t: 6 if ((n >= 8 and t[7] == B) or n == 7) else 9, layout_flag=7, fold_input_zp=True)
DEPTHWISE = _Form("depthwise", 4, lambda wf, g: wf[0], 3,  # [1, kh, kw, C] -> [kh, kw, C]
                  lambda n, t: 7 if ((n >= 9 and t[8] == B) or n == 8) else 10, layout_flag=8, multiplier=True)
GROUPED = _Form("grouped", 4, _grouped_layout, 0,  # -> [G, kh*kw*Cg, Og]
                lambda n, t: 10 if n == 12 else 7, groups_input=lambda n: 9 if n == 12 else 6)
TRANSPOSE = _Form("transpose", 4,  # [Cout, kh, kw, Cin] -> [Cin, kh*kw*Cout]
                  lambda wf, g: wf.transpose(3, 1, 2, 0).reshape(wf.shape[3], -1), 0,
                  lambda n, t: 7 if n == 9 else 9)
FC = _Form("fc", 2, lambda wf, g: wf.T, 0, lambda n, t: 3)  # [units, in] -> [in, units]

_FORMS = {OperationType.CONV_2D: CONV, OperationType.DEPTHWISE_CONV_2D: DEPTHWISE,
          OperationType.GROUPED_CONV_2D: GROUPED, OperationType.TRANSPOSE_CONV_2D: TRANSPOSE,
          OperationType.FULLY_CONNECTED: FC}


def _filter_key(form: _Form, groups: int) -> tuple:
    return (form.name, groups)


def _build_filter(form: _Form, w: np.ndarray, zp: int, is_q: bool, groups: int = 1) -> tuple[np.ndarray, int]:
    """The filter re-laid-out for the kernel, float32 (quantized: minus its
    zero point), and max |w - zp| (exactness bound of the integer GEMM).

    Quantized CONV_2D / FULLY_CONNECTED: the [K, Cout] matrix is the transpose
    of the C-ordered [Cout, K] weights, converted in one pass without a
    re-layout copy (an exact integer GEMM gives the same sums whatever the
    operand order BLAS reads): cheap enough to redo when a cached model loads
    (see _load_state), so the cache keeps the weights in their stored width."""
    m = _filter_matrix(form, w, zp, is_q, groups)
    return m, (int(max(m.max(), -m.min())) if (is_q and m.size) else 0)


def _filter_matrix(form: _Form, w: np.ndarray, zp: int, is_q: bool, groups: int) -> np.ndarray:
    if is_q and form.name in ("conv", "fc"):
        return np.subtract(w.reshape(w.shape[0], -1), np.float32(zp), dtype=np.float32).T
    # NOTE: float32 weights are re-laid-out straight from the constant (read-only, the driver's own bytes):
    # one copy, not two; quantized ones are converted (a new array) before the zero point comes off in place
    wf = w.astype(np.float32, copy=False)
    if is_q and zp:
        wf -= np.float32(zp)
    lay = form.layout(wf, groups)
    if lay.flags.c_contiguous:
        return lay
    out = private_array(lay.shape, np.float32)  # NOTE: a large one in huge pages: a MobileNet's 16 MB, ~3 ms
    if lay.ndim == 2 and lay.T.flags.c_contiguous:
        # NOTE: a transpose (CONV_2D, FULLY_CONNECTED: [Cout, K] -> [K, Cout]) copied 16 weight rows at a
        # time: each block's rows stay in cache while their columns are written (one np.copyto strides
        # over the whole matrix per output row: a MobileNet v1's float weights 15 -> 4 ms)
        src = lay.T
        for i in range(0, src.shape[0], 16):
            np.copyto(out[:, i:i + 16], src[i:i + 16].T)
    else:
        np.copyto(out, lay)
    return out


def _out_channels(form: _Form, f_dims: tuple) -> int:
    if len(f_dims) < 1:
        return 0
    if form.out_channel_axis:
        return f_dims[form.out_channel_axis] if len(f_dims) == 4 else 0
    return f_dims[0]


def _prepare(info: OpInfo) -> _State:
    return prepare_now(_prepare_steps(info))


def _prepare_steps(info: OpInfo) -> Generator[PrepareJob, None, _State]:
    """The prepare, its requantization searches handed out as jobs (``OpDef.prepare_steps``: the executor
    runs a model's together)."""
    st = _State()
    form = _FORMS[info.type]
    ins = info.inputs
    is_q = ins[0].type in QUANT8_ASYMM_TYPES
    f = ins[1]
    groups = 1
    gi = form.groups_input(len(ins)) if form.groups_input else None
    if gi is not None:
        gv = info.constant(gi)
        groups = int(gv) if gv is not None else 0
    st.bias_const = ins[2].value is not None
    st.params_const = all(i.value is not None for i in ins[3:])
    try:
        if f.value is not None and groups > 0 and f.value.ndim == form.filter_rank and f.value.size:
            if form.groups_input is None or f.value.shape[0] % groups == 0:
                m, mw = _build_filter(form, f.value, f.zero_point, is_q, groups)
                st.filter = (_filter_key(form, groups), m, mw)
                st.filter_derived = is_q  # NOTE: rebuilt from the constant when loaded from the cache
                if is_q:
                    st.l1 = _l1(m)  # NOTE: here, never by an execution (executions share the state)
        if is_q:
            nch = _out_channels(form, tuple(f.dimensions))
            if nch > 0:
                st.mult = _multipliers(ins[0].scale, f.type, f.scale, f.channel_quant, ins[2].scale,
                                       info.outputs[0].scale, nch)
                b = ins[2].value
                ai = form.act_input(len(ins), [i.type for i in ins])
                act = info.constant(ai)
                if b is not None and act is not None and b.shape == (nch,) and 0 <= int(act) <= 3:
                    act = int(act)
                    lay = _plan_layout(info, st)
                    if lay is not None and lay["act"] == act:
                        # NOTE: a static plan runs every execution of this layer (its input shape is fixed):
                        # only the requantization it uses is searched, within the accumulators it can reach
                        st.requant[act] = _make_requant(st.mult, b, info.outputs[0], act)
                        yield from _plan_requants(st, form, ins[0], b, info.outputs[0], act)
                        st.plan = _make_plan(info, st)
                    if st.plan is None:
                        st.bounded = {}
                        _general_requants(st, form, ins[0], b, info.outputs[0], act)
    except (ValueError, ArithmeticError) as e:
        # NOTE: prepare is authoritative: what it computed, executions use and never redo.  Parameters the
        # reference refuses when it runs (a bias scale that does not match, a multiplier out of range...)
        # make every quantized execution fail with this message, where the reference fails
        st.mult_error = str(e) or type(e).__name__
        st.plan = None
    if is_q and st.plan is None:
        if form in (CONV, DEPTHWISE, FC) and st.filter is not None and not st.mult_error:
            yield from _bounded_requants(st, form, ins[0])
        st.plan = _make_plan(info, st)
    return st


def _general_requants(st: _State, form: _Form, x: Any, b: np.ndarray, out: Any, act: int) -> None:
    """The requantizations of the general path (no static plan), searched for every accumulator:
    ``st.requant[act]``, and the zero-point folds of CONV_2D / DEPTHWISE_CONV_2D."""
    st.requant[act] = _make_requant(st.mult, b, out, act, fast32=True)
    if form.fold_input_zp and st.filter is not None:
        _fold_input_zp(st, x, b, out, act)
    elif form is DEPTHWISE and st.filter is not None:
        _fold_depthwise(st, x, b, out, act)


def _plan_requants(st: _State, form: _Form, x: Any, b: np.ndarray, out: Any,
                   act: int) -> Generator[PrepareJob, None, None]:
    """``st.bounded`` for a static plan: the requantization of raw input codes (the zero point folded
    into the bias, CONV_2D and DEPTHWISE_CONV_2D: see _fold_input_zp) where its float32 search finds a
    fit within the accumulators the layer can reach (:func:`_bounded_requant`), else the plain one's;
    nothing where neither has a fit (the plan then takes the exact paths).  Depthwise layers take the
    fold only when every channel fits (its plan has no pass redoing channels)."""
    qmin, qmax = QUANT_RANGE[x.type]
    a = np.abs(st.filter[1]).astype(np.float64)
    l1 = a.sum(axis=(0, 1)) if form is DEPTHWISE else a.sum(axis=0)
    if l1.shape != st.mult[0].shape:
        return
    top = float(l1.max(initial=0.0))
    zx, raw_max = int(x.zero_point), max(-qmin, qmax)
    if form in (CONV, DEPTHWISE) and zx != 0 and raw_max * top <= ck.F32_EXACT - 64:
        colsum = st.filter[1].astype(np.float64).sum(axis=(0, 1) if form is DEPTHWISE else 0).astype(np.int64)
        rq = yield from _bounded_requant(_make_requant(st.mult, b.astype(np.int64) - zx * colsum, out, act),
                                         (raw_max * l1).astype(np.int64))
        if rq is not None and (form is CONV or rq.f32_fix is None):
            st.bounded[("fold", act)] = rq
            return
    max_x = max(zx - qmin, qmax - zx)
    if max_x * top <= ck.F32_EXACT - 64:
        rq = yield from _bounded_requant(st.requant[act], (max_x * l1).astype(np.int64))
        if rq is not None:
            st.bounded[("plain", act)] = rq


def _bounded_requants(st: _State, form: _Form, x: Any) -> Generator[PrepareJob, None, None]:
    """``st.bounded``: for each requantization whose float32 search found no
    fit for every channel, the search again knowing which accumulators the
    layer can reach (:meth:`ck.Requant._verify_f32` with a bound): channel c
    of ``x - zx`` against its weights stays within max|x - zx| * (L1 norm of
    c's weights), of the raw codes (the folded zero point) within max|x| *
    that norm.  Steps beyond are never taken, so the fit has fewer to meet:
    layers with dead channels (huge bias, tiny multiplier) leave the int64
    path, and most channels the general search redoes exactly get a float32
    fit.  Kept only where it does better; for the static plan only."""
    qmin, qmax = QUANT_RANGE[x.type]
    a = np.abs(st.filter[1]).astype(np.float64)
    l1 = a.sum(axis=(0, 1)) if form is DEPTHWISE else a.sum(axis=0)
    for kind, rqs, max_x in (("plain", st.requant, max(x.zero_point - qmin, qmax - x.zero_point)),
                             ("fold", st.fold, max(-qmin, qmax))):
        for act, rq in rqs.items():
            if rq.f32 is not None and rq.f32_fix is None:
                continue
            if l1.shape != rq.q.shape or max_x * float(l1.max(initial=0.0)) > ck.F32_EXACT - 64:
                continue
            b = yield from _bounded_requant(rq, (max_x * l1).astype(np.int64))
            if b is not None and (rq.f32 is None or b.f32_fix is None):
                st.bounded[(kind, act)] = b


def _bounded_requant(rq: ck.Requant, bound: np.ndarray) -> Generator[PrepareJob, None, Optional[ck.Requant]]:
    """``rq`` with float32 constants exact for accumulators within
    [-bound, bound] (per channel), or None.  A channel whose exact output is
    the same at both ends (monotone: constant between) gets m = 0, c = that
    output + 1/2; the others are searched with the bound (a job of
    :func:`ck.verify_f32_batch`)."""
    nc = rq.q.shape[0]
    ends = rq._apply_int(np.stack([-bound, bound]).astype(np.float64), 1, np.empty((2, nc), np.int64))
    live = np.flatnonzero(ends[0] != ends[1])
    sh = 128 if rq.out_dtype == np.int8 else 0
    m32 = np.zeros(nc, np.float32)
    c32 = (ends[0] + sh + 0.5).astype(np.float32)  # NOTE: exact: |value| < 2^9
    corr32 = None
    pivot = np.float32(rq.zp + sh + 1)
    sub = None
    if live.size:
        sub = rq.fresh() if live.size == nc else ck.Requant(
            q=rq.q[live], shift=rq.shift[live], bias=rq.bias[live], zp=rq.zp, lo=rq.lo, hi=rq.hi,
            out_dtype=rq.out_dtype)
        yield ck.verify_f32_batch, [(sub, bound[live])]
        if sub.f32 is None:
            return None
        sm, sc, _, scorr, pivot = sub.f32
        m32[live], c32[live] = sm, sc
        if scorr is not None:
            corr32 = np.zeros(nc, np.float32)  # NOTE: a constant channel's stage adds clip(., 0, 0) = 0
            corr32[live] = scorr
    out = rq.fresh()
    out.f32 = (m32, c32, sh, corr32, pivot)
    if sub is not None and sub.f32_fix is not None:
        # NOTE: the live channels without a float32 fit, redone exactly (their Requant as the search made it)
        out.f32_fix = (live[sub.f32_fix[0]], sub.f32_fix[1])
    return out


def _matrix(st: _State) -> np.ndarray:
    """The prepared filter matrix (built on first use for a state loaded from
    the cache; no lock once built: one dict lookup)."""
    m = st.filter[1]
    if m is None:
        m = st.lazy_matrix.get_or_compute(0, st.lazy_filter)
    return m


def _l1(m: np.ndarray) -> float:
    """Largest L1 norm of the filter matrix's columns (reduction axis -2)."""
    return float(np.abs(m).astype(np.float64).sum(axis=-2).max()) if m.size else 0.0


def _fold_input_zp(st: _State, x: Any, bias: np.ndarray, out: Any, act: int) -> None:
    """CONV_2D on raw input codes: sum((x - zx) * w') == sum(x * w') - zx *
    sum(w') per output channel, where padding holds zx (so it still counts
    zero).  That saves the zero-point pass over the input when the GEMM on
    raw codes stays one exact float32 block and its requantization takes the
    float32 path (which only needs the accumulators inside (-2^24, 2^24))."""
    zx = int(x.zero_point)
    m = st.filter[1]
    if st.l1 is None:
        st.l1 = _l1(m)
    raw_max = 128 if x.type == Q8S else 255  # largest |code|
    if zx == 0 or raw_max * st.l1 > ck.F32_EXACT:
        return
    colsum = m.astype(np.float64).sum(axis=0).astype(np.int64)  # exact: integers below 2^53
    rq = _make_requant(st.mult, bias.astype(np.int64) - zx * colsum, out, act, fast32=True)
    if rq.f32 is not None:
        st.fold[act] = rq
    if 2 * raw_max * st.l1 <= ck.F32_EXACT:
        # NOTE: |partial sums| <= max|x| * |w|_1 + |zp * colsum| <= 2 max|x| |w|_1
        st.zrow = np.ascontiguousarray(np.vstack([m, (-zx * colsum).astype(np.float32)[None, :]]))


def _fold_depthwise(st: _State, x: Any, bias: np.ndarray, out: Any, act: int) -> None:
    """DEPTHWISE_CONV_2D on raw input codes (the static plan only): the
    input zero point folded into the bias as for CONV_2D (_fold_input_zp), per
    channel over its taps, so the plan converts its input without the
    subtraction (the padding holds the zero point).  Kept when the tap sums of
    raw codes stay exact in float32 and the requantization takes the float32
    path."""
    zx = int(x.zero_point)
    m = st.filter[1]  # [kh, kw, C]
    if zx == 0 or m.ndim != 3:
        return
    raw_max = 128 if x.type == Q8S else 255
    if raw_max * float(np.abs(m).astype(np.float64).sum(axis=(0, 1)).max(initial=0.0)) > ck.F32_EXACT:
        return
    colsum = m.astype(np.float64).sum(axis=(0, 1)).astype(np.int64)
    rq = _make_requant(st.mult, bias.astype(np.int64) - zx * colsum, out, act, fast32=True)
    if rq.f32 is not None:
        st.fold[act] = rq


def _make_requant(mult: tuple, bias: np.ndarray, out: Any, act: int, fast32: bool = False) -> ck.Requant:
    """``fast32`` (at prepare only): look for the verified float32 path."""
    lo, hi = activation_range(act, out.scale, out.zero_point, out.type)
    return ck.Requant(q=mult[0], shift=mult[1], bias=bias.astype(np.int64), zp=int(out.zero_point), lo=lo, hi=hi,
                      out_dtype=np.dtype(np.uint8 if out.type == Q8A else np.int8), fast32=fast32)


# --------------------------------------------------------------------------
# the prepared state in the compilation cache (OpDef.save_state / load_state)


def _requant_to_wire(rq: ck.Requant, put: Any) -> dict:
    f32 = None
    if rq.f32 is not None:
        m32, c32, sh, corr32, pivot = rq.f32
        f32 = [put(m32), put(c32), int(sh), None if corr32 is None else put(corr32), float(pivot)]
    fix = None
    if rq.f32_fix is not None:
        fix = [put(rq.f32_fix[0]), _requant_to_wire(rq.f32_fix[1], put)]
    return {"q": put(rq.q), "shift": put(rq.shift), "bias": put(rq.bias), "zp": int(rq.zp), "lo": int(rq.lo),
            "hi": int(rq.hi), "out": np.dtype(rq.out_dtype).str, "f32": f32, "fix": fix}


def _requant_from_wire(d: dict, get: Any) -> ck.Requant:
    # NOTE: fast32=False: the float32 path found (and verified) at prepare is
    # restored as it was, not searched again (the point of the cache)
    rq = ck.Requant(q=get(d["q"]), shift=get(d["shift"]), bias=get(d["bias"]), zp=int(d["zp"]), lo=int(d["lo"]),
                    hi=int(d["hi"]), out_dtype=np.dtype(d["out"]))
    if d["f32"] is not None:
        m, c, sh, corr, pivot = d["f32"]
        rq.f32 = (get(m), get(c), int(sh), None if corr is None else get(corr), np.float32(pivot))
    if d["fix"] is not None:
        rq.f32_fix = (get(d["fix"][0]), _requant_from_wire(d["fix"][1], get))
    return rq


def _save_state(st: _State, put: Any) -> dict:
    """What prepare computed (filter layout, multipliers, requantizations with
    their verified float32 constants, the zero-point folds); the caches an
    execution fills (geometry, tiled weights and biases) start empty again."""
    return {
        # NOTE: a quantized filter is rebuilt from the model's own weights at load
        # (blob None): the cache keeps them once, in their stored width
        "filter": None if st.filter is None else [list(st.filter[0]),
                                                  None if st.filter_derived else put(st.filter[1]),
                                                  int(st.filter[2])],
        "mult": None if st.mult is None else [put(st.mult[0]), put(st.mult[1])],
        "mult_error": st.mult_error,
        "requant": [[int(a), _requant_to_wire(rq, put)] for a, rq in st.requant.items()],
        "fold": [[int(a), _requant_to_wire(rq, put)] for a, rq in st.fold.items()],
        "bounded": [[k, int(a), _requant_to_wire(rq, put)] for (k, a), rq in st.bounded.items()],
        "bias_const": bool(st.bias_const), "params_const": bool(st.params_const),
        "zrow": None if st.zrow is None else put(st.zrow),
        "l1": None if st.l1 is None else float(st.l1),
    }


def _load_state(d: dict, get: Any) -> Any:
    st = _State()
    derive = None
    if d["filter"] is not None:
        key, m, mw = d["filter"]
        key = (str(key[0]), int(key[1]))  # NOTE: _filter_key's (form name, groups)
        if m is None:
            derive = (key, int(mw))
        else:
            st.filter = (key, get(m), int(mw))
    if d["mult"] is not None:
        st.mult = (get(d["mult"][0]), get(d["mult"][1]))
    st.mult_error = d["mult_error"]
    st.requant = {int(a): _requant_from_wire(r, get) for a, r in d["requant"]}
    st.fold = {int(a): _requant_from_wire(r, get) for a, r in d["fold"]}
    st.bounded = {(str(k), int(a)): _requant_from_wire(r, get) for k, a, r in d.get("bounded", [])}
    st.bias_const, st.params_const = bool(d["bias_const"]), bool(d["params_const"])
    st.zrow = None if d["zrow"] is None else get(d["zrow"])
    st.l1 = None if d["l1"] is None else float(d["l1"])

    def rebuild(info: OpInfo) -> _State:
        is_q = info.inputs[0].type in QUANT8_ASYMM_TYPES
        if derive is not None:
            key, mw = derive
            form, f = _FORMS[info.type], info.inputs[1]
            if f.value is None or key != _filter_key(form, key[1]):
                raise ValueError("the cached filter does not match the model's weights")
            # NOTE: the weights are the authenticated cache's own: no check of max |w - zp| again
            w, zp = f.value, f.zero_point
            st.lazy_filter = lambda: _filter_matrix(form, w, zp, is_q, key[1])
            st.filter, st.filter_derived = (key, None, mw), True
            if form is DEPTHWISE:
                st.filter = (key, _matrix(st), mw)  # NOTE: its plan tiles the (small) taps now
        if is_q:
            st.plan = _make_plan(info, st)  # NOTE: from the restored requantizations: no search again
        return st

    return Deferred(rebuild)


# --------------------------------------------------------------------------
# static plans: quantized CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED whose
# shapes and parameters are all known at prepare


class _Plan:
    """One quantized layer fixed at prepare (input shape static, filter, bias
    and scalars constant): geometry, im2col strides, the requantization
    (:class:`ck.RequantPlan`) and the temporaries it needs, so that an
    execution is a short line of numpy calls writing into buffers made once
    per thread (the views into them too).  Read-only once built; the buffers
    live in a thread-local, so executions on several threads never share
    one.  Only for layers whose accumulator fits :data:`ck.PLAN_MAX_VALUES`:
    beyond it the per-call overhead is small beside the arithmetic, and the
    shared per-thread scratch (:func:`ck.scratch`) keeps memory bounded."""

    kind = ""

    def __init__(self, in_shape: tuple, out_shape: tuple, out_dtype: Any, rq: ck.RequantPlan) -> None:
        self.in_shape, self.out_shape, self.out_dtype, self.rq = in_shape, out_shape, np.dtype(out_dtype), rq
        self._tls = threading.local()

    def _buffers(self) -> tuple:
        """This thread's temporaries and the views into them (made once per thread)."""
        raise NotImplementedError

    def thread_buffers(self) -> tuple:
        b = getattr(self._tls, "b", None)
        if b is None:
            b = self._tls.b = self._buffers()
        return b

    def run(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError


class _ConvPlan(_Plan):
    """CONV_2D (NHWC): the input converted (minus its zero point, or raw
    codes when the zero point is folded into the bias) into a padded buffer
    whose border never changes, the im2col copy of a k x k filter's windows
    (a 1x1 filter of stride 1 multiplies the buffer itself), one float32
    GEMM, the requantization into the output."""

    kind = "conv"

    def __init__(self, in_shape: tuple, out_shape: tuple, out_dtype: Any, rq: ck.RequantPlan, st: _State,
                 p: dict, zp: float, raw: bool) -> None:
        super().__init__(in_shape, out_shape, out_dtype, rq)
        self.st, self.wm, self.p, self.zp, self.raw = st, st.filter[1], p, np.float32(zp), raw

    def _buffers(self) -> tuple:
        p = self.p
        n, h, w, c = self.in_shape
        pt, pb, pl, pr = p["pt"], p["pb"], p["pl"], p["pr"]
        kh, kw, sh, sw, dh, dw, oh, ow = (p[k] for k in ("kh", "kw", "sh", "sw", "dh", "dw", "oh", "ow"))
        padded = pt or pb or pl or pr
        # NOTE: a padded input keeps its border between runs: the plan's own; the rest is the thread's arena
        shape = (n, h + pt + pb, w + pl + pr, c)
        xp = np.full(shape, self.zp if self.raw else 0, np.float32) if padded else ck.arena("x", shape, np.float32)
        xin = xp[:, pt:pt + h, pl:pl + w, :]
        src = None
        if kh == kw == 1 and sh == sw == 1 and not padded:
            cols = xp.reshape(n * oh * ow, c)
        elif c < 4:
            # NOTE: few channels (a first layer's 1 or 3): the windows copied tap by tap along whole output
            # rows ([kh*kw*C, M], read by the GEMM transposed): inner loops of ow values instead of C
            s = xp.strides
            src = as_strided(xp, shape=(kh, kw, c, n, oh, ow),
                             strides=(s[1] * dh, s[2] * dw, s[3], s[0], s[1] * sh, s[2] * sw), writeable=False)
            cols6 = ck.arena("cols", src.shape, np.float32)
            cols = cols6.reshape(kh * kw * c, n * oh * ow).T
            src = (cols6, src)
        else:
            s = xp.strides
            src = as_strided(xp, shape=(n, oh, ow, kh, kw, c),
                             strides=(s[0], s[1] * sh, s[2] * sw, s[1] * dh, s[2] * dw, s[3]), writeable=False)
            cols6 = ck.arena("cols", src.shape, np.float32)
            cols = cols6.reshape(n * oh * ow, kh * kw * c)
            src = (cols6, src)
        acc = ck.arena("acc", (n * oh * ow, self.out_shape[3]), np.float32)
        return xin, src, cols, acc, acc.reshape(self.rq.shape), self.rq.buffers()

    def run(self, x: np.ndarray) -> np.ndarray:
        xin, src, cols, acc, acc2, rqb = self.thread_buffers()
        if self.raw:
            np.copyto(xin, x, casting="unsafe")
        else:
            np.subtract(x, self.zp, out=xin)
        if src is not None:
            np.copyto(src[0], src[1])
        wm = self.wm
        np.matmul(cols, wm if wm is not None else _matrix(self.st), out=acc)
        out = np.empty(self.out_shape, self.out_dtype)
        self.rq.run(acc2, out.reshape(self.rq.shape), rqb)
        return out


class _DepthwisePlan(_Plan):
    """DEPTHWISE_CONV_2D (NHWC, one image, depth multiplier 1, the width's
    stride or dilation 1): :func:`ck.depthwise_nhwc`'s stride phases, padded
    once per thread, the tiled weights and the einsum view over them fixed;
    an execution fills the phases (minus the zero point, or the raw codes
    when it is folded into the bias: _fold_depthwise), runs the einsum into
    the accumulator and requantizes."""

    kind = "depthwise"

    def __init__(self, in_shape: tuple, out_shape: tuple, out_dtype: Any, rq: ck.RequantPlan, w: np.ndarray,
                 p: dict, zp: float, raw: bool) -> None:
        super().__init__(in_shape, out_shape, out_dtype, rq)
        self.p, self.zp, self.raw = p, np.float32(zp), raw
        kh, kw, c = w.shape
        s, ow = p["sw"], p["ow"]
        self.ka = ka = -(-kw // s)
        wk = np.zeros((kh, ka * s, c), np.float32)
        wk[:, :kw, :] = w
        # [kh, ka, phase, ow*C]: tap j = a*s + phase (as ck.depthwise_nhwc)
        self.wt = np.tile(wk.reshape(kh, ka, s, 1, c), (1, 1, 1, ow, 1)).reshape(kh, ka, s, ow * c)
        _, h, wd, _ = in_shape
        pl = p["pl"]
        # per phase: (first column inside the input, source slice) of the input's stride phases
        self.phases = []
        for ph in range(s):
            k0 = max(0, -(-(pl - ph) // s))
            c0 = k0 * s + ph - pl
            cnt = len(range(c0, wd, s))
            self.phases.append((k0, cnt, (0, slice(None), slice(c0, None, s), slice(None))))

    def _buffers(self) -> tuple:
        p = self.p
        _, h, wd, c = self.in_shape
        pt, pb, pl, pr = p["pt"], p["pb"], p["pl"], p["pr"]
        kh, sh, dh, dw, s, oh, ow = (p[k] for k in ("kh", "sh", "dh", "dw", "sw", "oh", "ow"))
        hp, wp = h + pt + pb, wd + pl + pr
        wq = max(-(-wp // s), ow - 1 + self.ka)
        ph = np.full((s, hp, wq, c), self.zp if self.raw else 0, np.float32)
        fills = [(ph[k, pt:pt + h, k0:k0 + cnt, :], sl) for k, (k0, cnt, sl) in enumerate(self.phases) if cnt > 0]
        st = ph.strides
        col_step = st[2] * (dw if s == 1 else 1)
        v = as_strided(ph, shape=(kh, self.ka, s, oh, ow * c),
                       strides=(st[1] * dh, col_step, st[0], st[1] * sh, st[3]), writeable=False)
        acc = ck.arena("acc", (oh, ow * c), np.float32)
        return fills, v, acc, self.rq.buffers()

    def run(self, x: np.ndarray) -> np.ndarray:
        fills, v, acc, rqb = self.thread_buffers()
        if self.raw:
            for dst, sl in fills:
                np.copyto(dst, x[sl], casting="unsafe")
        else:
            zp = self.zp
            for dst, sl in fills:
                np.subtract(x[sl], zp, out=dst)
        np.einsum("iaprc,iapc->rc", v, self.wt, out=acc)
        out = np.empty(self.out_shape, self.out_dtype)
        self.rq.run(acc, out.reshape(self.rq.shape), rqb)
        return out


class _FcPlan(_Plan):
    """FULLY_CONNECTED: the input minus its zero point, one float32 GEMM, the
    requantization."""

    kind = "fc"

    def __init__(self, in_shape: tuple, out_shape: tuple, out_dtype: Any, rq: ck.RequantPlan, st: _State,
                 zp: float) -> None:
        super().__init__(in_shape, out_shape, out_dtype, rq)
        self.st, self.wm, self.zp = st, st.filter[1], np.float32(zp)
        self.in_size = math.prod(in_shape) // out_shape[0]

    def _buffers(self) -> tuple:
        return (ck.arena("x", (self.out_shape[0], self.in_size), np.float32),
                ck.arena("acc", self.out_shape, np.float32), self.rq.buffers())

    def run(self, x: np.ndarray) -> np.ndarray:
        xf, acc, rqb = self.thread_buffers()
        np.subtract(x.reshape(xf.shape), self.zp, out=xf)
        wm = self.wm
        np.matmul(xf, wm if wm is not None else _matrix(self.st), out=acc)
        out = np.empty(self.out_shape, self.out_dtype)
        self.rq.run(acc, out, rqb)
        return out


def _static_ctx(info: OpInfo) -> Optional[ExecContext]:
    """An execution context of the shapes and constants known at prepare
    (the input a zero array of its static shape), to compute the geometry
    with the execution's own code; None when a shape or scalar is unknown."""
    ins = []
    for k, i in enumerate(info.inputs):
        if i.value is not None:
            data = i.value
        elif k == 0 and i.dimensions and 0 not in i.dimensions:
            data = np.zeros(i.dimensions, NUMPY_DTYPE[i.type])
        else:
            return None
        ins.append(Tensor(type=i.type, data=data, scale=i.scale, zero_point=i.zero_point,
                          channel_quant=i.channel_quant))
    outs = [OutputSpec(type=o.type, dimensions=tuple(o.dimensions), scale=o.scale, zero_point=o.zero_point,
                       channel_quant=o.channel_quant) for o in info.outputs]
    return ExecContext(info.type, ins, outs, info.relaxed, None, None)


def _plan_layout(info: OpInfo, st: _State) -> Optional[dict]:
    """What a static plan of a quantized layer fixes besides its requantization (geometry, shapes,
    bounds; "act" its activation), or None where the layer gets none (the general path runs)."""
    form = _FORMS.get(info.type)
    if form not in (CONV, DEPTHWISE, FC) or st.filter is None or st.mult_error:
        return None
    x = info.inputs[0]
    if x.type not in QUANT8_ASYMM_TYPES:
        return None
    ctx = _static_ctx(info)
    if ctx is None:
        return None
    # NOTE: a state loaded from the cache converts a CONV_2D / FC filter when an execution first needs it
    wm = st.filter[1]
    if (wm is None and st.l1 is None) or (form is DEPTHWISE and wm is None):
        return None
    qmin, qmax = QUANT_RANGE[x.type]
    lay = {"form": form, "max_x": max(x.zero_point - qmin, qmax - x.zero_point),
           "l1": st.l1 if st.l1 is not None else _l1(wm), "dtype": NUMPY_DTYPE[info.outputs[0].type]}
    try:
        if form is FC:
            act = ctx.scalar(3)
            xs = ctx.inputs[0].data.shape
            units, in_size = tuple(info.inputs[1].dimensions)
            if _fc_shape_error(xs, ctx.inputs[1].data.shape, ctx.inputs[2].data.shape):
                return None
            batch = math.prod(xs) // in_size
            if batch <= 0 or max(batch * units, batch * in_size) > ck.PLAN_MAX_VALUES or \
                    lay["max_x"] * lay["l1"] > ck.F32_EXACT:
                return None
            return {**lay, "act": act, "in_shape": xs, "batch": batch, "units": units}
        p = (_geom_conv if form is CONV else _geom_depthwise)(ctx)
    except OpExecutionError:
        return None  # NOTE: the execution fails the same way on the general path
    n, oh, ow, cout = p["n"], p["oh"], p["ow"], p["cout"]
    if p["nchw"] or n * oh * ow == 0:
        return None
    cin = x.dimensions[3]
    cols = n * oh * ow * p["kh"] * p["kw"] * cin if form is CONV else 0
    if max(n * oh * ow * cout, cols, math.prod(x.dimensions)) > ck.PLAN_MAX_VALUES:
        return None  # NOTE: the arena's capacity (ck.arena); beyond, the general path's costs are the arithmetic
    if form is DEPTHWISE and (n != 1 or p["extra"] != 1 or (p["sw"] > 1 and p["dw"] > 1) or
                              ck.exact_block(p["kh"] * p["kw"], lay["max_x"], st.filter[2]) is not None):
        return None
    return {**lay, "act": p["act"], "p": p, "in_shape": tuple(x.dimensions), "out_shape": (n, oh, ow, cout)}


def _make_plan(info: OpInfo, st: _State) -> Optional[_Plan]:
    """The static plan of a quantized layer (:func:`_plan_layout` and the requantization: the bounded
    search's where there is one, the zero point folded where that has a float32 fit), or None."""
    lay = _plan_layout(info, st)
    if lay is None or lay["act"] not in st.requant:
        return None
    form, act, zp = lay["form"], lay["act"], info.inputs[0].zero_point
    if form is FC:
        rq = ck.RequantPlan(st.bounded.get(("plain", act), st.requant[act]), lay["batch"], 1)
        if rq.mode == "apply":
            return None
        return _FcPlan(lay["in_shape"], (lay["batch"], lay["units"]), lay["dtype"], rq, st, zp)
    p, in_shape, out_shape = lay["p"], lay["in_shape"], lay["out_shape"]
    n, oh, ow, cout = out_shape
    if form is CONV:
        fold = st.fold.get(act, st.bounded.get(("fold", act)))
        if fold is not None and fold.q.shape[0] == cout:
            rq, raw = fold, True
        elif lay["max_x"] * lay["l1"] <= ck.F32_EXACT:
            rq, raw = st.requant[act], False
        else:
            return None
        plan_rq = ck.RequantPlan(st.bounded.get(("fold" if raw else "plain", act), rq), n * oh, ow)
        if plan_rq.mode == "apply":
            return None
        return _ConvPlan(in_shape, out_shape, lay["dtype"], plan_rq, st, p, zp, raw)
    wm = st.filter[1]
    fold = st.bounded.get(("fold", act), st.fold.get(act))
    if fold is not None and fold.q.shape[0] == cout:
        plan_rq = ck.RequantPlan(fold, oh, ow)
        if plan_rq.mode == "f32" and plan_rq.fix is None:
            return _DepthwisePlan(in_shape, out_shape, lay["dtype"], plan_rq, wm, p, zp, True)
    plan_rq = ck.RequantPlan(st.bounded.get(("plain", act), st.requant[act]), oh, ow)
    if plan_rq.mode == "apply":
        return None
    return _DepthwisePlan(in_shape, out_shape, lay["dtype"], plan_rq, wm, p, zp, False)


# --------------------------------------------------------------------------
# execution helpers


class _Common:
    """What an execution needs of input / filter / bias, per data type."""

    def __init__(self, ctx: ExecContext, form: _Form, groups: int = 1) -> None:
        self.ctx = ctx
        self.form = form
        x, f, b = ctx.inputs[0], ctx.inputs[1], ctx.inputs[2]
        self.is_q = x.type in QUANT8_ASYMM_TYPES
        self.out = ctx.outputs[0]
        self.groups = groups
        st = ctx.state if isinstance(ctx.state, _State) else None
        self.st = st
        if self.is_q:
            qmin, qmax = QUANT_RANGE[x.type]
            self.max_x = max(x.zero_point - qmin, qmax - x.zero_point)
        self.x, self.f, self.b = x, f, b
        self._rq: dict = {}

    def input_f(self, x: np.ndarray) -> np.ndarray:
        """Input as float: quantized minus its zero point (exact in float32)."""
        if self.is_q:
            return np.subtract(x, np.float32(self.x.zero_point), dtype=np.float32)
        if x.dtype != np.float32:
            return x.astype(np.float32)
        return x

    def fill(self, dst: np.ndarray, src: np.ndarray) -> None:
        """dst[...] = src as float (quantized: minus the zero point)."""
        dst[...] = src
        if self.is_q and self.x.zero_point:
            # NOTE: cast, then a same-type subtract: faster than one mixed-type ufunc
            np.subtract(dst, dst.dtype.type(self.x.zero_point), out=dst)

    def input_padded(self, x: np.ndarray, nchw: bool, p: dict, dtype: Any = np.float32,
                     raw: bool = False) -> np.ndarray:
        """The NHWC input as float (quantized: minus its zero point), zero
        padded; layout change, conversion and padding in one pass.  ``raw``
        (quantized): the codes as they are, padded with the zero point."""
        xv = x.transpose(0, 2, 3, 1) if nchw else x
        pt, pb, pl, pr = p["pt"], p["pb"], p["pl"], p["pr"]
        if pt == pb == pl == pr == 0 and xv.dtype == dtype and xv.flags.c_contiguous:
            return xv
        n, h, w, c = xv.shape
        pads = (pt, pb, pl, pr)
        pad = self.x.zero_point if raw else 0
        out = ck.scratch(("pad", pads, xv.shape), (n, h + pt + pb, w + pl + pr, c), dtype, zero=True, fill=pad)
        ck.fill_rows(out[:, pt:pt + h, pl:pl + w, :], xv, ck.assign if raw else self.fill)
        return out

    def filter(self) -> tuple[np.ndarray, int]:
        key = _filter_key(self.form, self.groups)
        f = self.st.filter if self.st is not None else None
        if f is not None and f[0] == key:
            return (f[1] if f[1] is not None else _matrix(self.st)), f[2]
        return _build_filter(self.form, self.f.data, self.f.zero_point, self.is_q, self.groups)

    def wt_cache(self) -> dict | None:
        if self.st is not None and self.st.filter is not None:
            return self.st.wt_cache
        return None

    def acc_mode(self, act: int, nch: int) -> tuple[bool, bool]:
        """How exact the quantized accumulators must be (see ck.gemm_exact)."""
        return self.requant(act, nch).acc_mode() if self.is_q else (False, False)

    def requant(self, act: int, nch: int) -> ck.Requant:
        key = (act, nch)
        rq = self._rq.get(key)
        if rq is None:
            rq = self._rq[key] = self._requant(act, nch)
        return rq

    def check_requant(self, act: int, nch: int) -> None:
        """The checks :meth:`requant` makes, without building the requantization (a dry run's: only the
        verdict matters)."""
        self._requant(act, nch, check_only=True)

    def _requant(self, act: int, nch: int, check_only: bool = False) -> Optional[ck.Requant]:
        if act > 3:
            raise self.ctx.fail(f"unsupported fused activation {act}")
        st = self.st
        if st is not None and st.mult_error:
            raise self.ctx.fail(st.mult_error)
        if st is not None and act in st.requant and st.requant[act].q.shape[0] == nch:
            return st.requant[act]
        mult = st.mult if (st is not None and st.mult is not None and st.mult[0].shape[0] == nch) else None
        if mult is None:
            try:
                mult = _multipliers(self.x.scale, self.f.type, self.f.scale, self.f.channel_quant, self.b.scale,
                                    self.out.scale, nch)
            except ValueError as e:
                raise self.ctx.fail(str(e)) from None
        if check_only:
            activation_range(act, self.out.scale, self.out.zero_point, self.out.type)  # NOTE: _make_requant's
            return None
        return _make_requant(mult, self.b.data, self.out, act)

    def finish(self, acc: np.ndarray, rows: int, width: int, nch: int, act: int) -> np.ndarray:
        """Bias, activation and output type of exact accumulators / float
        sums laid out as rows x width x channels."""
        if self.is_q:
            return self.requant(act, nch).apply(acc, rows, width)
        a = acc.reshape(rows, width * nch)
        if a.dtype != np.float32:
            a = a.astype(np.float32)
        if act not in (0, 1, 2, 3):
            raise self.ctx.fail(f"unsupported fused activation {act}")
        bias = self._bias_row(width)

        def part(r0: int, r1: int) -> None:
            blk = a[r0:r1]
            blk += bias
            if act == 1:
                np.maximum(blk, 0, out=blk)
            elif act == 2:
                np.clip(blk, -1, 1, out=blk)
            elif act == 3:
                np.clip(blk, 0, 6, out=blk)

        ck.parallel_rows(rows, a.size, part)
        return a.astype(self.out.dtype, copy=False)

    def _bias_row(self, width: int) -> np.ndarray:
        st = self.st
        if st is not None and st.bias_const:
            return st.bias_tiled.get_or_compute(width, lambda: np.tile(self.b.data.astype(np.float32), width))
        return np.tile(self.b.data.astype(np.float32), width)

    def gemm_block(self, k: int, mw: int, wm: np.ndarray | None = None) -> int | None:
        """The exact-block length of the quantized GEMM with filter matrix
        ``wm`` (reduction along its axis -2): None when one float32 product is
        exact.  Any partial sum, in any order, is bounded by max|x - zp| times
        the largest column L1 norm of the filter, a much tighter bound than
        K * max|x - zp| * max|w - zw|, which sizes the blocks otherwise."""
        if not self.is_q:
            return None
        if wm is not None:
            st = self.st
            const = st is not None and st.filter is not None and (st.filter[1] if st.filter[1] is not None
                                                                   else _matrix(st)) is wm
            l1 = st.l1 if const and st.l1 is not None else _l1(wm)
            if self.max_x * l1 <= ck.F32_EXACT:
                return None
        return ck.exact_block(k, self.max_x, mw)


def _dry_run(ctx: ExecContext, c: "_Common", out_shape: tuple, act: int, nch: int) -> Optional[list[np.ndarray]]:
    """In a dry run of the reference (``nnhal.engine.reference_check``: only the verdict matters), the
    checks the arithmetic below would still make (activation, requantization), then zeros of the
    output's shape: None in a real execution."""
    if not ctx.dry_run:
        return None
    if c.is_q:
        c.check_requant(act, nch)
    elif act not in (0, 1, 2, 3):
        raise ctx.fail(f"unsupported fused activation {act}")
    return [np.zeros(out_shape, c.out.dtype)]


def _check_act(ctx: ExecContext, act: int) -> None:
    # NOTE: as the reference, only a negative value fails before computing;
    # an unknown positive one fails when the output is computed
    if act < 0:
        raise ctx.fail(f"unsupported fused activation {act}")


def _to_nhwc(x: np.ndarray, nchw: bool) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if nchw else x


def _from_nhwc(y: np.ndarray, nchw: bool) -> np.ndarray:
    return np.ascontiguousarray(y.transpose(0, 3, 1, 2)) if nchw else y


def _spatial_params(ctx: ExecContext, form: _Form) -> dict:
    """Padding, strides, dilation, layout, activation and the op's extra
    scalar (depth multiplier / groups) as the reference's ``initialize``."""
    n = len(ctx.inputs)
    s = ctx.scalar
    types = [t.type for t in ctx.inputs]
    p: dict[str, Any] = {"dw": 1, "dh": 1, "nchw": False, "extra": None}
    implicit = None
    if form.layout_flag is not None:
        lp = form.layout_flag  # position of the implicit layout flag
        e = int(form.multiplier)  # depth multiplier shifts the tail
        if (n >= lp + 1 and types[lp] == B) or n == lp:
            implicit = s(3)
            p["sw"], p["sh"] = s(4), s(5)
            if form.multiplier:
                p["extra"] = s(6)
            p["act"] = s(6 + e)
            if n >= lp + 1:
                p["nchw"] = bool(s(lp))
            if n == lp + 3:
                p["dw"], p["dh"] = s(lp + 1), s(lp + 2)
        elif n >= lp + 3 and types[lp] == I32:
            p["pl"], p["pr"], p["pt"], p["pb"] = s(3), s(4), s(5), s(6)
            p["sw"], p["sh"] = s(7), s(8)
            if form.multiplier:
                p["extra"] = s(9)
            p["act"] = s(9 + e)
            if n >= lp + 4:
                p["nchw"] = bool(s(lp + 3))
            if n == lp + 6:
                p["dw"], p["dh"] = s(lp + 4), s(lp + 5)
        else:
            raise ctx.fail("unsupported input spec")
    elif form.groups_input is not None:
        if n == 12:
            p["pl"], p["pr"], p["pt"], p["pb"] = s(3), s(4), s(5), s(6)
            p["sw"], p["sh"], p["extra"], p["act"], p["nchw"] = s(7), s(8), s(9), s(10), bool(s(11))
        else:
            implicit = s(3)
            p["sw"], p["sh"], p["extra"], p["act"], p["nchw"] = s(4), s(5), s(6), s(7), bool(s(8))
    p["implicit"] = implicit
    return p


def _resolve_padding(ctx: ExecContext, p: dict, h: int, w: int, kh: int, kw: int) -> None:
    # NOTE: strides and dilations first: implicit padding divides by the stride
    if p["sw"] <= 0 or p["sh"] <= 0:
        raise ctx.fail("strides must be positive")
    if p["dw"] <= 0 or p["dh"] <= 0:
        raise ctx.fail("dilation factors must be positive")
    if p["implicit"] is not None:
        p["pl"], p["pr"] = ck.explicit_padding(w, p["sw"], p["dw"], kw, p["implicit"])
        p["pt"], p["pb"] = ck.explicit_padding(h, p["sh"], p["dh"], kh, p["implicit"])
    if min(p["pl"], p["pr"], p["pt"], p["pb"]) < 0:
        raise ctx.fail("negative padding")
    _check_act(ctx, p["act"])


def _check_rank4(ctx: ExecContext) -> None:
    if ctx.inputs[0].data.ndim != 4 or ctx.inputs[1].data.ndim != 4 or ctx.inputs[2].data.ndim != 1:
        raise ctx.fail("input and filter must have rank 4, bias rank 1")


def _out_hw(ctx: ExecContext, p: dict, h: int, w: int, kh: int, kw: int, check_eff: bool = True) -> tuple[int, int]:
    effw = (kw - 1) * p["dw"] + 1
    effh = (kh - 1) * p["dh"] + 1
    if check_eff and not (effw > p["pl"] and effw > p["pr"] and effh > p["pt"] and effh > p["pb"]):
        raise ctx.fail("padding must be smaller than the (dilated) filter")
    oh = ck.out_size(h, kh, p["sh"], p["dh"], p["pt"], p["pb"])
    ow = ck.out_size(w, kw, p["sw"], p["dw"], p["pl"], p["pr"])
    if oh < 0 or ow < 0:
        raise ctx.fail("filter larger than the padded input")
    return oh, ow


def _geometry(ctx: ExecContext, compute: Any) -> dict:
    """``compute(ctx)`` (padding, strides, output size... from the scalar
    inputs and the shapes), remembered per shapes when the scalars are
    constants.  A failing check raises again on every execution."""
    st = ctx.state
    if not (isinstance(st, _State) and st.params_const):
        return compute(ctx)
    key = (ctx.inputs[0].shape, ctx.inputs[1].shape, ctx.inputs[2].shape)
    return st.geometry.get_or_compute(key, lambda: compute(ctx))


# --------------------------------------------------------------------------
# CONV_2D


def _operands(ctx: ExecContext, nchw: bool) -> tuple:
    """(input, filter, bias, (n, h, w, cin)) of a rank-4 convolution, in NHWC terms."""
    _check_rank4(ctx)
    x, f, bias = ctx.inputs[0].data, ctx.inputs[1].data, ctx.inputs[2].data
    dims = (x.shape[0], x.shape[2], x.shape[3], x.shape[1]) if nchw else x.shape
    return x, f, bias, dims


def _geom_conv(ctx: ExecContext) -> dict:
    p = _spatial_params(ctx, CONV)
    nchw = p["nchw"]
    x, f, bias, (n, h, w, cin) = _operands(ctx, nchw)
    cout, kh, kw, fcin = f.shape
    _resolve_padding(ctx, p, h, w, kh, kw)
    if fcin != cin or bias.shape[0] != cout:
        raise ctx.fail(f"filter {list(f.shape)} / bias {list(bias.shape)} do not match {cin} input channels")
    if h <= 0 or w <= 0 or cin <= 0 or cout <= 0:
        raise ctx.fail("only the batch dimension may be zero")
    oh, ow = _out_hw(ctx, p, h, w, kh, kw)
    p.update(n=n, cout=cout, kh=kh, kw=kw, oh=oh, ow=ow)
    return p


def _exec_conv(ctx: ExecContext) -> list[np.ndarray]:
    plan = ctx.state.plan if ctx.state.__class__ is _State else None
    if plan is not None:
        x = ctx.inputs[0].data
        if x.shape == plan.in_shape and not ctx.dry_run:
            return [plan.run(x)]
    p = _geometry(ctx, _geom_conv)
    x = ctx.inputs[0].data
    nchw, n, cout, kh, kw, oh, ow = p["nchw"], p["n"], p["cout"], p["kh"], p["kw"], p["oh"], p["ow"]
    c = _Common(ctx, CONV)
    out_shape = (n, cout, oh, ow) if nchw else (n, oh, ow, cout)
    if n * oh * ow == 0:
        # NOTE: the reference skips execution (and its scale checks) for an empty output
        return [np.zeros(out_shape, c.out.dtype)]
    wm, mw = c.filter()
    if (dry := _dry_run(ctx, c, out_shape, p["act"], cout)) is not None:
        return dry
    fold = c.st.fold.get(p["act"]) if (c.is_q and c.st is not None and c.st.filter is not None) else None
    if fold is not None and fold.q.shape[0] == cout:
        # the input zero point is folded into the bias (see _fold_input_zp)
        xp = c.input_padded(x, nchw, p, raw=True)
        cols = ck.im2col(xp, kh, kw, p["sh"], p["sw"], p["dh"], p["dw"], oh, ow)
        acc = ck.gemm_exact(cols, wm, None, temp=True)
        y = fold.apply(acc, n * oh, ow).reshape(n, oh, ow, cout)
        return [_from_nhwc(y, nchw)]
    if c.is_q and c.st is not None and c.st.zrow is not None and c.st.filter is not None and not nchw \
            and kh == kw == 1 and p["sh"] == p["sw"] == 1 and p["pt"] == p["pb"] == p["pl"] == p["pr"] == 0:
        # raw codes and a column of ones against the filter's zero-point row
        m, k = n * oh * ow, x.shape[3]
        xo = ck.scratch(("conv-ones", m, k), (m, k + 1), np.float32, zero=True, fill=1)
        xo[:, :k] = x.reshape(m, k)
        acc = ck.gemm_exact(xo, c.st.zrow, None, temp=True)
        y = c.finish(acc, n * oh, ow, cout, p["act"]).reshape(n, oh, ow, cout)
        return [y]
    xp = c.input_padded(x, nchw, p)
    cols = ck.im2col(xp, kh, kw, p["sh"], p["sw"], p["dh"], p["dw"], oh, ow)
    acc = ck.gemm_exact(cols, wm, c.gemm_block(cols.shape[1], mw, wm), temp=c.is_q,
                        mode=c.acc_mode(p["act"], cout))
    y = c.finish(acc, n * oh, ow, cout, p["act"]).reshape(n, oh, ow, cout)
    return [_from_nhwc(y, nchw)]


# --------------------------------------------------------------------------
# DEPTHWISE_CONV_2D


def _geom_depthwise(ctx: ExecContext) -> dict:
    p = _spatial_params(ctx, DEPTHWISE)
    nchw = p["nchw"]
    x, f, bias, (n, h, w, cin) = _operands(ctx, nchw)
    one, kh, kw, cout = f.shape
    if one != 1 or bias.shape[0] != cout:
        raise ctx.fail(f"filter {list(f.shape)} / bias {list(bias.shape)} do not fit depthwise")
    _resolve_padding(ctx, p, h, w, kh, kw)
    mult = p["extra"]
    if mult is None or mult <= 0:
        raise ctx.fail("depth multiplier must be positive")
    if mult * cin != cout:
        raise ctx.fail(f"depth multiplier {mult} * {cin} input channels != {cout} output channels")
    oh, ow = _out_hw(ctx, p, h, w, kh, kw)
    p.update(n=n, cout=cout, kh=kh, kw=kw, oh=oh, ow=ow)
    return p


def _exec_depthwise(ctx: ExecContext) -> list[np.ndarray]:
    plan = ctx.state.plan if ctx.state.__class__ is _State else None
    if plan is not None:
        x = ctx.inputs[0].data
        if x.shape == plan.in_shape and not ctx.dry_run:
            return [plan.run(x)]
    p = _geometry(ctx, _geom_depthwise)
    x = ctx.inputs[0].data
    nchw, n, cout, kh, kw, oh, ow = p["nchw"], p["n"], p["cout"], p["kh"], p["kw"], p["oh"], p["ow"]
    mult = p["extra"]
    c = _Common(ctx, DEPTHWISE)
    out_shape = (n, cout, oh, ow) if nchw else (n, oh, ow, cout)
    if n * oh * ow * cout == 0:
        return [np.zeros(out_shape, c.out.dtype)]
    wm, mw = c.filter()
    if (dry := _dry_run(ctx, c, out_shape, p["act"], cout)) is not None:
        return dry
    taps = kh * kw
    dt = np.float32
    if c.is_q and ck.exact_block(taps, c.max_x, mw) is not None:
        dt = np.float64  # NOTE: huge kernels: sums beyond 2^24 need float64
        wm = wm.astype(dt)
    xv = x.transpose(0, 2, 3, 1) if nchw else x
    if mult > 1:
        xv = np.repeat(xv, mult, axis=3)
    pads = (p["pt"], p["pb"], p["pl"], p["pr"])
    acc = ck.depthwise_nhwc(xv, wm, pads, p["sh"], p["sw"], p["dh"], p["dw"], oh, ow, dt, c.fill,
                            c.wt_cache() if dt == np.float32 else None, out_temp=c.is_q)
    y = c.finish(acc, n * oh, ow, cout, p["act"]).reshape(n, oh, ow, cout)
    return [_from_nhwc(y, nchw)]


# --------------------------------------------------------------------------
# GROUPED_CONV_2D


def _geom_grouped(ctx: ExecContext) -> dict:
    p = _spatial_params(ctx, GROUPED)
    nchw = p["nchw"]
    x, f, bias, (n, h, w, cin) = _operands(ctx, nchw)
    g = p["extra"]
    cout, kh, kw, cg = f.shape
    _resolve_padding(ctx, p, h, w, kh, kw)
    if g <= 0 or cout != bias.shape[0] or cg * g != cin or cout % g != 0:
        raise ctx.fail(f"filter {list(f.shape)} / bias {list(bias.shape)} do not fit {g} groups of {cin} channels")
    oh, ow = _out_hw(ctx, p, h, w, kh, kw)
    p.update(n=n, cout=cout, kh=kh, kw=kw, cg=cg, oh=oh, ow=ow)
    return p


def _exec_grouped(ctx: ExecContext) -> list[np.ndarray]:
    p = _geometry(ctx, _geom_grouped)
    x = ctx.inputs[0].data
    nchw, n, cout, kh, kw, oh, ow = p["nchw"], p["n"], p["cout"], p["kh"], p["kw"], p["oh"], p["ow"]
    g, cg = p["extra"], p["cg"]
    c = _Common(ctx, GROUPED, groups=g)
    out_shape = (n, cout, oh, ow) if nchw else (n, oh, ow, cout)
    if n * oh * ow == 0:
        return [np.zeros(out_shape, c.out.dtype)]
    wm, mw = c.filter()  # [G, kh*kw*Cg, Og]
    if (dry := _dry_run(ctx, c, out_shape, p["act"], cout)) is not None:
        return dry
    xp = c.input_padded(x, nchw, p)
    cols = ck.im2col(xp, kh, kw, p["sh"], p["sw"], 1, 1, oh, ow)
    m = cols.shape[0]
    # one batched product over the groups: [G, M, kh*kw*Cg] @ [G, kh*kw*Cg, Og]
    colsg = np.ascontiguousarray(cols.reshape(m, kh * kw, g, cg).transpose(2, 0, 1, 3)).reshape(g, m, -1)
    accg = ck.gemm_exact(colsg, wm, c.gemm_block(kh * kw * cg, mw, wm), mode=c.acc_mode(p["act"], cout))
    acc = np.ascontiguousarray(accg.transpose(1, 0, 2)).reshape(m, cout)
    y = c.finish(acc, n * oh, ow, cout, p["act"]).reshape(n, oh, ow, cout)
    return [_from_nhwc(y, nchw)]


# --------------------------------------------------------------------------
# TRANSPOSE_CONV_2D


def _geom_transpose(ctx: ExecContext) -> dict:
    ni = len(ctx.inputs)
    s = ctx.scalar
    _check_rank4(ctx)  # NOTE: before the filter's shape is unpacked
    cout, kh, kw, fcin = ctx.inputs[1].data.shape
    if ni == 9:
        scheme, sw, sh, act, nchw = s(4), s(5), s(6), s(7), bool(s(8))
        shp = ctx.inputs[3].data
        if shp is None or shp.ndim != 1 or shp.shape[0] != 4:
            raise ctx.fail("output shape must be a 1-D tensor of 4 values")
        ow_req = int(shp[3] if nchw else shp[2])
        oh_req = int(shp[2] if nchw else shp[1])
        pl, pr = ck.explicit_padding(ow_req, sw, 1, kw, scheme, transpose=True)
        pt, pb = ck.explicit_padding(oh_req, sh, 1, kh, scheme, transpose=True)
    else:
        pl, pr, pt, pb, sw, sh, act, nchw = s(3), s(4), s(5), s(6), s(7), s(8), s(9), bool(s(10))
    # NOTE: right/bottom padding may be negative (output shape ambiguity with stride > 1)
    if pl < 0 or pt < 0:
        raise ctx.fail("negative padding")
    if sw <= 0 or sh <= 0:
        raise ctx.fail("strides must be positive")
    _check_act(ctx, act)
    x, f, bias, (n, h, w, cin) = _operands(ctx, nchw)
    if fcin != cin or bias.shape[0] != cout:
        raise ctx.fail(f"filter {list(f.shape)} / bias {list(bias.shape)} do not match {cin} input channels")
    if h <= 0 or w <= 0 or cin <= 0 or cout <= 0 or kh <= 0 or kw <= 0:
        raise ctx.fail("only the batch dimension may be zero")
    ow = w * sw + kw - sw - pl - pr
    oh = h * sh + kh - sh - pt - pb
    if ow <= 0 or oh <= 0:
        raise ctx.fail("non-positive output size")
    return dict(pl=pl, pt=pt, sw=sw, sh=sh, act=act, nchw=nchw, n=n, h=h, w=w, cin=cin, cout=cout, kh=kh, kw=kw,
                oh=oh, ow=ow)


def _exec_transpose(ctx: ExecContext) -> list[np.ndarray]:
    p = _geometry(ctx, _geom_transpose)
    x = ctx.inputs[0].data
    pl, pt, sw, sh, act, nchw = p["pl"], p["pt"], p["sw"], p["sh"], p["act"], p["nchw"]
    n, h, w, cin, cout, kh, kw, oh, ow = (p[k] for k in ("n", "h", "w", "cin", "cout", "kh", "kw", "oh", "ow"))
    c = _Common(ctx, TRANSPOSE)
    out_shape = (n, cout, oh, ow) if nchw else (n, oh, ow, cout)
    if n == 0:
        return [np.zeros(out_shape, c.out.dtype)]
    wm, mw = c.filter()  # [Cin, kh*kw*Cout]
    if (dry := _dry_run(ctx, c, out_shape, act, cout)) is not None:
        return dry
    xf = c.input_f(_to_nhwc(x, nchw)).reshape(n * h * w, cin)
    # each output value sums at most ceil(kh/sh)*ceil(kw/sw) taps of cin products
    overlap = -(-kh // sh) * -(-kw // sw)
    dt = np.float32
    if c.is_q and ck.exact_block(cin, c.max_x, mw * overlap) is not None:
        dt = np.float64
        xf, wm = xf.astype(dt), wm.astype(dt)
    cols = (xf @ wm).reshape(n, h, w, kh, kw, cout)
    hf = max((h - 1) * sh + kh, pt + oh)
    wf = max((w - 1) * sw + kw, pl + ow)
    full = np.zeros((n, hf, wf, cout), dt)
    for i in range(kh):
        for j in range(kw):
            full[:, i:i + (h - 1) * sh + 1:sh, j:j + (w - 1) * sw + 1:sw, :] += cols[:, :, :, i, j, :]
    acc = np.ascontiguousarray(full[:, pt:pt + oh, pl:pl + ow, :])
    y = c.finish(acc, n * oh, ow, cout, act).reshape(n, oh, ow, cout)
    return [_from_nhwc(y, nchw)]


# --------------------------------------------------------------------------
# FULLY_CONNECTED


def _exec_fc(ctx: ExecContext) -> list[np.ndarray]:
    plan = ctx.state.plan if ctx.state.__class__ is _State else None
    if plan is not None:
        x = ctx.inputs[0].data
        if x.shape == plan.in_shape and not ctx.dry_run:
            return [plan.run(x)]
    x = ctx.inputs[0].data
    wt = ctx.inputs[1].data
    bias = ctx.inputs[2].data
    act = ctx.scalar(3)
    err = _fc_shape_error(x.shape, wt.shape, bias.shape)
    if err:
        raise ctx.fail(err)
    units, in_size = wt.shape
    if units <= 0 or in_size <= 0:
        raise ctx.fail("weights must not be empty")
    _check_act(ctx, act)
    batch = x.size // in_size
    c = _Common(ctx, FC)
    if batch == 0:
        return [np.zeros((0, units), c.out.dtype)]
    wm, mw = c.filter()  # [in, units]
    if (dry := _dry_run(ctx, c, (batch, units), act, units)) is not None:
        return dry
    xf = c.input_f(x.reshape(batch, in_size))
    acc = ck.gemm_exact(xf, wm, c.gemm_block(in_size, mw, wm), temp=c.is_q, mode=c.acc_mode(act, units))
    return [c.finish(acc, batch, 1, units, act).reshape(batch, units)]


OPS: list[OpDef] = [
    OpDef(type=OperationType.CONV_2D, signatures=_conv_signatures(7, 10), execute=_exec_conv,
          validate=_validate_conv, prepare=_prepare, prepare_steps=_prepare_steps, save_state=_save_state, load_state=_load_state,
          allow_zero_sized=True),
    OpDef(type=OperationType.DEPTHWISE_CONV_2D, signatures=_conv_signatures(8, 11), execute=_exec_depthwise,
          validate=_validate_depthwise, prepare=_prepare, prepare_steps=_prepare_steps, save_state=_save_state, load_state=_load_state,
          allow_zero_sized=True),
    # NOTE: GROUPED_CONV_2D runs in the reference's CpuExecutor switch, which rejects zero-sized inputs
    OpDef(type=OperationType.GROUPED_CONV_2D, signatures=_grouped_signatures(), execute=_exec_grouped,
          validate=_validate_grouped, prepare=_prepare, prepare_steps=_prepare_steps, save_state=_save_state, load_state=_load_state,
          allow_zero_sized=False, bad_data_on_missing_operand=True),
    OpDef(type=OperationType.TRANSPOSE_CONV_2D, signatures=_transpose_signatures(), execute=_exec_transpose,
          validate=_validate_transpose, prepare=_prepare, prepare_steps=_prepare_steps, save_state=_save_state, load_state=_load_state,
          allow_zero_sized=True),
    OpDef(type=OperationType.FULLY_CONNECTED, signatures=_FC_SIGNATURES, execute=_exec_fc,
          validate=_validate_fc, prepare=_prepare, prepare_steps=_prepare_steps, save_state=_save_state, load_state=_load_state,
          allow_zero_sized=True),
]
