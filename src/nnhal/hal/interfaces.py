"""The HAL interfaces (``IDevice``, ``IPreparedModel``, ``IBuffer``, the
callbacks and the burst interfaces) of versions 1.0-1.3, with every method
under its HAL name and parameter order.

``generates (a, b)`` is returned as a tuple ``(a, b)``; a single generated
value is returned bare.  ``ErrorStatus`` is returned, never raised.  The
abstract classes here are what a driver implements and what a client calls;
:class:`PreparedModelCallback` and :class:`ExecutionCallback` are ready
callback implementations with ``wait()``.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Optional

from nnhal.hal.types import ErrorStatus, OutputShape, Timing

log = logging.getLogger("nnhal.hal")


class IDevice:
    """``android.hardware.neuralnetworks@1.3::IDevice`` (and 1.0-1.2 methods)."""

    # @1.0
    def getCapabilities(self) -> tuple:  # (ErrorStatus, v1_0.Capabilities)
        raise NotImplementedError

    def getSupportedOperations(self, model: Any) -> tuple:  # (ErrorStatus, list[bool])
        raise NotImplementedError

    def prepareModel(self, model: Any, callback: "IPreparedModelCallback") -> ErrorStatus:
        raise NotImplementedError

    def getStatus(self) -> Any:  # DeviceStatus
        raise NotImplementedError

    # @1.1
    def getCapabilities_1_1(self) -> tuple:
        raise NotImplementedError

    def getSupportedOperations_1_1(self, model: Any) -> tuple:
        raise NotImplementedError

    def prepareModel_1_1(self, model: Any, preference: Any, callback: "IPreparedModelCallback") -> ErrorStatus:
        raise NotImplementedError

    # @1.2
    def getVersionString(self) -> tuple:  # (ErrorStatus, str)
        raise NotImplementedError

    def getType(self) -> tuple:  # (ErrorStatus, DeviceType)
        raise NotImplementedError

    def getCapabilities_1_2(self) -> tuple:
        raise NotImplementedError

    def getSupportedExtensions(self) -> tuple:  # (ErrorStatus, list[Extension])
        raise NotImplementedError

    def getSupportedOperations_1_2(self, model: Any) -> tuple:
        raise NotImplementedError

    def getNumberOfCacheFilesNeeded(self) -> tuple:  # (ErrorStatus, numModelCache, numDataCache)
        raise NotImplementedError

    def prepareModel_1_2(self, model: Any, preference: Any, modelCache: Any = None, dataCache: Any = None,
                         token: Any = None, callback: Any = None) -> ErrorStatus:
        """The final 1.2 form ``(model, preference, modelCache, dataCache, token,
        callback)``, or the draft's (before caching) ``(model, preference,
        callback)``: see :func:`prepare_model_1_2_args`."""
        raise NotImplementedError

    def prepareModelFromCache(self, modelCache: list, dataCache: list, token: bytes,
                              callback: "IPreparedModelCallback") -> ErrorStatus:
        raise NotImplementedError

    # the draft 1.2 caching interface (commit "Implement NN HAL for compilation caching")
    def isCachingSupported(self) -> tuple:  # (ErrorStatus, bool supported)
        raise NotImplementedError

    # @1.3
    def getCapabilities_1_3(self) -> tuple:  # (ErrorStatus, Capabilities)
        raise NotImplementedError

    def getSupportedOperations_1_3(self, model: Any) -> tuple:  # (ErrorStatus, list[bool])
        raise NotImplementedError

    def prepareModel_1_3(self, model: Any, preference: Any, priority: Any, deadline: Any, modelCache: list,
                         dataCache: list, token: bytes, callback: "IPreparedModelCallback") -> ErrorStatus:
        raise NotImplementedError

    def prepareModelFromCache_1_3(self, deadline: Any, modelCache: list, dataCache: list, token: bytes,
                                  callback: "IPreparedModelCallback") -> ErrorStatus:
        raise NotImplementedError

    def allocate(self, desc: Any, preparedModels: list, inputRoles: list, outputRoles: list) -> tuple:
        """-> (ErrorStatus, IBuffer or None, token: int)"""
        raise NotImplementedError


class INnhalDevice:
    """nnhal's own addition beside ``IDevice``: NOT part of the Android HAL
    (whose answers stay exactly the HAL's).  A device that implements it
    (every nnhal front end, in process and through ``nnhal serve``) says why
    it refuses an operation, which ``getSupportedOperations_1_3`` cannot."""

    def nnhal_getSupportedOperationsReasons(self, model: Any) -> tuple:  # (ErrorStatus, list[str])
        """For a canonical ``model`` (``nnhal.hal``: HIDL 1.3's types, and the
        operations of the AIDL versions too): ``(NONE, reasons)`` with one string
        per main operation, empty where the device's ``getSupportedOperations``
        (of either face) answers true,
        else the driver's reason; ``(INVALID_ARGUMENT, [])`` for an invalid
        model (as ``getSupportedOperations_1_3``)."""
        raise NotImplementedError
def prepare_model_1_2_args(modelCache: Any, dataCache: Any, token: Any, callback: Any) -> tuple:
    """``(modelCache, dataCache, token, callback)`` of a ``prepareModel_1_2``
    call in either of its forms: the final six-argument one, or the draft's
    ``prepareModel_1_2(Model model, ExecutionPreference preference,
    IPreparedModelCallback callback)`` (the seed IDevice 1.2 before caching),
    which is the final form with no cache handles and a zero token."""
    if dataCache is None and token is None:
        if callback is None and modelCache is not None and not isinstance(modelCache, (list, tuple)):
            return [], [], bytes(32), modelCache  # the draft, positionally: the callback third
        if callback is not None and modelCache is None:
            return [], [], bytes(32), callback  # the draft, callback= by keyword
    return modelCache, dataCache, token, callback


class IPreparedModel:
    """``android.hardware.neuralnetworks@1.3::IPreparedModel`` (and 1.0-1.2 methods)."""

    # @1.0
    def execute(self, request: Any, callback: "IExecutionCallback") -> ErrorStatus:
        raise NotImplementedError

    # @1.2
    def execute_1_2(self, request: Any, measure: Any, callback: "IExecutionCallback") -> ErrorStatus:
        raise NotImplementedError

    def executeSynchronously(self, request: Any, measure: Any) -> tuple:  # (status, outputShapes, timing)
        raise NotImplementedError

    def configureExecutionBurst(self, callback: "IBurstCallback", requestChannel: Any,
                                resultChannel: Any) -> tuple:  # (status, IBurstContext)
        raise NotImplementedError

    # the draft 1.2 caching interface: one handle (one fd) each, a 32-byte token
    def saveToCache(self, modelCache: Any, dataCache: Any, token: bytes) -> ErrorStatus:
        raise NotImplementedError

    # @1.3
    def execute_1_3(self, request: Any, measure: Any, deadline: Any, loopTimeoutDuration: Any,
                    callback: "IExecutionCallback") -> ErrorStatus:
        raise NotImplementedError

    def executeSynchronously_1_3(self, request: Any, measure: Any, deadline: Any,
                                 loopTimeoutDuration: Any) -> tuple:  # (status, outputShapes, timing)
        raise NotImplementedError

    def executeFenced(self, request: Any, waitFor: list, measure: Any, deadline: Any, loopTimeoutDuration: Any,
                      duration: Any) -> tuple:  # (status, syncFence: Handle, IFencedExecutionCallback)
        raise NotImplementedError


class IBuffer:
    """``@1.3::IBuffer``: driver-managed memory."""

    def copyTo(self, dst: Any) -> ErrorStatus:
        raise NotImplementedError

    def copyFrom(self, src: Any, dimensions: list) -> ErrorStatus:
        raise NotImplementedError


class IPreparedModelCallback:
    """``@1.3::IPreparedModelCallback`` (notify / notify_1_2 / notify_1_3)."""

    def notify(self, status: ErrorStatus, preparedModel: Optional[IPreparedModel]) -> None:
        raise NotImplementedError

    def notify_1_2(self, status: ErrorStatus, preparedModel: Optional[IPreparedModel]) -> None:
        raise NotImplementedError

    def notify_1_3(self, status: ErrorStatus, preparedModel: Optional[IPreparedModel]) -> None:
        raise NotImplementedError


class IExecutionCallback:
    """``@1.3::IExecutionCallback`` (notify / notify_1_2 / notify_1_3)."""

    def notify(self, status: ErrorStatus) -> None:
        raise NotImplementedError

    def notify_1_2(self, status: ErrorStatus, outputShapes: list, timing: Timing) -> None:
        raise NotImplementedError

    def notify_1_3(self, status: ErrorStatus, outputShapes: list, timing: Timing) -> None:
        raise NotImplementedError


class IFencedExecutionCallback:
    """``@1.3::IFencedExecutionCallback``."""

    def getExecutionInfo(self) -> tuple:  # (ErrorStatus, timingLaunched, timingFenced)
        raise NotImplementedError


class IBurstCallback:
    """``@1.2::IBurstCallback``: the client side, asked for memories by slot."""

    def getMemories(self, slots: list) -> tuple:  # (ErrorStatus, list[Memory])
        raise NotImplementedError


class IBurstContext:
    """``@1.2::IBurstContext``: the driver side of a burst."""

    def freeMemory(self, slot: int) -> None:
        raise NotImplementedError


class _Once:
    """Stores the first notification, wakes waiters; later ones are logged and ignored.

    NOTE: a latch (one lock held until the notification, which every waiter then takes and hands on)
    rather than a ``threading.Event``: its Condition costs a lock, a waiter lock and a deque per wait,
    and this is every asynchronous execution's and preparation's hand-off."""

    def __init__(self) -> None:
        self._latch = threading.Lock()
        self._latch.acquire()
        self._lock = threading.Lock()
        self._value: Optional[tuple] = None

    def _set(self, value: tuple, method: str) -> None:
        with self._lock:
            if self._value is not None:
                log.error("%s called more than once on %s; ignored", method, type(self).__name__)
                return
            self._value = value
            self._latch.release()

    @property
    def notified(self) -> bool:
        return self._value is not None

    def _wait(self, timeout: Optional[float]) -> tuple:
        if self._value is None:
            if timeout is None:
                got = self._latch.acquire()
            elif timeout > 0:
                got = self._latch.acquire(timeout=timeout)
            else:
                got = self._latch.acquire(blocking=False)
            if not got:
                raise TimeoutError(f"{type(self).__name__} not notified within {timeout} s")
            self._latch.release()  # NOTE: handed on to the next waiter
        value = self._value
        assert value is not None
        return value


class PreparedModelCallback(_Once, IPreparedModelCallback):
    """A ready IPreparedModelCallback: ``wait()`` -> (status, preparedModel)."""

    def notify(self, status: ErrorStatus, preparedModel: Optional[IPreparedModel]) -> None:
        self._set((ErrorStatus(status), preparedModel), "notify")

    def notify_1_2(self, status: ErrorStatus, preparedModel: Optional[IPreparedModel]) -> None:
        self._set((ErrorStatus(status), preparedModel), "notify_1_2")

    def notify_1_3(self, status: ErrorStatus, preparedModel: Optional[IPreparedModel]) -> None:
        self._set((ErrorStatus(status), preparedModel), "notify_1_3")

    def wait(self, timeout: Optional[float] = None) -> tuple:
        return self._wait(timeout)


class ExecutionCallback(_Once, IExecutionCallback):
    """A ready IExecutionCallback: ``wait()`` -> (status, outputShapes, timing)."""

    def notify(self, status: ErrorStatus) -> None:
        self._set((ErrorStatus(status), [], Timing()), "notify")

    def notify_1_2(self, status: ErrorStatus, outputShapes: list, timing: Timing) -> None:
        self._set((ErrorStatus(status), list(outputShapes), timing), "notify_1_2")

    def notify_1_3(self, status: ErrorStatus, outputShapes: list, timing: Timing) -> None:
        self._set((ErrorStatus(status), list(outputShapes), timing), "notify_1_3")

    def wait(self, timeout: Optional[float] = None) -> tuple:
        return self._wait(timeout)


__all__ = [
    "IDevice", "INnhalDevice", "prepare_model_1_2_args", "IPreparedModel", "IBuffer", "IPreparedModelCallback", "IExecutionCallback",
    "IFencedExecutionCallback", "IBurstCallback", "IBurstContext", "PreparedModelCallback",
    "ExecutionCallback", "OutputShape",
]
