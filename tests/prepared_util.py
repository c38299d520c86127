"""One operation as a HAL model with chosen inputs constant, run by the
executor, and through the compilation cache: the prepared path (constant
weights and parameters, as real models give them) against the run-time path
(the same values as model inputs, as the conformance vectors give them)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from nnhal import hal
from nnhal.driver import cache as driver_cache
from nnhal.engine.executor import Executor
from nnhal.ops.base import OutputSpec, Tensor

L = hal.OperandLifeTime
_KEY, _VERSION, _TOKEN = b"k" * 32, "prepared-util", b"t" * 32


def one_op_model(op: hal.OperationType, inputs: Sequence[Tensor], outputs: Sequence[OutputSpec],
                 constant: Sequence[bool], relaxed: bool = False) -> tuple[hal.Model, list]:
    """(the model, the values of its inputs): input k is a CONSTANT_COPY
    operand if ``constant[k]``, else a model input; an omitted one (data None)
    is NO_VALUE either way."""
    operands, values, run_inputs, input_indexes = [], bytearray(), [], []
    for k, t in enumerate(inputs):
        dims = [] if t.data is None else list(t.data.shape)
        o = hal.Operand(type=t.type, dimensions=dims, numberOfConsumers=1, scale=t.scale, zeroPoint=t.zero_point)
        if t.data is None:
            o.lifetime = L.NO_VALUE
        elif constant[k]:
            raw = np.ascontiguousarray(t.data).tobytes()
            off = (len(values) + 7) // 8 * 8
            values.extend(b"\0" * (off - len(values)) + raw)
            o.lifetime = L.CONSTANT_COPY
            o.location = hal.DataLocation(poolIndex=0, offset=off, length=len(raw))
        else:
            o.lifetime = L.SUBGRAPH_INPUT
            input_indexes.append(k)
            run_inputs.append(t.data)
        operands.append(o)
    outs = []
    for spec in outputs:
        outs.append(len(operands))
        operands.append(hal.Operand(type=spec.type, dimensions=list(spec.dimensions), scale=spec.scale,
                                    zeroPoint=spec.zero_point, lifetime=L.SUBGRAPH_OUTPUT))
    sg = hal.Subgraph(operands=operands, operations=[hal.Operation(op, list(range(len(inputs))), outs)],
                      inputIndexes=input_indexes, outputIndexes=outs)
    return hal.Model(main=sg, operandValues=bytes(values), relaxComputationFloat32toFloat16=relaxed), run_inputs


def through_the_cache(model: hal.Model) -> tuple[Executor, Executor, list[str]]:
    """(the executor prepared from the model, the one restored from its
    compilation cache, the cache's state kinds of the main subgraph)."""
    fresh = Executor(model, [])
    model_bytes, chunks, _ = driver_cache.encode(model, [], fresh, int(hal.HalVersion.V1_3), 0, _KEY, _VERSION,
                                                 _TOKEN)
    record = driver_cache.verify(model_bytes, _KEY, _VERSION, _TOKEN)
    data = np.frombuffer(b"".join(bytes(c) for c in chunks), np.uint8).copy()
    restored = driver_cache.restore(record, data)
    return fresh, restored.executor, [st.kind for st in record.states[0]]


def assert_same_outputs(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> None:
    """Bit for bit: same dtypes, shapes and bytes (NaN included)."""
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert np.ascontiguousarray(x).tobytes() == np.ascontiguousarray(y).tobytes()


def assert_cache_round_trip(op: hal.OperationType, inputs: Sequence[Tensor], outputs: Sequence[OutputSpec],
                            constant: Sequence[bool], want: Sequence[np.ndarray]) -> None:
    """A one-operation model of ``op`` (inputs marked in ``constant`` as its constants) gives ``want`` bit for
    bit both freshly prepared and restored from its compilation cache, whose state was recorded as "prepare"
    (rebuilt at load from the model's own constants)."""
    model, values = one_op_model(op, inputs, outputs, constant)
    fresh, loaded, kinds = through_the_cache(model)
    assert kinds == ["prepare"]
    assert_same_outputs(fresh.run(values), want)
    assert_same_outputs(loaded.run(values), want)
