"""The prepared path on every conformance vector of the recurrent, detection
and random operations: the vectors give most weights and parameters as model
inputs (the run-time path); the same models with every input but each
operation's first a constant (``opbench.constant_inputs``, as real models hold
them) give the same bits, or fail the same way."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from nnhal import hal
from nnhal.conformance import vectors
from nnhal.engine.executor import Executor
from nnhal.tools.opbench import constant_inputs
from tests.conftest import vectors_root

OPS = {"BIDIRECTIONAL_SEQUENCE_LSTM", "RNN", "SVDF", "BIDIRECTIONAL_SEQUENCE_RNN", "UNIDIRECTIONAL_SEQUENCE_RNN",
       "AXIS_ALIGNED_BBOX_TRANSFORM", "BOX_WITH_NMS_LIMIT", "DETECTION_POSTPROCESSING", "GENERATE_PROPOSALS",
       "HEATMAP_MAX_KEYPOINT", "ROI_ALIGN", "ROI_POOLING", "RANDOM_MULTINOMIAL"}


def _outcome(model: hal.Model, pools: list, inputs: list) -> Any:
    try:
        ex = Executor(model, pools)
        runs = [ex.run(inputs) for _ in range(2)]
    except Exception as e:  # noqa: BLE001  (compared, not hidden)
        return type(e).__name__
    return [[(o.dtype.str, o.shape, np.ascontiguousarray(o).tobytes()) for o in outs] for outs in runs]


def test_constant_parameters_give_the_vectors_bits() -> None:
    root = vectors_root()
    if not root.is_dir():
        pytest.skip("no conformance vectors")
    n = 0
    for vm in vectors.load([root]):
        if not vm.operation_types & OPS or vm.referenced:
            continue
        pools: list[bytearray] = []

        def factory(data: bytes, pools: list = pools) -> hal.Memory:
            pools.append(bytearray(data))
            return hal.Memory(name="ashmem", size=len(data))

        model = vm.build_model(factory)
        want = _outcome(model, pools, vm.input_values())
        const, inputs = constant_inputs(vm, model)
        assert _outcome(const, pools, inputs) == want, vm.name
        n += 1
    assert n > 300
