"""The face of a device the client runtime speaks through, as Android's
runtime holds a driver since Android 12: one canonical device
(``nn::IDevice``, ``nn::IPreparedModel``, ``nn::IBurst``, ``nn::IExecution``,
``nn::IBuffer``) over either interface, by the HIDL or AIDL adapter
(``neuralnetworks/1.x/utils``, ``neuralnetworks/aidl/utils``).

:func:`open_face` gives a device's AIDL face when it has one, at the
interface version asked (AIDL 1-4 for NNAPI feature levels 5-8): every
in-process device (a name of the device table, a ``module:Class`` spec, a
front-end device object: the front end serves both faces); a running
service by name (``nnhal.aidl.connect``); an AIDL ``IDevice`` object as it
is.  A version below AIDL 1 (HIDL 1.0-1.3), a service that answers no AIDL
face, or any other ``IDevice`` object (a HIDL-only device, duck-typed) is the
HIDL face, at most 1.3.

Both faces take and give the canonical types (:mod:`nnhal.hal`, HIDL 1.3's
shapes) and never raise for a status: the AIDL face converts at the boundary
(``nnhal.hal.aidl.convert``), turns a ``ServiceSpecificError`` into its
status, a ``TransactionError`` into DEVICE_UNAVAILABLE for a dead object
(binder's DEAD_OBJECT) or GENERAL_FAILURE, an ``ExecutionResult`` with
``outputSufficientSize`` false into OUTPUT_INSUFFICIENT_SIZE, nanoseconds into
the canonical microseconds.  Deadlines are steady-clock nanoseconds
(``time.monotonic_ns()``) or None, on both.

The AIDL burst (:class:`AidlBurst`) names each request memory by a token it
keeps per memory (what it refers to: ``nnhal.service.slots.memory_key``), at
most :data:`BURST_TOKENS`, and releases the least recently used one with
``IBurst.releaseMemoryResource``, as Android's burst keeps its memory cache.
A reusable execution (:meth:`Prepared.reusable`) is an ``IExecution`` from
AIDL version 4 on, the request sent again each time before it.
"""

from __future__ import annotations

import collections
from typing import Any, Callable, Optional, Sequence

import nnhal
from nnhal import hal
from nnhal.hal import aidl
from nnhal.hal import convert as hidl_convert
from nnhal.hal.aidl.convert import InvalidArgument, from_canonical, to_canonical
from nnhal.hal.aidl.interfaces import ServiceSpecificError, TransactionError
from nnhal.service.slots import memory_key

S = hal.ErrorStatus
V = hal.HalVersion
BURST_TOKENS = 64
NO_REASON = "getSupportedOperations answered false (the device gives no reason)"

__all__ = ["AidlFace", "BURST_TOKENS", "Face", "HidlFace", "Prepared", "interface_name", "model_version", "open_face"]


def interface_name(version: V) -> str:
    """An interface version as the reports name it: "HAL 1.3" (HIDL), "AIDL v2"."""
    return V(version).label


def _aidl_status(e: Exception) -> S:
    """The canonical status of a failed AIDL call."""
    if isinstance(e, ServiceSpecificError):
        return S(e.status) if e.status in S._value2member_map_ else S.GENERAL_FAILURE
    if isinstance(e, TransactionError) and e.status == TransactionError.DEAD_OBJECT:
        return S.DEVICE_UNAVAILABLE
    return S.GENERAL_FAILURE  # NOTE: a transaction that failed otherwise, or junk the boundary cannot convert


_AIDL_ERRORS = (ServiceSpecificError, TransactionError, InvalidArgument)


def _ns(value: Optional[int]) -> int:
    return -1 if value is None else int(value)


class Face:
    """A device through one of its interfaces (see the module doc): ``name``,
    ``version`` (the interface version it is spoken at), ``device`` (the
    ``IDevice`` object); ``owns``: the face opened that object (a service
    connection), and :meth:`close` closes it."""

    name: str
    version: V
    device: Any
    owns: bool = False

    def close(self) -> None:
        """Closes the connection the face opened (a service's; nothing for an in-process device or a device
        the caller gave)."""
        close = getattr(self.device, "close", None) if self.owns else None
        if close is not None:
            self.owns = False
            close()

    @property
    def interface(self) -> str:
        """"HAL 1.3", "AIDL v2"."""
        return interface_name(self.version)

    def method(self, base: str) -> str:
        """The name of the method ``base`` this face calls: "prepareModel_1_2", "getSupportedOperations_1_3",
        "IDevice.prepareModel (AIDL v2)"."""
        v = self.version
        if v >= V.AIDL_V1:
            return f"IDevice.{base} ({self.interface})"
        return base if v == V.V1_0 else f"{base}_1_{int(v)}"

    def capabilities(self) -> tuple[S, Optional[hal.Capabilities]]:
        raise NotImplementedError

    def supported(self, model: hal.Model) -> tuple[S, list[bool], list[str]]:
        """(status, one bool per main operation, why each refused one is: "" where supported)."""
        raise NotImplementedError

    def extensions(self) -> tuple[S, list[hal.Extension]]:
        raise NotImplementedError

    def cache_files(self) -> tuple[S, int, int]:
        raise NotImplementedError

    def version_string(self) -> str:
        """The driver's version string ("" when the device does not give it)."""
        raise NotImplementedError

    def prepare(self, model: hal.Model, preference: hal.ExecutionPreference, priority: hal.Priority,
                deadline_ns: Optional[int], model_cache: Sequence[int], data_cache: Sequence[int], token: bytes,
                timeout: Optional[float] = None) -> tuple[S, Optional["Prepared"]]:
        """The prepared model (cache files are descriptors the call does not keep)."""
        raise NotImplementedError

    def prepare_from_cache(self, deadline_ns: Optional[int], model_cache: Sequence[int], data_cache: Sequence[int],
                           token: bytes, timeout: Optional[float] = None) -> tuple[S, Optional["Prepared"]]:
        raise NotImplementedError

    def allocate(self, desc: hal.BufferDesc, prepared: Sequence["Prepared"], input_roles: Sequence[hal.BufferRole],
                 output_roles: Sequence[hal.BufferRole]) -> tuple[S, Optional["Buffer"], int]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} {self.interface}>"


class Prepared:
    """A prepared model through its device's face; ``raw`` is the interface object."""

    raw: Any
    version: V

    def execute(self, request: hal.Request, measure: bool, deadline_ns: Optional[int],
                loop_ns: Optional[int]) -> tuple:
        """(status, output shapes, timing) of a synchronous execution."""
        raise NotImplementedError

    def execute_async(self, request: hal.Request, measure: bool, deadline_ns: Optional[int],
                      loop_ns: Optional[int], timeout: Optional[float] = None) -> tuple:
        """The same, launched and waited for (AIDL has no asynchronous execution: Android's runtime runs a
        synchronous one on its own thread; so does the caller's ``Event``)."""
        return self.execute(request, measure, deadline_ns, loop_ns)

    def execute_fenced(self, request: hal.Request, wait_for: Sequence[hal.Handle], measure: bool,
                       deadline_ns: Optional[int], loop_ns: Optional[int],
                       duration_ns: Optional[int]) -> tuple[S, Optional[hal.Handle], Optional[Callable[[], tuple]]]:
        """(status, sync fence (the caller's), info) where ``info()`` is (status, launched timing, fenced timing)."""
        raise NotImplementedError

    def burst(self, timeout: Optional[float] = None) -> tuple[S, Any]:
        """(status, a burst) whose ``execute(request, measure, deadline_ns, loop_ns)`` answers as
        :meth:`execute` and ``close()`` ends it."""
        raise NotImplementedError

    def reusable(self, request: hal.Request, measure: bool, loop_ns: Optional[int]) -> tuple[S, Any]:
        """(status, an execution of ``request``) whose ``execute(deadline_ns)`` answers as :meth:`execute`:
        the request validated once (AIDL version 4's ``IExecution``), else sent again each time."""
        return S.NONE, _Resent(self, request, measure, loop_ns)


class Buffer:
    """A device buffer (``IDevice.allocate``) through its device's face."""

    def copy_from(self, memory: hal.Memory, dimensions: Sequence[int]) -> S:
        raise NotImplementedError

    def copy_to(self, memory: hal.Memory) -> S:
        raise NotImplementedError


class _Resent:
    def __init__(self, prepared: Prepared, request: hal.Request, measure: bool, loop_ns: Optional[int]):
        self.prepared, self.request, self.measure, self.loop_ns = prepared, request, measure, loop_ns

    def execute(self, deadline_ns: Optional[int] = None) -> tuple:
        return self.prepared.execute(self.request, self.measure, deadline_ns, self.loop_ns)

    def close(self) -> None:
        self.request = None


# --------------------------------------------------------------------------
# HIDL


class HidlFace(Face):
    """A HIDL ``IDevice`` at ``version`` (1.0-1.3): the methods of that version (``prepareModel``,
    ``_1_1``, ``_1_2``, ``_1_3``; the model converted down), 1.3's for everything 1.0-1.2 lacks."""

    def __init__(self, device: Any, name: str = "", version: V = V.V1_3, owns: bool = False):
        self.device, self.name = device, name or getattr(device, "name", type(device).__name__)
        self.version = min(V(version), V.V1_3)
        self.owns = owns

    def capabilities(self) -> tuple[S, Optional[hal.Capabilities]]:
        status, caps = self.device.getCapabilities_1_3()
        return S(status), caps

    def supported(self, model: hal.Model) -> tuple[S, list[bool], list[str]]:
        v = self.version
        if v == V.V1_3:
            status, flags, reasons = nnhal.supported_operations(self.device, model)
            return S(status), flags, reasons
        method, conv = {V.V1_0: ("getSupportedOperations", hidl_convert.convert_to_v1_0),
                        V.V1_1: ("getSupportedOperations_1_1", hidl_convert.convert_to_v1_1),
                        V.V1_2: ("getSupportedOperations_1_2", hidl_convert.convert_to_v1_2)}[v]
        status, flags = getattr(self.device, method)(conv(model))
        flags = [bool(f) for f in flags]
        return S(status), flags, ["" if f else f"{method} answered false" for f in flags]

    def extensions(self) -> tuple[S, list[hal.Extension]]:
        status, exts = self.device.getSupportedExtensions()
        return S(status), list(exts or [])

    def cache_files(self) -> tuple[S, int, int]:
        status, n_model, n_data = self.device.getNumberOfCacheFilesNeeded()
        return S(status), int(n_model), int(n_data)

    def version_string(self) -> str:
        status, version = self.device.getVersionString()
        return str(version) if status == S.NONE else ""

    def prepare(self, model: hal.Model, preference: hal.ExecutionPreference, priority: hal.Priority,
                deadline_ns: Optional[int], model_cache: Sequence[int], data_cache: Sequence[int], token: bytes,
                timeout: Optional[float] = None) -> tuple[S, Optional[Prepared]]:
        cb = hal.PreparedModelCallback()
        v, d = self.version, self.device
        if v == V.V1_0:
            launch = d.prepareModel(hidl_convert.convert_to_v1_0(model), cb)
        elif v == V.V1_1:
            launch = d.prepareModel_1_1(hidl_convert.convert_to_v1_1(model), preference, cb)
        elif v == V.V1_2:
            launch = d.prepareModel_1_2(hidl_convert.convert_to_v1_2(model), preference, _handles(model_cache),
                                        _handles(data_cache), token, cb)
        else:
            launch = d.prepareModel_1_3(model, preference, priority, _time_point(deadline_ns), _handles(model_cache),
                                        _handles(data_cache), token, cb)
        return self._prepared(launch, cb, timeout)

    def prepare_from_cache(self, deadline_ns: Optional[int], model_cache: Sequence[int], data_cache: Sequence[int],
                           token: bytes, timeout: Optional[float] = None) -> tuple[S, Optional[Prepared]]:
        cb = hal.PreparedModelCallback()
        if self.version == V.V1_2:
            launch = self.device.prepareModelFromCache(_handles(model_cache), _handles(data_cache), token, cb)
        else:
            launch = self.device.prepareModelFromCache_1_3(_time_point(deadline_ns), _handles(model_cache),
                                                           _handles(data_cache), token, cb)
        return self._prepared(launch, cb, timeout)

    def _prepared(self, launch: Any, cb: hal.PreparedModelCallback,
                  timeout: Optional[float]) -> tuple[S, Optional[Prepared]]:
        if launch != S.NONE:
            return S(launch), None
        return _wait_prepared(cb, timeout, lambda raw: HidlPrepared(raw, self.version))

    def allocate(self, desc: hal.BufferDesc, prepared: Sequence[Prepared], input_roles: Sequence[hal.BufferRole],
                 output_roles: Sequence[hal.BufferRole]) -> tuple[S, Optional[Buffer], int]:
        status, buffer, token = self.device.allocate(desc, [p.raw for p in prepared], list(input_roles),
                                                     list(output_roles))
        if status != S.NONE or buffer is None:
            return S(status) if status != S.NONE else S.GENERAL_FAILURE, None, 0
        return S.NONE, _HidlBuffer(buffer), int(token)


def _wait_prepared(cb: Any, timeout: Optional[float], wrap: Callable[[Any], Prepared]) -> tuple[S, Optional[Prepared]]:
    """What a preparation's callback was told: the prepared model wrapped, or the failure's status."""
    status, prepared = cb.wait(timeout)
    if status != S.NONE or prepared is None:
        return S(status) if status != S.NONE else S.GENERAL_FAILURE, None
    return S.NONE, wrap(prepared)


def _handles(fds: Sequence[int]) -> list[hal.Handle]:
    return [hal.Handle(fds=[fd]) for fd in fds]


def _time_point(ns: Optional[int]) -> hal.OptionalTimePoint:
    return hal.OptionalTimePoint(nanosecondsSinceEpoch=ns)


def _duration(ns: Optional[int]) -> hal.OptionalTimeoutDuration:
    return hal.OptionalTimeoutDuration(nanoseconds=ns)


class HidlPrepared(Prepared):
    def __init__(self, raw: Any, version: V = V.V1_3):
        self.raw, self.version = raw, version

    def execute(self, request: hal.Request, measure: bool, deadline_ns: Optional[int],
                loop_ns: Optional[int]) -> tuple:
        # NOTE: the argument objects made here, not through _measure / _time_point / _duration: the
        # per-execution path of every in-process HIDL session; "none" (the common case) is one object of
        # this module's, never changed (a HAL method reads its arguments, by value, and changes none)
        return self.raw.executeSynchronously_1_3(
            request, _YES if measure else _NO,
            _NO_TIME_POINT if deadline_ns is None else hal.OptionalTimePoint(deadline_ns),
            _NO_DURATION if loop_ns is None else hal.OptionalTimeoutDuration(loop_ns))

    def execute_async(self, request: hal.Request, measure: bool, deadline_ns: Optional[int],
                      loop_ns: Optional[int], timeout: Optional[float] = None) -> tuple:
        cb = hal.ExecutionCallback()
        launch = self.raw.execute_1_3(request, _measure(measure), _time_point(deadline_ns), _duration(loop_ns), cb)
        if launch != S.NONE:
            return S(launch), [], hal.Timing()
        return cb.wait(timeout)

    def execute_fenced(self, request: hal.Request, wait_for: Sequence[hal.Handle], measure: bool,
                       deadline_ns: Optional[int], loop_ns: Optional[int],
                       duration_ns: Optional[int]) -> tuple[S, Optional[hal.Handle], Optional[Callable[[], tuple]]]:
        status, fence, cb = self.raw.executeFenced(request, list(wait_for), _measure(measure),
                                                   _time_point(deadline_ns), _duration(loop_ns),
                                                   _duration(duration_ns))
        return S(status), fence, (cb.getExecutionInfo if cb is not None else None)

    def burst(self, timeout: Optional[float] = None) -> tuple[S, Any]:
        from nnhal.runtime.burst import BurstController

        status, controller = BurstController.create(self.raw, timeout=timeout)
        return S(status), (_HidlBurst(controller) if controller is not None else None)


class _HidlBurst:
    """The 1.2 burst (fast message queues): no deadline, no loop timeout."""

    def __init__(self, controller: Any):
        self.controller = controller

    def execute(self, request: hal.Request, measure: bool, deadline_ns: Optional[int] = None,
                loop_ns: Optional[int] = None) -> tuple:
        return self.controller.execute(request, _measure(measure))

    def close(self) -> None:
        self.controller.close()


class _HidlBuffer(Buffer):
    def __init__(self, raw: Any):
        self.raw = raw

    def copy_from(self, memory: hal.Memory, dimensions: Sequence[int]) -> S:
        return S(self.raw.copyFrom(memory, list(dimensions)))

    def copy_to(self, memory: hal.Memory) -> S:
        return S(self.raw.copyTo(memory))


_YES, _NO = hal.MeasureTiming.YES, hal.MeasureTiming.NO
_NO_TIME_POINT, _NO_DURATION = hal.OptionalTimePoint(), hal.OptionalTimeoutDuration()


def _measure(measure: bool) -> hal.MeasureTiming:
    return hal.MeasureTiming.YES if measure else hal.MeasureTiming.NO


# --------------------------------------------------------------------------
# AIDL


class AidlFace(Face):
    """An AIDL ``IDevice`` (its ``getInterfaceVersion()`` is the face's version); ``reasons``: an
    nnhal ``INnhalDevice`` of the same device asked why an operation is refused (nnhal's addition, a
    1.3 model only), when there is one."""

    def __init__(self, device: Any, name: str = "", reasons: Any = None, owns: bool = False):
        self.device, self.name = device, name or type(device).__name__
        self.version = V(V.AIDL_V1 + int(device.getInterfaceVersion()) - 1)
        self.reasons = reasons if isinstance(reasons, hal.INnhalDevice) else None
        self.owns = owns

    def capabilities(self) -> tuple[S, Optional[hal.Capabilities]]:
        try:
            return S.NONE, to_canonical(self.device.getCapabilities())
        except _AIDL_ERRORS as e:
            return _aidl_status(e), None

    def supported(self, model: hal.Model) -> tuple[S, list[bool], list[str]]:
        try:
            flags = [bool(f) for f in self.device.getSupportedOperations(from_canonical(model))]
        except _AIDL_ERRORS as e:
            return _aidl_status(e), [], []
        reasons = [""] * len(flags)
        if not all(flags) and self.reasons is not None:
            st, got = self.reasons.nnhal_getSupportedOperationsReasons(model)
            if st == S.NONE and len(got) == len(flags):
                reasons = list(got)
        why = f"getSupportedOperations ({self.interface}) answered false (the device gives no reason)"
        return S.NONE, flags, [("" if ok else r or why) for ok, r in zip(flags, reasons)]

    def extensions(self) -> tuple[S, list[hal.Extension]]:
        try:
            return S.NONE, list(self.device.getSupportedExtensions())
        except _AIDL_ERRORS as e:
            return _aidl_status(e), []

    def cache_files(self) -> tuple[S, int, int]:
        try:
            n = self.device.getNumberOfCacheFilesNeeded()
        except _AIDL_ERRORS as e:
            return _aidl_status(e), 0, 0
        return S.NONE, int(n.numModelCache), int(n.numDataCache)

    def version_string(self) -> str:
        try:
            return str(self.device.getVersionString())
        except _AIDL_ERRORS:
            return ""

    def prepare(self, model: hal.Model, preference: hal.ExecutionPreference, priority: hal.Priority,
                deadline_ns: Optional[int], model_cache: Sequence[int], data_cache: Sequence[int], token: bytes,
                timeout: Optional[float] = None) -> tuple[S, Optional[Prepared]]:
        cb = aidl.PreparedModelCallback()
        try:
            self.device.prepareModel(from_canonical(model), preference, priority, _ns(deadline_ns), list(model_cache),
                                     list(data_cache), token, cb)
        except _AIDL_ERRORS as e:
            return _aidl_status(e), None
        return self._prepared(cb, timeout)

    def prepare_from_cache(self, deadline_ns: Optional[int], model_cache: Sequence[int], data_cache: Sequence[int],
                           token: bytes, timeout: Optional[float] = None) -> tuple[S, Optional[Prepared]]:
        cb = aidl.PreparedModelCallback()
        try:
            self.device.prepareModelFromCache(_ns(deadline_ns), list(model_cache), list(data_cache), token, cb)
        except _AIDL_ERRORS as e:
            return _aidl_status(e), None
        return self._prepared(cb, timeout)

    def _prepared(self, cb: Any, timeout: Optional[float]) -> tuple[S, Optional[Prepared]]:
        return _wait_prepared(cb, timeout, lambda raw: AidlPrepared(raw, self.version))

    def allocate(self, desc: hal.BufferDesc, prepared: Sequence[Prepared], input_roles: Sequence[hal.BufferRole],
                 output_roles: Sequence[hal.BufferRole]) -> tuple[S, Optional[Buffer], int]:
        try:
            got = self.device.allocate(desc, [aidl.IPreparedModelParcel(p.raw) for p in prepared],
                                       from_canonical(list(input_roles)), from_canonical(list(output_roles)))
        except _AIDL_ERRORS as e:
            return _aidl_status(e), None, 0
        return S.NONE, _AidlBuffer(got.buffer), int(got.token)


def _result(result: Any) -> tuple:
    """(status, output shapes, canonical timing) of an ``ExecutionResult``."""
    if not result.outputSufficientSize:
        return S.OUTPUT_INSUFFICIENT_SIZE, list(result.outputShapes), hal.Timing()
    return S.NONE, list(result.outputShapes), to_canonical(result.timing)


class AidlPrepared(Prepared):
    def __init__(self, raw: Any, version: V):
        self.raw, self.version = raw, version

    def execute(self, request: hal.Request, measure: bool, deadline_ns: Optional[int],
                loop_ns: Optional[int]) -> tuple:
        try:
            return _result(self.raw.executeSynchronously(from_canonical(request), bool(measure), _ns(deadline_ns),
                                                         _ns(loop_ns)))
        except _AIDL_ERRORS as e:
            return _aidl_status(e), [], hal.Timing()

    def execute_fenced(self, request: hal.Request, wait_for: Sequence[hal.Handle], measure: bool,
                       deadline_ns: Optional[int], loop_ns: Optional[int],
                       duration_ns: Optional[int]) -> tuple[S, Optional[hal.Handle], Optional[Callable[[], tuple]]]:
        try:
            got = self.raw.executeFenced(from_canonical(request), [h.fds[0] for h in wait_for], bool(measure),
                                         _ns(deadline_ns), _ns(loop_ns), _ns(duration_ns))
        except _AIDL_ERRORS as e:
            return _aidl_status(e), None, None
        fence = hal.Handle(fds=[got.syncFence]) if got.syncFence is not None and got.syncFence >= 0 else None
        callback = got.callback
        return S.NONE, fence, ((lambda: _fenced_info(callback)) if callback is not None else None)

    def burst(self, timeout: Optional[float] = None) -> tuple[S, Any]:
        try:
            return S.NONE, AidlBurst(self.raw.configureExecutionBurst())
        except _AIDL_ERRORS as e:
            return _aidl_status(e), None

    def reusable(self, request: hal.Request, measure: bool, loop_ns: Optional[int]) -> tuple[S, Any]:
        if self.version < V.AIDL_V4:
            return super().reusable(request, measure, loop_ns)
        try:
            execution = self.raw.createReusableExecution(
                from_canonical(request), aidl.ExecutionConfig(measureTiming=bool(measure),
                                                              loopTimeoutDurationNs=_ns(loop_ns)))
        except _AIDL_ERRORS as e:
            return _aidl_status(e), None
        return S.NONE, _AidlExecution(execution)


def _fenced_info(callback: Any) -> tuple:
    launched, fenced = aidl.Timing(), aidl.Timing()
    try:
        status = callback.getExecutionInfo(launched, fenced)
    except _AIDL_ERRORS as e:
        return _aidl_status(e), hal.Timing(), hal.Timing()
    return S(status), to_canonical(launched), to_canonical(fenced)


class _AidlExecution:
    def __init__(self, raw: Any):
        self.raw = raw

    def execute(self, deadline_ns: Optional[int] = None) -> tuple:
        try:
            return _result(self.raw.executeSynchronously(_ns(deadline_ns)))
        except _AIDL_ERRORS as e:
            return _aidl_status(e), [], hal.Timing()

    def close(self) -> None:
        self.raw = None  # NOTE: an IExecution ends when its last reference goes, as a binder object


class AidlBurst:
    """``IBurst`` with the memory cache of the module doc: ``execute`` names each shared-memory pool
    by its token (-1 for a driver buffer's token pool or a memory that cannot be cached)."""

    def __init__(self, raw: Any, max_tokens: int = BURST_TOKENS):
        self.raw, self.max_tokens = raw, max_tokens
        self.tokens: collections.OrderedDict[tuple, int] = collections.OrderedDict()  # memory key -> token
        self.next_token = 0

    def _token(self, pool: hal.MemoryPool, in_use: set[int]) -> int:
        memory = pool.hidlMemory
        key = memory_key(memory) if memory is not None else None
        if key is None:
            return -1
        token = self.tokens.get(key)
        if token is not None:
            self.tokens.move_to_end(key)
            return token
        while len(self.tokens) >= self.max_tokens:
            old_key = next((k for k, t in self.tokens.items() if t not in in_use), None)
            if old_key is None:
                return -1  # NOTE: every cached memory is in this request: this one goes uncached
            old = self.tokens.pop(old_key)
            try:
                self.raw.releaseMemoryResource(old)
            except _AIDL_ERRORS:
                pass  # NOTE: a burst that is gone keeps nothing
        token, self.next_token = self.next_token, self.next_token + 1
        self.tokens[key] = token
        return token

    def execute(self, request: hal.Request, measure: bool, deadline_ns: Optional[int] = None,
                loop_ns: Optional[int] = None) -> tuple:
        in_use: set[int] = set()
        tokens = []
        for p in request.pools:
            t = self._token(p, in_use)
            in_use.add(t)
            tokens.append(t)
        try:
            return _result(self.raw.executeSynchronously(from_canonical(request), tokens, bool(measure),
                                                         _ns(deadline_ns), _ns(loop_ns)))
        except _AIDL_ERRORS as e:
            return _aidl_status(e), [], hal.Timing()

    def close(self) -> None:
        self.tokens.clear()
        self.raw = None  # NOTE: the burst (and the memories it keeps by token) ends with its last reference


class _AidlBuffer(Buffer):
    def __init__(self, raw: Any):
        self.raw = raw

    def copy_from(self, memory: hal.Memory, dimensions: Sequence[int]) -> S:
        try:
            self.raw.copyFrom(from_canonical(memory), list(dimensions))
        except _AIDL_ERRORS as e:
            return _aidl_status(e)
        return S.NONE

    def copy_to(self, memory: hal.Memory) -> S:
        try:
            self.raw.copyTo(from_canonical(memory))
        except _AIDL_ERRORS as e:
            return _aidl_status(e)
        return S.NONE


# --------------------------------------------------------------------------
# which face


def _aidl_version(version: V) -> int:
    return int(min(max(V(version), V.AIDL_V1), V.AIDL_V4) - V.AIDL_V1) + 1


def open_face(device: Any, version: V = V.AIDL_V4, name: str = "") -> Face:
    """The face to speak to ``device`` (a name, or an ``IDevice`` object of either interface) at
    ``version``: its AIDL face at that version when ``version`` is AIDL 1-4 and the device has one,
    else its HIDL face at ``min(version, 1.3)`` (see the module doc).  A face of a service connection it
    opened (a name, or the AIDL face of a HIDL service proxy) owns it: :meth:`Face.close` closes it.
    Raises LookupError for a name no device or service has."""
    if isinstance(device, Face):
        return device
    if isinstance(device, aidl.IDevice):
        return AidlFace(device, name)
    wants_aidl = version >= V.AIDL_V1
    if isinstance(device, str):
        if wants_aidl:
            face = _aidl_by_name(device, _aidl_version(version))
            if face is not None:
                return face
        return HidlFace(nnhal.open_device(device), device, version, owns=not nnhal.is_in_process(device))
    if wants_aidl:
        from nnhal.driver.device import Device
        from nnhal.service.client import RemoteDevice

        if isinstance(device, Device):  # NOTE: a front-end device serves both faces in process
            from nnhal.driver.aidl import AidlDevice

            return AidlFace(AidlDevice(device, _aidl_version(version)), name or device.name, reasons=device)
        if isinstance(device, RemoteDevice):
            face = _aidl_by_name(device.name, _aidl_version(version), hidl=device)
            if face is not None:
                return face
    return HidlFace(device, name, version)


def _aidl_by_name(name: str, version: int, hidl: Any = None) -> Optional[AidlFace]:
    """A device's AIDL face by name (in process or a running service); None when it has none."""
    import nnhal.aidl as aidl_api

    if nnhal.is_in_process(name):
        return AidlFace(aidl_api.get_device(name, version), name, reasons=nnhal.get_device(name))
    try:
        return AidlFace(aidl_api.connect(name, version), name, reasons=hidl, owns=True)
    except LookupError:
        raise  # NOTE: no such service: the caller's mistake, said as such
    except (OSError, TransactionError, ServiceSpecificError, ValueError):
        return None  # NOTE: a service with no AIDL face (or not this version): its HIDL face


def model_version(model: hal.Model) -> V:
    """The interface version ``model`` needs: 1.3 for a model HIDL 1.3 can carry (or one invalid at every
    version: the device will say so), else the first AIDL version that validates it (feature level 6
    for BATCH_MATMUL, PACK, RESHAPE of int32, ...)."""
    from nnhal.engine.validation import ValidationError, validate_operation

    need = V.V1_3
    for sg in [model.main, *model.referenced]:
        for op in sg.operations:
            for v in (need, *[x for x in V if x > need]):
                try:
                    validate_operation(model, sg, op, None, v)
                except ValidationError:
                    continue
                need = v
                break
    return need
