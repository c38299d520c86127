"""Public path of :mod:`nnhal.platform.fence` (API.md names ``nnhal.fence``): the same module object."""

import sys

from nnhal.platform import fence

sys.modules[__name__] = fence
