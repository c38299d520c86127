"""Polling before blocking: how a receiver that expects an answer soon waits.

A thread blocked in the kernel takes tens of microseconds to wake when the
answer arrives from another CPU (on the virtual machines CI runs on, 50-60
us per direction: more than the rest of a local round trip), so a receiver
that expects its message soon polls for it first.  Android's burst
controller and server do the same: they poll their fast message queues for a
short window (50 us by default) before they wait on the futex.  Used by the
service's call channels (both ends, :mod:`nnhal.service`) and by the burst
queues (:mod:`nnhal.platform.fmq`).

``NNHAL_IPC_SPIN_US`` sets every window (0 turns polling off).
"""

from __future__ import annotations

import os

__all__ = ["Spin", "spin_limit_ns"]

MAX_SPIN_US = 100_000


def spin_limit_ns(default_us: int) -> int:
    """The polling window: ``NNHAL_IPC_SPIN_US`` (0 turns polling off), else ``default_us``."""
    raw = os.environ.get("NNHAL_IPC_SPIN_US", "")
    try:
        us = int(raw) if raw else default_us
    except ValueError:
        us = default_us
    return max(0, min(us, MAX_SPIN_US)) * 1000


class Spin:
    """How long a receiver polls for its next message before it blocks.

    Adaptive: it polls only
    while the recent waits (an exponential average, blocking ones included)
    fit in the window, so a peer that answers slowly (a long execution, an
    idle client) costs no CPU; the wait measured then brings polling back
    when answers get quick again."""

    __slots__ = ("limit", "avg")

    def __init__(self, limit_ns: int):
        self.limit = limit_ns
        self.avg = 0

    def window(self) -> int:
        return self.limit if self.avg <= self.limit else 0

    def waited(self, ns: int) -> None:
        self.avg += (ns - self.avg) >> 2
