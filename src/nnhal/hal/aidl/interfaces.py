"""The interfaces of ``android.hardware.neuralnetworks`` (stable AIDL,
versions 1-4): ``IDevice``, ``IPreparedModel``, ``IBurst``, ``IExecution``
(version 4), ``IBuffer``, ``IPreparedModelCallback`` and
``IFencedExecutionCallback``, each method under its AIDL name and parameter
order; the parcelables that hold an interface (``DeviceBuffer``,
``FencedExecutionResult``, ``IPreparedModelParcel``); the binding's forms of
binder's errors; the table of the version each name appeared in.

The binding (../shared/API.md, "AIDL"), as Android's NDK backend shapes a
method, with Python's return and raise in place of the ``ScopedAStatus``:

- a method returns its AIDL return value (None for ``void``) and raises
  :class:`ServiceSpecificError` (``status``: an ``ErrorStatus``) where the
  NDK returns ``ScopedAStatus::fromServiceSpecificError``; never returns a
  status in place of a value;
- an ``out`` parameter is an object the caller passes and the callee fills
  in place (the NDK's pointer parameter): ``getExecutionInfo(timingLaunched,
  timingFenced) -> ErrorStatus`` sets the fields of the two ``Timing``s it
  is given (either may be None when the caller does not want it);
- a call of a method the serving version does not have raises
  :class:`TransactionError` with ``STATUS_UNKNOWN_TRANSACTION``, what binder
  answers a client built against a newer version (the object's
  ``getInterfaceVersion()`` says which version it serves);
- ``ParcelFileDescriptor`` is an int the callee duplicates if it keeps it;
  one it returns (a sync fence) belongs to the caller.

Every method's annotations are the AIDL types (``typing.get_type_hints``
resolves them: what a transport encodes and decodes by), and
:data:`METHODS` lists the methods of each interface with their version.
"""

from __future__ import annotations

import errno
import logging
from dataclasses import dataclass
from typing import Any, Callable, Optional

from nnhal.hal import interfaces as _hidl
from nnhal.hal.aidl import types as _types
from nnhal.hal.aidl.types import (
    BufferDesc,
    BufferRole,
    Capabilities,
    DeviceType,
    ErrorStatus,
    ExecutionConfig,
    ExecutionPreference,
    ExecutionResult,
    Extension,
    Memory,
    Model,
    NumberOfCacheFiles,
    ParcelFileDescriptor,
    PrepareModelConfig,
    Priority,
    Request,
    Timing,
)
from nnhal.hal.types import HalVersion

log = logging.getLogger("nnhal.hal")

__all__ = [
    "DeviceBuffer", "FencedExecutionResult", "HASHES", "IBuffer", "IBurst", "IDevice", "IExecution",
    "IFencedExecutionCallback", "INTERFACES", "IPreparedModel", "IPreparedModelCallback", "IPreparedModelParcel",
    "METHODS", "PreparedModelCallback", "SINCE", "ServiceSpecificError", "TransactionError", "VERSION", "since",
]

V1, V4 = HalVersion.AIDL_V1, HalVersion.AIDL_V4
VERSION = 4  # the newest version this binding holds, which getInterfaceVersion() answers by default

# the frozen versions' hashes (aidl_api/android.hardware.neuralnetworks/N/.hash), getInterfaceHash()
HASHES = {1: "ae57b48403df6752d8d8d56d215c3e31db74935d", 2: "04c95c94c96062e5faf35c00b4ae0e50a3f11d0d",
          3: "8c2c4ca2327e6f779dad6119c03d832ea4e1def1", 4: "53178f8de9b8861df391cf0593f6f3e08adad33d"}


# --------------------------------------------------------------------------
# errors


class ServiceSpecificError(Exception):
    """A binder service-specific exception (``EX_SERVICE_SPECIFIC``):
    ``status`` is the ``ErrorStatus`` (an int when it is none of its values),
    ``message`` why."""

    def __init__(self, status: Any, message: str = ""):
        super().__init__(status, message)
        self.status = ErrorStatus(status) if status in ErrorStatus._value2member_map_ else status
        self.message = message

    def __str__(self) -> str:
        name = self.status.name if isinstance(self.status, ErrorStatus) else str(self.status)
        return f"{name}: {self.message}" if self.message else name


class TransactionError(Exception):
    """A binder transaction that failed (``EX_TRANSACTION_FAILED``): ``status``
    is binder's ``status_t``, e.g. :attr:`UNKNOWN_TRANSACTION` for a method
    the serving version does not have, :attr:`DEAD_OBJECT` for an object
    whose process is gone.  Never raised by a method the object has."""

    UNKNOWN_TRANSACTION = -errno.EBADMSG  # STATUS_UNKNOWN_TRANSACTION (binder_status.h)
    DEAD_OBJECT = -errno.EPIPE  # STATUS_DEAD_OBJECT

    def __init__(self, status: int, message: str = ""):
        super().__init__(status, message)
        self.status, self.message = status, message

    def __str__(self) -> str:
        return f"binder status {self.status}: {self.message}"


def out(*params: str) -> Callable[[Callable], Callable]:
    """Marks parameters of an interface method as AIDL ``out`` parameters
    (objects the callee fills; a transport sends them back, not there)."""

    def mark(fn: Callable) -> Callable:
        fn.aidl_out = params  # type: ignore[attr-defined]
        return fn

    return mark


def added(version: HalVersion) -> Callable[[Callable], Callable]:
    """Marks an interface method as added in ``version`` (not in version 1)."""

    def mark(fn: Callable) -> Callable:
        fn.aidl_since = version  # type: ignore[attr-defined]
        return fn

    return mark


# --------------------------------------------------------------------------
# interfaces


class Interface:
    """What every AIDL interface answers (binder's own transactions)."""

    def getInterfaceVersion(self) -> int:
        return VERSION

    def getInterfaceHash(self) -> str:
        return HASHES.get(self.getInterfaceVersion(), "")


class IBuffer(Interface):
    """A driver-managed buffer (from ``IDevice.allocate``)."""

    def copyFrom(self, src: Memory, dimensions: list[int]) -> None:
        raise NotImplementedError

    def copyTo(self, dst: Memory) -> None:
        raise NotImplementedError


class IFencedExecutionCallback(Interface):
    @out("timingLaunched", "timingFenced")
    def getExecutionInfo(self, timingLaunched: Optional[Timing] = None,
                         timingFenced: Optional[Timing] = None) -> ErrorStatus:
        """The fenced execution's status; fills the ``out`` Timings given."""
        raise NotImplementedError


class IBurst(Interface):
    def executeSynchronously(self, request: Request, memoryIdentifierTokens: list[int], measureTiming: bool,
                             deadlineNs: int, loopTimeoutDurationNs: int) -> ExecutionResult:
        raise NotImplementedError

    def releaseMemoryResource(self, memoryIdentifierToken: int) -> None:
        raise NotImplementedError

    @added(V4)
    def executeSynchronouslyWithConfig(self, request: Request, memoryIdentifierTokens: list[int],
                                       config: ExecutionConfig, deadlineNs: int) -> ExecutionResult:
        raise NotImplementedError


class IExecution(Interface):
    """(version 4) A reusable execution: one request, run many times."""

    def executeSynchronously(self, deadlineNs: int) -> ExecutionResult:
        raise NotImplementedError

    def executeFenced(self, waitFor: list[ParcelFileDescriptor], deadlineNs: int,
                      durationNs: int) -> FencedExecutionResult:
        raise NotImplementedError


class IPreparedModel(Interface):
    DEFAULT_LOOP_TIMEOUT_DURATION_NS = 2_000_000_000
    MAXIMUM_LOOP_TIMEOUT_DURATION_NS = 15_000_000_000

    def executeSynchronously(self, request: Request, measureTiming: bool, deadlineNs: int,
                             loopTimeoutDurationNs: int) -> ExecutionResult:
        raise NotImplementedError

    def executeFenced(self, request: Request, waitFor: list[ParcelFileDescriptor], measureTiming: bool,
                      deadlineNs: int, loopTimeoutDurationNs: int, durationNs: int) -> FencedExecutionResult:
        raise NotImplementedError

    def configureExecutionBurst(self) -> IBurst:
        raise NotImplementedError

    @added(V4)
    def createReusableExecution(self, request: Request, config: ExecutionConfig) -> IExecution:
        raise NotImplementedError

    @added(V4)
    def executeSynchronouslyWithConfig(self, request: Request, config: ExecutionConfig,
                                       deadlineNs: int) -> ExecutionResult:
        raise NotImplementedError

    @added(V4)
    def executeFencedWithConfig(self, request: Request, waitFor: list[ParcelFileDescriptor],
                                config: ExecutionConfig, deadlineNs: int, durationNs: int) -> FencedExecutionResult:
        raise NotImplementedError


class IPreparedModelCallback(Interface):
    def notify(self, status: ErrorStatus, preparedModel: Optional[IPreparedModel]) -> None:
        raise NotImplementedError


class IDevice(Interface):
    BYTE_SIZE_OF_CACHE_TOKEN = 32
    MAX_NUMBER_OF_CACHE_FILES = 32
    EXTENSION_TYPE_HIGH_BITS_PREFIX = 15
    EXTENSION_TYPE_LOW_BITS_TYPE = 16
    OPERAND_TYPE_BASE_MAX = 0xFFFF
    OPERATION_TYPE_BASE_MAX = 0xFFFF

    def allocate(self, desc: BufferDesc, preparedModels: list[IPreparedModelParcel], inputRoles: list[BufferRole],
                 outputRoles: list[BufferRole]) -> DeviceBuffer:
        raise NotImplementedError

    def getCapabilities(self) -> Capabilities:
        raise NotImplementedError

    def getNumberOfCacheFilesNeeded(self) -> NumberOfCacheFiles:
        raise NotImplementedError

    def getSupportedExtensions(self) -> list[Extension]:
        raise NotImplementedError

    def getSupportedOperations(self, model: Model) -> list[bool]:
        raise NotImplementedError

    def getType(self) -> DeviceType:
        raise NotImplementedError

    def getVersionString(self) -> str:
        raise NotImplementedError

    def prepareModel(self, model: Model, preference: ExecutionPreference, priority: Priority, deadlineNs: int,
                     modelCache: list[ParcelFileDescriptor], dataCache: list[ParcelFileDescriptor], token: bytes,
                     callback: IPreparedModelCallback) -> None:
        raise NotImplementedError

    def prepareModelFromCache(self, deadlineNs: int, modelCache: list[ParcelFileDescriptor],
                              dataCache: list[ParcelFileDescriptor], token: bytes,
                              callback: IPreparedModelCallback) -> None:
        raise NotImplementedError

    @added(V4)
    def prepareModelWithConfig(self, model: Model, config: PrepareModelConfig,
                               callback: IPreparedModelCallback) -> None:
        raise NotImplementedError


# --------------------------------------------------------------------------
# parcelables holding an interface


@dataclass
class DeviceBuffer:
    """``IDevice.allocate``'s result: the buffer and its positive token."""

    buffer: Optional[IBuffer] = None
    token: int = 0


@dataclass
class FencedExecutionResult:
    """``executeFenced``'s result: the callback, and the sync fence (an fd the
    caller owns; None once the execution is over)."""

    callback: Optional[IFencedExecutionCallback] = None
    syncFence: Optional[ParcelFileDescriptor] = None


@dataclass
class IPreparedModelParcel:
    preparedModel: Optional[IPreparedModel] = None


class PreparedModelCallback(_hidl.PreparedModelCallback, IPreparedModelCallback):
    """A ready ``IPreparedModelCallback``: ``wait(timeout)`` -> (status,
    preparedModel) once ``notify`` was called (later calls are logged and
    ignored)."""


# --------------------------------------------------------------------------
# versions

INTERFACES = (IDevice, IPreparedModel, IBurst, IExecution, IBuffer, IPreparedModelCallback,
              IFencedExecutionCallback)

# interface -> method -> the version that introduced it, in the .aidl's order
METHODS: dict[str, dict[str, HalVersion]] = {
    i.__name__: {n: V4 if i is IExecution else getattr(f, "aidl_since", V1) for n, f in vars(i).items()
                 if callable(f) and not n.startswith("_")}
    for i in INTERFACES
}

# every name of the binding -> the version that introduced it
SINCE: dict[str, HalVersion] = {
    **{n: _types.SINCE.get(n, V1) for n in _types.__all__},
    **{f"{n}.{m}": _types.SINCE.get(f"{n}.{m}", V1) for n in _types.__all__
       for m in getattr(getattr(_types, n), "__members__", {})},
    **{n: V1 for n in ("DeviceBuffer", "FencedExecutionResult", "IPreparedModelParcel")},
    **{i.__name__: V4 if i is IExecution else V1 for i in INTERFACES},
    **{f"{i}.{m}": v for i, ms in METHODS.items() for m, v in ms.items()},
}


def since(name: str) -> HalVersion:
    """The AIDL version (``HalVersion.AIDL_V1`` .. ``AIDL_V4``) that introduced
    ``name``: a type (``"ExecutionConfig"``), an enum member
    (``"OperationType.BATCH_MATMUL"``), an interface (``"IExecution"``) or a
    method (``"IDevice.prepareModelWithConfig"``).  KeyError for a name the
    binding does not have."""
    return SINCE[name]
