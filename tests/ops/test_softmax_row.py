"""The quantized SOFTMAX of a single short row on Python ints
(``nnhal.ops.softmax._softmax_quant_row``) against the vectorized kernel it
stands in for, and through the operation."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.hal import OperandLifeTime
from nnhal.hal import OperandType as T
from nnhal.hal import OperationType as Op
from nnhal.ops import softmax as sm
from nnhal.ops.base import OperandInfo, Tensor
from nnhal.ops.run import prepare_operation


@pytest.mark.parametrize("beta,scale", [(1.0, 0.1), (1.0, 1 / 256), (0.5, 0.05), (2.0, 0.3), (1e-3, 10.0)])
@pytest.mark.parametrize("t,dt,lo,hi", [(T.TENSOR_QUANT8_ASYMM_SIGNED, np.int8, -128, 128),
                                        (T.TENSOR_QUANT8_ASYMM, np.uint8, 0, 256)])
def test_single_row_equals_the_vectorized_kernel(beta, scale, t, dt, lo, hi):
    m, left, dmin = sm._quant_params(beta, scale)
    tables = sm._build_exp_table(m, left, dmin)
    rng = np.random.default_rng(7)
    for k in range(400):
        w = int(rng.integers(1, sm._ONE_ROW + 1))
        q = rng.integers(lo, hi, (1, w)).astype(dt)
        if k % 4 == 0:  # NOTE: near-equal values: sums at the reciprocal's extremes
            q = np.clip(q, lo, lo + int(rng.integers(1, 4))).astype(dt)
        want = sm._softmax_quant_rows(q, tables, t)
        got = sm._softmax_quant_row(q, tables, t)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_single_row_through_the_operation():
    t = T.TENSOR_QUANT8_ASYMM_SIGNED
    x = np.array([[-128, 3, 127, 0, -5, 90, 90, -128]], np.int8)
    beta = OperandInfo(T.FLOAT32, (), value=np.float32(1.0), lifetime=OperandLifeTime.CONSTANT_COPY)
    ins = [OperandInfo(t, (1, 8), 0.1, -3), beta]
    p = prepare_operation(Op.SOFTMAX, ins, [OperandInfo(t, (1, 8), 1 / 256, -128)])
    got = p.run([Tensor(t, x, 0.1, -3), Tensor(T.FLOAT32, np.float32(1.0))])[0]
    st = p.state.value(None)
    want = sm._softmax_quant_rows(x, st[2], t)
    np.testing.assert_array_equal(got, want)
    assert got[0, 2] > got[0, 1] and got[0, 0] == -128
