"""The HAL front end every driver shares (Android's ``SampleDriver``): IDevice
(:class:`Device`), IPreparedModel (:class:`PreparedModel`), executions,
buffers, bursts, fences, the scheduler, the caching protocol and the backend
interface (:mod:`nnhal.driver.backend`) a driver plugs in through."""

from nnhal.driver.backend import Backend, Compiled
from nnhal.driver.device import Device
from nnhal.driver.prepared_model import PreparedModel

__all__ = ["Backend", "Compiled", "Device", "PreparedModel"]
