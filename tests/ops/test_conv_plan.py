"""The static plans of quantized CONV_2D / DEPTHWISE_CONV_2D /
FULLY_CONNECTED (``nnhal.ops.conv._Plan``, fixed at prepare when the input
shape and every parameter are known): bit-identical to the general path and
to the slow reference, built only when they apply, rebuilt from the
compilation cache, and safe to run from several threads at once."""

from __future__ import annotations

import dataclasses
import hashlib
import threading

import numpy as np
import pytest
from tests.ops.test_conv import dw_operands, ref_conv, ref_depthwise, ref_requant, scalar

from nnhal.hal import OperandLifeTime, OperandType, OperationType, SymmPerChannelQuantParams
from nnhal.ops import conv as conv_mod
from nnhal.ops.base import NUMPY_DTYPE, OperandInfo, Tensor
from nnhal.ops.prepared import Deferred
from nnhal.ops.quant import QUANT_RANGE
from nnhal.ops.run import prepare_operation

T = OperandType
Op = OperationType
Q8, Q8S, PC, I32 = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM_PER_CHANNEL, T.TENSOR_INT32
rng = np.random.default_rng(4321)


class Opnd:
    """An operand: a constant, or a model input of known shape (``const=False``)."""

    def __init__(self, t, data, scale=0.0, zp=0, cq=None, const=True):
        self.t, self.data, self.scale, self.zp, self.cq, self.const = t, data, scale, zp, cq, const

    def info(self) -> OperandInfo:
        data = np.asarray(self.data, NUMPY_DTYPE[self.t])
        life = OperandLifeTime.CONSTANT_COPY if self.const else OperandLifeTime.SUBGRAPH_INPUT
        return OperandInfo(self.t, tuple(data.shape), self.scale, self.zp, self.cq, life, data if self.const else None)

    def tensor(self) -> Tensor:
        return Tensor(self.t, np.asarray(self.data, NUMPY_DTYPE[self.t]), self.scale, self.zp, self.cq)


def _prep(op, operands, out_t, oscale, ozp):
    return prepare_operation(op, [o.info() for o in operands], [OperandInfo(out_t, (), oscale, ozp)])


def _general(p, operands):
    """The same prepared operation with its plan taken away: the general path."""
    st = p.state
    plan, st.plan = st.plan, None
    try:
        return p.run([o.tensor() for o in operands])[0]
    finally:
        st.plan = plan


def _quant_filter(t, shape, per_channel, channel_dim, xscale):
    if per_channel:
        w = rng.integers(-127, 128, size=shape)
        scales = list(rng.uniform(0.002, 0.02, shape[channel_dim]).astype(np.float32))
        return w, (0.0, 0), SymmPerChannelQuantParams(scales=scales, channelDim=channel_dim), PC, scales, 0, 0.0
    lo, hi = QUANT_RANGE[t]
    w = rng.integers(lo, hi + 1, size=shape)
    wzp = int(rng.integers(lo, hi + 1))
    return (w, (0.01, wzp), None, t, [0.01] * shape[channel_dim], wzp,
            float(np.float32(np.float32(xscale) * np.float32(0.01))))


CONV_CASES = [
    # x shape, (cout, kh, kw), pads (t, b, l, r), strides (h, w), dilation (h, w)
    ((1, 9, 7, 3), (8, 3, 3), (1, 1, 1, 1), (2, 2), (1, 1)),
    ((2, 6, 5, 8), (16, 1, 1), (0, 0, 0, 0), (1, 1), (1, 1)),
    ((1, 6, 6, 4), (5, 1, 1), (0, 0, 0, 0), (2, 2), (1, 1)),
    ((1, 8, 9, 3), (4, 2, 3), (1, 0, 2, 1), (1, 2), (2, 1)),
]


def conv_ops(x, w, b, pads, strides, dil, act, t, f_t, xq, fq, cq, bscale):
    ops = [Opnd(t, x, *xq, const=False), Opnd(f_t, w, fq[0], fq[1], cq), Opnd(I32, b, bscale),
           scalar(pads[2]), scalar(pads[3]), scalar(pads[0]), scalar(pads[1]), scalar(strides[1]), scalar(strides[0]),
           scalar(act), scalar(False)]
    if dil != (1, 1):
        ops += [scalar(dil[1]), scalar(dil[0])]
    return [o if isinstance(o, Opnd) else Opnd(o.t, o.data) for o in ops]


def _conv_case(case, t, per_channel, act, bias_range=3000):
    xs, (cout, kh, kw), pads, strides, dil = case
    lo, hi = QUANT_RANGE[t]
    x = rng.integers(lo, hi + 1, size=xs)
    xzp, xscale = int(rng.integers(lo, hi + 1)), 0.05
    w, fq, cq, f_t, fscales, wzp, bscale = _quant_filter(t, (cout, kh, kw, xs[3]), per_channel, 0, xscale)
    b = rng.integers(-bias_range, bias_range, size=cout)
    oscale, ozp = 0.07 * (kh * kw * xs[3]) ** 0.5 / 4, int(rng.integers(lo, hi + 1))
    ops = conv_ops(x, w, b, pads, strides, dil, act, t, f_t, (xscale, xzp), fq, cq, bscale)
    acc = ref_conv(x.astype(np.int64) - xzp, w.astype(np.int64) - wzp, pads, strides, dil)
    return ops, ref_requant(acc, b, xscale, fscales, oscale, ozp, act, t), oscale, ozp


@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("t", [Q8, Q8S])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("act", [0, 1, 3])
def test_conv_plan_bit_exact(case, t, per_channel, act):
    ops, want, oscale, ozp = _conv_case(case, t, per_channel, act)
    p = _prep(Op.CONV_2D, ops, t, oscale, ozp)
    assert p.state.plan is not None
    for _ in range(2):  # NOTE: the second run reuses the thread's buffers (the padded border kept)
        got = p.run([o.tensor() for o in ops])[0]
        assert got.dtype == NUMPY_DTYPE[t] and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(_general(p, ops), want)


DW_CASES = [
    # x shape, (kh, kw), pads, strides, dilation
    ((1, 9, 8, 6), (3, 3), (1, 1, 1, 1), (1, 1), (1, 1)),
    ((1, 9, 9, 5), (3, 3), (0, 1, 0, 1), (2, 2), (1, 1)),
    ((1, 7, 8, 4), (3, 2), (1, 1, 2, 0), (1, 1), (2, 2)),
    ((1, 10, 11, 3), (3, 3), (1, 1, 1, 1), (3, 3), (1, 1)),
    ((1, 8, 10, 4), (3, 3), (2, 0, 2, 0), (2, 2), (1, 1)),
    ((1, 9, 12, 4), (2, 3), (0, 1, 0, 2), (1, 3), (1, 1)),
]


@pytest.mark.parametrize("case", DW_CASES)
@pytest.mark.parametrize("t", [Q8, Q8S])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("act", [0, 3])
def test_depthwise_plan_bit_exact(case, t, per_channel, act):
    xs, (kh, kw), pads, strides, dil = case
    lo, hi = QUANT_RANGE[t]
    cout = xs[3]
    x = rng.integers(lo, hi + 1, size=xs)
    xzp, xscale = int(rng.integers(lo, hi + 1)), 0.1
    w, fq, cq, f_t, fscales, wzp, bscale = _quant_filter(t, (1, kh, kw, cout), per_channel, 3, xscale)
    b = rng.integers(-2000, 2000, size=cout)
    oscale, ozp = 0.4, int(rng.integers(lo, hi + 1))
    want = ref_requant(ref_depthwise(x.astype(np.int64) - xzp, w.astype(np.int64) - wzp, pads, strides, dil, 1),
                       b, xscale, fscales, oscale, ozp, act, t)
    ops = dw_operands(x, w, b, pads, strides, dil, 1, act, False, t, f_t, I32, (xscale, xzp), fq, cq, bscale)
    ops = [Opnd(o.t, o.data, o.scale, o.zp, o.cq, const=k > 0) for k, o in enumerate(ops)]
    p = _prep(Op.DEPTHWISE_CONV_2D, ops, t, oscale, ozp)
    assert p.state.plan is not None
    # NOTE: a non-zero input zero point is folded into the bias where the float32 search allows (raw codes)
    assert not p.state.plan.raw or xzp != 0
    DW_RAW.append(p.state.plan.raw)
    for _ in range(2):
        np.testing.assert_array_equal(p.run([o.tensor() for o in ops])[0], want)
    np.testing.assert_array_equal(_general(p, ops), want)


DW_RAW: list = []


def test_depthwise_plans_fold_the_zero_point():
    """Of the depthwise cases above (run first), some run on raw codes, some not."""
    if not DW_RAW:
        pytest.skip("run with the depthwise cases")
    assert any(DW_RAW)


@pytest.mark.parametrize("t", [Q8, Q8S])
@pytest.mark.parametrize("xs", [(1, 40), (3, 2, 20)])
def test_fully_connected_plan_bit_exact(t, xs):
    units, in_size = 9, xs[-1]
    batch = int(np.prod(xs)) // in_size
    lo, hi = QUANT_RANGE[t]
    x, w = rng.integers(lo, hi + 1, size=xs), rng.integers(lo, hi + 1, size=(units, in_size))
    xq, fq = (0.1, int(rng.integers(lo, hi + 1))), (0.05, int(rng.integers(lo, hi + 1)))
    b = rng.integers(-500, 500, size=units)
    acc = (x.reshape(batch, in_size).astype(np.int64) - xq[1]) @ (w.astype(np.int64) - fq[1]).T
    oscale, ozp = 0.3, int(rng.integers(lo, hi + 1))
    want = ref_requant(acc, b, 0.1, [0.05] * units, oscale, ozp, 0, t)
    bscale = float(np.float32(np.float32(0.1) * np.float32(0.05)))
    ops = [Opnd(t, x, *xq, const=False), Opnd(t, w, *fq), Opnd(I32, b, bscale), Opnd(T.INT32, 0)]
    p = _prep(Op.FULLY_CONNECTED, ops, t, oscale, ozp)
    assert p.state.plan is not None
    np.testing.assert_array_equal(p.run([o.tensor() for o in ops])[0], want)
    np.testing.assert_array_equal(_general(p, ops), want)


def test_dead_channels_take_the_bounded_float32_path():
    """Channels with a huge bias and a tiny multiplier (their steps far beyond
    any reachable accumulator) make the general float32 search give up; the
    plan's requantization, exact for the reachable accumulators, still fits."""
    t = Q8S
    xs, cout = (1, 5, 5, 16), 12
    x = rng.integers(-128, 128, size=xs)
    w = rng.integers(-127, 128, size=(cout, 1, 1, xs[3]))
    scales = rng.uniform(0.002, 0.02, cout).astype(np.float32)
    dead = [1, 4, 7, 8]
    scales[dead] = np.float32(1e-9)  # NOTE: multipliers with right shifts near 31
    w[dead] = rng.integers(-2, 3, size=(len(dead), 1, 1, xs[3]))
    b = rng.integers(-3000, 3000, size=cout)
    b[dead] = (1 << 30) + rng.integers(0, 200, size=len(dead))
    xzp, xscale, oscale, ozp = -3, 0.05, 0.08, 5
    cq = SymmPerChannelQuantParams(scales=list(scales), channelDim=0)
    ops = conv_ops(x, w, b, (0, 0, 0, 0), (1, 1), (1, 1), 0, t, PC, (xscale, xzp), (0.0, 0), cq, 0.0)
    acc = ref_conv(x.astype(np.int64) - xzp, w.astype(np.int64), (0, 0, 0, 0), (1, 1))
    want = ref_requant(acc, b, xscale, list(scales), oscale, ozp, 0, t)
    p = _prep(Op.CONV_2D, ops, t, oscale, ozp)
    st = p.state
    assert st.requant[0].f32 is None and not st.requant[0].use_float
    # NOTE: the plan's requantization (of raw codes, the zero point folded, or plain) searched within its bound
    assert set(st.bounded) & {("plain", 0), ("fold", 0)} and st.plan is not None and st.plan.rq.mode == "f32"
    np.testing.assert_array_equal(p.run([o.tensor() for o in ops])[0], want)
    np.testing.assert_array_equal(_general(p, ops), want)


def test_no_plan_without_static_shapes():
    """An input of unknown dimensions: the general path decides at run time."""
    ops, want, oscale, ozp = _conv_case(CONV_CASES[0], Q8, False, 1)
    infos = [o.info() for o in ops]
    infos[0] = OperandInfo(infos[0].type, (0, 0, 0, 0), infos[0].scale, infos[0].zero_point)
    p = prepare_operation(Op.CONV_2D, infos, [OperandInfo(Q8, (), oscale, ozp)])
    assert p.state.plan is None
    np.testing.assert_array_equal(p.run([o.tensor() for o in ops])[0], want)


def test_plan_ignored_for_another_shape():
    """A plan applies to its static shape only (the executor has checked the
    request's shape; a direct call with another falls back to the general path)."""
    ops, _, oscale, ozp = _conv_case(CONV_CASES[1], Q8S, True, 0)
    p = _prep(Op.CONV_2D, ops, Q8S, oscale, ozp)
    other = [Opnd(o.t, o.data, o.scale, o.zp, o.cq) for o in ops]
    other[0].data = np.asarray(other[0].data)[:1]
    got = p.run([o.tensor() for o in other])[0]
    np.testing.assert_array_equal(got, _general(p, other))


def test_plan_rebuilt_from_the_cache():
    """save_state / load_state: the plan comes back (no search again), same results."""
    ops, want, oscale, ozp = _conv_case(CONV_CASES[0], Q8S, True, 0)
    p = _prep(Op.CONV_2D, ops, Q8S, oscale, ozp)
    blobs: list = []

    def put(a):
        blobs.append(np.array(a))
        return len(blobs) - 1

    saved = conv_mod._save_state(p.state, put)
    loaded = conv_mod._load_state(saved, lambda k: blobs[k])
    assert isinstance(loaded, Deferred)
    st = loaded.resolve(p.info)
    assert st.plan is not None and st.plan.rq.mode == p.state.plan.rq.mode
    p.state = st
    np.testing.assert_array_equal(p.run([o.tensor() for o in ops])[0], want)


def test_plan_runs_from_many_threads():
    """Executions share the prepared plan; each thread has its own buffers."""
    t = Q8
    ops, _, oscale, ozp = _conv_case(CONV_CASES[0], t, False, 1)
    p = _prep(Op.CONV_2D, ops, t, oscale, ozp)
    inputs = []
    for _ in range(8):
        x = Opnd(ops[0].t, rng.integers(0, 256, size=np.asarray(ops[0].data).shape), ops[0].scale, ops[0].zp)
        inputs.append([x.tensor()] + [o.tensor() for o in ops[1:]])
    want = [_general(p, [Opnd(i[0].type, i[0].data, i[0].scale, i[0].zero_point)] + ops[1:]) for i in inputs]
    errors: list = []

    def worker(k: int) -> None:
        try:
            for r in range(30):
                j = (k + r) % len(inputs)
                got = p.run(inputs[j])[0]
                if not np.array_equal(got, want[j]):
                    errors.append((k, r))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []


def test_bounded_float32_search_is_exact_on_its_interval():
    """Requant._verify_f32(bound): wherever it accepts a channel, floor(acc *
    m32 + c32) (with the negative-tie stage), clamped, equals the int64
    reference for every integer accumulator in [-bound, bound] (checked
    exhaustively on small bounds)."""
    from nnhal.ops import conv_kernels as ck
    from nnhal.ops.quant import quantize_multiplier

    r = np.random.default_rng(11)
    accepted = 0
    for trial in range(40):
        nc = 6
        qs, shifts = zip(*(quantize_multiplier(float(s)) for s in r.uniform(0.0005, 0.02, nc)))
        zp = int(r.integers(-128, 128))
        lo = -128 if trial % 2 else zp  # NOTE: no activation (negative ties in range) / RELU
        rq = ck.Requant(q=np.array(qs, np.int64), shift=np.array(shifts, np.int64),
                        bias=r.integers(-20000, 20000, nc).astype(np.int64), zp=zp, lo=lo, hi=127,
                        out_dtype=np.dtype(np.int8))
        bound = r.integers(1000, 30000, nc).astype(np.int64)
        rq._verify_f32(bound=bound)
        if rq.f32 is None:
            continue
        redo = set() if rq.f32_fix is None else set(rq.f32_fix[0].tolist())
        for ch in range(nc):
            if ch in redo:
                continue
            _assert_float32_path_exact(rq, ch, np.arange(-bound[ch], bound[ch] + 1, dtype=np.float64))
            accepted += 1
    assert accepted > 50


def _assert_float32_path_exact(rq, ch: int, acc: np.ndarray) -> None:
    """Channel ``ch`` of ``rq``'s float32 path (with the negative-tie stage), clamped, equals the int64
    reference on the accumulators ``acc``."""
    from nnhal.ops import conv_kernels as ck

    m32, c32, sh, corr32, pivot = rq.f32
    nc = rq.q.shape[0]
    want = rq._apply_int(acc[:, None] * np.ones((1, nc)), 1, np.empty((acc.size, nc), np.int64))[:, ch]
    t = acc.astype(np.float32) * m32[ch]
    t += c32[ch]
    if corr32 is not None:
        ck._corr_stage(t, pivot, corr32[ch], np.empty_like(t))
    got = np.clip(np.floor(t), rq.lo + sh, rq.hi + sh) - sh
    np.testing.assert_array_equal(got, want)


def _random_requant(r, nc: int, trial: int, wide: bool = False):
    from nnhal.ops import conv_kernels as ck
    from nnhal.ops.quant import quantize_multiplier

    lo_m, hi_m = (0.3, 3.0) if wide else (0.0005, 0.02)
    qs, shifts = zip(*(quantize_multiplier(float(s)) for s in r.uniform(lo_m, hi_m, nc)))
    zp = int(r.integers(-128, 128))
    lo = -128 if trial % 2 else zp  # NOTE: no activation (negative ties in range) / RELU
    return ck.Requant(q=np.array(qs, np.int64), shift=np.array(shifts, np.int64),
                      bias=r.integers(-20000, 20000, nc).astype(np.int64), zp=zp, lo=lo, hi=127,
                      out_dtype=np.dtype(np.int8))


def test_exact_steps_are_the_int64_references_steps():
    """ck.exact_steps (closed form, int64): the reference's output is below the level just before the
    step and reaches it at the step, for right and left shifts, q == 2^30, negative ties, large biases."""
    from nnhal.ops import conv_kernels as ck
    from nnhal.ops.quant import quantize_multiplier

    r = np.random.default_rng(5)
    reals = np.concatenate([r.uniform(1e-6, 0.05, 40), r.uniform(0.5, 40.0, 10), [2.0 ** -5, 2.0 ** -12, 1.0]])
    qs, shifts = zip(*(quantize_multiplier(float(v)) for v in reals))
    nc = len(reals)
    rq = ck.Requant(q=np.array(qs, np.int64), shift=np.array(shifts, np.int64),
                    bias=r.integers(-(1 << 24), 1 << 24, nc).astype(np.int64), zp=3, lo=-128, hi=127,
                    out_dtype=np.dtype(np.int8))
    k = np.arange(-200, 201, dtype=np.int64)  # NOTE: levels before the zero point (3) is added
    steps = ck.exact_steps(rq.q_eff[:, None], rq.r[:, None], rq.bias[:, None], k[None, :], rq.vneg[:, None])
    ok = np.abs(steps) < (1 << 40)
    for pts, want_ge in ((steps - 1, False), (steps, True)):
        v = np.where(ok, pts, 0).T.astype(np.float64)  # [level, channel]
        got = rq._apply_int(v, 1, np.empty(v.shape, np.int64), clamp=False).T - rq.zp
        np.testing.assert_array_equal((got >= k[None, :])[ok], np.full(ok.sum(), want_ge))


def test_threshold_search_chooses_as_candidate_by_candidate(monkeypatch):
    """The GRID / WIDE search through per-point c32 thresholds (ck._search) makes exactly the choice of
    trying the candidates one by one (ck._search_each), with and without the negative-tie stage."""
    from nnhal.ops import conv_kernels as ck

    fast, each, compared, fell_back = ck._search, ck._search_each, [], []

    def counted(groups, todo, *args):
        if any(len(kcs) > 1 for _, kcs in groups):
            fell_back.append(len(todo))  # NOTE: thresholds the float32 sums could not confirm
        return each(groups, todo, *args)

    def both(groups, todo, p, k):
        k2 = dataclasses.replace(k, chosen_m=k.chosen_m.copy(), chosen_c=k.chosen_c.copy())
        left = fast(groups, todo, p, k)
        left2 = each(groups, todo, p, k2)
        assert np.array_equal(left, np.sort(left2))
        assert np.array_equal(k.chosen_m.view(np.uint32), k2.chosen_m.view(np.uint32))
        assert np.array_equal(k.chosen_c.view(np.uint32), k2.chosen_c.view(np.uint32))
        compared.append(len(todo))
        return left

    monkeypatch.setattr(ck, "_search", both)
    monkeypatch.setattr(ck, "_search_each", counted)
    r = np.random.default_rng(17)
    for trial in range(16):
        rq = _random_requant(r, 48, trial)
        rq._verify_f32(bound=r.integers(1000, 300000, 48).astype(np.int64) if trial % 4 else None)
    assert sum(compared) > 100 and sum(fell_back) == 0


def test_unbounded_float32_search_is_exact_everywhere():
    """Requant._verify_f32 without a bound: wherever it accepts a channel, the float32 path's clamped
    output equals the int64 reference for every accumulator (checked exhaustively around all of the
    channel's steps, and at the float32 extremes where every output clamps)."""
    from nnhal.ops import conv_kernels as ck

    r = np.random.default_rng(23)
    accepted = 0
    for trial in range(12):
        rq = _random_requant(r, 6, trial, wide=trial % 3 == 0)
        rq._verify_f32()
        if rq.f32 is None:
            continue
        redo = set() if rq.f32_fix is None else set(rq.f32_fix[0].tolist())
        k = np.arange(rq.lo + 1, rq.hi + 1, dtype=np.int64) - rq.zp
        steps = ck.exact_steps(rq.q_eff[:, None], rq.r[:, None], rq.bias[:, None], k[None, :], rq.vneg[:, None])
        for ch in set(range(6)) - redo:
            span = np.arange(steps[ch].min() - 50, steps[ch].max() + 50)
            _assert_float32_path_exact(rq, ch, np.concatenate([span, [-(1 << 24) + 8, (1 << 24) - 8]]).astype(
                np.float64))
            accepted += 1
    assert accepted > 30


def test_float32_steps_are_nextafter():
    """next_up32 / next_down32 (the threshold search's float32 steps) give np.nextafter's bits for every
    kind of float32: zeros of both signs, subnormals, the largest finite values, infinities, NaN, and
    random bit patterns."""
    from nnhal.ops.conv_kernels import next_down32, next_up32

    fi = np.finfo(np.float32)
    special = np.array([0.0, -0.0, fi.smallest_subnormal, -fi.smallest_subnormal, 3 * fi.smallest_subnormal,
                        fi.tiny, -fi.tiny, fi.max, -fi.max, 1.0, -1.0], np.float32)
    bits = np.random.default_rng(0).integers(-2**31, 2**31, 200_000, dtype=np.int64).astype(np.int32)
    rnd = bits.view(np.float32)
    rnd = rnd[np.isfinite(rnd)][:4000].reshape(-1, 4)
    with np.errstate(all="ignore"):
        for a in (special, rnd, np.array([np.inf, -np.inf, np.nan, 1.0], np.float32)):
            for step, to in ((next_up32, np.inf), (next_down32, -np.inf)):
                got, want = step(a), np.nextafter(a, np.float32(to))
                assert got.dtype == np.float32 and got.shape == a.shape
                same = (got.view(np.int32) == want.view(np.int32)) | (np.isnan(got) & np.isnan(want))
                assert same.all(), (step.__name__, a[~same])


def _random_draw(r):
    """A requantization as a model's layer may have one: per-tensor or per-channel multipliers from tiny to
    above one, uint8 / int8, any zero point, no activation / RELU / RELU6-like / a narrow clamp, biases up to
    10^7, and the accumulator bound of a static plan (or none)."""
    from nnhal.ops import conv_kernels as ck
    from nnhal.ops.quant import quantize_multiplier

    nc = int(r.choice([1, 3, 8, 16, 48]))
    lo_m, hi_m = [(1e-5, 1e-3), (5e-4, 0.02), (0.01, 0.3), (0.3, 3.0), (2.0, 70.0)][r.integers(5)]
    reals = np.full(nc, r.uniform(lo_m, hi_m)) if r.random() < 0.3 else r.uniform(lo_m, hi_m, nc)
    qs, shifts = zip(*(quantize_multiplier(float(s)) for s in reals))
    u8 = r.random() < 0.5
    qmin, qmax = (0, 255) if u8 else (-128, 127)
    zp = int(r.integers(qmin, qmax + 1))
    lo, hi = [(qmin, qmax), (max(qmin, zp), qmax), (max(qmin, zp), min(qmax, zp + int(r.integers(1, 120)))),
              (max(qmin, zp - int(r.integers(0, 60))), min(qmax, zp + int(r.integers(0, 60))))][r.integers(4)]
    bmax = int(10 ** r.uniform(1, 7))
    rq = ck.Requant(q=np.array(qs, np.int64), shift=np.array(shifts, np.int64),
                    bias=r.integers(-bmax, bmax + 1, nc).astype(np.int64), zp=zp, lo=lo, hi=hi,
                    out_dtype=np.dtype(np.uint8 if u8 else np.int8))
    bound = None if r.random() < 0.3 else r.integers(10, int(10 ** r.uniform(2, 6.5)), nc).astype(np.int64)
    return rq, bound


def _choice(rq) -> tuple:
    """What the search decided for ``rq``, bit for bit."""
    if rq.f32 is None:
        return (None,)
    m32, c32, sh, corr32, pivot = rq.f32
    return (m32.tobytes(), c32.tobytes(), sh, None if corr32 is None else corr32.tobytes(), float(pivot),
            None if rq.f32_fix is None else rq.f32_fix[0].tobytes())


def test_batched_search_chooses_as_each_layer_alone():
    """ck.verify_f32_batch over many layers at once (a model's prepare) gives every layer the float32
    constants, stage and redone channels it gets searched alone (random multipliers, shifts, zero points,
    clamps, biases and bounds), and where it accepts a bounded channel, the float32 path is exact on the
    whole interval (checked exhaustively on the small ones)."""
    from nnhal.ops import conv_kernels as ck

    r = np.random.default_rng(28)
    draws = [_random_draw(r) for _ in range(60)]
    alone = []
    for rq, bound in draws:
        rq._verify_f32(bound)
        alone.append(_choice(rq))
    fresh = [(ck.Requant(q=rq.q, shift=rq.shift, bias=rq.bias, zp=rq.zp, lo=rq.lo, hi=rq.hi,
                         out_dtype=rq.out_dtype), bound) for rq, bound in draws]
    order = r.permutation(len(fresh))  # NOTE: a layer's choice does not depend on its neighbours
    ck.verify_f32_batch([fresh[i] for i in order])
    assert [_choice(rq) for rq, _ in fresh] == alone
    # NOTE: and the choices of the per-layer search before the batch (main at 5a01d6d: its digest of these
    # draws); a change of the search's rules that keeps it exact still changes this
    assert hashlib.sha256(b"".join(repr(c).encode() for c in alone)).hexdigest() == \
        "828c09e96e30841052da062de343b10f8c12d65f161d7b01d0762bffffa92d4f"
    found = [c for c in alone if c[0] is not None]
    assert len(found) > 40 and any(c[3] is not None for c in found) and any(c[5] is not None for c in found)
    checked = 0
    for rq, bound in draws:
        if rq.f32 is None or bound is None or bound.max() > 4000:
            continue
        redo = set() if rq.f32_fix is None else set(rq.f32_fix[0].tolist())
        for ch in set(range(rq.q.shape[0])) - redo:
            _assert_float32_path_exact(rq, ch, np.arange(-bound[ch], bound[ch] + 1, dtype=np.float64))
            checked += 1
    assert checked > 10


def test_prepare_jobs_of_several_layers_give_the_states_of_each_alone():
    """The executor's batched prepare (OpDef.prepare_steps driven by run_prepare_jobs, every layer's
    requantization searches in one call per round) gives each CONV_2D the plan and float32 constants its
    own prepare gives."""
    from nnhal.ops import conv as cv
    from nnhal.ops.base import OpInfo, run_prepare_jobs

    infos = []
    for i, case in enumerate(CONV_CASES * 2):
        ops, _, oscale, ozp = _conv_case(case, Q8S if i % 2 else Q8, i % 3 != 0, [0, 1, 3][i % 3],
                                         bias_range=3000 * (1 + 40 * (i % 2)))
        infos.append(OpInfo(type=Op.CONV_2D, inputs=[o.info() for o in ops],
                            outputs=[OperandInfo(Q8S if i % 2 else Q8, (), oscale, ozp)]))
    pending, batched = {}, {}
    for k, info in enumerate(infos):
        gen = cv._prepare_steps(info)
        try:
            pending[k] = (gen, next(gen))
        except StopIteration as done:
            batched[k] = done.value
    assert len(pending) > 4
    batched.update(run_prepare_jobs(pending))
    compared = 0
    for k, info in enumerate(infos):
        alone = cv._prepare(info)
        assert (alone.plan is None) == (batched[k].plan is None)
        assert alone.bounded.keys() == batched[k].bounded.keys()
        for key, rq in alone.bounded.items():
            assert _choice(rq) == _choice(batched[k].bounded[key])
            compared += rq.f32 is not None
    assert compared > 4


@pytest.mark.parametrize("cout", [1, 15, 16, 37])
def test_float_filter_matrix_is_the_transpose(cout):
    """The float CONV_2D / FULLY_CONNECTED weights laid out for the GEMM ([K, Cout], copied in blocks of
    16 output channels) are the transpose, contiguous, bit for bit."""
    from nnhal.ops import conv as cv

    w = rng.standard_normal((cout, 3, 2, 5)).astype(np.float32)
    for form, src in ((cv.CONV, w), (cv.FC, w.reshape(cout, -1))):
        m = cv._filter_matrix(form, src, 0, False, 1)
        assert m.flags.c_contiguous
        np.testing.assert_array_equal(m.view(np.uint32), np.ascontiguousarray(src.reshape(cout, -1).T).view(np.uint32))
