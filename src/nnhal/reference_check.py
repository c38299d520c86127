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

:func:`reference_rejection` is the one mechanism: it prepares the model on the
reference executor and runs it once on inputs of the declared shapes (zeros),
and says which main operation the reference rejects *whatever the request
holds*.  A failure counts only when it cannot depend on the request:

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
its status), so such a backend answers exactly as ``sample-all`` does.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from nnhal import hal
from nnhal.executor import DeadlineMissed, Executor
from nnhal.ops import registry
from nnhal.ops.base import NUMPY_DTYPE, OpExecutionError

log = logging.getLogger("nnhal.driver")

T = hal.OperandType
L = hal.OperandLifeTime
Op = hal.OperationType

# operand types whose values, not only shapes, decide an operation's output shape or failure
PARAMETER_TYPES = frozenset({T.INT32, T.UINT32, T.FLOAT32, T.FLOAT16, T.BOOL, T.TENSOR_INT32, T.TENSOR_BOOL8,
                             T.SUBGRAPH})
# operations whose output shapes or failures depend on the values of their data tensors
VALUE_DEPENDENT = frozenset({Op.IF, Op.WHILE, Op.BOX_WITH_NMS_LIMIT, Op.GENERATE_PROPOSALS,
                             Op.DETECTION_POSTPROCESSING, Op.ROI_ALIGN, Op.ROI_POOLING,
                             Op.AXIS_ALIGNED_BBOX_TRANSFORM, Op.HEATMAP_MAX_KEYPOINT, Op.HASHTABLE_LOOKUP,
                             Op.EMBEDDING_LOOKUP, Op.LSH_PROJECTION, Op.RANDOM_MULTINOMIAL})
# a WHILE of the dry run that has not ended by then is not judged (its failure would depend on the loop)
DRY_RUN_LOOP_TIMEOUT_NS = 100_000_000
_CONST = (L.CONSTANT_COPY, L.CONSTANT_REFERENCE, L.SUBGRAPH, L.NO_VALUE)


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


def certain_operations(model: hal.Model) -> list[bool]:
    """Per main operation: whether the reference's verdict on it, from a run on
    inputs of the declared shapes, holds for every request (module docstring)."""
    sg = model.main
    value_fixed = [o.lifetime in _CONST for o in sg.operands]
    shape_fixed = [o.lifetime in _CONST or (o.lifetime == L.SUBGRAPH_INPUT and _fully_specified(o))
                   for o in sg.operands]
    inputs = set(sg.inputIndexes)
    out = []
    for op in sg.operations:
        opdef = registry.find(op.type)
        omittable = opdef.omittable_inputs if opdef is not None else frozenset()
        all_values = all(value_fixed[i] for i in op.inputs)
        params = all(value_fixed[i] for i in op.inputs if sg.operands[i].type in PARAMETER_TYPES)
        shapes = all(shape_fixed[i] for i in op.inputs)
        omissible = any(i in inputs for k, i in enumerate(op.inputs) if k in omittable)
        certain = opdef is not None and not omissible and (
            all_values or (shapes and params and op.type not in VALUE_DEPENDENT))
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


def reference_rejection(model: hal.Model, pool_views: Sequence[Any],
                        deadline_ns: Optional[int] = None) -> Optional[Rejection]:
    """The main operation the reference rejects at every execution of the
    validated ``model`` (its constants in ``pool_views``), or None (it accepts
    the model, or its verdict could depend on the request).

    Raises what the reference's own preparation raises (OpExecutionError: the
    reference fails the preparation), and DeadlineMissed when ``deadline_ns``
    passes."""
    if any(registry.find(op.type) is None for sg in (model.main, *model.referenced) for op in sg.operations):
        return None  # NOTE: not the reference's (OEM / extension): nothing it could say
    xs = dry_run_inputs(model)
    if xs is None:
        return None
    executor = Executor(model, pool_views)  # NOTE: the reference's prepare steps, as sample-all's compile
    try:
        executor.run(xs, deadline_ns, DRY_RUN_LOOP_TIMEOUT_NS)
    except DeadlineMissed:
        if deadline_ns is not None and time.monotonic_ns() >= deadline_ns:
            raise
        return None  # NOTE: the dry run's loop timeout: a WHILE whose verdict depends on its loop
    except OpExecutionError as e:
        main = [k for g, k in getattr(e, "failed_at", ()) if g == 0]
        if not main:
            return None
        k = main[-1]
        if not certain_operations(model)[k]:
            log.debug("reference check: operation %d fails on zeros (%s), but that may depend on the request", k, e)
            return None
        return Rejection(k, str(e), executor)
    except Exception:  # noqa: BLE001  # NOTE: a reference kernel crashing on zeros: no verdict from it
        log.debug("reference check: the dry run raised", exc_info=True)
        return None
    return None
