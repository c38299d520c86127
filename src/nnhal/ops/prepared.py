"""The Prepare/Eval split for operations whose parameters are operands.

TFLite computes in ``Prepare`` what depends only on the model (parsed
scalars, shapes, multipliers, tables); here an operation's ``prepare`` does
that with :func:`prepared` over its constant operands, and ``execute`` reads
the result from ``ctx.state``.  When an operand is not a constant, the same
function runs in ``execute`` on the run-time value: one parser, called once
per model or once per execution.

A parser raises ValueError where the reference fails at run time; prepare
must not fail for it (the model is valid, its executions are not), so the
message is kept and every execution fails with it (OpExecutionError).
Prepared values are immutable and shared by concurrent executions.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from nnhal.ops.base import ExecContext


class Ready:
    """A parameter set computed once."""

    __slots__ = ("_v",)

    def __init__(self, v: Any) -> None:
        self._v = v

    def value(self, ctx: ExecContext) -> Any:
        return self._v


class Failed:
    """Parameters the reference refuses at run time: every execution fails with ``message``."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message

    def value(self, ctx: ExecContext) -> Any:
        raise ctx.fail(self.message)


def prepared(fn: Callable[..., Any], *args: Any) -> Optional[Any]:
    """``Ready(fn(*args))``, or ``Failed`` with fn's ValueError; None if an
    argument is None (an operand that is not a constant: execute computes it)."""
    if any(a is None for a in args):
        return None
    try:
        return Ready(fn(*args))
    except ValueError as e:
        return Failed(str(e))


class Deferred:
    """A prepared state restored from the compilation cache that still needs
    the operation's constant operands (``resolve(info)``, run once when the
    executor reads the model's constants): a cache keeps data once, in the
    model's own pools, and a state derived from it is rebuilt at load.
    ``resolve`` raises ValueError if the constants do not fit the state."""

    __slots__ = ("_fn",)

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self._fn = fn

    def resolve(self, info: Any) -> Any:
        return self._fn(info)
