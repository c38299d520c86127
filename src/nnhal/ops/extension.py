"""Vendor extensions (HAL 1.2 ``types.hal``: ``Extension``,
``Extension.OperandTypeInformation``, ``Model.extensionNameToPrefix``,
``Operand.ExtraParams.extension``), declared as data, as operations are
(:mod:`nnhal.ops.base`), and resolved per model.

A driver declares an :class:`Extension`: its name, its operand types
(:class:`ExtensionOperand`: ``isTensor``, ``byteSize``, the numpy storage
dtype of an element, and a check of the ``extraParams.extension`` bytes) and
its operations (:class:`ExtensionOperation`: signatures, validate, prepare,
execute, as an :class:`~nnhal.ops.base.OpDef`).  Signatures name the
extension's own operand types by :class:`Local` (the type within the
extension), ordinary ones by ``OperandType``.

A model numbers each extension it uses by a prefix of its own
(``extensionNameToPrefix``); a type is ``(prefix << 16) | type within the
extension``.  :func:`resolve` reads a model's prefixes against what a device
declares (:class:`ModelExtensions`): the extension types of a declared
extension become :class:`ExtensionOperandType` / :class:`ExtensionOperationType`
(ints with the declaration attached), so validation, the executor and the
request path treat them as they treat ``OperandType`` / ``OperationType``
members.  A model keeps its resolved types only inside the driver:
:func:`plain_model` gives the HAL form back (caches, the wire).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import numpy as np

from nnhal import hal
from nnhal.ops.base import NUMPY_DTYPE, OpDef, OpValidationError, Signature

LOW_BITS_TYPE = int(hal.ExtensionTypeEncoding.LOW_BITS_TYPE)
LOW_MASK = (1 << LOW_BITS_TYPE) - 1
MAX_PREFIX = (1 << 16) - 1
_NAME = re.compile(r"^[a-z0-9_.]+$")


def split_type(t: int) -> tuple[int, int]:
    """(prefix, type within the extension) of an operand or operation type."""
    return int(t) >> LOW_BITS_TYPE, int(t) & LOW_MASK


def valid_extension_name(name: Any) -> bool:
    """types.hal / VTS: non-empty, [a-z0-9_.], with at least one '.' (a reverse domain name)."""
    return isinstance(name, str) and bool(_NAME.match(name)) and "." in name


# ---------------------------------------------------------------------------
# declarations


@dataclass(frozen=True)
class Local:
    """In an extension operation's signature: the extension's own operand type ``type``."""

    type: int


@dataclass(frozen=True)
class ExtensionOperand:
    """One operand type of an extension (``Extension.OperandTypeInformation``
    plus what a driver needs to run it): ``dtype`` stores one element;
    ``check_params(extension bytes or None)`` raises OpValidationError for
    parameters this type does not accept (None: it accepts none)."""

    type: int
    name: str
    is_tensor: bool
    byte_size: int
    dtype: Any
    check_params: Optional[Callable[[Optional[bytes]], None]] = None

    def hal(self) -> hal.ExtensionOperandTypeInformation:
        return hal.ExtensionOperandTypeInformation(type=self.type, isTensor=self.is_tensor, byteSize=self.byte_size)


@dataclass(frozen=True)
class ExtensionOperation:
    """One operation of an extension, declared as an OpDef is (signatures
    over ``OperandType`` and :class:`Local` types; validate / prepare /
    execute with the same contexts; cache hooks)."""

    type: int
    name: str
    signatures: Sequence[Signature]
    execute: Callable[[Any], list]
    validate: Optional[Callable[[Any], None]] = None
    prepare: Optional[Callable[[Any], Any]] = None
    save_state: Optional[Callable[[Any, Callable[[np.ndarray], int]], Any]] = None
    load_state: Optional[Callable[[Any, Callable[[int], np.ndarray]], Any]] = None
    omittable_inputs: frozenset = frozenset()
    allow_zero_sized: bool = False


@dataclass(frozen=True)
class Extension:
    """An extension a driver declares (what ``getSupportedExtensions`` answers, and how to run it).

    ``custom_ops``: TFLite custom operator codes this extension implements, each
    as one of its operations (``{"MyCustomOp": operation type}``), for the
    TFLite importer (``nnhal.tflite.custom``)."""

    name: str
    operand_types: Sequence[ExtensionOperand] = ()
    operations: Sequence[ExtensionOperation] = ()
    custom_ops: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not valid_extension_name(self.name):
            raise ValueError(f"extension name {self.name!r}: needs [a-z0-9_.] with a '.' (a reverse domain name)")
        for what, items in (("operand type", self.operand_types), ("operation", self.operations)):
            codes = [int(x.type) for x in items]
            if len(set(codes)) != len(codes) or not all(0 <= c <= LOW_MASK for c in codes):
                raise ValueError(f"extension {self.name}: {what} codes {codes} are not distinct values in [0, 65535]")
        for o in self.operand_types:
            if np.dtype(o.dtype).itemsize != o.byte_size:
                raise ValueError(f"extension {self.name}: {o.name} stores {np.dtype(o.dtype)} elements "
                                 f"({np.dtype(o.dtype).itemsize} bytes), its byte_size is {o.byte_size}")
        local = {o.type for o in self.operand_types}
        for op in self.operations:
            for sig in op.signatures:
                for spec in (*sig.inputs, *sig.outputs, *sig.optional):
                    for s in (spec if isinstance(spec, frozenset) else (spec,)):
                        if isinstance(s, Local) and s.type not in local:
                            raise ValueError(f"extension {self.name}: {op.name}'s signature names operand type "
                                             f"{s.type}, which it does not declare")
        for code in self.custom_ops.values():
            if not any(op.type == code for op in self.operations):
                raise ValueError(f"extension {self.name}: a custom operator maps to undeclared operation {code}")

    def hal(self) -> hal.Extension:
        return hal.Extension(name=self.name, operandTypes=[o.hal() for o in self.operand_types])

    def operand(self, type: int) -> Optional[ExtensionOperand]:
        return next((o for o in self.operand_types if o.type == type), None)

    def operation(self, type: int) -> Optional[ExtensionOperation]:
        return next((o for o in self.operations if o.type == type), None)


# ---------------------------------------------------------------------------
# resolved types: ints carrying their declaration


class ExtensionOperandType(int):
    """An extension operand type as one model numbers it, with its
    declaration: ``name``, ``is_tensor``, ``byte_size``, ``dtype``,
    ``extension`` (its name), ``decl``."""


    def __new__(cls, code: int, decl: ExtensionOperand, extension: str) -> "ExtensionOperandType":
        self = int.__new__(cls, code)
        self.decl, self.extension, self.name = decl, extension, decl.name
        self.is_tensor, self.byte_size, self.dtype = decl.is_tensor, int(decl.byte_size), np.dtype(decl.dtype)
        return self

    def __repr__(self) -> str:
        return self.name

    __str__ = __repr__

    def __reduce__(self) -> tuple:
        return int, (int(self),)  # NOTE: outside the driver it is the HAL's plain number

    def __deepcopy__(self, memo: dict) -> "ExtensionOperandType":
        return self  # NOTE: immutable


class ExtensionOperationType(int):
    """An extension operation type as one model numbers it, with its OpDef (``opdef``) and ``name``."""


    def __new__(cls, code: int, opdef: OpDef, extension: str) -> "ExtensionOperationType":
        self = int.__new__(cls, code)
        self.opdef, self.extension, self.name = opdef, extension, opdef.name
        return self

    def __repr__(self) -> str:
        return self.name

    __str__ = __repr__

    def __reduce__(self) -> tuple:
        return int, (int(self),)

    def __deepcopy__(self, memo: dict) -> "ExtensionOperationType":
        return self


def storage_dtype(t: Any) -> np.dtype:
    """The numpy dtype of an element of operand type ``t`` (an ``OperandType`` or a resolved extension type)."""
    if t.__class__ is ExtensionOperandType:
        return t.dtype
    return NUMPY_DTYPE[t]


def member_lookup(enum: Any) -> Callable[[Any], Any]:
    """``enum(v)`` as a function (ValueError for a value that names no member) that looks in the Enum's own
    table of members by value first: a dict lookup (~50 ns) where the Enum call costs ~250 ns, and a
    model's prepare asks for every operand's type and lifetime several times (~6,500 for kws)."""
    table = enum._value2member_map_

    def member(v: Any) -> Any:
        try:
            m = table.get(v)
        except TypeError:  # NOTE: unhashable: the Enum call says ValueError
            m = None
        return m if m is not None else enum(v)

    return member


_operand_type = member_lookup(hal.OperandType)


def operand_type(t: int) -> Any:
    """``hal.OperandType(t)`` (ValueError for a number that names none), or ``t`` itself when it is a
    resolved extension type."""
    return t if t.__class__ is ExtensionOperandType else _operand_type(t)


def type_name(t: Any) -> str:
    """A type's name for messages (its number when it has none)."""
    if t.__class__ in (ExtensionOperandType, ExtensionOperationType):
        return t.name
    if int(t) in hal.OperandType._value2member_map_:
        return hal.OperandType(t).name
    return str(int(t))


def _resolve_spec(spec: Any, codes: dict[int, ExtensionOperandType], where: str) -> Any:
    if isinstance(spec, frozenset):
        return frozenset(_resolve_spec(s, codes, where) for s in spec)
    if isinstance(spec, Local):
        if spec.type not in codes:
            raise ValueError(f"{where}: the signature names operand type {spec.type}, not declared")
        return codes[spec.type]
    return spec


def _opdef(op: ExtensionOperation, code: int, codes: dict[int, ExtensionOperandType], extension: str) -> OpDef:
    sigs = [dataclasses.replace(s, inputs=tuple(_resolve_spec(x, codes, op.name) for x in s.inputs),
                                outputs=tuple(_resolve_spec(x, codes, op.name) for x in s.outputs),
                                optional=tuple(_resolve_spec(x, codes, op.name) for x in s.optional))
            for s in op.signatures]
    d = OpDef(type=code, signatures=sigs, execute=op.execute, validate=op.validate,  # type: ignore[arg-type]
              prepare=op.prepare, omittable_inputs=op.omittable_inputs, allow_zero_sized=op.allow_zero_sized,
              save_state=op.save_state, load_state=op.load_state, name=op.name)
    d.type = ExtensionOperationType(code, d, extension)  # NOTE: OpInfo / ExecContext take the type from here
    return d


class ModelExtensions:
    """One model's extensions against a device's declarations: which prefixes
    name a declared extension, and the resolved types of those."""

    def __init__(self, model: hal.Model, declared: Sequence[Extension]):
        by_name = {e.name: e for e in declared}
        self.names: dict[int, str] = {}  # prefix -> name, every extension the model names
        self.declared: dict[int, Extension] = {}  # prefix -> the declaration, for those this device declares
        self.operand_types: dict[int, ExtensionOperandType] = {}
        self.operations: dict[int, ExtensionOperationType] = {}
        for entry in model.extensionNameToPrefix:
            prefix = int(entry.prefix)
            self.names[prefix] = entry.name
            ext = by_name.get(entry.name)
            if ext is None:
                continue
            self.declared[prefix] = ext
            codes = {o.type: ExtensionOperandType((prefix << LOW_BITS_TYPE) | o.type, o, ext.name)
                     for o in ext.operand_types}
            self.operand_types.update({int(c): c for c in codes.values()})
            for op in ext.operations:
                code = (prefix << LOW_BITS_TYPE) | op.type
                self.operations[code] = _opdef(op, code, codes, ext.name).type  # type: ignore[assignment]

    def __bool__(self) -> bool:
        return bool(self.declared)

    def declares(self, t: int) -> bool:
        """Whether the prefix of ``t`` names an extension this device declares."""
        return split_type(t)[0] in self.declared

    def extension_name(self, t: int) -> Optional[str]:
        return self.names.get(split_type(t)[0])

    def operand_type(self, t: int) -> Optional[ExtensionOperandType]:
        return self.operand_types.get(int(t))

    def operation(self, t: int) -> Optional[OpDef]:
        r = self.operations.get(int(t))
        return None if r is None else r.opdef

    def describe(self, t: int) -> str:
        """``name:type`` of an extension type (the type's name when resolved)."""
        r = self.operations.get(int(t)) or self.operand_types.get(int(t))
        prefix, local = split_type(t)
        name = self.names.get(prefix, f"prefix {prefix}")
        return f"{name}:{r.name if r is not None else local}"

    def apply(self, model: hal.Model) -> hal.Model:
        """``model`` with the types of its declared extensions resolved (a new
        model sharing unchanged parts); ``model`` itself when there are none."""
        if not self.declared:
            return model

        def sub(sg: hal.Subgraph) -> hal.Subgraph:
            ops = [dataclasses.replace(op, type=self.operations.get(int(op.type), op.type)) for op in sg.operations]
            operands = [dataclasses.replace(o, type=self.operand_types.get(int(o.type), o.type)) for o in sg.operands]
            return dataclasses.replace(sg, operands=operands, operations=ops)

        return dataclasses.replace(model, main=sub(model.main), referenced=[sub(s) for s in model.referenced])


def resolve(model: hal.Model, declared: Sequence[Extension]) -> ModelExtensions:
    """The extensions of ``model`` (a model whose extensionNameToPrefix was checked) against ``declared``."""
    return ModelExtensions(model, declared)


def plain_model(model: hal.Model) -> hal.Model:
    """``model`` with plain int types (the HAL form), for encoders."""

    def plain(sg: hal.Subgraph) -> hal.Subgraph:
        if not any(o.type.__class__ is ExtensionOperandType for o in sg.operands) and not any(
                op.type.__class__ is ExtensionOperationType for op in sg.operations):
            return sg
        return dataclasses.replace(
            sg, operands=[dataclasses.replace(o, type=int(o.type)) if o.type.__class__ is ExtensionOperandType else o
                          for o in sg.operands],
            operations=[dataclasses.replace(op, type=int(op.type)) if op.type.__class__ is ExtensionOperationType
                        else op for op in sg.operations])

    return dataclasses.replace(model, main=plain(model.main), referenced=[plain(s) for s in model.referenced])


def check_params(operand: Any, params: Optional[bytes]) -> None:
    """Runs the declared check of an extension operand's parameters (OpValidationError)."""
    decl = operand.decl
    if decl.check_params is None:
        if params:
            raise OpValidationError(f"{decl.name} takes no extraParams.extension ({len(params)} bytes given)")
        return
    decl.check_params(params)
