"""Public path of :mod:`nnhal.runtime.burst` (API.md names ``nnhal.burst.BurstController``): the same module object."""

import sys

from nnhal.runtime import burst

sys.modules[__name__] = burst
