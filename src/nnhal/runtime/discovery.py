"""Device discovery for the client runtime (NNAPI's ``ANeuralNetworks_getDevice``):
the in-process drivers and the running driver services together, through
the public API only (``nnhal.list_devices`` / ``get_device`` / ``connect``),
each spoken to through its AIDL face when it has one
(:mod:`nnhal.runtime.face`)."""

from __future__ import annotations

from typing import Any, Optional

import nnhal
from nnhal import hal
from nnhal.runtime.face import Face, open_face

REFERENCE = "sample-all"  # the CPU reference: every operation, the fallback of every partition


class Device:
    """One device: its name, its ``IDevice`` (either interface, or a face given as such), its faces
    (opened once per interface version) and (fetched once) its capabilities."""

    def __init__(self, name: str, device: Any, in_process: bool, owns: bool = False):
        self.name, self.in_process, self.owns = name, in_process, owns
        self.fixed: Optional[Face] = device if isinstance(device, Face) else None
        self.device = device.device if isinstance(device, Face) else device
        self._faces: dict[hal.HalVersion, Face] = {}
        self._caps: Optional[hal.Capabilities] = None

    def face(self, version: hal.HalVersion = hal.HalVersion.AIDL_V4) -> Face:
        """The face at ``version``: the AIDL face of that version when the device has one and ``version`` is
        AIDL 1-4, else its HIDL face (a face the device was given as is kept whatever the version)."""
        if self.fixed is not None:
            return self.fixed
        if version not in self._faces:
            self._faces[version] = open_face(self.device, version, self.name)
        return self._faces[version]

    @property
    def capabilities(self) -> hal.Capabilities:
        if self._caps is None:
            # NOTE: what it costs is the same through either face: the one at hand (HIDL when it has one: no
            # second connection to a service)
            status, caps = self.face(hal.HalVersion.V1_3).capabilities()
            # NOTE: a device that cannot say what it costs is taken as the worst choice, not an error
            self._caps = caps if status == hal.ErrorStatus.NONE and caps is not None else hal.Capabilities()
        return self._caps

    def close(self) -> None:
        """Closes the connections it opened: its faces', and the device's when it opened it by name."""
        for face in self._faces.values():
            face.close()
        self._faces.clear()
        close = getattr(self.device, "close", None) if self.owns else None
        if close is not None:
            self.owns = False
            close()

    def extensions(self) -> list[hal.Extension]:
        """What it declares (``getSupportedExtensions``; empty when it cannot say)."""
        status, exts = self.face(hal.HalVersion.V1_3).extensions()
        return exts if status == hal.ErrorStatus.NONE else []

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
    if isinstance(name, Face):
        return Device(name.name, name, True)
    if not isinstance(name, str):
        return Device(getattr(name, "name", type(name).__name__), name, True)
    local = nnhal.is_in_process(name)
    return Device(name, nnhal.open_device(name), local, owns=not local)


def devices() -> list[Device]:
    """Every device that can be had now (see :func:`names`)."""
    return [get(n) for n in names()]
