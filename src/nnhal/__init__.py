"""nnhal: the Android Neural Networks HAL 1.3 in Python.

``nnhal.hal`` holds the HAL types and interfaces; ``get_device(name)`` gives
an in-process driver (the CPU reference driver is ``sample-all``);
``connect(name)`` a proxy ``IDevice`` of a driver running as a service
(``nnhal serve --name NAME``); ``list_devices()`` names both.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

# NOTE: the partial sample drivers: the sample backend behind Android's operation filters (nnhal.drivers.partial)
IN_PROCESS_DEVICES = ("sample-all", "sample-float-fast", "sample-float-slow", "sample-quant", "sample-minimal")



def _optional_devices() -> tuple[str, ...]:
    # NOTE: litert-cpu exists only where its engine does (find_spec: no import of LiteRT here)
    import importlib.util

    try:
        return ("litert-cpu",) if importlib.util.find_spec("ai_edge_litert") is not None else ()
    except (ImportError, ValueError):
        return ()


IN_PROCESS_DEVICES = IN_PROCESS_DEVICES + _optional_devices()


def get_device(name: str = "sample-all") -> Any:
    """An ``IDevice`` (1.3) running in this process."""
    if name not in IN_PROCESS_DEVICES:
        raise LookupError(f"no in-process device named {name!r}; available: {', '.join(IN_PROCESS_DEVICES)}")
    from nnhal.driver import get_device_by_name

    return get_device_by_name(name)


def connect(name: str) -> Any:
    """A proxy ``IDevice`` (1.3) of the running service ``name``; raises
    ``nnhal.service.client.ServiceUnavailable`` (a LookupError naming the
    registry directory) if none runs."""
    from nnhal.service.client import connect as _connect

    return _connect(name)


def list_services() -> list[str]:
    """Names of the driver services running now (for :func:`connect`)."""
    from nnhal.service.registry import list_services as _list

    return _list()


def list_devices() -> list[str]:
    """Names of the devices that can be had: the in-process drivers, then the
    running services (a name in both is the in-process one for ``get_device``)."""
    return list(IN_PROCESS_DEVICES) + [n for n in list_services() if n not in IN_PROCESS_DEVICES]


# NOTE: the public submodules API.md names (nnhal.hal, nnhal.memory, nnhal.fence, nnhal.burst...) load on first
# use, so ``import nnhal`` is enough and stays light (PEP 562 module __getattr__)
_SUBMODULES = frozenset({"hal", "memory", "fence", "burst", "burst_packets", "fmq", "validation", "executor",
                         "conformance", "service", "driver", "ops", "tflite", "runtime", "drivers"})


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        import importlib

        try:
            return importlib.import_module(f"nnhal.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"nnhal.{name}":
                raise
    raise AttributeError(f"module 'nnhal' has no attribute {name!r}")
