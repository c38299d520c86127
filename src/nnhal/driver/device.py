"""``IDevice`` of the shared HAL front end, over a backend
(``nnhal.driver.backend``): the canonical entry points every interface's
face calls (:meth:`Device.prepare`, :meth:`Device.prepare_from_cache`,
:meth:`Device.supported_operations`, ``allocate``, the capabilities),
parameterized by the interface version of the call (``HalVersion``: what the
model may use), the HIDL 1.3 surface over them and the inherited 1.0-1.2
methods (which upgrade their arguments and delegate, as Android's sample
driver does); the AIDL face is ``nnhal.driver.aidl``.
the CPU reference driver ``sample-all`` is this front end over the sample
backend (``nnhal.drivers.sample``), ``litert-cpu`` over ``nnhal.drivers.litert``,
a user's driver over its own (``nnhal.drivers.registry``: plugins)."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any, Callable, Optional, Sequence

import numpy as np

from nnhal import hal
from nnhal.driver import cache as driver_cache
from nnhal.driver.backend import Backend, Compiled
from nnhal.driver.buffers import BufferRegistry, TokenLookup
from nnhal.driver.guard import hal_methods
from nnhal.driver.pool_cache import PoolCache
from nnhal.driver.prepared_model import PreparedModel, deadline_ns, deadline_passed, v1_0_status
from nnhal.driver.prepared_states import Entry, PreparedStates
from nnhal.driver.scheduler import Scheduler, get_scheduler, missed_deadline_status
from nnhal.engine.executor import DeadlineMissed
from nnhal.engine.reference_check import Unchecked, held_to_reference, unheld_operations
from nnhal.engine.validation import (
    ValidationError,
    own_copy,
    validate_hints,
    validate_model,
    validate_preference,
    validate_priority,
)
from nnhal.hal import HalVersion
from nnhal.ops import deadline as op_deadline
from nnhal.ops.base import OpExecutionError
from nnhal.ops.extension import Extension
from nnhal.ops.extension import resolve as resolve_extensions
from nnhal.platform import heap
from nnhal.platform import memory as hal_memory

log = logging.getLogger("nnhal.driver")

S = hal.ErrorStatus
__all__ = ["Device", "Notify"]

# model pools of at least this many bytes are compared with the private copies kept of recent models
# before a new copy is made (Device._private_copy; below, a new copy costs about what a comparison does)
SHARE_POOL_BYTES = 256 << 10

# how a preparation tells its outcome: notify(status, prepared model or None), called once
Notify = Callable[[S, Optional[PreparedModel]], None]


@hal_methods
class Device(hal.IDevice, hal.INnhalDevice):
    """The CPU reference driver.  Thread-safe: any number of threads may
    prepare and execute at once; prepared models share nothing mutable."""

    def __init__(self, name: str, backend: Backend, scheduler: Optional[Scheduler] = None,
                 cache_key_dir: Optional[str] = None, version_string: Optional[str] = None):
        """``name``: the device name; ``backend``: what supports, compiles and
        runs (see nnhal.driver.backend); ``scheduler``: the work queue
        (default: the process-wide one); ``cache_key_dir``: where the
        compilation cache key lives (default :func:`nnhal.driver.cache.key_dir`);
        ``version_string``: the driver version, which a cache must have been
        written by (default: the backend's).  Devices by name come from the
        device table (``nnhal.get_device``, ``nnhal.drivers.registry``)."""
        if version_string is not None:
            backend.version_string = version_string
        heap.keep_freed_memory()  # NOTE: executions' buffers reuse heap pages (nnhal/platform/heap.py)
        self.backend = backend
        self.name = name
        self._caps: Optional[hal.Capabilities] = None
        self._caps_lock = threading.Lock()
        self.scheduler = scheduler if scheduler is not None else get_scheduler()
        self.cache_key_dir = cache_key_dir
        self.version_string = backend.version_string
        self._buffers = BufferRegistry()  # driver-managed buffers (memory domains), by token
        self.extensions = _declared_extensions(name, backend)
        self.pool_cache = PoolCache()  # request memories of in-process calls, kept mapped (driver/pool_cache.py)
        self._states = PreparedStates()  # models validated and compiled lately (driver/prepared_states.py)

    # ------------------------------------------------------------------ helpers
    def buffer_lookup(self, prepared: PreparedModel) -> Any:
        """Resolves the memory tokens (driver-managed buffers) of ``prepared``'s requests."""
        return TokenLookup(self._buffers, prepared)

    def _canonical(self, model: Any) -> Any:
        """``model`` as a HAL 1.3 model, not yet the driver's own (see :meth:`_validated`)."""
        if not isinstance(model, hal.Model):
            from nnhal.hal.convert import convert_to_v1_3

            try:
                model = convert_to_v1_3(model)
            except Exception as e:  # noqa: BLE001
                raise ValidationError(f"not a model: {type(e).__name__}: {e}") from None
        return _with_bytes_values(model)

    def _map_pools(self, memories: Any) -> list:
        pools = []
        try:
            if not isinstance(memories, list):
                raise ValidationError(f"model pools is not a list: {type(memories).__name__}")
            for k, m in enumerate(memories):
                if not isinstance(m, hal.Memory):
                    raise ValidationError(f"model pool {k} is not a Memory")
                try:
                    # NOTE: the constants are the driver's own: read once (pread, which cannot fault
                    # on a pool the client shrinks) and kept, whatever the client does to its memory.
                    pools.append(self._private_copy(m))
                except hal_memory.InvalidMemory as e:
                    raise ValidationError(f"model pool {k}: {e}") from None
                except Exception as e:  # NOTE: junk inside the Memory (handle, fds, size) is a bad argument too
                    raise ValidationError(f"model pool {k}: malformed memory ({type(e).__name__}: {e})") from None
        except ValidationError:
            for p in pools:
                p.close()
            raise
        return pools

    def _private_copy(self, m: hal.Memory) -> Any:
        """The driver's private copy of model pool ``m``: for a memory whose bytes are final (sealed against
        writing and shrinking: ``memory.frozen_key``) a read-only mapping of it, the one kept of a recent
        model where that maps the same file region; else the copy kept of a recent model when ``m`` holds
        the same bytes now (the pool of a model sent to getSupportedOperations then to prepareModel, read
        and compared without new storage), else a new one."""
        key = hal_memory.frozen_key(m)
        if key is not None:
            # NOTE: no holder of the fd can change or shrink these bytes: mapped, not copied (the pool of a
            # model the NNAPI delegate planned from a .tflite file: nnhal.delegate.plan freezes it)
            return hal_memory.FrozenPool(m, key, self._states.kept_frozen(key))
        if isinstance(m.size, int) and m.size >= SHARE_POOL_BYTES:
            for kept in self._states.kept_pools(m.size):
                p = hal_memory.PrivateCopy.matching(m, kept)
                if p is not None:
                    return p
        return hal_memory.PrivateCopy(m)

    def _validated(self, model: Any, version: HalVersion) -> tuple[hal.Model, list, list, Optional[Entry]]:
        """(1.3 model, mapped pools, op defs, the model's entry in the prepared states or None) or
        ValidationError.  The model is the driver's own copy (HIDL passes the model by value: a client
        changing its model later changes nothing here): a new one, or the one kept of an equal model
        validated lately (prepared_states.py: getSupportedOperations then prepareModel of one model validate
        and copy it once)."""
        model13 = self._canonical(model)
        # NOTE: the pool descriptors mapped are the driver's own copy too, the very ones its model copy holds
        memories = own_copy(model13.pools) if isinstance(model13, hal.Model) else []
        pools = self._map_pools(memories)
        try:
            views = [p.view for p in pools]
            entry = self._states.validated(model13, views, version) if isinstance(model13, hal.Model) else None
            if entry is not None:
                model13, defs = entry.model, list(entry.defs)
            else:
                model13 = own_copy(model13)
                if isinstance(model13, hal.Model):
                    model13.pools = memories
                defs = validate_model(model13, views, version, self.extensions)
                entry = self._states.add(model13, views, version, defs, [p.key for p in pools])
            if self.extensions and model13.extensionNameToPrefix:
                # NOTE: the types of the extensions this driver declares carry their declarations from here on
                model13 = resolve_extensions(model13, self.extensions).apply(model13)
        except ValidationError:
            for p in pools:
                p.close()
            raise
        except Exception as e:  # malformed structures (wrong field types...) are bad arguments too
            for p in pools:
                p.close()
            raise ValidationError(f"malformed model: {type(e).__name__}: {e}") from None
        return model13, pools, defs, entry

    # ------------------------------------------------------------------ capabilities
    def getCapabilities_1_3(self) -> tuple:
        with self._caps_lock:
            if self._caps is None:
                if getattr(self.backend, "measured_capabilities", False):
                    from nnhal.driver import capcache

                    self._caps = capcache.cached(self.name, self.version_string, self.backend.capabilities)
                else:
                    self._caps = self.backend.capabilities()
        return S.NONE, own_copy(self._caps)  # NOTE: by value: a client editing its copy changes no one else's

    def getCapabilities_1_2(self) -> tuple:
        from nnhal.hal.convert import convert_to_v1_2

        return S.NONE, convert_to_v1_2(self.getCapabilities_1_3()[1])

    def getCapabilities_1_1(self) -> tuple:
        from nnhal.hal.convert import convert_to_v1_1

        return S.NONE, convert_to_v1_1(self.getCapabilities_1_3()[1])

    def getCapabilities(self) -> tuple:
        from nnhal.hal.convert import convert_to_v1_0

        return S.NONE, convert_to_v1_0(self.getCapabilities_1_3()[1])

    def getVersionString(self) -> tuple:
        return S.NONE, self.version_string

    def getType(self) -> tuple:
        return S.NONE, self.backend.device_type

    def getSupportedExtensions(self) -> tuple:
        return S.NONE, [e.hal() for e in self.extensions]

    def getNumberOfCacheFilesNeeded(self) -> tuple:
        # NOTE: one security-sensitive model cache (graph, prepared states, HMAC) and one
        # data cache (constants and prepared arrays, bound by hash into the model cache)
        if not self.backend.caching:
            return S.NONE, 0, 0
        return S.NONE, driver_cache.NUM_MODEL_CACHE, driver_cache.NUM_DATA_CACHE

    def isCachingSupported(self) -> tuple:
        """The draft 1.2 ``isCachingSupported() generates (ErrorStatus, bool)``."""
        return S.NONE, bool(self.backend.caching)

    def cache_key(self) -> bytes:
        """The compilation cache's HMAC key (OSError when it cannot be kept private)."""
        return driver_cache.load_key(None if self.cache_key_dir is None else driver_cache.Path(self.cache_key_dir))

    def getStatus(self) -> hal.DeviceStatus:
        return hal.DeviceStatus.AVAILABLE

    # ------------------------------------------------------------------ supported operations
    def supported_operations(self, model: Any, version: HalVersion) -> tuple:
        """(status, one bool per main operation) for a model sent at ``version``."""
        try:
            model13, pools, defs, _ = self._validated(model, version)
        except ValidationError as e:
            log.error("getSupportedOperations: invalid model: %s", e)
            return S.INVALID_ARGUMENT, []
        for p in pools:
            p.close()
        return S.NONE, self.supported_flags(model13, defs)

    def supported_flags(self, model13: hal.Model, defs: list) -> list[bool]:
        """The backend's answer for a validated model, each false logged with its reason."""
        try:
            answers = self._answers(model13, defs)
        except Exception:  # NOTE: a backend bug means "not supported", never a crash
            log.exception("%s: the backend's supported() failed", self.name)
            return [False] * len(model13.main.operations)
        flags = []
        for k, (ok, reason) in enumerate(answers):
            if not ok:
                log.info("%s: operation %d (%s) not supported: %s", self.name, k,
                         hal.operation_name(model13.main.operations[k].type), reason)
            flags.append(bool(ok))
        return flags

    def _answers(self, model13: hal.Model, defs: list) -> list[tuple[bool, str]]:
        """The backend's (supported, reason) per main operation; for a backend held to the reference,
        false too where it cannot be (nnhal.engine.reference_check.unheld_operations)."""
        answers = self.backend.supported(model13, defs)
        if not self.backend.reference_checked:
            return answers
        return [(ok, reason) if (not ok or not why) else (False, why)
                for (ok, reason), why in zip(answers, unheld_operations(model13))]

    def nnhal_getSupportedOperationsReasons(self, model: Any) -> tuple:
        """Why this driver refuses each main operation of ``model`` ("" where it
        takes it): the backend's reasons (hal.INnhalDevice, nnhal's addition;
        the HAL answers one bool per operation).  ``model`` is a canonical model of any interface version
        (validated as of the newest: the question is asked after a face at some version has answered false,
        so an AIDL v2 model with BATCH_MATMUL gets its reasons too)."""
        try:
            model13, pools, defs, _ = self._validated(model, max(HalVersion))
        except ValidationError:
            return S.INVALID_ARGUMENT, []
        except Exception:  # noqa: BLE001 - never an exception out of a device method
            log.exception("%s: validating a model for its reasons failed", self.name)
            return S.GENERAL_FAILURE, []
        for p in pools:
            p.close()
        try:
            return S.NONE, [("" if ok else reason or "unsupported (the backend gave no reason)")
                            for ok, reason in self._answers(model13, defs)]
        except Exception as e:  # noqa: BLE001 - a backend bug: the operation is not supported, and this is why
            log.exception("%s: the backend's supported() failed", self.name)
            return S.NONE, [f"the backend's supported() failed: {e}"] * len(model13.main.operations)

    def getSupportedOperations_1_3(self, model: Any) -> tuple:
        return self.supported_operations(model, HalVersion.V1_3)

    def getSupportedOperations_1_2(self, model: Any) -> tuple:
        status, ops = self.supported_operations(model, HalVersion.V1_2)
        return v1_0_status(status), ops

    def getSupportedOperations_1_1(self, model: Any) -> tuple:
        status, ops = self.supported_operations(model, HalVersion.V1_1)
        return v1_0_status(status), ops

    def getSupportedOperations(self, model: Any) -> tuple:
        status, ops = self.supported_operations(model, HalVersion.V1_0)
        return v1_0_status(status), ops

    # ------------------------------------------------------------------ preparation
    def _hidl_call(self, what: str, callback: Any, notify_name: str, version: HalVersion, deadline: Any,
                   launch: Callable[[Notify, Optional[int]], S]) -> S:
        """A HIDL preparation: the callback's ``notify_name`` as the canonical
        notify (statuses a 1.0-1.2 caller cannot receive become
        GENERAL_FAILURE), the 1.3 deadline in ns, then ``launch(notify, dl)``."""
        if callback is None or not hasattr(callback, notify_name):
            log.error("%s: invalid callback", what)
            return S.INVALID_ARGUMENT
        method = getattr(callback, notify_name)

        def notify(status: S, prepared: Optional[PreparedModel]) -> None:
            method(status if version >= HalVersion.V1_3 else v1_0_status(status), prepared)

        try:
            dl = deadline_ns(deadline)
        except ValidationError as e:
            log.error("%s: %s", what, e)
            _tell(notify, S.INVALID_ARGUMENT, None)
            return S.INVALID_ARGUMENT
        return launch(notify, dl)

    def prepare(self, model: Any, preference: Any, priority: Any, dl: Optional[int], modelCache: Any,
                dataCache: Any, token: Any, notify: Notify, version: HalVersion, hints: Sequence = (),
                hint_extensions: Sequence = ()) -> S:
        """The canonical preparation (every face's): validates ``model`` (of any
        HIDL version, or canonical) as of interface ``version``, then prepares
        it on the work queue in ``priority`` and tells ``notify`` once; saves
        it to the cache files when they are given and usable.  ``dl``: the
        deadline in ns on the steady clock (None: none); ``hints`` /
        ``hint_extensions``: AIDL version 4's compilation hints and their
        extension names (validated, then left: this driver takes no hints).
        Returns the launch status (an error is also told to ``notify``)."""
        launch_ns = time.monotonic_ns()
        try:
            validate_preference(preference)
            validate_priority(priority)
            validate_hints(hints, hint_extensions)
            model13, pools, defs, entry = self._validated(model, version)
        except ValidationError as e:
            log.error("prepareModel: %s", e)
            _tell(notify, S.INVALID_ARGUMENT, None)
            return S.INVALID_ARGUMENT
        if not all(self.supported_flags(model13, defs)):
            log.error("prepareModel: the model has operations this driver does not support (each one's reason "
                      "is logged)")
            for p in pools:
                p.close()
            _tell(notify, S.GENERAL_FAILURE, None)
            return S.GENERAL_FAILURE

        save_to = None
        try:
            # NOTE: "Any error that occurs when saving to cache must not affect the
            # status of preparing the model" (IDevice.hal 1.3): bad cache arguments
            # only mean no cache is written
            save_to = driver_cache.check_save_args(modelCache, dataCache, token)
        except driver_cache.CacheError as e:
            log.error("prepareModel: not saving to the compilation cache: %s", e)

        def fail(status: S) -> None:
            for p in pools:  # NOTE: no prepared model will hold the mappings
                p.close()
            if save_to is not None:
                save_to.close()
            _tell(notify, status, None)

        if deadline_passed(dl):
            # NOTE: as Android's sample driver: a deadline passed already is the preparation's outcome, told
            # through the callback at once, without a task queued (the launch itself succeeded)
            fail(S.MISSED_DEADLINE_PERSISTENT)
            return S.NONE

        # NOTE: the entry whose compiled model an equal model's preparations share (Backend.shares_compiled; a
        # backend held to the reference gets a gated one of its own each time)
        sharing = entry if self.backend.shares_compiled and not self.backend.reference_checked else None

        def work() -> None:
            start_ns = time.monotonic_ns()
            if deadline_passed(dl):
                fail(S.MISSED_DEADLINE_PERSISTENT)
                return
            # NOTE: one kept passed the check below before it was kept
            executor = kept = sharing.compiled if sharing is not None else None
            try:
                with op_deadline.scope(dl):  # NOTE: polled between operations' prepare steps
                    views = [p.view for p in pools]
                    cacheable = True
                    if self.backend.reference_checked:
                        # NOTE: never accept what the reference rejects (nnhal.engine.reference_check)
                        executor, cacheable = held_to_reference(
                            model13, views, dl, lambda: self.backend.compile(model13, views, dl))
                    elif kept is None:
                        executor = self.backend.compile(model13, views, dl)
            except DeadlineMissed:
                log.error("prepareModel: the deadline passed during the preparation")
                fail(missed_deadline_status(launch_ns, start_ns, dl))
                return
            except OpExecutionError as e:
                log.error("prepareModel: %s", e)
                fail(S.GENERAL_FAILURE)
                return
            except Unchecked as e:
                log.error("prepareModel: the backend cannot be held to the reference's checks: %s", e)
                fail(S.GENERAL_FAILURE)
                return
            except Exception:
                log.exception("prepareModel failed unexpectedly")
                fail(S.GENERAL_FAILURE)
                return
            if kept is None:
                if not isinstance(executor, Compiled):
                    log.error("prepareModel: the backend's compile returned %s, not a nnhal.driver.backend."
                              "Compiled", type(executor).__name__)
                    fail(S.GENERAL_FAILURE)
                    return
                if sharing is not None:
                    sharing.keep_compiled(executor)
            if deadline_passed(dl):
                del executor
                fail(missed_deadline_status(launch_ns, start_ns, dl))
                return
            prepared = PreparedModel(self, model13, pools, executor, int(version), priority=int(priority))
            if save_to is not None and not cacheable:
                # NOTE: the reference's checks need the model's constants, which a backend's cache need not keep
                log.info("prepareModel: not saving to the compilation cache a model the reference rejects or "
                         "checks at execution")
                save_to.close()
            elif save_to is not None:
                self.save_to_cache(prepared, save_to)
                save_to.close()
            _tell(notify, S.NONE, prepared)

        def expire(reason: str) -> None:
            log.error("prepareModel: dropped while queued (%s)", reason)
            fail(missed_deadline_status(launch_ns, time.monotonic_ns(), dl) if reason == "deadline"
                 else S.DEVICE_UNAVAILABLE)

        if not self.scheduler.submit(int(priority), work, expire, dl):
            # NOTE: the spec's "task fails to launch" when the driver is saturated: a
            # bounded queue answers RESOURCE_EXHAUSTED_TRANSIENT rather than growing
            log.error("prepareModel: the driver's work queue is full")
            status = S.RESOURCE_EXHAUSTED_TRANSIENT
            fail(status)
            return status
        return S.NONE

    def save_to_cache(self, prepared: PreparedModel, files: driver_cache.CacheFiles) -> S:
        """Writes ``prepared`` to the cache files; never raises (a cache problem is logged)."""
        if not self.backend.caching:
            return S.GENERAL_FAILURE
        try:
            model_bytes, chunks, _ = self.backend.cache_encode(
                prepared.model, prepared.constant_pools(), prepared.executor, prepared.version, prepared.priority,
                self.cache_key(), files.token)
            driver_cache.write_files(files.model_fd, files.data_fd, model_bytes, chunks)
        except OSError as e:
            log.error("saving to the compilation cache failed: %s", e)
            return S.GENERAL_FAILURE
        except Exception:  # NOTE: a state that cannot be encoded is a driver bug: logged, never fatal
            log.exception("saving to the compilation cache failed")
            return S.GENERAL_FAILURE
        return S.NONE

    def _prepare_hidl(self, model: Any, preference: Any, priority: Any, deadline: Any, callback: Any,
                      notify_name: str, version: HalVersion, modelCache: Any = (), dataCache: Any = (),
                      token: Any = b"") -> S:
        return self._hidl_call("prepareModel", callback, notify_name, version, deadline, lambda notify, dl: self.prepare(
            model, preference, priority, dl, modelCache, dataCache, token, notify, version))

    def prepareModel(self, model: Any, callback: Any) -> S:
        return v1_0_status(self._prepare_hidl(model, hal.ExecutionPreference.FAST_SINGLE_ANSWER, hal.Priority.MEDIUM,
                                              None, callback, "notify", HalVersion.V1_0))

    def prepareModel_1_1(self, model: Any, preference: Any, callback: Any) -> S:
        return v1_0_status(self._prepare_hidl(model, preference, hal.Priority.MEDIUM, None, callback, "notify",
                                              HalVersion.V1_1))

    def prepareModel_1_2(self, model: Any, preference: Any, modelCache: Any = None, dataCache: Any = None,
                         token: Any = None, callback: Any = None) -> S:
        # NOTE: the seed's draft form (model, preference, callback) too (hal.prepare_model_1_2_args)
        modelCache, dataCache, token, callback = hal.prepare_model_1_2_args(modelCache, dataCache, token, callback)
        return v1_0_status(self._prepare_hidl(model, preference, hal.Priority.MEDIUM, None, callback, "notify_1_2",
                                              HalVersion.V1_2, modelCache, dataCache, token))

    def prepareModel_1_3(self, model: Any, preference: Any, priority: Any, deadline: Any, modelCache: list,
                         dataCache: list, token: bytes, callback: Any) -> S:
        return self._prepare_hidl(model, preference, priority, deadline, callback, "notify_1_3", HalVersion.V1_3,
                                  modelCache, dataCache, token)

    def prepareModelFromCache(self, modelCache: list, dataCache: list, token: bytes, callback: Any) -> S:
        return v1_0_status(self._hidl_call("prepareModelFromCache", callback, "notify_1_2", HalVersion.V1_2, None,
                                           lambda notify, dl: self.prepare_from_cache(dl, modelCache, dataCache,
                                                                                      token, notify)))

    def prepareModelFromCache_1_3(self, deadline: Any, modelCache: list, dataCache: list, token: bytes,
                                  callback: Any) -> S:
        return self._hidl_call("prepareModelFromCache", callback, "notify_1_3", HalVersion.V1_3, deadline,
                               lambda notify, dl: self.prepare_from_cache(dl, modelCache, dataCache, token, notify))

    def prepare_from_cache(self, dl: Optional[int], modelCache: Any, dataCache: Any, token: Any,
                           notify: Notify) -> S:
        """The canonical preparation from the compilation cache (every face's):
        checks the arguments and the files, then loads on the work queue and
        tells ``notify`` once.  ``modelCache`` / ``dataCache``: lists of
        one-fd ``hal.Handle``s; ``dl`` as :meth:`prepare`."""
        launch_ns = time.monotonic_ns()
        if not self.backend.caching:
            # NOTE: as Android's sample driver (and VTS's CompilationCachingTest when caching is not supported):
            # a driver without a cache has nothing to prepare from, whatever the arguments
            log.error("prepareModelFromCache: this driver does not support compilation caching")
            _tell(notify, S.GENERAL_FAILURE, None)
            return S.GENERAL_FAILURE
        files: Optional[driver_cache.CacheFiles] = None
        try:
            files = driver_cache.check_load_args(modelCache, dataCache, token)
            key = self.cache_key()
        except driver_cache.CacheError as e:
            log.error("prepareModelFromCache: %s", e)
            status = e.status
        except OSError as e:  # NOTE: no private key: this driver cannot trust any cache
            log.error("prepareModelFromCache: the cache key is unusable: %s", e)
            status = S.GENERAL_FAILURE
        else:
            status = S.NONE
        if status != S.NONE:
            if files is not None:
                files.close()
            _tell(notify, status, None)
            return status

        def work() -> None:
            start_ns = time.monotonic_ns()
            if deadline_passed(dl):
                files.close()
                _tell(notify, S.MISSED_DEADLINE_PERSISTENT, None)
                return
            try:
                with op_deadline.scope(dl):
                    r = self.backend.cache_load(files.model_fd, files.data_fd, key, files.token)
            except DeadlineMissed:
                _tell(notify, missed_deadline_status(launch_ns, start_ns, dl), None)
                return
            except driver_cache.CacheError as e:
                log.error("prepareModelFromCache: %s", e)
                _tell(notify, e.status, None)
                return
            except Exception:
                log.exception("prepareModelFromCache failed unexpectedly")
                _tell(notify, S.GENERAL_FAILURE, None)
                return
            finally:
                files.close()
            _tell(notify, S.NONE, PreparedModel(self, r.model, r.pools, r.executor, r.hal_version,
                                                priority=r.priority))

        def expire(reason: str) -> None:
            log.error("prepareModelFromCache: dropped while queued (%s)", reason)
            files.close()
            _tell(notify, missed_deadline_status(launch_ns, time.monotonic_ns(), dl) if reason == "deadline"
                  else S.DEVICE_UNAVAILABLE, None)

        # NOTE: the priority is in the (not yet authenticated) cache: loading is queued as MEDIUM
        if not self.scheduler.submit(int(hal.Priority.MEDIUM), work, expire, dl):
            log.error("prepareModelFromCache: the driver's work queue is full")
            files.close()
            _tell(notify, S.RESOURCE_EXHAUSTED_TRANSIENT, None)
            return S.RESOURCE_EXHAUSTED_TRANSIENT
        return S.NONE

    # ------------------------------------------------------------------ memory domains
    def allocate(self, desc: Any, preparedModels: list, inputRoles: list, outputRoles: list) -> tuple:
        # NOTE: the rules and the chosen semantics (unknown shapes, concurrency) are in driver/buffers.py
        return self._buffers.allocate(self, desc, preparedModels, inputRoles, outputRoles)


def _declared_extensions(name: str, backend: Backend) -> tuple[Extension, ...]:
    """The backend's extensions, checked once: each an ``Extension``, names distinct (a backend that
    declares them wrongly declares none, logged, rather than failing the device)."""
    try:
        declared = tuple(backend.extensions())
        if not all(isinstance(e, Extension) for e in declared):
            raise TypeError("extensions() must return nnhal.ops.extension.Extension objects")
        if len({e.name for e in declared}) != len(declared):
            raise ValueError("two extensions of the same name")
    except Exception:  # noqa: BLE001 - a plugin's broken declaration must not take the device down
        log.exception("%s: the backend's extensions() failed: no extensions declared", name)
        return ()
    return declared


def _with_bytes_values(model: Any) -> Any:
    """``operandValues`` is a ``vec<uint8_t>``: accept a list of ints or a
    uint8 array as well as bytes (a copy of the model, the client's is left
    alone); anything else is left for validation to reject."""
    values = getattr(model, "operandValues", b"")
    try:
        if isinstance(values, (list, tuple)) and all(isinstance(b, int) and not isinstance(b, bool) for b in values):
            return dataclasses.replace(model, operandValues=bytes(values))
        if isinstance(values, np.ndarray) and values.dtype == np.uint8 and values.ndim == 1:
            return dataclasses.replace(model, operandValues=values.tobytes())
    except (ValueError, TypeError):
        pass  # out-of-range values: validation says what is wrong
    return model


def _tell(notify: Notify, status: S, prepared: Optional[PreparedModel]) -> None:
    try:
        notify(status, prepared)
    except Exception:  # NOTE: a client's callback failing must not take the driver down
        log.exception("prepare callback raised")
