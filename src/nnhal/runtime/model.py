"""Building models, in the spirit of the NNAPI NDK's ``ANeuralNetworksModel``
(``addOperand`` / ``setOperandValue`` / ``addOperation`` /
``identifyInputsAndOutputs`` / ``finish``), numpy-first: operands from
shapes and dtypes or numpy constants, operations by ``hal.OperationType``
with scalars given as Python numbers, inputs and outputs by name.
:meth:`Model.finish` gives a ``hal.Model`` (HAL 1.3 ``types.hal``) validated
by the same code and with the same messages as the driver
(:func:`nnhal.engine.validation.validate_model`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence, Union

import numpy as np

from nnhal import hal
from nnhal.engine.validation import ValidationError, validate_model
from nnhal.ops.extension import MAX_PREFIX, valid_extension_name
from nnhal.runtime import extensions as rt_extensions

T = hal.OperandType
L = hal.OperandLifeTime

# numpy dtype -> tensor operand type (uint8 / int8 are the quantized types: give a scale)
TENSOR_TYPES: dict[np.dtype, T] = {
    np.dtype(np.float32): T.TENSOR_FLOAT32, np.dtype(np.float16): T.TENSOR_FLOAT16,
    np.dtype(np.int32): T.TENSOR_INT32, np.dtype(np.uint8): T.TENSOR_QUANT8_ASYMM,
    np.dtype(np.int8): T.TENSOR_QUANT8_ASYMM_SIGNED, np.dtype(np.bool_): T.TENSOR_BOOL8,
    np.dtype(np.int16): T.TENSOR_QUANT16_SYMM, np.dtype(np.uint16): T.TENSOR_QUANT16_ASYMM,
}
NUMPY_DTYPES: dict[T, Any] = {
    T.FLOAT32: np.float32, T.INT32: np.int32, T.UINT32: np.uint32, T.BOOL: np.bool_, T.FLOAT16: np.float16,
    T.TENSOR_FLOAT32: np.float32, T.TENSOR_FLOAT16: np.float16, T.TENSOR_INT32: np.int32,
    T.TENSOR_QUANT8_ASYMM: np.uint8, T.TENSOR_QUANT8_ASYMM_SIGNED: np.int8, T.TENSOR_QUANT8_SYMM: np.int8,
    T.TENSOR_QUANT8_SYMM_PER_CHANNEL: np.int8, T.TENSOR_BOOL8: np.bool_, T.TENSOR_QUANT16_SYMM: np.int16,
    T.TENSOR_QUANT16_ASYMM: np.uint16,
}


@dataclasses.dataclass(frozen=True)
class ExtensionType:
    """An extension operand type as one model numbers it
    (``ANeuralNetworksModel_getExtensionOperandType``): ``code`` is
    ``(prefix << 16) | type``; ``is_tensor`` / ``byte_size`` as the devices
    declare it; ``dtype`` how its elements are read and written."""

    code: int
    extension: str
    type: int
    is_tensor: bool
    byte_size: int
    dtype: Any

    def __int__(self) -> int:
        return self.code

    @property
    def name(self) -> str:
        return f"{self.extension}:{self.type}"


def operand_type(t: Any) -> Any:
    """A ``hal.OperandType`` from itself, its name, or a numpy dtype (tensor
    types); an :class:`ExtensionType` as it is."""
    if isinstance(t, (T, ExtensionType)):
        return t
    if isinstance(t, str) and t.upper() in T.__members__:
        return T[t.upper()]
    try:
        return TENSOR_TYPES[np.dtype(t)]
    except (TypeError, KeyError):
        raise ValueError(f"no operand type for {t!r}") from None


def numpy_dtype(t: Any, extension_dtypes: Optional[dict] = None) -> Any:
    """The numpy dtype of an operand type's elements (``extension_dtypes``: those of a model's extension types)."""
    if isinstance(t, ExtensionType):
        return t.dtype
    if extension_dtypes and int(t) in extension_dtypes:
        return extension_dtypes[int(t)]
    return NUMPY_DTYPES[T(t)]


def _is_scalar(t: Any) -> bool:
    return (not t.is_tensor) if isinstance(t, ExtensionType) else t in hal.SCALAR_TYPES


class Operand:
    """One operand of a :class:`Model` (its index in the subgraph, as NNAPI's)."""

    def __init__(self, model: "Model", index: int, type: Any, dimensions: list[int], scale: float, zero_point: int,
                 channel_quant: Optional[hal.SymmPerChannelQuantParams], name: str,
                 extension_params: Optional[bytes] = None):
        self.model, self.index, self.type, self.dimensions = model, index, type, dimensions
        self.extension_params = extension_params  # extraParams.extension
        self.scale, self.zero_point, self.channel_quant, self.name = scale, zero_point, channel_quant, name
        self.lifetime = L.TEMPORARY_VARIABLE
        self.value: Optional[bytes] = None  # constants
        self.subgraph: Optional[Model] = None  # SUBGRAPH operands

    def __repr__(self) -> str:
        return f"Operand({self.name or self.index}: {self.type.name}{self.dimensions})"


Arg = Union[Operand, int, float, bool, None, np.ndarray, "Model"]


class Model:
    """A model (or a subgraph of one, for IF / WHILE) under construction.

    >>> m = Model()
    >>> a = m.input("a", np.float32, [2]); b = m.input("b", np.float32, [2])
    >>> m.output(m.operation(hal.OperationType.ADD, [a, b, 0], (np.float32, [2])), "sum")
    """

    def __init__(self, name: str = "") -> None:
        self.name = name
        self.operands: list[Operand] = []
        self.operations: list[hal.Operation] = []
        self.inputs: list[Operand] = []
        self.outputs: list[Operand] = []
        self.relaxed = False
        self._finished: Optional[hal.Model] = None
        self.extension_prefixes: dict[str, int] = {}  # NOTE: this model's own numbering, as the NDK's

    # ------------------------------------------------------------------ extensions
    def _prefix(self, extension: str) -> int:
        if not valid_extension_name(extension):
            raise ValueError(f"invalid extension name {extension!r} ([a-z0-9_.] with a '.')")
        if extension not in self.extension_prefixes:
            if len(self.extension_prefixes) >= MAX_PREFIX:
                raise ValueError("too many extensions in one model")
            self.extension_prefixes[extension] = len(self.extension_prefixes) + 1
        return self.extension_prefixes[extension]

    def extension_operand_type(self, extension: str, type: int, dtype: Any = None) -> ExtensionType:
        """``ANeuralNetworksModel_getExtensionOperandType``: operand type
        ``type`` of ``extension`` as this model numbers it, with what the
        devices declare of it (ValueError when none declares it); ``dtype``:
        how its elements are given and read (default: an unsigned integer of
        its byteSize)."""
        self._check_open()
        if not 0 <= int(type) <= 0xFFFF:
            raise ValueError(f"extension operand type {type} out of range")
        info = rt_extensions.operand_info(extension, int(type))
        code = (self._prefix(extension) << 16) | int(type)
        dt = np.dtype(dtype) if dtype is not None else rt_extensions.default_dtype(info.byteSize)
        if dt.itemsize != info.byteSize:
            raise ValueError(f"dtype {dt} has {dt.itemsize} bytes, {extension} type {type} has {info.byteSize}")
        return ExtensionType(code, extension, int(type), bool(info.isTensor), int(info.byteSize), dt)

    def extension_operation_type(self, extension: str, type: int) -> int:
        """``ANeuralNetworksModel_getExtensionOperationType``: operation
        ``type`` of ``extension`` as this model numbers it (give it to :meth:`operation`)."""
        self._check_open()
        if not 0 <= int(type) <= 0xFFFF:
            raise ValueError(f"extension operation type {type} out of range")
        return (self._prefix(extension) << 16) | int(type)

    # ------------------------------------------------------------------ operands
    def _check_open(self) -> None:
        if self._finished is not None:
            raise ValueError("the model is finished: it cannot change any more")

    def tensor(self, type: Any, shape: Sequence[int] = (), scale: float = 0.0, zero_point: int = 0,
               channel_quant: Optional[tuple[Sequence[float], int]] = None, name: str = "",
               extension_params: Optional[bytes] = None) -> Operand:
        """A new temporary operand (an operation's output): ``type`` a
        ``hal.OperandType`` (scalar or tensor), a numpy dtype or an
        :class:`ExtensionType`; ``shape`` with 0 for unknown dimensions;
        ``channel_quant`` (scales, channelDim) for
        TENSOR_QUANT8_SYMM_PER_CHANNEL; ``extension_params``: an extension
        operand's ``extraParams.extension`` bytes
        (``ANeuralNetworksModel_setOperandExtensionData``)."""
        self._check_open()
        t = operand_type(type)
        cq = None
        if channel_quant is not None:
            cq = hal.SymmPerChannelQuantParams(scales=[float(s) for s in channel_quant[0]],
                                               channelDim=int(channel_quant[1]))
        if isinstance(t, ExtensionType) and t.code >> 16 not in self.extension_prefixes.values():
            raise ValueError(f"{t.name} was numbered by another model")
        if extension_params is not None and not isinstance(t, ExtensionType):
            raise ValueError("extension_params are for extension operand types")
        o = Operand(self, len(self.operands), t, [int(d) for d in shape], float(scale), int(zero_point), cq,
                    name, None if extension_params is None else bytes(extension_params))
        self.operands.append(o)
        return o

    def input(self, name: str, type: Any, shape: Sequence[int] = (), scale: float = 0.0, zero_point: int = 0,
              channel_quant: Optional[tuple[Sequence[float], int]] = None,
              extension_params: Optional[bytes] = None) -> Operand:
        """A model input named ``name`` (the name executions give its value by)."""
        if any(o.name == name for o in self.inputs):
            raise ValueError(f"two inputs named {name!r}")
        o = self.tensor(type, shape, scale, zero_point, channel_quant, name, extension_params)
        o.lifetime = L.SUBGRAPH_INPUT
        self.inputs.append(o)
        return o

    def constant(self, value: Any, type: Any = None, scale: float = 0.0, zero_point: int = 0,
                 channel_quant: Optional[tuple[Sequence[float], int]] = None, name: str = "") -> Operand:
        """A constant operand holding ``value`` (a numpy array, or a Python
        number for a scalar: int -> INT32, float -> FLOAT32, bool -> BOOL
        unless ``type`` says otherwise)."""
        if type is None:
            if isinstance(value, np.ndarray):
                type = operand_type(value.dtype)
            elif isinstance(value, (bool, np.bool_)):
                type = T.BOOL
            elif isinstance(value, (int, np.integer)):
                type = T.INT32
            elif isinstance(value, (float, np.floating)):
                type = T.FLOAT32
            else:
                raise ValueError(f"no operand type for the constant {value!r}: give type=")
        t = operand_type(type)
        arr = np.asarray(value, dtype=numpy_dtype(t))
        shape = [] if _is_scalar(t) else list(arr.shape)
        o = self.tensor(t, shape, scale, zero_point, channel_quant, name)
        o.lifetime = L.CONSTANT_COPY
        o.value = np.ascontiguousarray(arr).tobytes()
        return o

    def omitted(self, type: Any = T.TENSOR_FLOAT32) -> Operand:
        """An optional operand given no value (``NO_VALUE``)."""
        o = self.tensor(type, [])
        o.lifetime = L.NO_VALUE
        return o

    def subgraph(self, body: "Model") -> Operand:
        """A SUBGRAPH operand referring to ``body`` (for IF / WHILE)."""
        o = self.tensor(T.SUBGRAPH, [])
        o.lifetime = L.SUBGRAPH
        o.subgraph = body
        return o

    # ------------------------------------------------------------------ operations
    def _arg(self, x: Arg, float_type: T) -> Operand:
        if isinstance(x, Operand):
            if x.model is not self:
                raise ValueError(f"{x!r} belongs to another model")
            return x
        if x is None:
            return self.omitted()
        if isinstance(x, Model):
            return self.subgraph(x)
        if isinstance(x, (float, np.floating)) and not isinstance(x, np.ndarray):
            return self.constant(x, float_type)
        return self.constant(x)

    def operation(self, type: hal.OperationType, inputs: Sequence[Arg], outputs: Any) -> Any:
        """Adds an operation.  ``inputs``: operands, Python numbers (scalar
        constants: a float is FLOAT16 when the operation's first tensor input
        is TENSOR_FLOAT16, else FLOAT32), numpy arrays (constant tensors),
        None (an omitted optional input) or a :class:`Model` (a subgraph).
        ``outputs``: an operand, a ``(type, shape[, scale, zero_point])``
        tuple, or a list of them.  Returns the output operand (or a list)."""
        self._check_open()
        first_tensor = next((x.type for x in inputs if isinstance(x, Operand) and not _is_scalar(x.type)), None)
        float_type = T.FLOAT16 if first_tensor == T.TENSOR_FLOAT16 else T.FLOAT32
        ins = [self._arg(x, float_type) for x in inputs]
        single = isinstance(outputs, (Operand, tuple))
        outs = []
        for spec in ([outputs] if single else list(outputs)):
            if isinstance(spec, Operand):
                if spec.model is not self or spec.lifetime != L.TEMPORARY_VARIABLE:
                    raise ValueError(f"{spec!r} cannot be an operation's output")
                outs.append(spec)
            else:
                outs.append(self.tensor(*spec))
        if int(type) >> 16 and int(type) >> 16 not in self.extension_prefixes.values():
            raise ValueError(f"operation type {int(type)}: an extension type not numbered by this model "
                             "(extension_operation_type)")
        op_type = int(type) if int(type) >> 16 else hal.OperationType(type)
        self.operations.append(hal.Operation(type=op_type, inputs=[o.index for o in ins],
                                             outputs=[o.index for o in outs]))
        return outs[0] if single else outs

    def output(self, operand: Operand, name: str = "") -> Operand:
        """Marks ``operand`` as a model output named ``name``."""
        self._check_open()
        if operand.model is not self:
            raise ValueError(f"{operand!r} belongs to another model")
        name = name or operand.name or f"output{len(self.outputs)}"
        if any(o.name == name for o in self.outputs):
            raise ValueError(f"two outputs named {name!r}")
        if operand.lifetime != L.TEMPORARY_VARIABLE:
            raise ValueError(f"{operand!r} is not computed by an operation: it cannot be an output")
        operand.lifetime = L.SUBGRAPH_OUTPUT
        operand.name = name
        self.outputs.append(operand)
        return operand

    def relax_float32_to_float16(self, relax: bool = True) -> None:
        """``ANeuralNetworksModel_relaxComputationFloat32toFloat16``."""
        self._check_open()
        self.relaxed = bool(relax)

    # ------------------------------------------------------------------ finishing
    def input_names(self) -> list[str]:
        return [o.name for o in self.inputs]

    def output_names(self) -> list[str]:
        return [o.name for o in self.outputs]

    def extension_dtypes(self) -> dict[int, Any]:
        """The dtype of every extension operand type this model (and its subgraphs) uses, by code."""
        out: dict[int, Any] = {}
        seen: list[Model] = []

        def walk(m: Model) -> None:
            seen.append(m)
            for o in m.operands:
                if isinstance(o.type, ExtensionType):
                    out[o.type.code] = o.type.dtype
                if o.subgraph is not None and o.subgraph not in seen:
                    walk(o.subgraph)
        walk(self)
        return out

    def finish(self) -> hal.Model:
        """The validated ``hal.Model`` (the same object on later calls);
        raises ``nnhal.engine.validation.ValidationError`` with the driver's message."""
        if self._finished is not None:
            return self._finished
        subgraphs: list[Model] = []  # referenced, in order of discovery

        def collect(m: Model, depth: int) -> None:
            if depth > 64:
                raise ValidationError("subgraphs nest too deep (or refer to each other in a cycle)")
            for o in m.operands:
                if o.subgraph is not None and o.subgraph is not self and o.subgraph not in subgraphs:
                    subgraphs.append(o.subgraph)
                    collect(o.subgraph, depth + 1)
        collect(self, 0)
        values = bytearray()

        def build(m: Model) -> hal.Subgraph:
            consumers = [0] * len(m.operands)
            for op in m.operations:
                for i in op.inputs:
                    consumers[i] += 1
            operands = []
            for o in m.operands:
                loc = hal.DataLocation()
                if o.lifetime == L.CONSTANT_COPY:
                    while len(values) % 8:  # NOTE: aligned, as the NDK lays values out
                        values.append(0)
                    loc = hal.DataLocation(poolIndex=0, offset=len(values), length=len(o.value or b""))
                    values.extend(o.value or b"")
                elif o.lifetime == L.SUBGRAPH:
                    if o.subgraph is self:
                        raise ValidationError("a subgraph refers to the main model")
                    loc = hal.DataLocation(offset=subgraphs.index(o.subgraph))
                extra = hal.OperandExtraParams(channelQuant=o.channel_quant) if o.channel_quant else \
                    hal.OperandExtraParams(extension=o.extension_params) if o.extension_params is not None else \
                    hal.OperandExtraParams()
                operands.append(hal.Operand(type=int(o.type) if isinstance(o.type, ExtensionType) else o.type,
                                            dimensions=list(o.dimensions),
                                            numberOfConsumers=consumers[o.index], scale=o.scale,
                                            zeroPoint=o.zero_point, lifetime=o.lifetime, location=loc,
                                            extraParams=extra))
            return hal.Subgraph(operands=operands, operations=[hal.Operation(op.type, list(op.inputs),
                                                                             list(op.outputs))
                                                               for op in m.operations],
                                inputIndexes=[o.index for o in m.inputs], outputIndexes=[o.index for o in m.outputs])

        prefixes = dict(self.extension_prefixes)
        for m in subgraphs:  # NOTE: one numbering per model: a subgraph's must agree with the main model's
            for name, p in m.extension_prefixes.items():
                if prefixes.setdefault(name, p) != p or list(prefixes.values()).count(p) > 1:
                    raise ValidationError(f"subgraph {m.name or '?'} numbers extension {name} as {p}, the model "
                                          f"as {prefixes[name]}: number it through the main model")
        main = build(self)
        referenced = [build(m) for m in subgraphs]
        model = hal.Model(main=main, referenced=referenced, operandValues=bytes(values),
                          relaxComputationFloat32toFloat16=self.relaxed,
                          extensionNameToPrefix=[hal.ExtensionNameAndPrefix(name=n, prefix=p)
                                                 for n, p in sorted(prefixes.items(), key=lambda kv: kv[1])])
        # NOTE: as the NDK's ModelBuilder: valid as of the runtime's newest feature level (AIDL v4); which
        # level the model needs decides the devices' face (nnhal.runtime.face.model_version)
        validate_model(model, [], version=hal.HalVersion.AIDL_V4)
        self._finished = model
        return model
