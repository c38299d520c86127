"""The CPU reference driver (``sample-all``): IDevice, IPreparedModel."""

from nnhal.driver.device import SampleDevice, get_device_by_name, get_sample_device

__all__ = ["SampleDevice", "get_device_by_name", "get_sample_device"]
