"""The recipes: how each operation the reference implements is drawn
(``RECIPES``), and the operations deliberately left out, each with its
reason (``EXCLUDED``).  ``tests/test_vts_random.py`` checks that every
registered operation is in exactly one of them, so a new operation fails
the test until it gets a recipe or a reason."""

from __future__ import annotations

from types import ModuleType

from nnhal import hal
from nnhal.conformance.randgraph.generator import Recipe
from nnhal.conformance.randgraph.recipes import aidl, control, detection, elementwise, lookup, recurrent, shape, spatial

OT = hal.OperationType

MODULES: tuple[ModuleType, ...] = (elementwise, shape, spatial, lookup, detection, recurrent, control, aidl)


def _collect() -> dict[OT, Recipe]:
    table: dict[OT, Recipe] = {}
    for module in MODULES:
        for value in vars(module).values():
            if isinstance(value, Recipe):
                if value.op in table and table[value.op] is not value:
                    raise RuntimeError(f"{value.op.name}: two recipes")
                table[value.op] = value
    return dict(sorted(table.items(), key=lambda kv: kv[0].name))


RECIPES: dict[OT, Recipe] = _collect()

EXCLUDED: dict[OT, str] = {
    OT.RANDOM_MULTINOMIAL: "its outputs are random samples: only their distribution can be compared, which needs "
                           "thousands of samples per model (the vectors' multinomial check does that)",
}
