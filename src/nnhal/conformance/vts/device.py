"""Opening the device under test: the one place ``nnhal vts`` (and each of
its worker processes or cluster tasks) turns a ``--device`` name into an
``IDevice``.  Today that is an in-process driver (``nnhal.get_device``) or a
running service (``nnhal.connect``); the driver table with plugins plugs in
here."""

from __future__ import annotations

import difflib
from typing import Any


class DeviceNotFound(LookupError):
    """No device of that name: the message is one line for the user."""


def open_device(name: str) -> Any:
    """The ``IDevice`` named ``name``: an in-process driver, else a connection
    to the running service of that name (raises :class:`DeviceNotFound`)."""
    import nnhal

    if name in nnhal.IN_PROCESS_DEVICES:
        return nnhal.get_device(name)
    try:
        return nnhal.connect(name)
    except (LookupError, ValueError, OSError) as e:  # NOTE: no such service runs, or not a service name
        try:
            known = nnhal.list_devices()
        except OSError:
            known = list(nnhal.IN_PROCESS_DEVICES)
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise DeviceNotFound(f"no device named {name!r} ({hint}devices: {', '.join(known)}; {e})") from None


def close_device(device: Any) -> None:
    """Let go of a device (a service connection closes; an in-process driver stays)."""
    close = getattr(device, "close", None)
    if close is not None:
        close()
