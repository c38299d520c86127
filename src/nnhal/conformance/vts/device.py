"""Opening the device under test: the one place ``nnhal vts`` and ``nnhal
conformance`` (and each of their worker processes or cluster tasks) turn a
``--device`` name into an ``IDevice``, or into the face of the interface
asked for (``--hal hidl|aidl``, :func:`open_face`): a name of the device
table (built-in drivers, installed plugins), a ``module:Class`` /
``file.py:Class`` backend, or a running service (``nnhal.open_device``)."""

from __future__ import annotations

import difflib
from typing import Any, Callable

from nnhal.conformance.face import AidlFace, Face, HidlFace, aidl_device


class DeviceNotFound(LookupError):
    """No device of that name: the message is one line for the user."""


def open_device(name: str) -> Any:
    """The ``IDevice`` named ``name``: an in-process driver (or plugin, or
    spec), else a connection to the running service of that name (raises
    :class:`DeviceNotFound`)."""
    import nnhal

    return _open(name, nnhal.open_device)


def open_face(name: str, hal: str = "hidl") -> Face:
    """The face ``hal`` ("hidl": HAL 1.3; "aidl": the stable AIDL) of the
    device named ``name`` (raises :class:`DeviceNotFound`)."""
    if hal == "aidl":
        import nnhal

        # NOTE: an in-process device's HIDL face answers nnhal's reasons query for the AIDL face's refusals
        return AidlFace(_open(name, aidl_device), reasons=nnhal.get_device(name) if nnhal.is_in_process(name) else None)
    return HidlFace(open_device(name))


def _open(name: str, opener: Callable[[str], Any]) -> Any:
    import nnhal
    from nnhal.drivers.registry import DriverLoadError

    try:
        return opener(name)
    except DriverLoadError as e:
        raise DeviceNotFound(f"device {name!r} cannot be loaded: {e}") from None
    except (LookupError, ValueError, OSError) as e:  # NOTE: no such service runs, or not a service name
        try:
            known = nnhal.list_devices()
        except OSError:
            known = nnhal.in_process_devices()
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise DeviceNotFound(f"no device named {name!r} ({hint}devices: {', '.join(known)}; {e})") from None


def close_device(device: Any) -> None:
    """Let go of a device (a service connection closes; an in-process driver stays)."""
    close = getattr(device, "close", None)
    if close is not None:
        close()
