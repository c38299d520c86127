"""``IPreparedModel`` of the shared front end: the canonical entry points
every interface's face calls (:meth:`PreparedModel.execute_sync`,
:meth:`PreparedModel.execute_fenced`, with times in nanoseconds), the HIDL
1.3 surface over them and the inherited 1.0-1.2 methods, which upgrade their
arguments and delegate (the AIDL face: ``nnhal.driver.aidl``)."""

from __future__ import annotations

import logging
import math
import time
from typing import Any, Optional, Protocol

from nnhal import hal
from nnhal.driver.backend import Compiled
from nnhal.driver.execution import Refusal, RequestPlan, RequestPools, Result, output_sizes_known, run_request
from nnhal.driver.guard import answer_bug, guards_itself, hal_methods
from nnhal.driver.pool_cache import PoolCache
from nnhal.driver.scheduler import Expired, QueueFull, Scheduler, missed_deadline_status
from nnhal.engine.validation import (
    ValidationError,
    loop_timeout_ns,
    operand_byte_size,
    own_request,
    request_from_key,
    request_key,
    validate_request,
    validate_timeout,
)
from nnhal.platform.memory import small_pages

log = logging.getLogger("nnhal.driver")

S = hal.ErrorStatus
_NONE = S.NONE  # NOTE: read per execution: a module name, not EnumType.__getattr__ (see execution.py)
_MEMO_SIZE = 16  # validated request structures remembered per prepared model


def deadline_ns(deadline: Any) -> Optional[int]:
    if deadline is None:
        return None
    if not isinstance(deadline, hal.OptionalTimePoint):
        raise ValidationError(f"deadline is not an OptionalTimePoint: {deadline!r}")
    ns = deadline.nanosecondsSinceEpoch
    if ns is None:
        return None
    if not isinstance(ns, int) or isinstance(ns, bool) or not 0 <= ns <= hal.UINT64_MAX:
        raise ValidationError(f"invalid deadline {ns!r} (a uint64 of nanoseconds on the steady clock)")
    return ns


def deadline_passed(ns: Optional[int]) -> bool:
    """True once the steady clock reaches deadline ``ns`` (None: no deadline)."""
    return ns is not None and time.monotonic_ns() >= ns


def _upgrade_request(request: Any) -> hal.Request:
    """The driver's own 1.3 copy of ``request`` (NOTE: HIDL passes it by value: a
    client that changes or reuses its request once the call returns changes
    nothing in the execution launched)."""
    if not isinstance(request, hal.Request):
        from nnhal.hal.convert import convert_to_v1_3

        try:
            request = convert_to_v1_3(request)
        except Exception as e:  # noqa: BLE001
            raise ValidationError(f"not a request: {e}") from None
    return own_request(request)


_TIME_POINT, _DURATION = hal.OptionalTimePoint, hal.OptionalTimeoutDuration
_LOOP_DEFAULT_NS = loop_timeout_ns(None)
_MEASURES = dict(hal.MeasureTiming._value2member_map_)  # NOTE: NO / YES by value (an IntEnum member is its value)
_new = object.__new__


LARGE_OPERAND_ELEMENTS = 1 << 16


def large_temporaries(model: hal.Model) -> bool:
    """Whether an execution of ``model`` may make numpy temporaries of 4 MiB and more (numpy advises those
    for huge pages): an operand of :data:`LARGE_OPERAND_ELEMENTS` elements or more (a kernel's float64
    copy, a convolution's patches: several times its bytes), or of dimensions unknown until it runs."""
    for sg in (model.main, *model.referenced):
        for o in sg.operands:
            dims = o.dimensions
            if dims and (0 in dims or math.prod(dims) >= LARGE_OPERAND_ELEMENTS):
                return True
    return False


class _Job:
    """One launched execution (validated, its pools open): called once to run
    it (on the thread holding a worker slot), or ``abandon``-ed when it will
    never run.  ``deadline_ns`` may be set before it runs (a fenced
    execution's duration, once its fences signal)."""

    __slots__ = ("prepared", "request", "plan", "pools", "measure", "deadline_ns", "loop_timeout_ns", "start_ns")

    # NOTE: made by PreparedModel._launch, every slot set there (object.__new__ and the stores, without the
    # class call and an __init__ frame: one job per execution)

    def abandon(self) -> None:
        self.pools.close()

    def __call__(self) -> Result:
        pm = self.prepared
        t0 = time.monotonic_ns()
        dl = self.deadline_ns
        pools = self.pools
        try:
            if pm.large_temporaries:
                # NOTE: numpy's huge-page advice off while it runs: where a first touch of a huge page stalls
                # (THP defrag = madvise, as here), an execution on a worker thread stalled 40-70 ms in 3 runs
                # of 40 (a 100000-step RNN: 20 ms deadline, stopped after 90 ms); 0 of 40 without
                with small_pages():
                    result = run_request(pm.model, pm.executor, self.request, pools, self.measure, dl,
                                         self.loop_timeout_ns, self.start_ns, self.plan)
            else:
                result = run_request(pm.model, pm.executor, self.request, pools, self.measure, dl,
                                     self.loop_timeout_ns, self.start_ns, self.plan)
        finally:
            pools.close()
        status = result.status
        if status == _NONE:
            took = time.monotonic_ns() - t0
            best = pm.best_ns
            if best is None or took < best:
                pm.best_ns = took
        elif (status == S.MISSED_DEADLINE_TRANSIENT or status == S.MISSED_DEADLINE_PERSISTENT) and dl is not None:
            result = Result(missed_deadline_status(self.start_ns, t0, dl, pm.best_ns))
        return result


class FrontEnd(Protocol):
    """What a prepared model needs of the device that prepared it (``driver.device.Device``)."""

    name: str
    scheduler: Scheduler
    pool_cache: PoolCache

    def buffer_lookup(self, prepared: "PreparedModel") -> Any: ...

    def save_to_cache(self, prepared: "PreparedModel", files: Any) -> hal.ErrorStatus: ...


@hal_methods
class PreparedModel(hal.IPreparedModel):
    """A model prepared by the CPU reference driver."""

    def __init__(self, device: FrontEnd, model: hal.Model, pools: list, executor: Compiled, version: int,
                 priority: int = hal.Priority.MEDIUM):
        self.device = device
        self.model = model
        self._pools = pools  # mapped model pools, alive as long as this model
        self.executor = executor
        self.version = version  # HAL version of the prepare call (1.0 .. 1.3)
        self.priority = int(priority)  # given at prepare time: every execution of this model runs with it
        self.best_ns: Optional[int] = None  # fastest successful execution seen (MISSED_DEADLINE_* choice)
        self._validated: dict[tuple, tuple] = {}  # request key -> (our copy, its plan) (_validated_request)
        self._last_validated: Optional[tuple] = None  # NOTE: (key, allow, (copy, plan)) of the last memo hit
        self.large_temporaries = large_temporaries(model)  # NOTE: executions run in memory.small_pages()

    def constant_pools(self) -> list:
        """The bytes of the model's pools (for the compilation cache)."""
        return [p.view for p in self._pools]

    @property
    def scheduler(self) -> Scheduler:
        return self.device.scheduler

    def run_job(self, job: Any) -> Result:
        """Runs a job of :meth:`_launch` through the driver's work queue in this
        model's priority and waits for it (synchronous executions, fenced
        executions, bursts): RESOURCE_EXHAUSTED_TRANSIENT when the queue is
        full, MISSED_DEADLINE_* when the deadline passes while queued."""
        try:
            return self.device.scheduler.call(self.priority, job, job.deadline_ns)
        except QueueFull as e:
            log.error("execution refused: %s", e)
            job.abandon()
            return Result(S.RESOURCE_EXHAUSTED_TRANSIENT)
        except Expired as e:
            log.error("execution: %s", e)
            job.abandon()
            return Result(missed_deadline_status(job.start_ns, time.monotonic_ns(), job.deadline_ns, self.best_ns))

    def _validated_request(self, request: Any, owned: bool,
                           allow_unspecified_output: bool) -> tuple[hal.Request, RequestPlan]:
        """The driver's own validated 1.3 copy of ``request`` and its plan
        (raises ValidationError).  NOTE: a request of the plain HAL classes is
        read once into its exact key (:func:`nnhal.engine.validation.request_key`); a
        key this model validated before is not validated again (validation is
        a function of the key and the model alone: the pools' file descriptors
        are checked when they are opened, every execution), and the copy is
        rebuilt from the key, so the client's later changes reach nothing.
        Bounded memo of (copy, plan) by key."""
        key = request_key(request)
        if key is None:
            request = request if owned and type(request) is hal.Request else _upgrade_request(request)
            validate_request(request, self.model, allow_unspecified_output)
            return request, RequestPlan(self.model, request)
        # NOTE: the last request remembered first: its key compared (as a dict lookup compares it) without
        # hashing the nested key; (key, allow, (copy, plan)), replaced as a whole (no lock needed)
        last = self._last_validated
        if last is not None and last[1] is allow_unspecified_output and last[0] == key:
            hit = last[2]
            if owned:
                return request, hit[1]
            if hit[0] is not None:
                return hit
        memo = self._validated
        mkey = (key, allow_unspecified_output)
        hit = memo.get(mkey)
        if hit is not None:
            copy, plan = hit
            if owned:
                return request, plan
            if copy is None:
                hit = memo[mkey] = (request_from_key(key), plan)
            self._last_validated = (key, allow_unspecified_output, hit)
            return hit
        copy = request if owned else request_from_key(key)
        validate_request(copy, self.model, allow_unspecified_output)
        plan = RequestPlan(self.model, copy)  # NOTE: plain values: nothing shared with an owned request
        if len(memo) >= _MEMO_SIZE:
            memo.clear()
        # NOTE: an owned request stays its builder's: only a copy of our own is remembered
        memo[mkey] = (None if owned else copy, plan)
        return copy, plan

    # ------------------------------------------------------------------
    def _launch(self, request: Any, measure: Any, dl: Optional[int], lt: int, allow_unspecified_output: bool = True,
                start_ns: Optional[int] = None, owned: bool = False, pool_cache: Any = None,
                validated: Optional[tuple] = None) -> tuple[Optional[Result], Any]:
        """Validates and maps; returns (error result, None) or (None, job).
        ``dl``: the deadline (ns on the steady clock, None: none); ``lt``: the
        loop timeout (ns, default and maximum applied: ``validate_timeout``);
        ``owned``: ``request`` is a 1.3 request the driver built itself (no
        copy needed); ``pool_cache``: see ``RequestPools``; ``validated``: the
        (request, plan) :meth:`validated_request` gave, not validated again."""
        start = time.monotonic_ns() if start_ns is None else start_ns
        try:
            request, plan = validated if validated is not None else \
                self._validated_request(request, owned, allow_unspecified_output)
            # NOTE: the member itself (one lookup, no Enum call per execution); a bad value is no key
            timing = _MEASURES.get(measure) if measure.__hash__ is not None else None
            if timing is None:
                raise ValidationError(f"invalid MeasureTiming {measure!r}")
            lookup = self.device.buffer_lookup(self) if plan.tokens else None  # NOTE: only token pools need it
            if pool_cache is None and not owned:
                # NOTE: the HAL methods called in process: the device keeps the memories mapped
                pool_cache = self.device.pool_cache
            pools = RequestPools(request, lookup, pool_cache, plan.out_pools, plan.pool_keys)
        except ValidationError as e:
            log.error("execution rejected: %s", e)
            return Refusal(e.status), None
        except Exception as e:  # malformed argument objects
            log.error("execution rejected: malformed argument (%s: %s)", type(e).__name__, e)
            return Refusal(S.INVALID_ARGUMENT), None
        if dl is not None:
            if time.monotonic_ns() >= dl:
                pools.close()
                return Result(S.MISSED_DEADLINE_PERSISTENT), None
            best = self.best_ns
            if best is not None and dl - start < best:
                # NOTE: the time left is shorter than this model's fastest execution so far:
                # it cannot be met, now or after a delay; answered without running it
                log.error("execution: %.3f ms left before the deadline, the model needs %.3f ms at best",
                          (dl - start) / 1e6, best / 1e6)
                pools.close()
                return Result(S.MISSED_DEADLINE_PERSISTENT), None
        job = _new(_Job)  # NOTE: see _Job
        job.prepared, job.request, job.plan, job.pools = self, request, plan, pools
        job.measure, job.deadline_ns, job.loop_timeout_ns, job.start_ns = timing, dl, lt, start
        return None, job

    # ------------------------------------------------------------------ the canonical entry points
    def execute_sync(self, request: Any, measure: Any, dl: Optional[int], lt: int, owned: bool = False,
                pool_cache: Any = None, validated: Optional[tuple] = None) -> Result:
        """One synchronous execution (every face's: HIDL 1.0-1.3, the AIDL
        face, bursts, reusable executions): validated (unless ``validated``),
        run through the work queue in this model's priority.  Never raises."""
        err, job = self._launch(request, measure, dl, lt, owned=owned, pool_cache=pool_cache, validated=validated)
        return err if err is not None else self.run_job(job)

    def validated_request(self, request: Any, owned: bool = False) -> tuple:
        """(the driver's own validated 1.3 copy of ``request`` (``request``
        itself when ``owned``), its plan) for executions to come
        (``validated=``): a reusable execution's request, validated once.
        Raises ValidationError."""
        return self._validated_request(request, owned, True)

    def _sync(self, request: Any, measure: Any, deadline: Any, loop_timeout: Any, owned: bool = False,
              pool_cache: Any = None) -> tuple:
        """:meth:`execute_sync` for the HIDL methods (their deadline and loop timeout as 1.3 safe_unions)."""
        try:
            err, job = self._launch(request, measure, deadline_ns(deadline), validate_timeout(loop_timeout),
                                    owned=owned, pool_cache=pool_cache)
        except ValidationError as e:  # NOTE: the deadline or the loop timeout (_launch returns its refusals)
            err = _refused(e)
        return (err if err is not None else self.run_job(job)).as_tuple()

    def _async(self, request: Any, measure: Any, deadline: Any, loop_timeout: Any, callback: Any,
               notify_name: str, owned: bool = False) -> S:
        if callback is None or not hasattr(callback, notify_name):
            log.error("execute: invalid callback")
            return S.INVALID_ARGUMENT
        notify = getattr(callback, notify_name)
        try:
            err, job = self._launch(request, measure, deadline_ns(deadline), validate_timeout(loop_timeout),
                                    owned=owned)
        except ValidationError as e:  # NOTE: the deadline or the loop timeout (_launch returns its refusals)
            err = _refused(e)
        if err is not None:
            _notify_exec(notify, notify_name, err)
            # NOTE: a request refused at launch returns its status too ("invoke the callback with the
            # appropriate ErrorStatus and return with the same ErrorStatus"); a deadline already
            # passed is the execution's outcome, told through the callback alone
            return err.status if err.status == S.INVALID_ARGUMENT or isinstance(err, Refusal) else S.NONE

        def work() -> None:
            _notify_exec(notify, notify_name, job())

        def expire(reason: str) -> None:
            log.error("execute: dropped while queued (%s)", reason)
            job.abandon()
            status = missed_deadline_status(job.start_ns, time.monotonic_ns(), job.deadline_ns, self.best_ns) \
                if reason == "deadline" else S.DEVICE_UNAVAILABLE
            _notify_exec(notify, notify_name, Result(status))

        if not self.scheduler.submit(self.priority, work, expire, job.deadline_ns):
            # NOTE: the spec's "task fails to launch" on a saturated driver: the
            # bounded queue answers RESOURCE_EXHAUSTED_TRANSIENT (launch and callback)
            log.error("execute: the driver's work queue is full")
            job.abandon()
            _notify_exec(notify, notify_name, Result(S.RESOURCE_EXHAUSTED_TRANSIENT))
            return S.RESOURCE_EXHAUSTED_TRANSIENT
        return S.NONE

    # ------------------------------------------------------------------ 1.0
    def execute(self, request: Any, callback: Any) -> S:
        status = self._async(request, hal.MeasureTiming.NO, None, None, callback, "notify")
        return v1_0_status(status)

    # ------------------------------------------------------------------ 1.2
    def execute_1_2(self, request: Any, measure: Any, callback: Any) -> S:
        return v1_0_status(self._async(request, measure, None, None, callback, "notify_1_2"))

    def executeSynchronously(self, request: Any, measure: Any) -> tuple:
        status, shapes, timing = self._sync(request, measure, None, None)
        return v1_0_status(status), shapes, timing

    def configureExecutionBurst(self, callback: Any, requestChannel: Any, resultChannel: Any) -> tuple:
        from nnhal.driver import burst

        return burst.configure(callback, requestChannel, resultChannel, self._execute_burst)

    def _execute_burst(self, request: hal.Request, measure: Any, pool_cache: Any = None) -> tuple:
        """One burst execution: the synchronous path on a request the burst
        server built (not copied again) over its pools kept open by slot; the
        1.2 burst has no deadline and no loop timeout (the default applies)."""
        return self.execute_sync(request, measure, None, loop_timeout_ns(None), owned=True, pool_cache=pool_cache).as_tuple()

    def saveToCache(self, modelCache: Any, dataCache: Any, token: Any) -> S:
        """The draft 1.2 ``saveToCache(handle modelCache, handle dataCache,
        token)``: the same files and format as prepareModel_1_3's caching."""
        from nnhal.driver import cache as driver_cache

        try:
            args = driver_cache.check_save_args([modelCache], [dataCache], token)
        except driver_cache.CacheError as e:
            log.error("saveToCache: %s", e)
            return e.status
        if args is None:
            return S.GENERAL_FAILURE
        try:
            return self.device.save_to_cache(self, args)
        finally:
            args.close()

    # ------------------------------------------------------------------ 1.3
    def execute_1_3(self, request: Any, measure: Any, deadline: Any, loopTimeoutDuration: Any, callback: Any) -> S:
        return self._async(request, measure, deadline, loopTimeoutDuration, callback, "notify_1_3")

    @guards_itself
    def executeSynchronously_1_3(self, request: Any, measure: Any, deadline: Any, loopTimeoutDuration: Any) -> tuple:
        # NOTE: _sync inline: the per-execution path of every in-process HIDL client, no call more than it
        # needs (the safe_unions' "none", the common case, read here; any other value checked by its function);
        # its own never-raise guard (guard.guards_itself), without the wrapper's frame
        try:
            try:
                dl = None if deadline.__class__ is _TIME_POINT and deadline.nanosecondsSinceEpoch is None \
                    else deadline_ns(deadline)
                lt = _LOOP_DEFAULT_NS if loopTimeoutDuration.__class__ is _DURATION and \
                    loopTimeoutDuration.nanoseconds is None else validate_timeout(loopTimeoutDuration)
                err, job = self._launch(request, measure, dl, lt)
            except ValidationError as e:
                err = _refused(e)
            r = err if err is not None else self.run_job(job)
            return r.status, r.outputShapes, r.timing  # NOTE: Result.as_tuple, without its call
        except Exception:  # noqa: BLE001 - the point: a HAL method never raises
            return answer_bug("executeSynchronously_1_3")

    # NOTE: the service's entry points (nnhal.service.server): the request was decoded from
    # the wire for this call and no one else holds it, so it is the driver's own already
    # (no by-value copy); the HAL methods above keep their signatures and copy.
    def executeSynchronously_1_3_owned(self, request: Any, measure: Any, deadline: Any,
                                       loopTimeoutDuration: Any, pool_cache: Any = None) -> tuple:
        return self._sync(request, measure, deadline, loopTimeoutDuration, owned=True, pool_cache=pool_cache)

    def execute_1_3_owned(self, request: Any, measure: Any, deadline: Any, loopTimeoutDuration: Any,
                          callback: Any) -> S:
        return self._async(request, measure, deadline, loopTimeoutDuration, callback, "notify_1_3", owned=True)

    def executeFenced(self, request: Any, waitFor: list, measure: Any, deadline: Any, loopTimeoutDuration: Any,
                      duration: Any) -> tuple:
        """HIDL 1.3: :meth:`execute_fenced` with the deadline, loop timeout and duration as 1.3 safe_unions."""
        try:
            dl, lt, duration_ns = deadline_ns(deadline), validate_timeout(loopTimeoutDuration), _duration_ns(duration)
        except ValidationError as e:
            log.error("executeFenced rejected: %s", e)
            return e.status, None, None
        return self.execute_fenced(request, waitFor, measure, dl, lt, duration_ns)

    def check_fenced(self, request: hal.Request) -> None:
        """What a fenced execution needs of a (1.3) request beyond what every
        execution does: outputs fully specified, non-zero-sized and each fitting
        its location (there is no OUTPUT_INSUFFICIENT_SIZE to report after the
        fence).  Raises ValidationError."""
        validate_request(request, self.model, allow_unspecified_output=False)
        self._check_fenced_outputs(request)

    def _check_fenced_outputs(self, request: hal.Request) -> None:
        """:meth:`check_fenced` of a request validated already (with unspecified outputs refused)."""
        if not output_sizes_known(self.model, request, self.device.buffer_lookup(self)):
            raise ValidationError("fenced execution needs fully specified, non-zero-sized outputs")
        _check_output_room(self.model, request)

    def execute_fenced(self, request: Any, waitFor: Any, measure: Any, dl: Optional[int], lt: int,
                       duration_ns: Optional[int], validated: Optional[tuple] = None,
                       pool_cache: Any = None) -> tuple:
        """The canonical fenced execution (every face's): validates and maps at
        once, then returns (NONE, a sync fence (a ``hal.Handle``, the
        caller's), an IFencedExecutionCallback) without waiting: the execution
        starts once every ``waitFor`` fence (``hal.Handle``s) is signaled
        (watched by nnhal.fence's watcher thread, not by the caller) and
        signals the returned fence when done, with an error if it failed
        (deadline, duration, a waitFor fence signaling an error, the execution
        itself); getExecutionInfo reports the status and timing then.
        ``dl`` / ``lt`` as :meth:`execute_sync`; ``duration_ns``: from when the
        fences signal (None: none); ``validated``: a request of
        :meth:`validated_request` that passed :meth:`check_fenced`."""
        from nnhal.platform import fence

        start = time.monotonic_ns()
        try:
            if measure not in hal.MeasureTiming._value2member_map_:
                raise ValidationError(f"invalid MeasureTiming {measure!r}")
            if validated is None:
                # NOTE: through the validated requests remembered (a request validated before is not validated
                # again, as every execution path): the driver's own copy and its plan, handed to _launch
                validated = self._validated_request(request, False, False)
                self._check_fenced_outputs(validated[0])
            req = validated[0]
            if waitFor is not None and not isinstance(waitFor, (list, tuple)):
                raise ValidationError("waitFor is not a list of handles")
            pending = []
            for k, h in enumerate(waitFor or []):
                if not isinstance(h, hal.Handle) or not fence.is_valid(h):
                    raise ValidationError(f"waitFor[{k}] is not a valid sync fence")
                st = fence.state(h)
                if st != fence.FenceState.SIGNALED and st != fence.FenceState.ACTIVE:
                    # NOTE: IPreparedModel.hal 1.3: INVALID_ARGUMENT "including fences in error states"
                    raise ValidationError(f"waitFor[{k}] is a fence in an error state ({st.name})")
                if st == fence.FenceState.ACTIVE:
                    pending.append(h)
        except ValidationError as e:
            log.error("executeFenced rejected: %s", e)
            return e.status, None, None
        except Exception as e:  # malformed argument objects
            log.error("executeFenced rejected: malformed argument (%s: %s)", type(e).__name__, e)
            return S.INVALID_ARGUMENT, None, None
        if deadline_passed(dl) or (not pending and duration_ns == 0):
            return S.MISSED_DEADLINE_PERSISTENT, None, None
        err, job = self._launch(req, measure, dl, lt, allow_unspecified_output=False, start_ns=start,
                                validated=validated, pool_cache=pool_cache)
        if err is not None:
            return err.status, None, None
        try:
            sync = fence.create()
            mine = fence.dup(sync)  # NOTE: ours to signal, whatever the client does with its handle
            waits = [fence.dup(h) for h in pending]  # NOTE: by value: the client may close its fences
        except (OSError, ValueError) as e:
            log.error("executeFenced: cannot create the sync fence: %s", e)
            job.abandon()
            return S.GENERAL_FAILURE, None, None
        info = _FencedCallback(measure == hal.MeasureTiming.YES, start)

        def finish(result: Result, after_fences: Optional[int]) -> None:
            info.finish(result, after_fences)
            try:
                fence.signal(mine, error=result.status != S.NONE)
            finally:
                fence.close(mine)

        def fences_done(state: Any) -> None:
            after = time.monotonic_ns()
            if state != fence.FenceState.SIGNALED:
                job.abandon()
                if state == fence.FenceState.ACTIVE:
                    log.error("executeFenced: the deadline passed while waiting for the waitFor fences")
                    finish(Result(S.MISSED_DEADLINE_TRANSIENT), None)
                else:
                    log.error("executeFenced: a waitFor fence signaled an error")
                    finish(Result(S.GENERAL_FAILURE), None)
                return
            if duration_ns is not None:
                # NOTE: the duration runs from when all fences are signaled
                d2 = after + duration_ns
                job.deadline_ns = d2 if dl is None else min(dl, d2)
            if deadline_passed(job.deadline_ns):
                job.abandon()
                finish(Result(S.MISSED_DEADLINE_TRANSIENT), after)
                return

            def work() -> None:
                finish(job(), after)

            def expire(reason: str) -> None:
                log.error("executeFenced: dropped while queued (%s)", reason)
                job.abandon()
                status = missed_deadline_status(start, time.monotonic_ns(), job.deadline_ns, self.best_ns) \
                    if reason == "deadline" else S.DEVICE_UNAVAILABLE
                finish(Result(status), after)

            if not self.scheduler.submit(self.priority, work, expire, job.deadline_ns):
                log.error("executeFenced: the driver's work queue is full")
                job.abandon()
                finish(Result(S.RESOURCE_EXHAUSTED_TRANSIENT), after)

        if not waits:
            fences_done(fence.FenceState.SIGNALED)
        else:
            try:
                watched = fence.watch(waits, dl, fences_done)
            except RuntimeError as e:  # NOTE: no thread for the watcher: the spec's "task fails to launch"
                log.error("executeFenced: cannot watch the fences: %s", e)
                watched = False
            if not watched:
                log.error("executeFenced: %d fenced executions already wait for their fences", fence.MAX_WATCHES)
                for h in waits:
                    fence.close(h)
                job.abandon()
                fence.close(mine)
                fence.close(sync)
                return S.RESOURCE_EXHAUSTED_TRANSIENT, None, None
        return S.NONE, sync, info


def _refused(e: ValidationError) -> Refusal:
    log.error("execution rejected: %s", e)
    return Refusal(e.status)


def _check_output_room(model: hal.Model, request: hal.Request) -> None:
    """Fenced outputs are fully specified: each must fit its location at
    launch (there is no OUTPUT_INSUFFICIENT_SIZE to report after it)."""
    for k, (arg, idx) in enumerate(zip(request.outputs, model.main.outputIndexes)):
        pool = request.pools[arg.location.poolIndex] if not arg.hasNoValue else None
        if pool is None or pool.hidlMemory is None or pool.hidlMemory.name == "hardware_buffer":
            continue  # NOTE: driver-managed buffers and images are sized by their own checks
        o = model.main.operands[idx]
        need = operand_byte_size(o, list(arg.dimensions) or list(o.dimensions))
        if arg.location.length < need:
            raise ValidationError(f"request output {k}: {need} bytes needed, the location has {arg.location.length}")


def _duration_ns(duration: Any) -> Optional[int]:
    if duration is None:
        return None
    if not isinstance(duration, hal.OptionalTimeoutDuration):
        raise ValidationError(f"duration is not an OptionalTimeoutDuration: {duration!r}")
    ns = duration.nanoseconds
    if ns is None:
        return None
    if not isinstance(ns, int) or isinstance(ns, bool) or ns < 0:
        raise ValidationError(f"invalid duration {ns!r}")
    return ns


@hal_methods
class _FencedCallback(hal.IFencedExecutionCallback):
    """Status and timing of one fenced execution, once its fence is signaled."""

    def __init__(self, measure: bool, start_ns: int):
        self._measure, self._start = measure, start_ns
        self._info: Optional[tuple] = None

    def finish(self, result: Result, after_fences: Optional[int]) -> None:
        status = result.status if result.status != S.OUTPUT_INSUFFICIENT_SIZE else S.GENERAL_FAILURE
        launched = fenced = hal.Timing()
        if self._measure and status == S.NONE and result.timing.timeOnDevice != hal.UINT64_MAX:
            end = time.monotonic_ns()
            on_device = result.timing.timeOnDevice
            launched = hal.Timing(timeOnDevice=on_device, timeInDriver=max(on_device, (end - self._start) // 1000))
            fenced = hal.Timing(timeOnDevice=on_device,
                                timeInDriver=max(on_device, (end - (after_fences or self._start)) // 1000))
        self._info = (status, launched, fenced)  # NOTE: set before the fence is signaled

    def getExecutionInfo(self) -> tuple:
        info = self._info
        if info is None:
            # NOTE: IFencedExecutionCallback.hal: called before the execution finished -> GENERAL_FAILURE
            return S.GENERAL_FAILURE, hal.Timing(), hal.Timing()
        return info


def _notify_exec(notify: Any, name: str, result: Result) -> None:
    try:
        if name == "notify":
            notify(v1_0_status(result.status))
        elif name == "notify_1_2":
            notify(v1_0_status(result.status), result.outputShapes, result.timing)
        else:
            notify(result.status, result.outputShapes, result.timing)
    except Exception:  # a client's callback failing must not take the driver down
        log.exception("execution callback raised")


def v1_0_status(status: S) -> S:
    """1.3 statuses a 1.0-1.2 caller cannot receive become GENERAL_FAILURE."""
    return status if status <= S.INVALID_ARGUMENT else S.GENERAL_FAILURE
