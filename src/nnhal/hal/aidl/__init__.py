"""The stable AIDL form of the Neural Networks HAL, ``android.hardware.neuralnetworks``
versions 1-4 (NNAPI feature levels 5-8): the types (:mod:`.types`), the
interfaces and the binding's errors (:mod:`.interfaces`), and the
conversions to and from the canonical types the front end speaks
(:mod:`.convert`).  Beside the HIDL types in the lowest layer: this package
imports nothing of nnhal but :mod:`nnhal.hal`.  Users import the public
:mod:`nnhal.aidl`, which adds ``get_device``.
"""

from nnhal.hal.aidl.interfaces import *  # noqa: F401,F403
from nnhal.hal.aidl.interfaces import __all__ as _iface_all
from nnhal.hal.aidl.types import *  # noqa: F401,F403
from nnhal.hal.aidl.types import __all__ as _types_all

__all__ = [*_types_all, *_iface_all]

from nnhal.hal.aidl import convert  # noqa: E402,F401
