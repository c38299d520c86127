"""The backend interface under the shared HAL front end (``nnhal.driver``).

The front end (``driver/device.py``'s :class:`~nnhal.driver.device.Device`,
``driver/prepared_model.py``, ``driver/execution.py``, bursts, fences,
deadlines, memory domains, caching) holds the HAL 1.3 behaviour once:
argument checks, the shared model and request validation, callbacks, the
scheduler, request pools.  A driver is that front end over a :class:`Backend`,
which only says

* who it is: ``name``, ``version_string`` (``getVersionString``; also what a
  compilation cache must have been written by), ``device_type``;
* how fast it is: :meth:`Backend.capabilities` (``getCapabilities_1_3``);
* what it supports: :meth:`Backend.supported`, one ``(bool, reason)`` per main
  operation of a model the shared validation accepted
  (``getSupportedOperations_1_3``; the front end logs every reason for a false);
* how it compiles and runs: :meth:`Backend.compile` turns the validated model
  and its constant pools into a :class:`Compiled` whose ``run`` computes the
  outputs of one execution (the front end reads the inputs from the request
  pools and writes the outputs back);
* optionally, the vendor extensions it declares: :meth:`Backend.extensions`
  (``nnhal.ops.extension.Extension`` s: names, operand types, operations as
  data; ``getSupportedExtensions`` answers from them, and the shared
  validation checks a model's extension types against them; default none);
* optionally, how a compiled model is cached: :meth:`Backend.cache_encode` /
  :meth:`Backend.cache_load` (``prepareModel_1_3`` with cache handles,
  ``prepareModelFromCache_1_3``); ``caching = False`` makes the front end ask
  for no cache files.

As Android's ``SampleDriver`` (the HAL behaviour) under ``SampleDriverFull`` /
``SampleDriverPartial`` (what is supported), and Arm NN's driver over ACL.
Errors a backend raises from ``compile`` / ``run``:
``nnhal.ops.base.OpExecutionError`` -> GENERAL_FAILURE,
``nnhal.engine.executor.BadData`` -> INVALID_ARGUMENT (run only),
``nnhal.engine.executor.DeadlineMissed`` -> MISSED_DEADLINE_*.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol, Sequence, runtime_checkable

import numpy as np

from nnhal import hal
from nnhal.ops.extension import Extension


@runtime_checkable
class Compiled(Protocol):
    """A model compiled by a backend; shared by every execution of the
    prepared model (must be safe to call from several threads at once, or
    serialize internally).  Subclass it (or have the same members):
    the front end checks what ``compile`` returns and refuses the model
    (GENERAL_FAILURE, logged) if it is not one."""

    # NOTE: True: ``run`` gets ``nnhal.driver.execution.PoolInput`` objects for the inputs in request pools and
    # copies each straight into its own buffer (``PoolInput.copy_into``); False: numpy arrays
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

    def capabilities(self) -> hal.Capabilities:
        """The measured ``Capabilities`` (called once per device, lazily)."""
        raise NotImplementedError

    def supported(self, model: hal.Model, defs: list) -> list[tuple[bool, str]]:
        """One ``(supported, reason)`` per operation of ``model.main`` (a model
        the shared validation accepted; ``defs`` its OpDefs); the reason says
        why not (empty when supported)."""
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
        alive as long as the prepared model).  Runs inside the front end's
        deadline scope (``nnhal.ops.deadline``); may raise DeadlineMissed."""
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
