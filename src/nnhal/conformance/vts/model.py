"""Section "model": model validation as VTS 1.3's ``ValidateModel.cpp`` does it
(and the cycle check of ``BasicTests.cpp``), and the AIDL VTS's
``ValidateModel.cpp`` through the AIDL face, through the public HAL only.

Every base model's ``main`` is mutated in each of the ways VTS mutates one,
and each mutated model must be rejected: ``getSupportedOperations(_1_3)``
returns INVALID_ARGUMENT (not asked for the preference / priority mutations,
whose model is fine), and ``prepareModel(_1_3)`` returns INVALID_ARGUMENT at
launch (AIDL: raises it) while the callback gets INVALID_ARGUMENT and no
prepared model; from AIDL version 4, ``prepareModelWithConfig`` the same.  A
case is one mutation of one model, named by VTS's test function
(``mutateOperandTypeTest``...) and VTS's description of the mutation.  The
AIDL VTS mutates as the 1.3 one but: an AIDL operand has no
``numberOfConsumers`` (the driver counts them: no such mutation), the
invalid operand and operation types are -1 and the enum's last value + 1,
and PACK's inputs after the first are not removed.

Where this port differs from VTS, on purpose: a removed operand is removed
with its references renumbered (VTS's renumbering is a no-op, also ported as
"remove operand (VTS indexes)"), so positions that are optional trailing
inputs are skipped there too; an added output gets numberOfConsumers 0 (VTS
gives it 1, which the consumer count check rejects by itself).

The same mutations (less the priority ones, plus the operand and operation
types 1.3 added) can go through the inherited ``getSupportedOperations_1_2``
/ ``prepareModel_1_2`` as 1.2 models (:func:`mutations_v1_2`), as the 1.2
VTS binary does.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Optional, Sequence

from nnhal import aidl, hal
from nnhal.conformance.face import as_face
from nnhal.conformance.vectors import VectorModel
from nnhal.conformance.vts.case import Case, Recorder, name, sample_indexes
from nnhal.platform import memory as hal_memory

SECTION = "model"

S = hal.ErrorStatus
T = hal.OperandType
L = hal.OperandLifeTime
Op = hal.OperationType

DEFAULT_PREFERENCE = hal.ExecutionPreference.FAST_SINGLE_ANSWER
DEFAULT_PRIORITY = hal.Priority.MEDIUM

_SCALARS = (T.FLOAT16, T.FLOAT32, T.INT32, T.UINT32, T.BOOL)
_ELEMENT_SIZE = {T.FLOAT32: 4, T.INT32: 4, T.UINT32: 4, T.TENSOR_FLOAT32: 4, T.TENSOR_INT32: 4,
                 T.TENSOR_QUANT8_ASYMM: 1, T.BOOL: 1, T.TENSOR_QUANT16_SYMM: 2, T.TENSOR_FLOAT16: 2,
                 T.TENSOR_BOOL8: 1, T.FLOAT16: 2, T.TENSOR_QUANT8_SYMM_PER_CHANNEL: 1, T.TENSOR_QUANT16_ASYMM: 2,
                 T.TENSOR_QUANT8_SYMM: 1, T.TENSOR_QUANT8_ASYMM_SIGNED: 1}


# --------------------------------------------------------------------------
# model helpers


def _copy_operand(o: hal.Operand) -> hal.Operand:
    cq = o.extraParams.channelQuant
    extra = hal.OperandExtraParams(
        channelQuant=None if cq is None else hal.SymmPerChannelQuantParams(list(cq.scales), cq.channelDim),
        extension=o.extraParams.extension)
    return hal.Operand(type=o.type, dimensions=list(o.dimensions), numberOfConsumers=o.numberOfConsumers,
                       scale=o.scale, zeroPoint=o.zeroPoint, lifetime=o.lifetime,
                       location=replace(o.location), extraParams=extra)


def copy_model(model: hal.Model) -> hal.Model:
    """A copy whose main subgraph may be changed freely (VTS mutates only
    ``main``; referenced subgraphs, values and pools are shared)."""
    m = model.main
    main = hal.Subgraph(operands=[_copy_operand(o) for o in m.operands],
                        operations=[hal.Operation(op.type, list(op.inputs), list(op.outputs)) for op in m.operations],
                        inputIndexes=list(m.inputIndexes), outputIndexes=list(m.outputIndexes))
    return replace(model, main=main)


def data_size(o: hal.Operand) -> int:
    """Bytes of the operand's value; 0 when unknown (an unspecified dimension
    or rank, OEM or extension types)."""
    size = _ELEMENT_SIZE.get(o.type, 0) if o.type in T._value2member_map_ else 0
    if o.type in _SCALARS:
        return size
    if not o.dimensions:
        return 0
    for d in o.dimensions:
        size *= d
    return size


def binder_size(model: hal.Model) -> int:
    """A rough size of the model in a binder transaction (as VTS estimates it,
    to leave out mutations that would make the model too big to send)."""
    def operand(o: hal.Operand) -> int:
        cq = o.extraParams.channelQuant
        return 4 + 4 * len(o.dimensions) + 4 + 4 + 4 + 4 + 12 + (4 * len(cq.scales) + 4 if cq else 0)

    def subgraph(sg: hal.Subgraph) -> int:
        return (sum(operand(o) for o in sg.operands)
                + sum(4 + 4 * (len(op.inputs) + len(op.outputs)) for op in sg.operations)
                + 4 * (len(sg.inputIndexes) + len(sg.outputIndexes)))

    return (subgraph(model.main) + sum(subgraph(sg) for sg in model.referenced) + len(model.operandValues)
            + sum(12 + 4 + len(p.name) for p in model.pools) + 1
            + sum(len(e.name) + 2 for e in model.extensionNameToPrefix))


_HALF_MAX_IPC = 64 * 1024 // 2


def _fits_as_constant(model: hal.Model, model_size: int, o: hal.Operand) -> bool:
    size = data_size(o)
    extra = max(0, size - len(model.operandValues))
    return size > 0 and model_size + extra <= _HALF_MAX_IPC


def _make_constant_copy(model: hal.Model, o: hal.Operand) -> None:
    """Turns ``o`` into a CONSTANT_COPY at the start of operandValues (growing
    them with zeros if needed): a valid constant of unspecified value."""
    size = data_size(o)
    o.lifetime = L.CONSTANT_COPY
    o.location = hal.DataLocation(poolIndex=0, offset=0, length=size)
    if len(model.operandValues) < size:
        model.operandValues = bytes(model.operandValues) + bytes(size - len(model.operandValues))


def _new_int32(model: hal.Model, lifetime: L, consumers: int) -> int:
    model.main.operands.append(hal.Operand(type=T.INT32, numberOfConsumers=consumers, lifetime=lifetime))
    return len(model.main.operands) - 1


def _fresh_output_copy(o: hal.Operand) -> hal.Operand:
    """A new, unread operand like ``o`` for a duplicated or redirected write."""
    n = _copy_operand(o)
    n.numberOfConsumers = 0
    if n.lifetime == L.SUBGRAPH_OUTPUT:
        n.lifetime = L.TEMPORARY_VARIABLE
    assert n.lifetime == L.TEMPORARY_VARIABLE
    return n


# --------------------------------------------------------------------------
# the mutations


@dataclass
class Mutation:
    kind: str
    what: str
    model: hal.Model
    preference: int = DEFAULT_PREFERENCE
    priority: int = DEFAULT_PRIORITY


Change = Callable[[hal.Model], Any]
Generator = Callable[[hal.Model], Iterator[tuple[str, Change]]]
MUTATORS: list[tuple[str, Generator]] = []


def mutator(kind: str) -> Callable[[Generator], Generator]:
    """Registers a generator of (description, change) pairs; each change is
    applied to a fresh copy of the model (a change that returns a pair gives
    the preparation's preference and priority instead)."""
    def wrap(gen: Generator) -> Generator:
        MUTATORS.append((kind, gen))
        return gen

    return wrap


@dataclass
class Planned:
    """One mutation, named but not made yet (making it copies the model)."""
    kind: str
    what: str
    change: Change

    def make(self, model: hal.Model) -> Mutation:
        m = copy_model(model)
        mutation = Mutation(self.kind, self.what, m)
        result = self.change(m)
        if isinstance(result, tuple):
            mutation.preference, mutation.priority = result
        return mutation


def plan(model: hal.Model, face: str = "hidl") -> list[Planned]:
    """Every mutation of ``model`` in VTS's order, named, none made yet (as
    the VTS of ``face``, "hidl" or "aidl", mutates)."""
    return list(iter_plan(model, face))


def iter_plan(model: hal.Model, face: str = "hidl", kinds: Optional[Sequence[str]] = None) -> Iterator[Planned]:
    """:func:`plan` one mutation at a time (only those of ``kinds`` when given)."""
    mutators = MUTATORS if face == "hidl" else _aidl_mutators()
    for kind, gen in mutators:
        if kinds is None or kind in kinds:
            for what, change in gen(model):
                yield Planned(kind, what, change)


def _aidl_mutators() -> list[tuple[str, Generator]]:
    """The AIDL VTS's mutations: the 1.3 ones with AIDL's invalid types, without numberOfConsumers."""
    swap: dict[str, Generator] = {"operand type": _operand_type_aidl, "operation type": _operation_type_aidl}
    return [(kind, swap.get(kind, gen)) for kind, gen in MUTATORS if kind != "operand numberOfConsumers"]


@mutator("execution order")
def _execution_order(model: hal.Model):
    main = model.main
    written_by_ops = (L.TEMPORARY_VARIABLE, L.SUBGRAPH_OUTPUT)
    for k, op in enumerate(main.operations):
        if any(main.operands[i].lifetime in written_by_ops for i in op.inputs):
            # a reader moved before every operation, so before its writer
            def first(m: hal.Model, k: int = k) -> None:
                ops = m.main.operations
                ops.insert(0, ops.pop(k))

            yield f"operation {k} (a reader) moved first", first
        if any(main.operands[i].numberOfConsumers > 0 for i in op.outputs):
            # a writer moved after every operation, so after its readers
            def last(m: hal.Model, k: int = k) -> None:
                ops = m.main.operations
                ops.append(ops.pop(k))

            yield f"operation {k} (a writer) moved last", last


INVALID_OPERAND_TYPES = (
    (int(hal.OperandTypeRange.FUNDAMENTAL_MIN) - 1) & 0xFFFFFFFF,
    int(hal.OperandTypeRange.FUNDAMENTAL_MAX) + 1,
    int(hal.OperandTypeRange.OEM_MIN) - 1,
    int(hal.OperandTypeRange.OEM_MAX) + 1,
)


def _operand_types(model: hal.Model, invalid: Sequence[int]):
    for i in range(len(model.main.operands)):
        for t in invalid:
            def change(m: hal.Model, i: int = i, t: int = t) -> None:
                m.main.operands[i].type = t

            yield f"operand {i} type {t}", change


@mutator("operand type")
def _operand_type(model: hal.Model):
    yield from _operand_types(model, INVALID_OPERAND_TYPES)


def _aidl_invalid(enum: Any) -> tuple[int, int]:
    """AIDL VTS's invalid values of an enum: -1 and one past its last value."""
    return -1, max(int(v) for v in enum) + 1


def _operand_type_aidl(model: hal.Model):
    yield from _operand_types(model, _aidl_invalid(aidl.OperandType))


@mutator("operand rank")
def _operand_rank(model: hal.Model):
    for i, o in enumerate(model.main.operands):
        if o.type in _SCALARS:
            def change(m: hal.Model, i: int = i) -> None:
                m.main.operands[i].dimensions = [0]

            yield f"operand {i} ({T(o.type).name}) of rank 1", change


def invalid_scale(t: int) -> float:
    if t in (T.FLOAT16, T.FLOAT32, T.INT32, T.UINT32, T.BOOL, T.TENSOR_BOOL8, T.TENSOR_FLOAT16, T.TENSOR_FLOAT32,
             T.TENSOR_QUANT8_SYMM_PER_CHANNEL, T.SUBGRAPH):
        return 1.0
    if t == T.TENSOR_INT32:
        return -1.0
    return 0.0  # the quantized types (and anything else)


@mutator("operand scale")
def _operand_scale(model: hal.Model):
    for i, o in enumerate(model.main.operands):
        scale = invalid_scale(o.type)

        def change(m: hal.Model, i: int = i, scale: float = scale) -> None:
            m.main.operands[i].scale = scale

        yield f"operand {i} scale {scale}", change


def invalid_zero_points(t: int) -> tuple[int, ...]:
    if t in (T.FLOAT16, T.FLOAT32, T.INT32, T.UINT32, T.BOOL, T.TENSOR_BOOL8, T.TENSOR_FLOAT16, T.TENSOR_FLOAT32,
             T.TENSOR_INT32, T.TENSOR_QUANT8_SYMM_PER_CHANNEL, T.SUBGRAPH):
        return (1,)
    return {T.TENSOR_QUANT8_ASYMM: (-1, 256), T.TENSOR_QUANT8_SYMM: (-129, -1, 1, 128),
            T.TENSOR_QUANT16_ASYMM: (-1, 65536), T.TENSOR_QUANT16_SYMM: (-32769, -1, 1, 32768)}.get(t, ())


@mutator("operand zeroPoint")
def _operand_zero_point(model: hal.Model):
    for i, o in enumerate(model.main.operands):
        for zp in invalid_zero_points(o.type):
            def change(m: hal.Model, i: int = i, zp: int = zp) -> None:
                m.main.operands[i].zeroPoint = zp

            yield f"operand {i} zeroPoint {zp}", change


def _needs_writer_flipped(lifetime: L) -> tuple[L, ...]:
    """Lifetimes that change whether an operand of ``lifetime`` needs a writer."""
    if lifetime in (L.SUBGRAPH_OUTPUT, L.TEMPORARY_VARIABLE):
        return (L.SUBGRAPH_INPUT, L.CONSTANT_COPY)
    if lifetime in (L.CONSTANT_COPY, L.CONSTANT_REFERENCE, L.SUBGRAPH_INPUT):
        return (L.TEMPORARY_VARIABLE, L.SUBGRAPH_OUTPUT)
    return ()  # NO_VALUE (written or not: unknown), SUBGRAPH


@mutator("operand lifetime")
def _operand_lifetime(model: hal.Model):
    """The lifetime changed so that the operand needs a writer it lacks (or has
    one it must not), with inputIndexes / outputIndexes kept consistent."""
    size = binder_size(model)
    for i, o in enumerate(model.main.operands):
        for new in _needs_writer_flipped(o.lifetime):
            if new == L.CONSTANT_COPY and not _fits_as_constant(model, size, o):
                continue

            def change(m: hal.Model, i: int = i, new: L = new) -> None:
                sg = m.main
                operand = sg.operands[i]
                if operand.lifetime == L.SUBGRAPH_INPUT:
                    sg.inputIndexes.remove(i)
                elif operand.lifetime == L.SUBGRAPH_OUTPUT:
                    sg.outputIndexes.remove(i)
                operand.lifetime = new
                operand.location = hal.DataLocation()
                if new == L.CONSTANT_COPY:
                    _make_constant_copy(m, operand)
                elif new == L.SUBGRAPH_INPUT:
                    sg.inputIndexes.append(i)
                elif new == L.SUBGRAPH_OUTPUT:
                    sg.outputIndexes.append(i)

            yield f"operand {i} lifetime {L(o.lifetime).name} -> {new.name}", change


def _io_flipped(lifetime: L) -> Optional[L]:
    """A lifetime that keeps whether a writer is needed but changes whether the
    operand is a model input / output (without fixing the index lists)."""
    return {L.CONSTANT_COPY: L.SUBGRAPH_INPUT, L.CONSTANT_REFERENCE: L.SUBGRAPH_INPUT,
            L.SUBGRAPH_INPUT: L.CONSTANT_COPY, L.SUBGRAPH_OUTPUT: L.TEMPORARY_VARIABLE,
            L.TEMPORARY_VARIABLE: L.SUBGRAPH_OUTPUT}.get(lifetime)


@mutator("operand input/output lifetime")
def _operand_input_output(model: hal.Model):
    size = binder_size(model)
    for i, o in enumerate(model.main.operands):
        new = _io_flipped(o.lifetime)
        if new is None or (new == L.CONSTANT_COPY and not _fits_as_constant(model, size, o)):
            continue

        def change(m: hal.Model, i: int = i, new: L = new) -> None:
            operand = m.main.operands[i]
            operand.lifetime = new
            operand.location = hal.DataLocation()
            if new == L.CONSTANT_COPY:
                _make_constant_copy(m, operand)

        yield f"operand {i} lifetime {L(o.lifetime).name} -> {new.name}, index lists unchanged", change


@mutator("operand numberOfConsumers")
def _number_of_consumers(model: hal.Model):
    for i, o in enumerate(model.main.operands):
        n = o.numberOfConsumers
        for bad in ((1,) if n == 0 else (n - 1, n + 1)):
            def change(m: hal.Model, i: int = i, bad: int = bad) -> None:
                m.main.operands[i].numberOfConsumers = bad

            yield f"operand {i} numberOfConsumers {n} -> {bad}", change


@mutator("operand add writer")
def _add_writer(model: hal.Model):
    """A copy of an operation appended at the end, writing one of the same
    outputs again (its other outputs are new operands)."""
    for k, op in enumerate(model.main.operations):
        for j, twice in enumerate(op.outputs):
            def change(m: hal.Model, k: int = k, j: int = j) -> None:
                sg = m.main
                orig = sg.operations[k]
                dup = hal.Operation(orig.type, list(orig.inputs), list(orig.outputs))
                for i in dup.inputs:
                    sg.operands[i].numberOfConsumers += 1
                for n, out in enumerate(dup.outputs):
                    if n != j:
                        sg.operands.append(_fresh_output_copy(sg.operands[out]))
                        dup.outputs[n] = len(sg.operands) - 1
                sg.operations.append(dup)

            yield f"operation {k} output {j} (operand {twice}) written twice", change


def retype_operand(o: hal.Operand, t: int) -> hal.Operand:
    """``o`` given type ``t`` and otherwise made well-formed for it (rank,
    scale, zeroPoint, per-channel params), so only the operation signature
    check can object."""
    n = _copy_operand(o)
    n.type = t
    dims = list(o.dimensions) or [1]
    if t in _SCALARS:
        n.dimensions, n.scale, n.zeroPoint = [], 0.0, 0
    elif t in (T.TENSOR_BOOL8, T.TENSOR_FLOAT16, T.TENSOR_FLOAT32):
        n.dimensions, n.scale, n.zeroPoint = dims, 0.0, 0
    elif t == T.TENSOR_INT32:
        n.dimensions, n.zeroPoint = dims, 0
    elif t in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT16_ASYMM, T.TENSOR_QUANT16_SYMM):
        n.dimensions, n.scale = dims, (o.scale if o.scale != 0.0 else 1.0)
    elif t == T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
        n.dimensions, n.scale, n.zeroPoint = dims, 0.0, 0
        channels = o.dimensions[0] if o.dimensions else 0
        n.extraParams = hal.OperandExtraParams(
            channelQuant=hal.SymmPerChannelQuantParams(scales=[1.0] * channels, channelDim=0))
    # other types (QUANT8_ASYMM_SIGNED, SUBGRAPH): only the type changes, as in VTS
    return n


_ANY_TENSOR = {T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT16_SYMM,
               T.TENSOR_BOOL8, T.TENSOR_QUANT8_SYMM_PER_CHANNEL, T.TENSOR_QUANT16_ASYMM, T.TENSOR_QUANT8_SYMM,
               T.TENSOR_QUANT8_ASYMM_SIGNED}
_FLOATS = {T.TENSOR_FLOAT16, T.TENSOR_FLOAT32}
_Q8 = {T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED}


def retype_is_legal(model: hal.Model, i: int, t: int) -> bool:
    """Retypes VTS leaves out: the same type, OEM types, and operand positions
    where several types are legal (the rules of VTS's
    ``mutateOperationOperandTypeSkip``)."""
    everywhere, at = _legal_retypes(model)
    return t == model.main.operands[i].type or t in everywhere or t in at.get(i, ())


_ALL_TYPES = frozenset(int(t) for t in T)


def _legal_retypes(model: hal.Model) -> tuple[set[int], dict[int, set[int]]]:
    """The retypes :func:`retype_is_legal` skips besides an operand's own type, read from the operations once:
    (types skipped for every operand, types skipped per operand index)."""
    everywhere: set[int] = {T.OEM, T.TENSOR_OEM_BYTE}
    at: dict[int, set[int]] = {}

    def skip(i: Optional[int], types: Any) -> None:
        if i is not None:
            at.setdefault(i, set()).update(types)

    for op in model.main.operations:
        in0 = op.inputs[0] if op.inputs else None
        in1 = op.inputs[1] if len(op.inputs) > 1 else None
        out0 = op.outputs[0] if op.outputs else None
        if op.type == Op.LSH_PROJECTION:
            skip(in1, _ALL_TYPES)
        elif op.type in (Op.CAST, Op.ARGMAX, Op.ARGMIN):
            everywhere |= _FLOATS | _Q8 | {T.TENSOR_INT32}  # NOTE: VTS skips these types of any operand here
        elif op.type == Op.QUANTIZE:
            skip(in0, _FLOATS)
            skip(out0, _Q8)
        elif op.type == Op.RANDOM_MULTINOMIAL:
            skip(in0, _FLOATS)
        elif op.type == Op.DEQUANTIZE:
            skip(in0, _Q8 | {T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT8_SYMM_PER_CHANNEL})
            skip(out0, _FLOATS)
        elif op.type in (Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.GROUPED_CONV_2D, Op.TRANSPOSE_CONV_2D):
            skip(in1, (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_SYMM_PER_CHANNEL))
        elif op.type == Op.AXIS_ALIGNED_BBOX_TRANSFORM:
            skip(in1, _Q8)
        elif op.type == Op.RANK:
            skip(in0, _ANY_TENSOR)
    return everywhere, at


@mutator("operation operand type")
def _operation_operand_type(model: hal.Model):
    everywhere, at = _legal_retypes(model)  # NOTE: once per model, not per operand and type
    for i, o in enumerate(model.main.operands):
        legal = at.get(i, ())
        for t in T:
            if t == o.type or t in everywhere or t in legal:
                continue

            def change(m: hal.Model, i: int = i, t: T = t) -> None:
                m.main.operands[i] = retype_operand(m.main.operands[i], t)

            yield f"operand {i} retyped {t.name}", change


INVALID_OPERATION_TYPES = (int(hal.OperationTypeRange.FUNDAMENTAL_MAX) + 1, int(hal.OperationTypeRange.OEM_MIN) - 1,
                           int(hal.OperationTypeRange.OEM_MAX) + 1)


def _operation_types(model: hal.Model, invalid: Sequence[int]):
    for k in range(len(model.main.operations)):
        for t in invalid:
            def change(m: hal.Model, k: int = k, t: int = t) -> None:
                m.main.operations[k].type = t

            yield f"operation {k} type {t}", change


@mutator("operation type")
def _operation_type(model: hal.Model):
    yield from _operation_types(model, INVALID_OPERATION_TYPES)


def _operation_type_aidl(model: hal.Model):
    yield from _operation_types(model, _aidl_invalid(aidl.OperationType))


def _operand_index_out_of_range(model: hal.Model, field: str):
    """Each operation input (or output) index set to the number of operands."""
    bad = len(model.main.operands)
    for k, op in enumerate(model.main.operations):
        for j in range(len(getattr(op, field))):
            def change(m: hal.Model, k: int = k, j: int = j) -> None:
                getattr(m.main.operations[k], field)[j] = bad

            yield f"operation {k} {field[:-1]} {j} -> operand {bad}", change


@mutator("operation input index")
def _operation_input_index(model: hal.Model):
    yield from _operand_index_out_of_range(model, "inputs")


@mutator("operation output index")
def _operation_output_index(model: hal.Model):
    yield from _operand_index_out_of_range(model, "outputs")


@mutator("operation remove write")
def _remove_write(model: hal.Model):
    """An operation writes a new operand instead of one that others read, so
    the latter is never written."""
    for k, op in enumerate(model.main.operations):
        for j, out in enumerate(op.outputs):
            if model.main.operands[out].numberOfConsumers == 0:
                continue

            def change(m: hal.Model, k: int = k, j: int = j) -> None:
                sg = m.main
                sg.operands.append(_fresh_output_copy(sg.operands[sg.operations[k].outputs[j]]))
                sg.operations[k].outputs[j] = len(sg.operands) - 1

            yield f"operation {k} output {j} (operand {out}) no longer written", change


# Operations whose outputs VTS leaves alone in the remove-operand test: SPLIT's
# outputs are not checked at preparation, the sequence ops have optional outputs.
_OPTIONAL_OUTPUT_OPS = {Op.SPLIT, Op.UNIDIRECTIONAL_SEQUENCE_LSTM, Op.UNIDIRECTIONAL_SEQUENCE_RNN,
                        Op.BIDIRECTIONAL_SEQUENCE_LSTM, Op.BIDIRECTIONAL_SEQUENCE_RNN}


def remove_operand_is_harmless(model: hal.Model, i: int) -> bool:
    main = model.main
    if main.operands[i].numberOfConsumers == 0:
        return True  # removing an unused operand changes nothing that must be rejected
    for op in main.operations:
        if op.type in _OPTIONAL_OUTPUT_OPS and i in op.outputs:
            return True
        # NOTE: VTS renumbers nothing when it removes an operand (its decrement is a
        # no-op post-decrement), which leaves every later index dangling.  We renumber
        # properly, so removing an optional trailing input (a layout flag, an axis) can
        # leave a valid operation: those positions are the ones VTS's remove-input test
        # skips, and are skipped here too.
        if i in op.inputs and any(removing_input_is_legal(op, j) for j, x in enumerate(op.inputs) if x == i):
            return True
    return False


@mutator("remove operand")
def _remove_operand(model: hal.Model):
    for i in range(len(model.main.operands)):
        if remove_operand_is_harmless(model, i):
            continue

        def change(m: hal.Model, i: int = i) -> None:
            sg = m.main
            del sg.operands[i]

            def fix(indexes: list[int]) -> list[int]:
                return [x - 1 if x > i else x for x in indexes if x != i]

            for op in sg.operations:
                op.inputs, op.outputs = fix(op.inputs), fix(op.outputs)
            sg.inputIndexes, sg.outputIndexes = fix(sg.inputIndexes), fix(sg.outputIndexes)

        yield f"operand {i} removed", change


@mutator("remove operand (VTS indexes)")
def _remove_operand_vts_indexes(model: hal.Model):
    """The removal exactly as VTS 1.3 does it: references to the operand are
    dropped but the later indexes are not renumbered (its decrement is a
    post-decrement that changes nothing), so they point one operand off."""
    for i in range(len(model.main.operands)):
        if remove_operand_is_harmless(model, i):
            continue

        def change(m: hal.Model, i: int = i) -> None:
            sg = m.main
            del sg.operands[i]
            for op in sg.operations:
                op.inputs = [x for x in op.inputs if x != i]
                op.outputs = [x for x in op.outputs if x != i]
            sg.inputIndexes = [x for x in sg.inputIndexes if x != i]
            sg.outputIndexes = [x for x in sg.outputIndexes if x != i]

        yield f"operand {i} removed, indexes kept", change


@mutator("remove operation")
def _remove_operation(model: hal.Model):
    for k in range(len(model.main.operations)):
        def change(m: hal.Model, k: int = k) -> None:
            sg = m.main
            for i in sg.operations[k].inputs:
                sg.operands[i].numberOfConsumers -= 1
            del sg.operations[k]

        yield f"operation {k} removed", change


def removing_input_is_legal(op: hal.Operation, j: int) -> bool:
    """Inputs VTS does not remove: optional trailing parameters (layout, axis,
    align_corners / half_pixel_centers) and CONCATENATION's tensors."""
    n = len(op.inputs)
    t = op.type
    if t == Op.CONCATENATION:
        return n > 2 and j != n - 1
    if t == Op.DEPTHWISE_CONV_2D:
        return (n, j) in ((12, 11), (9, 8))
    if t in (Op.CONV_2D, Op.AVERAGE_POOL_2D, Op.MAX_POOL_2D, Op.L2_POOL_2D):
        return (n, j) in ((11, 10), (8, 7))
    if t == Op.RESIZE_BILINEAR:
        return n >= 4 and j >= 3
    if t == Op.RESIZE_NEAREST_NEIGHBOR:
        return n >= 5 and j >= 3
    if t in (Op.SPACE_TO_DEPTH, Op.DEPTH_TO_SPACE, Op.BATCH_TO_SPACE_ND):
        return (n, j) == (3, 2)
    if t == Op.SPACE_TO_BATCH_ND:
        return (n, j) == (4, 3)
    if t == Op.L2_NORMALIZATION:
        return (n, j) == (2, 1)
    if t == Op.LOCAL_RESPONSE_NORMALIZATION:
        return (n, j) == (6, 5)
    if t == Op.SOFTMAX:
        return (n, j) == (3, 2)
    if t == _PACK:  # NOTE: AIDL version 2: the axis, then two or more tensors
        return n > 2 and j != 0
    return False


_PACK = int(aidl.OperationType.PACK)  # NOTE: AIDL version 2 (the canonical 1.3 enum has no PACK)


@mutator("remove operation input")
def _remove_operation_input(model: hal.Model):
    for k, op in enumerate(model.main.operations):
        for j in range(len(op.inputs)):
            if removing_input_is_legal(op, j):
                continue

            def change(m: hal.Model, k: int = k, j: int = j) -> None:
                sg = m.main
                sg.operands[sg.operations[k].inputs[j]].numberOfConsumers -= 1
                del sg.operations[k].inputs[j]

            yield f"operation {k} input {j} removed", change


@mutator("remove operation output")
def _remove_operation_output(model: hal.Model):
    for k, op in enumerate(model.main.operations):
        for j in range(len(op.outputs)):
            def change(m: hal.Model, k: int = k, j: int = j) -> None:
                del m.main.operations[k].outputs[j]

            yield f"operation {k} output {j} removed", change


def adding_input_is_legal(op: hal.Operation) -> bool:
    """Operations that take an optional extra INT32 (or BOOL) parameter."""
    n = len(op.inputs)
    return ((op.type == Op.L2_NORMALIZATION and n == 1) or (op.type == Op.LOCAL_RESPONSE_NORMALIZATION and n == 5)
            or (op.type == Op.SOFTMAX and n == 2)
            or (op.type in (Op.RESIZE_BILINEAR, Op.RESIZE_NEAREST_NEIGHBOR) and n < 6))


@mutator("add operation input")
def _add_operation_input(model: hal.Model):
    for k, op in enumerate(model.main.operations):
        if adding_input_is_legal(op):
            continue

        def change(m: hal.Model, k: int = k) -> None:
            i = _new_int32(m, L.SUBGRAPH_INPUT, 1)
            m.main.operations[k].inputs.append(i)
            m.main.inputIndexes.append(i)

        yield f"operation {k} given an extra INT32 input", change


@mutator("add operation output")
def _add_operation_output(model: hal.Model):
    for k in range(len(model.main.operations)):
        def change(m: hal.Model, k: int = k) -> None:
            # NOTE: VTS gives the new output numberOfConsumers 1, which the consumer count
            # check rejects by itself; 0 (the right count) leaves the rejection to the
            # operation's signature, which is what this mutation is about.
            i = _new_int32(m, L.SUBGRAPH_OUTPUT, 0)
            m.main.operations[k].outputs.append(i)
            m.main.outputIndexes.append(i)

        yield f"operation {k} given an extra INT32 output", change


@mutator("execution preference")
def _preference(model: hal.Model):
    lo, hi = int(hal.ExecutionPreference.LOW_POWER) - 1, int(hal.ExecutionPreference.SUSTAINED_SPEED) + 1
    for bad in (lo, hi):
        yield f"preference {bad}", (lambda m, bad=bad: (bad, DEFAULT_PRIORITY))


@mutator("priority")
def _priority(model: hal.Model):
    lo, hi = int(hal.Priority.LOW) - 1, int(hal.Priority.HIGH) + 1
    for bad in (lo, hi):
        yield f"priority {bad}", (lambda m, bad=bad: (DEFAULT_PREFERENCE, bad))


def mutations(model: hal.Model) -> Iterator[Mutation]:
    for p in plan(model):
        yield p.make(model)


# --------------------------------------------------------------------------
# checking


def _valid_preference_and_priority(m: Mutation) -> bool:
    return m.preference in hal.ExecutionPreference._value2member_map_ and m.priority in hal.Priority._value2member_map_


def judge(device: Any, m: Mutation) -> tuple[str, str]:
    """(the driver's answers, what went wrong or "") for one mutated model
    through ``device``'s face (a HAL 1.3 ``IDevice`` is judged through its
    HIDL face): VTS wants INVALID_ARGUMENT from getSupportedOperations (when
    the preference and priority are valid), at prepareModel's launch and in
    its callback, with no prepared model; from AIDL version 4, from
    prepareModelWithConfig the same."""
    face = as_face(device)
    v = face.method_suffix
    if _valid_preference_and_priority(m):
        status, _, _ = face.supported(m.model)
        if status != S.INVALID_ARGUMENT:
            return name(status), f"getSupportedOperations{v} returned {name(status)}"
    for config in (False, True) if face.has_config else (False,):
        launch, status, prepared = face.prepare(m.model, m.preference, m.priority, config=config)
        what = "prepareModelWithConfig" if config else f"prepareModel{v}"
        if launch != S.INVALID_ARGUMENT:
            return name(launch), f"{what} launch returned {name(launch)}"
        if status != S.INVALID_ARGUMENT:
            return name(status), f"{what} callback gave {name(status)}"
        if prepared is not None:
            return "NONE", f"{what} callback gave a prepared model"
    return "INVALID_ARGUMENT", ""


def rejection_problem(device: Any, m: Mutation) -> Optional[str]:
    """None when the device rejects the mutated model as VTS requires, else
    what went wrong."""
    return judge(device, m)[1] or None


# VTS's test function per kind of mutation (ValidateModel.cpp)
VTS_TESTS = {
    "execution order": "mutateExecutionOrderTest",
    "operand type": "mutateOperandTypeTest",
    "operand rank": "mutateOperandRankTest",
    "operand scale": "mutateOperandScaleTest",
    "operand zeroPoint": "mutateOperandZeroPointTest",
    "operand lifetime": "mutateOperandLifeTimeTest",
    "operand input/output lifetime": "mutateOperandInputOutputTest",
    "operand numberOfConsumers": "mutateOperandNumberOfConsumersTest",
    "operand add writer": "mutateOperandAddWriterTest",
    "operation operand type": "mutateOperationOperandTypeTest",
    "operation type": "mutateOperationTypeTest",
    "operation input index": "mutateOperationInputOperandIndexTest",
    "operation output index": "mutateOperationOutputOperandIndexTest",
    "operation remove write": "mutateOperationRemoveWriteTest",
    "remove operand": "removeOperandTest",
    "remove operand (VTS indexes)": "removeOperandTest(VTS indexes)",
    "remove operation": "removeOperationTest",
    "remove operation input": "removeOperationInputTest",
    "remove operation output": "removeOperationOutputTest",
    "add operation input": "addOperationInputTest",
    "add operation output": "addOperationOutputTest",
    "execution preference": "mutateExecutionPreferenceTest",
    "priority": "mutateExecutionPriorityTest",
}


def model_id(vm: VectorModel) -> str:
    return f"{vm.spec}/{vm.name}"


def run_model(device: Any, vm: VectorModel, sample: Optional[int] = None,
              kinds: Optional[Sequence[str]] = None) -> list[Case]:
    """The cases of one base model: every mutation (or ``sample`` of them,
    spread evenly) the VTS of the device's face makes, each judged by :func:`judge`."""
    face = as_face(device)
    model = vm.build_model()
    rec = Recorder(SECTION, model_id(vm))
    try:
        # NOTE: a sample of one is the first mutation (sample_indexes): the others need not be planned
        planned = list(itertools.islice(iter_plan(model, face.name, kinds), 1 if sample == 1 else None))
        for k in sample_indexes(len(planned), sample):
            p = planned[k]
            test = "ValidationTest." + VTS_TESTS[p.kind]
            rec.check(test, p.what, "INVALID_ARGUMENT", lambda p=p: judge(face, p.make(model)))
    finally:
        for pool in model.pools:
            hal_memory.free(pool)
    return rec.cases


# --------------------------------------------------------------------------
# the inherited 1.2 entry points (the 1.2 VTS binary against this driver)

V1_2 = hal.v1_2


def as_v1_2(model: hal.Model) -> V1_2.Model:
    """The main subgraph as a 1.2 model, field for field, whatever the values
    (a mutated model may hold types or lifetimes 1.2 does not know)."""
    m = model.main
    return V1_2.Model(
        operands=[V1_2.Operand(type=o.type, dimensions=o.dimensions, numberOfConsumers=o.numberOfConsumers,
                               scale=o.scale, zeroPoint=o.zeroPoint, lifetime=o.lifetime, location=o.location,
                               extraParams=o.extraParams) for o in m.operands],
        operations=[V1_2.Operation(type=op.type, inputs=op.inputs, outputs=op.outputs) for op in m.operations],
        inputIndexes=m.inputIndexes, outputIndexes=m.outputIndexes, operandValues=model.operandValues,
        pools=model.pools, relaxComputationFloat32toFloat16=model.relaxComputationFloat32toFloat16,
        extensionNameToPrefix=model.extensionNameToPrefix)


def mutations_v1_2(model: hal.Model) -> Iterator[Mutation]:
    """What the 1.2 VTS mutates: the 1.3 mutations but priorities, plus the
    types that 1.3 added (out of range for 1.2)."""
    for m in mutations(model):
        if m.kind != "priority":
            yield m
    added_operand_types = (int(T.TENSOR_QUANT8_ASYMM_SIGNED), int(T.SUBGRAPH))  # 1.2 FUNDAMENTAL_MAX + 1, + 2
    for i in range(len(model.main.operands)):
        for t in added_operand_types:
            m = copy_model(model)
            m.main.operands[i].type = t
            yield Mutation("operand type (1.2)", f"operand {i} type {t}", m)
    for k in range(len(model.main.operations)):
        for t in range(int(V1_2.OperationTypeRange.FUNDAMENTAL_MAX) + 1, int(hal.OperationTypeRange.FUNDAMENTAL_MAX) + 1):
            m = copy_model(model)
            m.main.operations[k].type = t
            yield Mutation("operation type (1.2)", f"operation {k} type {t}", m)


def rejection_problem_v1_2(device: hal.IDevice, m: Mutation) -> Optional[str]:
    model = as_v1_2(m.model)
    if m.preference in hal.ExecutionPreference._value2member_map_:
        status, _ = device.getSupportedOperations_1_2(model)
        if status != hal.v1_0.ErrorStatus.INVALID_ARGUMENT:
            return f"getSupportedOperations_1_2 returned {status!r}"
    cb = hal.PreparedModelCallback()
    launch = device.prepareModel_1_2(model, m.preference, [], [], bytes(32), cb)
    status, prepared = cb.wait(60)
    if launch != S.INVALID_ARGUMENT or status != S.INVALID_ARGUMENT or prepared is not None:
        return f"prepareModel_1_2 gave {launch!r} at launch, {status!r} and {prepared} in the callback"
    return None

