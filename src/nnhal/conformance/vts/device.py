"""Opening the device under test: the one place ``nnhal vts`` (and each of
its worker processes or cluster tasks) turns a ``--device`` name into an
``IDevice``: a name of the device table (built-in drivers, installed
plugins), a ``module:Class`` / ``file.py:Class`` backend, or a running
service (``nnhal.open_device``)."""

from __future__ import annotations

import difflib
from typing import Any


class DeviceNotFound(LookupError):
    """No device of that name: the message is one line for the user."""


def open_device(name: str) -> Any:
    """The ``IDevice`` named ``name``: an in-process driver (or plugin, or
    spec), else a connection to the running service of that name (raises
    :class:`DeviceNotFound`)."""
    import nnhal
    from nnhal.drivers.registry import DriverLoadError

    try:
        return nnhal.open_device(name)
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
