"""Public path of :mod:`nnhal.platform.memory` (API.md names ``nnhal.memory``): the same module object."""

import sys

from nnhal.platform import memory

sys.modules[__name__] = memory
