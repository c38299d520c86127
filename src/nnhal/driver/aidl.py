"""The AIDL face of the front end: ``android.hardware.neuralnetworks``
versions 1-4 (:mod:`nnhal.hal.aidl`) over the same device and prepared
models the HIDL methods use, as Android serves both HALs from one driver
through its canonical types.

Each face object converts its arguments at the boundary
(:mod:`nnhal.hal.aidl.convert`), calls the front end's canonical entry point
with the interface version of the call (``HalVersion.AIDL_V1`` ..
``AIDL_V4``: what a model may use is validated as of that version), and
converts the answer: :class:`AidlDevice` (``Device.prepare``,
``prepare_from_cache``, ``supported_operations``, ``allocate``),
:class:`AidlPreparedModel` (``PreparedModel.execute_sync``,
``execute_fenced``), :class:`AidlBurst` (``driver.burst.TokenBurst``),
:class:`AidlExecution` (``driver.reusable.ReusableExecution``),
:class:`AidlBuffer` and :class:`AidlFencedCallback`.  No HAL behaviour is
here: validation, scheduling, deadlines, caching, memory domains, bursts and
fences are the front end's, shared with HIDL.

The binding's rules (``nnhal.hal.aidl.interfaces``): a method returns its
AIDL value and raises :class:`ServiceSpecificError` with the status the front
end answers (INVALID_ARGUMENT for what the boundary cannot convert); any
other exception escaping a method is a driver bug, logged and raised as
GENERAL_FAILURE (:func:`aidl_methods`); a method newer than the object's
version raises :class:`TransactionError` (UNKNOWN_TRANSACTION).  A
preparation refused at launch notifies its callback and raises, as the AIDL
VTS requires.  OUTPUT_INSUFFICIENT_SIZE is no error: ``ExecutionResult``
with ``outputSufficientSize`` false.  The face objects are plain objects a
service can host: they take and return AIDL types only.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Callable, Optional

from nnhal import hal
from nnhal.driver.burst import TokenBurst
from nnhal.driver.device import Device
from nnhal.driver.execution import Result
from nnhal.driver.prepared_model import PreparedModel
from nnhal.driver.reusable import ReusableExecution
from nnhal.engine.validation import ValidationError, loop_timeout_ns, validate_hints
from nnhal.hal import aidl
from nnhal.hal.aidl.convert import InvalidArgument, from_canonical, optional_ns, to_canonical
from nnhal.hal.aidl.interfaces import INTERFACES, METHODS, ServiceSpecificError, TransactionError

log = logging.getLogger("nnhal.driver")

S = hal.ErrorStatus
V = hal.HalVersion

__all__ = ["AidlBuffer", "AidlBurst", "AidlDevice", "AidlExecution", "AidlFencedCallback", "AidlPreparedModel",
           "aidl_methods", "hal_version"]


def hal_version(version: Any) -> V:
    """``HalVersion.AIDL_V<version>`` for an AIDL interface version 1-4 (ValueError otherwise)."""
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= aidl.VERSION:
        raise ValueError(f"AIDL interface version {version!r}: this binding serves 1 to {aidl.VERSION}")
    return V(V.AIDL_V1 + version - 1)


# --------------------------------------------------------------------------
# the boundary's rules, once


def aidl_methods(cls: type) -> type:
    """Class decorator: each AIDL method ``cls`` defines answers as the
    binding says (module doc): the version gate, ServiceSpecificError only."""
    iface = next(b for b in cls.__mro__ if b in INTERFACES)
    for name, since in METHODS[iface.__name__].items():
        fn = cls.__dict__.get(name)
        if fn is not None:
            setattr(cls, name, _guard(f"{iface.__name__}.{name}", since, fn))
    return cls


def _guard(what: str, since: V, fn: Callable) -> Callable:
    @functools.wraps(fn)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.version < since:
            raise TransactionError(TransactionError.UNKNOWN_TRANSACTION,
                                   f"{what} is in version {since - V.AIDL_V1 + 1}, this object serves version "
                                   f"{self.getInterfaceVersion()}")
        try:
            return fn(self, *args, **kwargs)
        except ServiceSpecificError:
            raise
        except (InvalidArgument, ValidationError) as e:
            log.error("%s: %s", what, e)
            raise ServiceSpecificError(S.INVALID_ARGUMENT, str(e)) from None
        except TypeError as e:
            if e.__traceback__ is not None and e.__traceback__.tb_next is None:
                # NOTE: raised by the call itself: arguments the method does not take
                raise ServiceSpecificError(S.INVALID_ARGUMENT, f"{what}: {e}") from None
            log.exception("%s raised (a driver bug); answered GENERAL_FAILURE", what)
            raise ServiceSpecificError(S.GENERAL_FAILURE, f"{what}: internal error") from None
        except Exception:  # noqa: BLE001 - the point: a face method raises ServiceSpecificError only
            log.exception("%s raised (a driver bug); answered GENERAL_FAILURE", what)
            raise ServiceSpecificError(S.GENERAL_FAILURE, f"{what}: internal error") from None

    return guarded


def _check(status: S, what: str) -> None:
    if status != S.NONE:
        raise ServiceSpecificError(status, f"{what}: {S(status).name}")


def _measure(value: Any) -> hal.MeasureTiming:
    if not isinstance(value, bool):
        raise InvalidArgument(f"measureTiming {value!r} is not a boolean")
    return hal.MeasureTiming.YES if value else hal.MeasureTiming.NO


def _loop_timeout(value: Any) -> int:
    return loop_timeout_ns(optional_ns(value, "loopTimeoutDurationNs"))


def _fds(fds: Any) -> Any:
    """A ``ParcelFileDescriptor[]`` as the front end's one-fd handles (anything else is left for it to refuse)."""
    return [hal.Handle(fds=[fd]) for fd in fds] if isinstance(fds, (list, tuple)) else fds


def _config(config: Any) -> aidl.ExecutionConfig:
    if type(config) is not aidl.ExecutionConfig:
        raise InvalidArgument(f"config is a {type(config).__name__}, not an ExecutionConfig")
    validate_hints(config.executionHints, config.extensionNameToPrefix)
    return config


def _execution_result(result: Result) -> aidl.ExecutionResult:
    """``ExecutionResult`` of a synchronous execution; an error status raised."""
    status = result.status
    if status == S.OUTPUT_INSUFFICIENT_SIZE:
        return aidl.ExecutionResult(outputSufficientSize=False, outputShapes=result.outputShapes)
    _check(status, "execution")
    return aidl.ExecutionResult(outputSufficientSize=True, outputShapes=result.outputShapes,
                                timing=from_canonical(result.timing))


def _fenced_result(answer: tuple, version: V) -> aidl.FencedExecutionResult:
    status, sync, info = answer
    _check(status, "fenced execution")
    # NOTE: the fence's descriptor is the caller's now (a returned ParcelFileDescriptor)
    return aidl.FencedExecutionResult(callback=AidlFencedCallback(info, version), syncFence=sync.fds[0])


class _Face:
    """What every face object has: the interface version it serves."""

    def __init__(self, version: V):
        self.version = version

    def getInterfaceVersion(self) -> int:
        return int(self.version - V.AIDL_V1) + 1


# --------------------------------------------------------------------------
# IDevice


@aidl_methods
class AidlDevice(_Face, aidl.IDevice):
    """The AIDL ``IDevice`` of ``device`` (a front-end ``Device``), serving
    interface ``version`` (1-4)."""

    def __init__(self, device: Device, version: int = aidl.VERSION):
        super().__init__(hal_version(version))
        self.device = device

    def allocate(self, desc: Any, preparedModels: Any, inputRoles: Any, outputRoles: Any) -> aidl.DeviceBuffer:
        models = []
        for k, parcel in enumerate(preparedModels if isinstance(preparedModels, (list, tuple)) else [None]):
            pm = parcel.preparedModel if type(parcel) is aidl.IPreparedModelParcel else None
            if not isinstance(pm, AidlPreparedModel) or pm.device is not self.device:
                raise InvalidArgument(f"preparedModels[{k}] is no prepared model of this device")
            models.append(pm.prepared)
        status, buffer, token = self.device.allocate(desc, models, to_canonical(_list(inputRoles, "inputRoles")),
                                                     to_canonical(_list(outputRoles, "outputRoles")))
        _check(status, "allocate")
        return aidl.DeviceBuffer(buffer=AidlBuffer(buffer, self.version), token=token)

    def getCapabilities(self) -> aidl.Capabilities:
        status, caps = self.device.getCapabilities_1_3()
        _check(status, "getCapabilities")
        return from_canonical(caps)

    def getNumberOfCacheFilesNeeded(self) -> aidl.NumberOfCacheFiles:
        status, models, data = self.device.getNumberOfCacheFilesNeeded()
        _check(status, "getNumberOfCacheFilesNeeded")
        return aidl.NumberOfCacheFiles(numModelCache=models, numDataCache=data)

    def getSupportedExtensions(self) -> list:
        status, extensions = self.device.getSupportedExtensions()
        _check(status, "getSupportedExtensions")
        return extensions

    def getSupportedOperations(self, model: Any) -> list[bool]:
        status, flags = self.device.supported_operations(to_canonical(model), self.version)
        _check(status, "getSupportedOperations")
        return flags

    def getType(self) -> aidl.DeviceType:
        status, device_type = self.device.getType()
        _check(status, "getType")
        return device_type

    def getVersionString(self) -> str:
        status, version = self.device.getVersionString()
        _check(status, "getVersionString")
        return version

    def prepareModel(self, model: Any, preference: Any, priority: Any, deadlineNs: Any, modelCache: Any,
                     dataCache: Any, token: Any, callback: Any) -> None:
        self._prepare(callback, model, preference, priority, deadlineNs, modelCache, dataCache, token)

    def prepareModelWithConfig(self, model: Any, config: Any, callback: Any) -> None:
        if type(config) is not aidl.PrepareModelConfig:
            _Notify(callback, self)(S.INVALID_ARGUMENT, None)
            raise InvalidArgument(f"config is a {type(config).__name__}, not a PrepareModelConfig")
        self._prepare(callback, model, config.preference, config.priority, config.deadlineNs, config.modelCache,
                      config.dataCache, config.cacheToken, config.compilationHints, config.extensionNameToPrefix)

    def prepareModelFromCache(self, deadlineNs: Any, modelCache: Any, dataCache: Any, token: Any,
                              callback: Any) -> None:
        notify = _Notify(callback, self)
        try:
            dl = optional_ns(deadlineNs, "deadlineNs")
        except InvalidArgument:
            notify(S.INVALID_ARGUMENT, None)
            raise
        _check(notify.launch(lambda: self.device.prepare_from_cache(dl, _fds(modelCache), _fds(dataCache), token,
                                                                    notify)), "prepareModelFromCache")

    def _prepare(self, callback: Any, model: Any, preference: Any, priority: Any, deadlineNs: Any, modelCache: Any,
                 dataCache: Any, token: Any, hints: Any = (), extensions: Any = ()) -> None:
        notify = _Notify(callback, self)
        try:
            model13, dl = to_canonical(model), optional_ns(deadlineNs, "deadlineNs")
        except InvalidArgument:
            notify(S.INVALID_ARGUMENT, None)
            raise
        _check(notify.launch(lambda: self.device.prepare(model13, preference, priority, dl, _fds(modelCache),
                                                         _fds(dataCache), token, notify, self.version, hints,
                                                         extensions)), "prepareModel")


class _Notify:
    """The canonical notify over an AIDL ``IPreparedModelCallback``
    (INVALID_ARGUMENT when it is none): tells it the prepared model's AIDL
    face; a callback that raises is logged."""

    __slots__ = ("callback", "device", "told")

    def __init__(self, callback: Any, device: AidlDevice):
        if callback is None or not callable(getattr(callback, "notify", None)):
            raise InvalidArgument("callback is not an IPreparedModelCallback")
        self.callback, self.device, self.told = callback, device, False

    def __call__(self, status: S, prepared: Optional[PreparedModel]) -> None:
        self.told = True
        face = AidlPreparedModel(prepared, self.device) if prepared is not None else None
        try:
            self.callback.notify(status, face)
        except Exception:  # NOTE: a client's callback failing must not take the driver down
            log.exception("IPreparedModelCallback.notify raised")

    def launch(self, start: Callable[[], S]) -> S:
        """``start()``'s launch status; a driver bug in it still tells the callback once (GENERAL_FAILURE)."""
        try:
            return start()
        except Exception:
            if not self.told:
                self(S.GENERAL_FAILURE, None)
            raise


def _list(x: Any, what: str) -> list:
    if not isinstance(x, (list, tuple)):
        raise InvalidArgument(f"{what} is not a list")
    return list(x)


# --------------------------------------------------------------------------
# IPreparedModel and what it makes


@aidl_methods
class AidlPreparedModel(_Face, aidl.IPreparedModel):
    """The AIDL ``IPreparedModel`` of a front-end ``PreparedModel``, at its device face's version."""

    def __init__(self, prepared: PreparedModel, device: AidlDevice):
        super().__init__(device.version)
        self.prepared, self.device = prepared, device.device

    def _run(self, request: Any, measure: Any, deadlineNs: Any, loopTimeoutDurationNs: Any) -> aidl.ExecutionResult:
        req = to_canonical(request)
        result = self.prepared.execute_sync(req, _measure(measure), optional_ns(deadlineNs, "deadlineNs"),
                                            _loop_timeout(loopTimeoutDurationNs), owned=True,
                                            pool_cache=self.device.pool_cache)
        return _execution_result(result)

    def _fenced(self, request: Any, waitFor: Any, measure: Any, deadlineNs: Any, loopTimeoutDurationNs: Any,
                durationNs: Any) -> aidl.FencedExecutionResult:
        req = to_canonical(request)
        return _fenced_result(self.prepared.execute_fenced(
            req, _fds(waitFor), _measure(measure), optional_ns(deadlineNs, "deadlineNs"),
            _loop_timeout(loopTimeoutDurationNs), optional_ns(durationNs, "durationNs")), self.version)

    def executeSynchronously(self, request: Any, measureTiming: Any, deadlineNs: Any,
                             loopTimeoutDurationNs: Any) -> aidl.ExecutionResult:
        return self._run(request, measureTiming, deadlineNs, loopTimeoutDurationNs)

    def executeFenced(self, request: Any, waitFor: Any, measureTiming: Any, deadlineNs: Any,
                      loopTimeoutDurationNs: Any, durationNs: Any) -> aidl.FencedExecutionResult:
        return self._fenced(request, waitFor, measureTiming, deadlineNs, loopTimeoutDurationNs, durationNs)

    def configureExecutionBurst(self) -> aidl.IBurst:
        return AidlBurst(TokenBurst(self.prepared), self.version)

    def createReusableExecution(self, request: Any, config: Any) -> aidl.IExecution:
        config = _config(config)
        execution = ReusableExecution(self.prepared, to_canonical(request), _measure(config.measureTiming),
                                      _loop_timeout(config.loopTimeoutDurationNs))
        return AidlExecution(execution, self.version)

    def executeSynchronouslyWithConfig(self, request: Any, config: Any, deadlineNs: Any) -> aidl.ExecutionResult:
        config = _config(config)
        return self._run(request, config.measureTiming, deadlineNs, config.loopTimeoutDurationNs)

    def executeFencedWithConfig(self, request: Any, waitFor: Any, config: Any, deadlineNs: Any,
                                durationNs: Any) -> aidl.FencedExecutionResult:
        config = _config(config)
        return self._fenced(request, waitFor, config.measureTiming, deadlineNs, config.loopTimeoutDurationNs,
                            durationNs)


@aidl_methods
class AidlBurst(_Face, aidl.IBurst):
    """The AIDL ``IBurst`` of a ``TokenBurst``."""

    def __init__(self, burst: TokenBurst, version: V):
        super().__init__(version)
        self.burst = burst

    def executeSynchronously(self, request: Any, memoryIdentifierTokens: Any, measureTiming: Any, deadlineNs: Any,
                             loopTimeoutDurationNs: Any) -> aidl.ExecutionResult:
        req = to_canonical(request)
        return _execution_result(self.burst.execute(req, memoryIdentifierTokens, _measure(measureTiming),
                                                    optional_ns(deadlineNs, "deadlineNs"),
                                                    _loop_timeout(loopTimeoutDurationNs)))

    def executeSynchronouslyWithConfig(self, request: Any, memoryIdentifierTokens: Any, config: Any,
                                       deadlineNs: Any) -> aidl.ExecutionResult:
        config = _config(config)
        return self.executeSynchronously(request, memoryIdentifierTokens, config.measureTiming, deadlineNs,
                                         config.loopTimeoutDurationNs)

    def releaseMemoryResource(self, memoryIdentifierToken: Any) -> None:
        if optional_ns(memoryIdentifierToken, "memoryIdentifierToken") is not None:  # NOTE: the same rule: -1 or >= 0
            self.burst.release(memoryIdentifierToken)


@aidl_methods
class AidlExecution(_Face, aidl.IExecution):
    """The AIDL ``IExecution`` of a ``ReusableExecution``."""

    def __init__(self, execution: ReusableExecution, version: V):
        super().__init__(version)
        self.execution = execution

    def executeSynchronously(self, deadlineNs: Any) -> aidl.ExecutionResult:
        return _execution_result(self.execution.execute(optional_ns(deadlineNs, "deadlineNs")))

    def executeFenced(self, waitFor: Any, deadlineNs: Any, durationNs: Any) -> aidl.FencedExecutionResult:
        return _fenced_result(self.execution.execute_fenced(_fds(waitFor), optional_ns(deadlineNs, "deadlineNs"),
                                                            optional_ns(durationNs, "durationNs")), self.version)


@aidl_methods
class AidlBuffer(_Face, aidl.IBuffer):
    """The AIDL ``IBuffer`` of a front-end buffer (``driver.buffers.Buffer``); dropped, the buffer is freed."""

    def __init__(self, buffer: hal.IBuffer, version: V):
        super().__init__(version)
        self.buffer = buffer

    def copyFrom(self, src: Any, dimensions: Any) -> None:
        # NOTE: a memory the boundary cannot convert goes on as None: the front end refuses it, and a failed
        # copyFrom leaves the buffer uninitialized there (IDevice.allocate)
        _check(self.buffer.copyFrom(_memory_or_none(src), dimensions), "copyFrom")

    def copyTo(self, dst: Any) -> None:
        _check(self.buffer.copyTo(_memory_or_none(dst)), "copyTo")


def _memory_or_none(memory: Any) -> Optional[hal.Memory]:
    try:
        return to_canonical(memory) if type(memory) is aidl.Memory else None
    except InvalidArgument as e:
        log.error("IBuffer: %s", e)
        return None


@aidl_methods
class AidlFencedCallback(_Face, aidl.IFencedExecutionCallback):
    """The AIDL ``IFencedExecutionCallback`` of a fenced execution."""

    def __init__(self, info: hal.IFencedExecutionCallback, version: V):
        super().__init__(version)
        self.info = info

    def getExecutionInfo(self, timingLaunched: Optional[aidl.Timing] = None,
                         timingFenced: Optional[aidl.Timing] = None) -> aidl.ErrorStatus:
        for out in (timingLaunched, timingFenced):
            if out is not None and type(out) is not aidl.Timing:
                raise InvalidArgument(f"an out Timing is a {type(out).__name__}")
        status, launched, fenced = self.info.getExecutionInfo()
        for out, timing in ((timingLaunched, launched), (timingFenced, fenced)):
            if out is not None:
                got = from_canonical(timing)
                out.timeOnDeviceNs, out.timeInDriverNs = got.timeOnDeviceNs, got.timeInDriverNs
        return aidl.ErrorStatus(status)
