"""``.tflite`` -> HAL 1.3 ``Model`` (``types.hal``), as Android's NNAPI delegate
builds an NNAPI model from a TFLite graph; with ``version`` AIDL 2 or 3 the
operators those versions have an operation for (BATCH_MATMUL, PACK,
MIRROR_PAD, REVERSE_V2: the table's ``native`` forms) become that operation,
as the delegate maps them from feature level 6 / 7.

Reads the flatbuffer into the object API of the schema module of ``ai-edge-litert``
(:func:`nnhal.tflite.verify.unpack`) and maps each operator through :data:`nnhal.tflite.table.MAPPINGS`.  Tensors
become operands: float32 -> ``TENSOR_FLOAT32``, uint8 -> ``TENSOR_QUANT8_ASYMM``,
int8 -> ``TENSOR_QUANT8_ASYMM_SIGNED`` (one scale) or
``TENSOR_QUANT8_SYMM_PER_CHANNEL`` (several scales, zero points 0), int32 ->
``TENSOR_INT32``, bool -> ``TENSOR_BOOL8``, int16 -> ``TENSOR_QUANT16_SYMM``,
constant int64 index tensors -> ``TENSOR_INT32``; rank-0 tensors become [1]
(as the delegate's scalar-as-tensor).  Constants above 128 bytes go to a
shared-memory pool (``CONSTANT_REFERENCE``), the others inline.  TFLite
variable tensors (RNN / LSTM / SVDF state) are zero constants: the model
computes one invocation from the initial state, as a freshly allocated
interpreter does.

Every operator that cannot be mapped exactly is collected with its index and
the reason; :class:`UnsupportedModelError` lists them all.  Nothing is skipped.

The file is not trusted: :func:`nnhal.tflite.verify.verify` checks the whole
flatbuffer (offsets, lengths, indexes, shapes, quantization arrays, sizes, IF /
WHILE references) before the schema module reads it, and
:class:`~nnhal.tflite.errors.InvalidModelError` names the first problem.  Each
operator's arity (from the table) and options type are checked before it is
mapped; constants folded at load (RANGE, ZEROS_LIKE, REVERSE_V2, MIRROR_PAD, zero
biases, ...) count against ``max_bytes``; referenced subgraphs are mapped callees
first, without recursion.  ``load`` raises only
:class:`~nnhal.tflite.errors.ModelError` (``InvalidModelError`` or
``UnsupportedModelError``) for a bad model, ``OSError`` for a file it cannot read.
"""

from __future__ import annotations

import collections
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

from nnhal import hal
from nnhal.hal import OperandLifeTime as L
from nnhal.hal import OperandType as T
from nnhal.hal import OperationType as Op
from nnhal.hal.types import HalVersion
from nnhal.tflite import schema as sch
from nnhal.tflite import verify as vfy
from nnhal.tflite.errors import InvalidModelError, ModelError, UnsupportedModelError
from nnhal.tflite.graphcheck import DETECTION_OPTIONS, flex_scalars
from nnhal.tflite.table import ACTIVATIONS, BY_BUILTIN, PADDING, READ_OPTIONS, REFUSED, Arg, Mapping, Native, arity

__all__ = ["load", "free_model", "IODescription", "TensorDesc", "UnsupportedModelError", "InvalidModelError",
           "ModelError"]

# schema TensorType -> (class name used by the table, numpy dtype)
_TFL_TYPES = {0: ("f32", np.float32), 1: ("f16", np.float16), 2: ("i32", np.int32), 3: ("u8", np.uint8),
              4: ("i64", np.int64), 6: ("bool", np.bool_), 7: ("i16", np.int16), 9: ("i8", np.int8)}
_INLINE_LIMIT = 128
_SCALAR_DTYPES = {T.INT32: np.int32, T.FLOAT32: np.float32, T.BOOL: np.bool_, T.FLOAT16: np.float16}


class _Refuse(Exception):
    pass


_REQUIRED = object()


@dataclass
class TensorDesc:
    """A model input/output (or an exposed intermediate tensor)."""

    name: str
    tensor: int  # TFLite tensor index
    shape: list[int]  # TFLite shape, -1 for an unknown dimension
    dtype: str  # numpy dtype name
    scale: float = 0.0
    zero_point: int = 0
    producer: int = -1  # TFLite operator index that writes it (-1: a model input)
    producer_name: str = ""

    @property
    def quantized(self) -> bool:
        return self.scale > 0 and self.dtype in ("uint8", "int8", "int16")


@dataclass
class IODescription:
    """What ``load`` built: the model's inputs and outputs (HAL input / output order), the exposed
    intermediate tensors (HAL outputs after the model's own), and what the mapping used."""

    inputs: list[TensorDesc] = field(default_factory=list)
    outputs: list[TensorDesc] = field(default_factory=list)
    intermediates: list[TensorDesc] = field(default_factory=list)
    operators: collections.Counter = field(default_factory=collections.Counter)  # TFLite builtin -> count
    hal_operations: collections.Counter = field(default_factory=collections.Counter)
    rewrites: collections.Counter = field(default_factory=collections.Counter)  # rewrite name -> count
    hal_to_tflite: list[int] = field(default_factory=list)  # per HAL operation, its TFLite operator index
    folded_outputs: dict[int, np.ndarray] = field(default_factory=dict)  # load_operators: outputs computed at load
    operator_names: list[str] = field(default_factory=list)  # per TFLite operator
    operator_inputs: list[list[int]] = field(default_factory=list)  # per TFLite operator, its input tensors
    operator_outputs: list[list[int]] = field(default_factory=list)  # per TFLite operator, its output tensors
    tensor_operand: dict[int, int] = field(default_factory=dict)  # TFLite tensor -> HAL operand
    tensors: dict[int, TensorDesc] = field(default_factory=dict)  # TFLite tensor -> description (non-constant)

    @property
    def all_outputs(self) -> list[TensorDesc]:
        return self.outputs + self.intermediates


def load(path: Union[str, Path, bytes], *, batch: Optional[int] = 1,
         expose_intermediates: bool = False, max_bytes: Optional[int] = None,
         custom_ops: Optional[dict[str, tuple[str, int]]] = None,
         version: HalVersion = HalVersion.V1_3) -> tuple[hal.Model, IODescription]:
    """A HAL 1.3 model and its io description from a .tflite file (or its bytes).

    ``batch``: the value given to unknown (-1) dimensions; ``None`` keeps them unknown (0 in the
    HAL model, the shapes then come at execution).  ``expose_intermediates``: every tensor an
    operator writes also becomes a model output (after the model's own outputs), for per-tensor
    comparisons.  ``max_bytes``: the most any tensor, all tensors together, or the constants folded
    at load may take (default :func:`nnhal.tflite.verify.default_max_bytes`: ``$NNHAL_TFLITE_MAX_BYTES``,
    else a quarter of the memory, at most 4 GiB).  Raises :class:`InvalidModelError` naming the
    first problem of a malformed file, :class:`UnsupportedModelError` listing every operator that
    cannot be mapped (both :class:`ModelError`, a ``ValueError``), ``OSError`` when the file
    cannot be read.  ``custom_ops``: TFLite custom operators a target device implements as
    extension operations, ``{custom code: (extension name, operation type within the
    extension)}``; each becomes that operation (its inputs and outputs the custom operator's, in
    order), the model numbering the extensions it uses in ``extensionNameToPrefix``.  ``version``: the
    interface the model is for (default HAL 1.3; AIDL 2-3 add the native forms of the module doc)."""
    data = bytes(path) if isinstance(path, (bytes, bytearray)) else Path(path).read_bytes()
    checked = vfy.verify(data, max_bytes=max_bytes, batch=batch)
    shared = _Shared(data, batch, checked, version)
    shared.custom_ops = dict(custom_ops or {})
    # NOTE: constants from the file may be NaN or huge; what they become is the HAL validation's to judge,
    # without numpy warnings on the way
    with np.errstate(all="ignore"):
        for g in checked.order:  # NOTE: callees before callers: no recursion however deep IF / WHILE nest
            shared.map_subgraph(g)
        main = _Loader(shared, 0, expose_intermediates, shared.io)
        main.run()
        return shared.finish(main)


def free_model(model: hal.Model) -> None:
    """Release the shared-memory pools ``load`` made for the model's large constants (a driver keeps
    its own copy of what it needs once the model is prepared)."""
    from nnhal.platform import memory

    for m in model.pools:
        memory.free(m)
    model.pools = []


def _flex_scalars(raw: bytes, wanted: dict[str, Any]) -> dict[str, Any]:
    """:func:`nnhal.tflite.graphcheck.flex_scalars`, a problem being this operator's refusal."""
    try:
        return flex_scalars(raw, wanted)
    except ValueError as e:
        raise _Refuse(str(e)) from None


def _n_scales(t: Any) -> int:
    """How many scales tensor ``t`` has (``len(_quant(t)[0])`` without making the lists)."""
    q = t.quantization
    return 0 if q is None or q.scale is None else len(q.scale)


def _quant(t: Any) -> tuple[list[float], list[int], int]:
    q = t.quantization
    if q is None or q.scale is None or len(q.scale) == 0:
        return [], [], 0
    zps = vfy.int_list(q.zeroPoint) if q.zeroPoint is not None else [0] * len(q.scale)
    return vfy.float_list(q.scale), zps, int(q.quantizedDimension)


class _Shared:
    """What every subgraph's loader shares: the parsed file, the failures, the referenced subgraphs
    (TFLite subgraph index -> position in ``Model.referenced``) and the constant layout."""

    def __init__(self, data: bytes, batch: Optional[int], checked: vfy.Verified,
                 version: HalVersion = HalVersion.V1_3):
        self.data = data
        self.version = HalVersion(version)
        self.m = checked.model
        self.max_bytes = checked.max_bytes
        self.folded_bytes = 0
        self.batch = batch
        self.names = sch.builtin_names()
        self.failures: list[tuple[int, str, str]] = []
        self.io = IODescription()
        self.ref_index: dict[int, int] = {}
        self.loaders: list["_Loader"] = []
        self.custom_ops: dict[str, tuple[str, int]] = {}
        self.prefixes: dict[str, int] = {}  # extensions the model uses -> the model's prefixes (from 1)

    def extension_type(self, extension: str, type_: int) -> int:
        """``(prefix << 16) | type_``, numbering ``extension`` for this model on first use."""
        prefix = self.prefixes.setdefault(extension, len(self.prefixes) + 1)
        return (prefix << 16) | int(type_)

    def reserve(self, nbytes: int, what: str) -> None:
        """Count ``nbytes`` of a constant made at load from sizes the file gives; above ``max_bytes`` in
        all, the model is refused before anything is allocated."""
        self.folded_bytes += int(nbytes)
        if self.folded_bytes > self.max_bytes:
            raise InvalidModelError(f"{what}: the constants made at load need {self.folded_bytes} bytes, above the "
                                    f"limit of {self.max_bytes} (NNHAL_TFLITE_MAX_BYTES)")

    def zeros(self, dims: list[int], dt: np.dtype, what: str) -> np.ndarray:
        """Zeros of a shape the file gives, made at load: counted first (:meth:`reserve`); a shape numpy
        cannot make (its dimensions but a 0 multiply past numpy's largest size) is an invalid model too."""
        self.reserve(math.prod(dims) * dt.itemsize, what)
        try:
            return np.zeros(dims, dt)
        except (ValueError, MemoryError) as e:
            raise InvalidModelError(f"{what}: a tensor of shape {dims} cannot be made ({e})") from None

    def map_subgraph(self, index: int) -> None:
        """Map TFLite subgraph ``index`` (every subgraph it refers to is already mapped)."""
        sub = _Loader(self, index, False, IODescription())
        sub.run()
        self.ref_index[index] = len(self.loaders)
        self.loaders.append(sub)
        for k in ("operators", "hal_operations", "rewrites"):
            getattr(self.io, k).update(getattr(sub.io, k))

    def subgraph(self, index: int) -> int:
        """The ``Model.referenced`` position of TFLite subgraph ``index``."""
        if index not in self.ref_index:  # pragma: no cover - the verifier maps every reachable subgraph first
            raise _Refuse(f"subgraph {index} is not mapped")
        return self.ref_index[index]

    def finish(self, main: "_Loader") -> tuple[hal.Model, IODescription]:
        from nnhal.platform import memory

        if self.failures:
            raise UnsupportedModelError(self.failures)
        values, pool = bytearray(), _PoolLayout()
        sg = main.finish(values, pool)
        referenced = [ld.finish(values, pool) for ld in self.loaders]
        pools = []
        if pool.size:
            # NOTE: each large constant copied once, straight into the shared memory
            pools.append(memory.allocate_parts(pool.size, ((off, np.ascontiguousarray(a).reshape(-1).view(np.uint8))
                                                           for off, a in pool.items)))
        return hal.Model(main=sg, referenced=referenced, operandValues=bytes(values), pools=pools,
                         extensionNameToPrefix=[hal.ExtensionNameAndPrefix(name=n, prefix=p)
                                                for n, p in self.prefixes.items()]), self.io


class _PoolLayout:
    """The large constants of a model, each at its offset (16-byte aligned) of the one shared pool."""

    def __init__(self) -> None:
        self.size = 0
        self.items: list[tuple[int, np.ndarray]] = []

    def add(self, a: np.ndarray) -> int:
        off = (self.size + 15) // 16 * 16
        self.items.append((off, a))
        self.size = off + a.nbytes
        return off


class _Loader:
    def __init__(self, shared: _Shared, index: int, expose: bool, io: IODescription):
        self.shared, self.index = shared, index
        self.data, self.m, self.names = shared.data, shared.m, shared.names
        self.sg = self.m.subgraphs[index]
        self.batch, self.expose = shared.batch, expose
        self.operands: list[hal.Operand] = []
        self.values: dict[int, np.ndarray] = {}  # HAL operand -> constant value
        self.t2o: dict[int, int] = {}  # TFLite tensor -> HAL operand
        self.folded: dict[int, np.ndarray] = {}  # TFLite tensor -> constant computed at load
        self.ops: list[hal.Operation] = []
        self.failures = shared.failures
        self.io = io
        self.cur = -1
        self.inputs = [int(i) for i in (self.sg.inputs if self.sg.inputs is not None else [])]
        self.outputs = [int(i) for i in (self.sg.outputs if self.sg.outputs is not None else [])]

    # ------------------------------------------------------------------ tensors

    def tensor(self, k: int) -> Any:
        if k < 0:
            raise _Refuse("a required input is omitted (-1)")
        return self.sg.tensors[k]  # NOTE: the verifier checked every index against the tensors

    def tclass(self, k: int) -> str:
        t = self.tensor(k)
        if t.type not in _TFL_TYPES:
            raise _Refuse(f"tensor {k} has TFLite type {t.type} with no HAL operand type")
        return _TFL_TYPES[t.type][0]

    def np_type(self, k: int) -> Any:
        """The numpy dtype of tensor ``k`` (refused for a type with no HAL operand type)."""
        self.tclass(k)
        return _TFL_TYPES[self.tensor(k).type][1]

    def rank_at_least(self, k: int, n: int, what: str) -> list[int]:
        s = self.shape(k)
        if len(s) < n:
            raise _Refuse(f"{what} needs rank {n} or more, tensor {k} has shape {s}")
        return s

    def const_scalar(self, op: Any, i: int) -> Any:
        """The first element of constant input ``i`` (refused when empty or not finite)."""
        a = self.const_input(op, i).reshape(-1)
        if a.size == 0:
            raise _Refuse(f"input {i} is an empty constant")
        v = a[0]
        if a.dtype.kind == "f" and not np.isfinite(v):
            raise _Refuse(f"input {i} is {v}")
        return v.item()

    def shape(self, k: int) -> list[int]:
        """TFLite shape with -1 where the signature says unknown."""
        t = self.tensor(k)
        shape = _int_list(t.shape)
        sig = t.shapeSignature
        if sig is not None and len(sig) == len(shape):
            shape = [-1 if s == -1 else d for d, s in zip(shape, _int_list(sig))]
        return shape

    def dims(self, k: int) -> list[int]:
        """HAL dimensions: unknown -> batch (or 0 when kept unknown); rank 0 -> [1]."""
        d = [(self.batch if self.batch is not None else 0) if s == -1 else s for s in self.shape(k)]
        return d or [1]

    def is_const(self, k: int) -> bool:
        if k in self.folded:
            return True
        t = self.tensor(k)
        if t.isVariable:
            return True
        buffers = self.m.buffers or []
        buf = buffers[t.buffer] if t.buffer < len(buffers) else None
        return buf is not None and ((buf.data is not None and len(buf.data) > 0) or buf.offset > 1)

    def array(self, k: int) -> np.ndarray:
        """The value of constant tensor ``k`` (zeros for a variable without data)."""
        if k in self.folded:
            return self.folded[k]
        t = self.tensor(k)
        if t.type not in _TFL_TYPES:
            raise _Refuse(f"constant tensor {k} has unsupported type {t.type}")
        dt = np.dtype(_TFL_TYPES[t.type][1])
        buffers = self.m.buffers or []
        buf = buffers[t.buffer] if t.buffer < len(buffers) else None
        if buf is None:
            raise _Refuse(f"tensor {k} is not a constant")
        if buf.data is not None and len(buf.data) > 0:
            raw = np.asarray(buf.data, dtype=np.uint8)
        elif buf.offset > 1:
            raw = self.data[buf.offset: buf.offset + buf.size]
        elif t.isVariable:
            return self.shared.zeros(self.dims(k), dt, f"variable tensor {k}")  # NOTE: sized by the file alone
        else:
            raise _Refuse(f"tensor {k} is not a constant")
        shape = _int_list(t.shape)
        if t.sparsity is not None:
            raise _Refuse(f"tensor {k} is sparse (needs DENSIFY)")
        a = np.frombuffer(raw, dtype=dt).reshape(shape)
        # NOTE: a read-only view of the file's bytes (never changed after the read): the constant is copied
        # once, into the model's pool or inline values (finish), not here too; a rewrite that changes a
        # constant makes its own array (one that writes into this raises)
        a.flags.writeable = False
        return a

    def hal_type(self, k: int) -> tuple[T, float, int, Optional[hal.SymmPerChannelQuantParams]]:
        c = self.tclass(k)
        scales, zps, qdim = _quant(self.tensor(k))
        s, z = (scales[0], zps[0]) if scales else (0.0, 0)
        if c == "f32":
            return T.TENSOR_FLOAT32, 0.0, 0, None
        if c == "f16":
            return T.TENSOR_FLOAT16, 0.0, 0, None
        if c in ("i32", "i64"):
            return T.TENSOR_INT32, s, z, None
        if c == "bool":
            return T.TENSOR_BOOL8, 0.0, 0, None
        if c == "u8":
            return T.TENSOR_QUANT8_ASYMM, s or 1.0, z, None
        if c == "i16":
            if z != 0:
                raise _Refuse(f"int16 tensor {k} has zero point {z} (NNAPI's QUANT16_SYMM needs 0)")
            return T.TENSOR_QUANT16_SYMM, s or 1.0, 0, None
        if c == "i8":
            if len(scales) > 1:
                if any(zps):
                    raise _Refuse(f"per-channel tensor {k} has non-zero zero points")
                return T.TENSOR_QUANT8_SYMM_PER_CHANNEL, 0.0, 0, hal.SymmPerChannelQuantParams(scales, qdim)
            return T.TENSOR_QUANT8_ASYMM_SIGNED, s or 1.0, z, None
        raise _Refuse(f"tensor {k} type {c}")

    # ------------------------------------------------------------------ operands

    def add(self, type_: T, dims: list[int], scale: float = 0.0, zp: int = 0,
            cq: Optional[hal.SymmPerChannelQuantParams] = None, value: Optional[np.ndarray] = None) -> int:
        o = hal.Operand(type=type_, dimensions=list(dims), scale=float(scale), zeroPoint=int(zp))
        if cq is not None:
            o.extraParams = hal.OperandExtraParams(channelQuant=cq)
        self.operands.append(o)
        idx = len(self.operands) - 1
        if value is not None:
            self.values[idx] = value
        return idx

    def scalar(self, type_: T, v: Any) -> int:
        dt = _SCALAR_DTYPES[type_]
        if type_ == T.INT32 and not -2**31 <= int(v) < 2**31:
            raise _Refuse(f"scalar {v} does not fit in int32")
        return self.add(type_, [], value=np.array(v, dtype=dt))

    def const(self, arr: np.ndarray, type_: T, scale: float = 0.0, zp: int = 0,
              cq: Optional[hal.SymmPerChannelQuantParams] = None) -> int:
        dims = list(arr.shape) or [1]
        return self.add(type_, dims, scale, zp, cq, np.ascontiguousarray(arr).reshape(dims))

    def i32(self, arr: Any) -> int:
        a = np.asarray(arr)
        if a.dtype.kind in "iu" and a.size and (a.min() < -2**31 or a.max() >= 2**31):
            raise _Refuse("int64 constant does not fit in int32")
        return self.const(a.astype(np.int32), T.TENSOR_INT32)

    def operand(self, k: int) -> int:
        """The HAL operand of TFLite tensor ``k`` (a constant, a model input or an earlier output)."""
        if k in self.t2o:
            return self.t2o[k]
        if self.is_const(k):
            arr = self.array(k)
            type_, s, z, cq = self.hal_type(k)
            if arr.dtype == np.int64:
                arr = arr.astype(np.int32)
            idx = self.const(arr.reshape(self.dims(k)) if arr.size == int(np.prod(self.dims(k))) else arr,
                             type_, s, z, cq)
        elif k in self.inputs:
            type_, s, z, cq = self.hal_type(k)
            idx = self.add(type_, self.dims(k), s, z, cq)
        else:
            raise _Refuse(f"input tensor {k} ({self.tname(k)}) is written by no mapped operator")
        self.t2o[k] = idx
        return idx

    def out(self, k: int) -> int:
        """A new HAL operand for TFLite tensor ``k``, written by the current operator."""
        type_, s, z, cq = self.hal_type(k)
        idx = self.add(type_, self.dims(k), s, z, cq)
        self.t2o[k] = idx
        self.producer[k] = self.cur
        return idx

    def temp(self, type_: T, dims: list[int], scale: float = 0.0, zp: int = 0) -> int:
        return self.add(type_, dims, scale, zp)

    def like(self, k: int, dims: list[int]) -> int:
        """A temporary of tensor ``k``'s type and quantization with other dimensions."""
        type_, s, z, cq = self.hal_type(k)
        return self.add(type_, dims, s, z, cq)

    def tname(self, k: int) -> str:
        n = self.tensor(k).name
        return n.decode(errors="replace") if isinstance(n, bytes) else str(n or k)

    def emit(self, type_: Op, ins: list[int], outs: list[int]) -> None:
        self.ops.append(hal.Operation(type_, list(ins), list(outs)))
        self.io.hal_to_tflite.append(self.cur)
        self.io.hal_operations[hal.operation_name(type_)] += 1

    # ------------------------------------------------------------------ operators

    def op_name(self, op: Any) -> tuple[str, Any]:
        code = self.m.operatorCodes[op.opcodeIndex]
        b = max(int(code.builtinCode), int(code.deprecatedBuiltinCode))
        name = self.names.get(b, f"BUILTIN_{b}")
        if name == "CUSTOM":
            cc = code.customCode
            return (cc.decode(errors="replace") if isinstance(cc, bytes) else str(cc)), code
        return name, code

    def run(self) -> None:
        self.producer: dict[int, int] = {}
        refused_outputs: set[int] = set()
        for k in self.inputs:
            try:
                if not self.is_const(k):
                    self.operand(k)
            except _Refuse as e:
                self.failures.append((-1, self.where("INPUT"), f"model input {self.tname(k)}: {e}"))
        for i, op in enumerate(self.sg.operators or []):
            self.cur = i
            name, code = self.op_name(op)
            self.io.operator_names.append(name)
            self.io.operator_inputs.append([int(k) for k in (op.inputs if op.inputs is not None else [])])
            self.io.operator_outputs.append([int(k) for k in (op.outputs if op.outputs is not None else [])])
            self.io.operators[name] += 1
            n_ops = len(self.ops)
            try:
                self.map_operator(op, name, code)
            except _Refuse as e:
                for o in self.ops[n_ops:]:
                    self.io.hal_operations[hal.operation_name(o.type)] -= 1
                self.io.hal_operations += collections.Counter()  # NOTE: drops the zero counts
                del self.ops[n_ops:]
                del self.io.hal_to_tflite[n_ops:]
                self.failures.append((i, self.where(name), str(e)))
                refused_outputs.update(self.io.operator_outputs[-1])
        for k in self.outputs:
            if k not in self.t2o and k not in refused_outputs:
                self.failures.append((-1, self.where("OUTPUT"),
                                      f"model output {self.tname(k)} is a constant, an input, or written by no "
                                      "mapped operator"))

    def where(self, name: str) -> str:
        return name if self.index == 0 else f"{name} (subgraph {self.index})"

    def map_operator(self, op: Any, name: str, code: Any) -> None:
        is_custom = self.names.get(max(int(code.builtinCode), int(code.deprecatedBuiltinCode))) == "CUSTOM"
        if is_custom and name in self.shared.custom_ops:
            self.custom_extension_op(op, name, *self.shared.custom_ops[name])
            return
        if name in REFUSED:
            raise _Refuse(REFUSED[name])
        mp = BY_BUILTIN.get(name)
        if mp is None:
            kind = "custom operator" if self.names.get(max(int(code.builtinCode), int(code.deprecatedBuiltinCode))) \
                == "CUSTOM" else "operator"
            raise _Refuse(f"{kind} {name} has no NNAPI 1.3 mapping")
        ins = [int(i) for i in (op.inputs if op.inputs is not None else [])]
        outs = [int(i) for i in (op.outputs if op.outputs is not None else [])]
        n_in, min_out, max_out = arity(mp)
        if len(ins) < n_in:
            raise _Refuse(f"{name} needs {n_in} inputs, the operator has {len(ins)}")
        if len(outs) < min_out or (max_out is not None and len(outs) > max_out):
            want = f"{min_out}" if min_out == max_out else f"{min_out} or more" if max_out is None \
                else f"{min_out} to {max_out}"
            raise _Refuse(f"{name} needs {want} output(s), the operator has {len(outs)}")
        if any(k < 0 for k in outs):
            raise _Refuse("an output is omitted (-1)")
        # NOTE: every later read of op.inputs / op.outputs indexes these lists
        op.inputs, op.outputs = ins, outs
        self.cur_name = name
        ti = mp.type_input
        if ti < len(ins) and ins[ti] >= 0:
            c = self.tclass(ins[ti])
            if c not in mp.types:
                raise _Refuse(f"{name} is mapped for {sorted(mp.types)} inputs, not {c}")
        if name == "DEQUANTIZE" and self.is_const(ins[0]):
            self.fold_dequantize(op)
            self.io.rewrites["fold_dequantize"] += 1
            return
        if name == "DEQUANTIZE" and self.tclass(ins[0]) == "f16":
            # NOTE: NNAPI's DEQUANTIZE takes no float16; CAST float16 -> float32 is the same exact widening
            self.emit(Op.CAST, [self.operand(ins[0])], [self.out(int(op.outputs[0]))])
            self.io.rewrites["float16_cast"] += 1
            return
        if not mp.per_channel:
            for k in ins:
                if k >= 0 and _n_scales(self.tensor(k)) > 1:
                    raise _Refuse(f"tensor {k} is per-channel quantized; NNAPI's {mp.builtin} form takes one scale")
        if mp.check:
            getattr(self, "check_" + mp.check)(op, mp)
        if mp.native is not None:
            why = self.native_refusal(op, mp.native)
            if why is None:
                self.native(op, mp.native)
                return
            if not mp.rewrite and mp.hal is None:
                raise _Refuse(why)
        if mp.rewrite:
            done = getattr(self, "rw_" + mp.rewrite)(op, mp)
            if done:
                if mp.rewrite not in ("if", "while"):  # NOTE: one HAL operation each, not rewrites
                    self.io.rewrites[mp.rewrite] += 1
                return
        self.generic(op, mp)

    def native_refusal(self, op: Any, nat: Native) -> Optional[str]:
        """Why the operator cannot be the AIDL operation ``nat`` here (None: it can)."""
        v = self.shared.version
        if v < nat.version:
            return (f"{nat.op} is an operation of {nat.version.label} (NNAPI feature level "
                    f"{nat.version.feature_level}), not {v.label}")
        c = self.tclass(int(op.inputs[0]))
        if c not in nat.types:
            return f"NNAPI's {nat.op} is exact for {sorted(nat.types)} inputs, not {c}"
        if nat.check:
            try:
                getattr(self, "check_" + nat.check)(op, None)
            except _Refuse as e:
                return str(e)
        return None

    def native(self, op: Any, nat: Native) -> None:
        args = list(nat.inputs)
        ins: list[int] = self.batch_operands(op) if nat.op == "BATCH_MATMUL" else []
        for a in args[len(ins):]:
            ins.extend(self.arg(a, op))
        self.emit(nat.type, ins, [self.out(int(k)) for k in op.outputs])

    def batch_operands(self, op: Any) -> list[int]:
        """BATCH_MATMUL's two operands: TFLite's broadcasts the batch dimensions, NNAPI's takes equal ones,
        so an input with fewer or smaller batch dimensions is brought to the broadcast batch shape first (a
        constant at load, else RESHAPE to the rank and TILE: copies, exact)."""
        x, y = int(op.inputs[0]), int(op.inputs[1])
        a, b = self.dims(x), self.dims(y)
        batch = list(np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2])))
        out = []
        for k, d in ((x, a), (y, b)):
            full = batch + d[-2:]
            if d == full:
                out.append(self.operand(k))
                continue
            t, sc, zp, _ = self.hal_type(k)
            if self.is_const(k):
                v = self.array(k)
                self.shared.reserve(int(np.prod(full)) * v.itemsize, "a broadcast BATCH_MATMUL input")
                out.append(self.const(np.ascontiguousarray(np.broadcast_to(v.reshape(d), full)), t, sc, zp))
                continue
            src = self.operand(k)
            ranked = [1] * (len(full) - len(d)) + d
            if ranked != d:
                r = self.like(k, ranked)
                self.emit(Op.RESHAPE, [src, self.i32(ranked)], [r])
                src = r
            tiled = self.like(k, full)
            self.emit(Op.TILE, [src, self.i32([f // r for f, r in zip(full, ranked)])], [tiled])
            out.append(tiled)
        return out

    def d_pack_axis(self, op: Any, a: Arg) -> list[int]:
        rank = len(self.shape(int(op.inputs[0])))
        axis = int(self.option(op, "axis", 0))
        axis = axis + rank + 1 if axis < 0 else axis
        if not 0 <= axis <= rank:
            raise _Refuse(f"PACK axis {axis} of rank-{rank} inputs")
        return [self.scalar(T.INT32, axis)]

    def d_reverse_axis(self, op: Any, a: Arg) -> list[int]:
        rank = len(self.shape(int(op.inputs[0])))
        axis = int(self.const_input(op, 1).reshape(-1)[0])
        return [self.i32(np.asarray([axis + rank if axis < 0 else axis]))]

    def check_one_axis(self, op: Any, mp: Optional[Mapping]) -> None:
        rank = len(self.shape(int(op.inputs[0])))
        axes = {int(a) + rank if int(a) < 0 else int(a) for a in self.const_input(op, 1).reshape(-1)}
        if len(axes) != 1 or not 0 <= next(iter(axes)) < rank:
            raise _Refuse(f"NNAPI's REVERSE reverses one axis, not {sorted(axes)} of a rank-{rank} input")

    def check_mirror_pad(self, op: Any, mp: Optional[Mapping]) -> None:
        dims = self.dims(int(op.inputs[0]))
        pads = self.const_input(op, 1)
        if pads.size != 2 * len(dims) or pads.dtype.kind not in "iu":
            raise _Refuse(f"MIRROR_PAD paddings of shape {list(pads.shape)} for a rank-{len(dims)} input")
        mode = int(self.option(op, "mode", 0))
        if mode not in (0, 1):
            raise _Refuse(f"MIRROR_PAD mode {mode}")
        for d, (p, q) in zip(dims, pads.reshape(-1, 2).astype(np.int64)):
            if min(p, q) < 0 or max(p, q) > d - (1 - mode):
                raise _Refuse(f"MIRROR_PAD of {int(p)}/{int(q)} on an axis of {d} ({('REFLECT', 'SYMMETRIC')[mode]})")
        self.check_same_quant(op, mp)

    def check_batch_matmul(self, op: Any, mp: Optional[Mapping]) -> None:
        x, y = int(op.inputs[0]), int(op.inputs[1])
        if self.tclass(x) != self.tclass(y):
            raise _Refuse(f"BATCH_MATMUL of {self.tclass(x)} by {self.tclass(y)} (hybrid): NNAPI's takes one type")
        a, b = self.dims(x), self.dims(y)
        if not (2 <= len(a) <= 4 and 2 <= len(b) <= 4) or any(d <= 0 for d in a + b):
            raise _Refuse(f"BATCH_MATMUL of shapes {a} and {b}: NNAPI's takes known ranks 2-4")
        try:
            np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2]))
        except ValueError:
            raise _Refuse(f"BATCH_MATMUL of shapes {a} and {b}: batch dimensions that do not broadcast") from None

    def custom_extension_op(self, op: Any, name: str, extension: str, type_: int) -> None:
        """A custom operator the target device implements as extension operation ``type_`` of
        ``extension``: the operator's inputs and outputs, in order (an omitted input stays omitted)."""
        if op.customOptions is not None and len(op.customOptions):
            raise _Refuse(f"custom operator {name}: its custom options have no place in extension operation "
                          f"{extension}:{type_}")
        ins = [self.operand(int(k)) if int(k) >= 0 else self.no_value()
               for k in (op.inputs if op.inputs is not None else [])]
        outs = [self.out(int(k)) for k in (op.outputs if op.outputs is not None else [])]
        self.ops.append(hal.Operation(self.shared.extension_type(extension, type_), ins, outs))
        self.io.hal_to_tflite.append(self.cur)
        self.io.hal_operations[f"{extension}:{type_}"] += 1
        self.io.rewrites["custom_as_extension"] += 1

    def generic(self, op: Any, mp: Mapping, hal_type: Optional[Op] = None) -> None:
        ins: list[int] = []
        for a in mp.inputs:
            ins.extend(self.arg(a, op))
        touts = [int(o) for o in op.outputs]
        spec = mp.outputs if mp.outputs is not None else tuple(range(len(touts)))
        outs = [self.out(touts[j]) if j >= 0 else self.extra_output(op, mp, n) for n, j in enumerate(spec)]
        self.emit(hal_type or mp.hal, ins, outs)

    # ------------------------------------------------------------------ HAL inputs

    def options(self, op: Any) -> Any:
        """The operator's builtin options (None when absent); refused when of another operator's type."""
        o = op.builtinOptions
        want = READ_OPTIONS.get(getattr(self, "cur_name", ""))
        if o is not None and want is not None and type(o).__name__ != want + "T":
            raise _Refuse(f"options of type {type(o).__name__[:-1]}, not {want}")
        return o

    def option(self, op: Any, name: str, default: Any = _REQUIRED) -> Any:
        """Field ``name`` of the operator's options; ``default`` when the options are absent or lack it
        (refused without a default)."""
        o = self.options(op)
        if o is None or getattr(o, name, None) is None:
            if default is not _REQUIRED:
                return default
            raise _Refuse(f"missing option {name}")
        return getattr(o, name)

    def arg(self, a: Arg, op: Any) -> list[int]:
        ins = op.inputs  # NOTE: a list of ints: map_operator made it one
        if a.kind == "tensor":
            if a.index >= len(ins):
                if a.optional:
                    return [self.no_value()]  # NOTE: an input TFLite's form lacks (a 20-input LSTM's layer norms)
                raise _Refuse(f"input {a.index} missing")
            k = ins[a.index]
            if k < 0:
                if not a.optional:
                    raise _Refuse(f"input {a.index} is omitted")
                return [self.no_value()]
            return [self.operand(k)]
        if a.kind == "const":
            return [self.scalar(a.type, a.value)]
        if a.kind == "option":
            v = self.option(op, a.name)
            if a.conv == "padding":
                if int(v) not in PADDING:
                    raise _Refuse(f"padding {v}")
                v = PADDING[int(v)]
            elif a.conv == "act":
                if int(v) not in ACTIVATIONS:
                    raise _Refuse(f"fused activation {v} (TANH / SIGN_BIT) has no NNAPI form")
                v = ACTIVATIONS[int(v)]
            elif a.conv == "lsh":
                if int(v) not in (1, 2):
                    raise _Refuse(f"LSH projection type {v}")
                v = 3 if int(v) == 1 else 2
            elif a.conv == "bool":
                v = bool(v)
            elif a.conv == "float":
                v = float(v)
            else:
                v = int(v)
                if a.name == "axis" and v < 0 and self.op_is(op, "CONCATENATION"):
                    # NOTE: NNAPI's CONCATENATION axis is in [0, rank): the delegate adds the rank (Map, as here)
                    v += len(self.shape(int(op.inputs[0])))
            return [self.scalar(a.type, v)]
        return getattr(self, "d_" + a.name.rstrip("0123456789"))(op, a)

    def no_value(self) -> int:
        idx = self.add(T.TENSOR_FLOAT32, [])
        self.operands[idx].lifetime = L.NO_VALUE
        return idx

    def const_input(self, op: Any, i: int) -> np.ndarray:
        if i >= len(op.inputs):
            raise _Refuse(f"input {i} missing")
        k = int(op.inputs[i])
        if k < 0:
            raise _Refuse(f"input {i} is omitted (-1)")
        if not self.is_const(k):
            raise _Refuse(f"input {i} must be a constant")
        return self.array(k)

    def _bias(self, op: Any, bi: int, xi: int, wi: int, n: int) -> list[int]:
        ins = [int(i) for i in op.inputs]
        x_type, xs, _, _ = self.hal_type(ins[xi])
        w_type, ws, _, wcq = self.hal_type(ins[wi])
        if bi < len(ins) and ins[bi] >= 0:
            k = ins[bi]
            if x_type in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16):
                return [self.operand(k)]
            if not self.is_const(k):
                raise _Refuse("a quantized bias must be a constant")
            if self.tclass(k) not in ("i32", "i64"):
                raise _Refuse(f"a quantized bias must be int32, not {self.tclass(k)}")
            b = self.array(k).astype(np.int32).reshape(-1)
        else:
            self.shared.reserve(4 * n, "a zero bias")
            b = np.zeros(n, np.float32 if x_type == T.TENSOR_FLOAT32 else np.int32)
            if x_type == T.TENSOR_FLOAT32:
                return [self.const(b, T.TENSOR_FLOAT32)]
            if x_type == T.TENSOR_FLOAT16:
                return [self.const(b.astype(np.float16), T.TENSOR_FLOAT16)]
        # NOTE: NNAPI wants the bias scale equal to input scale * filter scale (0 for per-channel)
        s = 0.0 if wcq is not None else float(np.float32(np.float32(xs) * np.float32(ws)))
        return [self.const(b, T.TENSOR_INT32, s, 0)]

    def d_bias(self, op: Any, a: Arg) -> list[int]:
        w = self.rank_at_least(int(op.inputs[1]), 1, "the filter")
        n = w[0] if self.op_is(op, "CONV_2D", "FULLY_CONNECTED") else w[-1]
        return self._bias(op, 2, 0, 1, n)

    def d_tconv_bias(self, op: Any, a: Arg) -> list[int]:
        return self._bias(op, 3, 2, 1, self.rank_at_least(int(op.inputs[1]), 1, "the filter")[0])

    def op_is(self, op: Any, *names: str) -> bool:
        return self.op_name(op)[0] in names

    def d_depth_multiplier(self, op: Any, a: Arg) -> list[int]:
        cin = self.rank_at_least(int(op.inputs[0]), 1, "DEPTHWISE_CONV_2D")[-1]
        cout = self.rank_at_least(int(op.inputs[1]), 1, "DEPTHWISE_CONV_2D")[-1]
        if cin <= 0 or cout % cin:
            raise _Refuse(f"depthwise output channels {cout} not a multiple of input channels {cin}")
        return [self.scalar(T.INT32, cout // cin)]

    def d_out_w(self, op: Any, a: Arg) -> list[int]:
        s = self.shape(int(op.outputs[0]))
        if len(s) != 4 or s[2] < 0:
            raise _Refuse("resize needs a static rank-4 output")
        return [self.scalar(T.INT32, s[2])]

    def d_out_h(self, op: Any, a: Arg) -> list[int]:
        s = self.shape(int(op.outputs[0]))
        if len(s) != 4 or s[1] < 0:
            raise _Refuse("resize needs a static rank-4 output")
        return [self.scalar(T.INT32, s[1])]

    def d_all_inputs(self, op: Any, a: Arg) -> list[int]:
        return [self.operand(int(k)) for k in op.inputs]

    def d_reshape_shape(self, op: Any, a: Arg) -> list[int]:
        ins = [int(i) for i in op.inputs]
        out_shape = self.shape(int(op.outputs[0]))
        if len(ins) > 1 and ins[1] >= 0 and self.is_const(ins[1]):
            shape = self.array(ins[1]).reshape(-1)
        elif len(ins) > 1 and ins[1] >= 0:
            # NOTE: a computed shape is the output's stored shape when that one is fully known
            if any(d < 0 for d in out_shape):
                raise _Refuse("the new shape is computed and the output's shape is not static")
            shape = np.asarray(out_shape)
        elif self.option(op, "newShape", None) is not None:
            shape = np.asarray(self.option(op, "newShape"))
        else:
            shape = np.asarray(out_shape)
        shape = np.asarray(shape, dtype=np.int64)  # NOTE: a -1 in it still infers that dimension
        if shape.size == 0:
            shape = np.asarray([1])  # NOTE: a scalar result is [1] in the HAL model
        return [self.i32(shape)]

    def d_squeeze_dims(self, op: Any, a: Arg) -> list[int]:
        dims = self.option(op, "squeezeDims", None)
        if dims is None or len(dims) == 0:
            idx = self.add(T.TENSOR_INT32, [])
            self.operands[idx].lifetime = L.NO_VALUE
            return [idx]
        return [self.i32(np.asarray(dims))]

    def d_axis_scalar(self, op: Any, a: Arg) -> list[int]:
        return [self.scalar(T.INT32, int(self.const_scalar(op, 1)))]

    def d_k_scalar(self, op: Any, a: Arg) -> list[int]:
        return self.d_axis_scalar(op, a)

    def d_split_axis(self, op: Any, a: Arg) -> list[int]:
        return [self.scalar(T.INT32, int(self.const_scalar(op, 0)))]

    def d_int32_const(self, op: Any, a: Arg) -> list[int]:
        i = int(a.name[len("int32_const"):])
        return [self.i32(self.const_input(op, i))]

    def d_int32_tensor(self, op: Any, a: Arg) -> list[int]:
        i = int(a.name[len("int32_tensor"):])
        k = int(op.inputs[i])
        if self.tclass(k) not in ("i32", "i64") or (self.tclass(k) == "i64" and not self.is_const(k)):
            raise _Refuse(f"input {i} must be int32")
        return [self.operand(k)]

    def d_pad_value(self, op: Any, a: Arg) -> list[int]:
        v = self.const_scalar(op, 2)
        t = self.hal_type(int(op.inputs[0]))[0]
        if t == T.TENSOR_FLOAT32:
            return [self.scalar(T.FLOAT32, float(v))]
        return [self.scalar(T.INT32, int(v))]

    def d_scalar(self, op: Any, a: Arg) -> list[int]:
        v = self.const_scalar(op, 1)
        if self.tclass(int(op.inputs[1])) == "f32":
            return [self.scalar(T.FLOAT32, float(v))]
        return [self.scalar(T.INT32, int(v))]

    def d_leaky_alpha(self, op: Any, a: Arg) -> list[int]:
        alpha = float(self.option(op, "alpha"))
        t, s, z, _ = self.hal_type(int(op.inputs[0]))
        if t == T.TENSOR_FLOAT32:
            return [self.const(np.array([alpha], np.float32), T.TENSOR_FLOAT32)]
        if alpha <= 0:
            raise _Refuse("quantized LEAKY_RELU with alpha <= 0")
        # NOTE: as the NNAPI delegate: a one-element quantized alpha, value 1 at scale alpha
        v = np.array([1], np.uint8 if t == T.TENSOR_QUANT8_ASYMM else np.int8)
        return [self.const(v, t, alpha, 0)]

    def extra_output(self, op: Any, mp: Mapping, n: int) -> int:
        """A HAL-only output (state / scratch) as a temporary of its known shape."""
        ins = [int(i) for i in op.inputs]
        b = mp.builtin
        if b in ("RNN", "SVDF"):
            return self.temp(T.TENSOR_FLOAT32, self.dims(ins[4]))
        if b == "LSTM":
            batch = self.dims(ins[0])[0]
            units = self.dims(ins[4])[0]  # input_to_output weights [units, input]
            out_size = self.dims(ins[18])[-1]
            cifg = ins[1] < 0
            shapes = [[batch, units * (3 if cifg else 4)], [batch, out_size], [batch, units]]
            return self.temp(T.TENSOR_FLOAT32, shapes[n])
        raise _Refuse(f"no shape for HAL output {n}")

    # ------------------------------------------------------------------ checks

    def act_of(self, op: Any) -> int:
        o = self.options(op)
        return int(getattr(o, "fusedActivationFunction", 0) or 0) if o is not None else 0

    def check_int_no_act(self, op: Any, mp: Mapping) -> None:
        if self.tclass(int(op.inputs[0])) == "i32" and self.act_of(op):
            raise _Refuse("int32 arithmetic with a fused activation")

    def check_pool(self, op: Any, mp: Mapping) -> None:
        if len(self.shape(int(op.inputs[0]))) != 4:
            raise _Refuse("pooling needs a rank-4 input")

    def _check_filter(self, op: Any, wi: int, channel_dim: int) -> None:
        k = int(op.inputs[wi])
        if not self.is_const(k) and self.tclass(k) not in ("f32",):
            raise _Refuse("quantized weights must be constant")
        scales, zps, qdim = _quant(self.tensor(k))
        if len(scales) > 1:
            if self.tclass(k) != "i8":
                raise _Refuse("per-channel weights must be int8")
            if qdim != channel_dim:
                raise _Refuse(f"per-channel weights quantized on axis {qdim}, NNAPI needs {channel_dim}")
        xc = self.tclass(int(op.inputs[0 if wi == 1 and not self.op_is(op, "TRANSPOSE_CONV") else 2]))
        wc = self.tclass(k)
        if xc == "f32" and wc != "f32":
            raise _Refuse("hybrid operator (float input, quantized weights) has no exact NNAPI 1.3 form")
        if xc == "u8" and wc == "i8" and len(scales) <= 1:
            raise _Refuse("uint8 input with int8 per-tensor weights")

    def check_conv(self, op: Any, mp: Mapping) -> None:
        if len(self.shape(int(op.inputs[0]))) != 4:
            raise _Refuse("convolution needs a rank-4 input")
        self._check_filter(op, 1, 0 if mp.builtin == "CONV_2D" else 3)

    def check_fc(self, op: Any, mp: Mapping) -> None:
        if int(self.option(op, "weightsFormat", 0)) != 0:
            raise _Refuse("shuffled FULLY_CONNECTED weights")
        self._check_filter(op, 1, 0)

    def check_tconv(self, op: Any, mp: Mapping) -> None:
        self.const_input(op, 0)
        self._check_filter(op, 1, 0)

    def check_concat(self, op: Any, mp: Mapping) -> None:
        if self.act_of(op):
            raise _Refuse("CONCATENATION with a fused activation")

    def check_select_same(self, op: Any, mp: Mapping) -> None:
        s = [self.shape(int(k)) for k in op.inputs]
        if not (s[0] == s[1] == s[2]):
            raise _Refuse("SELECT inputs of different shapes (use SELECT_V2 broadcasting)")

    def check_arg_int32(self, op: Any, mp: Mapping) -> None:
        if int(self.option(op, "outputType")) != 2:
            raise _Refuse("ARG_MAX / ARG_MIN output must be int32")

    def check_strided_slice(self, op: Any, mp: Mapping) -> None:
        if self.option(op, "ellipsisMask", 0) or self.option(op, "newAxisMask", 0) or self.option(op, "offset", False):
            raise _Refuse("STRIDED_SLICE ellipsis / new-axis masks or offset have no NNAPI form")

    def check_gather(self, op: Any, mp: Mapping) -> None:
        if int(self.option(op, "batchDims", 0)):
            raise _Refuse("GATHER with batch_dims")

    def check_zero_crops(self, op: Any, mp: Mapping) -> None:
        if np.any(self.const_input(op, 2) != 0):
            raise _Refuse("BATCH_TO_SPACE_ND with non-zero crops")

    def check_same_quant(self, op: Any, mp: Optional[Mapping]) -> None:
        a, b = self.hal_type(int(op.inputs[0])), self.hal_type(int(op.outputs[0]))
        if a[1:3] != b[1:3]:
            raise _Refuse("input and output quantization differ")

    def check_all_same_quant(self, op: Any, mp: Optional[Mapping]) -> None:
        b = self.hal_type(int(op.outputs[0]))
        if any(self.hal_type(int(k))[1:3] != b[1:3] for k in op.inputs):
            raise _Refuse("the inputs' and the output's quantization differ")

    def check_no_act(self, op: Any, mp: Mapping) -> None:
        if self.act_of(op):
            raise _Refuse("fused activation")

    def check_quantize(self, op: Any, mp: Mapping) -> None:
        if self.tclass(int(op.outputs[0])) not in ("u8", "i8"):
            raise _Refuse("QUANTIZE output must be uint8 or int8")
        if len(_quant(self.tensor(int(op.outputs[0])))[0]) != 1:
            raise _Refuse("QUANTIZE to a per-channel output")

    def check_float_weights1(self, op: Any, mp: Mapping) -> None:
        if self.tclass(int(op.inputs[1])) != "f32":
            raise _Refuse("hybrid (quantized weights) recurrent operator")

    def check_float_weights2(self, op: Any, mp: Mapping) -> None:
        if self.tclass(int(op.inputs[2])) != "f32":
            raise _Refuse("hybrid (quantized weights) recurrent operator")

    def check_lstm(self, op: Any, mp: Mapping) -> None:
        n = len(op.inputs)
        if n not in (20, 24):
            raise _Refuse(f"LSTM with {n} inputs (the basic 5-input kernel has no NNAPI 1.3 float form)")
        if self.option(op, "kernelType", 0):
            raise _Refuse("basic LSTM kernel")
        if self.tclass(int(op.inputs[4])) != "f32":
            raise _Refuse("hybrid / quantized LSTM weights")

    # ------------------------------------------------------------------ rewrites

    def fold_dequantize(self, op: Any) -> None:
        k, o = int(op.inputs[0]), int(op.outputs[0])
        a = self.array(k)
        if a.dtype == np.float16:
            v = a.astype(np.float32)
        else:
            scales, zps, qdim = _quant(self.tensor(k))
            if not scales:
                raise _Refuse("DEQUANTIZE of a constant without quantization")
            shp = [1] * a.ndim
            if len(scales) > 1:
                shp[qdim] = len(scales)
            s = np.asarray(scales, np.float32).reshape(shp if len(scales) > 1 else [])
            z = np.asarray(zps, np.int32).reshape(shp if len(scales) > 1 else [])
            # NOTE: TFLite's reference: float(scale * (q - zero_point)) in float32
            v = (s * (a.astype(np.int32) - z).astype(np.float32)).astype(np.float32)
        self.folded[o] = v

    def rw_square(self, op: Any, mp: Mapping) -> bool:
        x = self.operand(int(op.inputs[0]))
        self.emit(Op.MUL, [x, x, self.scalar(T.INT32, 0)], [self.out(int(op.outputs[0]))])
        return True

    def rw_squared_difference(self, op: Any, mp: Mapping) -> bool:
        a, b = (self.operand(int(k)) for k in op.inputs)
        o = int(op.outputs[0])
        d = self.like(o, self.dims(o))
        self.emit(Op.SUB, [a, b, self.scalar(T.INT32, 0)], [d])
        self.emit(Op.MUL, [d, d, self.scalar(T.INT32, 0)], [self.out(o)])
        return True

    def rw_mean(self, op: Any, mp: Mapping) -> bool:
        x, o = int(op.inputs[0]), int(op.outputs[0])
        tx, ty = self.hal_type(x), self.hal_type(o)
        if tx[0] == T.TENSOR_FLOAT32 or tx[1:3] == ty[1:3]:
            return False  # one MEAN
        axes = self.i32(self.const_input(op, 1).reshape(-1))
        keep = self.scalar(T.INT32, int(bool(self.option(op, "keepDims"))))
        xf = self.temp(T.TENSOR_FLOAT32, self.dims(x))
        yf = self.temp(T.TENSOR_FLOAT32, self.dims(o))
        self.emit(Op.DEQUANTIZE, [self.operand(x)], [xf])
        self.emit(Op.MEAN, [xf, axes, keep], [yf])
        self.emit(Op.QUANTIZE, [yf], [self.out(o)])
        return True

    def rw_fully_connected(self, op: Any, mp: Mapping) -> bool:
        ins = [int(i) for i in op.inputs]
        x, w, o = ins[0], ins[1], int(op.outputs[0])
        scales, _, _ = _quant(self.tensor(w))
        out_dims = self.dims(o)
        if len(self.shape(w)) != 2:
            raise _Refuse(f"FULLY_CONNECTED weights of shape {self.shape(w)} (needs rank 2)")
        units, k_in = self.shape(w)
        keep = bool(self.option(op, "keepNumDims", False))
        batch = int(np.prod(self.dims(x))) // k_in if k_in else 0
        if len(scales) > 1:
            # NOTE: NNAPI's FULLY_CONNECTED has no per-channel form; the same sums and per-channel
            # requantization are a 1x1 CONV_2D over [batch, 1, 1, input_size]
            xr = self.like(x, [batch, 1, 1, k_in])
            self.emit(Op.RESHAPE, [self.operand(x), self.i32([batch, 1, 1, k_in])], [xr])
            wv = self.array(w).reshape(units, 1, 1, k_in)
            _, _, _, cq = self.hal_type(w)
            wo = self.const(wv, T.TENSOR_QUANT8_SYMM_PER_CHANNEL, 0.0, 0, cq)
            bias = self._bias(op, 2, 0, 1, units)
            y4 = self.like(o, [batch, 1, 1, units])
            act = self.arg(mp.inputs[3], op)
            one = [self.scalar(T.INT32, v) for v in (2, 1, 1)]
            self.emit(Op.CONV_2D, [xr, wo] + bias + one + act, [y4])
            self.emit(Op.RESHAPE, [y4, self.i32(out_dims)], [self.out(o)])
            return True
        if keep and len(out_dims) != 2:
            ins_h: list[int] = []
            for a in mp.inputs:
                ins_h.extend(self.arg(a, op))
            y2 = self.like(o, [batch, units])
            self.emit(Op.FULLY_CONNECTED, ins_h, [y2])
            self.emit(Op.RESHAPE, [y2, self.i32(out_dims)], [self.out(o)])
            return True
        return False

    def rw_mp_transpose_conv(self, op: Any, mp: Mapping) -> bool:
        raw = bytes(np.asarray(op.customOptions, np.uint8)) if op.customOptions is not None else b""
        if len(raw) < 12:
            raise _Refuse("Convolution2DTransposeBias without its 12-byte options")
        pad, sw, sh = struct.unpack("<3i", raw[:12])
        if pad not in (1, 2):
            raise _Refuse(f"Convolution2DTransposeBias padding {pad}")
        ins = [int(i) for i in op.inputs]
        if len(ins) != 3:
            raise _Refuse("Convolution2DTransposeBias needs input, weights and bias")
        o = int(op.outputs[0])
        hal_ins = [self.operand(ins[0]), self.operand(ins[1]), self.operand(ins[2]), self.i32(self.dims(o)),
                   self.scalar(T.INT32, pad), self.scalar(T.INT32, sw), self.scalar(T.INT32, sh),
                   self.scalar(T.INT32, 0), self.scalar(T.BOOL, False)]
        self.emit(Op.TRANSPOSE_CONV_2D, hal_ins, [self.out(o)])
        return True

    def rw_detection_postprocess(self, op: Any, mp: Mapping) -> bool:
        raw = bytes(np.asarray(op.customOptions, np.uint8)) if op.customOptions is not None else b""
        o = _flex_scalars(raw, DETECTION_OPTIONS)

        ins = [int(k) for k in op.inputs]
        outs = [int(k) for k in op.outputs]
        if len(ins) != 3 or len(outs) != 4:
            raise _Refuse("TFLite_Detection_PostProcess needs 3 inputs and 4 outputs")
        if any(self.tclass(k) != "f32" for k in ins):
            raise _Refuse("quantized inputs: NNAPI's DETECTION_POSTPROCESSING takes float scores and boxes")
        n_cls = o["num_classes"]
        if self.rank_at_least(ins[1], 1, "class predictions")[-1] != n_cls + 1:
            raise _Refuse("class predictions without a background column (NNAPI always drops class 0)")
        sc = [self.scalar(T.FLOAT32, o[k]) for k in ("y_scale", "x_scale", "h_scale", "w_scale")]
        args = sc + [self.scalar(T.BOOL, o["use_regular_nms"]),
                     self.scalar(T.INT32, o["max_detections"]),
                     self.scalar(T.INT32, o["max_classes_per_detection"]),
                     self.scalar(T.INT32, o["detections_per_class"]),
                     self.scalar(T.FLOAT32, o["nms_score_threshold"]),
                     self.scalar(T.FLOAT32, o["nms_iou_threshold"]),
                     self.scalar(T.BOOL, False)]
        n = self.dims(outs[2])[-1]
        batch = self.dims(ins[0])[0]
        classes = self.temp(T.TENSOR_INT32, [batch, n])
        count = self.temp(T.TENSOR_INT32, [batch])
        self.emit(Op.DETECTION_POSTPROCESSING, [self.operand(ins[1]), self.operand(ins[0]), self.operand(ins[2])] + args,
                  [self.out(outs[2]), self.out(outs[0]), classes, count])
        self.emit(Op.CAST, [classes], [self.out(outs[1])])
        self.emit(Op.CAST, [count], [self.out(outs[3])])
        return True

    def subgraph_operand(self, index: int) -> int:
        idx = self.add(T.SUBGRAPH, [])
        o = self.operands[idx]
        o.lifetime = L.SUBGRAPH
        o.location = hal.DataLocation(poolIndex=0, offset=self.shared.subgraph(index), length=0)
        return idx

    def _check_branch(self, index: int, ins: list[int], outs: list[int]) -> None:
        sub = self.m.subgraphs[index]
        n_in = len(sub.inputs) if sub.inputs is not None else 0
        n_out = len(sub.outputs) if sub.outputs is not None else 0
        if n_in != len(ins) or n_out != len(outs):
            raise _Refuse(f"subgraph {index} has {n_in} inputs / {n_out} outputs for {len(ins)} / {len(outs)}")

    def rw_if(self, op: Any, mp: Mapping) -> bool:
        then, else_ = int(self.option(op, "thenSubgraphIndex")), int(self.option(op, "elseSubgraphIndex"))
        ins = [int(k) for k in op.inputs]
        outs = [int(k) for k in op.outputs]
        for b in (then, else_):
            self._check_branch(b, ins[1:], outs)
        branches = [self.subgraph_operand(then), self.subgraph_operand(else_)]
        args = [self.operand(k) for k in ins]
        self.emit(Op.IF, [args[0]] + branches + args[1:], [self.out(k) for k in outs])
        return True

    def rw_while(self, op: Any, mp: Mapping) -> bool:
        ins = [int(k) for k in op.inputs]
        outs = [int(k) for k in op.outputs]
        cond, body = int(self.option(op, "condSubgraphIndex")), int(self.option(op, "bodySubgraphIndex"))
        self._check_branch(body, ins, outs)
        self._check_branch(cond, ins, [0])
        # NOTE: every TFLite loop variable is loop-carried (HAL WHILE's m inputs, no state-only or
        # input-only ones): the body returns them all
        hal_ins = [self.subgraph_operand(cond), self.subgraph_operand(body)] + [self.operand(k) for k in ins]
        self.emit(Op.WHILE, hal_ins, [self.out(k) for k in outs])
        return True

    def rw_shape(self, op: Any, mp: Mapping) -> bool:
        s = self.shape(int(op.inputs[0]))
        if any(d < 0 for d in s) and self.batch is None:
            raise _Refuse("SHAPE of a tensor with an unknown dimension")
        s = [self.batch if d < 0 else d for d in s]
        o = int(op.outputs[0])
        self.folded[o] = np.asarray(s, dtype=self.np_type(o))
        return True

    def rw_rank(self, op: Any, mp: Mapping) -> bool:
        o = int(op.outputs[0])
        self.folded[o] = np.asarray(len(self.shape(int(op.inputs[0]))), dtype=np.int32)
        return True

    def rw_zeros_like(self, op: Any, mp: Mapping) -> bool:
        o = int(op.outputs[0])
        if any(d < 0 for d in self.shape(o)) and self.batch is None:
            raise _Refuse("ZEROS_LIKE of a tensor with an unknown dimension")
        dt = np.dtype(self.np_type(o))
        self.folded[o] = self.shared.zeros(self.dims(o), dt, "ZEROS_LIKE")
        return True

    def rw_pack(self, op: Any, mp: Mapping) -> bool:
        ins = [int(i) for i in op.inputs]
        o = int(op.outputs[0])
        s = self.dims(ins[0])
        rank = len(self.shape(ins[0]))
        axis = int(self.option(op, "axis", 0))
        axis = axis + rank + 1 if axis < 0 else axis
        if not 0 <= axis <= rank:
            raise _Refuse(f"PACK axis {axis} of rank-{rank} inputs")
        parts = [self.operand(k) for k in ins]
        if axis == rank:
            # NOTE: concatenating along a new last axis needs each input reshaped to [..., 1] first
            shp = (s if rank else []) + [1]
            rs = []
            for p, k in zip(parts, ins):
                r = self.like(k, shp)
                self.emit(Op.RESHAPE, [p, self.i32(shp)], [r])
                rs.append(r)
            parts, cat_axis, cat = rs, rank, shp[:-1] + [len(ins)]
        else:
            cat_axis, cat = axis, list(s)
            cat[axis] = s[axis] * len(ins)
        c = self.like(o, cat)
        self.emit(Op.CONCATENATION, parts + [self.scalar(T.INT32, cat_axis)], [c])
        self.emit(Op.RESHAPE, [c, self.i32(self.dims(o))], [self.out(o)])
        return True

    def rw_unpack(self, op: Any, mp: Mapping) -> bool:
        x = int(op.inputs[0])
        s = self.dims(x)
        axis = int(self.option(op, "axis", 0))
        axis = axis + len(s) if axis < 0 else axis
        if not 0 <= axis < len(s):
            raise _Refuse(f"UNPACK axis {axis} of a rank-{len(s)} input")
        outs = [int(k) for k in op.outputs]
        piece = list(s)
        piece[axis] = 1
        temps = [self.like(x, piece) for _ in outs]
        self.emit(Op.SPLIT, [self.operand(x), self.scalar(T.INT32, axis), self.scalar(T.INT32, len(outs))], temps)
        for t, k in zip(temps, outs):
            self.emit(Op.RESHAPE, [t, self.i32(self.dims(k))], [self.out(k)])
        return True

    def rw_mirror_pad(self, op: Any, mp: Mapping) -> bool:
        x, o = int(op.inputs[0]), int(op.outputs[0])
        dims = list(self.dims(x))
        pads = self.const_input(op, 1)
        if pads.size != 2 * len(dims) or pads.dtype.kind not in "iu":
            raise _Refuse(f"MIRROR_PAD paddings of shape {list(pads.shape)} for a rank-{len(dims)} input")
        pads = pads.reshape(-1, 2).astype(np.int64)
        mode = int(self.option(op, "mode", 0))  # 0 REFLECT, 1 SYMMETRIC
        cur = self.operand(x)
        axes = [a for a in range(len(dims)) if pads[a].any()]
        if not axes:
            self.emit(Op.RESHAPE, [cur, self.i32(self.dims(o))], [self.out(o)])
            return True
        for n, a in enumerate(axes):
            d, (p, q) = dims[a], (int(pads[a][0]), int(pads[a][1]))
            off = 0 if mode == 1 else 1
            if p > d - off or q > d - off or p < 0 or q < 0:
                raise _Refuse(f"MIRROR_PAD of {p}/{q} on an axis of {d}")
            self.shared.reserve(8 * (d + p + q), "MIRROR_PAD indices")
            idx = np.concatenate([np.arange(p - 1 + off, off - 1, -1), np.arange(d),
                                  np.arange(d - 1 - off, d - 1 - off - q, -1)])
            dims[a] = d + p + q
            last = n == len(axes) - 1
            nxt = self.out(o) if last else self.like(x, list(dims))
            self.emit(Op.GATHER, [cur, self.scalar(T.INT32, a), self.i32(np.asarray(idx))], [nxt])
            cur = nxt
        return True

    def rw_select_v2(self, op: Any, mp: Mapping) -> bool:
        ins = [int(k) for k in op.inputs]
        o = int(op.outputs[0])
        od = self.dims(o)
        parts = []
        for n, k in enumerate(ins):
            d = self.dims(k) if self.shape(k) else []
            src = self.operand(k)
            if d == od:
                parts.append(src)
                continue
            if n == 0:
                # NOTE: TILE has no TENSOR_BOOL8 form; LOGICAL_AND with a constant all-true tensor of the
                # output shape broadcasts the condition exactly
                full_c = self.temp(T.TENSOR_BOOL8, od)
                self.shared.reserve(math.prod(od), "SELECT_V2's broadcast condition")
                self.emit(Op.LOGICAL_AND, [src, self.const(np.ones(od, np.bool_), T.TENSOR_BOOL8)], [full_c])
                parts.append(full_c)
                continue
            full = [1] * (len(od) - len(d)) + d
            if full != d:
                r = self.like(k, full)
                self.emit(Op.RESHAPE, [src, self.i32(full)], [r])
                src = r
            if any(f not in (1, t) for f, t in zip(full, od)):
                raise _Refuse(f"SELECT_V2 cannot broadcast {d} to {od}")
            mult = [t // f for f, t in zip(full, od)]
            tl = self.like(k, od)
            self.emit(Op.TILE, [src, self.i32(mult)], [tl])
            parts.append(tl)
        self.emit(Op.SELECT, parts, [self.out(o)])
        return True

    def rw_requantize(self, op: Any, mp: Mapping) -> bool:
        x, o = int(op.inputs[0]), int(op.outputs[0])
        if self.tclass(x) == "f32":
            return False  # one QUANTIZE
        xf = self.temp(T.TENSOR_FLOAT32, self.dims(x))
        self.emit(Op.DEQUANTIZE, [self.operand(x)], [xf])
        self.emit(Op.QUANTIZE, [xf], [self.out(o)])
        return True

    def rw_split_v(self, op: Any, mp: Mapping) -> bool:
        x = int(op.inputs[0])
        sizes = [int(v) for v in self.const_input(op, 1).reshape(-1)]
        axis = int(self.const_scalar(op, 2))
        dims = self.dims(x)
        axis = axis + len(dims) if axis < 0 else axis
        if not 0 <= axis < len(dims):
            raise _Refuse(f"SPLIT_V axis {axis} of a rank-{len(dims)} input")
        if sizes.count(-1) == 1:
            sizes[sizes.index(-1)] = dims[axis] - sum(v for v in sizes if v >= 0)
        if len(sizes) != len(op.outputs) or any(v < 0 for v in sizes) or sum(sizes) != dims[axis]:
            raise _Refuse(f"SPLIT_V sizes {sizes} for {len(op.outputs)} outputs of an axis of {dims[axis]}")
        begin = 0
        for k, n in zip([int(t) for t in op.outputs], sizes):
            b = [0] * len(dims)
            b[axis] = begin
            sz = list(dims)
            sz[axis] = n
            self.emit(Op.SLICE, [self.operand(x), self.i32(b), self.i32(sz)], [self.out(k)])
            begin += n
        return True

    def rw_broadcast_to(self, op: Any, mp: Mapping) -> bool:
        x, o = int(op.inputs[0]), int(op.outputs[0])
        od, d = self.dims(o), self.dims(x) if self.shape(x) else []
        src = self.operand(x)
        full = [1] * (len(od) - len(d)) + d
        if len(full) != len(od) or any(f not in (1, t) or f == 0 for f, t in zip(full, od)):
            raise _Refuse(f"BROADCAST_TO cannot broadcast {d} to {od}")
        if full != d:
            r = self.like(x, full)
            self.emit(Op.RESHAPE, [src, self.i32(full)], [r])
            src = r
        self.emit(Op.TILE, [src, self.i32([t // f for f, t in zip(full, od)])], [self.out(o)])
        return True

    def rw_reverse(self, op: Any, mp: Mapping) -> bool:
        x, o = int(op.inputs[0]), int(op.outputs[0])
        dims = self.dims(x)
        axes = sorted({int(a) + len(dims) if int(a) < 0 else int(a) for a in self.const_input(op, 1).reshape(-1)})
        if any(not 0 <= a < len(dims) for a in axes):
            raise _Refuse(f"REVERSE_V2 axes {axes} of a rank-{len(dims)} input")
        self.shared.reserve(8 * sum(dims[a] for a in axes), "REVERSE_V2 indices")
        cur = self.operand(x)
        if not axes:
            self.emit(Op.RESHAPE, [cur, self.i32(self.dims(o))], [self.out(o)])
            return True
        for n, a in enumerate(axes):
            nxt = self.out(o) if n == len(axes) - 1 else self.like(x, dims)
            self.emit(Op.GATHER, [cur, self.scalar(T.INT32, a), self.i32(np.arange(dims[a])[::-1])], [nxt])
            cur = nxt
        return True

    def rw_range(self, op: Any, mp: Mapping) -> bool:
        start, limit, delta = (self.const_scalar(op, i) for i in range(3))
        o = int(op.outputs[0])
        dt = np.dtype(self.np_type(o))
        if delta == 0:
            raise _Refuse("RANGE with delta 0")
        n = max(0, math.ceil((limit - start) / delta))
        self.shared.reserve(n * max(8, dt.itemsize), "RANGE")
        self.folded[o] = np.arange(start, limit, delta).astype(dt)
        return True

    def rw_add_n(self, op: Any, mp: Mapping) -> bool:
        ins = [int(k) for k in op.inputs]
        o = int(op.outputs[0])
        if len(ins) == 1:
            self.emit(Op.RESHAPE, [self.operand(ins[0]), self.i32(self.dims(o))], [self.out(o)])
            return True
        acc = self.operand(ins[0])
        for n, k in enumerate(ins[1:]):
            nxt = self.out(o) if n == len(ins) - 2 else self.like(o, self.dims(o))
            self.emit(Op.ADD, [acc, self.operand(k), self.scalar(T.INT32, 0)], [nxt])
            acc = nxt
        return True

    # ------------------------------------------------------------------ model

    def finish(self, values: bytearray, pool: "_PoolLayout") -> hal.Subgraph:
        """This subgraph, its constants appended to the model's shared ``values`` / ``pool``."""
        io = self.io
        for k in self.inputs:
            if k in self.t2o:
                io.inputs.append(self.desc(k))
        outs = [self.t2o[k] for k in self.outputs]
        for k in self.outputs:
            io.outputs.append(self.desc(k))
        if self.expose:
            seen = set(self.outputs)
            for k, _ in sorted(self.producer.items(), key=lambda kv: (kv[1], kv[0])):
                if k not in seen:
                    seen.add(k)
                    io.intermediates.append(self.desc(k))
                    outs.append(self.t2o[k])
        in_idx = [self.t2o[k] for k in self.inputs if k in self.t2o]
        io.tensor_operand = dict(self.t2o)
        io.tensors = {k: self.desc(k) for k in self.t2o if not self.is_const(k)}
        in_set, out_set = set(in_idx), set(outs)
        consumers = [0] * len(self.operands)
        for o in self.ops:
            for i in o.inputs:
                consumers[i] += 1
        for idx, o in enumerate(self.operands):
            o.numberOfConsumers = consumers[idx]
            if o.lifetime in (L.NO_VALUE, L.SUBGRAPH):
                continue
            if idx in in_set:
                o.lifetime = L.SUBGRAPH_INPUT
            elif idx in out_set:
                o.lifetime = L.SUBGRAPH_OUTPUT
            elif idx in self.values:
                a = self.values[idx]
                if a.nbytes > _INLINE_LIMIT:
                    off = pool.add(a)
                    o.lifetime = L.CONSTANT_REFERENCE
                else:
                    raw = np.ascontiguousarray(a).tobytes()
                    off = (len(values) + 3) // 4 * 4
                    values.extend(b"\0" * (off - len(values)))
                    values.extend(raw)
                    o.lifetime = L.CONSTANT_COPY
                o.location = hal.DataLocation(poolIndex=0, offset=off, length=a.nbytes)
            else:
                o.lifetime = L.TEMPORARY_VARIABLE
        return hal.Subgraph(operands=self.operands, operations=self.ops, inputIndexes=in_idx, outputIndexes=outs)

    def desc(self, k: int) -> TensorDesc:
        scales, zps, _ = _quant(self.tensor(k))
        dt = np.dtype(_TFL_TYPES[self.tensor(k).type][1]).name  # NOTE: every described tensor has a HAL type
        p = self.producer.get(k, -1)
        return TensorDesc(self.tname(k), k, self.shape(k), dt, scales[0] if len(scales) == 1 else 0.0,
                          zps[0] if len(zps) == 1 else 0, p, self.io.operator_names[p] if p >= 0 else "")


def _int_list(v: Any) -> list[int]:
    """A schema vector (a numpy array as unpacked, or a list) as Python ints (iterating numpy scalars is slow)."""
    if v is None:
        return []
    return [int(d) for d in (v.tolist() if isinstance(v, np.ndarray) else v)]


def verify(data: bytes, *, batch: Optional[int] = 1, max_bytes: Optional[int] = None) -> vfy.Verified:
    """The file checked once (:func:`nnhal.tflite.verify.verify`), for many :func:`load_operators` /
    :func:`operator_failures` calls (``checked=``)."""
    return vfy.verify(data, max_bytes=max_bytes, batch=batch)


def _subset_shared(data: bytes, batch: Optional[int], checked: Optional[vfy.Verified],
                   custom_ops: Optional[dict[str, tuple[str, int]]] = None,
                   version: HalVersion = HalVersion.V1_3) -> _Shared:
    checked = checked if checked is not None else verify(data, batch=batch)
    shared = _Shared(data, batch, checked, version)
    shared.custom_ops = dict(custom_ops or {})  # NOTE: as load(): custom operators a target device implements
    for g in checked.order:  # NOTE: the IF / WHILE bodies first, as load does
        shared.map_subgraph(g)
    return shared


def load_operators(data: bytes, operators: list[int], inputs: list[int], outputs: list[int], *,
                   batch: Optional[int] = 1, checked: Optional[vfy.Verified] = None,
                   custom_ops: Optional[dict[str, tuple[str, int]]] = None,
                   version: HalVersion = HalVersion.V1_3) -> tuple[hal.Model, IODescription]:
    """A HAL model of some of the main subgraph's operators (indexes ``operators``): its inputs are the
    TFLite tensors ``inputs`` (those the operators read; ``io.inputs`` lists the ones they do), its
    outputs the tensors ``outputs`` (written by the operators; one computed at load, e.g. the shape a
    SHAPE gives, is in ``io.folded_outputs`` instead).  ``checked``: :func:`verify`'s result, for many
    calls on one file.  Raises :class:`UnsupportedModelError` naming only the operators of the subset
    that have no HAL form (or those of a referenced subgraph they need).  ``custom_ops``, ``version``: as
    :func:`load`."""
    shared = _subset_shared(data, batch, checked, custom_ops, version)
    with np.errstate(all="ignore"):
        sub = _SubsetLoader(shared, set(operators), inputs, outputs)
        sub.run()
        return shared.finish(sub)


def operator_failures(data: bytes, *, batch: Optional[int] = 1, checked: Optional[vfy.Verified] = None,
                      custom_ops: Optional[dict[str, tuple[str, int]]] = None,
                      version: HalVersion = HalVersion.V1_3) -> dict[int, str]:
    """Per main-subgraph operator that has no HAL form of its own, the reason (each operator judged
    alone: a tensor an unmapped operator writes is taken as given, so no knock-on refusals).
    ``custom_ops``, ``version``: as :func:`load`."""
    return MainMapping(data, [], batch=batch, checked=checked, custom_ops=custom_ops, version=version).failures


class MainMapping:
    """Every operator of the main subgraph mapped once, in order: :attr:`failures` is
    :func:`operator_failures`, and when nothing failed the same mapping is :func:`load_operators` of
    every operator with inputs ``inputs`` (:meth:`take`), so that a planner that asks both maps the
    model once (a mapping does not depend on the outputs asked: they are described at the end)."""

    def __init__(self, data: bytes, inputs: list[int], *, batch: Optional[int] = 1,
                 checked: Optional[vfy.Verified] = None, custom_ops: Optional[dict[str, tuple[str, int]]] = None,
                 version: HalVersion = HalVersion.V1_3):
        self.inputs = list(inputs)
        self._shared = _subset_shared(data, batch, checked, custom_ops, version)
        # NOTE: the model's inputs first, as load_operators makes them; a tensor written by no mapped operator
        # (one whose writer failed) is taken as one more input
        self._sub: Optional[_SubsetLoader] = _SubsetLoader(self._shared, None, self.inputs, [])
        with np.errstate(all="ignore"):
            self._sub.run()
        # NOTE: failures inside a referenced subgraph are named "(subgraph N)": they are not main operators
        self.failures = {i: r for i, n, r in self._shared.failures if i >= 0 and "(subgraph" not in n}

    def take(self, operators: list[int], inputs: list[int],
             outputs: list[int]) -> Optional[tuple[hal.Model, IODescription]]:
        """``load_operators(data, operators, inputs, outputs)`` (same file, batch, version, custom
        operators) from this mapping, when it is that one: every operator of the main subgraph, the
        inputs given here, nothing failed; once (the model is the caller's). None otherwise."""
        sub = self._sub
        if sub is None or self._shared.failures or list(inputs) != self.inputs or sub.inputs != self.inputs \
                or list(operators) != list(range(len(sub.sg.operators or []))):
            return None
        self._sub = None
        sub.outputs = list(outputs)
        with np.errstate(all="ignore"):
            return self._shared.finish(sub)


class _SubsetLoader(_Loader):
    """The loader over a subset of the main subgraph (``only``; None: every operator, any tensor
    written by no mapped operator taken as an input)."""

    def __init__(self, shared: _Shared, only: Optional[set[int]], inputs: list[int], outputs: list[int]):
        super().__init__(shared, 0, False, shared.io)
        self.only = only
        self.inputs, self.outputs = list(inputs), list(outputs)

    def operand(self, k: int) -> int:
        if self.only is None and k not in self.t2o and not self.is_const(k) and k not in self.inputs:
            self.inputs.append(k)
        return super().operand(k)

    def run(self) -> None:
        outputs, self.outputs = self.outputs, []  # NOTE: a boundary output may be computed at load
        super().run()
        self.outputs = outputs

    def map_operator(self, op: Any, name: str, code: Any) -> None:
        if self.only is None or self.cur in self.only:
            try:
                super().map_operator(op, name, code)
            except ModelError:
                raise  # NOTE: a malformed or hostile file (a constant over the size limit) is the model's, not the operator's
            except (IndexError, KeyError, TypeError, ValueError, AttributeError) as e:
                # NOTE: an operator the mapping did not foresee is this operator's refusal, not the model's
                raise _Refuse(f"cannot be mapped ({type(e).__name__}: {e})") from None

    def finish(self, values: bytearray, pool: "_PoolLayout") -> hal.Subgraph:
        self.io.folded_outputs = {k: self.folded[k] for k in self.outputs if k in self.folded}
        self.outputs = [k for k in self.outputs if k in self.t2o and k not in self.folded]
        return super().finish(values, pool)
