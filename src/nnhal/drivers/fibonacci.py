"""The example extension ``com.example.fibonacci`` and the device serving it,
``example-fibonacci``: Android's example vendor extension
(``nn/extensions/example/fibonacci/FibonacciExtension.h``) and its test
driver (``nn/runtime/test/fibonacci_extension/FibonacciDriver.cpp``), on the
reference executor, which runs every other operation.

The extension:

* operand types ``EXAMPLE_INT64`` (0: a signed 64-bit scalar, 8 bytes) and
  ``EXAMPLE_TENSOR_QUANT64_ASYMM`` (1: a tensor of unsigned 64-bit integers,
  8 bytes each, real value = (integer - zeroPoint) * scale, with
  ``ExampleQuant64AsymmParams {double scale; int64_t zeroPoint;}`` in
  ``extraParams.extension``: 16 bytes, little-endian);
* operation ``EXAMPLE_FIBONACCI`` (0): input 0, n, an ``EXAMPLE_INT64`` or a
  ``TENSOR_FLOAT32`` of one element; output 0, the first n Fibonacci numbers
  (1, 1, 2, 3, 5, ...) as a 1-D ``EXAMPLE_TENSOR_QUANT64_ASYMM`` (quantized
  with its parameters) or ``TENSOR_FLOAT32``.  n < 1 fails the execution
  (GENERAL_FAILURE, the reference's OP_FAILED).

Differences from Android's driver, each a choice: its
``getSupportedOperations`` answers INVALID_ARGUMENT for a Fibonacci operation
with other operand types and false for everything else; here the shared
validation checks the operation against the declared signatures (also
INVALID_ARGUMENT), and the other operations are the reference's.  The
quantization parameters are required and checked when the model is validated
(scale finite and positive), where the reference reads them unchecked at run
time.  The float32 result is each Fibonacci number rounded once to float32
(the reference sums in float32, which rounds differently from F(37) =
24157817 on, past 2^24); the uint64 results are the reference's, wrapping
modulo 2^64 past F(93).
"""

from __future__ import annotations

import math
import struct
from typing import Optional

import numpy as np

from nnhal import hal
from nnhal.drivers.sample import SampleBackend
from nnhal.ops.base import V1_2, ExecContext, OpInfo, OpValidationError, Signature
from nnhal.ops.extension import Extension, ExtensionOperand, ExtensionOperation, Local

T = hal.OperandType

EXTENSION_NAME = "com.example.fibonacci"
EXAMPLE_INT64 = 0
EXAMPLE_TENSOR_QUANT64_ASYMM = 1
EXAMPLE_FIBONACCI = 0

# ExampleQuant64AsymmParams {double scale; int64_t zeroPoint;}: 16 bytes, no padding
QUANT64_PARAMS = struct.Struct("<dq")
# NOTE: the output is n elements of 8 bytes: a device limit on n (512 MiB), so that a hostile n is a failed
# execution rather than an allocation that takes the machine's memory
MAX_N = 1 << 26
VERSION_STRING = "nnhal-example-fibonacci 0.1 (com.example.fibonacci on the CPU reference)"


def quant64_params(scale: float, zero_point: int) -> bytes:
    """The ``extraParams.extension`` bytes of an ``EXAMPLE_TENSOR_QUANT64_ASYMM`` operand."""
    return QUANT64_PARAMS.pack(float(scale), int(zero_point))


def _check_int64_params(params: Optional[bytes]) -> None:
    if params:
        raise OpValidationError(f"EXAMPLE_INT64 takes no extraParams.extension ({len(params)} bytes given)")


def _decode_quant64(params: Optional[bytes]) -> tuple[float, int]:
    if params is None or len(params) != QUANT64_PARAMS.size:
        raise OpValidationError(f"EXAMPLE_TENSOR_QUANT64_ASYMM needs ExampleQuant64AsymmParams in "
                                f"extraParams.extension ({QUANT64_PARAMS.size} bytes), got "
                                f"{'none' if params is None else f'{len(params)} bytes'}")
    scale, zero_point = QUANT64_PARAMS.unpack(params)
    if not (math.isfinite(scale) and scale > 0.0):
        raise OpValidationError(f"EXAMPLE_TENSOR_QUANT64_ASYMM: scale {scale} is not finite and positive")
    return scale, zero_point


def _check_quant64_params(params: Optional[bytes]) -> None:
    _decode_quant64(params)


# ---------------------------------------------------------------------------
# EXAMPLE_FIBONACCI


def _validate(info: OpInfo) -> None:
    n = info.inputs[0]
    if n.type == T.TENSOR_FLOAT32 and n.dimensions and all(n.dimensions) and math.prod(n.dimensions) != 1:
        raise info.fail(f"input 0 must hold exactly one element, has shape {list(n.dimensions)}")
    out = info.outputs[0]
    if len(out.dimensions) > 1:
        raise info.fail(f"output 0 is 1-D, declared with rank {len(out.dimensions)}")


def _prepare(info: OpInfo) -> tuple[float, int]:
    """The output's (scale, zeroPoint): the extension parameters of a quant64 output, (1, 0) for float32."""
    out = info.outputs[0]
    if out.type == T.TENSOR_FLOAT32:
        return 1.0, 0
    return _decode_quant64(out.extension)


def fibonacci(n: int, dtype: np.dtype) -> np.ndarray:
    """F(1) .. F(n) (1, 1, 2, 3, 5, ...) as ``dtype`` (uint64: modulo 2^64; float64: rounded), by
    doubling: from F(0..m), F(m+j) = F(j) F(m+1) + F(j-1) F(m) for j = 1..m, one vectorized step each."""
    f = np.zeros(n + 1, dtype)  # F(0) .. F(n)
    f[1] = 1
    m = 1
    with np.errstate(over="ignore", invalid="ignore"):
        while m < n:
            k = min(m, n - m)
            f[m + 1:m + k + 1] = f[1:k + 1] * (f[m] + f[m - 1]) + f[0:k] * f[m]
            m += k
    return f[1:]


def _execute(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0].data
    if ctx.inputs[0].type == T.TENSOR_FLOAT32:
        if x.size != 1:
            raise ctx.fail(f"input 0 must hold exactly one element, has shape {list(x.shape)}")
        v = float(x.reshape(-1)[0])
        if not math.isfinite(v):
            raise ctx.fail(f"n = {v} is not a number of elements")
        n = int(v)  # NOTE: truncation toward zero, as the reference's static_cast<int64_t>(float)
    else:
        n = int(x.reshape(-1)[0].astype(np.int64))
    if n < 1:
        raise ctx.fail(f"n = {n}: the Fibonacci sequence needs n >= 1")
    declared = ctx.outputs[0].dimensions
    if declared and declared[0] and declared[0] != n:
        raise ctx.fail(f"n = {n}, but output 0 is declared with {declared[0]} elements")
    if n > MAX_N:
        raise ctx.fail(f"n = {n} exceeds this device's limit of {MAX_N} elements")
    scale, zero_point = ctx.state
    if ctx.outputs[0].type == T.TENSOR_FLOAT32:
        return [fibonacci(n, np.dtype(np.float64)).astype(np.float32)]
    # NOTE: as the reference: uint64 -> double, / scale + zeroPoint, truncated back to uint64
    q = fibonacci(n, np.dtype(np.uint64)).astype(np.float64) / scale + float(zero_point)
    if not np.all((q >= 0.0) & (q < 2.0 ** 64)):
        raise ctx.fail(f"a quantized value falls outside uint64 (scale {scale}, zeroPoint {zero_point})")
    return [q.astype(np.uint64)]


_N_TYPES = (Local(EXAMPLE_INT64), T.TENSOR_FLOAT32)
_OUT_TYPES = (Local(EXAMPLE_TENSOR_QUANT64_ASYMM), T.TENSOR_FLOAT32)

FIBONACCI = Extension(
    name=EXTENSION_NAME,
    operand_types=(
        ExtensionOperand(EXAMPLE_INT64, "EXAMPLE_INT64", is_tensor=False, byte_size=8, dtype=np.int64,
                         check_params=_check_int64_params),
        ExtensionOperand(EXAMPLE_TENSOR_QUANT64_ASYMM, "EXAMPLE_TENSOR_QUANT64_ASYMM", is_tensor=True, byte_size=8,
                         dtype=np.uint64, check_params=_check_quant64_params),
    ),
    operations=(
        ExtensionOperation(EXAMPLE_FIBONACCI, "EXAMPLE_FIBONACCI",
                           signatures=[Signature((i,), (o,), V1_2) for i in _N_TYPES for o in _OUT_TYPES],
                           execute=_execute, validate=_validate, prepare=_prepare,
                           save_state=lambda state, put: list(state), load_state=lambda value, get: tuple(value)),
    ),
)


class FibonacciBackend(SampleBackend):
    """``example-fibonacci``: the reference executor plus ``com.example.fibonacci``."""

    name = "example-fibonacci"

    def __init__(self, version_string: str = VERSION_STRING):
        super().__init__(version_string)

    def extensions(self) -> tuple[Extension, ...]:
        return (FIBONACCI,)

    def capabilities(self) -> hal.Capabilities:
        # NOTE: Android's FibonacciDriver reports 1.0 for everything: a runtime choosing between this device
        # and the reference (float32 1.0 too) keeps ordinary float32 operations on the reference
        perf = hal.PerformanceInfo(execTime=1.0, powerUsage=1.0)
        return hal.Capabilities(
            relaxedFloat32toFloat16PerformanceScalar=perf, relaxedFloat32toFloat16PerformanceTensor=perf,
            operandPerformance=[hal.OperandPerformance(type=t, info=perf) for t in sorted(T, key=int)
                                if t != T.SUBGRAPH],
            ifPerformance=perf, whilePerformance=perf)
