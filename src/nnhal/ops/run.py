"""Running one operation outside a model: the registry's three phases
(``validate``, ``prepare``, ``execute``, as the executor calls them for each
operation of a HAL 1.3 ``Model``) in one place, for the benchmark, the
capability measurement (``getCapabilities_1_3``'s performance figures), the
operation checker and the tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

import numpy as np

from nnhal.hal import HalVersion, OperandLifeTime, OperationType
from nnhal.ops import registry
from nnhal.ops.base import (
    ExecContext,
    OpDef,
    OperandInfo,
    OpInfo,
    OpValidationError,
    OutputSpec,
    Tensor,
    match_signature,
)


def tensor_info(t: Tensor, constant: bool = False) -> OperandInfo:
    """What validate / prepare see of a tensor: its value only if ``constant``."""
    life = OperandLifeTime.CONSTANT_COPY if constant else OperandLifeTime.SUBGRAPH_INPUT
    dims = tuple(t.data.shape) if t.data is not None else ()
    return OperandInfo(t.type, dims, t.scale, t.zero_point, t.channel_quant, life, t.data if constant else None)


def _output_info(o: Union[OutputSpec, OperandInfo]) -> OperandInfo:
    if isinstance(o, OperandInfo):
        return o
    return OperandInfo(o.type, tuple(o.dimensions), o.scale, o.zero_point, o.channel_quant,
                       OperandLifeTime.SUBGRAPH_OUTPUT)


def _output_spec(o: Union[OutputSpec, OperandInfo]) -> OutputSpec:
    if isinstance(o, OutputSpec):
        return o
    return OutputSpec(o.type, tuple(o.dimensions), o.scale, o.zero_point, o.channel_quant)


@dataclass
class PreparedOperation:
    """An operation validated and prepared once; :meth:`run` executes it on input tensors."""

    opdef: OpDef
    info: OpInfo
    state: Any
    outputs: list[OutputSpec]

    def run(self, inputs: Sequence[Tensor]) -> list[np.ndarray]:
        """``execute`` on ``inputs``; raises OpExecutionError (or DeadlineMissed) as the kernel does."""
        ctx = ExecContext(type=self.opdef.type, inputs=list(inputs), outputs=self.outputs, relaxed=self.info.relaxed,
                          state=self.state)
        return self.opdef.execute(ctx)


def prepare_operation(op_type: Union[OperationType, int], inputs: Sequence[Union[OperandInfo, Tensor]],
                      outputs: Sequence[Union[OutputSpec, OperandInfo]], *, version: HalVersion = HalVersion.V1_3,
                      relaxed: bool = False, validate: bool = True,
                      subgraphs: Sequence[Any] = ()) -> PreparedOperation:
    """Checks the operand types against the signatures and runs ``validate``
    (unless ``validate`` is False) and ``prepare``.  Inputs given as Tensors
    are model inputs (no constant value); give an OperandInfo with ``value``
    for a constant; ``subgraphs`` are the model's referenced subgraphs (IF /
    WHILE).  Raises OpValidationError for what a model would be refused."""
    opdef = registry.find(op_type)
    if opdef is None:
        raise OpValidationError(f"operation {op_type} is not implemented")
    in_infos = [tensor_info(i) if isinstance(i, Tensor) else i for i in inputs]
    out_infos = [_output_info(o) for o in outputs]
    info = OpInfo(type=opdef.type, inputs=in_infos, outputs=out_infos, version=version, relaxed=relaxed,
                  subgraphs=subgraphs)
    if validate:
        match_signature(opdef, [i.type for i in in_infos], [o.type for o in out_infos], version)
        if opdef.validate:
            opdef.validate(info)
    state = opdef.prepare(info) if opdef.prepare else None
    return PreparedOperation(opdef, info, state, [_output_spec(o) for o in outputs])


def run_operation(op_type: Union[OperationType, int], inputs: Sequence[Tensor], outputs: Sequence[OutputSpec], *,
                  constants: Optional[Sequence[bool]] = None, version: HalVersion = HalVersion.V1_3,
                  relaxed: bool = False, validate: bool = True,
                  scalar_constants: bool = False) -> list[np.ndarray]:
    """Validates, prepares and executes one operation on ``inputs``;
    ``constants[i]`` marks input i as a constant operand (its value seen by
    validate / prepare, as for a model's CONSTANT_COPY operand);
    ``scalar_constants``: every scalar (0-d) input is one, as a model's
    parameters usually are.  ``validate=False`` runs the kernel on what a
    model validation would refuse (a test of the kernel's own run-time
    checks): prepare and execute only."""
    if constants is not None:
        flags = list(constants)
    elif scalar_constants:
        flags = [t.data is not None and t.data.ndim == 0 for t in inputs]
    else:
        flags = [False] * len(inputs)
    infos = [tensor_info(t, c) for t, c in zip(inputs, flags)]
    prepared = prepare_operation(op_type, infos, outputs, version=version, relaxed=relaxed, validate=validate)
    return prepared.run(inputs)
