"""The two faces a conformance run judges a device through, behind one
interface (:class:`Face`), so that the runner and every VTS section are
written once: HAL 1.3 (:class:`HidlFace`: statuses returned, callbacks,
the fast-message-queue burst) and the stable AIDL
``android.hardware.neuralnetworks`` versions 1-4 (:class:`AidlFace`:
errors raised as ``ServiceSpecificError``, ``IBurst`` with memory
identifier tokens, reusable executions, the version-4 ``*WithConfig``
calls).

What differs between the faces is here and nowhere else: how a model is
asked about and prepared (:meth:`Face.supported`, :meth:`Face.prepare`,
:meth:`Face.prepare_from_cache`), how a request is executed in each
executor (:meth:`Face.execution`, the executor named by a mode), how memory
domains are used (:meth:`Face.allocate`, :meth:`Face.copy_from`,
:meth:`Face.copy_to`), and how an error status is read (returned, or
raised).  Everything a caller gives and gets is canonical (:mod:`nnhal.hal`:
``Model``, ``Request``, ``Memory``, ``Timing`` in microseconds with
``UINT64_MAX`` for none, ``ErrorStatus``): the AIDL face converts at its
boundary with the binding's own conversions (``nnhal.aidl.convert``), as a
client of the binding would.  Only public interfaces are used: a device is
what ``nnhal.open_device`` / ``nnhal.aidl.get_device`` give a user.

Executors (modes), as the VTS of each interface runs them:

* HIDL: ``sync`` (executeSynchronously_1_3), ``async`` (execute_1_3 and its
  callback), ``burst`` (``BurstController``, one per prepared model),
  ``fenced`` (executeFenced, then again waiting for the first one's fence);
* AIDL (GeneratedTestHarness.cpp's ``Executor`` x ``reusable`` x
  ``useConfig``): ``sync`` (executeSynchronously), ``burst`` (an ``IBurst``
  per prepared model; each request pool gets a memory identifier token
  0, 1, ... (-1 for a driver buffer), released after the execution),
  ``fenced`` (executeFenced, then again waiting for the first sync fence),
  ``reusable`` / ``reusable-fenced`` (``createReusableExecution``, then its
  ``executeSynchronously`` / ``executeFenced``: the same ``IExecution``
  each time the execution is run again), and from version 4 ``sync-config``,
  ``burst-config``, ``fenced-config`` (the ``*WithConfig`` calls with an
  ``ExecutionConfig`` and no hints).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import replace
from typing import Any, Callable, NamedTuple, Optional, Sequence

from nnhal import hal

S = hal.ErrorStatus
NO_TIMING = hal.Timing()
NO_TOKEN = bytes(32)
PREPARE_TIMEOUT_S = 120.0
EXECUTE_TIMEOUT_S = 120.0
FAST = hal.ExecutionPreference.FAST_SINGLE_ANSWER
MEDIUM = hal.Priority.MEDIUM
NO_REASON = "getSupportedOperations answered false (the device gives no reason)"

HIDL_MODES = ("sync", "async", "burst", "fenced")
AIDL_MODES = ("sync", "burst", "fenced", "reusable", "reusable-fenced")  # NOTE: versions 1-3 have no reusable
AIDL_CONFIG_MODES = ("sync-config", "burst-config", "fenced-config")  # version 4
FENCED_MODES = frozenset({"fenced", "reusable-fenced", "fenced-config"})
REUSABLE_MODES = frozenset({"reusable", "reusable-fenced"})


class Outcome(NamedTuple):
    """What one execution answered, canonical: ``status`` (NONE,
    OUTPUT_INSUFFICIENT_SIZE or the error), the output shapes, the timing
    (a fenced execution's: ``timingLaunched``) and, for an executor that has
    one (HIDL ``execute_1_3``), the launch status."""

    status: int
    shapes: list
    timing: hal.Timing
    launch: Optional[int] = None

    @property
    def consistent(self) -> bool:
        """The launch status, if any, agrees with the result: NONE (the error
        came later) or the same status."""
        return self.launch is None or self.launch == S.NONE or self.launch == self.status


class Prepared(NamedTuple):
    """A preparation: the launch status (AIDL: the status raised, NONE if
    none), the status notified and the prepared model (None unless NONE)."""

    launch: int
    status: int
    model: Any


class Execution:
    """One request on one executor, run as often as the caller asks
    (``run()``: an :class:`Outcome`); ``close()`` lets go of what it holds
    (a reusable execution).  A context manager."""

    def __init__(self, run: Callable[[], Outcome]):
        self._run = run

    def __call__(self) -> Outcome:
        return self._run()

    def close(self) -> None:
        pass

    def __enter__(self) -> "Execution":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Face(ABC):
    """A device as one interface shows it (see the module doc).  ``modes``:
    the executors a conformance run uses; ``all_modes``: every executor the
    face has (the VTS generated tests run them all); ``vts_prefix``: the VTS
    fixture name of the basic tests."""

    name: str
    modes: tuple[str, ...]
    all_modes: tuple[str, ...]
    vts_prefix: str
    method_suffix: str  # NOTE: of the methods messages name (HIDL: getSupportedOperations_1_3, prepareModel_1_3)
    # NOTE: whether a burst request may name a driver-allocated buffer (the 1.2 burst packet cannot)
    burst_takes_tokens: bool
    # NOTE: whether a cache "handle" may hold any number of fds (HIDL's hidl_handle; AIDL: one fd each)
    cache_handles_hold_fds: bool

    def __init__(self, device: Any):
        self.device = device
        self._burst: tuple[Any, Any] = (None, None)  # (the last prepared model a burst ran, its burst)

    # -- the device
    @abstractmethod
    def capabilities(self) -> tuple[int, hal.Capabilities]:
        ...

    @abstractmethod
    def version_string(self) -> tuple[int, str]:
        ...

    @abstractmethod
    def device_type(self) -> tuple[int, Any]:
        ...

    @abstractmethod
    def extensions(self) -> tuple[int, list]:
        ...

    @abstractmethod
    def cache_files(self) -> tuple[int, int, int]:
        """(status, number of model cache files, of data cache files)."""

    # -- models
    @abstractmethod
    def supported(self, model: hal.Model, reasons: bool = False) -> tuple[int, list[bool], list[str]]:
        """(status, one flag per main operation, why each refused one is
        refused: asked only with ``reasons``, else "")."""

    @abstractmethod
    def prepare(self, model: hal.Model, preference: int = FAST, priority: int = MEDIUM,
                deadline_ns: Optional[int] = None, model_cache: Sequence[hal.Handle] = (),
                data_cache: Sequence[hal.Handle] = (), token: bytes = NO_TOKEN, config: bool = False) -> Prepared:
        """Prepares ``model`` (``config``: through the face's
        prepareModelWithConfig, AIDL version 4); ``deadline_ns`` on the
        steady clock, None for none."""

    @abstractmethod
    def prepare_from_cache(self, deadline_ns: Optional[int], model_cache: Sequence[hal.Handle],
                           data_cache: Sequence[hal.Handle], token: bytes) -> Prepared:
        ...

    @property
    def has_config(self) -> bool:
        """Whether the face has the version-4 config calls."""
        return False

    @abstractmethod
    def too_new(self, version: Optional[hal.HalVersion]) -> str:
        """Why a vector model needing interface ``version`` (``VectorModel.version``;
        None: unknown) is not run through this face ("" when it is): as the AIDL
        VTS skips a model newer than the device's interface version."""

    # -- executions
    @abstractmethod
    def request(self, request: hal.Request,
                paddings: Optional[tuple[Sequence[int], Sequence[int]]] = None) -> Any:
        """The face's form of a canonical request (AIDL: each argument with its
        padding, inputs then outputs, when given)."""

    @abstractmethod
    def execution(self, prepared: Any, request: Any, mode: str, measure: bool, deadline_ns: Optional[int] = None,
                  loop_ns: Optional[int] = None, chain: bool = True) -> Execution:
        """``request`` (from :meth:`request`) on the executor ``mode``; a fenced
        one with ``chain`` runs again waiting for the first one's sync fence
        (GeneratedTestHarness), without it once (MemoryDomainTests)."""

    def execute(self, prepared: Any, request: Any, mode: str, measure: bool, deadline_ns: Optional[int] = None,
                loop_ns: Optional[int] = None, chain: bool = True) -> Outcome:
        """One run of :meth:`execution`."""
        with self.execution(prepared, request, mode, measure, deadline_ns, loop_ns, chain) as run:
            return run()

    @abstractmethod
    def close_bursts(self) -> None:
        """Ends the burst kept for the last prepared model (done after each model)."""

    # -- memory domains
    @abstractmethod
    def allocate(self, dims: Sequence[int], prepared_models: Sequence[Any], input_roles: Sequence[hal.BufferRole],
                 output_roles: Sequence[hal.BufferRole]) -> tuple[int, Any, int]:
        """(status, buffer or None, token or 0)."""

    @abstractmethod
    def copy_from(self, buffer: Any, memory: hal.Memory, dims: Sequence[int]) -> int:
        ...

    @abstractmethod
    def copy_to(self, buffer: Any, memory: hal.Memory) -> int:
        ...

    @abstractmethod
    def foreign_prepared_model(self) -> Any:
        """A prepared model of this face the device never made (VTS's
        InvalidPreparedModel: every method answers GENERAL_FAILURE)."""

    def close(self) -> None:
        """Lets go of the device (a service connection closes; an in-process driver stays)."""
        self.close_bursts()
        close = getattr(self.device, "close", None)  # NOTE: service proxies have close(); in-process devices not
        if close is not None:
            close()


def as_face(device: Any) -> Face:
    """``device`` itself when it is a :class:`Face`, the AIDL face of an AIDL
    ``IDevice``, else the HAL 1.3 face of an ``IDevice`` (what the sections
    were given before there were faces)."""
    if isinstance(device, Face):
        return device
    from nnhal.hal.aidl import interfaces as aidl_interfaces

    return AidlFace(device) if isinstance(device, aidl_interfaces.IDevice) else HidlFace(device)


def _fence_fd_valid(fd: Any) -> bool:
    return isinstance(fd, int) and not isinstance(fd, bool) and fd >= 0


# --------------------------------------------------------------------------
# HAL 1.3


class HidlFace(Face):
    """A HAL 1.3 ``IDevice`` (in process, a plugin, or a service proxy)."""

    name = "hidl"
    modes = all_modes = HIDL_MODES
    vts_prefix = "NeuralnetworksHidlTest"
    method_suffix = "_1_3"
    burst_takes_tokens = False
    cache_handles_hold_fds = True

    def capabilities(self) -> tuple[int, hal.Capabilities]:
        return self.device.getCapabilities_1_3()

    def version_string(self) -> tuple[int, str]:
        return self.device.getVersionString()

    def device_type(self) -> tuple[int, Any]:
        return self.device.getType()

    def extensions(self) -> tuple[int, list]:
        return self.device.getSupportedExtensions()

    def cache_files(self) -> tuple[int, int, int]:
        return self.device.getNumberOfCacheFilesNeeded()

    def device_status(self) -> Any:
        return self.device.getStatus()

    def too_new(self, version: Optional[hal.HalVersion]) -> str:
        if version is not None and version > hal.HalVersion.V1_3:
            return f"a model of {version.name}: HAL 1.3 has none of its operations or operand types"
        return ""

    def supported(self, model: hal.Model, reasons: bool = False) -> tuple[int, list[bool], list[str]]:
        if reasons:
            import nnhal

            return nnhal.supported_operations(self.device, model)
        status, flags = self.device.getSupportedOperations_1_3(model)
        return status, flags, [""] * len(flags)

    def prepare(self, model: hal.Model, preference: int = FAST, priority: int = MEDIUM,
                deadline_ns: Optional[int] = None, model_cache: Sequence[hal.Handle] = (),
                data_cache: Sequence[hal.Handle] = (), token: bytes = NO_TOKEN, config: bool = False) -> Prepared:
        cb = hal.PreparedModelCallback()
        launch = self.device.prepareModel_1_3(model, preference, priority, _time_point(deadline_ns),
                                              list(model_cache), list(data_cache), token, cb)
        status, prepared = cb.wait(PREPARE_TIMEOUT_S)
        return Prepared(launch, status, prepared)

    def prepare_from_cache(self, deadline_ns: Optional[int], model_cache: Sequence[hal.Handle],
                           data_cache: Sequence[hal.Handle], token: bytes) -> Prepared:
        cb = hal.PreparedModelCallback()
        launch = self.device.prepareModelFromCache_1_3(_time_point(deadline_ns), list(model_cache), list(data_cache),
                                                       token, cb)
        status, prepared = cb.wait(PREPARE_TIMEOUT_S)
        return Prepared(launch, status, prepared)

    def request(self, request: hal.Request,
                paddings: Optional[tuple[Sequence[int], Sequence[int]]] = None) -> hal.Request:
        return request  # NOTE: a 1.3 request has no padding

    def execution(self, prepared: Any, request: Any, mode: str, measure: bool, deadline_ns: Optional[int] = None,
                  loop_ns: Optional[int] = None, chain: bool = True) -> Execution:
        m = hal.MeasureTiming.YES if measure else hal.MeasureTiming.NO
        deadline = _time_point(deadline_ns)
        timeout = hal.OptionalTimeoutDuration(nanoseconds=loop_ns)
        if mode == "sync":
            return Execution(lambda: Outcome(*prepared.executeSynchronously_1_3(request, m, deadline, timeout)))
        if mode == "async":
            return Execution(lambda: self._async(prepared, request, m, deadline, timeout))
        if mode == "burst":
            return Execution(lambda: self._burst_run(prepared, request, m))
        if mode == "fenced":
            return Execution(lambda: _hidl_fenced(prepared, request, m, deadline, timeout, chain))
        raise ValueError(f"the HIDL face has no executor {mode!r} (it has {', '.join(self.all_modes)})")

    @staticmethod
    def _async(prepared: Any, request: hal.Request, measure: Any, deadline: Any, timeout: Any) -> Outcome:
        cb = hal.ExecutionCallback()
        launch = prepared.execute_1_3(request, measure, deadline, timeout, cb)
        status, shapes, timing = cb.wait(EXECUTE_TIMEOUT_S)
        return Outcome(status, shapes, timing, launch)

    def _burst_run(self, prepared: Any, request: hal.Request, measure: Any) -> Outcome:
        # NOTE: the 1.2 burst has no deadline and no loop timeout (an infinite loop ends by the default 2 s)
        from nnhal.runtime.burst import BurstController

        if self._burst[0] is not prepared:
            self.close_bursts()
            status, controller = BurstController.create(prepared, timeout=EXECUTE_TIMEOUT_S)
            if status != S.NONE:
                return Outcome(status, [], NO_TIMING)
            self._burst = (prepared, controller)
        return Outcome(*self._burst[1].execute(request, measure))

    def close_bursts(self) -> None:
        _, controller = self._burst
        self._burst = (None, None)
        if controller is not None:
            controller.close()

    def allocate(self, dims: Sequence[int], prepared_models: Sequence[Any], input_roles: Sequence[hal.BufferRole],
                 output_roles: Sequence[hal.BufferRole]) -> tuple[int, Any, int]:
        return self.device.allocate(hal.BufferDesc(dimensions=list(dims)), list(prepared_models), list(input_roles),
                                    list(output_roles))

    def copy_from(self, buffer: Any, memory: hal.Memory, dims: Sequence[int]) -> int:
        return buffer.copyFrom(memory, list(dims))

    def copy_to(self, buffer: Any, memory: hal.Memory) -> int:
        return buffer.copyTo(memory)

    def foreign_prepared_model(self) -> Any:
        return _ForeignHidlPreparedModel()


class _ForeignHidlPreparedModel(hal.IPreparedModel):
    def execute_1_3(self, *args: Any) -> Any:
        return S.GENERAL_FAILURE


def _time_point(deadline_ns: Optional[int]) -> hal.OptionalTimePoint:
    return hal.OptionalTimePoint() if deadline_ns is None else hal.OptionalTimePoint(nanosecondsSinceEpoch=deadline_ns)


def _hidl_fenced(prepared: Any, request: hal.Request, measure: Any, deadline: Any, timeout: Any,
                 chain: bool) -> Outcome:
    """(status, [], timingLaunched) of a fenced execution, as VTS runs it: with
    ``chain``, a second run waiting for the first one's fence."""
    from nnhal.platform import fence

    status, sync_fence, callback = prepared.executeFenced(request, [], measure, deadline, timeout,
                                                          hal.OptionalTimeoutDuration())
    fences = [sync_fence] if not fence.is_null(sync_fence) else []
    try:
        if status != S.NONE:
            if fences or callback is not None:
                return Outcome(S.GENERAL_FAILURE, [], NO_TIMING)  # an error must come without a fence or callback
            return Outcome(status, [], NO_TIMING)
        if fences and chain:
            first = callback
            status, second, callback = prepared.executeFenced(request, [sync_fence], measure, deadline, timeout,
                                                              hal.OptionalTimeoutDuration())
            if not fence.is_null(second):
                fences.append(second)
            if status != S.NONE:
                # NOTE: right only if the first run failed (its fence in an error state is INVALID_ARGUMENT)
                fence.sync_wait(sync_fence, EXECUTE_TIMEOUT_S)
                first_status = first.getExecutionInfo()[0] if first is not None else S.NONE
                return Outcome(first_status if first_status != S.NONE else S.GENERAL_FAILURE, [], NO_TIMING)
            if not fence.is_null(second):
                fence.sync_wait(second, EXECUTE_TIMEOUT_S)
        elif fences:
            fence.sync_wait(sync_fence, EXECUTE_TIMEOUT_S)
        if callback is None:
            return Outcome(S.GENERAL_FAILURE, [], NO_TIMING)
        status, timing_launched, _ = callback.getExecutionInfo()
        return Outcome(status, [], timing_launched)
    finally:
        for h in fences:
            fence.close(h)


# --------------------------------------------------------------------------
# stable AIDL, versions 1-4


class AidlFace(Face):
    """An ``aidl.IDevice`` (``nnhal.aidl.get_device``, a plugin's AIDL face
    or a service's), at the interface version it reports; ``reasons``: the
    same device's nnhal ``INnhalDevice`` (its HIDL face, in process), asked
    why an operation is refused when there is one (the AIDL interface has no
    such call)."""

    name = "aidl"
    vts_prefix = "NeuralNetworksAidlTest"
    method_suffix = ""
    burst_takes_tokens = True
    cache_handles_hold_fds = False

    def __init__(self, device: Any, reasons: Any = None):
        from nnhal import aidl

        super().__init__(device)
        self.aidl = aidl
        self.reasons = reasons if isinstance(reasons, hal.INnhalDevice) else None
        self.version = int(device.getInterfaceVersion())
        self.modes = AIDL_MODES if self.has_config else AIDL_MODES[:3]
        self.all_modes = (*self.modes, *AIDL_CONFIG_MODES) if self.has_config else self.modes

    @property
    def has_config(self) -> bool:
        return self.version >= 4

    def too_new(self, version: Optional[hal.HalVersion]) -> str:
        if version is not None and version > hal.HalVersion.AIDL_V1 + self.version - 1:
            return f"device interface version {self.version} is older than the model's {version.name} (as VTS, " \
                   f"skipped)"
        return ""

    def call(self, fn: Callable[..., Any], *args: Any) -> tuple[int, Any]:
        """(NONE, what ``fn`` returns), or (the status, None) of the
        ServiceSpecificError it raises: how an AIDL error status is read."""
        try:
            return S.NONE, fn(*args)
        except self.aidl.ServiceSpecificError as e:
            return e.status, None

    # -- the device
    def capabilities(self) -> tuple[int, hal.Capabilities]:
        status, caps = self.call(self.device.getCapabilities)
        return status, self.aidl.convert.to_canonical(caps) if caps is not None else hal.Capabilities()

    def version_string(self) -> tuple[int, str]:
        status, version = self.call(self.device.getVersionString)
        return status, version or ""

    def device_type(self) -> tuple[int, Any]:
        return self.call(self.device.getType)

    def extensions(self) -> tuple[int, list]:
        status, extensions = self.call(self.device.getSupportedExtensions)
        return status, extensions or []

    def cache_files(self) -> tuple[int, int, int]:
        status, n = self.call(self.device.getNumberOfCacheFilesNeeded)
        return (status, 0, 0) if n is None else (status, n.numModelCache, n.numDataCache)

    # -- models
    def model(self, model: hal.Model) -> Any:
        """The AIDL form of a canonical model, whatever its values: a type AIDL
        cannot carry as an enum (VTS's mutations send -1) is written in as the
        int32 it is, as VTS's static_cast does."""
        convert = self.aidl.convert
        try:
            return convert.from_canonical(model)
        except convert.InvalidArgument:
            pass
        bad: dict[tuple[str, int], int] = {}
        fixed = replace(model, main=_retyped(model.main, bad, "operand"))
        fixed = replace(fixed, main=_retyped(fixed.main, bad, "operation"))
        out = convert.from_canonical(fixed)
        for (kind, k), t in bad.items():
            (out.main.operands if kind == "operand" else out.main.operations)[k].type = _int32(t)
        return out

    def supported(self, model: hal.Model, reasons: bool = False) -> tuple[int, list[bool], list[str]]:
        status, flags = self.call(self.device.getSupportedOperations, self.model(model))
        flags = [bool(f) for f in flags or []]
        why = [""] * len(flags)
        if reasons and not all(flags) and self.reasons is not None:
            import nnhal

            st, _, got = nnhal.supported_operations(self.reasons, model)
            if st == S.NONE and len(got) == len(flags):
                why = list(got)
        return status, flags, [("" if ok or not reasons else w or NO_REASON) for ok, w in zip(flags, why)]

    def prepare(self, model: hal.Model, preference: int = FAST, priority: int = MEDIUM,
                deadline_ns: Optional[int] = None, model_cache: Sequence[hal.Handle] = (),
                data_cache: Sequence[hal.Handle] = (), token: bytes = NO_TOKEN, config: bool = False) -> Prepared:
        a = self.aidl
        cb = a.PreparedModelCallback()
        dl = -1 if deadline_ns is None else deadline_ns
        mc, dc = _fds(model_cache), _fds(data_cache)
        if config:
            cfg = a.PrepareModelConfig(preference=preference, priority=priority, deadlineNs=dl, modelCache=mc,
                                       dataCache=dc, cacheToken=token)
            launch, _ = self.call(self.device.prepareModelWithConfig, self.model(model), cfg, cb)
        else:
            launch, _ = self.call(self.device.prepareModel, self.model(model), preference, priority, dl, mc, dc,
                                   token, cb)
        # NOTE: the callback is notified exactly once, also when the launch raised (IDevice.aidl, and VTS waits)
        status, prepared = cb.wait(PREPARE_TIMEOUT_S)
        return Prepared(launch, status, prepared)

    def prepare_from_cache(self, deadline_ns: Optional[int], model_cache: Sequence[hal.Handle],
                           data_cache: Sequence[hal.Handle], token: bytes) -> Prepared:
        cb = self.aidl.PreparedModelCallback()
        launch, _ = self.call(self.device.prepareModelFromCache, -1 if deadline_ns is None else deadline_ns,
                               _fds(model_cache), _fds(data_cache), token, cb)
        if launch != S.NONE:
            return Prepared(launch, launch, None)  # NOTE: as CompilationCachingTests: a raised launch is the answer
        status, prepared = cb.wait(PREPARE_TIMEOUT_S)
        return Prepared(launch, status, prepared)

    # -- executions
    def request(self, request: hal.Request, paddings: Optional[tuple[Sequence[int], Sequence[int]]] = None) -> Any:
        out = self.aidl.convert.from_canonical(request)
        if paddings is not None:
            for args, pads in zip((out.inputs, out.outputs), paddings):
                for arg, pad in zip(args, pads):
                    arg.location.padding = pad
        return out

    def _result(self, call: Callable[[], Any]) -> Outcome:
        """The outcome of a synchronous execution (an ``ExecutionResult``, or the error raised)."""
        status, result = self.call(call)
        if status != S.NONE:
            return Outcome(status, [], NO_TIMING)
        status = S.NONE if result.outputSufficientSize else S.OUTPUT_INSUFFICIENT_SIZE
        return Outcome(status, list(result.outputShapes), self.aidl.convert.to_canonical(result.timing))

    def execution(self, prepared: Any, request: Any, mode: str, measure: bool, deadline_ns: Optional[int] = None,
                  loop_ns: Optional[int] = None, chain: bool = True) -> Execution:
        a = self.aidl
        dl, loop = -1 if deadline_ns is None else deadline_ns, -1 if loop_ns is None else loop_ns
        config = a.ExecutionConfig(measureTiming=measure, loopTimeoutDurationNs=loop)
        if mode not in self.all_modes:
            raise ValueError(f"the AIDL face (version {self.version}) has no executor {mode!r} (it has "
                             f"{', '.join(self.all_modes)})")
        if mode == "sync":
            return Execution(lambda: self._result(lambda: prepared.executeSynchronously(request, measure, dl, loop)))
        if mode == "sync-config":
            return Execution(lambda: self._result(lambda: prepared.executeSynchronouslyWithConfig(request, config,
                                                                                                     dl)))
        if mode in ("burst", "burst-config"):
            return Execution(lambda: self._burst_run(prepared, request, measure, dl, loop,
                                                     config if mode == "burst-config" else None))
        if mode == "fenced":
            return Execution(lambda: self._fenced(
                lambda wait: prepared.executeFenced(request, wait, measure, dl, loop, -1), chain))
        if mode == "fenced-config":
            return Execution(lambda: self._fenced(
                lambda wait: prepared.executeFencedWithConfig(request, wait, config, dl, -1), chain))
        return _Reusable(self, prepared, request, config, dl, fenced=mode == "reusable-fenced")

    def _burst_of(self, prepared: Any) -> tuple[int, Any]:
        if self._burst[0] is not prepared:
            self.close_bursts()
            status, burst = self.call(prepared.configureExecutionBurst)
            if status != S.NONE:
                return status, None
            self._burst = (prepared, burst)
        return S.NONE, self._burst[1]

    def _burst_run(self, prepared: Any, request: Any, measure: bool, dl: int, loop: int, config: Any) -> Outcome:
        status, burst = self._burst_of(prepared)
        if burst is None:
            return Outcome(status, [], NO_TIMING)
        # NOTE: as GeneratedTestHarness: a token per memory pool (0, 1, ...), -1 for a driver buffer; each released
        # after the execution (so the next request's memories are not confused with these)
        slots, k = [], 0
        for pool in request.pools:
            slots.append(k if pool.pool is not None else -1)
            k += pool.pool is not None
        try:
            if config is None:
                return self._result(lambda: burst.executeSynchronously(request, slots, measure, dl, loop))
            return self._result(lambda: burst.executeSynchronouslyWithConfig(request, slots, config, dl))
        finally:
            for slot in slots:
                if slot >= 0:
                    burst.releaseMemoryResource(slot)

    def close_bursts(self) -> None:
        self._burst = (None, None)

    def _fenced(self, call: Callable[[list[int]], Any], chain: bool) -> Outcome:
        """A fenced execution as GeneratedTestHarness runs it: with ``chain``,
        a second one waiting for the first one's sync fence; the status and
        ``timingLaunched`` from the last one's callback."""
        from nnhal.platform import fence

        status, result = self.call(call, [])
        if status != S.NONE:
            return Outcome(status, [], NO_TIMING)
        fds = [result.syncFence] if _fence_fd_valid(result.syncFence) else []
        try:
            if fds and chain:
                first = result
                wait = os.dup(fds[0])
                try:
                    status, second = self.call(call, [wait])
                finally:
                    os.close(wait)  # NOTE: a ParcelFileDescriptor given is the caller's; the callee dups it
                if status != S.NONE:
                    # NOTE: right only if the first run failed (a fence in an error state is INVALID_ARGUMENT)
                    fence.sync_wait(hal.Handle(fds=[fds[0]]), EXECUTE_TIMEOUT_S)
                    first_status = self._info(first)[0]
                    return Outcome(first_status if first_status != S.NONE else S.GENERAL_FAILURE, [], NO_TIMING)
                result = second
                if _fence_fd_valid(result.syncFence):
                    fds.append(result.syncFence)
            if _fence_fd_valid(result.syncFence):
                fence.sync_wait(hal.Handle(fds=[result.syncFence]), EXECUTE_TIMEOUT_S)
            status, timing = self._info(result)
            return Outcome(status, [], timing)
        finally:
            for fd in fds:
                os.close(fd)

    def _info(self, result: Any) -> tuple[int, hal.Timing]:
        """(status, timingLaunched) of a fenced execution's callback (GENERAL_FAILURE when it has none)."""
        if result.callback is None:
            return S.GENERAL_FAILURE, NO_TIMING
        launched, fenced = self.aidl.Timing(), self.aidl.Timing()
        status = result.callback.getExecutionInfo(launched, fenced)
        return status, self.aidl.convert.to_canonical(launched)

    # -- memory domains
    def allocate(self, dims: Sequence[int], prepared_models: Sequence[Any], input_roles: Sequence[hal.BufferRole],
                 output_roles: Sequence[hal.BufferRole]) -> tuple[int, Any, int]:
        a = self.aidl
        status, got = self.call(self.device.allocate, a.BufferDesc(dimensions=list(dims)),
                                 [a.IPreparedModelParcel(pm) for pm in prepared_models],
                                 a.convert.from_canonical(list(input_roles)),
                                 a.convert.from_canonical(list(output_roles)))
        return (status, None, 0) if got is None else (status, got.buffer, got.token)

    def copy_from(self, buffer: Any, memory: hal.Memory, dims: Sequence[int]) -> int:
        return self.call(buffer.copyFrom, self.aidl.convert.from_canonical(memory), list(dims))[0]

    def copy_to(self, buffer: Any, memory: hal.Memory) -> int:
        return self.call(buffer.copyTo, self.aidl.convert.from_canonical(memory))[0]

    def foreign_prepared_model(self) -> Any:
        a = self.aidl

        class Foreign(a.IPreparedModel):
            """VTS's InvalidPreparedModel: every method raises GENERAL_FAILURE."""

            def _refuse(self, *args: Any) -> Any:
                raise a.ServiceSpecificError(S.GENERAL_FAILURE, "a prepared model no device made")

            executeSynchronously = executeFenced = configureExecutionBurst = _refuse
            createReusableExecution = executeSynchronouslyWithConfig = executeFencedWithConfig = _refuse

        return Foreign()


class _Reusable(Execution):
    """A reusable execution (AIDL version 4): created at the first run (a
    refused request is that run's outcome), run again on each call."""

    def __init__(self, face: AidlFace, prepared: Any, request: Any, config: Any, dl: int, fenced: bool):
        self.face, self.prepared, self.request, self.config, self.dl = face, prepared, request, config, dl
        self.fenced = fenced
        self.execution: Any = None
        super().__init__(self._once)

    def _once(self) -> Outcome:
        face = self.face
        if self.execution is None:
            status, self.execution = face.call(self.prepared.createReusableExecution, self.request, self.config)
            if status != S.NONE:
                return Outcome(status, [], NO_TIMING)
        execution = self.execution
        if self.fenced:
            # NOTE: as GeneratedTestHarness: no second run waiting on the fence (one run at a time per IExecution)
            return face._fenced(lambda wait: execution.executeFenced(wait, self.dl, -1), chain=False)
        return face._result(lambda: execution.executeSynchronously(self.dl))

    def close(self) -> None:
        self.execution = None


def _fds(handles: Sequence[hal.Handle]) -> list[int]:
    """Cache handles as the ParcelFileDescriptors AIDL takes (one fd each)."""
    out = []
    for h in handles:
        if len(h.fds) != 1:
            raise ValueError(f"an AIDL cache file is one descriptor; this handle has {len(h.fds)}")
        out.append(h.fds[0])
    return out


def _int32(t: int) -> int:
    t = int(t) & 0xFFFFFFFF
    return t - (1 << 32) if t >= 1 << 31 else t


def _retyped(sg: hal.Subgraph, bad: dict, kind: str) -> hal.Subgraph:
    """``sg`` with each operand (or operation) type AIDL cannot carry as it is
    replaced by 0, the original noted in ``bad``."""
    items = sg.operands if kind == "operand" else sg.operations
    out = []
    for k, x in enumerate(items):
        t = int(x.type)
        if not 0 <= t < 1 << 31 or t in _OEM[kind]:
            bad[(kind, k)] = t
            x = replace(x, type=0)
        out.append(x)
    return replace(sg, operands=out) if kind == "operand" else replace(sg, operations=out)


_OEM = {"operand": frozenset({int(hal.OperandType.OEM), int(hal.OperandType.TENSOR_OEM_BYTE)}),
        "operation": frozenset({int(hal.OperationType.OEM_OPERATION)})}


# --------------------------------------------------------------------------
# opening


HALS = ("hidl", "aidl")


def aidl_device(name: str) -> Any:
    """The AIDL ``IDevice`` of ``name``: the one place a conformance run gets a
    device's AIDL face (``nnhal.aidl.open_device``: in process for a name of
    the device table, a plugin or a spec, else the running service)."""
    from nnhal import aidl

    return aidl.open_device(name)
