"""nnhal: the Android Neural Networks HAL 1.3 in Python.

``nnhal.hal`` holds the HAL types and interfaces; ``get_device(name)`` gives
an in-process driver (the CPU reference driver is ``sample-all``).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

IN_PROCESS_DEVICES = ("sample-all",)


def get_device(name: str = "sample-all") -> Any:
    """An ``IDevice`` (1.3) running in this process."""
    if name not in IN_PROCESS_DEVICES:
        raise LookupError(f"no in-process device named {name!r}; available: {', '.join(IN_PROCESS_DEVICES)}")
    from nnhal.driver import get_sample_device

    return get_sample_device(name)


def list_devices() -> list[str]:
    """Names of the devices that can be had."""
    return list(IN_PROCESS_DEVICES)
