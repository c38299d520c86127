"""The ``litert-cpu`` backend: HAL 1.3 models lowered to TFLite
(:mod:`nnhal.drivers.litert.lower`, the importer's mapping table read HAL -> TFLite)
and run by LiteRT's interpreter with XNNPACK, under the shared HAL front end
(``nnhal.driver``), which does everything the HAL specifies around it:
validation (the same as the reference's: this driver never accepts a model
``sample-all`` rejects), callbacks, deadlines, fences, bursts, memory
domains, caching.

* ``supported``: true only where :func:`nnhal.drivers.litert.lower.check_operation`
  finds a TFLite operator computing exactly the HAL operation for those
  operand types, shapes and parameters; every false comes with its reason.
* ``compile``: lowers, then builds one interpreter (``num_threads``, default
  1).  XNNPACK is LiteRT's default delegate; a model holding an operation in
  ``BUILTIN_ONLY`` (XNNPACK's rounding breaks the 1-step VTS tolerance there,
  measured with the conformance vectors) gets LiteRT's builtin kernels
  (``BUILTIN_WITHOUT_DEFAULT_DELEGATES``); one holding a quantized operation in
  ``REFERENCE_KERNELS`` TFLite's reference kernels (``BUILTIN_REF``: exact there,
  where XNNPACK's and the optimized kernels' requantization rounds otherwise).
* ``run``: one interpreter per prepared model, used under a lock (a LiteRT
  interpreter is not reentrant); inputs of other shapes than the last
  execution resize the interpreter (dynamic shapes); the deadline is checked
  before and after ``invoke`` (LiteRT cannot be interrupted).  Inputs come
  still in their request pools (arrays over a mapped pool's bytes, the front
  end's ``PoolInput`` of the others, read with ``pread``) and are copied
  straight into the interpreter's input tensors, one copy.
* caching: the lowered flatbuffer is the data cache, with the HAL model
  (types and shapes, for request validation) in the authenticated model cache
  (``nnhal.driver.cache.encode_opaque``).
"""

from __future__ import annotations

import logging
import operator
import os
import re
import threading
import time
from typing import Any, Optional, Sequence

import numpy as np

from nnhal import hal
from nnhal.driver.backend import Backend
from nnhal.drivers.litert import lower  # NOTE: with the device opened, not at a model's first prepare
from nnhal.engine.executor import DeadlineMissed
from nnhal.ops.base import OpExecutionError
from nnhal.platform.memory import InvalidMemory

log = logging.getLogger("nnhal.driver")

T = hal.OperandType
Op = hal.OperationType
VERSION_STRING = "nnhal-litert-cpu 0.1 (LiteRT + XNNPACK)"
THREADS_ENV = "NNHAL_LITERT_THREADS"

# (operation, input 0 type) whose XNNPACK kernel is more than 1 step off the reference vectors:
# the model runs on LiteRT's builtin kernels instead (measured: tests/test_litert_driver.py)
BUILTIN_ONLY: frozenset = frozenset()
# operations whose quantized results, on XNNPACK and LiteRT's optimized kernels, are 1 step off the reference in
# some values (one rounding where the reference requantizes with two), and on TFLite's reference kernels equal to
# it: a model holding one runs on those.  GROUPED_CONV_2D (SPLIT, CONV_2D per group, CONCATENATION): 0.8-1.5%
# of values 1 off, which a following TRANSPOSE_CONV_2D amplified beyond a graph's criteria (found by nnhal vts
# --section random, seed 0 case 7858); on the reference kernels none of 4138 values of the same 87 random models
# (python -m nnhal.tools.litert_rounding --ops GROUPED_CONV_2D --models 100).  CONV_2D, DEPTHWISE_CONV_2D and TRANSPOSE_CONV_2D, as exact there, stay on
# XNNPACK: the int8 models litert-cpu runs (kws, vww) depend on its speed.
REFERENCE_KERNELS: frozenset = frozenset({hal.OperationType.GROUPED_CONV_2D})
# operations TFLite's reference kernels compute otherwise than NNAPI, refused in a model that runs on them (the
# only ones of every conformance vector run on the reference kernels: 140 of 264 LOCAL_RESPONSE_NORMALIZATION
# models fail, the window short of its upper channels; found by nnhal vts --section random, seed 0 case 8882)
WRONG_ON_REFERENCE_KERNELS: dict = {
    hal.OperationType.LOCAL_RESPONSE_NORMALIZATION:
        "TFLite's reference LOCAL_RESPONSE_NORMALIZATION sums a window short of NNAPI's (measured: 140 of the 264 "
        "conformance models fail on it), and this model runs on the reference kernels for its quantized "
        "GROUPED_CONV_2D",
}

_SHAPE = operator.attrgetter("shape")  # NOTE: an input's shape without a Python frame per execution


def available() -> bool:
    """Whether ai-edge-litert (the interpreter and the schema module) can be imported."""
    try:
        from ai_edge_litert import interpreter, schema_py_generated  # noqa: F401
    except ImportError:
        return False
    return True


class LiteRTCompiled:
    """A lowered model and its interpreter."""

    # NOTE: the front end hands over the inputs still in their request pools (arrays over a mapped pool's
    # bytes, PoolInputs of the others): each is copied straight into the interpreter's input tensor (one
    # copy: set_tensor, or pread into the tensor's memory)
    reads_inputs = True

    def __init__(self, flatbuffer: bytes, num_threads: int, kernels: str,
                 omitted_values: Sequence[Optional[np.ndarray]] = (), output_dims: Sequence[Sequence[int]] = ()):
        """``omitted_values``: per graph input, what the HAL gives it when a request omits it
        (``nnhal.tflite.lower.omitted_input_values``), None where the execution must fail;
        ``output_dims``: the model's output dimensions (0: any), which LiteRT's outputs must have;
        ``kernels``: "auto" (XNNPACK, else the builtin kernels), "builtin" or "ref" (:func:`kernels_for`)."""
        from ai_edge_litert import interpreter as lrt

        self.flatbuffer = flatbuffer
        self.omitted_values = list(omitted_values)
        self.kernels = kernels
        try:
            self._it = self._interpreter(lrt, num_threads, kernels)
        except (ValueError, RuntimeError) as e:
            if kernels != "auto":
                raise OpExecutionError(f"LiteRT refused the lowered model: {e}") from None
            # NOTE: XNNPACK can refuse at prepare a node it claimed at partitioning: LiteRT's builtin
            # kernels run the whole model instead (supported() only admits what both compute exactly)
            log.info("XNNPACK refused the lowered model (%s); using LiteRT's builtin kernels", e)
            try:
                self._it = self._interpreter(lrt, num_threads, "builtin")
            except (ValueError, RuntimeError) as e2:
                raise OpExecutionError(f"LiteRT refused the lowered model: {e2}") from None
            self.kernels = "builtin"
        self._inputs = [d["index"] for d in self._it.get_input_details()]
        self._outputs = [d["index"] for d in self._it.get_output_details()]
        self._shapes = [tuple(int(n) for n in d["shape"]) for d in self._it.get_input_details()]
        self.output_dims = [tuple(int(d) for d in dims) for dims in output_dims]
        self._outputs_checked = False  # NOTE: output shapes follow the input shapes: checked once per resize
        self._views = [self._it.tensor(idx) for idx in self._inputs]  # NOTE: functions: safe to keep
        self._lock = threading.Lock()

    def _check_output_shapes(self, outs: list[np.ndarray]) -> None:
        # NOTE: a shape the model contradicts is never a HAL result (found by nnhal.tools.status_diff:
        # XNNPACK's TRANSPOSE_CONV made another output shape where the builtin kernel refused the model)
        for k, (o, dims) in enumerate(zip(outs, self.output_dims)):
            if dims and (o.ndim != len(dims) or any(d and d != n for d, n in zip(dims, o.shape))):
                raise OpExecutionError(f"LiteRT made output {k} of shape {list(o.shape)}, which the model's "
                                       f"dimensions {list(dims)} contradict")
        self._outputs_checked = True

    def _omitted(self, k: int) -> np.ndarray:
        v = self.omitted_values[k] if k < len(self.omitted_values) else None
        if v is None:
            raise OpExecutionError(f"model input {k} is omitted and the lowered graph needs its value "
                                   f"(LiteRT graph inputs always have one)")
        return v

    def _interpreter(self, lrt: Any, num_threads: int, kernels: str) -> Any:
        kind = {"auto": lrt.OpResolverType.AUTO, "builtin": lrt.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
                "ref": lrt.OpResolverType.BUILTIN_REF}[kernels]
        from nnhal.tflite.schema import make_interpreter

        return make_interpreter(model_content=self.flatbuffer, num_threads=num_threads,
                                experimental_op_resolver_type=kind)

    def run(self, inputs: Sequence[Optional[np.ndarray]], deadline_ns: Optional[int] = None,
            loop_timeout_ns: int = 0, omitted: Sequence[int] = ()) -> list[np.ndarray]:
        try:
            shapes = list(map(_SHAPE, inputs))  # NOTE: numpy shapes are tuples of ints
        except AttributeError:  # None: an omitted input
            inputs = [self._omitted(k) if x is None else x for k, x in enumerate(inputs)]
            shapes = list(map(_SHAPE, inputs))
        if deadline_ns is not None and time.monotonic_ns() >= deadline_ns:
            raise DeadlineMissed("the deadline passed before the execution started")
        # NOTE: acquire / release rather than ``with`` (half its cost, per execution); the finally releases it
        lock = self._lock
        lock.acquire()
        it = self._it
        try:
            if shapes != self._shapes:
                if any(0 in s for s in shapes):
                    raise OpExecutionError("a zero-sized input (LiteRT does not run zero-sized tensors)")
                for idx, s in zip(self._inputs, shapes):
                    it.resize_tensor_input(idx, list(s), strict=False)
                it.allocate_tensors()
                self._shapes = shapes
                self._outputs_checked = False
            for idx, view, x in zip(self._inputs, self._views, inputs):
                # NOTE: an array (over a mapped pool's bytes, or an omitted input's value): set_tensor's one copy
                if x.__class__ is np.ndarray:
                    it.set_tensor(idx, x)
                elif not _read_into_tensor(view, x):  # NOTE: a PoolInput of an unmapped pool: pread
                    it.set_tensor(idx, x.array())
            it.invoke()
            # NOTE: get_tensor copies; a TFLite scalar (a reduction to nothing) is the HAL's [1]
            outs = list(map(it.get_tensor, self._outputs))
            for o in outs:
                if not o.ndim:
                    outs = [y.reshape(1) if not y.ndim else y for y in outs]
                    break
            if not self._outputs_checked:
                self._check_output_shapes(outs)
        except InvalidMemory:
            raise  # NOTE: a request pool that cannot be read: the front end answers INVALID_ARGUMENT
        except (ValueError, RuntimeError) as e:
            self._shapes = []  # NOTE: the next execution resizes again
            raise OpExecutionError(f"LiteRT: {e}") from None
        finally:
            lock.release()
        if deadline_ns is not None and time.monotonic_ns() >= deadline_ns:
            raise DeadlineMissed("the deadline passed during the execution")
        return outs


def _read_into_tensor(view: Any, x: Any) -> bool:
    """Reads a PoolInput straight into the interpreter's input tensor (False:
    the tensor is not that input's exact dtype and size; set_tensor judges it).
    NOTE: every reference to the tensor's memory is gone when this returns, as
    LiteRT's invoke() requires (it refuses while a numpy view of it lives)."""
    t = view()
    try:
        # NOTE: LiteRT hands out some input tensors read-only (an EXPAND_DIMS axis, an ARGMAX axis, a TOPK_V2
        # k given as a model input: found by nnhal vts --section random); set_tensor then writes them
        if t.dtype != x.dtype or t.nbytes != x.nbytes or not t.flags.c_contiguous or not t.flags.writeable:
            return False
        with memoryview(t) as m, m.cast("B") as flat:
            x.read_into(flat)
        return True
    finally:
        del t


class LiteRTBackend(Backend):
    """HAL models lowered to LiteRT (XNNPACK)."""

    name = "litert"
    caching = True

    def __init__(self, num_threads: Optional[int] = None, version_string: str = VERSION_STRING):
        if num_threads is None:
            try:
                num_threads = max(1, int(os.environ.get(THREADS_ENV, "1")))
            except ValueError:
                num_threads = 1
        self.num_threads = num_threads
        self.version_string = version_string
        self._trial_lock = threading.Lock()
        self._trial_kept: Optional[tuple[hal.Model, LiteRTCompiled]] = None

    measured_capabilities = True  # NOTE: timed: kept per machine (nnhal.driver.capcache)

    def capabilities(self) -> hal.Capabilities:
        from nnhal.drivers.litert.caps import measure

        return measure(self)

    def supported(self, model: hal.Model, defs: list) -> list[tuple[bool, str]]:
        from nnhal.platform import memory as hal_memory

        with self._trial_lock:
            kept = self._trial_kept
        if kept is not None and kept[0] is model:
            # NOTE: the very model whose every operation was claimed and whose trial is kept (the front end
            # passes the copy it kept of a model asked again with pools of the same bytes: prepared_states.py)
            return [(True, "")] * len(model.main.operations)
        pools = []
        try:
            for m in model.pools:
                pools.append(hal_memory.private_bytes(m))  # NOTE: a frozen pool mapped, not copied
            views = [p.view for p in pools]
            ops = model.main.operations
            wrong = [_wrong_on_reference_kernels(model, op) for op in ops] if kernels_for(model) == "ref" else []
            trial = None
            if not model.referenced and not any(wrong) and all(d is not None for d in defs):
                # NOTE: the trial lowering plans every operation as check_operation does (without IF, which
                # check_operation judges beyond what lowering it checks): when it prepares, each operation
                # passes and none is planned twice; otherwise the per-operation checks below give the reasons
                trial = self._trial(model, views)
                if not trial[1]:
                    return [(True, "")] * len(ops)
            out = []
            f16, shapes = lower.uses_float16(model), lower.static_shapes(model, views)
            for op, d in zip(ops, defs):
                reason = "not a valid operation" if d is None else lower.check_operation(model, views, op, f16,
                                                                                         shapes)
                out.append((not reason, reason))
            for j, why in enumerate(wrong):
                if why and out[j][0]:
                    out[j] = (False, why)
            if all(ok for ok, _ in out):
                # NOTE: claimed only where LiteRT also prepares the lowered model (it checks shapes the
                # operation-by-operation check does not): the trial is kept for compile()
                k, reason = self._trial(model, views) if trial is None else trial
                if reason:
                    for j in range(len(out)) if k is None else [k]:
                        out[j] = (False, reason)
            return out
        finally:
            for p in pools:
                p.close()

    def _kept_for(self, model: hal.Model, keep: bool) -> Optional[LiteRTCompiled]:
        """The kept trial if it is of an equal model (the front end copies the model per call)."""
        with self._trial_lock:
            kept = self._trial_kept
            if not keep:
                self._trial_kept = None
        try:
            same = kept is not None and (kept[0] is model or kept[0] == model)
        except Exception:  # noqa: BLE001  # NOTE: uncomparable contents: not the same model
            same = False
        return kept[1] if same else None

    def _trial(self, model: hal.Model, views: list) -> tuple[Optional[int], str]:
        """(operation, why LiteRT refuses it) -- (None, why) for the whole model, (None, "") when it
        prepares; a prepared trial is kept for compile() of the same model."""
        if self._kept_for(model, keep=True) is not None:
            return None, ""  # NOTE: getSupportedOperations_1_3 then prepareModel_1_3 of one model: one trial
        try:
            fb, owners = lower.lower_traced(model, views)
            compiled = LiteRTCompiled(fb, self.num_threads, kernels_for(model), lower.omitted_input_values(model),
                                      _output_dims(model))
        except lower.Unsupported as e:
            return None, f"the model does not lower: {e}"
        except OpExecutionError as e:
            node = re.search(r"Node number (\d+) \(", str(e))
            k = owners[int(node.group(1))] if node and int(node.group(1)) < len(owners) else None
            return k, f"LiteRT refuses it when it prepares the lowered model ({e})"
        with self._trial_lock:
            self._trial_kept = (model, compiled)
        return None, ""

    def compile(self, model: hal.Model, pool_views: list, deadline_ns: Optional[int]) -> LiteRTCompiled:
        kept = self._kept_for(model, keep=False)
        if kept is not None:
            return kept  # NOTE: the supported() trial of this model

        try:
            fb = lower.lower(model, pool_views)
        except lower.Unsupported as e:
            raise OpExecutionError(f"cannot lower the model: {e}") from None
        return LiteRTCompiled(fb, self.num_threads, kernels_for(model), lower.omitted_input_values(model),
                              _output_dims(model))

    def cache_encode(self, model: hal.Model, pool_views: list, compiled: Any, hal_version: int, priority: int,
                     key: bytes, token: bytes) -> tuple[bytes, list, int]:
        from nnhal.driver import cache as driver_cache

        return driver_cache.encode_opaque(model, compiled.flatbuffer, hal_version, priority, key,
                                          self.version_string, token)

    def cache_load(self, model_fd: int, data_fd: int, key: bytes, token: bytes) -> Any:
        from nnhal.driver import cache as driver_cache

        r = driver_cache.load_opaque(model_fd, data_fd, key, self.version_string, token)
        # NOTE: the interpreter is rebuilt from the authenticated flatbuffer: no lowering, no validation
        compiled = LiteRTCompiled(r.data, self.num_threads, kernels_for(r.model),
                                  lower.omitted_input_values(r.model), _output_dims(r.model))
        return driver_cache.Restored(r.model, [], compiled, r.hal_version, r.priority)


def _output_dims(model: hal.Model) -> list[list[int]]:
    return [list(model.main.operands[i].dimensions) for i in model.main.outputIndexes]


def kernels_for(model: hal.Model) -> str:
    """The LiteRT kernels the lowered ``model`` runs on: "ref" (TFLite's reference kernels) where it holds a
    quantized operation of ``REFERENCE_KERNELS``, "builtin" where one that XNNPACK computes wrongly, else "auto"."""
    if any(op.type in REFERENCE_KERNELS and g.operands[op.inputs[0]].type in _QUANT8
           for g in [model.main, *model.referenced] for op in g.operations if op.inputs):
        return "ref"
    ops, operands = model.main.operations, model.main.operands
    if any((op.type, operands[op.inputs[0]].type) in BUILTIN_ONLY or _constant_dequantize(op, operands)
           for op in ops if op.inputs):
        return "builtin"
    return "auto"


def _wrong_on_reference_kernels(model: hal.Model, op: hal.Operation) -> str:
    """Why ``op`` (an IF / WHILE: an operation of a graph it calls) cannot run on TFLite's reference kernels."""
    if op.type in WRONG_ON_REFERENCE_KERNELS:
        return WRONG_ON_REFERENCE_KERNELS[op.type]
    if op.type in (hal.OperationType.IF, hal.OperationType.WHILE):
        for g in model.referenced:  # NOTE: conservative: any graph the model calls
            for inner in g.operations:
                if inner.type in WRONG_ON_REFERENCE_KERNELS:
                    return WRONG_ON_REFERENCE_KERNELS[inner.type]
    return ""


_QUANT8 = (hal.OperandType.TENSOR_QUANT8_ASYMM, hal.OperandType.TENSOR_QUANT8_ASYMM_SIGNED)


def _constant_dequantize(op: hal.Operation, operands: list) -> bool:
    """DEQUANTIZE of a constant: XNNPACK fails to set it up, or leaves its result unwritten (found by
    nnhal vts --section random); LiteRT's builtin kernel computes it."""
    return op.type == hal.OperationType.DEQUANTIZE and operands[op.inputs[0]].lifetime in (
        hal.OperandLifeTime.CONSTANT_COPY, hal.OperandLifeTime.CONSTANT_REFERENCE)
