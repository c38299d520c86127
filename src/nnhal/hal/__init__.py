"""The HAL types and interfaces of ``android.hardware.neuralnetworks`` 1.0-1.3.

Names here are the 1.3 versions; older versions of types that changed live in
:mod:`nnhal.hal.v1_0`, :mod:`nnhal.hal.v1_1` and :mod:`nnhal.hal.v1_2`
(declared as their differences from 1.3: :mod:`nnhal.hal.derive`).  The
stable AIDL form, versions 1-4, is :mod:`nnhal.hal.aidl` (loaded when asked
for).  This package imports nothing else of nnhal.
"""

from nnhal.hal.interfaces import *  # noqa: F401,F403
from nnhal.hal.interfaces import __all__ as _iface_all
from nnhal.hal.types import *  # noqa: F401,F403
from nnhal.hal.types import (  # noqa: F401
    NO_TIMING,
    OPERAND_TYPE_BYTE_SIZE,
    SCALAR_TYPES,
    UINT64_MAX,
    is_tensor_type,
    operation_name,
    safe_union_discriminator,
)

__all__ = list(_iface_all)

# the older HAL versions of the types that changed, and conversions to and from them
from nnhal.hal import convert, v1_0, v1_1, v1_2  # noqa: E402,F401
