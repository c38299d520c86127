"""Running an imported TFLite model through a HAL device (public API only:
``prepareModel_1_3`` + ``executeSynchronously_1_3`` on ``nnhal.memory`` pools,
as an NNAPI client does, or a model prepared through another face of the
device, :mod:`nnhal.runtime.face`: an AIDL partition executed as the
delegate does at its level, each request sent, through a burst or as a
reusable execution), LiteRT as the reference, and the comparisons
``nnhal run --compare / --per-tensor`` print.

Generated inputs (when none are given) are seeded (``seed``, default 0) and
documented here: float inputs uniform in [-1, 1); uint8 / int8 inputs
uniform over their whole integer range; int32 inputs uniform in [0, 10);
bool inputs fair coin flips.
"""

from __future__ import annotations

import dataclasses
import fcntl
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from nnhal import hal
from nnhal.delegate.litert import LiteRT, timed  # noqa: F401 - the public names of this module too
from nnhal.engine.validation import request_key
from nnhal.platform import memory as hal_memory
from nnhal.runtime.face import AidlPrepared, HidlPrepared, Prepared
from nnhal.tflite.loader import IODescription, TensorDesc

_HAL_DTYPES = {hal.OperandType.TENSOR_FLOAT32: np.float32, hal.OperandType.TENSOR_FLOAT16: np.float16,
               hal.OperandType.TENSOR_INT32: np.int32, hal.OperandType.TENSOR_QUANT8_ASYMM: np.uint8,
               hal.OperandType.TENSOR_QUANT8_ASYMM_SIGNED: np.int8, hal.OperandType.TENSOR_BOOL8: np.bool_,
               hal.OperandType.TENSOR_QUANT16_SYMM: np.int16}


_NONE = hal.ErrorStatus.NONE


class ExecutionError(RuntimeError):
    """The device refused to prepare or failed to execute the model."""


def make_inputs(io: IODescription, batch: int = 1, seed: int = 0, max_bytes: Optional[int] = None) -> list[np.ndarray]:
    """Inputs from the documented distribution (see the module docstring), their sizes checked against
    ``max_bytes`` (default ``$NNHAL_TFLITE_MAX_BYTES``) before any is made (:func:`check_input_sizes`)."""
    rng = np.random.default_rng(seed)
    shapes = [[batch if s < 0 else s for s in d.shape] for d in io.inputs]
    check_input_sizes(io, shapes, max_bytes)
    out = []
    for d, shape in zip(io.inputs, shapes):
        dt = np.dtype(d.dtype)
        a = np.empty(shape, dt)
        flat = a.reshape(-1)
        # NOTE: in pieces, so the generator's float64 / int64 draws stay small whatever the input's size;
        # the same values as one draw of the whole (the generator's stream does not depend on the split)
        for lo in range(0, flat.size, _DRAW):
            n = min(_DRAW, flat.size - lo)
            if dt.kind == "f":
                flat[lo: lo + n] = rng.uniform(-1.0, 1.0, n)
            elif dt == np.bool_:
                flat[lo: lo + n] = rng.integers(0, 2, n)
            elif dt in (np.uint8, np.int8, np.int16):
                info = np.iinfo(dt)
                flat[lo: lo + n] = rng.integers(int(info.min), int(info.max) + 1, n)
            else:
                flat[lo: lo + n] = rng.integers(0, 10, n)
        out.append(a)
    return out


_DRAW = 1 << 20  # elements drawn at a time by make_inputs


def input_dtypes(io: IODescription) -> list[np.dtype]:
    """The numpy dtype of each model input; ValueError (a :class:`~nnhal.tflite.errors.ModelError`) for one of
    a TFLite type no array holds (string, resource, variant, int4, ...)."""
    from nnhal.tflite.errors import ModelError

    out = []
    for k, d in enumerate(io.inputs):
        try:
            dt = np.dtype(d.dtype)
        except TypeError:
            dt = None
        if dt is None or dt.kind not in "biufc":
            raise ModelError(f"input {k} ({d.name}) is of TFLite type {d.dtype}: no array nnhal makes or "
                                        "reads holds it")
        out.append(dt)
    return out


def check_input_sizes(io: IODescription, shapes: Sequence[Sequence[int]], max_bytes: Optional[int] = None) -> None:
    """The model's inputs of ``shapes`` together within ``max_bytes`` (default ``$NNHAL_TFLITE_MAX_BYTES``):
    ValueError (an :class:`~nnhal.tflite.errors.InvalidModelError`) naming the largest input and its size."""
    from nnhal.tflite.errors import InvalidModelError
    from nnhal.tflite.verify import default_max_bytes

    limit = default_max_bytes() if max_bytes is None else max_bytes
    sizes = [math.prod(s) * dt.itemsize for dt, s in zip(input_dtypes(io), shapes)]
    if sum(sizes) > limit:
        k = max(range(len(sizes)), key=sizes.__getitem__)
        d = io.inputs[k]
        raise InvalidModelError(f"input {k} ({d.name}) of shape {list(shapes[k])} is {sizes[k]} bytes; the inputs "
                                f"need {sum(sizes)} bytes together, above the limit of {limit} (NNHAL_TFLITE_MAX_BYTES)")


def check_inputs(io: IODescription, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The given arrays as the model's inputs (count, dtype, shape checked; unknown dims free)."""
    if len(inputs) != len(io.inputs):
        raise ValueError(f"the model has {len(io.inputs)} input(s), {len(inputs)} given")
    res = []
    for k, (a, d, dt) in enumerate(zip(inputs, io.inputs, input_dtypes(io))):
        a = np.asarray(a)
        if a.dtype != dt:
            raise ValueError(f"input {k} ({d.name}) must be {d.dtype}, got {a.dtype}")
        if len(a.shape) != len(d.shape) or any(s >= 0 and s != x for s, x in zip(d.shape, a.shape)):
            raise ValueError(f"input {k} ({d.name}) must have shape {d.shape}, got {list(a.shape)}")
        res.append(np.ascontiguousarray(a))
    return res


class PoolLayout:
    """One shared memory pool holding a run's inputs, then its outputs (each at a
    64-byte aligned offset), mapped once, the request naming them, and numpy
    views of each input's and output's bytes in the mapping."""

    def __init__(self, inputs: Sequence[np.ndarray], out_dims: list[list[int]], out_dtypes: list[np.dtype]):
        self.shapes = tuple(a.shape for a in inputs)
        self.out_dims = out_dims
        places, off = [], 0
        for a in inputs:
            places.append((off, a.nbytes))
            off = (off + a.nbytes + 63) // 64 * 64
        in_args = [hal.RequestArgument(location=hal.DataLocation(0, o, n),
                                       # NOTE: the actual dimensions, for a model that leaves some unknown
                                       dimensions=[int(d) for d in a.shape] if a.ndim else [1])
                   for a, (o, n) in zip(inputs, places)]
        self.out_places = []
        for d, dt in zip(out_dims, out_dtypes):
            n = max(math.prod(d) * dt.itemsize, 1)
            self.out_places.append((off, n))
            off = (off + n + 63) // 64 * 64
        self.memory = hal_memory.allocate(max(off, 64))
        self.request = hal.Request(inputs=in_args,
                                   outputs=[hal.RequestArgument(location=hal.DataLocation(0, o, n))
                                            for o, n in self.out_places],
                                   pools=[hal.MemoryPool(hidlMemory=self.memory)])
        # NOTE: mapped once per layout, not per run (the client's side of an execution: what a user
        # keeps between runs), so the timings measure the driver and not this session's mmap calls
        self.view = hal_memory.map(self.memory)
        self.plan: list[tuple] = []  # NOTE: set by HalSession for its run's common case
        self.in_views = [np.frombuffer(self.view, a.dtype, a.size, o).reshape(a.shape)
                         for a, (o, _) in zip(inputs, places)]
        self.out_views = [self.out_view(k, d, dt) for k, (d, dt) in enumerate(zip(out_dims, out_dtypes))]

    def out_view(self, k: int, dims: list[int], dt: np.dtype) -> np.ndarray:
        return np.frombuffer(self.view, dt, math.prod(dims), self.out_places[k][0]).reshape(dims)

    def close(self) -> None:
        self.in_views, self.out_views, self.plan = [], [], []  # NOTE: views of the mapping first, then the mapping
        try:
            self.view.release()
        except BufferError:
            pass  # NOTE: a caller still holds a view: the mapping goes with the last one
        hal_memory.free(self.memory)


def check_output_sizes(dims: Sequence[Sequence[int]], dtypes: Sequence[np.dtype], max_bytes: Optional[int] = None) -> None:
    """The output sizes a device asks for (OUTPUT_INSUFFICIENT_SIZE) within ``max_bytes`` (default
    ``$NNHAL_TFLITE_MAX_BYTES``) together, before a pool is made for them: ExecutionError naming the largest."""
    from nnhal.tflite.verify import default_max_bytes

    limit = default_max_bytes() if max_bytes is None else max_bytes
    sizes = [math.prod(max(int(x), 0) for x in d) * dt.itemsize for d, dt in zip(dims, dtypes)]
    if sizes and sum(sizes) > limit:
        k = max(range(len(sizes)), key=sizes.__getitem__)
        raise ExecutionError(f"output {k} of dimensions {list(dims[k])} is {sizes[k]} bytes; the outputs need "
                             f"{sum(sizes)} bytes together, above the limit of {limit} (NNHAL_TFLITE_MAX_BYTES)")


class HalSession:
    """A model prepared on ``device``; ``run(inputs)`` executes it synchronously:
    ``executeSynchronously_1_3`` on one shared memory pool (inputs written
    into it, outputs read from it), as an NNAPI client does.  ``prepared``: a
    model the caller prepared another way (an older HAL version's method, a
    :class:`~nnhal.runtime.face.Prepared` of either face); ``mode`` how it
    executes: "sync" (each request sent), "burst" (one burst for the session),
    "reusable" (one reusable execution per pool layout)."""

    def __init__(self, device: Any, model: hal.Model, io: IODescription, prepared: Any = None, mode: str = "sync"):
        self.device, self.model, self.io = device, model, io
        if prepared is None:
            cb = hal.PreparedModelCallback()
            st = device.prepareModel_1_3(model, hal.ExecutionPreference.FAST_SINGLE_ANSWER, hal.Priority.MEDIUM,
                                         hal.OptionalTimePoint(), [], [], bytes(32), cb)
            status, prepared = cb.wait()
            if st != hal.ErrorStatus.NONE or status != hal.ErrorStatus.NONE or prepared is None:
                raise ExecutionError(f"prepareModel_1_3: {hal.ErrorStatus(st if st else status).name}")
        self.prepared: Prepared = prepared if isinstance(prepared, Prepared) else HidlPrepared(prepared)
        self.mode = mode
        self._burst: Any = None
        self._execution: Any = None  # NOTE: the reusable execution of the current pool layout
        sg = model.main
        self.out_types = [sg.operands[i].type for i in sg.outputIndexes]
        self.out_dtypes = [np.dtype(_HAL_DTYPES[t]) for t in self.out_types]
        self.out_dims = [list(sg.operands[i].dimensions) for i in sg.outputIndexes]
        # NOTE: (the output's own rank: a TFLite scalar is [1] in the HAL model, its dtype)
        self.out_desc = [(bool(d.shape), np.dtype(d.dtype)) for d in io.all_outputs]
        self._layout: Optional[PoolLayout] = None

    def _layout_for(self, inputs: Sequence[np.ndarray], dims: Optional[list[list[int]]]) -> PoolLayout:
        lay = self._layout
        shapes = tuple([a.shape for a in inputs])
        if lay is not None and lay.shapes == shapes and (dims is None or dims == lay.out_dims):
            return lay
        if dims is None:
            batch = int(inputs[0].shape[0]) if inputs and inputs[0].ndim else 1
            dims = [[batch if d == 0 else d for d in ds] for ds in self.out_dims]
        self.close_pools()
        self._layout = lay = PoolLayout(inputs, dims, self.out_dtypes)
        # NOTE: per output, what the common case of run needs: (its view, its dimensions, ranked, the
        # view already of the output's dtype, that dtype)
        lay.plan = [(v, d, ranked, v.dtype == dt, dt)
                    for v, d, (ranked, dt) in zip(lay.out_views, lay.out_dims, self.out_desc)]
        return lay

    def close_pools(self) -> None:
        if self._execution is not None:
            self._execution.close()
            self._execution = None
        if self._layout is not None:
            self._layout.close()
            self._layout = None

    def _execute(self, request: hal.Request) -> tuple:
        """(status, output shapes, timing) of one execution in the session's mode."""
        if self.mode == "burst":
            if self._burst is None:
                status, self._burst = self.prepared.burst()
                if status != hal.ErrorStatus.NONE:
                    raise ExecutionError(f"configureExecutionBurst: {hal.ErrorStatus(status).name}")
            return self._burst.execute(request, False, None, None)
        if self.mode == "reusable":
            if self._execution is None:
                status, self._execution = self.prepared.reusable(request, False, None)
                if status != hal.ErrorStatus.NONE:
                    raise ExecutionError(f"createReusableExecution: {hal.ErrorStatus(status).name}")
            return self._execution.execute(None)
        return self.prepared.execute(request, False, None, None)

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The outputs (model outputs, then exposed intermediates) with their actual shapes."""
        lay = self._layout
        # NOTE: the common case first (the layout of the last run, each output of the size it was made
        # for): the copies and the call only, what depends on the layout computed once in PoolLayout.plan
        if lay is not None and len(inputs) == len(lay.shapes):
            for dst, a in zip(lay.in_views, inputs):
                if a.shape != dst.shape:  # NOTE: dst.shape is the layout's (PoolLayout.shapes)
                    return self._run_laid_out(inputs, None, 3)
                np.copyto(dst, a)
            if self.mode == "sync":
                status, shapes, _ = self.prepared.execute(lay.request, False, None, None)
            else:
                status, shapes, _ = self._execute(lay.request)
            if status == _NONE and len(shapes) >= len(lay.plan):
                res = []
                for (v, dims, ranked, same, dt), s in zip(lay.plan, shapes):
                    if s.dimensions and s.dimensions != dims:  # NOTE: a shape known only once run
                        break
                    # NOTE: a copy, the pool is overwritten by the next run; a TFLite scalar is [1] in the
                    # HAL model: given back its own rank
                    res.append((v.copy() if same else v.astype(dt)) if ranked else v.reshape(()).astype(dt))
                else:
                    return res
            if status != hal.ErrorStatus.OUTPUT_INSUFFICIENT_SIZE:
                return self._finish(lay, status, shapes)
            dims = [list(s.dimensions) for s in shapes]
            check_output_sizes(dims, self.out_dtypes)
            return self._run_laid_out(inputs, dims, 2)
        return self._run_laid_out(inputs, None, 3)

    def _run_laid_out(self, inputs: Sequence[np.ndarray], dims: Optional[list[list[int]]],
                      tries: int) -> list[np.ndarray]:
        """``run`` in a layout for ``inputs`` (and output ``dims`` when given), grown up to ``tries`` times."""
        for _ in range(tries):
            lay = self._layout_for(inputs, dims)
            for dst, a in zip(lay.in_views, inputs):
                np.copyto(dst, a)
            status, shapes, _ = self._execute(lay.request)
            if status == hal.ErrorStatus.OUTPUT_INSUFFICIENT_SIZE:
                dims = [list(s.dimensions) for s in shapes]
                check_output_sizes(dims, self.out_dtypes)
                continue
            return self._finish(lay, status, shapes)
        raise ExecutionError("output sizes kept growing")

    def _finish(self, lay: PoolLayout, status: Any, shapes: Sequence[Any]) -> list[np.ndarray]:
        """The outputs of an execution that ended with ``status`` and output ``shapes`` in ``lay``'s pool."""
        if status != hal.ErrorStatus.NONE:
            raise ExecutionError(f"{_EXECUTE[self.mode](self.prepared)}: {hal.ErrorStatus(status).name}")
        res = []
        out_dims = lay.out_dims
        for k, (v, (ranked, dt)) in enumerate(zip(lay.out_views, self.out_desc)):
            got = shapes[k].dimensions if k < len(shapes) else None
            if got and got != out_dims[k]:  # NOTE: a shape known only once run
                v = lay.out_view(k, got, self.out_dtypes[k])
            res.append((v.copy() if v.dtype == dt else v.astype(dt)) if ranked else v.reshape(()).astype(dt))
        return res

    def close(self) -> None:
        self.close_pools()
        if self._burst is not None:
            self._burst.close()
            self._burst = None


_EXECUTE = {"sync": lambda p: "IPreparedModel.executeSynchronously" if isinstance(p, AidlPrepared)
            else "executeSynchronously_1_3",
            "burst": lambda p: "IBurst.executeSynchronously" if isinstance(p, AidlPrepared) else "burst execution",
            "reusable": lambda p: "IExecution.executeSynchronously" if isinstance(p, AidlPrepared)
            else "executeSynchronously_1_3"}


class DataPathFloor:
    """LiteRT (XNNPACK) on the original file with the least an in-process
    HAL execution must do around it, by value and through shared memory, and
    nothing else: the client writes its inputs into a pool; the request is
    read (:func:`nnhal.engine.validation.request_key`: every value, as a driver that
    keeps nothing of the caller's must); each pool's descriptor is checked to
    be the memory validated before (``fstat``, ``F_GETFL``); the inputs are
    set from the pool, the outputs written into it, and the client reads them
    back.  No scheduler, deadline, argument checks or result objects: a lower
    bound for a HAL driver over the same engine (``nnhal bench --floor``)."""

    def __init__(self, path: str | Path, inputs: Sequence[np.ndarray], threads: int = 1):
        self.lr = LiteRT(path, threads=threads, kernels="xnnpack")
        outs = self.lr.run(inputs)
        self.layout = PoolLayout(inputs, [list(o.shape) for o in outs], [o.dtype for o in outs])
        self._fds = [p.hidlMemory.handle.fds[0] for p in self.layout.request.pools]
        self._in = [d["index"] for d in self.lr.inputs]
        self._out = [d["index"] for d in self.lr.outputs]

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        lay, it = self.layout, self.lr.it
        for dst, a in zip(lay.in_views, inputs):
            np.copyto(dst, a)
        request_key(lay.request)
        for fd in self._fds:
            os.fstat(fd)
            fcntl.fcntl(fd, fcntl.F_GETFL)
        for idx, v in zip(self._in, lay.in_views):
            it.set_tensor(idx, v)
        it.invoke()
        for idx, v in zip(self._out, lay.out_views):
            np.copyto(v, it.get_tensor(idx))
        return [v.copy() for v in lay.out_views]

    def close(self) -> None:
        self.layout.close()


@dataclass
class Diff:
    """How one nnhal tensor differs from LiteRT's."""

    name: str
    max_abs: float
    mean_abs: float
    rel: float  # max_abs / the reference's range (float tensors)
    steps: int  # max difference in quantization steps (quantized tensors; 0 for float)
    quantized: bool
    shape_ok: bool = True

    def ok(self, rtol: float = 1e-4, steps: int = 1) -> bool:
        if not self.shape_ok:
            return False
        return self.steps <= steps if self.quantized else self.rel <= rtol

    def __str__(self) -> str:
        name = self.name if len(self.name) <= 48 else "..." + self.name[-45:]
        if not self.shape_ok:
            return f"{name}: shape differs"
        if self.quantized:
            return f"{name}: max {self.steps} step(s), mean {self.mean_abs:.3g} steps"
        return f"{name}: max |err| {self.max_abs:.3g} (rel. to range {self.rel:.2e}), mean {self.mean_abs:.3g}"


def diff(ours: np.ndarray, ref: np.ndarray, desc: TensorDesc) -> Diff:
    if list(ours.shape) != list(ref.shape):
        return Diff(desc.name, np.inf, np.inf, np.inf, 1 << 30, desc.quantized, False)
    if ours.dtype.kind in "iub" and ref.dtype.kind in "iub":
        d = np.abs(ours.astype(np.int64) - ref.astype(np.int64))
        m = int(d.max()) if d.size else 0
        return Diff(desc.name, float(m), float(d.mean()) if d.size else 0.0, 0.0, m, True)
    a, b = ours.astype(np.float64), ref.astype(np.float64)
    d = np.abs(a - b)
    d = np.where(np.isnan(a) & np.isnan(b), 0.0, d)
    rng = float(b.max() - b.min()) if b.size else 0.0
    if rng == 0.0:
        rng = max(float(np.abs(b).max()) if b.size else 0.0, 1e-30)
    m = float(d.max()) if d.size else 0.0
    return Diff(desc.name, m, float(d.mean()) if d.size else 0.0, m / rng, 0, False)


def topk(ours: np.ndarray, ref: np.ndarray, k: int = 5) -> Optional[tuple[bool, float]]:
    """(top-1 equal, top-k overlap) for a classifier output [batch, classes]; None otherwise."""
    if ours.ndim != 2 or ours.shape[1] < 2 or ours.shape != ref.shape:
        return None
    k = min(k, ours.shape[1])
    t1 = bool(np.all(np.argmax(ours, 1) == np.argmax(ref, 1)))
    over = np.mean([len(set(np.argsort(-o)[:k]) & set(np.argsort(-r)[:k])) / k for o, r in zip(ours, ref)])
    return t1, float(over)


def operator_model(model: hal.Model, io: IODescription, index: int) -> Optional[tuple[hal.Model, IODescription]]:
    """The HAL operations TFLite operator ``index`` became, alone: a model whose inputs are the
    operator's non-constant input tensors and whose outputs are its output tensors (constants
    shared with ``model``); None for an operator folded at load."""
    sg = model.main
    ops = [sg.operations[j] for j, t in enumerate(io.hal_to_tflite) if t == index]
    if not ops:
        return None
    L = hal.OperandLifeTime
    made = {o for op in ops for o in op.outputs}
    in_t = [k for k in dict.fromkeys(io.operator_inputs[index]) if k >= 0 and k in io.tensors]
    out_t = [k for k in io.operator_outputs[index] if k in io.tensor_operand]
    ins = [io.tensor_operand[k] for k in in_t]
    outs = [io.tensor_operand[k] for k in out_t]
    used = list(dict.fromkeys([i for op in ops for i in op.inputs] + [o for op in ops for o in op.outputs]))
    remap = {old: new for new, old in enumerate(used)}
    operands = []
    for old in used:
        o = dataclasses.replace(sg.operands[old])
        if old in ins and old not in made:
            o.lifetime = L.SUBGRAPH_INPUT
        elif old in outs:
            o.lifetime = L.SUBGRAPH_OUTPUT
        elif o.lifetime in (L.SUBGRAPH_INPUT, L.SUBGRAPH_OUTPUT, L.TEMPORARY_VARIABLE):  # NOTE: not SUBGRAPH
            if old not in made:
                return None  # NOTE: an input with no TFLite tensor behind it; cannot be fed
            o.lifetime = L.TEMPORARY_VARIABLE
        o.numberOfConsumers = sum(op.inputs.count(old) for op in ops)
        operands.append(o)
    new_ops = [hal.Operation(op.type, [remap[i] for i in op.inputs], [remap[o] for o in op.outputs]) for op in ops]
    sub = hal.Subgraph(operands=operands, operations=new_ops, inputIndexes=[remap[i] for i in ins if i in remap],
                       outputIndexes=[remap[o] for o in outs])
    sub_io = IODescription(inputs=[io.tensors[k] for k in in_t if io.tensor_operand[k] in remap],
                           outputs=[io.tensors[k] for k in out_t])
    return hal.Model(main=sub, referenced=model.referenced, operandValues=model.operandValues,
                     pools=model.pools), sub_io


def isolated(device: Any, model: hal.Model, io: IODescription, lite: "LiteRT") -> list[tuple[int, str, Diff]]:
    """Each TFLite operator's HAL operations run alone on LiteRT's own input tensors (after
    ``lite.run``, made with ``preserve=True``), compared with LiteRT's output tensors: the error an
    operation adds by itself, without what it inherits from earlier ones."""
    res = []
    for i, name in enumerate(io.operator_names):
        sub = operator_model(model, io, i)
        if sub is None:
            continue
        m, sub_io = sub
        session = HalSession(device, m, sub_io)
        outs = session.run([lite.tensor(d.tensor) for d in sub_io.inputs])
        session.close()
        for a, d in zip(outs, sub_io.outputs):
            res.append((i, name, diff(a, lite.tensor(d.tensor), d)))
    return res
