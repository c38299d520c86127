"""An NNAPI partition's HAL model at the HAL version its API level gives
(27: 1.0, 28: 1.1, 29: 1.2, 30: 1.3, then AIDL 1-4 for feature levels 5-8:
:mod:`nnhal.delegate.levels`), as the delegate builds it:

- before API 30 signed int8 tensors are not NNAPI types: every
  TENSOR_QUANT8_ASYMM_SIGNED operand becomes TENSOR_QUANT8_ASYMM with its
  zero point and constant values moved by 128 (the delegate's
  ``NN_TENSOR_FLAG_INT8_CONVERSION``); the partition's int8 inputs and outputs
  are moved by 128 on the way in and out (:class:`Int8Boundary`);
- before API 30 a float HARD_SWISH is its decomposition
  ``0.5x * RELU1(x/3) + 0.5x`` (``TransformHardSwishIntoSupportedOps``);
- an operation that still has no form at that HAL version is named by
  :func:`noncompliant` (its TFLite operator then stays on the CPU).

:func:`prepare` prepares a model through the device's face at the
partition's version (:mod:`nnhal.runtime.face`: HIDL ``prepareModel``,
``_1_1``, ``_1_2``, ``_1_3``, or the AIDL ``IDevice.prepareModel`` of that
interface version), :func:`supported` asks the same face which operations it
takes.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from nnhal import hal
from nnhal.engine.validation import ValidationError, validate_operation
from nnhal.hal.types import HalVersion
from nnhal.platform import memory as hal_memory
from nnhal.runtime.face import Face, Prepared

T, L, Op = hal.OperandType, hal.OperandLifeTime, hal.OperationType
_DTYPES = {T.TENSOR_FLOAT32: np.float32, T.TENSOR_FLOAT16: np.float16, T.TENSOR_INT32: np.int32,
           T.TENSOR_QUANT8_ASYMM: np.uint8, T.TENSOR_QUANT8_ASYMM_SIGNED: np.int8, T.TENSOR_BOOL8: np.bool_,
           T.TENSOR_QUANT16_SYMM: np.int16, T.TENSOR_QUANT8_SYMM: np.int8, T.TENSOR_QUANT16_ASYMM: np.uint16}
_PREFERENCE = {"low_power": hal.ExecutionPreference.LOW_POWER,
               "fast_single_answer": hal.ExecutionPreference.FAST_SINGLE_ANSWER,
               "sustained_speed": hal.ExecutionPreference.SUSTAINED_SPEED}


class _Values:
    """A model's constants read back (operandValues and the pools), and a new set written."""

    def __init__(self, model: hal.Model):
        self.model = model
        self.views = [hal_memory.map(p) for p in model.pools]
        self.values = bytearray(model.operandValues)

    def read(self, o: hal.Operand) -> bytes:
        loc = o.location
        if o.lifetime == L.CONSTANT_COPY:
            return bytes(self.values[loc.offset: loc.offset + loc.length])
        return bytes(self.views[loc.poolIndex][loc.offset: loc.offset + loc.length])

    def write(self, o: hal.Operand, raw: bytes) -> None:
        loc = o.location
        if o.lifetime == L.CONSTANT_COPY:
            self.values[loc.offset: loc.offset + loc.length] = raw
        else:
            self.views[loc.poolIndex][loc.offset: loc.offset + loc.length] = raw

    def append(self, raw: bytes) -> hal.DataLocation:
        off = (len(self.values) + 3) // 4 * 4
        self.values.extend(b"\0" * (off - len(self.values)) + raw)
        return hal.DataLocation(poolIndex=0, offset=off, length=len(raw))

    def close(self) -> None:
        for v in self.views:
            v.release()
        self.model.operandValues = bytes(self.values)


def to_unsigned(model: hal.Model) -> bool:
    """Signed int8 operands of ``model`` as uint8 (zero point and values + 128), in place (the pools
    ``load_operators`` made for this model are its own); True when there were any."""
    vals = _Values(model)
    changed = False
    try:
        for sg in [model.main, *model.referenced]:
            moved = set()
            for idx, o in enumerate(sg.operands):
                if o.type != T.TENSOR_QUANT8_ASYMM_SIGNED:
                    continue
                o.type, o.zeroPoint = T.TENSOR_QUANT8_ASYMM, o.zeroPoint + 128
                moved.add(idx)
                changed = True
                if o.lifetime in (L.CONSTANT_COPY, L.CONSTANT_REFERENCE):
                    a = np.frombuffer(vals.read(o), np.int8)
                    vals.write(o, (a.astype(np.int16) + 128).astype(np.uint8).tobytes())
            for op in sg.operations:
                # NOTE: PAD_V2's pad value is a quantized value of the input's type
                if op.type == Op.PAD_V2 and op.inputs[0] in moved:
                    s = sg.operands[op.inputs[2]]
                    v = int(np.frombuffer(vals.read(s), np.int32)[0]) + 128
                    new = dataclasses.replace(s, location=vals.append(np.int32(v).tobytes()),
                                              lifetime=L.CONSTANT_COPY)
                    sg.operands.append(new)
                    op.inputs[2] = len(sg.operands) - 1
    finally:
        vals.close()
    return changed


def decompose_hard_swish(model: hal.Model, hal_to_tflite: list[int]) -> None:
    """Float HARD_SWISH operations of the main subgraph as MUL, MUL, MUL, ADD (in place)."""
    sg = model.main
    vals = _Values(model)
    try:
        ops: list[hal.Operation] = []
        owners: list[int] = []
        for op, owner in zip(sg.operations, hal_to_tflite):
            x = sg.operands[op.inputs[0]]
            if op.type != Op.HARD_SWISH or x.type != T.TENSOR_FLOAT32:
                ops.append(op)
                owners.append(owner)
                continue

            def const(v: float, t: T = T.TENSOR_FLOAT32) -> int:
                raw = np.asarray([v], np.float32 if t == T.TENSOR_FLOAT32 else np.int32).tobytes()
                sg.operands.append(hal.Operand(type=t, dimensions=[1] if t == T.TENSOR_FLOAT32 else [],
                                               numberOfConsumers=1, lifetime=L.CONSTANT_COPY,
                                               location=vals.append(raw)))
                return len(sg.operands) - 1

            def temp(consumers: int, dims: tuple = tuple(x.dimensions)) -> int:
                sg.operands.append(hal.Operand(type=T.TENSOR_FLOAT32, dimensions=list(dims),
                                               numberOfConsumers=consumers, lifetime=L.TEMPORARY_VARIABLE))
                return len(sg.operands) - 1

            s1, s2, s3 = temp(1), temp(2), temp(1)
            xi, y = op.inputs[0], op.outputs[0]
            x.numberOfConsumers += 1
            new = [hal.Operation(Op.MUL, [xi, const(1 / 3), const(2, T.INT32)], [s1]),  # RELU1 (code 2) of x / 3
                   hal.Operation(Op.MUL, [xi, const(0.5), const(0, T.INT32)], [s2]),
                   hal.Operation(Op.MUL, [s1, s2, const(0, T.INT32)], [s3]),
                   hal.Operation(Op.ADD, [s3, s2, const(0, T.INT32)], [y])]
            ops += new
            owners += [owner] * len(new)
        sg.operations = ops
        hal_to_tflite[:] = owners
    finally:
        vals.close()


def freeze_constants(model: hal.Model) -> None:
    """The model's pools (the shared memory ``load_operators`` made, rewritten by the functions above if at
    all) sealed read-only (``nnhal.platform.memory.freeze``), in place: no one can change or shrink them
    any more, so the driver maps them where it would copy a client's pool (the copy guards against a client
    that changes or shrinks its memory after handing it over)."""
    model.pools = [hal_memory.freeze(m) for m in model.pools]


def noncompliant(model: hal.Model, version: HalVersion) -> dict[int, str]:
    """Main-subgraph operations (index -> why) with no form at HAL ``version``."""
    out = {}
    for i, op in enumerate(model.main.operations):
        try:
            validate_operation(model, model.main, op, None, version)
        except ValidationError as e:
            out[i] = str(e)
    return out


def prepare(face: Face, model: hal.Model, preference: str = "fast_single_answer", relaxed: bool = False,
            cache: Optional[tuple] = None) -> Prepared:
    """The prepared model (raises RuntimeError with the status when the device refuses); ``cache``:
    (model cache descriptors, data cache descriptors, token) the driver saves into (HAL 1.2 on, AIDL)."""
    model.relaxComputationFloat32toFloat16 = bool(relaxed and face.version >= HalVersion.V1_1)
    mc, dc, token = cache if cache is not None else ([], [], bytes(32))
    status, prepared = face.prepare(model, _PREFERENCE[preference], hal.Priority.MEDIUM, None, mc, dc, token)
    if status != hal.ErrorStatus.NONE or prepared is None:
        raise RuntimeError(f"{face.method('prepareModel')}: {status.name}")
    return prepared


def supported(face: Face, model: hal.Model) -> Optional[list[bool]]:
    """The device's answer per main operation (the getSupportedOperations method of the face's
    version); None when it refuses the model as a whole."""
    status, ok, _ = face.supported(model)
    return list(ok) if status == hal.ErrorStatus.NONE else None


# HAL 1.2 added optional trailing inputs (NCHW layout, dilation, align_corners / half_pixel_centers);
# before 1.2 an operation is its shorter form: (inputs kept, the default each dropped input must hold)
_OLDER_FORMS: dict[Op, tuple[int, tuple]] = {
    Op.CONV_2D: (7, (False, 1, 1)),
    Op.DEPTHWISE_CONV_2D: (8, (False, 1, 1)),
    Op.AVERAGE_POOL_2D: (7, (False,)),
    Op.MAX_POOL_2D: (7, (False,)),
    Op.L2_POOL_2D: (7, (False,)),
    Op.RESIZE_BILINEAR: (3, (False, False, False)),
    Op.SPACE_TO_DEPTH: (2, (False,)),
    Op.DEPTH_TO_SPACE: (2, (False,)),
    Op.SPACE_TO_BATCH_ND: (3, (False,)),
    Op.BATCH_TO_SPACE_ND: (2, (False,)),
}


def older_forms(model: hal.Model) -> None:
    """Operations in their pre-1.2 forms where the dropped inputs hold their defaults (in place), as
    the delegate builds them for NNAPI 1.0 / 1.1 (the implicit-padding forms without layout)."""
    sg = model.main
    for op in sg.operations:
        form = _OLDER_FORMS.get(op.type)
        if form is None or len(op.inputs) <= form[0]:
            continue
        keep, defaults = form
        extra = op.inputs[keep:]
        values = []
        for i in extra:
            o = sg.operands[i]
            if o.lifetime != L.CONSTANT_COPY:
                break
            raw = model.operandValues[o.location.offset: o.location.offset + o.location.length]
            values.append(bool(raw[0]) if o.type == T.BOOL else int(np.frombuffer(raw, np.int32)[0]))
        if len(values) != len(extra) or any(v != d for v, d in zip(values, defaults)):
            continue
        for i in extra:
            sg.operands[i].numberOfConsumers -= 1
        op.inputs = op.inputs[:keep]


def compact(model: hal.Model) -> None:
    """Drops main-subgraph operands no operation or model input / output refers to (in place), e.g.
    the inputs :func:`older_forms` dropped: they would carry a newer type into an older HAL version."""
    sg = model.main
    used = set(sg.inputIndexes) | set(sg.outputIndexes)
    for op in sg.operations:
        used.update(op.inputs)
        used.update(op.outputs)
    if len(used) == len(sg.operands):
        return
    keep = sorted(used)
    new = {old: n for n, old in enumerate(keep)}
    sg.operands = [sg.operands[i] for i in keep]
    for op in sg.operations:
        op.inputs = [new[i] for i in op.inputs]
        op.outputs = [new[i] for i in op.outputs]
    sg.inputIndexes = [new[i] for i in sg.inputIndexes]
    sg.outputIndexes = [new[i] for i in sg.outputIndexes]


def dtype_of(operand_type: int) -> Optional[np.dtype]:
    """The numpy dtype of a HAL tensor operand type (None for others)."""
    t = _DTYPES.get(operand_type)
    return np.dtype(t) if t is not None else None
