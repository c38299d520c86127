"""Every HAL entry point of the front end returns a status, never raises.

The front end answers each bad argument with the status the spec names; an
exception that still escapes a HAL method is a driver bug.  :func:`hal_methods`
wraps the HAL methods of a class so that such a bug is logged with its
traceback and answered GENERAL_FAILURE in the method's own shape (the
``generates`` values of the HAL file, with empty / null values beside the
status), and a callback the method was given hears GENERAL_FAILURE exactly
once if it had not been notified yet (as the executor already does for
kernels: ``driver/execution.py``).
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Callable, Optional

from nnhal import hal

log = logging.getLogger("nnhal.driver")

S = hal.ErrorStatus
GF = S.GENERAL_FAILURE


# method -> (what it returns on failure (a callable making it), the callback argument's position or None,
# the notify method the callback hears)
_ERRORS: dict[str, tuple[Callable[[], Any], Optional[int], str]] = {
    # IDevice
    "getCapabilities": (lambda: (GF, hal.v1_0.Capabilities()), None, ""),
    "getCapabilities_1_1": (lambda: (GF, hal.v1_1.Capabilities()), None, ""),
    "getCapabilities_1_2": (lambda: (GF, hal.v1_2.Capabilities()), None, ""),
    "getCapabilities_1_3": (lambda: (GF, hal.Capabilities()), None, ""),
    "getSupportedOperations": (lambda: (GF, []), None, ""),
    "getSupportedOperations_1_1": (lambda: (GF, []), None, ""),
    "getSupportedOperations_1_2": (lambda: (GF, []), None, ""),
    "getSupportedOperations_1_3": (lambda: (GF, []), None, ""),
    "getStatus": (lambda: hal.DeviceStatus.UNKNOWN, None, ""),
    "getVersionString": (lambda: (GF, ""), None, ""),
    "getType": (lambda: (GF, hal.DeviceType.OTHER), None, ""),
    "getSupportedExtensions": (lambda: (GF, []), None, ""),
    "getNumberOfCacheFilesNeeded": (lambda: (GF, 0, 0), None, ""),
    "isCachingSupported": (lambda: (GF, False), None, ""),
    "prepareModel": (lambda: GF, 1, "notify"),
    "prepareModel_1_1": (lambda: GF, 2, "notify"),
    "prepareModel_1_2": (lambda: GF, -1, "notify_1_2"),  # NOTE: -1: the last argument (two forms, see hal)
    "prepareModel_1_3": (lambda: GF, 7, "notify_1_3"),
    "prepareModelFromCache": (lambda: GF, 3, "notify_1_2"),
    "prepareModelFromCache_1_3": (lambda: GF, 4, "notify_1_3"),
    "allocate": (lambda: (GF, None, 0), None, ""),
    # IPreparedModel
    "execute": (lambda: GF, 1, "notify"),
    "execute_1_2": (lambda: GF, 2, "notify_1_2"),
    "execute_1_3": (lambda: GF, 4, "notify_1_3"),
    "execute_1_3_owned": (lambda: GF, 4, "notify_1_3"),
    "executeSynchronously": (lambda: (GF, [], hal.Timing()), None, ""),
    "executeSynchronously_1_3": (lambda: (GF, [], hal.Timing()), None, ""),
    "executeSynchronously_1_3_owned": (lambda: (GF, [], hal.Timing()), None, ""),
    "executeFenced": (lambda: (GF, None, None), None, ""),
    "configureExecutionBurst": (lambda: (GF, None), None, ""),
    "saveToCache": (lambda: GF, None, ""),
    # IBuffer
    "copyTo": (lambda: GF, None, ""),
    "copyFrom": (lambda: GF, None, ""),
    # IBurstContext
    "freeMemory": (lambda: None, None, ""),
    # IFencedExecutionCallback
    "getExecutionInfo": (lambda: (GF, hal.Timing(), hal.Timing()), None, ""),
}


class _Tracked:
    """A callback as the driver sees it: records whether a notify was made."""

    __slots__ = ("_cb", "notified")

    def __init__(self, cb: Any):
        self._cb = cb
        self.notified = False

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._cb, name)
        if not name.startswith("notify") or not callable(attr):
            return attr

        def notify(*args: Any, **kwargs: Any) -> Any:
            self.notified = True
            return attr(*args, **kwargs)

        return notify


def _failed_notify(cb: Any, name: str, notify: str) -> None:
    try:
        if not name.startswith("execute"):
            getattr(cb, notify)(GF, None)  # IPreparedModelCallback.notify*(status, preparedModel)
        elif notify == "notify":
            cb.notify(GF)  # IExecutionCallback.notify(status)
        else:
            getattr(cb, notify)(GF, [], hal.Timing())
    except Exception:  # noqa: BLE001 - a callback failing here changes nothing
        log.exception("notifying a callback of a failed call raised")


def _guard(name: str, fn: Callable) -> Callable:
    error, cb_pos, notify = _ERRORS[name]

    if cb_pos is None:
        @functools.wraps(fn)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except Exception:  # noqa: BLE001 - the point: a HAL method never raises
                log.exception("%s raised (a driver bug); answered GENERAL_FAILURE", name)
                return error()

        return guarded

    @functools.wraps(fn)
    def guarded_cb(*args: Any, **kwargs: Any) -> Any:
        # NOTE: args[0] is self; the callback is positional ``cb_pos`` of the HAL method, or by keyword
        args = list(args)
        tracked = None
        k = (len(args) - 1) if cb_pos == -1 else cb_pos + 1
        if "callback" in kwargs:
            if kwargs["callback"] is not None:
                kwargs["callback"] = tracked = _Tracked(kwargs["callback"])
        elif 0 < k < len(args) and args[k] is not None and not isinstance(args[k], (list, tuple, bytes)):
            args[k] = tracked = _Tracked(args[k])
        try:
            return fn(*args, **kwargs)
        except Exception:  # noqa: BLE001 - the point: a HAL method never raises
            log.exception("%s raised (a driver bug); answered GENERAL_FAILURE", name)
            if tracked is not None and not tracked.notified and hasattr(tracked._cb, notify):
                _failed_notify(tracked._cb, name, notify)
            return error()

    return guarded_cb


def answer_bug(name: str) -> Any:
    """In the ``except Exception`` of a HAL method that guards itself
    (:func:`guards_itself`): the bug logged with its traceback, the method's
    GENERAL_FAILURE answer returned (as the wrapper of :func:`hal_methods` does)."""
    log.exception("%s raised (a driver bug); answered GENERAL_FAILURE", name)
    return _ERRORS[name][0]()


def guards_itself(fn: Callable) -> Callable:
    """Marks a HAL method (without a callback) whose body catches every
    exception itself and answers :func:`answer_bug`: :func:`hal_methods` leaves
    it unwrapped.  NOTE: for the per-execution path of in-process clients,
    where the wrapper's frame and argument packing cost as much as a tenth
    of the front end's own work."""
    if _ERRORS[fn.__name__][1] is not None:
        raise TypeError(f"{fn.__name__} has a callback: it keeps the wrapper (which notifies the callback)")
    fn._hal_guarded = True  # type: ignore[attr-defined]
    return fn


def hal_methods(cls: type) -> type:
    """Class decorator: every HAL method ``cls`` defines (by its HAL name) never raises."""
    for name in _ERRORS:
        fn = cls.__dict__.get(name)
        if fn is not None and callable(fn) and not getattr(fn, "_hal_guarded", False):
            g = _guard(name, fn)
            g._hal_guarded = True  # type: ignore[attr-defined]
            setattr(cls, name, g)
    return cls
