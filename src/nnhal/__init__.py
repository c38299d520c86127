"""nnhal: the Android Neural Networks HAL 1.3 in Python.

``nnhal.hal`` holds the HAL types and interfaces (``nnhal.aidl`` the stable
AIDL form, versions 1-4, with its own ``get_device``); ``get_device(name)`` gives
an in-process driver (the CPU reference driver is ``sample-all``; plugins and
``module:Class`` backends too); ``connect(name)`` a proxy ``IDevice`` of a
driver running as a service (``nnhal serve --name NAME``); ``open_device(name)``
either; ``list_devices()`` names both.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

def in_process_devices() -> list[str]:
    """The in-process device names of the device table (``nnhal.drivers.registry``):
    the built-in drivers (``litert-cpu`` with LiteRT installed) and installed
    plugins (entry-point group ``nnhal.drivers``)."""
    from nnhal.drivers import registry

    return registry.names()


def get_device(name: str = "sample-all") -> Any:
    """An ``IDevice`` (1.3) running in this process: a name of the device
    table, or a backend given as ``module:Class`` / ``path/to/file.py:Class``.
    Raises LookupError (``DriverLoadError`` when it exists but cannot load)."""
    from nnhal.drivers import registry

    return registry.get_device(name)


def open_device(name: str) -> Any:
    """The device ``name`` as a user names it on the command line: an
    in-process driver (a name of the device table or a ``module:Class`` spec),
    else a connection to the running service of that name.  Raises
    LookupError if neither exists."""
    from nnhal.drivers import registry

    if registry.knows(name):
        return registry.get_device(name)
    return connect(name)


def is_in_process(name: str) -> bool:
    """Whether :func:`open_device` gives ``name`` in process (a name of the device table or a spec) rather than
    as a service connection."""
    from nnhal.drivers import registry

    return registry.knows(name)


NO_REASON = "getSupportedOperations_1_3 answered false (the device gives no reason)"


def supported_operations(device: Any, model: Any) -> tuple[Any, list[bool], list[str]]:
    """``(status, supported, reasons)`` for a 1.3 ``model``: the device's
    ``getSupportedOperations_1_3`` answer and, per main operation, why it is
    refused ("" where supported), asked through nnhal's addition
    ``hal.INnhalDevice`` where the device has it (nnhal's front end, in process
    or through a service), else :data:`NO_REASON`."""
    from nnhal import hal

    status, flags = device.getSupportedOperations_1_3(model)
    flags = [bool(f) for f in flags]
    if status != hal.ErrorStatus.NONE or all(flags):
        return status, flags, [""] * len(flags)
    reasons = [""] * len(flags)
    if isinstance(device, hal.INnhalDevice):
        st, got = device.nnhal_getSupportedOperationsReasons(model)
        if st == hal.ErrorStatus.NONE and len(got) == len(flags):
            reasons = list(got)
    return status, flags, [("" if ok else r or NO_REASON) for ok, r in zip(flags, reasons)]


def connect(name: str, runtime_dir: Any = None) -> Any:
    """A proxy ``IDevice`` (1.3) of the running service ``name``; raises
    ``nnhal.service.client.ServiceUnavailable`` (a LookupError naming the
    registry directory) if none runs.  ``runtime_dir``: where the service
    registered (default ``$NNHAL_RUNTIME_DIR``, ...)."""
    from nnhal.service.client import connect as _connect

    return _connect(name, runtime_dir)


def list_services() -> list[str]:
    """Names of the driver services running now (for :func:`connect`)."""
    from nnhal.service.registry import list_services as _list

    return _list()


def list_devices() -> list[str]:
    """Names of the devices that can be had: the in-process drivers, then the
    running services (a name in both is the in-process one for ``open_device``)."""
    local = in_process_devices()
    return local + [n for n in list_services() if n not in local]


# NOTE: the public submodules API.md names (nnhal.hal, nnhal.memory, nnhal.fence, nnhal.burst...) load on first
# use, so ``import nnhal`` is enough and stays light (PEP 562 module __getattr__)
_SUBMODULES = frozenset({"hal", "aidl", "memory", "fence", "burst", "platform", "engine", "conformance", "service", "driver",
                         "ops", "tflite", "runtime", "drivers", "delegate", "tools", "cli"})


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        import importlib

        try:
            return importlib.import_module(f"nnhal.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"nnhal.{name}":
                raise
    raise AttributeError(f"module 'nnhal' has no attribute {name!r}")
