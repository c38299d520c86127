"""The CPU reference driver (``sample-all``): IDevice, IPreparedModel."""

from nnhal.driver.device import SampleDevice, get_sample_device

__all__ = ["SampleDevice", "get_sample_device"]
