"""nnhal's stable AIDL binding: ``android.hardware.neuralnetworks`` versions
1-4 (NNAPI feature levels 5-8, Android 12-15), as ../shared/API.md's "AIDL"
section describes it.

Every AIDL type and interface under its ``.aidl`` name (``aidl.Model``,
``aidl.Request``, ``aidl.Memory``, ``aidl.IDevice``, ``aidl.IBurst``, ...),
``ServiceSpecificError`` (what a method raises: ``status``, ``message``),
``TransactionError`` (binder's failed transaction: a method the serving
version does not have), ``PreparedModelCallback`` (a ready
``IPreparedModelCallback`` with ``wait()``), ``since(name)`` (the version that
introduced a type, member, interface or method), :mod:`convert`
(``to_canonical`` / ``from_canonical``: AIDL <-> the ``nnhal.hal`` types),
and :func:`get_device`: the AIDL face of any device of the device table.

    from nnhal import aidl
    device = aidl.get_device("sample-all")          # IDevice, version 4
    callback = aidl.PreparedModelCallback()
    device.prepareModel(model, aidl.ExecutionPreference.FAST_SINGLE_ANSWER, aidl.Priority.MEDIUM, -1, [], [],
                        bytes(32), callback)
    status, prepared = callback.wait()
    result = prepared.executeSynchronously(request, False, -1, -1)   # aidl.ExecutionResult

A device of another process (``nnhal.aidl.connect``) comes with the service's
AIDL face.  nnhal's own modules import :mod:`nnhal.hal.aidl`, never this one.
"""

from __future__ import annotations

from typing import Any, Optional

from nnhal.hal.aidl import *  # noqa: F401,F403
from nnhal.hal.aidl import __all__ as _all
from nnhal.hal.aidl import convert  # noqa: F401
from nnhal.hal.aidl.interfaces import IDevice

__all__ = [*_all, "connect", "convert", "get_device", "open_device"]


def get_device(name: str = "sample-all", version: int = 4) -> IDevice:
    """The AIDL ``IDevice`` of the in-process device ``name`` (a name of the
    device table, a plugin or a ``module:Class`` backend: every driver
    serves both faces), with the behaviour of interface ``version`` (1-4):
    ``getInterfaceVersion()`` answers it, methods added after it raise
    ``TransactionError`` (UNKNOWN_TRANSACTION), operations of later feature
    levels are invalid.  Raises LookupError for an unknown name, ValueError
    for a version this binding does not serve."""
    from nnhal.driver.aidl import AidlDevice, hal_version
    from nnhal.drivers import registry

    hal_version(version)  # NOTE: a bad version says so before a driver is loaded
    return AidlDevice(registry.get_device(name), version)


def connect(name: str, version: int = 4, runtime_dir: Optional[Any] = None) -> IDevice:
    """The AIDL ``IDevice`` of the running service ``name`` (``nnhal serve``),
    serving interface ``version`` (1-4) as :func:`get_device` does.  Raises
    LookupError (``nnhal.service.client.ServiceUnavailable``, naming the
    registry directory) if no such service runs."""
    from nnhal.service.aidl_client import connect as _connect

    return _connect(name, version, runtime_dir)


def open_device(name: str, version: int = 4) -> IDevice:
    """The AIDL ``IDevice`` of ``name`` as a user names a device on the command
    line (as ``nnhal.open_device``): in process for a name of the device table
    or a ``module:Class`` spec, else the running service of that name.
    LookupError if neither exists, ValueError for a version this binding does
    not serve."""
    from nnhal.drivers import registry

    if registry.knows(name):
        return get_device(name, version)
    return connect(name, version)
