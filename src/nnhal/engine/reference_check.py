"""The reference's execution-time checks, run once at preparation for any backend.

The CPU reference (``sample-all``: :class:`nnhal.executor.Executor` over the
operations of :mod:`nnhal.ops`) checks most operation rules when it runs an
operation, as Android's ``CpuExecutor`` does in each operation's ``prepare``:
the output shape is computed from the actual inputs and a contradiction fails
the execution with GENERAL_FAILURE (a DEPTHWISE_CONV_2D filter whose first
dimension is not 1, a STRIDED_SLICE shrinking an axis of size other than 1 or
with a negative stride, ...).  Model validation (:mod:`nnhal.validation`)
cannot see those rules.  A backend lowering the model to another engine would
compute *something* for such a model: the front end must not let it.

:func:`reference_rejection` is the one mechanism: it dry-runs the model on the
reference executor (``Executor.run(dry_run=True)``: the same operations and
checks; the operations' prepare steps and the convolutions' arithmetic
skipped, which measured the same verdict as a full run on 11350 vector models
and mutants) on inputs of the declared shapes (zeros), and says which main
operation the reference rejects *whatever the request holds*.  A failure
counts only when it cannot depend on the request:

* every main input has fully specified dimensions (a request can then give no
  other shape; otherwise nothing is concluded);
* the failing operation's inputs all have shapes fixed by the model, and its
  *parameter-like* inputs (scalars, TENSOR_INT32, TENSOR_BOOL8: begin / end /
  strides, shapes, paddings, permutations, axes, conditions...) values fixed by
  the model (constants, or computed from constants only);
* the operation is not one whose result depends on data values beyond those
  (detection operations, control flow), unless all its inputs are fixed;
* no model input feeds it at a position the operation lets a request omit.

A shape is fixed by the model when it is a constant's, a fully specified main
input's, or an output of an operation meeting the same conditions.  The front
end (``nnhal.driver.device``) runs this before ``Backend.compile`` for every
backend that is not the reference itself (``Backend.reference_checked``); a
rejected model's executions are then the reference's (which fail them with
its status), so such a backend answers exactly as ``sample-all`` does.  Where
the request decides (its input shapes, parameters given as inputs, omitted
inputs), a :class:`Gate` runs the check at the first execution of each such
key; an operation whose verdict depends on data values no key holds is one the
front end reports unsupported for such a backend (:func:`unheld_operations`).
``python -m nnhal.tools.status_diff`` measures the result on mutants of the
vector models.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional, Sequence

import numpy as np

from nnhal import hal
from nnhal.engine.executor import DeadlineMissed, Executor
from nnhal.ops import registry
from nnhal.ops.base import NUMPY_DTYPE, OpExecutionError

log = logging.getLogger("nnhal.driver")

T = hal.OperandType
L = hal.OperandLifeTime
Op = hal.OperationType

# operand types whose values, not only shapes, decide an operation's output shape or failure
PARAMETER_TYPES = frozenset({T.INT32, T.UINT32, T.FLOAT32, T.FLOAT16, T.BOOL, T.TENSOR_INT32, T.TENSOR_BOOL8,
                             T.SUBGRAPH})
# the types of the inputs whose values can decide an operation's output shapes: TENSOR_BOOL8 tensors are data
# there (SELECT's condition, LOGICAL_*'s operands), but for IF's condition (_certain)
SHAPE_PARAMETER_TYPES = PARAMETER_TYPES - {T.TENSOR_BOOL8}
# operations whose output shapes or failures depend on the values of their data tensors
# (IF: unless its branches' operations are certain given what it passes them)
VALUE_DEPENDENT = frozenset({Op.IF, Op.WHILE, Op.BOX_WITH_NMS_LIMIT, Op.GENERATE_PROPOSALS,
                             Op.DETECTION_POSTPROCESSING, Op.ROI_ALIGN, Op.ROI_POOLING,
                             Op.AXIS_ALIGNED_BBOX_TRANSFORM, Op.HEATMAP_MAX_KEYPOINT})
# a WHILE of the dry run that has not ended by then is not judged (its failure would depend on the loop)
DRY_RUN_LOOP_TIMEOUT_NS = 100_000_000
_CONST = (L.CONSTANT_COPY, L.CONSTANT_REFERENCE, L.SUBGRAPH, L.NO_VALUE)
_MAX_DEPTH = 16


@dataclass
class Rejection:
    """The reference rejects every execution of the model at main operation
    ``operation`` with ``message``; ``executor`` is the prepared reference
    (executions of the model are its executions)."""

    operation: int
    message: str
    executor: Executor


def _fully_specified(o: hal.Operand) -> bool:
    is_tensor = hal.OperandType(o.type).name.startswith("TENSOR")
    return (bool(o.dimensions) or not is_tensor) and all(int(d) > 0 for d in o.dimensions)


def certain_operations(model: hal.Model, at_execution: bool = False) -> list[bool]:
    """Per main operation: whether the reference's verdict on it, from a run on
    inputs of the declared shapes, holds for every request (module docstring).
    ``at_execution``: from a run on the request's input shapes, parameter-like
    input values and omissions (its data values zeros) instead, whether it
    holds for every request with those."""
    sg = model.main
    values = [at_execution and sg.operands[i].type in PARAMETER_TYPES for i in sg.inputIndexes]
    shapes = [at_execution or _fully_specified(sg.operands[i]) for i in sg.inputIndexes]
    return _certain(model, sg, values, shapes, omissible=not at_execution, depth=0)


def _certain(model: hal.Model, sg: hal.Subgraph, input_values: list[bool], input_shapes: list[bool],
             omissible: bool, depth: int, param_types: frozenset = PARAMETER_TYPES) -> list[bool]:
    """certain_operations of one subgraph, given which of its inputs have values / shapes fixed; an input of
    one of ``param_types`` must have its value fixed too."""
    value_fixed = [o.lifetime in _CONST for o in sg.operands]
    shape_fixed = list(value_fixed)
    for k, i in enumerate(sg.inputIndexes):
        value_fixed[i], shape_fixed[i] = input_values[k], input_shapes[k]
    inputs = set(sg.inputIndexes) if omissible else set()  # NOTE: inputs a request may omit
    is_param = [o.type in param_types for o in sg.operands]
    for op in sg.operations:
        if op.type == Op.IF:
            is_param[op.inputs[0]] = True  # NOTE: the branch it takes decides its verdict and result shapes
    out = []
    for op in sg.operations:
        opdef = registry.find(op.type)
        omittable = opdef.omittable_inputs if opdef is not None else frozenset()
        all_values = all(value_fixed[i] for i in op.inputs)
        params = all(value_fixed[i] for i in op.inputs if is_param[i])
        shapes = all(shape_fixed[i] for i in op.inputs)
        certain = opdef is not None and not any(i in inputs for k, i in enumerate(op.inputs) if k in omittable) and (
            all_values or (shapes and params and op.type not in VALUE_DEPENDENT))
        if not certain and op.type == Op.IF and opdef is not None and shapes and params and depth < _MAX_DEPTH:
            # NOTE: the condition is known: each branch is certain when all its operations are, given the
            # values and shapes the IF passes it
            passed = op.inputs[3:]
            certain = all(all(_certain(model, model.referenced[int(sg.operands[b].location.offset)],
                                       [value_fixed[i] for i in passed], [shape_fixed[i] for i in passed],
                                       omissible=False, depth=depth + 1, param_types=param_types))
                          for b in op.inputs[1:3] if sg.operands[b].lifetime == L.SUBGRAPH)
        out.append(certain)
        for i in op.outputs:
            value_fixed[i] = all_values
            shape_fixed[i] = certain
    return out


def dry_run_inputs(model: hal.Model) -> Optional[list[np.ndarray]]:
    """Zeros of each main input's declared shape, or None when some input's
    shape is left to the request."""
    xs = []
    for i in model.main.inputIndexes:
        o = model.main.operands[i]
        if not _fully_specified(o) or T(o.type) not in NUMPY_DTYPE:
            return None
        xs.append(np.zeros(tuple(int(d) for d in o.dimensions), NUMPY_DTYPE[T(o.type)]))
    return xs


def dry_executor(model: hal.Model, pool_views: Sequence[Any]) -> Executor:
    """The reference executor for dry runs: the operations' prepare steps skipped (their states are
    what executions reuse; each execute checks and computes without one), cheap to build."""
    return Executor(model, pool_views, states=[[None] * len(sg.operations) for sg in (model.main, *model.referenced)])


def fixed_shapes(model: hal.Model, pool_views: Sequence[Any]) -> dict[int, tuple[int, ...]]:
    """The shape every execution gives each main operand an operation computes, where the model fixes it (the
    operation is certain as the module docstring says, with the values of TENSOR_BOOL8 data tensors left to the
    request: SHAPE_PARAMETER_TYPES), whatever its declared dimensions: from a dry run of the reference on zeros
    of the declared input shapes, those operands exposed as outputs.  Empty when a main
    input's shape is left to the request, the model is not the reference's, or the dry run fails (the
    reference then rejects the model, or its verdict depends on the request).  What a backend lowering the
    model to an engine of static shapes gives an operand the model declares of unknown rank or size."""
    if not _checkable(model):
        return {}
    xs = dry_run_inputs(model)
    if xs is None:
        return {}
    main = model.main
    fixed = _certain(model, main, [False] * len(main.inputIndexes), [True] * len(main.inputIndexes), omissible=True,
                     depth=0, param_types=SHAPE_PARAMETER_TYPES)
    computed = [i for op, shape_fixed in zip(main.operations, fixed) if shape_fixed for i in op.outputs]
    if not computed:
        return {}
    exposed = replace(model, main=replace(main, outputIndexes=[*main.outputIndexes, *computed]))
    try:
        outs = dry_executor(exposed, pool_views).run(xs, None, DRY_RUN_LOOP_TIMEOUT_NS, dry_run=True)
    except Exception:  # noqa: BLE001  # NOTE: a failure the front end's own check answers for (held_to_reference)
        log.debug("fixed shapes: the dry run failed", exc_info=True)
        return {}
    return {i: tuple(int(d) for d in np.shape(v)) for i, v in zip(computed, outs[len(main.outputIndexes):])}


def _rejection(executor: Executor, xs: Sequence[Optional[np.ndarray]], certain: list[bool],
               deadline_ns: Optional[int]) -> Optional[tuple[int, str]]:
    """Dry-runs the reference on ``xs``: (the main operation it rejects, why), if ``certain`` says
    the failure holds."""
    try:
        executor.run(xs, deadline_ns, DRY_RUN_LOOP_TIMEOUT_NS, dry_run=True)
    except DeadlineMissed:
        if deadline_ns is not None and time.monotonic_ns() >= deadline_ns:
            raise
        return None  # NOTE: the dry run's loop timeout: a WHILE whose verdict depends on its loop
    except Exception as e:  # noqa: BLE001
        # NOTE: OpExecutionError, or a reference kernel crashing (a bug: the reference's executions answer
        # GENERAL_FAILURE for it all the same, at the HAL boundary)
        main = [k for g, k in getattr(e, "failed_at", ()) if g == 0]
        if not main:
            log.debug("reference check: the dry run failed outside any operation", exc_info=True)
            return None
        k = main[-1]
        if not certain[k]:
            log.debug("reference check: operation %d fails on zeros (%s), but that may depend on the request", k, e)
            return None
        if not isinstance(e, OpExecutionError):
            log.error("reference check: the reference crashed at operation %d", k, exc_info=True)
        return k, str(e) if isinstance(e, OpExecutionError) else f"{type(e).__name__}: {e}"
    return None


def _checkable(model: hal.Model) -> bool:
    return all(registry.find(op.type) is not None for sg in (model.main, *model.referenced) for op in sg.operations)


def reference_rejection(model: hal.Model, pool_views: Sequence[Any], deadline_ns: Optional[int] = None,
                        certain: Optional[list[bool]] = None) -> Optional[Rejection]:
    """The main operation the reference rejects at every execution of the
    validated ``model`` (its constants in ``pool_views``), or None (it accepts
    the model, or its verdict could depend on the request).  ``certain``:
    ``certain_operations(model)`` where the caller has it.

    Raises DeadlineMissed when ``deadline_ns`` passes."""
    if not _checkable(model):
        return None  # NOTE: not the reference's (OEM / extension): nothing it could say
    xs = dry_run_inputs(model)
    if xs is None:
        return None
    if certain is None:
        certain = certain_operations(model)
    if not any(certain):
        return None  # NOTE: decided without a run: a failure counts only at a certain operation
    found = _rejection(dry_executor(model, pool_views), xs, certain, deadline_ns)
    # NOTE: executions are the prepared reference's (the operations' prepare steps, as sample-all's compile)
    return None if found is None else Rejection(*found, Executor(model, pool_views))


def _array(x: Any) -> Optional[np.ndarray]:
    return x if x is None or x.__class__ is np.ndarray else x.array()  # NOTE: a PoolInput reads its bytes


def _own_array(x: Any) -> Optional[np.ndarray]:
    """:func:`_array`, an array of its own: an input of a reads_inputs backend may be an array over a request
    pool's bytes (nnhal.driver.execution), which the reference's outputs must not alias."""
    return x.copy() if x.__class__ is np.ndarray else _array(x)


class Gate:
    """The reference's checks at execution, for a model whose verdict the
    preparation could not settle (input shapes, parameter-like inputs or
    omissions given by the request): each execution's inputs make a key (the
    shapes, omissions and parameter-like values); the first execution with a
    key runs the reference on them (data values zeros), later ones look the
    verdict up.  Verdicts of other data values are no concern: the operations
    whose verdict depends on them are not certain, and :func:`execution_gate`
    makes no Gate for a model with such an operation."""

    MAX_KEYS = 64

    def __init__(self, model: hal.Model, pool_views: Sequence[Any]):
        self.model = model
        self.views = pool_views  # NOTE: the prepared model's pools: alive as long as it
        main = model.main
        self.params = frozenset(k for k, i in enumerate(main.inputIndexes)
                                if main.operands[i].type in PARAMETER_TYPES)
        self.certain = certain_operations(model, at_execution=True)
        self.verdicts: dict[tuple, Optional[Rejection]] = {}
        self._executor: Optional[Executor] = None  # NOTE: for dry runs
        self._prepared: Optional[Executor] = None  # NOTE: for the executions the reference rejects

    def check(self, inputs: Sequence[Any], deadline_ns: Optional[int] = None) -> Optional[Rejection]:
        key = tuple(None if x is None else (x.shape, _array(x).tobytes() if k in self.params else b"")
                    for k, x in enumerate(inputs))
        try:
            return self.verdicts[key]
        except KeyError:
            pass
        if self._executor is None:
            self._executor = dry_executor(self.model, self.views)
        xs = [None if x is None else _array(x) if k in self.params else np.zeros(x.shape, x.dtype)
              for k, x in enumerate(inputs)]
        found = _rejection(self._executor, xs, self.certain, deadline_ns)
        verdict = None
        if found is not None:
            if self._prepared is None:
                self._prepared = Executor(self.model, self.views)
            verdict = Rejection(*found, self._prepared)
        if len(self.verdicts) >= self.MAX_KEYS:
            self.verdicts.clear()
        self.verdicts[key] = verdict
        return verdict


class GatedCompiled:
    """A backend's compiled model behind a :class:`Gate`: an execution the
    reference rejects is the reference's (which fails it with its status)."""

    def __init__(self, inner: Any, gate: Gate):
        self.inner = inner
        self.gate = gate
        self.reads_inputs = getattr(inner, "reads_inputs", False)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # NOTE: the backend's own attributes (flatbuffer...)

    def run(self, inputs: Sequence[Any], deadline_ns: Optional[int] = None,
            loop_timeout_ns: int = hal.LoopTimeoutDurationNs.DEFAULT, omitted: Sequence[int] = ()) -> list:
        rejection = self.gate.check(inputs, deadline_ns)
        if rejection is not None:
            return rejection.executor.run(list(map(_own_array, inputs)), deadline_ns, loop_timeout_ns, omitted)
        return self.inner.run(inputs, deadline_ns, loop_timeout_ns, omitted)


def execution_gate(model: hal.Model, pool_views: Sequence[Any],
                   certain: Optional[list[bool]] = None) -> Optional[Gate]:
    """A :class:`Gate` for a validated model the preparation's check
    (:func:`reference_rejection`) accepted, None when its verdict holds for
    every request.  Raises Unchecked when the reference's verdict on some
    operation could depend on data values no key holds (a parameter computed
    from data).  ``certain``: ``certain_operations(model)`` where the caller has it."""
    if not _checkable(model):
        return None
    if dry_run_inputs(model) is not None and all(certain_operations(model) if certain is None else certain):
        return None
    if not all(certain_operations(model, at_execution=True)):
        bad = certain_operations(model, at_execution=True).index(False)
        raise Unchecked(f"operation {bad} ({hal.OperationType(model.main.operations[bad].type).name}): the "
                        f"reference's checks depend on data values (a shape or parameter computed from data)")
    return Gate(model, pool_views)


def unheld_operations(model: hal.Model) -> list[str]:
    """Per main operation of a validated model: why no backend can be held to
    the reference's verdict on it ("" where one can): the verdict depends on
    data values no execution-time key holds.  The front end refuses those
    operations for every backend but the reference (getSupportedOperations)."""
    if not _checkable(model):
        return [""] * len(model.main.operations)
    return ["" if ok else "the reference's checks of it depend on data values (a shape or parameter computed "
                          "from data, or a detection / loop operation on them): a backend cannot be held to them"
            for ok in certain_operations(model, at_execution=True)]


class Unchecked(Exception):
    """The reference's verdict on a model cannot be known before its data is."""


def held_to_reference(model: hal.Model, pool_views: Sequence[Any], deadline_ns: Optional[int],
                      compile: Callable[[], Any]) -> tuple[Any, bool]:
    """(what executes the validated ``model``, whether a compilation cache may
    keep it): the reference's prepared executor when the reference rejects
    every execution (:func:`reference_rejection`), else ``compile()``'s result,
    behind a :class:`Gate` when the request decides the reference's verdict.
    Raises what the reference's preparation raises, DeadlineMissed, and
    Unchecked (module docstring); the front end answers GENERAL_FAILURE /
    MISSED_DEADLINE_* for them."""
    certain = certain_operations(model) if _checkable(model) else None
    rejection = reference_rejection(model, pool_views, deadline_ns, certain)
    if rejection is not None:
        log.info("the reference rejects every execution at operation %d (%s): executions are the reference's",
                 rejection.operation, rejection.message)
        return rejection.executor, False
    gate = execution_gate(model, pool_views, certain)
    compiled = compile()
    return (compiled, True) if gate is None else (GatedCompiled(compiled, gate), False)
