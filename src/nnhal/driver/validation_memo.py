"""The last model a device validated, so that ``getSupportedOperations`` then
``prepareModel`` of the same model (what every NNAPI client does: the
runtime partitions, then compiles) validate it once.  Validation is a
function of the model, the bytes of its constant pools, the interface
version and the device's extensions alone (and of the registered
operations: their definitions are checked to be the same objects), so a
model equal in all of them (the driver's own copies compared: dataclass
equality, pool bytes compared whole) has the answer validated before.  One entry, taken when used (the
prepared model keeps its own copies): it holds memory only between the two
calls."""

from __future__ import annotations

import threading
from typing import Any, Optional

from nnhal.ops import registry


class ValidationMemo:
    """One (model, pool bytes, version) -> operation definitions entry (thread-safe)."""

    def __init__(self) -> None:
        self._entry: Optional[tuple] = None
        self._lock = threading.Lock()

    def take(self, model: Any, views: list, version: Any) -> Optional[list]:
        """The definitions validated for an equal model, pools and version (the entry is used up), or None."""
        with self._lock:
            entry = self._entry
            if entry is None:
                return None
            self._entry = None
        m, kept_views, v, defs = entry
        try:
            same = bool(v == version and len(kept_views) == len(views) and all(
                a.nbytes == b.nbytes and a == b for a, b in zip(kept_views, views)) and m == model)
            # NOTE: and the operations' definitions are still the registered ones (a validator replaced
            # since, as tests do, is asked again)
            same = same and all(d is None or registry.find(op.type) is d for op, d in zip(model.main.operations, defs))
        except Exception:  # noqa: BLE001 - values that cannot be compared are not the same model
            same = False
        return list(defs) if same else None

    def keep(self, model: Any, views: list, version: Any, defs: list) -> None:
        """Remembers a model just validated (the driver's own copy and its pools' private bytes)."""
        with self._lock:
            self._entry = (model, list(views), version, tuple(defs))
