"""Shared machinery of the convolution family (HAL ``CONV_2D``,
``DEPTHWISE_CONV_2D``, ``GROUPED_CONV_2D``, ``TRANSPOSE_CONV_2D``,
``FULLY_CONNECTED``): padding and output sizes as in Android's
OperationsUtils, im2col as a strided view, exact integer GEMM through float
BLAS, the depthwise tap sum, and a fast bit-exact requantization.

Exactness of the quantized paths
--------------------------------
* Products of zero-point-shifted 8-bit values are integers of at most
  255 * 255; a float32 sum of such products is exact while every partial sum
  stays within 2^24, so a float32 GEMM is exact when ``K * max|x| * max|w|
  <= 2^24``.  Longer reductions are cut into blocks that meet that bound and
  the blocks are summed in float64 (:func:`gemm_exact`).
* TFLite's ``MultiplyByQuantizedMultiplier(v, q, shift)`` (a rounding doubling
  high multiply, then a rounding right shift by ``r = -shift``) folds into
  one floor: ``floor((v*q + 2^30 + 2^(30+r) - [v*q < -2^30] * 2^31) /
  2^(31+r))`` (the two roundings nest because ``floor(floor(a/m)/n) =
  floor(a/(m n))``).  :class:`Requant` evaluates that in float64 when it is
  provably exact for every value that lands inside the 8-bit output range
  (see its docstring), else in int64.

Execution speed
---------------
Large temporaries (padded inputs, im2col matrices, quantized accumulators)
come from a per-thread scratch cache (:func:`scratch`): a fresh multi-MB
array costs its page faults again on every execution.  Elementwise passes
and depthwise tap sums can be split by rows over threads
(:func:`parallel_rows`; numpy releases the GIL in its loops) when
``NNHAL_KERNEL_THREADS`` asks for more than one, unless the machine is
already overloaded.
"""

from __future__ import annotations

import copy
import math
import os
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

from nnhal.ops import deadline, memo
from nnhal.ops.base import OpExecutionError
from nnhal.platform.memory import small_pages

F32_EXACT = 1 << 24  # largest magnitude up to which every integer is a float32
REQUANT_CHUNK = 65536  # values per requantization chunk (float64 temporaries stay in cache)

PADDING_SAME = 1
PADDING_VALID = 2


SCRATCH_BYTES = 128 << 20  # per-thread cap of reusable temporaries
_tls = threading.local()


def _max_temporary_bytes() -> int:
    env = os.environ.get("NNHAL_MAX_TEMPORARY_BYTES", "")
    if env.isdigit():
        return int(env)
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4
    except (ValueError, OSError):
        return 4 << 30


MAX_TEMPORARY_BYTES = _max_temporary_bytes()


def scratch(tag: tuple, shape: tuple, dtype: Any, zero: bool = False, fill: float = 0) -> np.ndarray:
    """A per-thread temporary reused across executions (fresh large arrays
    cost page faults on every execution).  ``zero=True`` gives a buffer that
    was filled with ``fill`` (default zero) when created: the caller must
    write the same positions on every use (the geometry is part of ``tag``)
    so the rest keeps that value.  Never return a scratch array as an
    operation's output."""
    need = math.prod(shape) * np.dtype(dtype).itemsize
    if need > MAX_TEMPORARY_BYTES:
        # NOTE: a model's strides, dilations and paddings (e.g. SAME padding of a huge dilation) can ask for a
        # padded copy far larger than its tensors: refused with a reason, never an allocation that takes the
        # machine down (GENERAL_FAILURE at execution)
        raise OpExecutionError(f"a temporary of {need / 2**30:.1f} GiB ({list(shape)}) exceeds the "
                               f"{MAX_TEMPORARY_BYTES / 2**30:.1f} GiB this driver allows (NNHAL_MAX_TEMPORARY_BYTES)")
    cache = getattr(_tls, "cache", None)
    if cache is None:
        cache = _tls.cache = OrderedDict()
        _tls.nbytes = 0
    if not zero:
        # NOTE: one growing buffer per tag, whatever the shape: consecutive
        # layers then reuse the same memory, still in cache from the layer
        # before (a buffer per shape is cold on every use in a network)
        dt = np.dtype(dtype)
        n = math.prod(shape) * dt.itemsize  # NOTE: not np.prod: ~20x its cost on a short tuple
        key = (tag, "flat")
        a = cache.get(key)
        if a is None or a.nbytes < n:
            if a is not None:
                del cache[key]
                _tls.nbytes -= a.nbytes
            a = np.empty(max(n, 64), np.uint8)
            if a.nbytes > SCRATCH_BYTES // 4:
                return a[:n].view(dt).reshape(shape)
            cache[key] = a
            _tls.nbytes += a.nbytes
            _evict(cache)
        else:
            cache.move_to_end(key)
        return a[:n].view(dt).reshape(shape)
    key = (tag, tuple(shape), np.dtype(dtype).str, zero, fill)
    a = cache.get(key)
    if a is not None:
        cache.move_to_end(key)
        return a
    a = np.full(shape, fill, dtype)
    if a.nbytes > SCRATCH_BYTES // 4:
        return a
    cache[key] = a
    _tls.nbytes += a.nbytes
    _evict(cache)
    return a


def _evict(cache: OrderedDict) -> None:
    while _tls.nbytes > SCRATCH_BYTES and len(cache) > 1:
        _, old = cache.popitem(last=False)
        _tls.nbytes -= old.nbytes


# Elementwise passes and the depthwise tap sums run on THREADS threads (numpy
# releases the GIL in its loops); BLAS has its own threads for the GEMMs.
# NOTE: one by default: on a 2-core VM, splitting the passes made MobileNet v2
# slower, idle machine or not (float32 22.5 -> 28 ms, quant8 34 -> 42 ms): the
# handoffs and the Python between the numpy calls cost more than they save.
THREADS = max(1, int(os.environ.get("NNHAL_KERNEL_THREADS", "1") or 1))
PARALLEL_MIN = 1 << 16  # values per thread below which a pass stays on one thread
_POOL_PREFIX = "nnhal-kernel"
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


_pool_pid = 0


def _get_pool() -> ThreadPoolExecutor:
    global _pool, _pool_pid
    # NOTE: a forked child has no worker threads: it makes its own pool
    if _pool is None or _pool_pid != os.getpid():
        with _pool_lock:
            if _pool is None or _pool_pid != os.getpid():
                _pool = ThreadPoolExecutor(max(1, THREADS - 1), thread_name_prefix=_POOL_PREFIX)
                _pool_pid = os.getpid()
    return _pool


_load_check = [0.0, True]  # (time of the last look, cores free)


def _cores_free() -> bool:
    """False while the machine is overloaded (1-minute load average above
    THREADS + 1): then a thread waiting for a busy core costs more than it
    saves.  Looked up at most twice a second."""
    now = time.monotonic()
    if now - _load_check[0] > 0.5:
        try:
            _load_check[1] = os.getloadavg()[0] < THREADS + 1
        except OSError:
            _load_check[1] = True
        _load_check[0] = now
    return _load_check[1]


def parallel_rows(rows: int, work: int, fn: Callable[[int, int], None]) -> None:
    """``fn(start, stop)`` over row ranges splitting [0, rows) among up to
    THREADS threads (the caller runs one part), when ``work`` (values
    touched) is large enough to pay for it and the cores are not overloaded."""
    if THREADS == 1:
        fn(0, rows)  # NOTE: the default: no split to decide
        return
    n = min(THREADS, rows, work // PARALLEL_MIN)
    if n <= 1 or threading.current_thread().name.startswith(_POOL_PREFIX) or not _cores_free():
        fn(0, rows)
        return
    bounds = [rows * i // n for i in range(n + 1)]
    futures = [_get_pool().submit(fn, bounds[i], bounds[i + 1]) for i in range(1, n)]
    try:
        fn(bounds[0], bounds[1])
    finally:
        for f in futures:
            f.result()


def fill_rows(dst: np.ndarray, src: np.ndarray, fill: Callable[[np.ndarray, np.ndarray], None]) -> None:
    """fill(dst, src) on 4-D NHWC arrays, split along H among threads."""
    if THREADS == 1 or dst.size < 2 * PARALLEL_MIN:
        fill(dst, src)
        return
    def part(a: int, b: int) -> None:
        fill(dst[:, a:b], src[:, a:b])
    parallel_rows(dst.shape[1], dst.size, part)


def c_div(a: int, b: int) -> int:
    """C++ integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def out_size(in_size: int, k: int, stride: int, dilation: int, head: int, tail: int) -> int:
    """Android ``computeOutSize`` with dilation."""
    eff = (k - 1) * dilation + 1
    return c_div(in_size - eff + stride + head + tail, stride)


def explicit_padding(in_size: int, stride: int, dilation: int, k: int, scheme: int,
                     transpose: bool = False) -> tuple[int, int]:
    """Android ``calculateExplicitPaddingImpl``: (head, tail) of an implicit
    padding scheme (1 SAME, 2 VALID, anything else no padding)."""
    head = tail = 0
    eff = (k - 1) * dilation + 1
    if scheme == PADDING_SAME:
        out = c_div(in_size + stride - 1, stride)
        tmp = (out - 1) * stride + eff
        if tmp > in_size:
            head = c_div(tmp - in_size, 2)
            tail = (tmp - in_size) - head
        if transpose:
            # NOTE: transpose conv fits the tail to the last stride, possibly negative
            tail = (tmp - in_size) - head
    return head, tail


def pad_nhwc(x: np.ndarray, top: int, bottom: int, left: int, right: int) -> np.ndarray:
    """Zero padding of the H and W axes of an NHWC array (no copy when none)."""
    if top == bottom == left == right == 0:
        return x
    n, h, w, c = x.shape
    out = np.zeros((n, h + top + bottom, w + left + right, c), x.dtype)
    out[:, top:top + h, left:left + w, :] = x
    return out


def im2col(xp: np.ndarray, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, oh: int, ow: int) -> np.ndarray:
    """Rows of receptive fields of a padded NHWC array: (N*oh*ow, kh*kw*C),
    column order (kh, kw, C) as the filter's [out, kh, kw, in] layout."""
    n, _, _, c = xp.shape
    if kh == kw == 1:
        v = xp[:, :(oh - 1) * sh + 1:sh, :(ow - 1) * sw + 1:sw, :]
        if v.flags.c_contiguous:
            return v.reshape(n * oh * ow, c)
    else:
        s = xp.strides
        v = as_strided(xp, shape=(n, oh, ow, kh, kw, c),
                       strides=(s[0], s[1] * sh, s[2] * sw, s[1] * dh, s[2] * dw, s[3]), writeable=False)
    cols = scratch(("im2col",), v.shape, xp.dtype)
    fill_rows(cols, v, np.copyto)
    return cols.reshape(n * oh * ow, -1)


def exact_block(k: int, max_x: int, max_w: int) -> int | None:
    """The reduction block length keeping a float32 integer GEMM exact, or
    None when the whole reduction of length k already is."""
    per = max(1, max_x * max_w)
    if k * per <= F32_EXACT:
        return None
    return max(1, F32_EXACT // per)


def gemm_exact(a: np.ndarray, b: np.ndarray, block: int | None, temp: bool = False,
               mode: tuple[bool, bool] = (False, False)) -> np.ndarray:
    """a @ b for float32 integer-valued operands, exact: one float32 BLAS
    product, or float32 blocks of the reduction summed in float64.
    ``temp``: the result is a temporary (a reused scratch buffer).

    ``mode`` = (may_round, want32), from the requantization that consumes
    the result (:meth:`Requant.acc_mode`): ``may_round`` when it only needs
    accumulators exact within (-2^24, 2^24) (anything beyond clamps, and a
    monotone rounding keeps it beyond): two blocks are then summed in float32;
    ``want32``: a float64 sum is returned as float32 (its float32 path)."""
    if block is None or a.shape[-1] <= block:
        if temp:
            return np.matmul(a, b, out=scratch(("gemm",), a.shape[:-1] + b.shape[-1:], np.result_type(a, b)))
        return a @ b
    k = a.shape[-1]
    may_round, want32 = mode
    if may_round and k <= 2 * block and a.dtype == b.dtype == np.float32:
        # NOTE: each half is exact (|sum| <= 2^24); their float32 sum is exact
        # wherever it is representable, i.e. everywhere an output is not clamped
        h = k // 2
        shape = a.shape[:-1] + b.shape[-1:]
        acc = np.matmul(a[..., :h], b[..., :h, :], out=scratch(("gemm",), shape, np.float32))
        acc += np.matmul(a[..., h:], b[..., h:, :], out=scratch(("gemm2",), shape, np.float32))
        return acc
    acc = np.zeros(a.shape[:-1] + b.shape[-1:], np.float64)
    for s in range(0, k, block):
        deadline.poll()  # NOTE: the execution's deadline between the blocks of a long reduction
        acc += a[..., s:s + block] @ b[..., s:s + block, :]
    if may_round and want32:
        return acc.astype(np.float32)
    return acc


def assign(dst: np.ndarray, src: np.ndarray) -> None:
    """dst[...] = src (a fill function converting by assignment)."""
    dst[...] = src


def depthwise_nhwc(x: np.ndarray, w: np.ndarray, pads: tuple[int, int, int, int], sh: int, sw: int, dh: int,
                   dw: int, oh: int, ow: int, dt: Any = np.float32,
                   fill: Callable[[np.ndarray, np.ndarray], None] = assign,
                   wt_cache: Any = None, out_temp: bool = False) -> np.ndarray:
    """Depthwise tap sum of an NHWC input ``x`` (unpadded, any dtype, possibly
    a strided view) with per-channel taps ``w`` [kh, kw, C] (C = channels of
    x): the sum over taps of shifted views times the tap's channel weights.
    ``pads`` = (top, bottom, left, right); ``fill(dst, src)`` writes input
    values converted to ``dt`` (for quantized inputs: minus the zero point),
    so padding, conversion and layout take one pass.

    The weights are tiled along the output width so that every einsum inner
    loop runs over a whole output row (ow * C contiguous values) instead of
    C values; stride > 1 along the width is handled by splitting the input
    into stride phases (so the rows stay contiguous).  ``out_temp``: the
    result is a temporary (a reused scratch buffer)."""
    n, h, wd, c = x.shape
    pt, pb, pl, pr = pads
    hp, wp = h + pt + pb, wd + pl + pr
    kh, kw, _ = w.shape
    dt = np.dtype(dt)
    if sw > 1 and dw > 1:
        # general case (stride and dilation both > 1 along the width): tap by tap
        xp = scratch(("dw-pad", pads, x.shape), (n, hp, wp, c), dt, zero=True)
        fill(xp[:, pt:pt + h, pl:pl + wd, :], x)
        acc = np.zeros((n, oh, ow, c), dt)
        for i in range(kh):
            for j in range(kw):
                r0, c0 = i * dh, j * dw
                acc += xp[:, r0:r0 + (oh - 1) * sh + 1:sh, c0:c0 + (ow - 1) * sw + 1:sw, :] * w[i, j]
        return acc
    out = scratch(("dw-out",), (n, oh, ow * c), dt) if out_temp else np.empty((n, oh, ow * c), dt)
    s = sw
    ka = -(-kw // s)  # taps per phase
    key = ("dw", ow, s, dt.str)
    wt = None if wt_cache is None else wt_cache.get(key)
    if wt is None:
        wk = np.zeros((kh, ka * s, c), dt)
        wk[:, :kw, :] = w
        # [kh, ka, phase, ow*C]: tap j = a*s + phase
        wt = np.tile(wk.reshape(kh, ka, s, 1, c), (1, 1, 1, ow, 1)).reshape(kh, ka, s, ow * c)
        if wt_cache is not None:
            wt = wt_cache.put(key, wt)
    wq = max(-(-wp // s), ow - 1 + ka)
    for b in range(n):
        # stride phases along the padded width: ph[p, :, k] = xpad[:, k*s + p]
        ph = scratch(("dw-phases", pads, x.shape[1:], s), (s, hp, wq, c), dt, zero=True)
        for p in range(s):
            k0 = max(0, -(-(pl - p) // s))  # first phase column inside the input
            c0 = k0 * s + p - pl
            cnt = len(range(c0, wd, s))
            if cnt > 0:
                fill_rows(ph[p, pt:pt + h, k0:k0 + cnt, :][None], x[b, :, c0::s, :][None], fill)
        st = ph.strides
        # NOTE: with stride 1 the phase axis has length 1; dilation dw applies then
        col_step = st[2] * (dw if s == 1 else 1)

        def rows(r0: int, r1: int, ph: np.ndarray = ph, b: int = b, st: tuple = st, col_step: int = col_step) -> None:
            v = as_strided(ph[:, r0 * sh:], shape=(kh, ka, s, r1 - r0, ow * c),
                           strides=(st[1] * dh, col_step, st[0], st[1] * sh, st[3]), writeable=False)
            np.einsum("iaprc,iapc->rc", v, wt, out=out[b, r0:r1])

        parallel_rows(oh, oh * ow * c * kh * kw, rows)
    return out.reshape(n, oh, ow, c)


# float32 constants tried by Requant._verify_f32: offsets in ulps from the rounded ones
NUDGE_M = (0, 1, -1)
NUDGE_C = (0, 1, -1, 2, -2, 3, -3)
# the float32 requantization search's candidates, grouped by the multiplier's offset (in the order they are tried):
# the rounded constants alone first (most channels pass), then the rest of the grid, then the wide search
GRID_GROUPS = [(0, [0]), (0, list(NUDGE_C[1:]))] + [(km, list(NUDGE_C)) for km in NUDGE_M[1:]]
WIDE_GROUPS = [(km, [kc for kc in range(-12, 13) if not (km in NUDGE_M and kc in NUDGE_C)]) for km in range(-4, 5)]
SEARCH_VALUES = 1 << 20  # float32 values per batch of the search (candidates x channels x points)


def _neighbours(a: np.ndarray, k: int) -> np.ndarray:
    """[2k + 1, len(a)]: row k + j is ``a`` moved j float32 steps (j in -k..k), as j nextafter calls
    would (float32 bit patterns ordered as integers: negative ones mirrored)."""
    return _step32(a, np.arange(-k, k + 1)[:, None])


def _step32(a: np.ndarray, j: Any) -> np.ndarray:
    """float32 ``a`` moved ``j`` representable steps (broadcast; finite values that stay finite)."""
    bits = np.asarray(a, np.float32).view(np.int32).astype(np.int64)
    key = np.where(bits < 0, -(bits & 0x7FFFFFFF), bits) + j
    out = np.where(key < 0, (-key) | 0x80000000, key).astype(np.uint32).view(np.float32)
    if np.ndim(j) == 0 or not np.any(np.asarray(j) == 0):
        return out
    return np.where(np.asarray(j) == 0, np.asarray(a, np.float32), out)  # NOTE: a itself (-0.0 stays -0.0)


def _corr_stage(t: np.ndarray, pivot: np.float32, ncorr: Any, u: np.ndarray) -> None:
    """t += clip(t - pivot, -2^-r, 0) in float32, in place (``ncorr`` =
    -2^-r; ``u`` a buffer of t's shape): the negative-tie correction of the
    float32 requantization (the same operations in its check and its use)."""
    np.subtract(t, pivot, out=u)
    np.clip(u, ncorr, np.float32(0), out=u)
    t += u


def _ceil_scaled(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    """ceil(2^30 * x / q) exactly in int64, for 0 < q < 2^31 and |x| < 2^52
    (2^30 * x itself may not fit: x split as q * hi + lo first)."""
    hi, lo = np.divmod(x, q)
    return (hi << 30) - ((-(lo << 30)) // q)


def exact_steps(q_eff: np.ndarray, r: np.ndarray, bias: np.ndarray, k: np.ndarray, vneg: np.ndarray) -> np.ndarray:
    """The smallest integer accumulator whose exact requantization
    (:meth:`Requant._apply_int` before the zero point: the rounding doubling
    high multiply, then the rounding right shift, as one floor of (v*q + 2^30
    + 2^(30+r) - [negative tie] 2^31) / 2^(31+r) with v = acc + bias) is at
    least ``k``; the arguments broadcast (e.g. channels [C, 1] against levels
    [L]).  Closed form: v >= ceil((k * 2^(31+r) - 2^30 - 2^(30+r)) / q), or,
    where a negative tie applies (r > 0 and v < vneg), the same with 2^31
    more; the tie region comes first.  Exact in int64: the numerators are
    2^30 times numbers below 2^52 (r capped at 40: every step then lies
    beyond 2^38, outside any accumulator range a float32 path can meet, for
    |bias| < 2^37)."""
    rc = np.minimum(r, 40)
    pos = (rc > 0).astype(np.int64)
    x = (k << (rc + 1)) - 1 - (pos << rc)  # (k * 2^(31+r) - 2^30 - [r > 0] 2^(30+r)) / 2^30
    small = q_eff < (1 << 31)
    qs = np.where(small, q_eff, 1)
    t1 = _ceil_scaled(x, qs)
    if not np.all(small):
        # NOTE: a left shift (r == 0) can make q_eff large; x is then small (|2k - 1|) and 2^30 x fits
        t1 = np.where(small, t1, -((-(x << 30)) // q_eff))
    t2 = _ceil_scaled(x + 2, qs)  # NOTE: used where r > 0 only, so q_eff == q < 2^31
    v = np.where((rc > 0) & (t2 < vneg), t2, np.maximum(t1, np.where(rc > 0, vneg, t1)))
    return v - bias


def _per_channel(vals: np.ndarray, pc: np.ndarray, chans: np.ndarray, fill: Any, ufunc: np.ufunc) -> np.ndarray:
    """``ufunc`` reduced over each channel's points: ``vals`` [..., points] with the points' channels ``pc``
    (ascending, each in ``chans``, ascending); [..., len(chans)], ``fill`` for a channel without points."""
    out = np.full(vals.shape[:-1] + (chans.size,), fill, vals.dtype)
    if pc.size:
        starts = np.flatnonzero(np.concatenate(([True], pc[1:] != pc[:-1])))
        out[..., np.searchsorted(chans, pc[starts])] = ufunc.reduceat(vals, starts, axis=-1)
    return out


@dataclass
class _Points:
    """The search's checks, one per (channel, uncertain level), ordered by channel: ``pc`` the channel (in
    the batch), ``pts`` [2, points] the float32 accumulators just below the exact step and at it, ``thr``
    [2, points] the value the float32 output must be below there and reach at it (+-inf: no condition),
    ``tau`` the same as thresholds of the value before the negative-tie stage."""

    pc: np.ndarray
    pts: np.ndarray
    thr: np.ndarray
    tau: np.ndarray

    def of(self, chans: np.ndarray, nch: int) -> "_Points":
        """The points of channels ``chans`` (of a batch of ``nch``)."""
        member = np.zeros(nch, bool)
        member[chans] = True
        sel = np.flatnonzero(member[self.pc])
        thr = self.thr.take(sel, axis=1)
        return _Points(self.pc.take(sel), self.pts.take(sel, axis=1), thr,
                       thr if self.tau is self.thr else self.tau.take(sel, axis=1))


@dataclass
class _Consts:
    """A batch's per-channel candidates and negative-tie stage: ``m_near`` [9, channel] / ``c_near`` [25,
    channel] the float32 multipliers / constants moved -4..4 / -12..12 floats, ``corr32`` -2^-r (0 for a
    channel without the stage; None: no channel has it), ``pivot`` the stage's pivot; ``chosen_m`` /
    ``chosen_c`` each channel's choice (written by the search)."""

    m_near: np.ndarray
    c_near: np.ndarray
    corr32: np.ndarray | None
    pivot: np.ndarray
    chosen_m: np.ndarray
    chosen_c: np.ndarray


def _search(groups: list, todo: np.ndarray, p: _Points, k: _Consts) -> np.ndarray:
    """:func:`_search_each`'s choice, found without trying each c32: for a given m32, every point's
    condition on t1 = fl(fl(acc * m32) + c32) (below ``p.tau`` at pts[0], at least it at pts[1]; tau: the
    float32 value t1 needs so that the output, after the negative-tie stage, reaches the level) holds
    exactly for c32 on one side of a threshold (fl is monotone in c32), so the candidates that pass are
    those in [max of the lower thresholds, min of the upper ones): one threshold per point and m offset
    (:func:`_c_thresholds`), then the first candidate of each group in that interval.  Channels where a
    threshold cannot be pinned down exactly take the search one by one (as do groups of one candidate:
    one evaluation is cheaper).  ``p``: the points of the channels ``todo`` (ascending).  Returns the
    channels no candidate fits (ascending)."""
    nch = k.m_near.shape[1]
    if all(len(kcs) == 1 for _, kcs in groups):
        return _search_each(groups, todo, p, k)
    if len(groups[0][1]) == 1:
        # NOTE: a leading group of one candidate (the rounded constants, which most channels take) evaluated
        # directly: the thresholds are then found for the channels it leaves only
        left = _search_each(groups[:1], todo, p, k)
        if left.size == 0:
            return left
        return _search(groups[1:], left, p.of(left, nch), k)
    deadline.poll()  # NOTE: a preparation's deadline
    # NOTE: the thresholds of every m offset of the groups at once ([offset, 2, points])
    kms = sorted({km for km, _ in groups})
    m32 = k.m_near[np.asarray(kms) + 4]  # [offset, channel]
    cmin, bad = _c_thresholds(p.pts[None] * m32[:, None, p.pc], p.tau)
    lo_all = _per_channel(cmin[:, 1], p.pc, todo, -np.inf, np.maximum)  # [offset, channel of todo]
    hi_all = _per_channel(cmin[:, 0], p.pc, todo, np.inf, np.minimum)
    each = _per_channel(np.logical_or.reduce(bad, axis=(0, 1)), p.pc, todo, False, np.logical_or)
    rows = np.flatnonzero(~each)
    for km, kcs in groups:
        if rows.size == 0:
            break
        j = kms.index(km)
        ch = todo[rows]
        cand = k.c_near[np.asarray(kcs) + 12][:, ch]  # [candidates, channels]
        ok = (cand >= lo_all[j, rows]) & (cand < hi_all[j, rows])
        hit = np.logical_or.reduce(ok, axis=0)
        first = ok.argmax(axis=0)[hit]
        k.chosen_m[ch[hit]] = m32[j, ch[hit]]
        k.chosen_c[ch[hit]] = cand[first, np.flatnonzero(hit)]
        rows = rows[~hit]
    left = todo[rows]
    if np.any(each):
        sub = todo[each]
        left = np.sort(np.concatenate([left, _search_each(groups, sub, p.of(sub, nch), k)]))
    return left


def _stage_thresholds(k: np.ndarray, ncorr: np.ndarray, pivot: np.float32) -> np.ndarray:
    """Per (level, channel) pair (``k``: the level in shifted output units, ``ncorr``: the channel's
    -2^-r): the smallest float32 t whose negative-tie stage (:func:`_corr_stage`) is at least k, nan where
    it is not within two floats of k + 2^-r below the pivot (k above: the stage leaves t >= pivot alone).
    Found by running the stage on the five floats around the estimate (it is monotone)."""
    base = (k - np.where(k < pivot, ncorr.astype(np.float64), 0.0)).astype(np.float32)
    lo1 = next_down32(base)
    hi1 = next_up32(base)
    cand = np.stack([next_down32(lo1), lo1, base, hi1, next_up32(hi1)])
    t = cand.copy()
    _corr_stage(t, pivot, ncorr[None], np.empty_like(t))
    ok = t >= k.astype(np.float32)
    first = ok.argmax(axis=0)
    good = ok[-1] & ~ok[0]
    out = np.take_along_axis(cand, first[None], axis=0)[0]
    return np.where(good, out, np.float32(np.nan))


def next_up32(c: np.ndarray) -> np.ndarray:
    """``np.nextafter(c, +inf)`` for float32 ``c``, the same bits, by integer steps on the bit patterns:
    nextafter is a libm call per value (~5.5 ns here; the search's threshold arrays hold tens of thousands),
    this a few passes of ~0.1 ns.  -0.0 is made +0.0 first (its pattern is the int32 minimum; both step to
    the smallest subnormal); non-finite values (none in the search) take nextafter itself."""
    c = np.add(c, np.float32(0.0), dtype=np.float32)  # NOTE: -0.0 + 0.0 == +0.0; every other value unchanged
    if not np.isfinite(c).all():
        return np.nextafter(c, np.float32(np.inf))
    b = c.view(np.int32)
    # NOTE: positive patterns grow toward +inf, negative ones (sign and magnitude) shrink: b + 1 or b - 1
    return (b + ((b >> 31) | 1)).view(np.float32)


def _up32(c: np.ndarray) -> np.ndarray:
    """:func:`next_up32` of finite float32 values (no check)."""
    b = np.add(c, np.float32(0.0), dtype=np.float32).view(np.int32)
    s = b >> 31
    s |= 1
    s += b
    return s.view(np.float32)


def next_down32(c: np.ndarray) -> np.ndarray:
    """``np.nextafter(c, -inf)`` for float32 ``c``, the same bits: -next_up32(-c)."""
    return np.negative(next_up32(np.negative(c)))


def _c_thresholds(p: np.ndarray, tau: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For float32 ``p`` ([..., 2, points]) and thresholds ``tau`` ([2, points], +-inf: no condition;
    broadcast against p): the smallest float32 c with fl(p + c) >= tau (+-inf where tau is), found as y =
    tau - h - p rounded up (h half the float32 gap below tau: round to nearest) and then checked exactly
    with float32 sums (ties, or a y float64 could not hold, move it a step); and where a threshold stayed
    unsure (the caller then tries the candidates one by one)."""
    fin = np.isfinite(tau)
    unsure = np.isnan(tau)  # NOTE: a stage threshold _stage_thresholds could not pin down
    t32 = np.where(fin, tau, 0).astype(np.float32)
    # NOTE: what depends on tau alone is computed once for every leading index of p (the m offsets)
    t64 = t32.astype(np.float64)
    y = t64 - (t64 - next_down32(t32)) / 2 - p
    c = y.astype(np.float32)
    # NOTE: c and the values below are finite (p is, tau's infinities were replaced): steps by _up32
    c = np.where(c < y, _up32(c), c)
    # NOTE: the float32 sums decide: c must reach tau, the float below it must not
    c = np.where(p + c < t32, _up32(c), c)
    below = -_up32(-c)
    c = np.where(p + below >= t32, below, c)
    bad = unsure | (fin & ~((p + c >= t32) & (p - _up32(-c) < t32)))
    return np.where(fin, c, tau).astype(np.float32), bad


def _search_each(groups: list, todo: np.ndarray, p: _Points, k: _Consts) -> np.ndarray:
    """Tries the float32 candidates of ``groups`` ((m offset, c offsets) in order) for channels ``todo``
    (ascending), checked at their points ``p`` (the float32 value must be below thr[0] at pts[0] and at
    least thr[1] at pts[1]).  Each candidate set of one m offset is tried for every channel still failing
    at once ([candidates, 2, points]) and a channel takes its first candidate that passes (written into
    ``k.chosen_m`` / ``k.chosen_c``): the same choice as trying them one by one.  Returns the channels
    none fits."""
    nch = k.m_near.shape[1]
    for km, kcs in groups:
        if todo.size == 0:
            break
        deadline.poll()  # NOTE: a preparation's deadline (the search is the long part of prepare)
        m32 = k.m_near[km + 4]
        cand = k.c_near[np.asarray(kcs) + 12]  # [candidates, channel]
        passed = np.zeros(todo.size, bool)
        # NOTE: channels in slices of about SEARCH_VALUES float32 values ([candidates, 2, points])
        width = int(np.bincount(p.pc).max(initial=1)) if p.pc.size else 1
        step = max(1, SEARCH_VALUES // (2 * len(kcs) * width))
        for s0 in range(0, todo.size, step):
            chans = todo[s0:s0 + step]
            q = p if step >= todo.size else p.of(chans, nch)
            t = cand[:, None, q.pc] + (q.pts * m32[q.pc])[None]  # NOTE: fl(fl(v * m) + c), as applied
            if k.corr32 is not None:
                _corr_stage(t, k.pivot[q.pc], k.corr32[q.pc], np.empty_like(t))
            fail = (t[:, 0] >= q.thr[0]) | (t[:, 1] < q.thr[1])
            ok = ~_per_channel(fail, q.pc, chans, False, np.logical_or)  # [candidates, channel]
            hit = np.logical_or.reduce(ok, axis=0)
            first = ok.argmax(axis=0)[hit]
            ch = chans[hit]
            k.chosen_m[ch] = m32[ch]
            k.chosen_c[ch] = cand[first, ch]
            passed[s0:s0 + step] = hit
        if passed.any():
            todo = todo[~passed]
            p = p.of(todo, nch)
    return todo


@dataclass
class Requant:
    """Per-channel requantization of exact integer accumulators to 8 bits:
    ``clamp(zp + MultiplyByQuantizedMultiplier(acc + bias, q, shift))``.

    Float path (used when every right shift r <= 11 and |bias| <= 2^20): an
    output inside the 8-bit range has |result| <= 255, so |(acc + bias) * q /
    2^(31+r)| < 257 with q >= 2^30, hence |acc + bias| < 2^(10+r) <= 2^21 and
    |acc| < 2^22, so ``acc * q`` (and so ``acc * m1`` with m1 = q /
    2^(31+r)) is exact in float64; the constant ``c`` (bias * m1 + the
    rounding offsets + zp, below 2^10 with bits down to 2^-42) is exact too,
    and a float sum whose exact value is representable is computed exactly,
    so floor() is exact.  Values outside
    the range carry a relative error of 2^-53 at most and clamp the same.
    The negative-tie correction (``- 2^-r`` where acc*q < -2^30) only matters
    for outputs below the zero point, so it is skipped when the activation
    clamps at or above it.

    Float32 path (float32 accumulators, the common case): ``floor(acc * m32 +
    c32)`` in float32 arithmetic is a monotone function of acc, as is the
    exact result; two monotone step functions agree everywhere once they agree
    on both sides of every step of the exact one.  :meth:`_verify_f32` checks
    that once per Requant (points around each of the <= 257 output levels per
    channel, trying c32 and its neighbouring floats), and the float32 path is
    used only when every channel passed: bit-exact and half the passes of
    float64.  The negative-tie correction, when in range, is a monotone
    float32 stage too (:func:`_corr_stage`), verified the same way."""

    q: np.ndarray  # int64 [C]
    shift: np.ndarray  # int64 [C] (TFLite sign: > 0 is a left shift)
    bias: np.ndarray  # int64 [C]
    zp: int
    lo: int
    hi: int
    out_dtype: np.dtype
    # per output width: tiled constants; filled by executions, which share a
    # prepared Requant: a locked, bounded memo (nnhal.ops.memo)
    tiled: Any = field(default_factory=lambda: memo.Memo(16))
    fast32: bool = False  # look for the float32 path (once, at prepare: a few ms for wide layers)

    def __post_init__(self) -> None:
        q, shift, bias = self.q, self.shift, self.bias
        # NOTE: array methods rather than np.all / np.any (their Python wrappers cost more than these small
        # arrays' arithmetic: a cached model rebuilds dozens of these at load)
        left = np.maximum(shift, 0)
        r = np.maximum(-shift, 0)
        self.q_eff = q << left
        self.r = r
        rmax = int(r.max(initial=0))
        self.use_float = bool(rmax <= 11 and (bias.size == 0 or max(int(bias.max()), -int(bias.min())) <= (1 << 20)))
        # the rounding of a negative half away from zero (v*q < -2^30)
        self.vneg = (q <= (1 << 30)).astype(np.int64)
        np.negative(self.vneg, out=self.vneg)
        self.need_corr = bool(self.lo < self.zp and rmax > 0)
        if self.use_float:
            m1 = self.q_eff.astype(np.float64) * np.exp2(-(31.0 + r))
            c = bias.astype(np.float64) * m1 + 0.5 + np.where(r > 0, np.exp2(-(r + 1.0)), 0.0) + self.zp
            self.m1, self.c, self.c_u = m1, c, c + 128.0
            self.corr = np.where(r > 0, np.exp2(-r.astype(np.float64)), 0.0)
            self.thr = (self.vneg - bias).astype(np.float64)
            self.thr32 = self.thr.astype(np.float32)  # exact: |bias| <= 2^20
        self.f32: tuple | None = None
        self.f32_fix: tuple | None = None  # (channels, Requant) redone after the float32 path
        if self.fast32:
            self._verify_f32()

    def fresh(self) -> "Requant":
        """This requantization as a new Requant of the same parameters builds it, without the float32
        search's result: the derived constants shared (read-only), not computed again; a memo of its
        own."""
        out = copy.copy(self)
        out.tiled = memo.Memo(16)
        out.fast32, out.f32, out.f32_fix = False, None, None
        return out

    def _verify_f32(self, bound: np.ndarray | None = None) -> None:
        """Find float32 (m32, c32) per channel such that the float32 path's
        output (``floor(fl(fl(acc * m32) + c32))``, with the negative-tie stage
        when in range, clamped to [lo, hi]) equals the exact one for every
        accumulator; sets ``f32`` to (m32, c32, shift, corr32, pivot) or
        leaves it None.  Candidates: the rounded constants first, then their
        neighbouring floats (GRID, then WIDE for a few stubborn channels); a
        channel takes the first that passes.

        Both are monotone step functions of acc, so they agree everywhere once,
        for every output level k in lo+1 .. hi, the float32 one is below k just
        before the exact one's step into k and at least k at it: two points per
        level, at steps found exactly in int64 (:func:`exact_steps`).  Most
        levels need no point at all: where the exact step's real position lies
        farther from every integer than the float32 error of the candidates
        tried (:func:`_uncertain`), the float32 function steps at the same
        integer.  ``bound`` (int64 per channel): only accumulators within
        [-bound, bound] occur (a layer's static plan knows them); a step
        outside is checked at the interval's end instead.  Without a bound
        every accumulator counts, so every step must lie inside (-2^24, 2^24)
        (beyond, float32 integers are not exact; the outputs there clamp)."""
        verify_f32_batch([(self, bound)])

    def acc_mode(self) -> tuple[bool, bool]:
        """(may_round, want32) for :func:`gemm_exact`: the float paths only
        look at accumulators inside (-2^24, 2^24) (beyond, every output is
        clamped; the float32 path's steps were checked to lie inside), the
        int64 path needs them all exact."""
        return (self.use_float or self.f32 is not None), self.f32 is not None

    def _tile(self, name: str, reps: int) -> np.ndarray:
        key = (name, reps)
        return self.tiled.get_or_compute(key, lambda: np.tile(getattr(self, name), reps))

    def apply(self, acc: np.ndarray, rows: int, width: int) -> np.ndarray:
        """acc: exact integer accumulators, float32/float64 of size rows *
        width * C (channel last).  Returns rows x (width*C) of out_dtype."""
        nc = self.q.shape[0]
        a2 = acc.reshape(rows, width * nc)
        out = np.empty((rows, width * nc), self.out_dtype)
        if rows == 0 or width == 0:
            return out
        if a2.dtype == np.float32 and self.f32 is not None:
            return self._apply_f32(a2, rows, width, out)
        if not self.use_float:
            return self._apply_int(a2, width, out)
        # NOTE: the values are shifted to be non-negative (int8 outputs by 128)
        # so that clamping to [lo, hi + 0.5] and a truncating cast is floor().
        sh = 128 if self.out_dtype == np.int8 else 0
        m1, c = self._tile("m1", width), self._tile("c" if not sh else "c_u", width)
        corr = self._tile("corr", width) if self.need_corr else None
        thr = self._tile("thr32" if a2.dtype == np.float32 else "thr", width) if self.need_corr else None
        # NOTE: chunks of ~64K values keep the float64 temporaries in cache
        step = max(1, REQUANT_CHUNK // (width * nc))
        shape = (min(step, rows), width * nc)
        lo, hi = float(self.lo + sh), float(self.hi + sh) + 0.5
        ou = out.view(np.uint8)

        def part(r0: int, r1: int) -> None:
            buf = scratch(("rq-buf",), shape, np.float64)
            if corr is not None:
                tmp = scratch(("rq-tmp",), shape, np.float64)
                neg = scratch(("rq-neg",), shape, np.bool_)
            for s in range(r0, r1, step):
                deadline.poll()  # NOTE: only the calling thread has a deadline: it stops the others' wait
                e = min(r1, s + step)
                blk = a2[s:e]
                t = buf[:e - s]
                # NOTE: cast then multiply in place: a mixed float32 * float64 ufunc is slower
                t[...] = blk
                t *= m1
                t += c
                if corr is not None:
                    # NOTE: a masked ufunc (where=) or a mixed-type ufunc is several
                    # times slower than these same-type passes
                    nb, tb = neg[:e - s], tmp[:e - s]
                    np.less(blk, thr, out=nb)
                    tb[...] = nb
                    tb *= corr
                    t -= tb
                np.clip(t, lo, hi, out=t)
                ou[s:e] = t
                if sh:
                    ou[s:e] ^= 0x80  # u - 128 as int8

        parallel_rows(rows, rows * width * nc, part)
        return out

    def _apply_f32(self, a2: np.ndarray, rows: int, width: int, out: np.ndarray) -> np.ndarray:
        m32, c32, sh, corr32, pivot = self.f32
        key = ("f32", width)
        rowc = self.tiled.get(key)
        if rowc is None:
            ncorr = None
            if corr32 is not None:
                ncorr = corr32[0] if np.all(corr32 == corr32[0]) else np.tile(corr32, width)
            rowc = self.tiled.put(key, (np.tile(m32, width), np.tile(c32, width),
                                        bool(np.all(m32 == m32[0])), ncorr))
        m_row, c_row, uniform, ncorr = rowc
        mul = m32[0] if uniform else m_row
        nv = a2.shape[1]
        step = max(1, REQUANT_CHUNK // nv)
        shape = (min(step, rows), nv)
        lo, hi = np.float32(self.lo + sh), np.float32(self.hi + sh + 0.5)
        ou = out.view(np.uint8)

        def part(r0: int, r1: int) -> None:
            buf = scratch(("rq-f32",), shape, np.float32)
            ubuf = scratch(("rq-f32u",), shape, np.float32) if ncorr is not None else None
            for s in range(r0, r1, step):
                deadline.poll()
                e = min(r1, s + step)
                t = buf[:e - s]
                np.multiply(a2[s:e], mul, out=t)
                t += c_row
                if ncorr is not None:
                    _corr_stage(t, pivot, ncorr, ubuf[:e - s])
                np.clip(t, lo, hi, out=t)
                ou[s:e] = t
                if sh:
                    ou[s:e] ^= 0x80  # u - 128 as int8

        parallel_rows(rows, rows * nv, part)
        if self.f32_fix is not None:
            chans, sub = self.f32_fix
            cols = self.tiled.get_or_compute(
                ("fix", width), lambda: (np.arange(width)[:, None] * self.q.shape[0] + chans).ravel())
            out[:, cols] = sub.apply(a2[:, cols], rows, width)
        return out

    def _apply_int(self, a2: np.ndarray, width: int, out: np.ndarray, clamp: bool = True) -> np.ndarray:
        v = a2.astype(np.int64) + self._tile("bias", width)
        q = self._tile("q_eff", width)
        r = self._tile("r", width)
        neg = (v < self._tile("vneg", width)) & (r > 0)
        v *= q
        v += (np.int64(1) << 30) + np.where(r > 0, np.int64(1) << (30 + r), 0)
        v -= neg.astype(np.int64) << 31
        v >>= 31 + r
        v += self.zp
        if clamp:
            np.clip(v, self.lo, self.hi, out=v)
        out[...] = v
        return out


# numpy's clip ufunc itself: np.clip is a Python wrapper (_wrapfunc -> _clip) costing
# ~2 us a call on a small layer, more than the clip of a few thousand values
try:
    UFUNC_CLIP = np._core.umath.clip  # type: ignore[attr-defined]
except AttributeError:  # pragma: no cover - numpy < 2
    UFUNC_CLIP = np.core.umath.clip  # type: ignore[attr-defined]

PLAN_MAX_VALUES = 1 << 17  # largest accumulator (values) a static plan keeps per-thread buffers for
_arena = threading.local()


def arena(role: str, shape: tuple, dtype: Any) -> np.ndarray:
    """A per-thread buffer of ``shape`` in the memory of ``role``, which every
    static plan of the thread shares (consecutive layers then reuse memory
    still in cache instead of each its own): a fixed capacity of
    PLAN_MAX_VALUES float64 values per role, so that a view made once stays
    valid.  A plan may use it only within one run (the next layer overwrites
    it); never as an output."""
    bufs = getattr(_arena, "bufs", None)
    if bufs is None:
        bufs = _arena.bufs = {}
    b = bufs.get(role)
    if b is None:
        # NOTE: each role's start shifted by a different number of cache lines: page-aligned buffers read and
        # written in step would alias in the cache (4K aliasing)
        skew = 64 * 5 * len(bufs)
        b = bufs[role] = np.empty(PLAN_MAX_VALUES * 8 + skew, np.uint8)[skew:]
    dt = np.dtype(dtype)
    n = math.prod(shape) * dt.itemsize
    if n > b.nbytes:
        raise ValueError(f"a plan buffer of {n} bytes exceeds the arena's {b.nbytes}")
    return b[:n].view(dt).reshape(shape)


# up to this many values, a layer whose float32 requantization has channels to redo takes the float64 path
# for all of them (fewer numpy calls); beyond, the float32 pass and the float64 one over those channels
PLAN_F64_VALUES = 8192


def verify_f32_batch(items: Sequence[tuple["Requant", np.ndarray | None]]) -> None:
    """:meth:`Requant._verify_f32` for several requantizations at once (``items``: (requant, bound or
    None)), each given the f32 / f32_fix it would get alone: a channel's choice depends on its own
    constants and its layer's levels only, so the channels of every layer are searched together (one
    pass of each stage over the batch instead of one per layer: a model's layers at its prepare)."""
    with small_pages():  # NOTE: its temporaries (tens of MB for a model's layers) are read once
        _verify_f32_batch(items)


def _verify_f32_batch(items: Sequence[tuple["Requant", np.ndarray | None]]) -> None:
    rqs = [(rq, bound) for rq, bound in items if rq.q.shape[0]]
    if not rqs:
        return
    n = np.array([rq.q.shape[0] for rq, _ in rqs])
    item = np.repeat(np.arange(len(rqs)), n)
    starts = np.cumsum(n) - n

    def per(vals: list, dtype: Any = np.int64) -> np.ndarray:
        return np.array(vals, dtype)[item]

    def cat(arrays: list) -> np.ndarray:
        return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)

    q_eff = cat([rq.q_eff for rq, _ in rqs])
    r = cat([rq.r for rq, _ in rqs])
    bias = cat([rq.bias for rq, _ in rqs])
    vneg = cat([rq.vneg for rq, _ in rqs])
    zp = per([rq.zp for rq, _ in rqs])
    sh = per([128 if rq.out_dtype == np.int8 else 0 for rq, _ in rqs])
    lo, hi = per([rq.lo for rq, _ in rqs]), per([rq.hi for rq, _ in rqs])
    stage = per([rq.need_corr for rq, _ in rqs], bool)
    bounded = per([bound is not None for _, bound in rqs], bool)
    lim = cat([np.full(rq.q.shape[0], F32_EXACT - 16, np.int64) if bound is None else bound.astype(np.int64)
               for rq, bound in rqs])
    m = q_eff.astype(np.float64) * np.exp2(-(31.0 + r))
    # NOTE: a layer with a multiplier out of the search's range or a huge bias is not searched
    dead = np.logical_or.reduceat((m <= 0) | (m > 1 << 16) | (np.abs(bias) >= 1 << 36), starts)
    c = bias.astype(np.float64) * m + 0.5 + np.where(r > 0, np.exp2(-(r + 1.0)), 0.0) + zp.astype(np.float64) \
        + sh.astype(np.float64)
    nlev = np.maximum(hi - lo, 0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # NOTE: [channel, j] stands for level lo + 1 + j (up to hi; beyond, the distance is inf: never checked)
        dist, far = _step_distances(m, c, r, lo, nlev, zp, sh, stage, not bounded.all())
    if far is not None:
        # NOTE: without a bound every step must lie inside (-2^24, 2^24)
        dead |= np.logical_or.reduceat(far, starts) & ~bounded[starts]
    corr32 = None
    if stage.any():
        corr32 = np.where(stage, -np.where(r > 0, np.exp2(-r.astype(np.float64)), 0.0), 0.0).astype(np.float32)
    m_near = _neighbours(m.astype(np.float32), 4)
    c_near = _neighbours(c.astype(np.float32), 12)
    k = _Consts(m_near, c_near, corr32, (zp + sh + 1).astype(np.float32), m_near[4].copy(), c_near[12].copy())
    kmax = (np.where(nlev > 0, hi, 0) + sh + 1).astype(np.float64)
    step_args = (q_eff, r, bias, vneg, zp, sh, lo, lim, stage, corr32, k.pivot)
    todo = np.flatnonzero(~dead[item])
    for groups, cap in ((GRID_GROUPS, (3, 7)), (WIDE_GROUPS, (9, 25))):
        # NOTE: the rounded constants then the rest of the GRID (m moved up to 1 float, c up to 3) in one
        # pass, then the wide search (m up to 4 floats, c up to 12) for a few stubborn channels (layers
        # with at most 8 left): each checked at the levels the pass's error bound leaves uncertain, for
        # the channels still failing.  The rounded constants are checked at the GRID's uncertain levels (a
        # superset of their own): the extra levels hold for them by the same bound, so a channel takes the
        # same first candidate
        rest = todo[:0]
        if groups is WIDE_GROUPS:
            few = (np.bincount(item[todo], minlength=len(rqs)) <= 8)[item[todo]]
            rest, todo = todo[~few], todo[few]
        if todo.size:
            unsure = _uncertain(dist[todo], m[todo], c[todo], kmax[todo], cap)
            todo = _search(groups, todo, _points(todo, unsure, step_args), k)
        todo = np.sort(np.concatenate([rest, todo])) if rest.size else todo
    left = np.split(todo - starts[item[todo]], np.searchsorted(item[todo], np.arange(1, len(rqs))))
    for i, (rq, _) in enumerate(rqs):
        if dead[i]:
            continue
        s = slice(starts[i], starts[i] + n[i])
        bad = left[i]
        if bad.size > n[i] // 4:
            continue
        chosen_m, chosen_c = k.chosen_m[s].copy(), k.chosen_c[s].copy()
        if bad.size:
            # NOTE: a few channels without a float32 fit: the float32 pass over
            # everything, then those channels' columns again on the exact paths
            chosen_m[bad] = m[s][bad].astype(np.float32)
            chosen_c[bad] = c[s][bad].astype(np.float32)
            rq.f32_fix = (bad, Requant(q=rq.q[bad], shift=rq.shift[bad], bias=rq.bias[bad], zp=rq.zp, lo=rq.lo,
                                       hi=rq.hi, out_dtype=rq.out_dtype))
        rq.f32 = (chosen_m, chosen_c, int(sh[starts[i]]), None if not rq.need_corr else corr32[s].copy(),
                  k.pivot[starts[i]])


def _step_distances(m: np.ndarray, c: np.ndarray, r: np.ndarray, lo: np.ndarray, nlev: np.ndarray,
                    zp: np.ndarray, sh: np.ndarray, stage: np.ndarray,
                    check_far: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """[channel, level]: how far (in output units) the exact step's real position acc* lies from the
    nearest integer, times m; and (``check_far``) whether it lies outside (-2^24, 2^24) (fatal without a
    bound).

    The exact output is floor(g(acc)), g = acc * m + c (c exact, in the shifted output units), less 2^-r
    where a negative tie applies (r > 0 and acc * m + c < zp + 1/2, the float32 path's stage); the step
    into level k is ceil(acc*), acc* = (k' - c) / m with k' = k, or k + 2^-r for levels at or below the
    zero point: for r >= 2 (m < 2^-r) the tie holds at both integers around such a step and at neither
    around a higher one.  At distance d, g is at least d above k at the step and more than d below it
    just before.  The float64 error of the distances is below 2^-45 (|k| + |c| + 2) (see
    :func:`_uncertain`).  Channels with m > 1, or r == 1 with the stage, get distance 0 (every level
    checked)."""
    j = np.arange(int(nlev.max(initial=0)))
    y = (lo + 1 + sh).astype(np.float64)[:, None] + j  # NOTE: the levels (exact integers), shifted
    inv = 1.0 / m
    y *= inv[:, None]
    y -= (c * inv)[:, None]
    if stage.any():
        np.add(y, (np.where(r > 0, np.exp2(-r.astype(np.float64)), 0.0) * inv)[:, None], out=y,
               where=stage[:, None] & (j <= (zp - lo - 1)[:, None]))
    valid = j < nlev[:, None]
    far = (~(np.abs(y) < F32_EXACT - 18) & valid).any(axis=1) if check_far else None
    f = np.floor(y)
    np.subtract(y, f, out=f)
    np.subtract(1.0, f, out=y)
    np.minimum(f, y, out=f)
    f *= m[:, None]
    f[(m > 1) | ((r == 1) & stage)] = 0.0
    if not valid.all():
        f[~valid] = np.inf
    return f, far


def _uncertain(dist: np.ndarray, m: np.ndarray, c: np.ndarray, kmax: np.ndarray, cap: tuple) -> np.ndarray:
    """[channel, level]: the levels where a candidate with m32 within cap[0] / 2 ulps of m and c32 within
    cap[1] / 2 ulps of c (relative 2^-24 per half ulp) may step elsewhere than the exact function.  At
    the two integers around a step |acc * m| <= A = kmax + |c| + 1, |t| <= kmax + 1, and the float32
    value differs from the exact acc * m + c by at most A |m32 - m| / m + 2^-24 |acc m32| (the
    product's rounding) + |c32 - c| + 2^-24 |t| (the sum's) [+ 2^-24 |t|: the stage's subtraction]; with
    the float64 terms (c's own error, 2^-50 (|c| + 600), and the distances', 2^-45 A) all within the
    margin below."""
    a = kmax + np.abs(c) + 1.0
    err = np.exp2(-24.0) * ((cap[0] + 1.01) * a + cap[1] * 1.01 * np.abs(c) + 2.0 * (kmax + 1.0)) \
        + np.exp2(-44.0) * (a + 600.0)
    return dist <= err[:, None]


def _points(todo: np.ndarray, unsure: np.ndarray, args: tuple) -> _Points:
    """The checks of channels ``todo`` at their ``unsure`` levels ([channel, level]): the exact steps (in
    int64, :func:`exact_steps`) clipped to the channel's accumulator interval [-lim, lim]; a step outside
    it gives no condition (+-inf).  ``args``: the batch's per-channel (q_eff, r, bias, vneg, zp, sh, lo,
    lim, stage, corr32, pivot)."""
    q_eff, r, bias, vneg, zp, sh, lo, lim, stage, corr32, pivot = args
    ri, li = np.nonzero(unsure)
    ci = todo[ri]
    k = lo[ci] + 1 + li
    steps = exact_steps(q_eff[ci], r[ci], bias[ci], k - zp[ci], vneg[ci])
    b = lim[ci]
    pts = np.empty((2, ci.size), np.float32)
    pts[0] = np.minimum(steps - 1, b)
    pts[1] = np.maximum(steps, -b)
    ks = k + sh[ci]
    want = ks.astype(np.float32)
    inf = np.float32(np.inf)
    thr = np.empty((2, ci.size), np.float32)
    thr[0] = np.where(steps > -b, want, inf)
    thr[1] = np.where(steps <= b, want, -inf)
    if corr32 is None:
        return _Points(ci, pts, thr, thr)
    # NOTE: the thresholds of the value before the negative-tie stage: at and above the pivot the stage
    # leaves it alone.  A function of the level and of the channel's (-2^-r, pivot) alone: one table per
    # distinct pair (a handful), then gathered
    low = np.flatnonzero(stage[ci] & (ks < pivot[ci]))
    t = want.copy()
    if low.size:
        kl = ks[low]
        # NOTE: pivot = zp + sh + 1 lies in [1, 2^9): the pair as one integer key per channel
        key = (corr32.view(np.uint32).astype(np.int64) << 16) + pivot.astype(np.int64)
        _, rep, which = np.unique(key, return_index=True, return_inverse=True)  # NOTE: rep: a channel of each
        k0 = int(kl.min())
        table = _stage_thresholds(np.arange(k0, int(kl.max()) + 1, dtype=np.float64)[None, :],
                                  corr32[rep][:, None], pivot[rep][:, None])
        t[low] = table[which[ci[low]], kl - k0]
    tau = np.empty_like(thr)
    tau[0] = np.where(steps > -b, t, inf)
    tau[1] = np.where(steps <= b, t, -inf)
    return _Points(ci, pts, thr, tau)


class RequantPlan:
    """:meth:`Requant.apply` fixed at prepare for accumulators of one shape,
    (rows, width * C) float32: the path (verified float32, float64, or the
    general apply), the constants tiled to the output width and the bounds,
    so that an execution is a few numpy calls writing into its own buffers.

    * float32 (``rq.f32``): multiply, add, [the negative-tie stage], clip,
      then the truncating cast to uint8 of values made non-negative (floor),
      then ``^ 0x80`` for int8: the operations of
      :meth:`Requant._apply_f32`; channels it cannot do exactly are gathered
      first and redone (float64) after.
    * float64 (``rq.use_float``; taken when the float32 path has channels to
      redo: one whole-layer float64 pass costs fewer calls than the float32
      pass plus the exact pass over the gathered channels): the operations of
      :meth:`Requant.apply`'s float path, the float32 -> float64 conversion
      folded into the multiply (a mixed-type ufunc converts exactly).
    * otherwise :meth:`Requant.apply` itself.

    Read-only once built (shared by executions); the buffers are the
    caller's (:meth:`buffers`, one set per thread)."""

    def __init__(self, rq: Requant, rows: int, width: int) -> None:
        nc = rq.q.shape[0]
        self.rq, self.rows, self.width = rq, rows, width
        self.shape = (rows, width * nc)
        self.int8 = rq.out_dtype == np.int8
        sh = 128 if self.int8 else 0
        self.mode = "apply"
        self.fix = None
        values = rows * width * nc
        small = values <= PLAN_F64_VALUES
        if rq.f32 is not None and (rq.f32_fix is None or not (small and rq.use_float)):
            m32, c32, sh32, corr32, pivot = rq.f32
            self.mode = "f32"
            if rq.f32_fix is not None:
                # NOTE: the float32 pass over everything, then the few channels it cannot do exactly
                # again from their accumulators, gathered before that pass (it overwrites them)
                chans, sub = rq.f32_fix
                cols = (np.arange(width)[:, None] * nc + chans).ravel()
                self.fix = (cols, RequantPlan(sub, rows, width))
            self.mul = m32[0] if bool(np.all(m32 == m32[0])) else np.tile(m32, width)
            self.add = np.tile(c32, width)
            self.ncorr = None
            if corr32 is not None:
                self.ncorr = corr32[0] if bool(np.all(corr32 == corr32[0])) else np.tile(corr32, width)
            self.pivot = pivot
            self.lo, self.hi = np.float32(rq.lo + sh32), np.float32(rq.hi + sh32 + 0.5)
        elif rq.use_float:
            self.mode = "f64"
            self.mul = np.tile(rq.m1, width)
            self.add = np.tile(rq.c_u if sh else rq.c, width)
            self.ncorr = None
            if rq.need_corr:
                self.ncorr = np.tile(rq.corr, width)
                self.thr = np.tile(rq.thr32, width)
            self.lo, self.hi = float(rq.lo + sh), float(rq.hi + sh) + 0.5

    def buffers(self) -> tuple:
        """The temporaries of one execution (allocate once per thread)."""
        if self.mode == "f32":
            fix = None
            if self.fix is not None:
                sub = self.fix[1]
                fix = (arena("rq-g", sub.shape, np.float32), arena("rq-gout", sub.shape, sub.rq.out_dtype),
                       sub.buffers())
            return (fix, arena("rq-u", self.shape, np.float32) if self.ncorr is not None else None, None)
        if self.mode == "f64":
            corr = self.ncorr is not None
            return (arena("rq-t", self.shape, np.float64), arena("rq-tb", self.shape, np.float64) if corr else None,
                    arena("rq-neg", self.shape, np.bool_) if corr else None)
        return (None, None, None)

    def run(self, acc: np.ndarray, out: np.ndarray, bufs: tuple) -> None:
        """Requantizes ``acc`` (rows x width*C float32, exact integers; the
        float32 path overwrites it) into ``out`` (the same shape, uint8 /
        int8, C-contiguous)."""
        mode = self.mode
        if mode == "f32":
            fix = self.fix
            if fix is not None:
                g, gout, gbufs = bufs[0]
                np.take(acc, fix[0], axis=1, out=g)
            np.multiply(acc, self.mul, out=acc)
            acc += self.add
            if self.ncorr is not None:
                u = bufs[1]
                np.subtract(acc, self.pivot, out=u)
                UFUNC_CLIP(u, self.ncorr, np.float32(0), out=u)
                acc += u
            ou = out.view(np.uint8)
            # NOTE: clip in place, then the truncating cast: faster than one clip writing uint8 (a casting ufunc)
            UFUNC_CLIP(acc, self.lo, self.hi, out=acc)
            np.copyto(ou, acc, casting="unsafe")
            if self.int8:
                ou ^= 0x80
            if fix is not None:
                fix[1].run(g, gout, gbufs)
                out[:, fix[0]] = gout
            return
        if mode == "f64":
            t, tb, neg = bufs
            np.multiply(acc, self.mul, out=t)
            t += self.add
            if self.ncorr is not None:
                np.less(acc, self.thr, out=neg)
                np.multiply(neg, self.ncorr, out=tb)
                t -= tb
            ou = out.view(np.uint8)
            UFUNC_CLIP(t, self.lo, self.hi, out=t)
            np.copyto(ou, t, casting="unsafe")
            if self.int8:
                ou ^= 0x80
            return
        out[...] = self.rq.apply(acc, self.rows, self.width)
