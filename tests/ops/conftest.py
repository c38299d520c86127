"""Kernel tests run each operation through validate, prepare and execute
(``nnhal.ops.run.run_operation`` with the test module's ``PHASES``)."""

from __future__ import annotations

from typing import Any, Callable, Collection, Sequence

import numpy as np
import pytest

from nnhal.hal import HalVersion, OperandLifeTime
from nnhal.ops.base import OperandInfo, OpExecutionError, OutputSpec, Tensor
from nnhal.ops.run import PreparedOperation, prepare_operation, tensor_info


@pytest.fixture
def kernel_only(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Prepare and execute only: a test of a kernel's own run-time checks
    feeds it what a model validation would refuse."""
    monkeypatch.setitem(request.module.PHASES, "validate", False)


def outcome(prep: PreparedOperation, inputs: Sequence[Tensor]) -> Any:
    """The outputs' dtype, shape and bytes, or the execution's failure."""
    try:
        return [(r.dtype.str, r.shape, np.ascontiguousarray(r).tobytes()) for r in prep.run(inputs)]
    except OpExecutionError as e:
        return f"OpExecutionError: {e}"


def _info(t: Tensor, constant: bool) -> OperandInfo:
    if constant and t.data is None:  # NOTE: an omitted constant is a NO_VALUE operand
        return OperandInfo(t.type, (), lifetime=OperandLifeTime.NO_VALUE)
    return tensor_info(t, constant)


def _paths_agree(op: Any, inputs: Sequence[Tensor], outputs: Sequence[OutputSpec], constant: Collection[int],
                 *others: Sequence[Tensor], validate: bool = True,
                 version: HalVersion = HalVersion.V1_3) -> tuple[PreparedOperation, list]:
    """Prepares ``op`` twice, with the inputs at positions ``constant`` as the
    model's constants (the prepared path) and with every input given at run
    time (the run-time path), validated as of ``version``; on ``inputs`` and on each input list of
    ``others`` (the same constants, other run-time values and shapes: the
    declared shape is ``inputs``' own) both give the same bits, or fail with
    the same OpExecutionError, twice in a row.  Returns the prepared operation
    and the outcomes."""
    prep = prepare_operation(op, [_info(t, i in constant) for i, t in enumerate(inputs)], outputs, validate=validate,
                             version=version)
    run = prepare_operation(op, [tensor_info(t) for t in inputs], outputs, validate=validate, version=version)
    results = []
    for ins in (inputs, *others, inputs):
        a = outcome(prep, ins)
        assert a == outcome(run, ins)
        assert a == outcome(prep, ins)
        results.append(a)
    return prep, results


@pytest.fixture
def paths_agree() -> Callable[..., tuple[PreparedOperation, list]]:
    """:func:`_paths_agree`: the prepared path and the run-time path of an operation agree."""
    return _paths_agree
