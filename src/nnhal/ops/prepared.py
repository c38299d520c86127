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

import numpy as np

from nnhal.ops import memo
from nnhal.ops.base import ExecContext, OpInfo


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


def attempt(fn: Callable[..., Any], *args: Any) -> Any:
    """``Ready(fn(*args))``, or ``Failed`` with fn's ValueError (None is an argument like any other)."""
    try:
        return Ready(fn(*args))
    except ValueError as e:
        return Failed(str(e))


def run_now(ctx: ExecContext, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` computed in the execution (parameters given at run time);
    fn's ValueError fails the execution."""
    try:
        return fn(*args)
    except ValueError as e:
        raise ctx.fail(str(e)) from None


class _Runtime:
    __slots__ = ()

    def __repr__(self) -> str:
        return "RUNTIME"


# a parameter operand whose value is known only at run time (see param)
RUNTIME = _Runtime()


def param(info: OpInfo, i: int) -> Any:
    """Input ``i``'s constant value, None if it is absent or omitted (NO_VALUE),
    RUNTIME if the model gives it at run time."""
    if i >= len(info.inputs):
        return None
    o = info.inputs[i]
    if o.is_omitted:
        return None
    return o.value if o.is_constant else RUNTIME


def constants(info: OpInfo, *positions: int) -> Optional[tuple]:
    """The constant values of inputs ``positions`` (see :func:`param`), or None when one of them is
    given at run time or absent (execute then parses what it gets)."""
    values = tuple(param(info, i) for i in positions)
    return None if any(v is RUNTIME or v is None for v in values) else values


class PerShape:
    """Parameters known at prepare (the constant operands) and a plan per input
    shape: ``fn(key, *args)`` (``key`` the input's shape, or whatever the plan
    depends on) computed once per key, at prepare for the declared shape when
    it is fully known (:meth:`prime`) and otherwise at the first execution of
    that shape, kept in a bounded thread-safe memo as ``Ready`` or ``Failed``
    (immutable, shared by concurrent executions)."""

    __slots__ = ("fn", "args", "plans")

    def __init__(self, fn: Callable[..., Any], *args: Any, size: int = 8) -> None:
        self.fn = fn
        self.args = args
        self.plans = memo.Memo(size)

    def prime(self, key: Any) -> "PerShape":
        """Computes the plan of ``key`` now (prepare: the declared shape), unless it is None."""
        if key is not None:
            self.plans.put(key, attempt(self.fn, key, *self.args))
        return self

    def plan(self, ctx: ExecContext, key: Any) -> Any:
        """The plan of ``key``; fails the execution as ``fn`` does."""
        p = self.plans.get(key)
        if p is None:
            p = self.plans.put(key, attempt(self.fn, key, *self.args))
        return p.value(ctx)


def planned(ctx: ExecContext, key: Any, fn: Callable[..., Any], *runtime_args: Any) -> Any:
    """The plan of ``key``: the prepared :class:`PerShape`'s (``ctx.state``), or, when the parameters
    are given at run time (no state), ``fn(key, *runtime_args)`` computed now."""
    st = ctx.state
    return st.plan(ctx, key) if st is not None else run_now(ctx, fn, key, *runtime_args)


def frozen(a: Optional[np.ndarray]) -> Optional[np.ndarray]:
    """``a`` made read-only (an array of a plan, shared by concurrent executions)."""
    if a is not None:
        a.setflags(write=False)
    return a


def static_shape(info: OpInfo, i: int = 0) -> Optional[tuple]:
    """Input ``i``'s declared shape when fully known (rank known, no 0 dimension), else None."""
    dims = info.inputs[i].dimensions
    return tuple(dims) if dims and 0 not in dims else None


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
