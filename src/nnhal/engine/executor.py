"""The CPU executor: runs a prepared HAL 1.3 model over its memory pools.

It follows the reference ``CpuExecutor``: operations run in the order of the
(validated) subgraph; constants are read once when the model is prepared and
each operation's ``prepare`` runs then; at execution the subgraph inputs are
bound, each operation's ``execute`` computes its outputs (shapes known only
at run time included), temporaries are released after their last reader, and
IF / WHILE run referenced subgraphs from the execution's own stack of running
subgraphs (``OpDef.steps``: no Python recursion, so any nesting depth that
validation accepts runs; each level costs one frame object on the heap).
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
    run_prepare_jobs,
)
from nnhal.ops.extension import operand_type
from nnhal.ops.operands import constant_value as constant_value  # noqa: F401  (re-exported)
from nnhal.ops.operands import operand_info
from nnhal.ops.prepared import Deferred
from nnhal.platform import heap

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
    """One operation, resolved once at prepare into what its execution touches."""

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
    # the checks that can fail, found at prepare: run-time inputs that may be
    # omitted (model inputs) or zero-sized (dimensions not all known), and a
    # failure every execution reports (a constant omitted or zero-sized)
    may_omit: tuple = ()  # (position, operand) of inputs a request may omit
    may_be_empty: tuple = ()  # positions of inputs whose run-time shape may hold a 0
    const_omitted: Optional[str] = None  # a required constant operand without a value
    const_empty: Optional[str] = None  # a zero-sized constant the operation does not take
    checks: bool = False  # any of the above
    # per output: the declared shape when fully known (the kernel's result is
    # checked by one comparison), else None (checked against the known part)
    out_shapes: list = None  # type: ignore[assignment]
    out_operands: tuple = ()
    # ``inputs`` split for the execution loop: the list with the constants in place (None where a run-time
    # value goes), and (position, operand, type, scale, zeroPoint, channelQuant) per run-time input
    const_inputs: list = None  # type: ignore[assignment]
    run_inputs: tuple = ()


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
        # NOTE: the operands' infos only where an operation's state is prepared or resolved here (not for
        # given states: a dry run's executor, nnhal.engine.reference_check)
        infos: list = []

        def op_info(op: hal.Operation, opdef: Any) -> OpInfo:
            if not infos:
                infos.extend(operand_info(o, self.constants.get(i)) for i, o in enumerate(sg.operands))
            return OpInfo(type=opdef.type, inputs=[infos[i] for i in op.inputs], outputs=[infos[i] for i in op.outputs],
                          relaxed=relaxed, subgraphs=model.referenced)

        self.steps: list[_Step] = []
        pending: dict[int, Any] = {}
        for k, op in enumerate(sg.operations):
            opdef = registry.find(op.type)
            if opdef is None:
                raise OpExecutionError(f"operation {op.type} is not supported")
            op_deadline.poll()  # NOTE: a preparation's deadline (set by the driver) ends it between operations
            if states is not None and states[k] is not PREPARE:
                state = states[k]  # restored from the compilation cache
                if isinstance(state, Deferred):
                    try:
                        # NOTE: what the cache rebuilds from the model's constants
                        state = state.resolve(op_info(op, opdef))
                    except ValueError as e:
                        raise OpExecutionError(f"{opdef.name}: cached state: {e}") from None
            elif opdef.prepare_steps is not None:
                gen = opdef.prepare_steps(op_info(op, opdef))
                try:
                    pending[k] = (gen, next(gen))  # NOTE: finished below with the other operations' jobs
                    state = None
                except StopIteration as done:
                    state = done.value
            else:
                state = opdef.prepare(op_info(op, opdef)) if opdef.prepare else None
            specs = [OutputSpec(type=operand_type(sg.operands[i].type), dimensions=tuple(sg.operands[i].dimensions),
                                scale=sg.operands[i].scale, zero_point=sg.operands[i].zeroPoint,
                                channel_quant=sg.operands[i].extraParams.channelQuant) for i in op.outputs]
            tmpl: list = []
            for i in op.inputs:
                o = sg.operands[i]
                meta = (i, operand_type(o.type), o.scale, o.zeroPoint, o.extraParams.channelQuant)
                tmpl.append(Tensor(type=meta[1], data=self.constants[i], scale=meta[2], zero_point=meta[3],
                                   channel_quant=meta[4]) if i in self.constants else meta)
            step = _Step(op, opdef, state, specs, release.get(k, []), tmpl, [spec.dtype for spec in specs])
            self._plan_checks(step)
            self.steps.append(step)
        for k, state in run_prepare_jobs(pending).items():
            self.steps[k].state = state

    def _plan_checks(self, step: _Step) -> None:
        """Which of the generic run-time checks can fail for this step (the
        reference's, in its order: a required operand without a value, a
        zero-sized input the operation does not take), decided from lifetimes
        and declared shapes; a constant that fails fails every execution."""
        opdef, op, sg = step.opdef, step.operation, self.sg
        may_omit, may_be_empty = [], []
        omit_msg = empty_msg = None
        for n, t in enumerate(step.inputs):
            i = op.inputs[n]
            if t.__class__ is Tensor:  # a constant (or NO_VALUE) operand
                if t.data is None and n not in opdef.omittable_inputs and omit_msg is None:
                    omit_msg = f"{opdef.name} input {n} (operand {i}) is required but has no value"
                elif t.data is not None and not opdef.allow_zero_sized and t.data.ndim and t.data.size == 0 \
                        and empty_msg is None:
                    empty_msg = (f"{opdef.name} does not support zero-sized tensors, but input {n} has shape "
                                 f"{list(t.data.shape)}")
                continue
            o = sg.operands[i]
            if o.lifetime == L.SUBGRAPH_INPUT and n not in opdef.omittable_inputs:
                may_omit.append((n, i))
            dims = tuple(o.dimensions)
            # NOTE: a temporary of fully known dimensions was checked against them when computed
            if not opdef.allow_zero_sized and (o.lifetime != L.TEMPORARY_VARIABLE or not dims or 0 in dims):
                may_be_empty.append(n)
        step.may_omit, step.may_be_empty = tuple(may_omit), tuple(may_be_empty)
        step.const_omitted, step.const_empty = omit_msg, empty_msg
        step.checks = bool(may_omit or may_be_empty or omit_msg or empty_msg)
        step.out_shapes = [spec.dimensions if (spec.dimensions and 0 not in spec.dimensions) else None
                           for spec in step.outputs]
        step.out_operands = tuple(op.outputs)
        step.const_inputs = [t if t.__class__ is Tensor else None for t in step.inputs]
        step.run_inputs = tuple((n,) + t for n, t in enumerate(step.inputs) if t.__class__ is not Tensor)


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
        heap.keep_freed_memory()  # NOTE: each run's arrays reuse heap pages (nnhal/platform/heap.py)
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
            omitted_outputs: Sequence[int] = (), *, dry_run: bool = False) -> list[np.ndarray]:
        """Runs the main subgraph on ``inputs`` (one array per model input, None
        for an omitted one) and returns the outputs with their actual shapes.
        ``omitted_outputs`` are the positions of main outputs the request
        omits (hasNoValue): as in the reference, only operations that accept
        omitted operands may write them.  ``dry_run``: only whether (and where)
        the run fails matters (nnhal.engine.reference_check).  A failing run's
        exception carries ``failed_at``: (subgraph, operation) pairs, innermost
        first."""
        run = _Run(self, deadline_ns, loop_timeout_ns)
        run.dry_run = dry_run
        if omitted_outputs:
            main = self.graphs[0].sg
            run.omitted = {main.outputIndexes[k] for k in omitted_outputs if 0 <= k < len(main.outputIndexes)}
        if deadline_ns is None:
            # NOTE: no deadline to set (op_deadline.scope(None) keeps the thread's own, if any):
            # no context manager per execution
            return run.run_graph(0, inputs)
        with op_deadline.scope(deadline_ns):  # NOTE: long kernels poll it inside their outer loops
            return run.run_graph(0, inputs)


_NO_OMITTED: frozenset = frozenset()


class _Run:
    """The state of one execution (deadline, loop timeout)."""

    __slots__ = ("executor", "deadline_ns", "loop_timeout_ns", "omitted", "dry_run", "yield_fn")

    def __init__(self, executor: Executor, deadline_ns: Optional[int], loop_timeout_ns: int):
        self.executor = executor
        self.deadline_ns = deadline_ns
        self.loop_timeout_ns = int(loop_timeout_ns)
        self.omitted: frozenset | set[int] = _NO_OMITTED  # omitted main-graph outputs (operand indexes)
        # only the verdict matters (nnhal.engine.reference_check): the heaviest kernels check, then skip their
        # arithmetic (their outputs are zeros of the right shape)
        self.dry_run = False
        # NOTE: what a yield point runs on this thread, resolved once (None off the driver's scheduler)
        self.yield_fn = op_deadline.thread_yield()

    def check_deadline(self) -> None:
        if self.yield_fn is not None:
            self.yield_fn()  # NOTE: queued higher-priority work may run first (driver scheduler)
        if self.deadline_ns is not None and time.monotonic_ns() > self.deadline_ns:
            raise DeadlineMissed("the execution deadline passed")

    def run_subgraph(self, index: int, inputs: Sequence[Optional[np.ndarray]]) -> list[np.ndarray]:
        """Runs referenced subgraph ``index`` (as in SUBGRAPH operand values):
        the SubgraphRunner of an operation's plain ``execute``."""
        return self.run_graph(index + 1, inputs)

    def subgraph_output_count(self, index: int) -> int:
        """The number of outputs of referenced subgraph ``index`` (ops.base.SubgraphRunner)."""
        return len(self.executor.graphs[index + 1].sg.outputIndexes)

    def _check_operands(self, step: _Step, ins: list, omitted: Optional[set]) -> None:
        """The generic checks that can fail for ``step`` (see _Graph._plan_checks), in the reference's order."""
        opdef = step.opdef
        op = step.operation
        for n, i in step.may_omit:
            if ins[n].data is None:
                raise _operand_error(opdef, f"{opdef.name} input {n} (operand {i}) is required but has no value")
        if step.const_omitted is not None:
            raise _operand_error(opdef, step.const_omitted)
        if omitted and not opdef.omittable_inputs and not opdef.allow_omitted_outputs:
            for j, i in enumerate(op.outputs):
                if i in omitted:
                    raise _operand_error(opdef, f"{opdef.name} output {j} (operand {i}) is required "
                                                f"but the request omits it")
        for n in step.may_be_empty:
            d = ins[n].data
            if d is not None and d.ndim and d.size == 0:
                raise _operand_error(opdef, f"{opdef.name} does not support zero-sized tensors, "
                                            f"but input {n} has shape {list(d.shape)}")
        if step.const_empty is not None:
            raise _operand_error(opdef, step.const_empty)

    def run_graph(self, g: int, inputs: Sequence[Optional[np.ndarray]]) -> list[np.ndarray]:
        """Runs subgraph ``g`` (0 the main one) and every subgraph its control
        flow runs, from a stack of suspended subgraphs (:class:`_Frame`): an IF
        / WHILE step that runs a subgraph suspends its own (the operation's
        generator kept), the subgraph is pushed, run, popped and its outputs
        sent back.  NOTE: the Python stack stays a few frames deep whatever the
        nesting; a model without control flow runs straight through."""
        stack: list[_Frame] = []
        frame = self._frame(g, inputs)
        sent: Any = None
        while True:
            try:
                request = self._advance(frame, sent)
            except Exception as e:
                # NOTE: where it failed, innermost first: the failing step, then each suspended control-flow
                # step (the shared reference check names the main operation); nothing spent when nothing fails
                at = e.__dict__.setdefault("failed_at", [])
                at.append((frame.g, frame.at))
                at += [(f.g, f.k) for f in reversed(stack)]
                raise
            if request is None:
                if not stack:
                    return frame.result
                sent = frame.result
                frame = stack.pop()
                continue
            index, sub_inputs = request
            stack.append(frame)
            frame = self._frame(index + 1, sub_inputs)
            sent = None

    def _frame(self, g: int, inputs: Sequence[Optional[np.ndarray]]) -> "_Frame":
        sg = self.executor.graphs[g].sg
        if len(inputs) != len(sg.inputIndexes):
            raise OpExecutionError(f"subgraph {g} takes {len(sg.inputIndexes)} inputs, got {len(inputs)}")
        values: dict[int, Optional[np.ndarray]] = dict(self.executor.graphs[g].constants)
        for idx, v in zip(sg.inputIndexes, inputs):
            values[idx] = v
        return _Frame(g, values)

    def _advance(self, frame: "_Frame", sent: Any) -> Optional[tuple[int, list]]:
        """Runs ``frame``'s subgraph from its next step: None once it is done
        (its outputs in ``frame.result``), or the (subgraph, inputs) a
        control-flow step asks to run (the frame is suspended; ``sent``, the
        outputs of that subgraph, resumes it)."""
        g = frame.g
        graph = self.executor.graphs[g]
        values = frame.values
        steps = graph.steps
        first = frame.k
        if frame.gen is not None:
            frame.at = first
            try:
                return frame.gen.send(sent)
            except StopIteration as stop:
                frame.gen = None
                _store(steps[first], stop.value, values)
                first += 1
        relaxed = self.executor.relaxed
        # NOTE: the per-step checks of check_deadline inlined (a yield point for the scheduler's priorities,
        # then the deadline): two attribute-free tests per step when neither applies
        yield_fn = self.yield_fn
        deadline_ns = self.deadline_ns
        monotonic_ns = time.monotonic_ns
        omitted = self.omitted if g == 0 else None
        profile = self.executor.profile
        for k in range(first, len(steps)):  # NOTE: from the step to run next (0, or after a resumed one)
            frame.at = k
            step = steps[k]
            if yield_fn is not None:
                yield_fn()  # NOTE: queued higher-priority work may run first (driver scheduler)
            if deadline_ns is not None and monotonic_ns() > deadline_ns:
                raise DeadlineMissed("the execution deadline passed")
            opdef = step.opdef
            ins = step.const_inputs.copy()
            for n, i, ty, scale, zp, cq in step.run_inputs:
                try:
                    data = values[i]
                except KeyError:
                    raise OpExecutionError(f"{opdef.name}: input operand {i} has no value") from None
                ins[n] = Tensor(ty, data, scale, zp, cq)
            if step.checks or omitted:
                self._check_operands(step, ins, omitted)
            ctx = ExecContext(opdef.type, ins, step.outputs, relaxed, step.state, self)
            control = opdef.steps
            if control is not None:
                outs = None
            elif profile is None:
                outs = opdef.execute(ctx)
            else:
                t0 = time.perf_counter()
                outs = opdef.execute(ctx)
                profile[(g, k)] = profile.get((g, k), 0.0) + time.perf_counter() - t0
            # NOTE: a kernel that crashes (any exception but OpExecutionError / DeadlineMissed) is a driver
            # bug: it propagates to the HAL boundary (driver/execution.py), which logs the traceback and
            # answers GENERAL_FAILURE; it must not pass as an operation's own expected failure
            if control is not None:
                # NOTE: control flow: the first subgraph it runs suspends this frame (run_graph's stack)
                gen = control(ctx)
                try:
                    request = gen.send(None)
                except StopIteration as stop:
                    outs = stop.value
                else:
                    frame.k, frame.gen = k, gen
                    return request
            if len(outs) != len(step.out_operands):
                raise OpExecutionError(f"{opdef.name} produced {len(outs)} outputs, expected "
                                       f"{len(step.out_operands)}")
            out_dtypes = step.out_dtypes
            out_shapes = step.out_shapes
            for j, i in enumerate(step.out_operands):
                arr = outs[j]
                # NOTE: numpy's built-in dtypes are singletons: the identity test first, the comparison rarely
                if arr.__class__ is not np.ndarray or arr.shape != out_shapes[j] or \
                        (arr.dtype is not out_dtypes[j] and arr.dtype != out_dtypes[j]):
                    arr = _check_output(opdef, j, step.outputs[j], arr, out_dtypes[j])
                values[i] = arr
            for i in step.release:
                values.pop(i, None)
        result = []
        for i in graph.sg.outputIndexes:
            if i not in values or values[i] is None:
                raise OpExecutionError(f"subgraph output operand {i} was not computed")
            result.append(values[i])
        frame.result = result
        return None


class _Frame:
    """A running subgraph: its values, the step it is at, and the generator of
    the control-flow operation it is suspended in (None when not)."""

    __slots__ = ("g", "values", "k", "gen", "result", "at")

    def __init__(self, g: int, values: dict):
        self.g, self.values, self.k, self.gen = g, values, 0, None
        self.at = 0  # the step running (failed_at)
        self.result: list = []


def _store(step: _Step, outs: list, values: dict) -> None:
    """A finished step's outputs into ``values`` (a resumed control-flow step)."""
    op = step.operation
    if len(outs) != len(op.outputs):
        raise OpExecutionError(f"{step.opdef.name} produced {len(outs)} outputs, expected {len(op.outputs)}")
    for j, (i, arr) in enumerate(zip(op.outputs, outs)):
        values[i] = _check_output(step.opdef, j, step.outputs[j], arr, step.out_dtypes[j])
    for i in step.release:
        values.pop(i, None)
