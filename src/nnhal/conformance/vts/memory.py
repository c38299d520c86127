"""Section "memory": memory domains as the ``MemoryDomainTests.cpp`` of VTS
1.3 and of the AIDL VTS check them, through the face judged, for
TENSOR_FLOAT32, FLOAT16, QUANT8_ASYMM and QUANT8_ASYMM_SIGNED operands of
shape [1, 32, 32, 8].

``IDevice.allocate`` must refuse (INVALID_ARGUMENT or GENERAL_FAILURE, no
buffer, token 0; AIDL: either raised) what VTS's ``MemoryDomainAllocateTest``
gives it; ``IBuffer.copyFrom`` / ``copyTo`` must answer the statuses of
``MemoryDomainCopyTest``; executions with bad device-memory pools must
answer those of ``MemoryDomainExecutionTest``, through async, sync and
fenced (VTS 1.3) or sync, a burst and fenced (AIDL).
A driver without memory domains answers GENERAL_FAILURE to ``allocate``:
VTS then skips the copy and execution tests, reported here as unsupported
(as are the tests of a model the driver does not prepare).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np

from nnhal import hal
from nnhal.conformance.face import Face, as_face
from nnhal.conformance.vts.case import Case, Recorder, name
from nnhal.platform import memory as hal_memory

SECTION = "memory"
S = hal.ErrorStatus
T = hal.OperandType
L = hal.OperandLifeTime
OT = hal.OperationType
DIMS = [1, 32, 32, 8]
TYPES = {  # VTS's kTestOperandMap: (scale, itemsize)
    T.TENSOR_FLOAT32: (0.0, 4), T.TENSOR_FLOAT16: (0.0, 2),
    T.TENSOR_QUANT8_ASYMM: (0.5, 1), T.TENSOR_QUANT8_ASYMM_SIGNED: (0.5, 1)}
CONFLICT_TYPE = {T.TENSOR_FLOAT32: T.TENSOR_FLOAT16, T.TENSOR_FLOAT16: T.TENSOR_FLOAT32,
                 T.TENSOR_QUANT8_ASYMM: T.TENSOR_QUANT8_ASYMM_SIGNED,
                 T.TENSOR_QUANT8_ASYMM_SIGNED: T.TENSOR_QUANT8_ASYMM}
REFUSED = "INVALID_ARGUMENT or GENERAL_FAILURE, no buffer, token 0"
EXECUTORS = {"hidl": ("ASYNC", "SYNC", "FENCED"), "aidl": ("SYNC", "BURST", "FENCED")}  # per face, as each VTS


def _is_float(t: T) -> bool:
    return t in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)


def _size(t: T, dims: Sequence[int] = DIMS) -> int:
    return int(np.prod(dims)) * TYPES[t][1]


class Operand:
    def __init__(self, t: T, dims: Sequence[int] = DIMS, scale: Optional[float] = None, zero_point: int = 0):
        self.type, self.dims = t, list(dims)
        self.scale = TYPES[t][0] if scale is None else scale
        self.zero_point = zero_point

    def hal(self, lifetime: L, consumers: int) -> hal.Operand:
        return hal.Operand(type=self.type, dimensions=list(self.dims), numberOfConsumers=consumers, scale=self.scale,
                           zeroPoint=self.zero_point, lifetime=lifetime)


def _int32(values: bytearray, v: int) -> hal.Operand:
    off = len(values)
    values += int(v).to_bytes(4, "little", signed=True)
    return hal.Operand(type=T.INT32, numberOfConsumers=1, lifetime=L.CONSTANT_COPY,
                       location=hal.DataLocation(0, off, 4))


def _const(values: bytearray, t: T, dims: list[int], scale: float) -> hal.Operand:
    size = _size(t, dims) if t in TYPES else int(np.prod(dims)) * 4
    off = (len(values) + 3) // 4 * 4
    values += bytes(off - len(values) + size)
    return hal.Operand(type=t, dimensions=dims, numberOfConsumers=1, scale=scale, lifetime=L.CONSTANT_COPY,
                       location=hal.DataLocation(0, off, size))


def conv_model(o: Operand, n: int = 1) -> hal.Model:
    """VTS's createConvModel: ``n`` independent CONV_2Ds (3x3, SAME, stride 1),
    each reading one input of ``o``'s type and shape and writing one output."""
    values = bytearray()
    operands: list[hal.Operand] = []
    ops: list[hal.Operation] = []
    ins: list[int] = []
    outs: list[int] = []
    channels = o.dims[3]
    w_scale = 0.0 if _is_float(o.type) else 1.0
    for _ in range(n):
        base = len(operands)
        operands.append(o.hal(L.SUBGRAPH_INPUT, 1))
        operands.append(_const(values, o.type, [channels, 3, 3, channels], w_scale))
        bias_type = o.type if _is_float(o.type) else T.TENSOR_INT32
        operands.append(_const(values, bias_type, [channels], o.scale * w_scale))
        operands += [_int32(values, v) for v in (1, 1, 1, 0)]  # SAME padding, strides 1, 1, no activation
        operands.append(o.hal(L.SUBGRAPH_OUTPUT, 0))
        ops.append(hal.Operation(OT.CONV_2D, list(range(base, base + 7)), [base + 7]))
        ins.append(base)
        outs.append(base + 7)
    return hal.Model(main=hal.Subgraph(operands, ops, ins, outs), operandValues=bytes(values))


def add_model(o: Operand) -> hal.Model:
    """VTS's createSingleAddModel: out = ADD(in0, in1, act), act an INT32 input."""
    operands = [o.hal(L.SUBGRAPH_INPUT, 1), o.hal(L.SUBGRAPH_INPUT, 1),
                hal.Operand(type=T.INT32, numberOfConsumers=1, lifetime=L.SUBGRAPH_INPUT), o.hal(L.SUBGRAPH_OUTPUT, 0)]
    return hal.Model(main=hal.Subgraph(operands, [hal.Operation(OT.ADD, [0, 1, 2], [3])], [0, 1, 2], [3]))


def role(io: int = 0, model: int = 0, frequency: float = 1.0) -> hal.BufferRole:
    return hal.BufferRole(modelIndex=model, ioIndex=io, frequency=frequency)


class _Skip(Exception):
    """The device did not prepare a model or allocate a buffer a test needs."""


class Tests:
    """Every memory-domain case of one operand type."""

    def __init__(self, face: Face, t: T, rec: Recorder):
        self.face, self.t, self.rec = face, t, rec
        self.operand = Operand(t)
        self.size = _size(t)
        self._prepared: dict[Any, Any] = {}
        self._memories: list[hal.Memory] = []

    # -- helpers
    def prepared(self, kind: str, o: Operand, n: int = 1) -> Any:
        key = (kind, o.type, tuple(o.dims), o.scale, o.zero_point, n)
        if key not in self._prepared:
            model = conv_model(o, n) if kind == "conv" else add_model(o)
            status, supported, _ = self.face.supported(model)
            if status != S.NONE or not all(supported):
                refused = ", ".join(f"operation {k} {OT(op.type).name}" for k, (op, ok) in
                                    enumerate(zip(model.main.operations, supported)) if not ok)
                why = f"getSupportedOperations{self.face.method_suffix} gave {name(status)}" if status != S.NONE \
                    else f"{refused} refused"
                self._prepared[key] = f"the device does not support VTS's {kind.upper()} model ({why})"
            else:
                _, status, pm = self.face.prepare(model)
                self._prepared[key] = pm if status == S.NONE and pm is not None else \
                    f"the {kind.upper()} model did not prepare ({name(status)})"
        pm = self._prepared[key]
        if isinstance(pm, str):
            raise _Skip(pm)
        return pm

    def conv(self, o: Optional[Operand] = None, n: int = 1) -> Any:
        return self.prepared("conv", o or self.operand, n)

    def shared(self, size: int) -> hal.Memory:
        m = hal_memory.allocate(size)
        self._memories.append(m)
        return m

    def allocate_buffer(self, pm: Any, ins: Sequence[int], outs: Sequence[int], dims: Sequence[int] = ()) -> tuple:
        """VTS's allocateBuffer: NONE with a buffer and a token > 0, or
        GENERAL_FAILURE (memory domains not supported: the test is skipped)."""
        status, buf, token = self.face.allocate(dims, [pm], [role(i) for i in ins], [role(i) for i in outs])
        if status == S.NONE and buf is not None and isinstance(token, int) and token > 0:
            return buf, token
        if status == S.GENERAL_FAILURE and buf is None and token == 0:
            raise _Skip("allocate answered GENERAL_FAILURE (no memory domains)")
        raise AssertionError(f"allocate gave {name(status)}, buffer {buf!r}, token {token!r}: VTS wants NONE with a "
                             "buffer and a token, or GENERAL_FAILURE with neither")

    def initialize(self, buf: Any) -> None:
        status = self.face.copy_from(buf, self.shared(self.size), DIMS)
        if status != S.NONE:
            raise AssertionError(f"copyFrom to initialize the buffer gave {name(status)}")

    # -- running one test
    def test(self, test: str, body: Callable[[Callable[..., None]], None], param: str = "") -> None:
        """Runs ``body(check)``: each ``check(what, expected, actual_fn)`` is a case."""
        model = self.t.name + (f"_{param}" if param else "")
        full = f"{test.split('.')[0]}.{test.split('.')[1]}"
        start = len(self.rec.cases)

        def check(what: str, expected: str, run: Callable[[], tuple[str, str]]) -> None:
            self.rec.check(full, what, expected, run, model=model)

        try:
            body(check)
        except _Skip as e:
            self.rec.unsupported(full, "", "", str(e), model=model)
        except Exception as e:  # noqa: BLE001 - a driver that raises (or breaks a set-up rule) fails the test
            self.rec.add(full, "set-up", "", "raised", False, f"{type(e).__name__}: {e}", model=model)
        if len(self.rec.cases) == start:
            self.rec.add(full, "", "", "", True, model=model)

    def refused(self, desc_dims: Sequence[int], pms: list, ins: list, outs: list) -> tuple[str, str]:
        status, buf, token = self.face.allocate(desc_dims, pms, ins, outs)
        if status not in (S.INVALID_ARGUMENT, S.GENERAL_FAILURE) or buf is not None or token != 0:
            return name(status), f"allocate gave {name(status)}, buffer {buf!r}, token {token!r}"
        return name(status), ""

    def close(self) -> None:
        for m in self._memories:
            hal_memory.free(m)
        self._memories.clear()
        self._prepared.clear()


def _status(got: Any, expected: S, what: str) -> tuple[str, str]:
    return name(got), "" if got == expected else f"{what} gave {name(got)}, VTS wants {expected.name}"


# --------------------------------------------------------------------------
# MemoryDomainAllocateTest


def allocate_tests(x: Tests) -> None:
    T_ = "MemoryDomainAllocateTest"
    ref = x.refused

    def empty_role(check: Callable) -> None:
        check("no prepared models, no roles", REFUSED, lambda: ref([], [], [], []))
        pm = x.conv()
        check("a prepared model, no roles", REFUSED, lambda: ref([], [pm], [], []))

    def nullptr(check: Callable) -> None:
        check("null prepared model, input role", REFUSED, lambda: ref([], [None], [role()], []))
        check("null prepared model, output role", REFUSED, lambda: ref([], [None], [], [role()]))

    def invalid_pm(check: Callable) -> None:
        bad = x.face.foreign_prepared_model()
        check("foreign prepared model, input role", REFUSED, lambda: ref([], [bad], [role()], []))
        check("foreign prepared model, output role", REFUSED, lambda: ref([], [bad], [], [role()]))

    def index(field: str) -> Callable:
        def body(check: Callable) -> None:
            pm = x.conv()
            r = role(model=1) if field == "model" else role(io=1)
            check(f"input role {field}Index 1", REFUSED, lambda: ref([], [pm], [r], []))
            check(f"output role {field}Index 1", REFUSED, lambda: ref([], [pm], [], [r]))
        return body

    def frequency(check: Callable) -> None:
        pm = x.conv()
        for f in (10.0, 0.0, -0.5):
            check(f"input role frequency {f}", REFUSED, lambda f=f: ref([], [pm], [role(frequency=f)], []))
            check(f"output role frequency {f}", REFUSED, lambda f=f: ref([], [pm], [], [role(frequency=f)]))

    def twice(check: Callable) -> None:
        pm = x.conv()
        check("same input role twice", REFUSED, lambda: ref([], [pm], [role(), role()], []))
        check("same output role twice", REFUSED, lambda: ref([], [pm], [], [role(), role()]))
        check("same input role through two model indexes", REFUSED,
              lambda: ref([], [pm, pm], [role(), role(model=1)], []))
        check("same output role through two model indexes", REFUSED,
              lambda: ref([], [pm, pm], [], [role(), role(model=1)]))

    def conflict(other: Callable[[], Operand], kind: str = "conv", skip_float: bool = False) -> Callable:
        def body(check: Callable) -> None:
            if skip_float and _is_float(x.t):
                return
            pm = x.prepared(kind, x.operand)
            pm2 = x.prepared(kind, other())
            check("input roles of both models", REFUSED, lambda: ref([], [pm, pm2], [role(), role(model=1)], []))
            check("input role of one, output role of the other", REFUSED,
                  lambda: ref([], [pm, pm2], [role()], [role(model=1)]))
            check("output roles of both models", REFUSED, lambda: ref([], [pm, pm2], [], [role(), role(model=1)]))
        return body

    def with_desc(dims: list[int]) -> Callable:
        def body(check: Callable) -> None:
            pm = x.conv()
            check(f"descriptor dimensions {dims}, input role", REFUSED, lambda: ref(dims, [pm], [role()], []))
            check(f"descriptor dimensions {dims}, output role", REFUSED, lambda: ref(dims, [pm], [], [role()]))
        return body

    def scalar_role(check: Callable) -> None:
        pm = x.prepared("add", x.operand)
        check("descriptor dimensions [1] for the INT32 scalar input 2", REFUSED,
              lambda: ref([1], [pm], [role(io=2)], []))

    t, o = x.t, x.operand
    tests = [("EmptyRole", empty_role), ("NullptrPreparedModel", nullptr), ("InvalidPreparedModel", invalid_pm),
             ("InvalidModelIndex", index("model")), ("InvalidIOIndex", index("io")),
             ("InvalidFrequency", frequency), ("SameRoleSpecifiedTwice", twice),
             ("ConflictOperandType", conflict(lambda: Operand(CONFLICT_TYPE[t]))),
             ("ConflictScale", conflict(lambda: Operand(t, scale=1.0), skip_float=True)),
             ("ConflictZeroPoint", conflict(lambda: Operand(t, zero_point=10), skip_float=True)),
             ("ConflictRankBetweenRoles", conflict(lambda: Operand(t, DIMS[:-1], o.scale), kind="add")),
             ("ConflictDimensionsBetweenRoles", conflict(lambda: Operand(t, [4] + DIMS[1:], o.scale))),
             ("ConflictRankBetweenRoleAndDesc", with_desc(DIMS[:-1])),
             ("ConflictDimensionsBetweenRoleAndDesc", with_desc([4] + DIMS[1:])),
             ("ConflictRankWithScalarRole", scalar_role)]
    for test, body in tests:
        x.test(f"{T_}.{test}", body)


# --------------------------------------------------------------------------
# MemoryDomainCopyTest


def copy_tests(x: Tests) -> None:
    T_ = "MemoryDomainCopyTest"
    size = x.size
    dynamic = Operand(x.t, [0] + DIMS[1:])

    def copy_from(buf: Any, mem: hal.Memory, dims: list[int], expected: S) -> Callable[[], tuple[str, str]]:
        return lambda: _status(x.face.copy_from(buf, mem, dims), expected, f"copyFrom({mem.size} bytes, {dims})")

    def copy_to(buf: Any, mem: hal.Memory, expected: S) -> Callable[[], tuple[str, str]]:
        return lambda: _status(x.face.copy_to(buf, mem), expected, f"copyTo({mem.size} bytes)")

    def from_size(o: Optional[Operand]) -> Callable:
        def body(check: Callable) -> None:
            buf, _ = x.allocate_buffer(x.conv(o), [0], [0])
            dims = [] if o is None else list(DIMS)
            for bad in (size // 2, size * 2):
                check(f"copyFrom {bad} bytes, dimensions {dims}", "INVALID_ARGUMENT",
                      copy_from(buf, x.shared(bad), dims, S.INVALID_ARGUMENT))
            if o is not None:
                good = x.shared(size)
                check(f"copyFrom {size} bytes, dimensions {DIMS}", "NONE", copy_from(buf, good, list(DIMS), S.NONE))
                bad_dims = [2] + DIMS[1:]
                check(f"copyFrom {size} bytes, dimensions {bad_dims}", "INVALID_ARGUMENT",
                      copy_from(buf, good, bad_dims, S.INVALID_ARGUMENT))
        return body

    def from_dims(o: Optional[Operand]) -> Callable:
        def body(check: Callable) -> None:
            buf, _ = x.allocate_buffer(x.conv(o), [0], [0])
            mem = x.shared(size)
            if o is None:
                bads = [DIMS[:-1], [2] + DIMS[1:], [0] + DIMS[1:]]
                goods = [([], S.NONE), (list(DIMS), S.NONE)]
            else:
                bads = [DIMS[:-1], [2, 32, 32, 4], [1, 32, 32, 0]]
                goods = [([], S.INVALID_ARGUMENT), (list(DIMS), S.NONE)]
            for dims in bads:
                check(f"copyFrom dimensions {dims}", "INVALID_ARGUMENT", copy_from(buf, mem, dims, S.INVALID_ARGUMENT))
            for dims, expected in goods:
                check(f"copyFrom dimensions {dims}", expected.name, copy_from(buf, mem, dims, expected))
        return body

    def to_uninitialized(check: Callable) -> None:
        buf, _ = x.allocate_buffer(x.conv(), [0], [0])
        check("copyTo from an uninitialized buffer", "GENERAL_FAILURE",
              copy_to(buf, x.shared(size), S.GENERAL_FAILURE))

    def to_size(o: Optional[Operand]) -> Callable:
        def body(check: Callable) -> None:
            buf, _ = x.allocate_buffer(x.conv(o), [0], [0])
            x.initialize(buf)
            for bad in (size // 2, size * 2):
                check(f"copyTo {bad} bytes", "INVALID_ARGUMENT", copy_to(buf, x.shared(bad), S.INVALID_ARGUMENT))
            check(f"copyTo {size} bytes", "NONE", copy_to(buf, x.shared(size), S.NONE))
        return body

    for test, body in (("CopyFrom_InvalidMemorySize", from_size(None)),
                       ("CopyFrom_InvalidMemorySize_DynamicShape", from_size(dynamic)),
                       ("CopyFrom_InvalidDimensions", from_dims(None)),
                       ("CopyFrom_InvalidDimensions_DynamicShape", from_dims(dynamic)),
                       ("CopyTo_UninitializedMemory", to_uninitialized),
                       ("CopyTo_InvalidMemorySize", to_size(None)),
                       ("CopyTo_InvalidMemorySize_DynamicShape", to_size(dynamic))):
        x.test(f"{T_}.{test}", body)


# --------------------------------------------------------------------------
# MemoryDomainExecutionTest


def _arg(pool: int, length: int = 0, dims: Sequence[int] = ()) -> hal.RequestArgument:
    return hal.RequestArgument(location=hal.DataLocation(pool, 0, length), dimensions=list(dims))


def execute(face: Face, pm: Any, request: hal.Request, executor: str) -> tuple[S, str]:
    """(status, a rule broken on the way or "") through one executor, timing NO, as VTS's testExecution (a
    fenced execution runs once)."""
    status, shapes, timing, launch = face.execute(pm, face.request(request), executor.lower(), False, chain=False)
    if launch is not None and launch != S.NONE and launch != status:
        return launch, f"launch gave {name(launch)} but the callback {name(status)}"
    if timing != hal.Timing():
        return status, f"timing {timing} with MeasureTiming.NO"
    if status != S.NONE and shapes:
        return status, f"{name(status)} with {len(shapes)} output shapes"
    return status, ""


def execution_tests(x: Tests, executor: str) -> None:
    T_ = "MemoryDomainExecutionTest"
    size = x.size

    def run(pm: Any, ins: list, outs: list, pools: list, expected: S) -> Callable[[], tuple[str, str]]:
        request = hal.Request(inputs=ins, outputs=outs, pools=[
            hal.MemoryPool(token=p) if isinstance(p, int) else hal.MemoryPool(hidlMemory=p) for p in pools])

        def judge() -> tuple[str, str]:
            status, broken = execute(x.face, pm, request, executor)
            if broken:
                return name(status), broken
            return _status(status, expected, executor.lower())
        return judge

    def invalid_token(check: Callable) -> None:
        pm = x.conv()
        mem = x.shared(size)
        for token in (0, 100):
            check(f"input in device memory of token {token}", "INVALID_ARGUMENT",
                  run(pm, [_arg(1)], [_arg(0, size)], [mem, token], S.INVALID_ARGUMENT))
            check(f"output in device memory of token {token}", "INVALID_ARGUMENT",
                  run(pm, [_arg(0, size)], [_arg(1)], [mem, token], S.INVALID_ARGUMENT))

    def invalid_pm(check: Callable) -> None:
        pm = x.conv()
        buf, token = x.allocate_buffer(pm, [0], [0])
        other = _prepare_again(x)
        mem = x.shared(size)
        x.initialize(buf)
        check("input buffer of another prepared model", "INVALID_ARGUMENT",
              run(other, [_arg(1)], [_arg(0, size)], [mem, token], S.INVALID_ARGUMENT))
        check("output buffer of another prepared model", "INVALID_ARGUMENT",
              run(other, [_arg(0, size)], [_arg(1)], [mem, token], S.INVALID_ARGUMENT))

    def invalid_io(check: Callable) -> None:
        pm = x.conv(n=2)
        buf, token = x.allocate_buffer(pm, [0], [])
        m1, m2, m3 = x.shared(size), x.shared(size), x.shared(size)
        x.initialize(buf)
        check("buffer of input 0 given as input 1", "INVALID_ARGUMENT",
              run(pm, [_arg(0, size), _arg(3)], [_arg(1, size), _arg(2, size)], [m1, m2, m3, token],
                  S.INVALID_ARGUMENT))
        check("buffer of input 0 given as output 1", "INVALID_ARGUMENT",
              run(pm, [_arg(0, size), _arg(1, size)], [_arg(2, size), _arg(3)], [m1, m2, m3, token],
                  S.INVALID_ARGUMENT))

    def invalid_io_type(check: Callable) -> None:
        pm = x.conv()
        in_buf, in_token = x.allocate_buffer(pm, [0], [])
        out_buf, out_token = x.allocate_buffer(pm, [], [0])
        mem = x.shared(size)
        check("input buffer used as output", "INVALID_ARGUMENT",
              run(pm, [_arg(0, size)], [_arg(1)], [mem, in_token], S.INVALID_ARGUMENT))
        x.initialize(out_buf)
        check("output buffer used as input", "INVALID_ARGUMENT",
              run(pm, [_arg(1)], [_arg(0, size)], [mem, out_token], S.INVALID_ARGUMENT))

    def uninitialized(check: Callable) -> None:
        pm = x.conv()
        buf, token = x.allocate_buffer(pm, [0], [0])
        mem = x.shared(size)
        check("uninitialized buffer as input", "GENERAL_FAILURE",
              run(pm, [_arg(1)], [_arg(0, size)], [mem, token], S.GENERAL_FAILURE))
        check("buffer written as output", "NONE", run(pm, [_arg(0, size)], [_arg(1)], [mem, token], S.NONE))
        check("the written buffer as input", "NONE", run(pm, [_arg(1)], [_arg(0, size)], [mem, token], S.NONE))

    def multiple_roles(check: Callable) -> None:
        pm = x.conv(n=2)
        buf, token = x.allocate_buffer(pm, [0, 1], [0, 1])
        m1, m2 = x.shared(size), x.shared(size)
        x.initialize(buf)
        check("the same buffer as input and output", "INVALID_ARGUMENT",
              run(pm, [_arg(2), _arg(0, size)], [_arg(2), _arg(1, size)], [m1, m2, token], S.INVALID_ARGUMENT))
        check("the same buffer as two outputs", "INVALID_ARGUMENT",
              run(pm, [_arg(0, size), _arg(1, size)], [_arg(2), _arg(2)], [m1, m2, token], S.INVALID_ARGUMENT))
        check("the same buffer as two inputs", "NONE",
              lambda: (x.initialize(buf), run(pm, [_arg(2), _arg(2)], [_arg(0, size), _arg(1, size)],
                                              [m1, m2, token], S.NONE)())[1])

    def invalid_dims(check: Callable) -> None:
        if executor == "FENCED":
            return  # NOTE: as VTS: fenced execution takes no dynamic shapes
        pm = x.conv(Operand(x.t, [0] + DIMS[1:]))
        buf, token = x.allocate_buffer(pm, [0], [0], DIMS)
        bad = [2] + DIMS[1:]
        mem = x.shared(size * 2)
        x.initialize(buf)
        check(f"device input with dimensions {bad}", "INVALID_ARGUMENT",
              run(pm, [_arg(1, 0, bad)], [_arg(0, size * 2, bad)], [mem, token], S.INVALID_ARGUMENT))
        check(f"device output with dimensions {bad}", "INVALID_ARGUMENT",
              run(pm, [_arg(0, size * 2, bad)], [_arg(1, 0, bad)], [mem, token], S.INVALID_ARGUMENT))
        check(f"input of {bad} into a device output of {DIMS}", "GENERAL_FAILURE",
              run(pm, [_arg(0, size * 2, bad)], [_arg(1)], [mem, token], S.GENERAL_FAILURE))

    for test, body in (("InvalidToken", invalid_token), ("InvalidPreparedModel", invalid_pm),
                       ("InvalidIOIndex", invalid_io), ("InvalidIOType", invalid_io_type),
                       ("UninitializedMemory", uninitialized), ("SameRequestMultipleRoles", multiple_roles),
                       ("InvalidDimensions", invalid_dims)):
        x.test(f"{T_}.{test}", body, param=executor)


def _prepare_again(x: Tests) -> Any:
    """A second preparation of the same CONV model: another prepared model."""
    _, status, pm = x.face.prepare(conv_model(x.operand))
    if status != S.NONE or pm is None:
        raise _Skip(f"the CONV model did not prepare again ({name(status)})")
    return pm


PARTS = ("allocate", "copy", "execution")


def run(device: Any, types: Sequence[T] = tuple(TYPES)) -> list[Case]:
    face = as_face(device)
    rec = Recorder(SECTION)
    for t in types:
        x = Tests(face, t, rec)
        try:
            allocate_tests(x)
            copy_tests(x)
            for executor in EXECUTORS[face.name]:
                execution_tests(x, executor)
        finally:
            x.close()
            face.close_bursts()
    return rec.cases
