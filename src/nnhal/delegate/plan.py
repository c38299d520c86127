"""Where each operator of a .tflite model runs, as Android's NNAPI delegate
decides (``StatefulNnApiDelegate::DoPrepare`` in ``nnapi_delegate.cc``), or
with everything nnhal can express on NNAPI (``plan="max"``).

The delegate plan, step by step as the delegate takes them:

1. every operator through ``Validate`` (:mod:`nnhal.delegate.rules`) at the
   level the delegate calls it with (:mod:`nnhal.delegate.levels`: the API
   level, or from API 29 with target devices the runtime's feature level
   lowered to the devices'; the rule that takes each operator is kept for
   ``explain``); float16 weights behind a constant DEQUANTIZE are checked on the
   float16 constant (``FP16GraphPartitionHelper``): the model is delegated
   whole with them when everything else is supported, else those DEQUANTIZEs
   stay on the CPU (the NNAPI partitions still read the weights as constants);
2. nnhal must express the operator in the HAL at the partition's HAL version
   (HIDL 1.0-1.3 to API 30, AIDL 1-4 from 31, no newer than the device's
   face; its importer, ``load_operators``, with the AIDL operations as
   themselves from their version; an operator it cannot map stays on the
   CPU, named as nnhal's limit, not the delegate's);
3. with a named accelerator, or from API 29 unless ``allow_nnapi_cpu``
   (the delegate's ``is_accelerator_specified``), each NNAPI partition is asked
   to the device(s) (``GetNodesSupportedByAccelerator``): an operator whose HAL
   operations the device refuses stays on the CPU and the graph is
   partitioned again (a float16-weight model then is not delegated at all);
4. only the ``max_partitions`` largest NNAPI partitions stay delegated
   (``LimitDelegatedPartitions``), and the graph is partitioned a last time
   (:mod:`nnhal.delegate.partition`).

The max plan: every operator nnhal maps (its rewrites and custom operators
included) on NNAPI, with no partition limit; an operator whose HAL form the
API level's HAL version lacks, or the device refuses, runs on the CPU.
"""

from __future__ import annotations

import collections
import json
import re
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from nnhal import hal
from nnhal.delegate import halmodel, levels
from nnhal.delegate.levels import Levels
from nnhal.delegate.model import Graph
from nnhal.delegate.partition import Subset, largest, partition
from nnhal.delegate.rules import decided_by, validate
from nnhal.hal.types import HalVersion
from nnhal.runtime.face import Face, interface_name, open_face
from nnhal.tflite.loader import MainMapping, UnsupportedModelError, free_model, load_operators

DeviceOf = Callable[[str], Any]
FP16_PARTIAL = ("float16 weights (constant DEQUANTIZE): in a partial delegation the delegate keeps these on the "
                "CPU (FP16GraphPartitionHelper); its NNAPI partitions read the weights as constants")
FP16_REFUSED = ("the device refused part of a float16-weight model: the delegate then delegates none of it "
                "(DoPrepare: 'Only allow full model delegation for fp16 model')")


@dataclass
class Options:
    """What ``nnhal run`` / ``bench`` / ``graph`` take (the delegate's options as flags)."""

    plan: str = "delegate"
    android_api: int = 30
    max_partitions: int = 3
    accelerator: str = ""  # the delegate's accelerator_name: one nnhal device
    device: str = "sample-all"  # the NNAPI device when no accelerator is named
    devices: list[str] = field(default_factory=list)  # through the client runtime
    allow_fp16: bool = False
    allow_nnapi_cpu: bool = False  # the inverse of the delegate's disallow_nnapi_cpu
    preference: str = "fast_single_answer"
    batch: Optional[int] = 1
    # the TFLite custom operators the target devices implement as extension operations (code -> (extension,
    # operation type)): the max plan maps them through the HAL; the delegate's own rules never delegate one
    custom_ops: dict = field(default_factory=dict)
    # the delegate's cache_dir with its model_token (nnhal.delegate.compile_cache.CacheDir): NNAPI partitions
    # load from it, or prepare and save into it
    cache: Any = None

    def __post_init__(self) -> None:
        if self.plan not in ("delegate", "max"):
            raise ValueError(f"--plan {self.plan}: give delegate or max")
        levels.check_api(self.android_api)
        if self.max_partitions < 0:
            raise ValueError("--max-partitions: give 0 (no limit) or more")
        if self.batch is not None and self.batch < 1:
            raise ValueError(f"--batch {self.batch}: give 1 or more")

    @property
    def targets(self) -> list[str]:
        return self.devices or [self.accelerator or self.device]

    @property
    def device_label(self) -> str:
        return "runtime:" + ",".join(self.devices) if self.devices else (self.accelerator or self.device)

    @property
    def accelerator_specified(self) -> bool:
        """The delegate's ``is_accelerator_specified`` (ShouldUseTargetDevices excluding nnapi-reference)."""
        return bool(self.accelerator) or (not self.allow_nnapi_cpu and self.android_api >= 29)

    @property
    def api_version(self) -> HalVersion:
        """The newest HAL interface of the API level's runtime (1.0-1.3, AIDL 1-4)."""
        return levels.version_of(levels.runtime_feature_level(self.android_api))


@dataclass
class OperatorPlan:
    index: int
    name: str
    where: str  # "nnapi" | "cpu"
    partition: Optional[int] = None
    device: Optional[str] = None
    reason: str = ""
    rule: str = ""  # on NNAPI in a delegate plan: the delegate's rule that took it


@dataclass
class PartitionPlan:
    index: int
    where: str
    operators: list[int]
    device: Optional[str]
    inputs: list[int] = field(default_factory=list)  # TFLite tensors it reads from other partitions / the model
    outputs: list[int] = field(default_factory=list)  # tensors other partitions or the model read
    load_ops: list[int] = field(default_factory=list)  # operators a HAL partition maps (with its fp16 weights)


class Prebuilt:
    """HAL models of NNAPI partitions the planner built while checking them, kept for the runner
    (:meth:`take`: each once) instead of built again; the rest freed by :meth:`release` or when this
    goes (their pools are shared memory)."""

    def __init__(self) -> None:
        self.models: dict[tuple, tuple] = {}
        self._finalizer = weakref.finalize(self, _free_all, self.models)

    @staticmethod
    def key(nodes: list[int], inputs: list[int], outputs: list[int]) -> tuple:
        return tuple(nodes), tuple(inputs), tuple(outputs)

    def put(self, key: tuple, built: tuple) -> None:
        old = self.models.pop(key, None)
        if old is not None:
            free_model(old[0])
        self.models[key] = built

    def keep(self, keys: set) -> None:
        """Frees every model but those of ``keys``."""
        for k in [k for k in self.models if k not in keys]:
            free_model(self.models.pop(k)[0])

    def take(self, key: tuple) -> Optional[tuple]:
        """(model, io, unsigned) of ``key``, now the caller's to free, or None."""
        return self.models.pop(key, None)

    def release(self) -> None:
        _free_all(self.models)


def _free_all(models: dict) -> None:
    for built in models.values():
        free_model(built[0])
    models.clear()


@dataclass
class Plan:
    graph: Graph
    options: Options
    operators: list[OperatorPlan]
    partitions: list[PartitionPlan]
    levels: Optional[Levels] = None  # the delegate's levels (Validate's, the partitions' interface, ...)
    graph_path: str = ""  # how the commands name the model
    prebuilt: Prebuilt = field(default_factory=Prebuilt, repr=False, compare=False)

    @property
    def version(self) -> HalVersion:
        """The HAL interface the NNAPI partitions are built for and sent through."""
        return self.levels.version if self.levels is not None else self.options.api_version

    @property
    def nnapi(self) -> list[PartitionPlan]:
        return [p for p in self.partitions if p.where == "nnapi"]

    def causes(self) -> list[tuple[str, int, collections.Counter]]:
        """(reason, operators, names) per distinct reason an operator is on the CPU, most first."""
        by: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for o in self.operators:
            if o.where == "cpu":
                by[o.reason][o.name] += 1
        return sorted(((r, sum(c.values()), c) for r, c in by.items()), key=lambda t: (-t[1], t[0]))

    def to_json(self) -> dict:
        """The plan in the form of ../shared/API.md (``--plan-json``)."""
        ops = []
        for o in self.operators:
            d = {"index": o.index, "name": o.name, "where": o.where, "partition": o.partition, "device": o.device}
            if o.where == "cpu":
                d["reason"] = o.reason
            ops.append(d)
        return {"android_api": self.options.android_api, "plan": self.options.plan, "operators": ops,
                "partitions": [{"index": p.index, "where": p.where, "operators": p.operators, "device": p.device}
                               for p in self.partitions]}

    def write_json(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.to_json(), f, indent=1)
            f.write("\n")

    def explain(self, times: Optional[list[float]] = None) -> str:
        """Partitions in order, the root causes of CPU placement with counts, the time per partition."""
        o = self.options
        head = (f"plan {o.plan}, Android API {o.android_api} (NNAPI partitions as {interface_name(self.version)}), "
                f"max partitions {o.max_partitions if o.plan == 'delegate' and o.max_partitions else 'no limit'}, "
                f"NNAPI device {o.device_label}")
        lines = [head]
        if self.levels is not None:
            lines.append(f"  levels: {self.levels.describe()}")
        for p in self.partitions:
            names = collections.Counter(self.operators[i].name for i in p.operators)
            what = ", ".join(f"{k} {v}" for k, v in names.most_common(6)) + (", ..." if len(names) > 6 else "")
            t = f"  {times[p.index] * 1e3:.3f} ms" if times is not None and p.index < len(times) else ""
            lines.append(f"  partition {p.index}: {p.where:5s} {p.device or 'LiteRT'}: {len(p.operators)} operators "
                         f"{_ranges(p.operators)} ({what}){t}")
        n_nn = sum(1 for x in self.operators if x.where == "nnapi")
        lines.append(f"  {n_nn} of {len(self.operators)} operators on NNAPI in {len(self.nnapi)} partition(s), "
                     f"{len(self.operators) - n_nn} on the CPU")
        by_rule = collections.Counter((x.name, x.rule) for x in self.operators if x.where == "nnapi" and x.rule)
        if by_rule:
            lines.append("  on NNAPI by the delegate's rules: " + "; ".join(
                f"{name}{f' x{n}' if n > 1 else ''} ({rule})" for (name, rule), n in sorted(by_rule.items())))
        for reason, n, names in self.causes():
            who = ", ".join(f"{k} {v}" if v > 1 else k for k, v in names.most_common(4))
            lines.append(f"  cpu x{n} ({who}): {reason}")
        if times is not None:
            nn = sum(times[p.index] for p in self.partitions if p.where == "nnapi" and p.index < len(times))
            cpu = sum(times[p.index] for p in self.partitions if p.where == "cpu" and p.index < len(times))
            lines.append(f"  time: NNAPI {nn * 1e3:.3f} ms, CPU {cpu * 1e3:.3f} ms")
        return "\n".join(lines)


def _ranges(idx: list[int]) -> str:
    out, start, prev = [], None, None
    for i in sorted(idx) + [None]:
        if start is not None and (i is None or i != prev + 1):
            out.append(str(start) if start == prev else f"{start}-{prev}")
            start = None
        if i is not None and start is None:
            start = i
        prev = i
    s = ",".join(out)
    return f"[{s if len(s) <= 40 else s[:37] + '...'}]"


class Planner:
    """Builds the :class:`Plan` of a graph (see the module docstring)."""

    def __init__(self, g: Graph, opts: Options, device_of: Optional[DeviceOf] = None):
        self.g, self.o, self.device_of = g, opts, device_of
        ops = g.operators
        # NOTE: IsDequantizeConstFloat16: a DEQUANTIZE of a float16 constant of the file (one behind a
        # DENSIFY is computed in TFLite, so not one of these)
        self.fp16 = {op.index for op in ops if op.builtin == "DEQUANTIZE" and op.inputs and op.inputs[0] >= 0
                     and g.tensors[op.inputs[0]].type == "float16" and g.tensors[op.inputs[0]].stored}
        self.fp16_out = {ops[i].outputs[0]: i for i in self.fp16}
        self.reasons: dict[int, str] = {}
        self.rules: dict[int, str] = {}  # operator -> the delegate's rule that took it
        self.device_refused = False
        self._nn_fail: Optional[dict[int, str]] = None
        self._whole: Optional[MainMapping] = None
        self._checked: Any = None
        self._faces: dict[str, Face] = {}
        self.prebuilt = Prebuilt()
        self.levels = levels.levels(opts.android_api, opts.accelerator_specified,
                                    [self.face(n).version for n in opts.targets])

    @property
    def version(self) -> HalVersion:
        """The NNAPI partitions' HAL interface version."""
        return self.levels.version

    def face(self, name: str) -> Face:
        """The face device ``name`` is spoken to through at the API level (its AIDL face from API 31 when it
        has one, else HIDL: :func:`nnhal.runtime.face.open_face`), opened once: by name, or through the
        ``device_of`` given."""
        if name not in self._faces:
            target = name if self.device_of is None else self.device_of(name)
            self._faces[name] = open_face(target, self.o.api_version, name)
        return self._faces[name]

    def close(self) -> None:
        """Lets go of the service connections the faces opened."""
        for face in self._faces.values():
            face.close()
        self._faces.clear()

    @property
    def checked(self) -> Any:
        """The file as the importer's reader checked it, once (``nnhal.tflite.loader.verify``)."""
        if self._checked is None:
            self._checked = self.g.verified(self.o.batch)
        return self._checked

    @property
    def _custom_ops(self) -> dict:
        return self.o.custom_ops if self.o.plan == "max" else {}

    @property
    def nn_fail(self) -> dict[int, str]:
        if self._nn_fail is None:
            # NOTE: mapped with the inputs of the partition of every operator: when that partition is the one
            # checked first (a model delegated whole), hal_model takes this mapping instead of mapping again
            g = self.g
            every = list(range(len(g.operators)))
            ins, _ = boundary(g, every, set(every), set(self.fp16_out))
            self._whole = MainMapping(g.data, ins, batch=self.o.batch, checked=self.checked,
                                      custom_ops=self._custom_ops, version=self.version)
            self._nn_fail = self._whole.failures
        return self._nn_fail

    def subsets(self, delegated: set[int]) -> list[Subset]:
        g = self.g
        return partition([op.inputs for op in g.operators], [op.outputs for op in g.operators], len(g.tensors),
                         delegated, g.outputs)

    # ------------------------------------------------------------------ step 1: the delegate's rules

    def validated(self) -> set[int]:
        g, o = self.g, self.o
        remap = {k: g.operators[i].inputs[0] for k, i in self.fp16_out.items()}
        supported = set()
        for op in g.operators:
            i = op.index
            if i in self.fp16:
                continue
            if o.plan == "max":
                if i in self.nn_fail and i not in g.folded:
                    self.reasons[i] = f"nnhal has no HAL form for it: {self.nn_fail[i]}"
                else:
                    supported.add(i)
                continue
            fails = validate(op, g, self.levels.validate, o.accelerator_specified, remap)
            if fails:
                why = "; ".join(str(f) for f in fails)
                if i not in self.nn_fail and i not in g.folded:
                    why += " [nnhal could express it: --plan max]"
                self.reasons[i] = why
            elif i in self.nn_fail and i not in g.folded:
                self.reasons[i] = f"the delegate would take it, nnhal has no exact HAL form: {self.nn_fail[i]}"
            else:
                supported.add(i)
                self.rules[i] = decided_by(op, self.levels.validate)
        if self.fp16:
            if o.plan == "max" or len(supported) + len(self.fp16) == len(g.operators):
                supported |= self.fp16
            else:
                for i in self.fp16:
                    self.reasons[i] = FP16_PARTIAL
        return supported

    # ------------------------------------------------------------------ step 2/3: nnhal and the device

    def load_ops(self, s: Subset) -> list[int]:
        """The operators a HAL partition maps: its own and the float16 weight DEQUANTIZEs it reads."""
        g = self.g
        extra = {self.fp16_out[k] for i in s.nodes for k in g.operators[i].inputs if k in self.fp16_out}
        return sorted((set(s.nodes) | extra) - set(g.folded))

    def hal_model(self, nodes: list[int], inputs: list[int], outputs: list[int]) -> tuple[hal.Model, Any, bool]:
        """The HAL model of some operators at the plan's HAL version (the operations of AIDL 2-3 as
        themselves from their version on, their rewrites before; int8 as uint8 and HARD_SWISH decomposed
        before 1.3, pre-1.2 operation forms before 1.2), its io description, and whether its int8 tensors
        became uint8."""
        v = self.version
        built = self._whole.take(nodes, inputs, outputs) if self._whole is not None else None
        model, io = built if built is not None else \
            load_operators(self.g.data, nodes, inputs, outputs, batch=self.o.batch, checked=self.checked,
                           custom_ops=self._custom_ops, version=v)
        unsigned = False
        if v < HalVersion.V1_3:
            unsigned = halmodel.to_unsigned(model)
            halmodel.decompose_hard_swish(model, io.hal_to_tflite)
            if v < HalVersion.V1_2:
                halmodel.older_forms(model)
                halmodel.compact(model)
        halmodel.freeze_constants(model)  # NOTE: final from here on
        return model, io, unsigned

    def check(self, subsets: list[Subset], query: bool) -> set[int]:
        """Operators of the delegated subsets that must leave NNAPI (reasons recorded)."""
        g = self.g
        out: set[int] = set()
        for s in subsets:
            if not s.delegated:
                continue
            nodes = self.load_ops(s)
            if not nodes:
                continue
            ins, outs = boundary(g, nodes, set(nodes), set(self.fp16_out))
            try:
                built = self.hal_model(nodes, ins, outs)
                model, io, _ = built
            except UnsupportedModelError as e:
                # NOTE: the root causes only: an operator refused because a refused one feeds it is mapped
                # again once its input crosses from the CPU
                roots = [f for f in e.failures if "written by no mapped operator" not in f[2]] or e.failures
                moved = {i for i, _, _ in roots if i >= 0 and i not in self.fp16}
                for i, _, r in roots:
                    if i in moved:
                        self.reasons[i] = f"nnhal has no HAL form for it here: {r}"
                if not moved:  # NOTE: a boundary tensor of no HAL type: the partition stays whole on the CPU
                    why = "; ".join(r for _, _, r in e.failures)
                    moved = set(s.nodes) - self.fp16
                    for i in moved:
                        self.reasons[i] = f"nnhal cannot map its NNAPI partition: {why}"
                out |= moved
                continue
            try:
                for j, why in halmodel.noncompliant(model, self.version).items():
                    i = io.hal_to_tflite[j]
                    if i >= 0 and i not in self.fp16:
                        self.reasons[i] = _noncompliant_reason(model.main.operations[j].type, why,
                                                               interface_name(self.version))
                        out.add(i)
                if query and not out and model.main.operations:  # NOTE: all computed at load: nothing to ask
                    out |= self.query(model, io)
            except BaseException:
                free_model(model)
                raise
            self.prebuilt.put(Prebuilt.key(nodes, ins, outs), built)  # NOTE: the runner's, if the partition stays
        return out

    def query(self, model: hal.Model, io: Any) -> set[int]:
        """``GetNodesSupportedByAccelerator``: operators some of whose HAL operations no target device takes."""
        ok = [False] * len(model.main.operations)
        answers = []
        for name in self.o.targets:
            a = halmodel.supported(self.face(name), model)
            answers.append((name, a))
            if a is not None:
                ok = [x or y for x, y in zip(ok, a)]
        out = set()
        self.device_refused = True
        for j, good in enumerate(ok):
            i = io.hal_to_tflite[j]
            if not good and i >= 0 and i not in self.fp16:
                refused = [n for n, a in answers if a is None or not a[j]]
                method = self.face(self.o.targets[0]).method("getSupportedOperations")
                self.reasons[i] = (f"{', '.join(refused)} does not support it "
                                   f"({hal.operation_name(model.main.operations[j].type)}; {method})")
                out.add(i)
        return out

    # ------------------------------------------------------------------ the plan

    def build(self) -> Plan:
        g, o = self.g, self.o
        supported = self.validated()
        query = o.plan == "max" or (o.accelerator_specified and o.android_api >= 29)
        for _ in range(len(g.operators) + 1):
            self.device_refused = False
            leave = self.check(self.subsets(supported), query)
            if not leave:
                break
            supported -= leave
            if self.fp16 and o.plan == "delegate" and self.device_refused and \
                    any("does not support it" in self.reasons.get(i, "") for i in leave):
                # NOTE: DoPrepare restores the graph and delegates nothing when the accelerator refused nodes
                # of a model with float16 weights (should_prune_fp16_dequantize)
                for i in supported:
                    self.reasons.setdefault(i, FP16_REFUSED)
                for i in self.fp16:
                    self.reasons[i] = FP16_REFUSED
                supported = set()
                break
            if self.fp16 and o.plan == "delegate":
                supported -= self.fp16
                for i in self.fp16:
                    self.reasons[i] = FP16_PARTIAL
        if o.plan == "delegate":
            subsets = self.subsets(supported)
            keep = largest(subsets, o.max_partitions)
            for s in subsets:
                if s.delegated and not set(s.nodes) <= keep:
                    for i in s.nodes:
                        self.reasons[i] = (f"in an NNAPI partition smaller than the {o.max_partitions} largest "
                                           f"(max_number_delegated_partitions, --max-partitions)")
            supported = keep
        return self.finish(self.subsets(supported))

    def finish(self, subsets: list[Subset]) -> Plan:
        g, o = self.g, self.o
        ops = [OperatorPlan(op.index, op.name, "cpu", reason=self.reasons.get(op.index, ""),
                            rule=self.rules.get(op.index, "")) for op in g.operators]
        parts = []
        keys: set = set()
        cpu = {i for s in subsets if not s.delegated for i in s.nodes}
        for k, s in enumerate(subsets):
            where = "nnapi" if s.delegated else "cpu"
            dev = o.device_label if s.delegated else None
            load = self.load_ops(s) if s.delegated else [i for i in s.nodes if i not in g.folded]
            # NOTE: a float16 weight DEQUANTIZE's output goes to CPU readers only: HAL partitions fold it
            ins, outs = boundary(g, load, set(s.nodes), set(self.fp16_out), cpu)
            parts.append(PartitionPlan(k, where, list(s.nodes), dev, ins, outs, load))
            if s.delegated:
                keys.add(Prebuilt.key(load, ins, outs))
            for i in s.nodes:
                ops[i].where, ops[i].partition, ops[i].device = where, k, dev
                if s.delegated:
                    ops[i].reason = ""
                else:
                    ops[i].rule = ""
                    if not ops[i].reason:
                        ops[i].reason = "not delegated"
        self.prebuilt.keep(keys)
        return Plan(g, o, ops, parts, self.levels, prebuilt=self.prebuilt)


def _noncompliant_reason(op_type: int, why: str, version: str) -> str:
    """Why an operation has no form at ``version`` ("HAL 1.0", "AIDL v1"), short: "nnhal's HAL form
    (PRELU) needs HAL 1.2; this partition is HAL 1.0"."""
    m = re.search(r"before HAL (V1_\d|AIDL_V\d)", why)
    name = hal.operation_name(op_type)
    if m:
        return f"nnhal's HAL form ({name}) needs {interface_name(HalVersion[m.group(1)])}; this partition is {version}"
    return f"nnhal's HAL form ({name}) is not valid at {version}: {why.split('; accepted:')[0]}"


def boundary(g: Graph, load: list[int], members: set[int], weights: set[int],
             cpu: Optional[set[int]] = None) -> tuple[list[int], list[int]]:
    """(inputs, outputs) of a partition running operators ``load`` (its ``members`` plus, on the HAL
    side, the float16 weight DEQUANTIZEs it folds): the non-constant tensors it reads that it does not
    write, and the tensors it writes that another partition or the model reads (of ``weights``, the
    float16 weights, only those a CPU operator of ``cpu`` reads)."""
    written = {k for i in load for k in g.operators[i].outputs if k >= 0}
    ins = sorted({k for i in load for k in g.operators[i].inputs
                  if k >= 0 and k not in written and not g.is_const(k)})
    outs = []
    for k in sorted(written):
        readers = set(g.consumers.get(k, []))
        outside = readers - members
        if k in weights:
            outside &= cpu or set()
        if k in g.outputs or outside:
            outs.append(k)
    return ins, outs


def build_plan(source: Any, opts: Options, device_of: Optional[DeviceOf] = None) -> Plan:
    """The plan of a .tflite file (a path, its bytes, or a :class:`Graph`); ``device_of``: how a device
    name becomes an ``IDevice`` (default: its face opened by name, :func:`nnhal.runtime.face.open_face`)."""
    g = source if isinstance(source, Graph) else Graph(source)
    planner = Planner(g, opts, device_of)
    try:
        return planner.build()
    finally:
        planner.close()
