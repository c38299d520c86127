"""Compiling a model across devices, as Android's runtime does
(``nn/runtime/ExecutionPlan.cpp``, ``CompilationBuilder.cpp``), through the
public HAL API only.

Each device is spoken to through its AIDL face when it has one
(:mod:`nnhal.runtime.face`: every in-process device, a service through
``nnhal.aidl.connect``; a HIDL-only device through HIDL 1.3), at the
interface version of the feature level the model needs
(:func:`~nnhal.runtime.face.model_version`: AIDL 1 for a model HIDL 1.3
could carry, AIDL 2 for BATCH_MATMUL, ...), no newer than the compilation's
``version`` (the runtime's own: below AIDL 1, as Android 11's, it speaks
HIDL 1.3 to every device).  A device whose face is older than the model
needs is not asked: it takes none of the model's operations.

For every main operation, the devices whose ``getSupportedOperations``
answer yes are candidates; the best under the compilation's preference by
their ``getCapabilities_1_3`` figures wins (execTime, or powerUsage for
LOW_POWER; of the operation's first input type, or IF / WHILE
performance); ties go to the CPU reference, as Android's to its CPU
device.  An operation no listed device takes runs on the CPU reference
(``sample-all``).  IF and WHILE are single main operations, so control flow
always stays whole on one device.

Operations are then grouped into contiguous partitions (steps) the way
ExecutionPlan does: a topological walk that keeps taking ready operations of
the current device before switching.  Each step is a ``hal.Model`` of its own
with its own inputs and outputs (temporaries crossing a step boundary become
step outputs and later steps' inputs, held in shared memory between them),
prepared on its device with a cache token derived from the step model (a
SHA-256 of its encoding and constants; with ``cache_dir`` the device's cache
files are kept there and a later compilation loads from them).  A step
whose preparation fails is prepared on the CPU reference instead.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import threading
from typing import Any, Optional, Sequence, Union

import msgspec

from nnhal import hal
from nnhal.platform import memory as hal_memory
from nnhal.runtime import discovery as rt_devices
from nnhal.runtime import extensions as rt_extensions
from nnhal.runtime.face import Face, Prepared, interface_name, model_version
from nnhal.runtime.model import Model, numpy_dtype

S = hal.ErrorStatus
L = hal.OperandLifeTime
OT = hal.OperationType
PREPARE_TIMEOUT_S = 600.0


class CompilationError(RuntimeError):
    """The compilation failed (``status`` the HAL status, when one was given)."""

    def __init__(self, message: str, status: S = S.GENERAL_FAILURE):
        super().__init__(message)
        self.status = status


@dataclasses.dataclass
class OperationPlacement:
    """Where one main operation runs, and why."""

    index: int
    type: str
    device: str
    why: str
    refused: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Placement:
    """The placement report: per operation and per partition."""

    operations: list[OperationPlacement]
    steps: list[dict]

    def __str__(self) -> str:
        lines = []
        for p in self.operations:
            lines.append(f"operation {p.index} {p.type}: {p.device} ({p.why})")
            for d, why in p.refused.items():
                lines.append(f"    {d} refused: {why}")
        for k, s in enumerate(self.steps):
            extra = f"; {s['fallback']}" if s.get("fallback") else ""
            lines.append(f"partition {k}: {s['device']} operations {s['operations']} "
                         f"inputs {s['inputs']} outputs {s['outputs']}{extra}")
        return "\n".join(lines)


class _LogCapture(logging.Handler):
    """The error lines an in-process driver logs while answering this thread."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.thread = threading.get_ident()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self.thread:
            self.lines.append(record.getMessage())


class Step:
    """One partition: a step model prepared on one device (``prepared``: through the device's face)."""

    def __init__(self, device: rt_devices.Device, ops: list[int], model: hal.Model, inputs: list[int],
                 outputs: list[int], token: bytes):
        self.device, self.ops, self.model, self.token = device, ops, model, token
        self.inputs, self.outputs = inputs, outputs  # main-model operand indexes, in step I/O order
        self.prepared: Optional[Prepared] = None
        self.fallback = ""  # why it runs on the reference instead of its device
        self.burst: Any = None
        self.lock = threading.Lock()

    def close_burst(self) -> None:
        if self.burst is not None:
            self.burst.close()
            self.burst = None


def _perf(device: rt_devices.Device, model: hal.Model, op: hal.Operation,
          preference: hal.ExecutionPreference) -> float:
    caps = device.capabilities
    if op.type == OT.IF:
        info: Optional[hal.PerformanceInfo] = caps.ifPerformance
    elif op.type == OT.WHILE:
        info = caps.whilePerformance
    elif not op.inputs:
        info = None
    else:
        t = model.main.operands[op.inputs[0]].type
        if model.relaxComputationFloat32toFloat16 and t == hal.OperandType.TENSOR_FLOAT32:
            info = caps.relaxedFloat32toFloat16PerformanceTensor
        elif model.relaxComputationFloat32toFloat16 and t == hal.OperandType.FLOAT32:
            info = caps.relaxedFloat32toFloat16PerformanceScalar
        else:
            info = device.performance(t)
    if info is None:
        return float("inf")
    v = info.powerUsage if preference == hal.ExecutionPreference.LOW_POWER else info.execTime
    return float(v) if v > 0 else float("inf")


def step_model(model: hal.Model, ops: Sequence[int], produced_elsewhere_used_here: Sequence[int],
               outputs: Sequence[int]) -> tuple[hal.Model, list[int]]:
    """The step model of the main operations ``ops`` (in order): the operands
    they use, ``produced_elsewhere_used_here`` as inputs, ``outputs`` as
    outputs; constants and referenced subgraphs as in ``model``."""
    main = model.main
    order: list[int] = []
    seen: set[int] = set()
    for k in ops:
        for i in [*main.operations[k].inputs, *main.operations[k].outputs]:
            if i not in seen:
                seen.add(i)
                order.append(i)
    new = {i: n for n, i in enumerate(order)}
    consumers = dict.fromkeys(order, 0)
    for k in ops:
        for i in main.operations[k].inputs:
            consumers[i] += 1
    ins, outs = set(produced_elsewhere_used_here), set(outputs)
    operands = []
    uses_subgraphs = False
    for i in order:
        o = main.operands[i]
        life = o.lifetime
        if i in ins:
            life = L.SUBGRAPH_INPUT
        elif i in outs:
            life = L.SUBGRAPH_OUTPUT
        elif life in (L.SUBGRAPH_INPUT, L.SUBGRAPH_OUTPUT):
            life = L.TEMPORARY_VARIABLE
        uses_subgraphs |= life == L.SUBGRAPH
        operands.append(dataclasses.replace(o, dimensions=list(o.dimensions), numberOfConsumers=consumers[i],
                                            lifetime=life))
    operations = [hal.Operation(main.operations[k].type, [new[i] for i in main.operations[k].inputs],
                                [new[i] for i in main.operations[k].outputs]) for k in ops]
    sub = hal.Subgraph(operands=operands, operations=operations,
                       inputIndexes=[new[i] for i in produced_elsewhere_used_here],
                       outputIndexes=[new[i] for i in outputs])
    values: Any = model.operandValues
    pools = list(model.pools)
    if not uses_subgraphs:
        own = _own_constants(model, operands)
        if own is not None:
            values, pools = own, []
    # NOTE: a step with no subgraph gets only its own constants (copied into its operandValues); one
    # with IF / WHILE shares the model's operandValues and pools (its subgraphs' constants live there)
    # and takes the referenced subgraphs whole
    return hal.Model(main=sub, referenced=list(model.referenced) if uses_subgraphs else [],
                     operandValues=values, pools=pools,
                     relaxComputationFloat32toFloat16=model.relaxComputationFloat32toFloat16,
                     extensionNameToPrefix=list(model.extensionNameToPrefix)), order


def _own_constants(model: hal.Model, operands: list[hal.Operand]) -> Optional[bytes]:
    """Relocates the constants of ``operands`` (in place) into new operandValues
    (CONSTANT_REFERENCE read from its pool becomes CONSTANT_COPY); None, with
    nothing changed, when a pool cannot be read (e.g. a non-BLOB hardware buffer)."""
    views: dict[int, memoryview] = {}
    chunks: list[tuple[hal.Operand, bytes]] = []
    try:
        for o in operands:
            loc = o.location
            if o.lifetime == L.CONSTANT_COPY:
                chunks.append((o, bytes(model.operandValues[loc.offset:loc.offset + loc.length])))
            elif o.lifetime == L.CONSTANT_REFERENCE:
                if loc.poolIndex not in views:
                    views[loc.poolIndex] = hal_memory.map(model.pools[loc.poolIndex], writable=False)
                chunks.append((o, bytes(views[loc.poolIndex][loc.offset:loc.offset + loc.length])))
    except (hal_memory.InvalidMemory, OSError, ValueError, IndexError):
        return None
    finally:
        for v in views.values():
            v.release()
    out = bytearray()
    for o, data in chunks:
        out.extend(bytes(-len(out) % 8))  # NOTE: 8-byte aligned, as the model builder lays values out
        o.location = hal.DataLocation(poolIndex=0, offset=len(out), length=len(data))
        o.lifetime = L.CONSTANT_COPY
        out.extend(data)
    return bytes(out)


def cache_token(model: hal.Model, device_name: str) -> bytes:
    """32 bytes naming a step model on a device: SHA-256 of its structure and constants."""
    h = hashlib.sha256(b"nnhal-runtime-step-1\0" + device_name.encode() + b"\0")
    h.update(msgspec.json.encode(dataclasses.replace(model, pools=[], operandValues=b"")))
    h.update(bytes(model.operandValues))
    for m in model.pools:
        h.update(bytes(hal_memory.map(m, writable=False)))
    return h.digest()


class Compilation:
    """``ANeuralNetworksCompilation`` over one or several devices.

    ``model``: a :class:`nnhal.runtime.Model` or a ``hal.Model`` (its inputs
    and outputs then named ``input0``.., ``output0``..); ``devices``: names,
    :class:`~nnhal.runtime.discovery.Device` s, ``IDevice`` s of either
    interface or faces (default: every device that can be had);
    ``cpu_fallback``: operations no device takes, and partitions that fail to
    compile or execute, run on the CPU reference (``sample-all``);
    ``cache_dir``: where the devices' compilation caches are kept;
    ``version``: the newest interface the runtime speaks (default AIDL 4;
    below AIDL 1: HIDL 1.3 only).  :meth:`finish` partitions and prepares."""

    def __init__(self, model: Union[Model, hal.Model], devices: Optional[Sequence[Any]] = None,
                 preference: hal.ExecutionPreference = hal.ExecutionPreference.FAST_SINGLE_ANSWER,
                 priority: hal.Priority = hal.Priority.MEDIUM, cpu_fallback: bool = True,
                 cache_dir: Optional[str] = None, version: hal.HalVersion = hal.HalVersion.AIDL_V4):
        if isinstance(model, Model):
            self.hal_model = model.finish()
            self.input_names, self.output_names = model.input_names(), model.output_names()
            self.extension_dtypes = {**rt_extensions.model_dtypes(self.hal_model), **model.extension_dtypes()}
        else:
            self.hal_model = model
            self.extension_dtypes = rt_extensions.model_dtypes(model)
            self.input_names = [f"input{k}" for k in range(len(model.main.inputIndexes))]
            self.output_names = [f"output{k}" for k in range(len(model.main.outputIndexes))]
        given = list(devices) if devices is not None else rt_devices.names()
        self.devices = [rt_devices.get(d) for d in given]
        # NOTE: the devices this compilation opened by name are its own: close() lets their connections go
        self._opened = [dev for d, dev in zip(given, self.devices) if isinstance(d, str)]
        if not self.devices:
            raise CompilationError("no devices", S.INVALID_ARGUMENT)
        # NOTE: the feature level the model needs, and the interface the devices are spoken to through
        self.needs = model_version(self.hal_model)
        if version >= hal.HalVersion.AIDL_V1:
            self.interface = min(max(self.needs, hal.HalVersion.AIDL_V1), hal.HalVersion(version))
        else:
            self.interface = hal.HalVersion.V1_3
        self.preference = hal.ExecutionPreference(preference)
        self.priority = hal.Priority(priority)
        self.cpu_fallback = cpu_fallback
        self.cache_dir = cache_dir
        self.steps: list[Step] = []
        self.operations: list[OperationPlacement] = []
        self._reference: Optional[rt_devices.Device] = None
        self._whole: Optional[Step] = None
        self._groups: list[tuple[rt_devices.Device, list[int]]] = []
        self.lock = threading.Lock()  # NOTE: one execution at a time: the step memories are shared
        self.finished = False

    def numpy_dtype(self, t: int) -> Any:
        """How the elements of operand type ``t`` of this model are given and read."""
        return numpy_dtype(t, self.extension_dtypes)

    def extension_name(self, op_type: int) -> Optional[str]:
        """The extension an operation type belongs to (None: not an extension operation)."""
        prefix = int(op_type) >> 16
        if not prefix:
            return None
        return next((e.name for e in self.hal_model.extensionNameToPrefix if e.prefix == prefix), f"prefix {prefix}")

    def _has_extension_op(self, ops: Sequence[int]) -> Optional[str]:
        main = self.hal_model.main
        return next((f"operation {k} ({self.operation_name(k)})" for k in ops
                     if self.extension_name(main.operations[k].type)), None)

    def operation_name(self, k: int) -> str:
        """A main operation's name; an extension operation's as ``extension:type``."""
        t = self.hal_model.main.operations[k].type
        ext = self.extension_name(t)
        return f"{ext}:{int(t) & 0xFFFF}" if ext else hal.operation_name(t)

    # ------------------------------------------------------------------ placement
    def reference(self) -> rt_devices.Device:
        if self._reference is None:
            self._reference = next((d for d in self.devices if d.name == rt_devices.REFERENCE), None)
            if self._reference is None:
                self._reference = rt_devices.get(rt_devices.REFERENCE)
                self._opened.append(self._reference)
        return self._reference

    def face(self, d: rt_devices.Device) -> Face:
        """The face this compilation speaks to ``d`` through (see the module doc)."""
        return d.face(self.interface)

    def _supported(self, d: rt_devices.Device, n: int) -> tuple[list[bool], list[str]]:
        model = self.hal_model
        capture = _LogCapture()
        logging.getLogger("nnhal").addHandler(capture)
        method = "getSupportedOperations"
        try:
            face = self.face(d)
            method = face.method(method)
            if face.version < self.needs:
                # NOTE: as Android's HIDL adapters: a model newer than the interface does not go through it
                why = f"the model needs {interface_name(self.needs)}; {d.name} is spoken to through {face.interface}"
                return [False] * n, [why] * n
            status, supported, reasons = face.supported(model)
        except Exception as e:  # noqa: BLE001 - a device that breaks takes nothing
            status, supported = S.GENERAL_FAILURE, []
            capture.lines.append(f"raised {type(e).__name__}: {e}")
        finally:
            logging.getLogger("nnhal").removeHandler(capture)
        if status != S.NONE or len(supported) != n:
            log_line = f": {capture.lines[-1]}" if capture.lines else ""
            why = f"{method} returned {S(status).name if status in S._value2member_map_ else status}{log_line}"
            return [False] * n, [why] * n
        return supported, [r or None for r in reasons]

    def _place(self) -> list[rt_devices.Device]:
        model = self.hal_model
        ops = model.main.operations
        answers = {d.name: self._supported(d, len(ops)) for d in self.devices}
        chosen = []
        for k, op in enumerate(ops):
            refused = {d.name: answers[d.name][1][k] for d in self.devices if not answers[d.name][0][k]}
            cands = [d for d in self.devices if answers[d.name][0][k]]
            ext = self.extension_name(op.type)
            if not cands and ext:
                # NOTE: as Android: an extension operation never falls back to the CPU (BAD_DATA there)
                raise CompilationError(f"operation {k} {self.operation_name(k)}: no listed device takes this "
                                       f"extension operation and the CPU reference cannot run it ("
                                       + "; ".join(f"{n}: {r}" for n, r in refused.items()) + ")",
                                       S.INVALID_ARGUMENT)
            if not cands:
                if not self.cpu_fallback:
                    raise CompilationError(f"operation {k} {hal.operation_name(op.type)}: no device supports it ("
                                           + "; ".join(f"{n}: {r}" for n, r in refused.items()) + ")",
                                           S.INVALID_ARGUMENT)
                best = self.reference()
                why = "no listed device takes it: the CPU reference"
            else:
                perfs = [(_perf(d, model, op, self.preference), d) for d in cands]
                low = min(p for p, _ in perfs)
                best_list = [d for p, d in perfs if p == low]
                best = next((d for d in best_list if d.name == rt_devices.REFERENCE), best_list[0])
                what = "powerUsage" if self.preference == hal.ExecutionPreference.LOW_POWER else "execTime"
                why = f"{what} {low:g}, the best of " + ", ".join(f"{d.name} {p:g}" for p, d in perfs) \
                    if len(cands) > 1 else f"the only device that takes it ({what} {low:g})"
                if len(best_list) > 1 and best.name == rt_devices.REFERENCE:
                    why += " (a tie goes to the CPU reference)"
                if ext and len(cands) == 1:
                    why = f"the only listed device that takes this {ext} operation (getSupportedExtensions, " \
                          "getSupportedOperations_1_3)"
            chosen.append(best)
            self.operations.append(OperationPlacement(k, self.operation_name(k), best.name, why, refused))
        return chosen

    def _partition(self, chosen: list[rt_devices.Device]) -> list[tuple[rt_devices.Device, list[int]]]:
        """ExecutionPlan's grouping: a topological walk keeping the current device while it has ready work."""
        main = self.hal_model.main
        producer: dict[int, int] = {}
        for k, op in enumerate(main.operations):
            for i in op.outputs:
                producer[i] = k
        waiting = [len({producer[i] for i in op.inputs if i in producer}) for op in main.operations]
        consumers: dict[int, list[int]] = {}
        for k, op in enumerate(main.operations):
            for p in {producer[i] for i in op.inputs if i in producer}:
                consumers.setdefault(p, []).append(k)
        order = [d.name for d in self.devices]
        if chosen and self.reference().name not in order:
            order.append(self.reference().name)
        ready: dict[str, list[int]] = {n: [] for n in order}
        for k, w in enumerate(waiting):
            if w == 0:
                ready[chosen[k].name].append(k)
        by_name = {d.name: d for d in chosen}
        steps: list[tuple[rt_devices.Device, list[int]]] = []
        current: Optional[str] = None
        while any(ready.values()):
            if current is None or not ready[current]:
                current = next(n for n in order if ready[n])
                steps.append((by_name[current], []))
            k = min(ready[current])
            ready[current].remove(k)
            steps[-1][1].append(k)
            for c in consumers.get(k, []):
                waiting[c] -= 1
                if waiting[c] == 0:
                    ready[chosen[c].name].append(c)
        return steps

    # ------------------------------------------------------------------ preparation
    def _cache_files(self, face: Face, name: str, token: bytes) -> tuple[list[int], list[int], bool]:
        if self.cache_dir is None:
            return [], [], False
        status, n_model, n_data = face.cache_files()
        if status != S.NONE or not (0 < n_model + n_data <= 2 * hal.Constant.MAX_NUMBER_OF_CACHE_FILES):
            return [], [], False
        os.makedirs(self.cache_dir, mode=0o700, exist_ok=True)
        base = os.path.join(self.cache_dir, f"{token.hex()}-{name}")
        paths = [f"{base}.m{k}" for k in range(n_model)] + [f"{base}.d{k}" for k in range(n_data)]
        existed = all(os.path.exists(p) and os.path.getsize(p) > 0 for p in paths)
        fds = [os.open(p, os.O_RDWR | os.O_CREAT, 0o600) for p in paths]
        return fds[:n_model], fds[n_model:], existed

    def _prepare_on(self, d: rt_devices.Device, model: hal.Model, token: bytes,
                    deadline_ns: Optional[int]) -> tuple[S, Optional[Prepared]]:
        model_cache: list[int] = []
        data_cache: list[int] = []
        face: Optional[Face] = None
        try:
            face = self.face(d)
            model_cache, data_cache, cached = self._cache_files(face, d.name, token)
            if cached:
                status, prepared = face.prepare_from_cache(deadline_ns, model_cache, data_cache, token,
                                                           PREPARE_TIMEOUT_S)
                if status == S.NONE and prepared is not None:
                    return status, prepared
                for fd in [*model_cache, *data_cache]:
                    os.ftruncate(fd, 0)  # NOTE: a stale or foreign cache: written afresh below
            return face.prepare(model, self.preference, self.priority, deadline_ns, model_cache, data_cache, token,
                                PREPARE_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - a device that raises failed to prepare
            logging.getLogger("nnhal.runtime").exception("%s on %s raised", self._prepare_method(d), d.name)
            return S.GENERAL_FAILURE, None
        finally:
            for fd in [*model_cache, *data_cache]:
                os.close(fd)

    def _prepare_method(self, d: rt_devices.Device) -> str:
        try:
            return self.face(d).method("prepareModel")
        except Exception:  # noqa: BLE001 - a device whose face cannot be had: named by the runtime's default
            return "prepareModel"

    def plan(self) -> list[tuple[str, list[int]]]:
        """The partitions :meth:`finish` would prepare, without preparing:
        (device name, main operation indexes) each; fills :meth:`placement`'s
        operations."""
        if not self.operations:
            self._groups = self._partition(self._place())
        return [(d.name, list(ops)) for d, ops in self._groups]

    def finish(self, deadline_ns: Optional[int] = None) -> "Compilation":
        """Places, partitions and prepares (``deadline_ns``: steady clock,
        ``time.monotonic_ns()``).  Raises :class:`CompilationError`."""
        if self.finished:
            return self
        model = self.hal_model
        main = model.main
        self.plan()
        groups = self._groups
        step_of = {}
        for s, (_, ops) in enumerate(groups):
            for k in ops:
                step_of[k] = s
        model_outputs = set(main.outputIndexes)
        deadline = deadline_ns
        for s, (d, ops) in enumerate(groups):
            produced = [i for k in ops for i in main.operations[k].outputs]
            produced_set = set(produced)
            ins: list[int] = []
            for k in ops:
                for i in main.operations[k].inputs:
                    o = main.operands[i]
                    if i not in produced_set and i not in ins and o.lifetime in (
                            L.SUBGRAPH_INPUT, L.TEMPORARY_VARIABLE, L.SUBGRAPH_OUTPUT):
                        ins.append(i)
            later = {i for k2, op in enumerate(main.operations) if step_of[k2] > s for i in op.inputs}
            outs = [i for i in produced if i in model_outputs or i in later]
            if not outs:  # NOTE: a step whose results nobody reads still needs an output to be a model
                outs = produced[:1]
            sm, _ = step_model(model, ops, ins, outs)
            token = cache_token(sm, d.name)
            step = Step(d, ops, sm, ins, outs, token)
            status, prepared = self._prepare_on(d, sm, token, deadline)
            if status in (S.MISSED_DEADLINE_TRANSIENT, S.MISSED_DEADLINE_PERSISTENT):
                self.close()
                raise CompilationError(f"partition {s} on {d.name}: {status.name}", status)
            if status != S.NONE or prepared is None:
                ref = self.reference()
                ext_op = self._has_extension_op(ops)
                if ext_op is not None:
                    self.close()
                    raise CompilationError(f"partition {s} on {d.name}: {self._prepare_method(d)} gave {status.name}, "
                                           f"and its {ext_op} cannot run on the CPU reference",
                                           status if status != S.NONE else S.GENERAL_FAILURE)
                if not self.cpu_fallback or d.name == ref.name:
                    self.close()
                    raise CompilationError(f"partition {s} on {d.name}: {self._prepare_method(d)} gave {status.name}",
                                           status if status != S.NONE else S.GENERAL_FAILURE)
                step.fallback = f"{self._prepare_method(d)} on {d.name} gave {status.name}: prepared on {ref.name}"
                step.device = ref
                step.token = cache_token(sm, ref.name)
                status, prepared = self._prepare_on(ref, sm, step.token, deadline)
                if status != S.NONE or prepared is None:
                    self.close()
                    raise CompilationError(f"partition {s}: {step.fallback}, which gave {status.name}", status)
            step.prepared = prepared
            self.steps.append(step)
        self.finished = True
        return self

    def fall_back(self, step: Step, why: str) -> None:
        """Prepares ``step`` on the CPU reference after it failed to execute (kept for later executions)."""
        ext_op = self._has_extension_op(step.ops)
        if ext_op is not None:
            raise CompilationError(f"{why}; its {ext_op} cannot run on the CPU reference")
        ref = self.reference()
        token = cache_token(step.model, ref.name)
        status, prepared = self._prepare_on(ref, step.model, token, None)
        if status != S.NONE or prepared is None:
            raise CompilationError(f"{why}; preparing on {ref.name} gave {status.name}", status)
        step.close_burst()
        step.fallback = f"{why}: runs on {ref.name}"
        step.device, step.prepared, step.token = ref, prepared, token

    def whole_model_step(self) -> Step:
        """The whole model as one step on the CPU reference (prepared once), for
        what partitions cannot carry: a zero-sized temporary between partitions
        (a driver takes no zero-sized input; as Android, the runtime then falls
        back to running the whole model on its CPU path)."""
        if self._whole is None:
            main = self.hal_model.main
            ext_op = self._has_extension_op(range(len(main.operations)))
            if ext_op is not None:
                raise CompilationError(f"a zero-sized temporary between partitions, and the {ext_op} cannot run "
                                       "on the CPU reference", S.GENERAL_FAILURE)
            ref = self.reference()
            token = cache_token(self.hal_model, ref.name)
            step = Step(ref, list(range(len(main.operations))), self.hal_model, list(main.inputIndexes),
                        list(main.outputIndexes), token)
            status, prepared = self._prepare_on(ref, self.hal_model, token, None)
            if status != S.NONE or prepared is None:
                raise CompilationError(f"the whole model on {ref.name}: {self._prepare_method(ref)} gave "
                                       f"{status.name}", status)
            step.prepared = prepared
            step.fallback = "a zero-sized temporary between partitions: the whole model on the CPU reference"
            self._whole = step
        return self._whole

    # ------------------------------------------------------------------ reports
    def placement(self) -> Placement:
        """For every operation the device chosen and why, and every refusal's reason; the partitions."""
        main = self.hal_model.main
        names = {i: n for i, n in zip(main.inputIndexes, self.input_names)}
        names.update({i: n for i, n in zip(main.outputIndexes, self.output_names)})
        steps = [{"device": s.device.name, "operations": [f"{k} {self.operation_name(k)}" for k in s.ops],
                  "inputs": [names.get(i, f"#{i}") for i in s.inputs],
                  "outputs": [names.get(i, f"#{i}") for i in s.outputs], "fallback": s.fallback,
                  "token": s.token.hex()[:16]} for s in self.steps]
        return Placement(list(self.operations), steps)

    def execution(self) -> Any:
        """A new :class:`nnhal.runtime.Execution` of this compilation."""
        from nnhal.runtime.execution import Execution

        return Execution(self)

    def run(self, inputs: Any, **kwargs: Any) -> dict:
        """Shorthand: one execution's outputs (see :meth:`Execution.compute`)."""
        return self.execution().compute(inputs, **kwargs)

    def close(self) -> None:
        """Ends the bursts, releases the shared memories and lets go of the service connections it opened
        (the devices it was given by name)."""
        for s in [*self.steps, *([self._whole] if self._whole is not None else [])]:
            s.close_burst()
        arena = getattr(self, "arena", None)
        if arena is not None:
            arena.close()
            self.arena = None
        for d in self._opened:
            d.close()

    def __enter__(self) -> "Compilation":
        return self.finish()

    def __exit__(self, *exc: object) -> None:
        self.close()
