"""The conformance runner: prepares and runs the vector models on any
device through the public HAL API of one of its faces
(:mod:`nnhal.conformance.face`: HAL 1.3, or the stable AIDL), the way
Android's ``GeneratedTestHarness`` of that interface does, and judges the
results.  One runner for both faces: what differs (preparing, executing in
each executor, reading an error status) is the face's.

Executors (``modes``; the face's, see :mod:`nnhal.conformance.face`): HIDL
``sync``, ``async``, ``burst``, ``fenced``; AIDL ``sync``, ``burst``,
``fenced``, ``reusable``, ``reusable-fenced`` (version 4: run twice on the
same ``IExecution``, as VTS does), and the version-4 ``*-config`` calls.
Timing NO and YES are asked alternately.  The 1.2 burst has no loop
timeout, so the infinite loop ends by the default 2 s one there (VTS does
not run that test through the HIDL burst).  Fenced execution needs fully
specified, non-zero sized outputs: for a zero-sized output and in the
dynamic variant the driver must answer INVALID_ARGUMENT
(GeneratedTestHarness.cpp).

Variants per model (VTS.md section 3):
  * ``dynamic``: output dimensions set to 0 (rank kept); the driver must
    return NONE and the real shapes; then output 0 one byte short (the AIDL
    request gives that byte to its padding, as VTS) must give
    OUTPUT_INSUFFICIENT_SIZE with ``isSufficient`` false for output 0 only;
  * ``signed``: models with TENSOR_QUANT8_ASYMM operands converted to
    QUANT8_ASYMM_SIGNED (zeroPoint - 128, data - 128).

Request memory (``memory``): ashmem, mmap_fd or hardware_buffer_blob pools,
or ``device``: every input and output in its own driver-allocated buffer, as
VTS's memory-domain runs (:class:`DevicePools`).  With device memory the
dynamic variant checks that buffers of unknown shape take the real output
shapes; its one-byte-short check does not apply (a device buffer has no
length to shorten).  The pools are laid out as the face's VTS does: HIDL
arguments 4-byte aligned; AIDL 64-byte aligned, each padded to 64 bytes
(``nn::kDefaultRequestMemoryAlignment`` / ``Padding``).
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import numpy as np

from nnhal import hal
from nnhal.conformance import logs
from nnhal.conformance.compare import compare
from nnhal.conformance.face import FENCED_MODES, HIDL_MODES, REUSABLE_MODES, Face, Outcome, as_face
from nnhal.conformance.vectors import VectorModel, VectorOperand
from nnhal.platform import memory as hal_memory

S = hal.ErrorStatus
T = hal.OperandType

MODES = HIDL_MODES  # NOTE: VTS 1.3 runs all four executors
BASIC_MODES = ("sync", "async")
VARIANTS = ("plain", "dynamic", "signed")


@dataclass
class CaseResult:
    spec: str
    model: str
    ops: list[str]
    mode: str
    variant: str
    status: str  # "pass", "fail", "unsupported", "skip"
    message: str = ""
    seconds: float = 0.0
    max_error: float = 0.0
    dtype: str = ""  # the data type the model tests (VectorModel.data_type: float32, relaxed, quant8 asymm...)


@dataclass
class Report:
    cases: list[CaseResult] = field(default_factory=list)
    seconds: float = 0.0

    def counts(self) -> dict[str, int]:
        c: dict[str, int] = {"pass": 0, "fail": 0, "unsupported": 0, "skip": 0}
        for r in self.cases:
            c[r.status] = c.get(r.status, 0) + 1
        return c


# --------------------------------------------------------------------------
# model variants


# Operations whose quant8 operands are not coupled to a signed equivalent
# (as Android's test harness says: legacy bool use, raw-byte hashing, an int32
# pad value, scale-blind conversion, a special-purpose LSTM).
UNCOUPLED_OPS = {"HASHTABLE_LOOKUP", "LSH_PROJECTION", "PAD_V2", "CAST", "QUANTIZED_16BIT_LSTM"}


def has_quant8_coupled_operands(vm: VectorModel) -> bool:
    """The VTS quantization-coupling test applies: one operation, no
    referenced subgraph, a TENSOR_QUANT8_ASYMM operand of a coupled op."""
    if vm.expectFailure or len(vm.main.operations) != 1 or vm.referenced:
        return False
    op = vm.main.operations[0]
    if hal.operation_name(op.type) in UNCOUPLED_OPS:
        return False
    return any(vm.main.operands[i].type == T.TENSOR_QUANT8_ASYMM for i in [*op.inputs, *op.outputs])


def to_signed(vm: VectorModel) -> VectorModel:
    """TENSOR_QUANT8_ASYMM -> TENSOR_QUANT8_ASYMM_SIGNED (zeroPoint - 128, data - 128)."""
    out = copy.deepcopy(vm)
    out.name = vm.name + "_signed"
    for sg in [out.main, *out.referenced]:
        for o in sg.operands:
            if o.type == T.TENSOR_QUANT8_ASYMM:
                o.type = T.TENSOR_QUANT8_ASYMM_SIGNED
                o.zeroPoint -= 128
                if o.data is not None:
                    o.data = (o.data.astype(np.int16) - 128).astype(np.int8)
    return out



def model_variants(vm: VectorModel, variants: Sequence[str]) -> list[tuple[VectorModel, str, bool]]:
    """The runs VTS makes of one vector model, as (model, variant name, dynamic
    shapes): plain, then the quant8 signed coupling and the dynamic-shape
    variants that ``variants`` asks for and the model is eligible for."""
    base = [("plain", vm)]
    if "signed" in variants and has_quant8_coupled_operands(vm):
        base.append(("signed", to_signed(vm)))
    out = []
    for vname, v in base:
        out.append((v, vname, False))
        if "dynamic" in variants and dynamic_eligible(v):
            out.append((v, "dynamic" if vname == "plain" else vname + "+dynamic", True))
    return out

def run_variants(vm: VectorModel, variants: Sequence[str],
                 run_variant: Callable[[VectorModel, str, bool], list[CaseResult]]) -> list[CaseResult]:
    """Every variant of ``vm`` (:func:`model_variants`) through ``run_variant(model, name, dynamic)``."""
    results: list[CaseResult] = []
    for v, vname, dynamic in model_variants(vm, variants):
        results += run_variant(v, vname, dynamic)
    return results


def case_result(vm: VectorModel, variant: str) -> Callable[..., CaseResult]:
    """``result(mode, status, msg="", err=0.0)``: a CaseResult of one variant's
    run, its time counted from this call."""
    ops = sorted(vm.operation_types)
    data_type = vm.data_type  # NOTE: once per variant, not per case
    t0 = time.perf_counter()

    def result(mode: str, status: str, msg: str = "", err: float = 0.0) -> CaseResult:
        return CaseResult(vm.spec, vm.name, ops, mode, variant, status, msg, time.perf_counter() - t0, err,
                          data_type)

    return result


def dynamic_eligible(vm: VectorModel) -> bool:
    return not vm.expectFailure and not (vm.operation_types & {"RANK", "IF", "WHILE"})


# --------------------------------------------------------------------------
# requests


class RequestPools:
    """The request layout of Android's test harness: pool 0 holds the inputs,
    pool 1 the outputs, each at an ``align``-byte aligned offset with its
    exact length; an input without data is ``hasNoValue``; a zero-sized output gets
    a 1-byte buffer (the caller's ``out_sizes``).  ``kind`` is the shared-memory kind of both pools
    (``"mmap_fd"`` pools start ``offset`` bytes into their file); ``out_dims``
    optionally gives each output's dimensions in the request.  ``paddings``
    (inputs, outputs): the bytes after each argument up to the next aligned
    offset, which an AIDL request names (``DataLocation.padding``)."""

    def __init__(self, inputs: Sequence[Optional[np.ndarray]], out_sizes: Sequence[int], kind: str = "ashmem",
                 offset: int = 0, out_dims: Optional[Sequence[Sequence[int]]] = None, align: int = 4):
        self.kind, self.offset = kind, offset
        self.in_args: list[hal.RequestArgument] = []
        in_pads: list[int] = []
        off = 0
        layout = []
        for v in inputs:
            if v is None:
                self.in_args.append(hal.RequestArgument(hasNoValue=True))
                in_pads.append(0)
                layout.append(None)
                continue
            n = v.nbytes
            layout.append((off, n))
            self.in_args.append(hal.RequestArgument(location=hal.DataLocation(0, off, n)))
            in_pads.append(_aligned(n, align) - n)
            off = _aligned(off + n, align)
        self.in_mem = self._alloc(max(off, 4))
        blob = bytearray(off)
        for v, lo in zip(inputs, layout):
            if lo is not None and lo[1]:
                blob[lo[0]: lo[0] + lo[1]] = np.ascontiguousarray(v).view(np.uint8).reshape(-1).tobytes()
        self._in_bytes = bytes(blob)  # NOTE: what reset() writes again
        self._in_view: Optional[memoryview] = None  # NOTE: the pools mapped once each, for their life
        self._write_inputs()
        self.out_args: list[hal.RequestArgument] = []
        self.out_layout: list[tuple[int, int]] = []
        out_pads: list[int] = []
        off = 0
        for k, n in enumerate(out_sizes):
            dims = list(out_dims[k]) if out_dims else []
            self.out_args.append(hal.RequestArgument(location=hal.DataLocation(1, off, n), dimensions=dims))
            self.out_layout.append((off, n))
            out_pads.append(_aligned(n, align) - n)
            off = _aligned(off + n, align)
        self.out_mem = self._alloc(max(off, 4))
        self.paddings = (in_pads, out_pads)
        self._out_view: Optional[memoryview] = None

    def _write_inputs(self) -> None:
        if self._in_bytes:
            if self._in_view is None:
                self._in_view = hal_memory.map(self.in_mem)
            self._in_view[:len(self._in_bytes)] = self._in_bytes

    def reset(self) -> None:
        """The pools as new for another run: the inputs written again, the outputs zeroed (a pool used by
        several runs holds what a fresh one would, whatever a run did to it)."""
        self._write_inputs()
        self.clear_outputs()

    def _outputs(self) -> memoryview:
        if self._out_view is None:
            self._out_view = hal_memory.map(self.out_mem)
        return self._out_view

    def _alloc(self, size: int) -> hal.Memory:
        if self.kind == "mmap_fd" and self.offset:
            return hal_memory.allocate(size, "mmap_fd", offset=self.offset)
        return hal_memory.allocate(size, self.kind)

    def request(self) -> hal.Request:
        return hal.Request(inputs=self.in_args, outputs=self.out_args,
                           pools=[hal.MemoryPool(hidlMemory=self.in_mem), hal.MemoryPool(hidlMemory=self.out_mem)])

    def short_request(self, k: int) -> tuple[hal.Request, tuple[list[int], list[int]]]:
        """(request, paddings) as :meth:`request` and :attr:`paddings` but output ``k`` one byte short, its
        padding one byte longer (VTS's makeOutputInsufficientSize), in the same pools."""
        outs, paddings = list(self.out_args), list(self.paddings[1])
        loc = outs[k].location
        outs[k] = hal.RequestArgument(location=hal.DataLocation(loc.poolIndex, loc.offset, loc.length - 1),
                                      dimensions=list(outs[k].dimensions))
        paddings[k] += 1
        return (hal.Request(inputs=self.in_args, outputs=outs, pools=self.request().pools),
                (self.paddings[0], paddings))

    def clear_outputs(self) -> None:
        """Zeroes the output pool (so a run must write its outputs again: a pool shared by several runs)."""
        view = self._outputs()
        view[:] = bytes(len(view))

    def output(self, k: int, dtype: Any, shape: Sequence[int]) -> np.ndarray:
        """Output ``k`` read back as ``dtype`` of ``shape``."""
        dt = np.dtype(dtype)
        n = math.prod(int(d) for d in shape)  # NOTE: 1 for a scalar's ()
        off, _ = self.out_layout[k]
        raw = bytes(self._outputs()[off: off + n * dt.itemsize])
        if dt == np.bool_:
            return (np.frombuffer(raw, dtype=np.uint8, count=n) != 0).reshape(shape)
        return np.frombuffer(raw, dtype=dt, count=n).reshape(shape)

    def read_output(self, k: int, operand: VectorOperand, shape: Sequence[int]) -> np.ndarray:
        return self.output(k, operand_dtype(operand), shape)

    def close(self) -> None:
        for view in (self._in_view, self._out_view):
            if view is not None:
                view.release()
        self._in_view = self._out_view = None
        hal_memory.free(self.in_mem)
        hal_memory.free(self.out_mem)

    def __enter__(self) -> "RequestPools":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _aligned(n: int, align: int) -> int:
    return (n + align - 1) // align * align


class Scratch:
    """Shared memories by size, for the copies in and out of device buffers (``IBuffer.copyFrom`` /
    ``copyTo`` want a memory of the buffer's exact size): one per size for the runs of a variant, written
    whole before each copyFrom and read whole after each copyTo, rather than one made and freed per copy;
    the harness maps each once, not at every copy.  The memory-domain runs' shared pools too
    (:meth:`request_pools`)."""

    def __init__(self) -> None:
        self._memories: dict[int, tuple[hal.Memory, memoryview]] = {}
        self._pools: dict[tuple, RequestPools] = {}

    def request_pools(self, inputs: Sequence[Optional[np.ndarray]], out_sizes: Sequence[int],
                      align: int) -> RequestPools:
        """The shared pools (0 and 1) of a memory-domain run laid out for these arguments: made once per
        layout and contents for the runs of a variant, reset before each (as new ones would hold)."""
        key = (tuple(None if v is None else (v.dtype.str, v.shape, v.tobytes()) for v in inputs), tuple(out_sizes),
               align)
        pools = self._pools.get(key)
        if pools is None:
            pools = self._pools[key] = RequestPools(inputs, out_sizes, align=align)
        else:
            pools.reset()
        return pools

    def get(self, size: int) -> tuple[hal.Memory, memoryview]:
        """(the memory of ``size`` bytes, the harness's own mapping of it, made once with it)."""
        got = self._memories.get(size)
        if got is None:
            m = hal_memory.allocate(size)
            got = self._memories[size] = (m, hal_memory.map(m))
        return got

    def close(self) -> None:
        memories, self._memories = list(self._memories.values()), {}
        pools, self._pools = list(self._pools.values()), {}
        for m, view in memories:
            view.release()
            hal_memory.free(m)
        for p in pools:
            p.close()


class DevicePools:
    """The request layout of VTS's memory-domain runs (GeneratedTestHarness,
    MemoryType::DEVICE): pools 0 and 1 are shared memory (inputs, outputs),
    then one driver-managed buffer per input and per output, each allocated
    with the face's ``allocate`` (an empty descriptor and the one role, frequency
    1.0); inputs are loaded with ``IBuffer.copyFrom`` and outputs read back
    with ``IBuffer.copyTo``.  As in VTS, an argument whose allocation fails
    (GENERAL_FAILURE) and an omitted input fall back to shared memory; a
    zero-sized input does too (copyFrom needs a non-empty memory), and a
    zero-sized output is not copied back.  ``error`` says what went wrong
    when the driver broke a rule (a wrong allocate or copyFrom status)."""

    BEGIN = 2

    def __init__(self, face: Face, prepared: Any, inputs: Sequence[Optional[np.ndarray]], out_sizes: Sequence[int],
                 scratch: Scratch, align: int = 4):
        self.face = face
        self.error = ""
        self._scratch = scratch
        self.buffers: list[Any] = []
        tokens: list[int] = []
        in_dev: dict[int, tuple[Any, int]] = {}
        out_dev: dict[int, tuple[Any, int]] = {}
        for k, v in enumerate(inputs):
            if v is not None and v.nbytes and not self.error:
                got = self._allocate(prepared, k, hal.BufferRole(0, k, 1.0), True)
                if got is not None:
                    in_dev[k] = got
                    self._load(got[0], v, k)
        for k in range(len(out_sizes)):
            if not self.error:
                got = self._allocate(prepared, k, hal.BufferRole(0, k, 1.0), False)
                if got is not None:
                    out_dev[k] = got
        # NOTE: the shared pools hold what is not in device memory, at the offsets VTS uses (the variant's
        # scratch keeps them for its next runs)
        shared_in = [None if k in in_dev else v for k, v in enumerate(inputs)]
        shared_out = [1 if k in out_dev else n for k, n in enumerate(out_sizes)]
        self.shared = scratch.request_pools(shared_in, shared_out, align)
        self.in_args = list(self.shared.in_args)
        self.out_args = list(self.shared.out_args)
        self.paddings = (list(self.shared.paddings[0]), list(self.shared.paddings[1]))  # NOTE: ours to change
        self.pools = [hal.MemoryPool(hidlMemory=self.shared.in_mem), hal.MemoryPool(hidlMemory=self.shared.out_mem)]
        self.out_buffers: dict[int, Any] = {}
        for args, dev, pads in ((self.in_args, in_dev, self.paddings[0]), (self.out_args, out_dev, self.paddings[1])):
            for k, (buf, token) in dev.items():
                args[k] = hal.RequestArgument(location=hal.DataLocation(self.BEGIN + len(tokens), 0, 0))
                pads[k] = 0
                tokens.append(token)
                if dev is out_dev:
                    self.out_buffers[k] = buf
        self.pools += [hal.MemoryPool(token=t) for t in tokens]

    @property
    def used(self) -> int:
        """How many arguments are in device memory."""
        return len(self.pools) - self.BEGIN

    def _allocate(self, prepared: Any, k: int, role: hal.BufferRole, is_input: bool) -> Any:
        ins, outs = ([role], []) if is_input else ([], [role])
        status, buf, token = self.face.allocate([], [prepared], ins, outs)
        what = f"allocate for {'input' if is_input else 'output'} {k}"
        if status == S.NONE:
            if buf is None or not isinstance(token, int) or token <= 0:
                self.error = f"{what}: NONE with buffer {buf!r} and token {token!r}"
                return None
            self.buffers.append(buf)
            return buf, token
        if status != S.GENERAL_FAILURE or buf is not None or token != 0:
            self.error = f"{what}: {S(status).name} with buffer {buf!r} and token {token!r} (VTS wants NONE, or " \
                         "GENERAL_FAILURE with no buffer and token 0)"
        return None

    def _load(self, buf: Any, v: np.ndarray, k: int) -> None:
        tmp, view = self._scratch.get(v.nbytes)
        view[:] = np.ascontiguousarray(v).view(np.uint8).reshape(-1).tobytes()
        status = self.face.copy_from(buf, tmp, [])
        if status != S.NONE:
            self.error = f"copyFrom for input {k} returned {S(status).name}"

    def request(self) -> hal.Request:
        return hal.Request(inputs=self.in_args, outputs=self.out_args, pools=self.pools)

    def clear_outputs(self) -> None:
        self.shared.clear_outputs()  # NOTE: a device buffer is written whole by each run, or the run fails

    def read_output(self, k: int, operand: VectorOperand, shape: Sequence[int]) -> np.ndarray:
        buf = self.out_buffers.get(k)
        if buf is None:
            return self.shared.read_output(k, operand, shape)
        dt = np.dtype(operand_dtype(operand))
        n = math.prod(int(d) for d in shape)  # NOTE: 1 for a scalar's ()
        if n == 0:  # NOTE: as VTS, a zero-sized output is not copied back (no memory of size 0)
            return np.zeros(shape, dt)
        tmp, view = self._scratch.get(n * dt.itemsize)
        status = self.face.copy_to(buf, tmp)
        if status != S.NONE:
            raise AssertionError(f"copyTo for output {k} returned {S(status).name}")
        raw = bytes(view)
        if dt == np.bool_:
            return (np.frombuffer(raw, dtype=np.uint8) != 0).reshape(shape)
        return np.frombuffer(raw, dtype=dt).reshape(shape)

    def close(self) -> None:
        # NOTE: the shared pools are the scratch's, closed with it
        for buf in self.buffers:
            close = getattr(buf, "close", None)  # NOTE: frees the driver's buffer now (else when collected)
            if close is not None:
                close()
        self.buffers = []


_DT = {T.FLOAT32: np.float32, T.INT32: np.int32, T.UINT32: np.uint32, T.TENSOR_FLOAT32: np.float32,
       T.TENSOR_INT32: np.int32, T.TENSOR_QUANT8_ASYMM: np.uint8, T.BOOL: np.bool_, T.TENSOR_QUANT16_SYMM: np.int16,
       T.TENSOR_FLOAT16: np.float16, T.TENSOR_BOOL8: np.bool_, T.FLOAT16: np.float16,
       T.TENSOR_QUANT8_SYMM_PER_CHANNEL: np.int8, T.TENSOR_QUANT16_ASYMM: np.uint16, T.TENSOR_QUANT8_SYMM: np.int8,
       T.TENSOR_QUANT8_ASYMM_SIGNED: np.int8}


def _dtype(t: int) -> Any:
    return _DT[T(t)]


def operand_dtype(o: VectorOperand) -> Any:
    """An operand's element dtype: its HAL type's, or for an extension type the vector data's."""
    if int(o.type) >> 16 and o.data is not None:
        return o.data.dtype
    return _dtype(o.type)


def nbytes(o: VectorOperand) -> int:
    return math.prod(o.dimensions) * np.dtype(operand_dtype(o)).itemsize


# --------------------------------------------------------------------------
# running


class Runner:
    """Runs vector models on ``device`` (an ``IDevice``, or a :class:`Face`:
    a HAL 1.3 device is judged through its HIDL face) in the executors
    ``modes`` and the ``variants``; ``memory`` is the kind of the request
    pools ("ashmem", "mmap_fd", "hardware_buffer_blob", or "device":
    driver-managed buffers from allocate, as VTS's memory-domain runs);
    ``prepare_config``: models prepared with the face's prepareModelWithConfig
    (AIDL version 4)."""

    def __init__(self, device: Any, modes: tuple[str, ...] = BASIC_MODES, variants: tuple[str, ...] = VARIANTS,
                 memory: str = "ashmem", prepare_config: bool = False):
        self.device = device
        self.face = as_face(device)
        unknown = [m for m in modes if m not in self.face.all_modes]
        if unknown:
            raise ValueError(f"the {self.face.name} face has no executor {', '.join(unknown)} (it has "
                             f"{', '.join(self.face.all_modes)})")
        if prepare_config and not self.face.has_config:
            raise ValueError(f"the {self.face.name} face has no prepareModelWithConfig")
        self.modes = modes
        self.variants = variants
        self.memory = memory
        self.prepare_config = prepare_config
        # NOTE: the pools as the face's VTS lays them out (AIDL: nn::kDefaultRequestMemoryAlignment / Padding)
        self.align = 4 if self.face.name == "hidl" else 64
        self._measure_toggle = 0
        self._scratch: Optional[Scratch] = None

    def prepare(self, vm: VectorModel, dynamic: bool) -> tuple[S, Any, str]:
        model = vm.build_model()
        if dynamic:
            for i in model.main.outputIndexes:
                o = model.main.operands[i]
                o.dimensions = [0] * len(o.dimensions)
        face, v = self.face, self.face.method_suffix
        try:
            # NOTE: the device says why where it can (nnhal's hal.INnhalDevice, in process or through a service):
            # the report groups unsupported models by the first reason
            status, supported, reasons = face.supported(model, reasons=True)
            if status != S.NONE:
                return status, None, f"getSupportedOperations{v} returned {S(status).name}"
            if not all(supported):
                names = [hal.operation_name(op.type) for op, s in zip(model.main.operations, supported) if not s]
                why = next((r if r.startswith(n) else f"{n}: {r}" for n, r in
                            ((hal.operation_name(op.type), r) for op, r in zip(model.main.operations, reasons)) if r), "")
                return S.GENERAL_FAILURE, None, f"unsupported: {','.join(names)} -- {why}"
            launch, status, prepared = face.prepare(model, config=self.prepare_config)
            what = "prepareModelWithConfig" if self.prepare_config else f"prepareModel{v}"
            if launch != status:
                return S.GENERAL_FAILURE, None, f"{what} launch status {S(launch).name} != callback " \
                                                f"status {S(status).name}"
            if status != S.NONE:
                return status, None, f"{what} gave {S(status).name}"
            if prepared is None:
                return S.GENERAL_FAILURE, None, f"{what} gave NONE without a model"
            return S.NONE, prepared, ""
        finally:
            for m in model.pools:
                hal_memory.free(m)

    def close_burst(self) -> None:
        """End the burst of the last prepared model (done after each variant)."""
        self.face.close_bursts()

    def run_model(self, vm: VectorModel) -> list[CaseResult]:
        return run_variants(vm, self.variants, self._run_variant)

    def _run_variant(self, vm: VectorModel, variant: str, dynamic: bool) -> list[CaseResult]:
        result = case_result(vm, variant)
        # NOTE: log lines name the model; the driver's rejections of an expected failure are DEBUG
        with logs.running(f"{vm.name} [{variant}]", vm.expectFailure):
            return self._run_variant_logged(vm, variant, dynamic, result)

    def _run_variant_logged(self, vm: VectorModel, variant: str, dynamic: bool, result: Any) -> list[CaseResult]:
        too_new = self.face.too_new(vm.version)
        if too_new:
            return [result(m, "skip", too_new) for m in self.modes]
        try:
            status, prepared, msg = self.prepare(vm, dynamic)
        except Exception as e:  # noqa: BLE001 - a driver that raises is a failing driver
            return [result(m, "fail", f"prepare raised {type(e).__name__}: {e}") for m in self.modes]
        if status != S.NONE:
            if vm.expectFailure:
                return [result(m, "pass", f"failed as expected at prepare ({msg})") for m in self.modes]
            kind = "unsupported" if msg.startswith("unsupported") or "not registered" in msg else "fail"
            return [result(m, kind, msg) for m in self.modes]
        out = []
        # NOTE: shared memory: one request's pools for every executor of the variant, reset before each run
        # to what new pools would hold (inputs written, outputs zeroed): two pools made, mapped and freed per
        # variant rather than per run and per one-byte-short run (device memory stays per run: a driver's
        # buffer cannot be reset)
        try:
            shared = None if self.memory == "device" else \
                RequestPools(vm.input_values(), _sizes(vm.output_operands()), self.memory, align=self.align)
        except Exception as e:  # noqa: BLE001 - as when each run's own pools could not be made
            self.close_burst()
            return [result(m, "fail", f"raised {type(e).__name__}: {e}") for m in self.modes]
        # NOTE: device memory: the copies in and out of the buffers go through memories shared by the runs
        self._scratch = Scratch() if self.memory == "device" else None
        try:
            for mode in self.modes:
                try:
                    out.append(self.run_mode(vm, prepared, mode, dynamic, result, shared))
                except Exception as e:  # noqa: BLE001
                    out.append(result(mode, "fail", f"raised {type(e).__name__}: {e}"))
        finally:
            self.close_burst()
            if shared is not None:
                shared.close()
            if self._scratch is not None:
                self._scratch.close()
                self._scratch = None
        return out

    def _pools(self, prepared: Any, inputs: list, sizes: list[int], shared: Optional[RequestPools]) -> Any:
        if self.memory == "device":
            assert self._scratch is not None  # NOTE: made with the variant's runs in device memory
            return DevicePools(self.face, prepared, inputs, sizes, self._scratch, self.align)
        if shared is not None:
            shared.reset()
            return shared
        return RequestPools(inputs, sizes, self.memory, align=self.align)

    def run_mode(self, vm: VectorModel, prepared: Any, mode: str, dynamic: bool, result: Any,
                 shared: Optional[RequestPools] = None) -> CaseResult:
        """One executor's case; ``shared``: the variant's request pools (reset here), else new ones."""
        inputs = vm.input_values()
        outs = vm.output_operands()
        sizes = _sizes(outs)
        self._measure_toggle ^= 1
        measure = bool(self._measure_toggle)
        if self.memory == "device" and mode.startswith("burst") and not self.face.burst_takes_tokens:
            # NOTE: as VTS (no burst in its 1.3 memory-domain runs): a 1.2 burst packet cannot carry a token
            return result(mode, "skip", "a burst cannot carry driver-allocated buffers")
        pools = self._pools(prepared, inputs, sizes, shared)
        if self.memory == "device" and (pools.error or not pools.used):
            pools.close()
            if pools.error:
                return result(mode, "fail", pools.error)
            return result(mode, "skip", "no device memory allocated (as VTS, skipped)")
        fenced = mode in FENCED_MODES
        # NOTE: as VTS's InfiniteLoopTimeoutTest, the infinite loop runs with a 1 ms loop timeout
        infinite_loop = vm.expectFailure and vm.main.operations[0].type == hal.OperationType.WHILE
        fenced_refused = fenced and (dynamic or any(nbytes(o) == 0 for o in outs))
        expect_error = vm.expectFailure or fenced_refused
        verdict: tuple[str, str, float] = ("pass", "", 0.0)
        worst = 0.0
        try:
            request = self.face.request(pools.request(), pools.paddings)
            with self.face.execution(prepared, request, mode, measure, None,
                                     1_000_000 if infinite_loop else None) as run:
                # NOTE: as VTS, a reusable execution runs twice (each run must write the outputs again)
                for k in range(2 if mode in REUSABLE_MODES else 1):
                    if k:
                        pools.clear_outputs()
                    with logs.running(logs.current_model(), expect_error):
                        outcome = run()
                    verdict = self._judge(vm, pools, outcome, measure, fenced, fenced_refused, inputs, outs)
                    worst = max(worst, verdict[2])
                    if verdict[0] != "pass":
                        return result(mode, verdict[0], verdict[1], verdict[2])
        finally:
            if pools is not shared:
                pools.close()
        # NOTE: as VTS, only when output 0 is larger than one byte (and not in device memory, which
        # takes any output shape: there is no short buffer to give)
        if dynamic and outs and sizes[0] > 1 and self.memory != "device" and not vm.expectFailure:
            problem = self._insufficient(prepared, mode, inputs, sizes, outs, shared)
            if problem:
                return result(mode, "fail", problem, worst)
        return result(mode, "pass", verdict[1], worst)

    def _judge(self, vm: VectorModel, pools: Any, outcome: Outcome, measure: bool, fenced: bool,
               fenced_refused: bool, inputs: list, outs: list[VectorOperand]) -> tuple[str, str, float]:
        """(verdict, message, worst error) of one execution's outcome."""
        status = outcome.status if outcome.consistent else S.GENERAL_FAILURE
        shapes = outcome.shapes
        if fenced_refused and not vm.expectFailure:
            # NOTE: as VTS: "For Executor::FENCED, the output shape must be fully specified"
            if status != S.INVALID_ARGUMENT:
                return "fail", f"fenced execution with unspecified or zero-sized outputs gave {S(status).name}, " \
                               f"not INVALID_ARGUMENT", 0.0
            return "pass", "INVALID_ARGUMENT as expected (fenced needs fully specified outputs)", 0.0
        if vm.expectFailure:
            if status == S.NONE:
                return "fail", "expected a failure, the execution succeeded", 0.0
            if shapes and status != S.OUTPUT_INSUFFICIENT_SIZE:
                return "fail", f"error {S(status).name} came with output shapes", 0.0
            return "pass", f"failed as expected ({S(status).name})", 0.0
        if status != S.NONE:
            return "fail", f"execution returned {S(status).name}", 0.0
        if fenced and not shapes:
            shapes = [hal.OutputShape(list(o.dimensions), True) for o in outs]  # NOTE: fenced returns none
        problem = _check_timing(measure, outcome.timing) or _check_shapes(shapes, outs)
        if problem:
            return "fail", problem, 0.0
        worst = 0.0
        has_fp16 = vm.has_fp16
        for k, o in enumerate(outs):
            got = pools.read_output(k, o, list(shapes[k].dimensions))
            expected = o.data if o.data is not None else np.zeros(o.dimensions, _dtype(o.type))
            v = compare(got, expected, o.type, model_has_fp16=has_fp16, relaxed=vm.isRelaxed, name=vm.name,
                        ignored=o.isIgnored, multinomial_tolerance=vm.multinomialTolerance,
                        multinomial_logits=inputs[0] if vm.multinomialTolerance > 0 else None)
            worst = max(worst, v.max_error)
            if not v.ok:
                return "fail", f"output {k}: {v.message}", v.max_error
        return "pass", "", worst

    def _insufficient(self, prepared: Any, mode: str, inputs: list, sizes: list[int],
                      outs: list[VectorOperand], shared: Optional[RequestPools] = None) -> str:
        pools = self._pools(prepared, inputs, sizes, shared)
        try:
            request = self.face.request(*pools.short_request(0))
            with self.face.execution(prepared, request, mode, False) as run:
                for _ in range(2 if mode in REUSABLE_MODES else 1):
                    with logs.running(logs.current_model(), expect_failure=True):  # NOTE: the driver must refuse it
                        o = run()
                    problem = _insufficient_problem(mode, o, outs)
                    if problem:
                        return problem
        finally:
            if pools is not shared:
                pools.close()
        return ""


def _sizes(outs: Sequence[VectorOperand]) -> list[int]:
    return [max(nbytes(o), 1) for o in outs]  # NOTE: a zero-sized output gets a 1-byte buffer


def _insufficient_problem(mode: str, o: Outcome, outs: list[VectorOperand]) -> str:
    status = o.status if o.consistent else S.GENERAL_FAILURE
    if mode in FENCED_MODES:
        return "" if status == S.INVALID_ARGUMENT else \
            f"fenced, output 0 one byte short: expected INVALID_ARGUMENT, got {S(status).name}"
    if status != S.OUTPUT_INSUFFICIENT_SIZE:
        return f"output 0 one byte short: expected OUTPUT_INSUFFICIENT_SIZE, got {S(status).name}"
    if len(o.shapes) != len(outs):
        return f"OUTPUT_INSUFFICIENT_SIZE came with {len(o.shapes)} shapes for {len(outs)} outputs"
    for k, (s, op) in enumerate(zip(o.shapes, outs)):
        if list(s.dimensions) != list(op.dimensions):
            return f"OUTPUT_INSUFFICIENT_SIZE: output {k} shape {list(s.dimensions)} != {op.dimensions}"
        if s.isSufficient != (k != 0):
            return f"OUTPUT_INSUFFICIENT_SIZE: output {k} isSufficient is {s.isSufficient}"
    return ""



def _check_timing(measure: Any, timing: hal.Timing) -> str:
    if not measure:
        if timing.timeOnDevice != hal.UINT64_MAX or timing.timeInDriver != hal.UINT64_MAX:
            return f"timing reported without MeasureTiming.YES: {timing}"
    elif timing.timeOnDevice != hal.UINT64_MAX and timing.timeInDriver != hal.UINT64_MAX:
        if timing.timeOnDevice > timing.timeInDriver:
            return f"timeOnDevice {timing.timeOnDevice} > timeInDriver {timing.timeInDriver}"
    return ""


def _check_shapes(shapes: list, outs: list[VectorOperand]) -> str:
    if len(shapes) != len(outs):
        return f"{len(shapes)} output shapes for {len(outs)} outputs"
    for k, (s, o) in enumerate(zip(shapes, outs)):
        if not s.isSufficient:
            return f"output {k}: isSufficient false on success"
        if list(s.dimensions) != list(o.dimensions):
            return f"output {k}: shape {list(s.dimensions)} != expected {o.dimensions}"
    return ""
