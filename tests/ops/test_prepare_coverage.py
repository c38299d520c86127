"""Issue 20's Prepare/Eval split covers every operation: each one declares a
``prepare``, or is named here with why nothing of it depends only on the
model.  The list cannot go stale: an operation listed here that gains a
``prepare`` (or one that loses it without being listed) fails the test."""

from __future__ import annotations

from nnhal.hal import OperationType as Op
from nnhal.ops.registry import REGISTRY

_ELEMENTWISE = "float (and int32) only, no parameter and no quantization: nothing but the input's values"

NOTHING_TO_PREPARE: dict[Op, str] = {
    Op.ABS: _ELEMENTWISE,
    Op.EXP: _ELEMENTWISE,
    Op.FLOOR: _ELEMENTWISE,
    Op.LOG: _ELEMENTWISE,
    Op.NEG: _ELEMENTWISE,
    Op.SIN: _ELEMENTWISE,
    Op.SQRT: _ELEMENTWISE,
    Op.POW: "float only, no parameter and no quantization",
    Op.LOGICAL_AND: "BOOL8 only, no parameter",
    Op.LOGICAL_OR: "BOOL8 only, no parameter",
    Op.LOGICAL_NOT: "BOOL8 only, no parameter",
    Op.RANK: "its answer is the input's ndim, one attribute read",
    Op.IF: "control flow: the executor prepares the referenced subgraphs' own operations",
    Op.WHILE: "control flow: the executor prepares the referenced subgraphs' own operations",
}


def test_every_operation_prepares_or_says_why_not() -> None:
    missing = sorted(t.name for t, d in REGISTRY.items() if d.prepare is None and t not in NOTHING_TO_PREPARE)
    assert not missing, f"operations without prepare and without a reason here: {missing}"


def test_the_list_of_exceptions_is_current() -> None:
    stale = sorted(t.name for t in NOTHING_TO_PREPARE if REGISTRY[t].prepare is not None)
    assert not stale, f"listed as having nothing to prepare, but they prepare: {stale}"
    assert all(reason.strip() for reason in NOTHING_TO_PREPARE.values())
