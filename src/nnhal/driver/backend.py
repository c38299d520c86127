"""The backend interface: how a driver plugs into the shared HAL front end.

The front end (:class:`nnhal.driver.Device`, ``prepared_model.py``,
``execution.py``, bursts, fences, deadlines, priorities, memory domains,
caching) holds the HAL 1.3 behaviour once: argument checks, the shared model
and request validation (every model a backend sees is valid by the HAL),
callbacks, the scheduler, request pools, output shapes and sizes.  A driver
is that front end over a :class:`Backend`, which only says

* who it is: ``name`` (the device name when loaded as ``module:Class``),
  ``version_string`` (``getVersionString``; also what a compilation cache
  must have been written by), ``device_type``;
* how fast it is: :meth:`Backend.capabilities` (``getCapabilities_1_3``;
  called once per device; :func:`uniform_capabilities` builds one);
* what it supports: :meth:`Backend.supported`, one ``(bool, reason)`` per
  main operation (``getSupportedOperations_1_3`` answers the bools; the
  reasons reach ``nnhal ops``, the conformance reports and the runtime's
  placement through ``hal.INnhalDevice``, in process and through a service);
* how it compiles and runs: :meth:`Backend.compile` turns the model and its
  constant pools into a :class:`Compiled` whose ``run`` computes the outputs
  of one execution (the front end reads the inputs from the request pools,
  checks the output sizes and writes the outputs back).  The front end first
  runs the reference's execution-time checks once
  (:func:`nnhal.engine.reference_check.reference_rejection`): a model the
  reference rejects at every execution never reaches ``compile``, its
  executions get the reference's status (``reference_checked = False`` opts
  out: the reference itself).

Threading: ``supported`` and ``compile`` may be called from several threads
at once; a Compiled's ``run`` is called concurrently by every execution of
the prepared model, so it keeps no per-execution state in ``self``.

Errors (raise them; the front end turns them into the HAL's statuses and
never lets an exception reach the client):

* from ``compile``: :class:`OpExecutionError` -> GENERAL_FAILURE (logged with
  your message), ``DeadlineMissed`` -> MISSED_DEADLINE_*, anything else ->
  GENERAL_FAILURE with the traceback logged;
* from ``run``: :class:`OpExecutionError` -> GENERAL_FAILURE, ``BadData`` ->
  INVALID_ARGUMENT (the request's data cannot be computed on),
  ``DeadlineMissed`` -> MISSED_DEADLINE_*, anything else -> GENERAL_FAILURE;
* from ``supported``: anything -> every operation unsupported, the
  exception's message as the reason.

Optionally, vendor extensions: :meth:`Backend.extensions` returns the
``nnhal.ops.extension.Extension`` s it implements (names, operand types,
operations as data; default none); ``getSupportedExtensions`` answers from
them and the shared validation checks a model's extension types against them
(docs/extensions.md).

Optionally, the compilation cache: ``caching = True`` with
:meth:`Backend.cache_encode` / :meth:`Backend.cache_load` (``nnhal.driver.cache``
has the protocol: ``encode_opaque`` / ``load_opaque`` authenticate any bytes
you choose to keep; the sample backend's own format is there too).

As Android's ``SampleDriver`` (the HAL behaviour) under ``SampleDriverFull`` /
``SampleDriverPartial`` (what is supported), and Arm NN's driver over ACL.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol, Sequence, runtime_checkable

import numpy as np

from nnhal import hal
from nnhal.engine.executor import BadData, DeadlineMissed
from nnhal.ops.base import NUMPY_DTYPE, OpExecutionError
from nnhal.ops.extension import Extension
from nnhal.ops.operands import constant_value

__all__ = ["Backend", "BadData", "Compiled", "DeadlineMissed", "NUMPY_DTYPE", "OpExecutionError", "constant_value",
           "uniform_capabilities"]


def uniform_capabilities(exec_time: float = 1.0, power_usage: float = 1.0) -> hal.Capabilities:
    """Capabilities with the same figures for every operand type, relaxed
    float and control flow (1.0 = as fast as the CPU reference for float32):
    for a driver that has not measured itself yet."""
    info = hal.PerformanceInfo(execTime=float(exec_time), powerUsage=float(power_usage))
    perf = [hal.OperandPerformance(type=t, info=info) for t in sorted(hal.OperandType, key=int)
            if t != hal.OperandType.SUBGRAPH]
    return hal.Capabilities(relaxedFloat32toFloat16PerformanceScalar=info,
                            relaxedFloat32toFloat16PerformanceTensor=info, operandPerformance=perf,
                            ifPerformance=info, whilePerformance=info)


@runtime_checkable
class Compiled(Protocol):
    """A model compiled by a backend; shared by every execution of the
    prepared model (must be safe to call from several threads at once, or
    serialize internally).  Subclass it (or have the same members):
    the front end checks what ``compile`` returns and refuses the model
    (GENERAL_FAILURE, logged) if it is not one."""

    # NOTE: True: ``run`` gets, for the inputs in request pools, numpy arrays over the bytes of the mapped ones
    # (valid during ``run`` only, never written) and ``nnhal.driver.execution.PoolInput`` objects for the
    # others, and copies each straight into its own buffer (``PoolInput.read_into``); False: numpy arrays
    # of their own
    reads_inputs: bool = False

    def run(self, inputs: Sequence[Optional[np.ndarray]], deadline_ns: Optional[int] = None,
            loop_timeout_ns: int = ..., omitted: Sequence[int] = ()) -> list[np.ndarray]:
        """The main subgraph's outputs (one array each, in order, of the
        actual shapes) for ``inputs`` (None: an omitted optional input);
        ``omitted``: output indexes the request leaves without a location."""
        ...


class Backend:
    """Base class of a backend (subclass and override).  The defaults: a CPU
    device without caching."""

    name: str = "backend"
    version_string: str = "nnhal backend"
    device_type: hal.DeviceType = hal.DeviceType.CPU
    caching: bool = False  # NOTE: True only with cache_encode / cache_load implemented
    # The front end runs the reference's execution-time checks before compile
    # (nnhal.engine.reference_check): a model the reference rejects at every execution
    # is never compiled, its executions are the reference's.  False only for the
    # reference itself (it fails such executions on its own).
    reference_checked: bool = True
    # True when one compiled model (compile's result) serves any number of prepared models at once (its
    # executions share only read-only state): the front end then compiles an equal model prepared again
    # once (nnhal.driver.prepared_states)
    shares_compiled: bool = False
    # NOTE: True when capabilities() times something: the figures are then measured once per machine
    # and driver version and kept (nnhal.driver.capcache; ``nnhal devices --remeasure`` measures again)
    measured_capabilities: bool = False

    def capabilities(self) -> hal.Capabilities:
        """The measured ``Capabilities`` (called once per device, lazily).
        Default: :func:`uniform_capabilities` (as fast as the reference)."""
        return uniform_capabilities()

    def supported(self, model: hal.Model, defs: list) -> list[tuple[bool, str]]:
        """One ``(supported, reason)`` per operation of ``model.main`` (a model
        the shared validation accepted; ``defs``: the reference's operation
        declarations, ``nnhal.ops.base.OpDef``, one per operation, None for an
        OEM / extension type); the reason says why not (empty when supported).
        IF / WHILE are supported only with every operation of their
        subgraphs (``model.referenced``)."""
        raise NotImplementedError

    def extensions(self) -> Sequence[Extension]:
        """The vendor extensions this backend implements (called once per
        device).  A model's operands and operations of these extensions reach
        ``supported`` / ``compile`` with their types resolved
        (``nnhal.ops.extension.ExtensionOperandType`` /
        ``ExtensionOperationType``: ints that carry the declaration)."""
        return ()

    def compile(self, model: hal.Model, pool_views: list, deadline_ns: Optional[int]) -> Compiled:
        """Compiles a validated model whose operations are all supported.
        ``pool_views``: the model pools' bytes (the driver's private copies,
        alive as long as the prepared model): :func:`constant_value` reads a
        CONSTANT_COPY (``model.operandValues``) or CONSTANT_REFERENCE operand
        from them.  Runs inside the front end's deadline scope
        (``nnhal.ops.deadline``); may raise DeadlineMissed."""
        raise NotImplementedError

    # ---- compilation cache hooks (driver/cache.py)
    def cache_encode(self, model: hal.Model, pool_views: list, compiled: Compiled, hal_version: int, priority: int,
                     key: bytes, token: bytes) -> tuple[bytes, list, int]:
        """(model cache bytes, data cache chunks, data size), authenticated
        with ``key`` for ``version_string`` and ``token``."""
        raise NotImplementedError

    def cache_load(self, model_fd: int, data_fd: int, key: bytes, token: bytes) -> Any:
        """A ``driver.cache.Restored``-like object (``model``, ``pools``,
        ``executor`` = the Compiled, ``hal_version``, ``priority``) from
        authenticated files; raises ``driver.cache.CacheError``."""
        raise NotImplementedError
