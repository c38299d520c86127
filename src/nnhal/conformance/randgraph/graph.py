"""A random model as the generator builds it: operands with their actual
shapes and values, operations with their named parameters, subgraphs for IF /
WHILE bodies; and its forms: the conformance vector model (the reproducer's
format, ``shared/conformance/README.md``), the HAL model, and the one-operation
model the generator checks each new operation with (the reference's own
validation and executor, :func:`evaluate`)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np

from nnhal import hal
from nnhal.conformance.vectors import VectorModel, VectorOperand, VectorSubgraph

T = hal.OperandType
L = hal.OperandLifeTime
OT = hal.OperationType
V = hal.HalVersion

INPUT, CONST, TEMP, OMITTED, SUBGRAPH = "input", "const", "temp", "omitted", "subgraph"

NUMPY = {T.FLOAT32: np.float32, T.INT32: np.int32, T.UINT32: np.uint32, T.BOOL: np.bool_, T.FLOAT16: np.float16,
         T.TENSOR_FLOAT32: np.float32, T.TENSOR_FLOAT16: np.float16, T.TENSOR_INT32: np.int32,
         T.TENSOR_QUANT8_ASYMM: np.uint8, T.TENSOR_QUANT8_ASYMM_SIGNED: np.int8, T.TENSOR_QUANT8_SYMM: np.int8,
         T.TENSOR_QUANT8_SYMM_PER_CHANNEL: np.int8, T.TENSOR_QUANT16_ASYMM: np.uint16,
         T.TENSOR_QUANT16_SYMM: np.int16, T.TENSOR_BOOL8: np.bool_, T.SUBGRAPH: np.uint32}
SCALARS = frozenset({T.FLOAT32, T.INT32, T.UINT32, T.BOOL, T.FLOAT16})
QUANT = frozenset({T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM,
                   T.TENSOR_QUANT8_SYMM_PER_CHANNEL, T.TENSOR_QUANT16_ASYMM, T.TENSOR_QUANT16_SYMM})
QRANGE = {T.TENSOR_QUANT8_ASYMM: (0, 255), T.TENSOR_QUANT8_ASYMM_SIGNED: (-128, 127),
          T.TENSOR_QUANT8_SYMM: (-128, 127), T.TENSOR_QUANT8_SYMM_PER_CHANNEL: (-128, 127),
          T.TENSOR_QUANT16_ASYMM: (0, 65535), T.TENSOR_QUANT16_SYMM: (-32768, 32767)}

# short names of data types (the report's tests, the coverage table)
SHORT = {T.TENSOR_FLOAT32: "float32", T.TENSOR_FLOAT16: "float16", T.TENSOR_INT32: "int32",
         T.TENSOR_QUANT8_ASYMM: "quant8_asymm", T.TENSOR_QUANT8_ASYMM_SIGNED: "quant8_signed",
         T.TENSOR_QUANT8_SYMM: "quant8_symm", T.TENSOR_QUANT8_SYMM_PER_CHANNEL: "quant8_channel",
         T.TENSOR_QUANT16_ASYMM: "quant16_asymm", T.TENSOR_QUANT16_SYMM: "quant16_symm", T.TENSOR_BOOL8: "bool8",
         T.FLOAT32: "float32", T.INT32: "int32", T.FLOAT16: "float16", T.BOOL: "bool", T.UINT32: "uint32"}
TAG = {T.TENSOR_FLOAT32: "f32", T.TENSOR_FLOAT16: "f16", T.TENSOR_INT32: "i32", T.TENSOR_QUANT8_ASYMM: "u8",
       T.TENSOR_QUANT8_ASYMM_SIGNED: "s8", T.TENSOR_QUANT8_SYMM: "q8", T.TENSOR_QUANT8_SYMM_PER_CHANNEL: "s8/ch",
       T.TENSOR_QUANT16_ASYMM: "u16", T.TENSOR_QUANT16_SYMM: "s16", T.TENSOR_BOOL8: "bool"}


@dataclass
class Operand:
    """One operand: its type, actual dimensions and quantization, its role
    (``kind``: input, const, temp, omitted, subgraph), its value (known for
    every operand: inputs and constants are drawn, temporaries computed by
    the reference when the generator added their operation) and the
    dimensions the model declares when they differ (``declared``: 0 for an
    unknown dimension, () for an unknown rank)."""

    type: T
    dims: tuple[int, ...]
    scale: float = 0.0
    zero_point: int = 0
    channel: Optional[tuple[tuple[float, ...], int]] = None  # (scales, channelDim)
    kind: str = TEMP
    value: Optional[np.ndarray] = None
    declared: Optional[tuple[int, ...]] = None
    reference: bool = False  # a constant in a memory pool (CONSTANT_REFERENCE) rather than operandValues
    subgraph: int = -1  # SUBGRAPH operands: the referenced graph

    @property
    def is_tensor(self) -> bool:
        return self.type not in SCALARS and self.type != T.SUBGRAPH

    @property
    def spec(self) -> tuple:
        """What must agree for one operand to stand for another (IF / WHILE bodies)."""
        return (self.type, self.dims, float(np.float32(self.scale)), self.zero_point, self.channel)

    def text(self) -> str:
        if not self.is_tensor:
            return f"{SHORT.get(self.type, self.type.name)}={_scalar_text(self.value)}"
        q = ""
        if self.channel is not None:
            q = f" ch{self.channel[1]}"
        elif self.type in QUANT:
            q = f" s={self.scale:.4g} z={self.zero_point}"
        return f"{TAG.get(self.type, self.type.name)}{list(self.dims)}{q}"


def _scalar_text(v: Any) -> str:
    if v is None:
        return "?"
    x = np.asarray(v).item()
    return f"{x:.4g}" if isinstance(x, float) else str(x)


@dataclass
class Op:
    type: OT
    inputs: list[int]
    outputs: list[int]
    params: dict[str, Any] = field(default_factory=dict)
    dtype: str = ""  # the data type it computes in (SHORT names; "relaxed" for float32 in a relaxed model)
    signature: Any = None  # the declared signature it was drawn from (nnhal.ops.base.Signature; the coverage)


@dataclass
class Graph:
    operands: list[Operand] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)

    def add(self, o: Operand) -> int:
        self.operands.append(o)
        return len(self.operands) - 1

    def consumers(self) -> list[int]:
        n = [0] * len(self.operands)
        for op in self.ops:
            for i in op.inputs:
                n[i] += 1
        return n


@dataclass
class RandomModel:
    main: Graph
    referenced: list[Graph] = field(default_factory=list)
    relaxed: bool = False
    dynamic_outputs: bool = False  # the outputs' dimensions are declared unknown (0)
    version: hal.HalVersion = V.V1_3
    dtype: str = "float32"  # the primary data type it was drawn for

    def all_ops(self) -> list[tuple[int, Op]]:
        """Every operation, main first: (graph index, op) with 0 the main graph."""
        return [(g, op) for g, sg in enumerate([self.main, *self.referenced]) for op in sg.ops]

    def op_count(self) -> int:
        return sum(len(sg.ops) for sg in self.used_graphs())

    def used_graphs(self) -> list[Graph]:
        return [self.main] + [self.referenced[k] for k in _reachable(self)]

    def to_vector(self, name: str, spec: str, expected: Optional[Sequence[np.ndarray]] = None) -> VectorModel:
        """The conformance vector model (``expected``: the main outputs' values, in order)."""
        keep = _reachable(self)
        renumber = {k: j for j, k in enumerate(keep)}
        main = _vector_subgraph(self.main, True, renumber, expected)
        refs = [_vector_subgraph(self.referenced[k], False, renumber, None) for k in keep]
        return VectorModel(name=name, spec=spec, minSupportedVersion=_version_name(self.version),
                           isRelaxed=self.relaxed, expectFailure=False, multinomialTolerance=0.0, main=main,
                           referenced=refs)


def _version_name(v: hal.HalVersion) -> str:
    return v.name if v <= V.V1_3 else "UNKNOWN"


def _reachable(model: RandomModel) -> list[int]:
    """The referenced graphs the main graph uses, directly or not, in index order."""
    seen: set[int] = set()
    todo = [model.main]
    while todo:
        g = todo.pop()
        used = {i for op in g.ops for i in op.inputs}
        for k, o in enumerate(g.operands):
            if o.kind == SUBGRAPH and k in used and o.subgraph not in seen:
                seen.add(o.subgraph)
                todo.append(model.referenced[o.subgraph])
    return sorted(seen)


def _lifetime(g: Graph, k: int, o: Operand, main: bool) -> L:
    if k in g.outputs:
        return L.SUBGRAPH_OUTPUT
    if k in g.inputs:
        return L.SUBGRAPH_INPUT
    return {CONST: L.CONSTANT_REFERENCE if o.reference else L.CONSTANT_COPY, TEMP: L.TEMPORARY_VARIABLE,
            OMITTED: L.NO_VALUE, SUBGRAPH: L.SUBGRAPH, INPUT: L.SUBGRAPH_INPUT}[o.kind]


def _vector_subgraph(g: Graph, main: bool, renumber: dict[int, int],
                     expected: Optional[Sequence[np.ndarray]]) -> VectorSubgraph:
    consumers = g.consumers()
    used = {i for op in g.ops for i in (*op.inputs, *op.outputs)} | set(g.inputs) | set(g.outputs)
    index = {k: j for j, k in enumerate(sorted(used))}
    operands = []
    for k in sorted(used):
        o = g.operands[k]
        life = _lifetime(g, k, o, main)
        data: Optional[np.ndarray] = None
        if life == L.SUBGRAPH_INPUT and main:
            data = o.value
        elif life == L.SUBGRAPH_OUTPUT and main:
            data = expected[g.outputs.index(k)] if expected is not None else o.value
        elif life in (L.CONSTANT_COPY, L.CONSTANT_REFERENCE):
            data = o.value
        elif life == L.SUBGRAPH:
            data = np.array([renumber[o.subgraph]], np.uint32)
        dims = o.dims if (life in (L.SUBGRAPH_INPUT, L.SUBGRAPH_OUTPUT) and main) or o.declared is None \
            else o.declared
        cq = hal.SymmPerChannelQuantParams(scales=list(o.channel[0]), channelDim=o.channel[1]) if o.channel else None
        if data is not None and o.is_tensor:
            data = np.asarray(data, NUMPY[o.type]).reshape(o.dims)
        elif data is not None:
            data = np.asarray(data, NUMPY[o.type]).reshape(())
        operands.append(VectorOperand(name=f"op{k}", type=o.type, dimensions=list(dims),
                                      numberOfConsumers=consumers[k], scale=float(o.scale),
                                      zeroPoint=int(o.zero_point), lifetime=life, channelQuant=cq, isIgnored=False,
                                      data=data))
    ops = [hal.Operation(op.type, [index[i] for i in op.inputs], [index[i] for i in op.outputs]) for op in g.ops]
    return VectorSubgraph(operands=operands, operations=ops, inputIndexes=[index[i] for i in g.inputs],
                          outputIndexes=[index[i] for i in g.outputs])


# --------------------------------------------------------------------------
# the one-operation oracle


class Rejected(Exception):
    """The reference refuses the operation as drawn (at validation or execution)."""


def one_op_model(model: RandomModel, g: Graph, op: Op, out_specs: Sequence[Operand],
                 known: bool = False) -> tuple[hal.Model, list]:
    """``op`` alone as a HAL model (its non-constant inputs as model inputs, its
    outputs of unknown rank unless ``known``: then of the specs' dimensions),
    with every referenced graph of ``model``; and the input values."""
    sg = Graph()
    remap: dict[int, int] = {}
    for i in op.inputs:
        if i in remap:
            continue
        o = g.operands[i]
        kind = o.kind if o.kind in (CONST, OMITTED, SUBGRAPH) else INPUT
        remap[i] = sg.add(Operand(o.type, o.dims, o.scale, o.zero_point, o.channel, kind, o.value,
                                  subgraph=o.subgraph))
        if kind == INPUT:
            sg.inputs.append(remap[i])
    outs = []
    for s in out_specs:
        outs.append(sg.add(Operand(s.type, s.dims, s.scale, s.zero_point, s.channel, TEMP)))
    sg.outputs = outs
    sg.ops = [Op(op.type, [remap[i] for i in op.inputs], outs)]
    rm = RandomModel(sg, model.referenced, model.relaxed, False, model.version)
    vm = rm.to_vector("check", "check")
    for k, j in enumerate(vm.main.outputIndexes):
        o = vm.main.operands[j]
        if out_specs[k].is_tensor and not known:
            o.dimensions = []
    return copies_only(vm).build_model(), [sg.operands[i].value for i in sg.inputs]


def copies_only(vm: VectorModel) -> VectorModel:
    """``vm`` with every constant in ``operandValues`` (no memory pool to allocate)."""
    for sgv in [vm.main, *vm.referenced]:
        for o in sgv.operands:
            if o.lifetime == L.CONSTANT_REFERENCE:
                o.lifetime = L.CONSTANT_COPY
    return vm


def evaluate(model: RandomModel, g: Graph, op: Op, out_specs: Sequence[Operand]) -> list[np.ndarray]:
    """The outputs the reference computes for ``op`` on its operands' values
    (raises :class:`Rejected` with the reference's reason when it refuses)."""
    from nnhal.engine.executor import Executor
    from nnhal.engine.validation import ValidationError, validate_model
    from nnhal.ops.base import OpExecutionError

    # NOTE: the outputs' shapes are what the reference computes: unknown dimensions need HAL 1.2, so the
    # operation runs as a 1.3 model first (its signatures were chosen at the model's version), then, for an
    # older version, is validated again with the computed shapes
    hm, values = one_op_model(model, g, op, out_specs)
    try:
        validate_model(hm, version=max(model.version, hal.HalVersion.V1_3))
        # NOTE: a draw may overflow (float16); the result is then refused as not meaningful, silently
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            outs = Executor(hm, []).run(values)
        if model.version < hal.HalVersion.V1_2:
            known = [Operand(s.type, tuple(np.shape(v)), s.scale, s.zero_point, s.channel) for s, v in
                     zip(out_specs, outs)]
            validate_model(one_op_model(model, g, op, known, known=True)[0], version=model.version)
        return outs
    except ValidationError as e:
        raise Rejected(f"invalid: {e}") from None
    except OpExecutionError as e:
        raise Rejected(f"fails: {e}") from None
    except (ValueError, ArithmeticError, IndexError, FloatingPointError) as e:
        raise Rejected(f"fails: {type(e).__name__}: {e}") from None


def validate(model: RandomModel) -> str:
    """'' when the reference's validation accepts the whole model, else why not."""
    from nnhal.engine.validation import ValidationError, validate_model

    hm = copies_only(model.to_vector("check", "check")).build_model()
    if model.dynamic_outputs:
        for i in hm.main.outputIndexes:
            hm.main.operands[i].dimensions = [0] * len(hm.main.operands[i].dimensions)
    try:
        validate_model(hm, version=model.version)
    except ValidationError as e:
        return str(e)
    return ""


def _param_text(v: Any) -> str:
    if isinstance(v, tuple):
        return "x".join(str(x) for x in v) if all(isinstance(x, int) for x in v) and len(v) == 2 else \
            "(" + ",".join(str(x) for x in v) + ")"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def describe(model: RandomModel) -> list[str]:
    """One line per operation (a body's operations indented under their IF / WHILE): its type, its
    operands (tensor type, shape, quantization; constants marked ``c``) and its named parameters."""
    lines: list[str] = []

    def walk(g: Graph, depth: int) -> None:
        for op in g.ops:
            ins = []
            for k in op.inputs:
                o = g.operands[k]
                if o.kind == SUBGRAPH or (not o.is_tensor and o.kind == CONST) or o.kind == OMITTED:
                    continue
                ins.append(o.text() + ("c" if o.kind == CONST else ""))
            outs = [g.operands[k].text() for k in op.outputs]
            params = " ".join(f"{k}={_param_text(v)}" for k, v in op.params.items()
                              if not k.endswith("_ops") and k != "body_ops")
            lines.append(f"{'  ' * depth}{op.type.name} {', '.join(ins)} -> {', '.join(outs)}"
                         + (f"  {params}" if params else ""))
            for k in op.inputs:
                o = g.operands[k]
                if o.kind == SUBGRAPH:
                    walk(model.referenced[o.subgraph], depth + 1)
    walk(model.main, 0)
    return lines
