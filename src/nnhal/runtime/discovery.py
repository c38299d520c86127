"""Device discovery for the client runtime (NNAPI's ``ANeuralNetworks_getDevice``):
the in-process drivers and the running driver services together, through
the public API only (``nnhal.list_devices`` / ``get_device`` / ``connect``)."""

from __future__ import annotations

from typing import Any, Optional

import nnhal
from nnhal import hal

REFERENCE = "sample-all"  # the CPU reference: every operation, the fallback of every partition


class Device:
    """One device: its name, its ``IDevice`` and (fetched once) its capabilities."""

    def __init__(self, name: str, device: Any, in_process: bool):
        self.name, self.device, self.in_process = name, device, in_process
        self._caps: Optional[hal.Capabilities] = None

    @property
    def capabilities(self) -> hal.Capabilities:
        if self._caps is None:
            status, caps = self.device.getCapabilities_1_3()
            # NOTE: a device that cannot say what it costs is taken as the worst choice, not an error
            self._caps = caps if status == hal.ErrorStatus.NONE and caps is not None else hal.Capabilities()
        return self._caps

    def performance(self, t: int) -> Optional[hal.PerformanceInfo]:
        for p in self.capabilities.operandPerformance:
            if int(p.type) == int(t):
                return p.info
        return None

    def __repr__(self) -> str:
        return f"Device({self.name!r}, {'in process' if self.in_process else 'service'})"


def names() -> list[str]:
    """Every device that can be had now: in-process drivers, then running services."""
    return nnhal.list_devices()


def get(name: Any) -> Device:
    """A :class:`Device` by name (in process first, else the running service),
    or wraps a given ``IDevice``."""
    if isinstance(name, Device):
        return name
    if not isinstance(name, str):
        return Device(getattr(name, "name", type(name).__name__), name, True)
    return Device(name, nnhal.open_device(name), nnhal.is_in_process(name))


def devices() -> list[Device]:
    """Every device that can be had now (see :func:`names`)."""
    return [get(n) for n in names()]
