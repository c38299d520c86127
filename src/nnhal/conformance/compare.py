"""How results are judged: the tolerances of Android's test harness
(``shared/conformance/README.md``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from nnhal import hal

T = hal.OperandType


@dataclass
class Verdict:
    ok: bool
    max_error: float = 0.0
    message: str = ""


def tolerance(out_type: int, model_has_fp16: bool, relaxed: bool, name: str) -> tuple[float, float]:
    """(atol, rtol) for an output of ``out_type``."""
    if out_type == T.TENSOR_FLOAT32:
        if relaxed or model_has_fp16:
            return 5 * 2.0**-10, 5 * 2.0**-10
        return 1e-5, 5 * 2.0**-23
    if out_type == T.TENSOR_FLOAT16:
        return 5 * 2.0**-10, 5 * 2.0**-10
    if out_type in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM,
                    T.TENSOR_QUANT8_SYMM_PER_CHANNEL):
        return (3.0 if "mobilenet" in name else 1.0), 0.0
    if out_type == T.TENSOR_BOOL8 or out_type == T.BOOL:
        return 0.0, 0.0
    return 1.0, 0.0  # TENSOR_INT32, INT32, TENSOR_QUANT16_*


def compare(actual: np.ndarray, expected: np.ndarray, out_type: int, *, model_has_fp16: bool, relaxed: bool,
            name: str, ignored: bool = False, multinomial_tolerance: float = 0.0,
            multinomial_logits: Optional[np.ndarray] = None) -> Verdict:
    """Judge one output: shape always, values unless ignored."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    if tuple(actual.shape) != tuple(expected.shape):
        return Verdict(False, float("inf"), f"shape {list(actual.shape)} != expected {list(expected.shape)}")
    if ignored:
        return Verdict(True)
    if multinomial_tolerance > 0 and multinomial_logits is not None:
        return _multinomial(actual, multinomial_logits, multinomial_tolerance)
    if actual.size == 0:
        return Verdict(True)
    if actual.dtype == expected.dtype and np.array_equal(actual, expected):
        return Verdict(True)  # NOTE: equal values (most outputs): every error is 0, no arithmetic needed
    atol, rtol = tolerance(out_type, model_has_fp16, relaxed, name)
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    err = np.abs(a - e)
    bad = ~(err <= atol + rtol * np.abs(e))
    # NaNs match NaNs
    bad &= ~(np.isnan(a) & np.isnan(e))
    max_err = float(np.nanmax(err)) if err.size else 0.0
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        return Verdict(False, max_err, f"{int(bad.sum())}/{bad.size} values off; first at {i}: got {a.flat[i].item()!r}, "
                                       f"expected {e.flat[i].item()!r} (atol {atol:g}, rtol {rtol:g})")
    return Verdict(True, max_err)


def _multinomial(samples: np.ndarray, logits: np.ndarray, tol: float) -> Verdict:
    """Each class's sample frequency is within ``tol`` of softmax(logits)."""
    logits = logits.astype(np.float64).reshape(samples.shape[0], -1)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    worst = 0.0
    for b in range(samples.shape[0]):
        freq = np.bincount(samples[b].astype(np.int64), minlength=p.shape[1])[: p.shape[1]] / samples.shape[1]
        worst = max(worst, float(np.abs(freq - p[b]).max()))
    if worst > tol:
        return Verdict(False, worst, f"sample frequencies differ from softmax by {worst:.4f} > {tol}")
    return Verdict(True, worst)
