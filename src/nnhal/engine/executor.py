"""The CPU executor: runs a prepared HAL 1.3 model over its memory pools.

It follows the reference ``CpuExecutor``: operations run in the order of the
(validated) subgraph; constants are read once when the model is prepared and
each operation's ``prepare`` runs then; at execution the subgraph inputs are
bound, each operation's ``execute`` computes its outputs (shapes known only
at run time included), temporaries are released after their last reader, and
IF / WHILE run referenced subgraphs through :meth:`Executor.run_subgraph`.
Deadlines are checked before every operation, the loop timeout at every WHILE
iteration (both end in MISSED_DEADLINE_TRANSIENT, as the reference does).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from nnhal import hal
from nnhal.ops import deadline as op_deadline
from nnhal.ops import registry
from nnhal.ops.base import (
    ExecContext,
    OpDef,
    OpExecutionError,
    OpInfo,
    OutputSpec,
    Tensor,
)
from nnhal.ops.control_flow import MAX_SUBGRAPH_DEPTH as MAX_SUBGRAPH_DEPTH  # NOTE: re-exported for the drivers
from nnhal.ops.operands import constant_value as constant_value  # noqa: F401  (re-exported)
from nnhal.ops.operands import operand_info

log = logging.getLogger("nnhal.engine.executor")

L = hal.OperandLifeTime


# NOTE: the execution deadline or the loop timeout passed (-> MISSED_DEADLINE_*): one
# exception for the executor's checks and the kernels' own (nnhal.ops.deadline.poll)
DeadlineMissed = op_deadline.DeadlineMissed

# In ``Executor(states=...)``: run the operation's prepare for this step.
PREPARE = object()


class BadData(OpExecutionError):
    """A required operand omitted, or a zero-sized input, for an operation the
    reference runs in ``CpuExecutor``'s own switch: there ``allParametersPresent``
    answers ANEURALNETWORKS_BAD_DATA, which the driver reports as
    INVALID_ARGUMENT (operations of the resolver fail with OP_FAILED ->
    GENERAL_FAILURE instead)."""


def _operand_error(opdef: OpDef, msg: str) -> OpExecutionError:
    return (BadData if opdef.bad_data_on_missing_operand else OpExecutionError)(msg)


@dataclass
class _Step:
    operation: hal.Operation
    opdef: OpDef
    state: Any
    outputs: list[OutputSpec]
    release: list[int]  # temporaries whose last reader is this step
    # per input: a ready Tensor (constant operands, shared by every execution:
    # kernels never modify their inputs) or (operand, type, scale, zeroPoint,
    # channelQuant) to bind at run time
    inputs: list = None  # type: ignore[assignment]
    out_dtypes: list = None  # type: ignore[assignment]


class _Graph:
    """One subgraph, prepared: constants read, op states computed."""

    def __init__(self, model: hal.Model, sg: hal.Subgraph, pools: Sequence[Any], relaxed: bool,
                 states: Optional[Sequence[Any]] = None):
        self.sg = sg
        self.constants: dict[int, Optional[np.ndarray]] = {}
        for i, o in enumerate(sg.operands):
            if o.lifetime in (L.CONSTANT_COPY, L.CONSTANT_REFERENCE, L.SUBGRAPH):
                self.constants[i] = constant_value(model, o, pools)
            elif o.lifetime == L.NO_VALUE:
                self.constants[i] = None
        last_reader: dict[int, int] = {}
        for k, op in enumerate(sg.operations):
            for i in op.inputs:
                last_reader[i] = k
        outputs = set(sg.outputIndexes)
        release: dict[int, list[int]] = {}
        for i, k in last_reader.items():
            if sg.operands[i].lifetime == L.TEMPORARY_VARIABLE and i not in outputs:
                release.setdefault(k, []).append(i)
        self.infos = [operand_info(o, self.constants.get(i)) for i, o in enumerate(sg.operands)]
        self.steps: list[_Step] = []
        for k, op in enumerate(sg.operations):
            opdef = registry.find(op.type)
            if opdef is None:
                raise OpExecutionError(f"operation {op.type} is not supported")
            info = OpInfo(type=opdef.type, inputs=[self.infos[i] for i in op.inputs],
                          outputs=[self.infos[i] for i in op.outputs], relaxed=relaxed,
                          subgraphs=model.referenced)
            op_deadline.poll()  # NOTE: a preparation's deadline (set by the driver) ends it between operations
            if states is not None and states[k] is not PREPARE:
                state = states[k]  # restored from the compilation cache
            else:
                state = opdef.prepare(info) if opdef.prepare else None
            specs = [OutputSpec(type=hal.OperandType(sg.operands[i].type), dimensions=tuple(sg.operands[i].dimensions),
                                scale=sg.operands[i].scale, zero_point=sg.operands[i].zeroPoint,
                                channel_quant=sg.operands[i].extraParams.channelQuant) for i in op.outputs]
            tmpl: list = []
            for i in op.inputs:
                o = sg.operands[i]
                meta = (i, hal.OperandType(o.type), o.scale, o.zeroPoint, o.extraParams.channelQuant)
                tmpl.append(Tensor(type=meta[1], data=self.constants[i], scale=meta[2], zero_point=meta[3],
                                   channel_quant=meta[4]) if i in self.constants else meta)
            self.steps.append(_Step(op, opdef, state, specs, release.get(k, []), tmpl,
                                    [spec.dtype for spec in specs]))


def _check_output(opdef: OpDef, j: int, spec: OutputSpec, arr: Any, dtype: Any = None) -> np.ndarray:
    if arr.__class__ is not np.ndarray:
        arr = np.asarray(arr)
    dtype = spec.dtype if dtype is None else dtype
    if arr.dtype != dtype:
        arr = arr.astype(dtype)
    declared = spec.dimensions
    if declared:
        if arr.ndim != len(declared) or any(d and d != a for d, a in zip(declared, arr.shape)):
            raise OpExecutionError(
                f"{opdef.name}: output {j} has shape {list(arr.shape)}, incompatible with the declared "
                f"dimensions {list(declared)}")
    return arr


class Executor:
    """Runs a model: built once per prepared model, then ``run`` per execution
    (thread-safe: executions share only read-only prepared state).  A
    ``nnhal.driver.backend.Compiled`` (the sample backend's)."""

    reads_inputs = False  # NOTE: run() takes numpy arrays

    def __init__(self, model: hal.Model, pools: Sequence[Any], states: Optional[Sequence[Sequence[Any]]] = None):
        """``states`` (from the compilation cache): per subgraph (main first),
        per operation, the prepared state to use instead of running the
        operation's prepare (:data:`PREPARE` runs it)."""
        self.model = model
        self.relaxed = bool(model.relaxComputationFloat32toFloat16)
        sgs = [model.main, *model.referenced]
        if states is not None and (len(states) != len(sgs) or any(
                len(st) != len(sg.operations) for st, sg in zip(states, sgs))):
            raise OpExecutionError("prepared states do not match the model's operations")
        self.graphs = [_Graph(model, sg, pools, self.relaxed, None if states is None else states[g])
                       for g, sg in enumerate(sgs)]
        # NOTE: a profiling executor's own (nnhal bench --profile makes a private one): seconds per
        # (subgraph, operation index), added up over runs; None (every driver's) times nothing
        self.profile: Optional[dict[tuple[int, int], float]] = None

    def prepared_states(self) -> list[list[Any]]:
        """Per subgraph (main first), per operation, the state its prepare
        computed (None for operations without prepare)."""
        return [[step.state for step in g.steps] for g in self.graphs]

    def run(self, inputs: Sequence[Optional[np.ndarray]], deadline_ns: Optional[int] = None,
            loop_timeout_ns: int = hal.LoopTimeoutDurationNs.DEFAULT,
            omitted_outputs: Sequence[int] = ()) -> list[np.ndarray]:
        """Runs the main subgraph on ``inputs`` (one array per model input, None
        for an omitted one) and returns the outputs with their actual shapes.
        ``omitted_outputs`` are the positions of main outputs the request
        omits (hasNoValue): as in the reference, only operations that accept
        omitted operands may write them."""
        run = _Run(self, deadline_ns, loop_timeout_ns)
        main = self.graphs[0].sg
        run.omitted = {main.outputIndexes[k] for k in omitted_outputs if 0 <= k < len(main.outputIndexes)}
        if deadline_ns is None and op_deadline.current() is None:
            return run.run_graph(0, inputs)  # NOTE: no deadline to set: no context manager per execution
        with op_deadline.scope(deadline_ns):  # NOTE: long kernels poll it inside their outer loops
            return run.run_graph(0, inputs)


class _Run:
    """The state of one execution (deadline, loop timeout)."""

    def __init__(self, executor: Executor, deadline_ns: Optional[int], loop_timeout_ns: int):
        self.executor = executor
        self.deadline_ns = deadline_ns
        self.loop_timeout_ns = int(loop_timeout_ns)
        self.omitted: set[int] = set()  # omitted main-graph outputs (operand indexes)
        self.depth = 0  # referenced subgraphs being run, one inside the other

    def check_deadline(self) -> None:
        op_deadline.yield_point()  # NOTE: queued higher-priority work may run first (driver scheduler)
        if self.deadline_ns is not None and time.monotonic_ns() > self.deadline_ns:
            raise DeadlineMissed("the execution deadline passed")

    def run_subgraph(self, index: int, inputs: Sequence[Optional[np.ndarray]]) -> list[np.ndarray]:
        """Runs referenced subgraph ``index`` (as in SUBGRAPH operand values)."""
        if self.depth >= MAX_SUBGRAPH_DEPTH:
            # NOTE: the driver does not prepare deeper models; defensive only, never a RecursionError
            raise OpExecutionError(f"control flow nested deeper than {MAX_SUBGRAPH_DEPTH} subgraphs")
        self.depth += 1
        try:
            return self.run_graph(index + 1, inputs)
        finally:
            self.depth -= 1

    def subgraph_output_count(self, index: int) -> int:
        """The number of outputs of referenced subgraph ``index`` (ops.base.SubgraphRunner)."""
        return len(self.executor.graphs[index + 1].sg.outputIndexes)

    def run_graph(self, g: int, inputs: Sequence[Optional[np.ndarray]]) -> list[np.ndarray]:
        graph = self.executor.graphs[g]
        sg = graph.sg
        if len(inputs) != len(sg.inputIndexes):
            raise OpExecutionError(f"subgraph {g} takes {len(sg.inputIndexes)} inputs, got {len(inputs)}")
        values: dict[int, Optional[np.ndarray]] = dict(graph.constants)
        for idx, v in zip(sg.inputIndexes, inputs):
            values[idx] = v
        relaxed = self.executor.relaxed
        profile = self.executor.profile
        for k, step in enumerate(graph.steps):
            self.check_deadline()
            op = step.operation
            ins = []
            for t in step.inputs:
                if t.__class__ is not tuple:
                    ins.append(t)
                    continue
                i = t[0]
                if i not in values:
                    raise OpExecutionError(f"{step.opdef.name}: input operand {i} has no value")
                ins.append(Tensor(type=t[1], data=values[i], scale=t[2], zero_point=t[3], channel_quant=t[4]))
            for n, t in enumerate(ins):
                if t.data is None and n not in step.opdef.omittable_inputs:
                    raise _operand_error(step.opdef, f"{step.opdef.name} input {n} (operand {op.inputs[n]}) is "
                                                     f"required but has no value")
            if g == 0 and self.omitted and not step.opdef.omittable_inputs and not step.opdef.allow_omitted_outputs:
                for j, i in enumerate(op.outputs):
                    if i in self.omitted:
                        raise _operand_error(step.opdef, f"{step.opdef.name} output {j} (operand {i}) is required "
                                                         f"but the request omits it")
            if not step.opdef.allow_zero_sized:
                for n, t in enumerate(ins):
                    if t.data is not None and t.data.ndim and t.data.size == 0:
                        raise _operand_error(step.opdef, f"{step.opdef.name} does not support zero-sized tensors, "
                                                         f"but input {n} has shape {list(t.data.shape)}")
            ctx = ExecContext(type=step.opdef.type, inputs=ins, outputs=step.outputs, relaxed=relaxed,
                              state=step.state, executor=self)
            # NOTE: a kernel that crashes (any exception but OpExecutionError / DeadlineMissed) is a driver
            # bug: it propagates to the HAL boundary (driver/execution.py), which logs the traceback and
            # answers GENERAL_FAILURE; it must not pass as an operation's own expected failure
            if profile is None:
                outs = step.opdef.execute(ctx)
            else:
                t0 = time.perf_counter()
                outs = step.opdef.execute(ctx)
                profile[(g, k)] = profile.get((g, k), 0.0) + time.perf_counter() - t0
            if len(outs) != len(op.outputs):
                raise OpExecutionError(f"{step.opdef.name} produced {len(outs)} outputs, expected {len(op.outputs)}")
            for j, (i, arr) in enumerate(zip(op.outputs, outs)):
                values[i] = _check_output(step.opdef, j, step.outputs[j], arr, step.out_dtypes[j])
            for i in step.release:
                values.pop(i, None)
        result = []
        for i in sg.outputIndexes:
            if i not in values or values[i] is None:
                raise OpExecutionError(f"subgraph output operand {i} was not computed")
            result.append(values[i])
        return result
