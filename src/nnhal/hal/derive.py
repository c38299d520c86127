"""Types of one interface version declared as their differences from the
canonical types (:mod:`nnhal.hal.types`, the HIDL 1.3 shapes, which Android's
``nn/common`` canonical types play the part of).

An interface version's binding is mostly the canonical set with a field
dropped, added, renamed or retyped, or an enum cut at that version's last
value; writing each such type out again is what made ``v1_0`` .. ``v1_2``
repeat ``types``.  Here a version's type is one declaration:

- :func:`struct`: a dataclass with the fields of one or more base dataclasses,
  in their order, minus ``drop``, with ``rename`` and ``retype`` applied in
  place and ``add`` appended; every field keeps a default.  Annotations are
  the resolved types themselves (never strings), so ``typing.get_type_hints``
  works on every derived class (the service's wire decodes by them).
- :func:`enum`: an ``IntEnum`` of a base enum's members (those ``keep``
  accepts), renamed or with other values where the version differs, plus
  ``extra`` members.

A type identical in a version is not derived at all: the version's module
names the canonical class itself (``hal.v1_2.OutputShape is hal.OutputShape``).
"""

from __future__ import annotations

import dataclasses
import enum as _enum
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Optional

__all__ = ["below", "enum", "struct"]

OEM_MIN = 10000  # NOTE: the OEM operand and operation types sit above every fundamental value


def below(last: int, oem: bool = True) -> Callable[[int], bool]:
    """``keep`` for :func:`enum`: the values up to ``last`` (a version's last
    fundamental value), and the OEM values unless ``oem`` is false."""
    return lambda v: v <= last or (oem and v >= OEM_MIN)


def _field(name: str, annotation: Any, default: Any) -> tuple[str, Any, dataclasses.Field]:
    # NOTE: a callable default (list, a dataclass) is a factory, as the HAL's "empty" value of a vector or
    # a struct; anything else (an int, an enum member, None, b"") is the default itself
    if callable(default):
        return name, annotation, dataclasses.field(default_factory=default)
    return name, annotation, dataclasses.field(default=default)


def struct(name: str, bases: type | tuple[type, ...], *, module: str, drop: Iterable[str] = (),
           rename: Optional[Mapping[str, str]] = None, retype: Optional[Mapping[str, tuple[Any, Any]]] = None,
           add: Iterable[tuple[str, Any, Any]] = (), attrs: Optional[Mapping[str, Any]] = None,
           doc: Optional[str] = None) -> type:
    """A dataclass ``name`` of ``module`` with the fields of ``bases`` (a
    dataclass or several, their fields in order).  ``drop``: field names left
    out; ``rename``: old name -> new name; ``retype``: (new) name ->
    (annotation, default); ``add``: (name, annotation, default) appended;
    ``attrs``: class attributes set on the result (nested names such as
    ``Capabilities.OperandPerformance``, constants).  A callable default is a
    factory (``list``, a dataclass)."""
    bases = bases if isinstance(bases, tuple) else (bases,)
    rename, retype, dropped = dict(rename or {}), dict(retype or {}), set(drop)
    specs = []
    for base in bases:
        hints = typing.get_type_hints(base)
        for f in dataclasses.fields(base):
            if f.name in dropped:
                continue
            new = rename.pop(f.name, f.name)
            if new in retype:
                specs.append(_field(new, *retype.pop(new)))
                continue
            default = f.default_factory if f.default is dataclasses.MISSING else f.default
            specs.append(_field(new, hints[f.name], default))
    specs += [_field(*a) for a in add]
    if rename or retype:
        raise ValueError(f"{name}: no field to rename or retype: {sorted({*rename, *retype})}")
    cls = dataclasses.make_dataclass(name, specs)
    cls.__module__ = module
    cls.__doc__ = doc or f"{name}({', '.join(s[0] for s in specs)})"
    for k, v in (attrs or {}).items():
        setattr(cls, k, v)
    return cls


def enum(name: str, base: type[_enum.IntEnum], *, module: str, keep: Callable[[int], bool] = lambda v: True,
         rename: Optional[Mapping[str, str]] = None, values: Optional[Mapping[str, int]] = None,
         extra: Optional[Mapping[str, int]] = None) -> type[_enum.IntEnum]:
    """An ``IntEnum`` ``name`` of ``module``: the members of ``base`` whose value
    ``keep`` accepts, in order, renamed by ``rename`` (old -> new), their
    values replaced by ``values`` (new name -> value), then the ``extra``
    members (name -> value) that are not already there."""
    rename, values = dict(rename or {}), dict(values or {})
    # NOTE: __members__, not iteration: aliases (OperandTypeRange.FUNDAMENTAL_MIN = BASE_MIN) are members too
    members = [(rename.get(n, n), int(m.value)) for n, m in base.__members__.items() if keep(int(m.value))]
    members = [(n, values.get(n, v)) for n, v in members]
    names = {n for n, _ in members}
    members += [(n, v) for n, v in (extra or {}).items() if n not in names]
    return _enum.IntEnum(name, members, module=module, qualname=name)  # type: ignore[return-value]
