"""Executions of a :class:`~nnhal.runtime.compilation.Compilation`, as NNAPI's
``ANeuralNetworksExecution`` (``compute``, ``startCompute`` with an
``ANeuralNetworksEvent``, ``burstCompute``, ``startComputeWithDependencies``)
over each partition's prepared model, through its device's face
(:mod:`nnhal.runtime.face`: AIDL or HIDL 1.3): numpy arrays in and out, one
request per partition, the partitions' temporaries in shared memory between
them.

Modes: ``sync`` (``executeSynchronously``), ``async`` (HIDL ``execute_1_3``
and a callback; AIDL has no asynchronous execution, the synchronous one runs
on the event's thread, as Android's runtime does), ``burst`` (one burst per
partition, made at the first burst execution and reused by later ones: the
HIDL 1.2 ``nnhal.burst.BurstController``, which has no deadline or loop
timeout, or the AIDL ``IBurst`` with its memory tokens), ``fenced``
(``executeFenced``, each partition waiting for the previous one's sync fence;
every output must then have a known shape).
Outputs of unknown shape get a buffer that grows when the driver answers
OUTPUT_INSUFFICIENT_SIZE with the real shape (as Android's runtime).  A
partition that fails (other than by a missed deadline) is prepared and run
on the CPU reference, and stays there.  Device memories
(:class:`nnhal.runtime.memory.DeviceMemory`) pass as tokens.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any, Optional

import numpy as np

from nnhal import hal
from nnhal.platform import fence as hal_fence
from nnhal.platform import memory as hal_memory
from nnhal.runtime.compilation import Compilation, CompilationError, Step
from nnhal.runtime.model import numpy_dtype

S = hal.ErrorStatus
MODES = ("sync", "async", "burst", "fenced")
EXECUTE_TIMEOUT_S = 600.0
UNKNOWN_SIZE_GUESS = 256  # NOTE: bytes first given to an output of unknown shape (grown on demand)
MAX_GROW = 4  # NOTE: retries of a partition whose outputs were too small (each with the shapes reported)
MISSED = (S.MISSED_DEADLINE_TRANSIENT, S.MISSED_DEADLINE_PERSISTENT)


class ExecutionError(RuntimeError):
    """An execution failed with ``status``; ``output_shapes`` when known."""

    def __init__(self, message: str, status: S, output_shapes: Optional[list] = None):
        super().__init__(message)
        self.status = status
        self.output_shapes = output_shapes or []


class Arena:
    """The shared memories of one compilation's operands that cross a partition
    boundary (inputs, outputs, temporaries between partitions): one memory per
    operand, grown when needed, kept across executions (so bursts reuse slots)."""

    def __init__(self) -> None:
        self.memories: dict[int, tuple[hal.Memory, memoryview]] = {}
        # NOTE: a compilation dropped without close() still gives its shared memories back
        self._finalizer = weakref.finalize(self, _release_all, self.memories)

    def get(self, index: int, size: int) -> tuple[hal.Memory, memoryview]:
        have = self.memories.get(index)
        if have is not None and have[0].size >= size:
            return have
        if have is not None:
            self._free(index)
        mem = hal_memory.allocate(max(size, 1))
        self.memories[index] = (mem, hal_memory.map(mem))
        return self.memories[index]

    def _free(self, index: int) -> None:
        mem, view = self.memories.pop(index)
        view.release()
        hal_memory.free(mem)

    def close(self) -> None:
        self._finalizer()


def _release_all(memories: dict) -> None:
    for mem, view in memories.values():
        view.release()
        hal_memory.free(mem)
    memories.clear()


def _nbytes(o: hal.Operand, dims: list[int], extension_dtypes: Optional[dict] = None) -> int:
    n = int(np.prod(dims)) if dims else 1
    return n * np.dtype(numpy_dtype(o.type, extension_dtypes)).itemsize


class Event:
    """``ANeuralNetworksEvent``: an execution running in the background."""

    def __init__(self, fn: Any) -> None:
        self._result: Any = None
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True, name="nnhal-runtime-event")
        self._thread.start()

    def _run(self, fn: Any) -> None:
        try:
            self._result = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the waiter
            self._error = e

    def wait(self, timeout: Optional[float] = None) -> dict:
        """The outputs (raises what the execution raised; TimeoutError if still running)."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError("the execution is still running")
        if self._error is not None:
            raise self._error
        return self._result

    def done(self) -> bool:
        return not self._thread.is_alive()


class Execution:
    """One execution of a finished compilation (reusable, one computation at a time)."""

    def __init__(self, compilation: Compilation):
        if not compilation.finished:
            compilation.finish()
        self.compilation = compilation
        self.output_shapes: dict[str, list[int]] = {}
        self.timing: Optional[hal.Timing] = None

    # ------------------------------------------------------------------ public
    def compute(self, inputs: Any, mode: str = "sync", deadline_ns: Optional[int] = None,
                timeout_s: Optional[float] = None, loop_timeout_ns: Optional[int] = None,
                measure: bool = False, outputs: Optional[dict] = None) -> dict:
        """Runs the model: ``inputs`` by name (a dict) or in order (a list):
        numpy arrays, None (an omitted optional input) or device memories;
        returns the outputs by name as numpy arrays (an output named in
        ``outputs`` with a device memory is written there instead).
        ``deadline_ns`` (steady clock) or ``timeout_s`` bound it;
        ``loop_timeout_ns`` bounds each WHILE loop.  Raises ExecutionError."""
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: one of {', '.join(MODES)}")
        if timeout_s is not None:
            deadline_ns = time.monotonic_ns() + int(timeout_s * 1e9)
        comp = self.compilation
        values = self._inputs(inputs)
        with comp.lock:
            if getattr(comp, "arena", None) is None:
                comp.arena = Arena()
            return self._compute(values, mode, deadline_ns, loop_timeout_ns, measure, outputs or {})

    def start_compute(self, inputs: Any, **kwargs: Any) -> Event:
        """``startCompute``: the execution in the background; ``Event.wait()`` gives the outputs."""
        return Event(lambda: self.compute(inputs, **{"mode": "async", **kwargs}))

    # ------------------------------------------------------------------ internals
    def _inputs(self, inputs: Any) -> dict[int, Any]:
        comp = self.compilation
        main = comp.hal_model.main
        if isinstance(inputs, dict):
            unknown = set(inputs) - set(comp.input_names)
            if unknown:
                raise ValueError(f"no input named {', '.join(sorted(unknown))}; inputs: {', '.join(comp.input_names)}")
            missing = [n for n in comp.input_names if n not in inputs]
            if missing:
                raise ValueError(f"no value for input {', '.join(missing)} (None gives an omitted one)")
            seq = [inputs[n] for n in comp.input_names]
        else:
            seq = list(inputs)
            if len(seq) != len(comp.input_names):
                raise ValueError(f"{len(seq)} inputs given, the model has {len(comp.input_names)}")
        out: dict[int, Any] = {}
        for i, v in zip(main.inputIndexes, seq):
            o = main.operands[i]
            if v is None or hasattr(v, "token"):
                out[i] = v
                continue
            arr = np.ascontiguousarray(v, dtype=comp.numpy_dtype(o.type))
            if o.type not in hal.SCALAR_TYPES and arr.ndim != len(o.dimensions) and o.dimensions:
                raise ValueError(f"input {comp.input_names[main.inputIndexes.index(i)]}: rank {arr.ndim}, the "
                                 f"model says {len(o.dimensions)}")
            out[i] = arr
        return out

    def _compute(self, values: dict[int, Any], mode: str, deadline_ns: Optional[int],
                 loop_timeout_ns: Optional[int], measure: bool, out_memories: dict) -> dict:
        comp = self.compilation
        main = comp.hal_model.main
        arena: Arena = comp.arena
        dims: dict[int, list[int]] = {}
        for i, v in values.items():
            if isinstance(v, np.ndarray):
                mem, view = arena.get(i, v.nbytes)
                view[:v.nbytes] = v.reshape(-1).view(np.uint8)
                dims[i] = list(v.shape)
            elif v is not None:
                dims[i] = list(v.dimensions)
        by_name = dict(zip(main.outputIndexes, comp.output_names))
        memories = {}
        for name, m in out_memories.items():
            if name not in comp.output_names:
                raise ValueError(f"no output named {name!r}")
            memories[main.outputIndexes[comp.output_names.index(name)]] = m
        if mode == "fenced":
            self._fenced(values, dims, deadline_ns, loop_timeout_ns, measure, memories)
        else:
            self.timing = self._run_plan(values, dims, mode, deadline_ns, loop_timeout_ns, measure, memories)
        result = {}
        for i in main.outputIndexes:
            name = by_name[i]
            self.output_shapes[name] = list(dims.get(i, main.operands[i].dimensions))
            if i in memories:
                continue
            o = main.operands[i]
            d = dims[i]
            n = _nbytes(o, d, comp.extension_dtypes)
            mem, view = arena.get(i, n)
            result[name] = np.frombuffer(bytes(view[:n]), dtype=comp.numpy_dtype(o.type)).reshape(d).copy()
        return result

    def _run_plan(self, values: dict[int, Any], dims: dict[int, list[int]], mode: str, deadline_ns: Optional[int],
                  loop_timeout_ns: Optional[int], measure: bool, memories: dict) -> hal.Timing:
        """The partitions one after the other; the timing summed when every one measured it."""
        comp = self.compilation
        main = comp.hal_model.main
        total = [0, 0]
        timed = measure
        steps = list(comp.steps)
        k = 0
        while k < len(steps):
            step = steps[k]
            k += 1
            if len(steps) > 1 and any(0 in dims.get(i, [1]) for i in step.inputs if i not in main.inputIndexes):
                # NOTE: zero-sized tensors exist only inside a model (a request cannot give one): the
                # whole model runs on the CPU reference, as Android's runtime falls back
                steps, k, total = [comp.whole_model_step()], 0, [0, 0]
                continue
            timing = self._run_step(step, values, dims, mode, deadline_ns, loop_timeout_ns, measure, memories)
            if timing is None or timing.timeOnDevice == hal.UINT64_MAX or timing.timeInDriver == hal.UINT64_MAX:
                timed = False
            else:
                total[0] += timing.timeOnDevice
                total[1] += timing.timeInDriver
        return hal.Timing(total[0], total[1]) if timed else hal.Timing()

    def _request(self, step: Step, values: dict[int, Any], dims: dict[int, list[int]], capacity: dict[int, int],
                 memories: dict) -> hal.Request:
        main = self.compilation.hal_model.main
        arena: Arena = self.compilation.arena
        pools: list[hal.MemoryPool] = []
        ins, outs = [], []
        for i in step.inputs:
            v = values.get(i, 0)
            if v is None:
                ins.append(hal.RequestArgument(hasNoValue=True))
                continue
            if hasattr(v, "token"):
                pools.append(hal.MemoryPool(token=v.token))
                ins.append(hal.RequestArgument(location=hal.DataLocation(len(pools) - 1, 0, 0), dimensions=[]))
                continue
            n = _nbytes(main.operands[i], dims[i], self.compilation.extension_dtypes)
            mem, _ = arena.get(i, n)
            pools.append(hal.MemoryPool(hidlMemory=mem))
            ins.append(hal.RequestArgument(location=hal.DataLocation(len(pools) - 1, 0, n), dimensions=list(dims[i])))
        for i in step.outputs:
            if i in memories:
                pools.append(hal.MemoryPool(token=memories[i].token))
                outs.append(hal.RequestArgument(location=hal.DataLocation(len(pools) - 1, 0, 0)))
                continue
            o = main.operands[i]
            known = all(d > 0 for d in o.dimensions)
            n = capacity.get(i, _nbytes(o, list(o.dimensions), self.compilation.extension_dtypes) if known else UNKNOWN_SIZE_GUESS)
            capacity[i] = n
            mem, _ = arena.get(i, n)
            pools.append(hal.MemoryPool(hidlMemory=mem))
            outs.append(hal.RequestArgument(location=hal.DataLocation(len(pools) - 1, 0, max(n, 1))))
        return hal.Request(inputs=ins, outputs=outs, pools=pools)

    def _execute(self, step: Step, request: hal.Request, mode: str, deadline_ns: Optional[int],
                 loop_ns: Optional[int], measure: bool) -> tuple:
        prepared = step.prepared
        try:
            if mode == "burst":
                with step.lock:
                    if step.burst is None:
                        status, step.burst = prepared.burst(timeout=EXECUTE_TIMEOUT_S)
                        if status != S.NONE:
                            step.burst = None
                            return status, [], hal.Timing()
                return step.burst.execute(request, measure, deadline_ns, loop_ns)
            if mode == "async":
                return prepared.execute_async(request, measure, deadline_ns, loop_ns, EXECUTE_TIMEOUT_S)
            return prepared.execute(request, measure, deadline_ns, loop_ns)
        except Exception as e:  # noqa: BLE001 - a device that raises failed this execution
            return S.GENERAL_FAILURE, [], hal.Timing(), f"raised {type(e).__name__}: {e}"

    def _run_step(self, step: Step, values: dict[int, Any], dims: dict[int, list[int]], mode: str,
                  deadline_ns: Optional[int], loop_timeout_ns: Optional[int], measure: bool,
                  memories: dict) -> Optional[hal.Timing]:
        comp = self.compilation
        capacity: dict[int, int] = {}
        fell_back = False
        for _ in range(MAX_GROW + 2):
            request = self._request(step, values, dims, capacity, memories)
            answer = self._execute(step, request, mode, deadline_ns, loop_timeout_ns, measure)
            status, shapes, timing = answer[0], answer[1], answer[2]
            status = S(status) if status in S._value2member_map_ else S.GENERAL_FAILURE
            if status == S.NONE:
                if len(shapes) != len(step.outputs):
                    shapes = [hal.OutputShape(list(comp.hal_model.main.operands[i].dimensions), True)
                              for i in step.outputs]
                for i, s in zip(step.outputs, shapes):
                    dims[i] = list(s.dimensions)
                return timing
            if status == S.OUTPUT_INSUFFICIENT_SIZE and len(shapes) == len(step.outputs):
                grew = False
                for i, s in zip(step.outputs, shapes):
                    if not s.isSufficient:
                        need = _nbytes(comp.hal_model.main.operands[i], list(s.dimensions), comp.extension_dtypes)
                        if i in memories or need <= capacity.get(i, 0) or not all(d > 0 for d in s.dimensions):
                            continue
                        capacity[i] = need
                        grew = True
                if grew:
                    continue
            if status in MISSED or status == S.OUTPUT_INSUFFICIENT_SIZE or fell_back or not comp.cpu_fallback \
                    or step.device.name == comp.reference().name or memories or any(hasattr(v, "token")
                                                                                   for v in values.values()):
                # NOTE: no fallback after a missed deadline (the time is gone), nor with device memories
                # (they belong to the failing device)
                names = [s.dimensions for s in shapes] if status == S.OUTPUT_INSUFFICIENT_SIZE else []
                raise ExecutionError(f"partition {_where(comp, step)} on {step.device.name}: {status.name}"
                                     + (f" ({answer[3]})" if len(answer) > 3 else ""), status, names)
            try:
                comp.fall_back(step, f"execution on {step.device.name} gave {status.name}")
            except CompilationError as e:
                raise ExecutionError(str(e), status) from None
            fell_back = True
        raise ExecutionError(f"partition {_where(comp, step)}: outputs kept growing", S.GENERAL_FAILURE)

    def _fenced(self, values: dict[int, Any], dims: dict[int, list[int]], deadline_ns: Optional[int],
                loop_timeout_ns: Optional[int], measure: bool, memories: dict) -> None:
        """The partitions chained by sync fences, each launched at once."""
        comp = self.compilation
        main = comp.hal_model.main
        for i in main.outputIndexes:
            if not all(d > 0 for d in main.operands[i].dimensions) or i in memories:
                # NOTE: as NNAPI's startComputeWithDependencies: a fenced execution's outputs are fully specified
                raise ExecutionError(f"fenced execution needs fully specified outputs in shared memory: output "
                                     f"{main.outputIndexes.index(i)} has shape {main.operands[i].dimensions}"
                                     + (" in a device memory" if i in memories else ""), S.INVALID_ARGUMENT)
        if any(not all(d > 0 for d in main.operands[i].dimensions) for s in comp.steps for i in s.outputs):
            # NOTE: a temporary between partitions of unknown shape cannot be sized before the fence of the
            # partition making it is signaled: such a plan runs partition after partition instead
            self.timing = self._run_plan(values, dims, "sync", deadline_ns, loop_timeout_ns, measure, memories)
            return
        for step in comp.steps:
            for i in step.outputs:
                dims[i] = list(main.operands[i].dimensions)
        fences: list[hal.Handle] = []
        callbacks = []
        failed: Optional[tuple] = None
        try:
            for step in comp.steps:
                request = self._request(step, values, dims, {}, memories)
                wait_for = fences[-1:]
                try:
                    status, sync_fence, cb = step.prepared.execute_fenced(request, wait_for, measure, deadline_ns,
                                                                          loop_timeout_ns, None)
                except Exception as e:  # noqa: BLE001
                    status, sync_fence, cb = S.GENERAL_FAILURE, None, None
                    failed = (step, S.GENERAL_FAILURE, f"raised {type(e).__name__}: {e}")
                if status != S.NONE:
                    failed = failed or (step, S(status), "executeFenced")
                    break
                if sync_fence is not None and not hal_fence.is_null(sync_fence):
                    fences.append(sync_fence)
                callbacks.append((step, cb))
            if fences:
                hal_fence.sync_wait(fences[-1], EXECUTE_TIMEOUT_S)
            total, timed = [0, 0], measure
            for step, cb in callbacks:
                status, launched, _ = cb() if cb is not None else (S.GENERAL_FAILURE, None, None)
                if status != S.NONE and failed is None:
                    failed = (step, S(status), "getExecutionInfo")
                if launched is None or launched.timeOnDevice == hal.UINT64_MAX:
                    timed = False
                else:
                    total[0] += launched.timeOnDevice
                    total[1] += launched.timeInDriver
            self.timing = hal.Timing(total[0], total[1]) if timed else hal.Timing()
        finally:
            for f in fences:
                hal_fence.close(f)
        if failed is None:
            return
        step, status, where = failed
        if status in MISSED or status == S.INVALID_ARGUMENT or not comp.cpu_fallback or memories:
            raise ExecutionError(f"partition {_where(comp, step)} on {step.device.name}: {where} gave "
                                 f"{status.name}", status)
        # NOTE: a failed fenced chain is run again partition by partition, each failure falling back
        self.timing = self._run_plan(values, dims, "sync", deadline_ns, loop_timeout_ns, measure, memories)


def _where(comp: Compilation, step: Step) -> str:
    return str(comp.steps.index(step)) if step in comp.steps else "(the whole model)"
