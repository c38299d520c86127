"""Running a :class:`~nnhal.delegate.plan.Plan`: each partition in order,
tensors passed between them in the model's own types and quantization.

- an NNAPI partition is a HAL model (``load_operators``, at the plan's HAL
  version) prepared on its device through the face of that version (HIDL
  1.0-1.3 with that version's method, AIDL 1-4 from API 31 when the device
  has an AIDL face: :mod:`nnhal.runtime.face`) and executed on shared memory
  as the delegate does at its level (``Levels.execution``: each request
  sent, a burst, or a reusable execution), or, with ``Options.devices``,
  compiled by the client runtime over those devices (speaking no newer
  interface than the API level's); before HAL 1.3 its int8 inputs and outputs
  are moved to uint8 and back;
- a CPU partition is a TFLite sub-model (:func:`nnhal.delegate.cut.submodel`)
  run by LiteRT's interpreter (``kernels``: its builtin, reference or
  XNNPACK kernels).

Everything depending only on the plan (sub-models, preparations) is done
once in the constructor; :meth:`Runner.run` sets inputs and runs.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Optional, Sequence

import numpy as np

from nnhal.delegate import compile_cache, cut, halmodel
from nnhal.delegate.contain import (
    ContainedLiteRT,
    LiteRTCrash,
    LiteRTProcess,
    describe_operators,
    in_process,
    open_litert,
)
from nnhal.delegate.model import Graph
from nnhal.delegate.plan import PartitionPlan, Plan, Planner, Prebuilt
from nnhal.delegate.run import HalSession
from nnhal.tflite.loader import TensorDesc, free_model
from nnhal.tflite.schema import MissingDependency

DeviceOf = Callable[[str], Any]


class PlanError(RuntimeError):
    """The plan cannot run (``status``: the command's exit status: 2 for a model nnhal and LiteRT
    cannot run together, 3 for a device that refuses)."""

    def __init__(self, message: str, status: int = 2):
        super().__init__(message)
        self.status = status


def input_descs(g: Graph) -> list[TensorDesc]:
    """The model's inputs as ``make_inputs`` / ``check_inputs`` take them."""
    out = []
    for k in g.inputs:
        t = g.tensors[k]
        shape = [-1 if s == -1 else d for d, s in zip(t.shape, t.signature)] if t.signature else list(t.shape)
        out.append(TensorDesc(t.name, k, shape, t.type, t.scale if len(t.scales) == 1 else 0.0,
                              t.zero_point if len(t.zero_points) == 1 else 0))
    return out


def output_descs(g: Graph) -> list[TensorDesc]:
    out = []
    for k in g.outputs:
        t = g.tensors[k]
        p = g.producer.get(k, -1)
        out.append(TensorDesc(t.name, k, list(t.shape), t.type, t.scale if len(t.scales) == 1 else 0.0,
                              t.zero_point if len(t.zero_points) == 1 else 0, p,
                              g.operators[p].name if p >= 0 else ""))
    return out


class HalPartition:
    def __init__(self, planner: Planner, p: PartitionPlan, prebuilt: Optional[Prebuilt] = None):
        o = planner.o
        built = prebuilt.take(Prebuilt.key(p.load_ops, p.inputs, p.outputs)) if prebuilt is not None else None
        self.model, io, self.unsigned = built if built is not None else planner.hal_model(p.load_ops, p.inputs,
                                                                                          p.outputs)
        self.folded = dict(io.folded_outputs)
        self.ins = [d.tensor for d in io.inputs]
        self.outs = [d.tensor for d in io.outputs]
        self.int8_out = {k for k in self.outs if planner.g.tensors[k].type == "int8"}
        sg = self.model.main
        # NOTE: the dtype each HAL input holds (an int64 TFLite tensor is TENSOR_INT32 in the HAL)
        self.in_dtypes = [halmodel.dtype_of(sg.operands[i].type) for i in sg.inputIndexes]
        self.runtime = self.session = None
        self.how = "prepared"  # NOTE: or loaded from / saved to the compilation cache (Options.cache)
        if not self.model.main.operations:  # NOTE: every output computed at load (SHAPE, DENSIFY, ...)
            self.run_hal = lambda xs: []
            return
        try:
            if o.devices:
                from nnhal.runtime import Compilation

                self.runtime = Compilation(self.model, o.devices, version=planner.version)
                self.run_hal = self._run_runtime
            else:
                if self.unsigned:
                    io = dataclasses.replace(io, inputs=[_as_u8(d) for d in io.inputs],
                                             outputs=[_as_u8(d) for d in io.outputs])
                face = planner.face(o.targets[0])
                if o.cache is not None:
                    prepared, self.how = compile_cache.prepare(face, self.model, o.preference, o.allow_fp16, o.cache,
                                                               Prebuilt.key(p.load_ops, p.inputs, p.outputs))
                else:
                    prepared = halmodel.prepare(face, self.model, o.preference, o.allow_fp16)
                self.session = HalSession(face.device, self.model, io, prepared=prepared,
                                          mode=planner.levels.execution)
                self.run_hal = self.session.run
        except RuntimeError as e:
            free_model(self.model)
            raise PlanError(f"partition {p.index} on {o.device_label}: {e}", 3) from None

    def _run_runtime(self, xs: list) -> list:
        out = self.runtime.run(xs)
        return [out[n] for n in self.runtime.output_names]

    def run(self, values: dict) -> None:
        xs = [values[k] for k in self.ins]
        if self.unsigned:
            xs = [(a.astype(np.int16) + 128).astype(np.uint8) if a.dtype == np.int8 else a for a in xs]
        # NOTE: converted only where the HAL input's dtype differs (an int64 tensor as TENSOR_INT32)
        xs = [a if dt is None or (a.__class__ is np.ndarray and a.dtype == dt) else np.asarray(a).astype(dt, copy=False)
              for a, dt in zip(xs, self.in_dtypes)]
        ys = self.run_hal(xs)
        for k, y in zip(self.outs, ys):
            values[k] = y
        if self.unsigned:
            for k in self.outs:
                if k in self.int8_out:
                    values[k] = (values[k].astype(np.int16) - 128).astype(np.int8)
        values.update(self.folded)

    def close(self) -> None:
        if self.runtime is not None:
            self.runtime.close()
        elif self.session is not None:
            self.session.close()
        free_model(self.model)


def _as_u8(d: TensorDesc) -> TensorDesc:
    return dataclasses.replace(d, dtype="uint8", zero_point=d.zero_point + 128) if d.dtype == "int8" else d


class _Cpu:
    def __init__(self, g: Graph, p: PartitionPlan, kernels: str, threads: int, plan: Plan,
                 process: Callable[[], Optional[LiteRTProcess]]):
        self.ins, self.outs = p.inputs, p.outputs
        self.lite = None
        self.seconds = self.round_trip = 0.0
        self.g, self.ops, self.kernels, self.threads = g, p.load_ops, kernels, threads
        if not p.load_ops or not p.outputs:
            return  # NOTE: only float16 weights the HAL partitions fold, or DENSIFYs done at load
        data = cut.submodel(g, p.load_ops, p.inputs, p.outputs)
        ops = describe_operators([g.operators[i].name for i in p.load_ops], p.load_ops)
        try:
            # NOTE: LiteRT resolves custom operators when it allocates the tensors, which creating it does
            self.lite = open_litert(data, threads=threads, kernels=kernels, label=f"CPU partition {p.index} ({ops})",
                                    process=process())
            self.ins = [int(d["index"]) for d in self.lite.inputs]
            self.outs = [int(d["index"]) for d in self.lite.outputs]
        except MissingDependency as e:
            raise PlanError(f"LiteRT is required for partition {p.index} on the CPU ({e})") from None
        except LiteRTCrash as e:
            raise PlanError(str(e) + culprit(g, p.load_ops, None, kernels, threads), e.status) from None
        except (RuntimeError, ValueError) as e:
            # NOTE: the root cause once: the custom operators LiteRT lacks, and why each is on the CPU
            why = "; ".join(f"operator {i} {g.operators[i].name} is on the CPU: {plan.operators[i].reason}"
                            for i in p.operators if g.operators[i].custom)
            hint = " (--plan max maps it through the HAL)" if plan.options.plan == "delegate" else ""
            raise PlanError(f"LiteRT cannot run CPU partition {p.index}: {str(e).strip().splitlines()[0]}"
                            + (f"; {why}{hint}" if why else "")) from None

    def run(self, values: dict) -> None:
        if self.lite is None:
            return
        t0 = time.perf_counter()
        try:
            ys = self.lite.run([values[k] for k in self.ins])
        except LiteRTCrash as e:
            raise LiteRTCrash(str(e) + culprit(self.g, self.ops, values, self.kernels, self.threads), e.status) from None
        self.round_trip = time.perf_counter() - t0
        # NOTE: a contained LiteRT's own time (its child's timer); in process, the call's
        self.seconds = self.lite.seconds if isinstance(self.lite, ContainedLiteRT) else self.round_trip
        for k, y in zip(self.outs, ys):
            values[k] = y

    def close(self) -> None:
        if isinstance(self.lite, ContainedLiteRT):
            self.lite.close()
        self.lite = None


def culprit(g: Graph, ops: Sequence[int], values: Optional[dict], kernels: str, threads: int) -> str:
    """After LiteRT's process ended (a signal, a hang) on a partition of several operators: the first of
    ``ops`` that ends it alone as well, tried in turn in a process of their own (prepared, and unless
    ``values`` is None, as when it ended preparing, run on ``values`` and what the earlier ones computed),
    as "; operator i NAME alone ... too"; "" when none does or one cannot be tried alone."""
    if len(ops) < 2:
        return ""  # NOTE: its one operator is named already
    vals = dict(values or {})
    proc: Optional[LiteRTProcess] = None
    try:
        for i in ops:
            op = g.operators[i]
            ins = [k for k in dict.fromkeys(op.inputs) if k >= 0 and not g.is_const(k)]
            outs = [k for k in op.outputs if k >= 0]
            if values is not None and any(k not in vals for k in ins):
                return ""
            proc = proc or LiteRTProcess()
            try:
                lr = ContainedLiteRT(proc, cut.submodel(g, [i], ins, outs), threads, kernels,
                                     label=f"operator {i} {op.name} alone")
                if values is not None:
                    vals.update(zip(outs, lr.run([vals[k] for k in ins])))
                lr.close()
            except LiteRTCrash as e:
                how = "crashes" if "crashed" in str(e) else "hangs" if "hung" in str(e) else "ends"
                return f"; operator {i} {op.name} alone {how} it too"
            except (RuntimeError, ValueError):
                return ""  # NOTE: LiteRT refuses it alone: no telling
    finally:
        if proc is not None:
            proc.close()
    return ""


def check_dataflow(plan: Plan) -> None:
    """Every tensor a partition reads is a model input, a constant (or variable) or an earlier partition's
    output, and every model output a model input, a constant or a partition's output (PlanError, status
    2, naming the first that is not): what :mod:`nnhal.tflite.graphcheck` says of a verified file, held
    for any graph a plan is made of."""
    g = plan.graph
    ready = set(g.inputs) | {k for k in range(len(g.tensors)) if g.is_const(k)}
    written: set[int] = set()
    for p in plan.partitions:
        for k in p.inputs:
            if k not in ready:
                raise PlanError(f"partition {p.index} reads tensor {k} ({g.tensors[k].name}), which nothing writes")
        ready.update(p.outputs)
        written.update(p.outputs)
    for k in g.outputs:
        if k not in written and k not in g.inputs and not g.tensors[k].const:
            raise PlanError(f"model output tensor {k} ({g.tensors[k].name}) is written by nothing")


class Runner:
    """The plan's partitions ready to run (``per_tensor``: every tensor an operator writes kept in
    :attr:`values` after a run, not only the ones crossing partitions)."""

    def __init__(self, plan: Plan, device_of: DeviceOf | None = None, kernels: str = "builtin", threads: int = 1,
                 per_tensor: bool = False):
        self.plan, self.device_of = plan, device_of
        g = plan.graph
        self.planner = planner = Planner(g, plan.options, device_of)
        self.engines: list[Any] = []
        self.times: list[float] = [0.0] * len(plan.partitions)
        self.contained = 0.0  # the last run's round trips to LiteRT's process beyond its own time (s)
        self._values: dict[int, np.ndarray] = {}
        self._last: Optional[tuple[Sequence[np.ndarray], list[np.ndarray]]] = None
        self._check_cpu(plan)
        check_dataflow(plan)
        self._process: Optional[LiteRTProcess] = None
        try:
            if any(p.where == "cpu" and p.load_ops and p.outputs for p in plan.partitions):
                self.litert_process()  # NOTE: started first: it imports LiteRT while the HAL partitions prepare
            for p in plan.partitions:
                if per_tensor:
                    written = sorted({k for i in p.load_ops for k in g.operators[i].outputs if k >= 0})
                    p = dataclasses.replace(p, outputs=written)
                if p.where == "nnapi":
                    e = HalPartition(planner, p, plan.prebuilt)
                else:
                    e = _Cpu(g, p, kernels, threads, plan, self.litert_process)
                self.engines.append(e)
        except Exception:
            self.close()
            raise
        finally:
            plan.prebuilt.release()  # NOTE: what no partition took (another runner of the plan builds its own)
        self._direct = self._direct_session()

    def _direct_session(self) -> Optional[HalSession]:
        """The session of a plan that is one HAL partition reading the model's inputs and writing its
        outputs as they are (no uint8 moves, no folded outputs, no tensor twice): run without the
        dictionary of tensors (:attr:`values` made from the last run when asked)."""
        g = self.plan.graph
        if len(self.engines) != 1 or not isinstance(self.engines[0], HalPartition):
            return None
        e = self.engines[0]
        outs = list(g.outputs)
        if (e.session is None or e.unsigned or e.folded or e.ins != list(g.inputs) or e.outs != outs
                or len(set(outs)) != len(outs) or set(outs) & set(g.inputs) or len(set(e.ins)) != len(e.ins)
                or min(len(e.session.out_desc), len(e.session.out_dims)) < len(outs)):
            return None
        return e.session

    @staticmethod
    def _check_cpu(plan: Plan) -> None:
        cpu = [o for o in plan.operators if o.where == "cpu" and o.index not in plan.graph.folded]
        if not cpu:
            return
        from nnhal.tflite.schema import interpreter_module

        try:
            interpreter_module()
        except MissingDependency:
            causes = "; ".join(f"{n} x{c}: {r}" for r, c, n in
                               ((r, c, ", ".join(names)) for r, c, names in plan.causes()))
            raise PlanError(f"{len(cpu)} operator(s) stay on the CPU and LiteRT is not installed "
                            f"(pip install 'nnhal[litert]'); why: {causes}") from None

    def litert_process(self) -> Optional[LiteRTProcess]:
        """The one child process of this runner's CPU partitions (:mod:`nnhal.delegate.contain`), started
        when the first needs it; None when LiteRT runs in process."""
        if self._process is None and not in_process():
            self._process = LiteRTProcess()
        return self._process

    @property
    def values(self) -> dict[int, np.ndarray]:
        """The tensors of the last run: the model's inputs and what each partition wrote."""
        if self._last is not None:
            inputs, outs = self._last
            self._values = dict(zip(self.plan.graph.inputs, inputs))
            self._values.update(zip(self.plan.graph.outputs, outs))
            self._last = None
        return self._values

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The model's outputs, in its output order.  ``times`` per partition: a contained CPU partition's
        by LiteRT's own timer, its round trip beyond that summed in ``contained``."""
        direct = self._direct
        if direct is not None:
            # NOTE: the HAL partition's own checks of its inputs' dtypes, in a loop of their own
            e = self.engines[0]
            for a, dt in zip(inputs, e.in_dtypes):
                # NOTE: ``is`` first: a builtin dtype is one object, and numpy's == costs a conversion
                if a.__class__ is not np.ndarray or (dt is not None and a.dtype is not dt and a.dtype != dt):
                    break
            else:
                t0 = time.perf_counter()
                ys = direct.run(inputs)
                self.times[0] = time.perf_counter() - t0
                outs = ys[:len(e.outs)]
                self._last = (inputs, outs)
                return list(outs)
        g = self.plan.graph
        values: dict[int, np.ndarray] = dict(zip(g.inputs, inputs))
        self.contained = 0.0
        for n, e in enumerate(self.engines):
            t0 = time.perf_counter()
            e.run(values)
            self.times[n] = time.perf_counter() - t0
            if isinstance(e, _Cpu) and isinstance(e.lite, ContainedLiteRT):
                self.times[n] -= e.round_trip - e.seconds
                self.contained += e.round_trip - e.seconds
        self._values, self._last = values, None
        return [values[k] if k in values else g.value(k) for k in g.outputs]

    def close(self) -> None:
        for e in self.engines:
            e.close()
        self.engines, self._direct = [], None
        self.planner.close()
        if self._process is not None:
            self._process.close()
            self._process = None

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def run_plan(plan: Plan, device_of: DeviceOf, inputs: Sequence[np.ndarray], **kw: Any) -> list[np.ndarray]:
    """One run of ``plan`` (prepared, run, released)."""
    r = Runner(plan, device_of, **kw)
    try:
        return r.run(inputs)
    finally:
        r.close()


__all__ = ["PlanError", "Runner", "run_plan", "input_descs", "output_descs"]
