"""``nnhal ops [--device NAME]``: every operation with the data types and the
HAL versions that allow them, or what a device supports of them and why not.

Without a device the answer comes from the operation signatures of the ops
registry (``OpDef.signatures``: operand types per position and the first HAL
version allowing them).

With a device (:func:`device_report`), two kinds of models are asked, each
through ``nnhal.supported_operations`` (``getSupportedOperations_1_3`` and,
for a refusal, the device's reason through ``hal.INnhalDevice``: the same
answer in this process and through a service):

* vector forms, concrete shapes: every conformance vector model using the
  operation in its main subgraph (the shapes and parameters the operation is
  tested with), plus the quant8-signed copy the conformance runner makes of a
  coupled quant8 model.  Left out: the models that must fail
  (``expectFailure``) and the "all_inputs_as_internal" variation, the same
  operation behind extra ADDs.  A form of (operation, data type) is supported
  when the device takes every instance of the operation of that type in it;
  "supported" in a model of several operations is the device's flag for this
  operation (what ``nnhal conformance`` then prepares only if it takes all).
* unknown shapes: one probe model per signature (tensors of unknown rank as
  model inputs and outputs, scalars as constants), as before vectors were
  used.  IF and WHILE need referenced subgraphs: not probed this way.

Where no vectors are found, or none uses an operation, the signature probes
are the only answer, said so.  Nothing is cached between calls.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import logging
import re
import struct
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, TextIO

from nnhal import hal
from nnhal.conformance import vectors
from nnhal.conformance.vectors import VectorModel
from nnhal.ops.registry import REGISTRY

T = hal.OperandType
L = hal.OperandLifeTime
_SCALAR = {T.INT32: struct.pack("<i", 1), T.UINT32: struct.pack("<I", 1), T.FLOAT32: struct.pack("<f", 1.0),
           T.FLOAT16: struct.pack("<e", 1.0), T.BOOL: b"\0"}
_QUANT = {T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT16_ASYMM, T.TENSOR_QUANT8_SYMM,
          T.TENSOR_QUANT16_SYMM}
NOT_PROBED = {hal.OperationType.IF, hal.OperationType.WHILE}


def type_name(t: int) -> str:
    """float32, float16, quant8_asymm, quant8_asymm_signed, int32, bool8, ..."""
    name = T(t).name.lower()
    return name[len("tensor_"):] if name.startswith("tensor_") else name


def _types(spec: Any) -> list[T]:
    return sorted(T(t) for t in spec) if isinstance(spec, frozenset) else [T(spec)]


def _version(v: Any) -> str:
    """1.0..1.3 for the HIDL versions, "AIDL v2".. for the AIDL ones."""
    if v >= hal.HalVersion.AIDL_V1:
        return f"AIDL v{int(v) - int(hal.HalVersion.AIDL_V1) + 1}"
    return v.name[1:].replace("_", ".")


def _hal_label(version: Optional[str]) -> str:
    return "no signature" if version is None else version if version.startswith("AIDL") else f"HAL {version}"


def _data_spec(specs: list) -> Any:
    """The spec naming an operation's data type: input 0's, unless it is a scalar parameter and a
    tensor follows (PACK's axis)."""
    def tensor(spec: Any) -> bool:
        return all(hal.is_tensor_type(t) for t in _types(spec))

    return specs[0] if tensor(specs[0]) else next((s for s in specs if tensor(s)), specs[0])


# getSupportedOperations_1_3 takes HAL 1.3's operations and operand types: a later form is not asked
_HIDL_NEWEST = hal.HalVersion.V1_3
_NOT_ASKED = ("not asked: {} (getSupportedOperations_1_3 takes only HAL 1.3's forms; the device's AIDL "
              "face answers it)")


def signature_types() -> dict[hal.OperationType, dict[str, Any]]:
    """operation -> {data type of input 0: the first HAL version allowing it}."""
    out: dict[hal.OperationType, dict[str, Any]] = {}
    for op, opdef in REGISTRY.items():
        types: dict[str, Any] = {}
        for sig in opdef.signatures:
            specs = sig.input_specs(len(sig.inputs) + sig.min_variadic_inputs)
            if op in NOT_PROBED:  # NOTE: input 0 is the condition / a subgraph: name the data operands instead
                specs = specs[1:] if op == hal.OperationType.IF else specs
                specs = [s for s in specs if _types(s) != [T.SUBGRAPH]] or specs
            for t in _types(_data_spec(specs)) if specs else []:
                if t == T.SUBGRAPH:
                    continue
                name = type_name(t)
                types[name] = min(types.get(name, sig.version), sig.version)
        out[op] = types
    return out


def _operand(t: T, values: bytearray, role: str) -> hal.Operand:
    if role == "in" and t in _SCALAR:
        off = len(values)
        values += _SCALAR[t]
        return hal.Operand(type=t, dimensions=[], numberOfConsumers=1, scale=0.0, zeroPoint=0,
                           lifetime=L.CONSTANT_COPY, location=hal.DataLocation(0, off, len(_SCALAR[t])))
    dims: list[int] = []
    extra = None
    if t == T.TENSOR_QUANT8_SYMM_PER_CHANNEL:  # NOTE: channelDim must lie inside a known rank
        dims = [1, 1, 1, 1]
        extra = hal.OperandExtraParams(channelQuant=hal.SymmPerChannelQuantParams(scales=[1.0], channelDim=0))
    o = hal.Operand(type=t, dimensions=dims, numberOfConsumers=1 if role == "in" else 0,
                    scale=1.0 / 128 if t in _QUANT else 0.0, zeroPoint=0,
                    lifetime=L.SUBGRAPH_INPUT if role == "in" else L.SUBGRAPH_OUTPUT, location=hal.DataLocation())
    if extra is not None:
        o.extraParams = extra
    return o


def probe_models(op: hal.OperationType) -> list[tuple[str, Any, hal.Model]]:
    """One probe model per (signature, data type of input 0): (type name, HAL version, model)."""
    out = []
    for sig in REGISTRY[op].signatures:
        in_specs = sig.input_specs(len(sig.inputs) + sig.min_variadic_inputs)
        out_specs = sig.output_specs(len(sig.outputs) + sig.min_variadic_outputs)
        data = _data_spec(in_specs) if in_specs else None
        for first in _types(data) if in_specs else []:
            values = bytearray()
            ins = [_operand(first if s is data else _types(s)[0], values, "in") for s in in_specs]
            # NOTE: an output of the same spec as the data input takes its type (ADD of quant8 gives quant8)
            outs = [_operand(first if s == data else _types(s)[0], values, "out") for s in out_specs]
            operands = ins + outs
            main = hal.Subgraph(
                operands=operands,
                operations=[hal.Operation(type=op, inputs=list(range(len(ins))),
                                          outputs=list(range(len(ins), len(operands))))],
                inputIndexes=[k for k, o in enumerate(ins) if o.lifetime == L.SUBGRAPH_INPUT],
                outputIndexes=list(range(len(ins), len(operands))))
            out.append((type_name(first), sig.version,
                        hal.Model(main=main, referenced=[], operandValues=bytes(values), pools=[],
                                  relaxComputationFloat32toFloat16=False, extensionNameToPrefix=[])))
    return out



def _fmt(types: dict[str, Any]) -> str:
    return ", ".join(f"{t} {_version(v)}" for t, v in sorted(types.items(), key=lambda x: (x[1], x[0])))


def print_registry(out: TextIO) -> int:
    sigs = signature_types()
    out.write("operation (from the operation signatures)  data types with the first HAL version allowing them "
              "(HIDL 1.0-1.3, AIDL v2-v3)\n")
    for op in sorted(hal.OperationType, key=lambda o: o.name):
        types = sigs.get(op)
        out.write(f"{op.name:34s} {_fmt(types) if types is not None else 'not implemented'}\n")
    return 0


# --------------------------------------------------------------------------
# what a device supports, and why not


def data_type_name(t: int) -> str:
    """A tensor or scalar type named as the conformance reports name data types (float32, quant8 asymm, ...)."""
    return vectors.DATA_TYPE_NAMES.get(T(t), type_name(t))


def reason_key(text: str) -> str:
    """A refusal reason with its numbers as N (operand indices, padding values, ...), so that one reason
    of many forms is counted once."""
    text = re.sub(r"exact for \[.*\]", "exact for (listed types)", text)
    return re.sub(r"(?<![A-Za-z_\d])-?\d+(\.\d+)?(?![A-Za-z_\d])", "N", text)


@dataclass
class TypeAnswer:
    """What a device answered for one (operation, data type)."""

    hal_version: Optional[str] = None  # first HAL version whose signatures allow it ("1.2"); None: none does
    forms: int = 0  # vector forms asked
    supported: int = 0  # of them, taken
    refusals: Counter = field(default_factory=Counter)  # reason_key(reason) -> forms refused with it
    invalid: Counter = field(default_factory=Counter)  # "getSupportedOperations_1_3 returned S" -> forms
    details: list[tuple[str, str]] = field(default_factory=list)  # (vector model, "" or why not), per form
    unknown: Optional[tuple[bool, str]] = None  # unknown-shape probe: (taken, why not); None: not probed
    not_asked: str = ""  # why the device was not asked (a form newer than getSupportedOperations_1_3 takes)

    @property
    def status(self) -> str:
        """supported / partly supported / refused (vector forms), "no vector forms" or "not asked"."""
        if self.not_asked and not self.forms and self.unknown is None:
            return "not asked"
        if not self.forms:
            return "no vector forms"
        return "supported" if self.supported == self.forms else "partly supported" if self.supported else "refused"

    def to_json(self, details: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {
            "hal_version": self.hal_version, "status": self.status, "forms": self.forms,
            "supported": self.supported, "refused": self.forms - self.supported - sum(self.invalid.values()),
            "reasons": dict(self.refusals.most_common()), "invalid": dict(self.invalid.most_common()),
            "unknown_shapes": None if self.unknown is None else
            {"supported": self.unknown[0], "reason": self.unknown[1]}, "not_asked": self.not_asked or None}
        if details:
            d["details"] = [{"model": m, "supported": not r, "reason": r} for m, r in self.details]
        return d


@dataclass
class DeviceReport:
    """:func:`device_report`'s answer: per operation, per data type, a :class:`TypeAnswer`."""

    vectors: Optional[str]  # the vector folder asked from, None: signature probes only
    note: str  # one line on where the answers come from (and why only the signature probes, if so)
    operations: dict[hal.OperationType, dict[str, TypeAnswer]]
    bad_files: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def supported(self) -> set[str]:
        """Operations the device takes in at least one vector form (where an operation has no vector forms:
        in the unknown-shape probe)."""
        out = set()
        for op, types in self.operations.items():
            if any(a.supported for a in types.values()) or (
                    not any(a.forms for a in types.values()) and any(a.unknown and a.unknown[0]
                                                                     for a in types.values())):
                out.add(op.name)
        return out

    def to_json(self, device: str, details: bool = True) -> dict[str, Any]:
        return {"device": device, "vectors": self.vectors, "note": self.note, "bad_files": self.bad_files,
                "supported_operations": sorted(self.supported()),
                "operations": {op.name: {t: a.to_json(details) for t, a in sorted(types.items())}
                               for op, types in sorted(self.operations.items(), key=lambda x: x[0].name)}}


class DeviceUnavailable(RuntimeError):
    """The device answered DEVICE_UNAVAILABLE (a service gone, a driver failed): no further answer is asked."""


AS_INTERNAL = "all_inputs_as_internal"


def vector_forms(root: str, ops: Optional[set[str]], bad_file: Callable[[str], None]) -> Iterator[VectorModel]:
    """The vector models under ``root`` that are forms of an operation of ``ops`` (all: None), the quant8-signed
    copies the conformance runner makes included.  A file is parsed only if its text names one of ``ops``."""
    from nnhal.conformance.runner import has_quant8_coupled_operands, to_signed

    quoted = None if ops is None else [f'"{name}"'.encode() for name in ops]
    for f in vectors.find_files([root]):
        try:
            with open(f, "rb") as fh:
                data = gzip.decompress(fh.read())
            if quoted is not None and not any(q in data for q in quoted):  # NOTE: far cheaper than parsing
                continue
            doc = json.loads(data)
            spec = doc["spec"]
            found = []
            for m in doc["models"]:
                if m.get("expectFailure") or AS_INTERNAL in m["name"]:
                    continue
                if ops is not None and not ops & {o["type"] for o in m["main"]["operations"]}:
                    continue
                found.append(vectors.parse_model(spec, m))
        except (OSError, EOFError, ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
            bad_file(f"{f}: not a readable vector file ({type(e).__name__}: {e})")
            continue
        for vm in found:
            yield vm
            if has_quant8_coupled_operands(vm):
                yield to_signed(vm)


def _counted_operations(vm: VectorModel) -> list[int]:
    """Indices of the main operations ``vm`` is a form of: in the test generator's "_as_internal" variations
    the ADDs it adds around another operation are not forms of ADD."""
    ops = vm.main.operations
    if "_as_internal" in vm.name and any(o.type != hal.OperationType.ADD for o in ops):
        return [k for k, o in enumerate(ops) if o.type != hal.OperationType.ADD]
    return list(range(len(ops)))


def _ask(device: Any, model: hal.Model) -> tuple[Any, list[bool], list[str]]:
    import nnhal
    from nnhal.platform import memory as hal_memory

    try:
        return nnhal.supported_operations(device, model)
    finally:
        for m in model.pools:
            hal_memory.free(m)


def _answer(types: dict[str, TypeAnswer], name: str, sigs: dict[str, Any]) -> TypeAnswer:
    if name not in types:
        v = sigs.get(name.replace("relaxed", "float32"))
        types[name] = TypeAnswer(hal_version=_version(v) if v is not None else None)
    return types[name]


def _report_name(name: str) -> str:
    """A :func:`type_name` (quant8_asymm, bool) as :func:`data_type_name` (quant8 asymm, bool8)."""
    tensor = "TENSOR_" + name.upper()
    return data_type_name(T[tensor] if tensor in T.__members__ else T[name.upper()])


def _signature_versions(op: hal.OperationType, sigs: dict[hal.OperationType, dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for t, v in sigs.get(op, {}).items():
        name = _report_name(t)
        out[name] = min(out.get(name, v), v)
    return out


def device_report(device: Any, ops: Optional[set[str]] = None, vectors_dir: Optional[str] = None,
                  probe_unknown: bool = True) -> DeviceReport:
    """What ``device`` supports of ``ops`` (names; all: None) and why not, from the vector forms under
    ``vectors_dir`` (None or missing: signature probes only) and the unknown-shape signature probes."""
    import time

    t0 = time.perf_counter()
    sigs_all = signature_types()
    wanted = [op for op in hal.OperationType if ops is None or op.name in ops]
    report = DeviceReport(vectors=None, note="", operations={op: {} for op in wanted})
    sig_versions = {op: _signature_versions(op, sigs_all) for op in wanted}
    if vectors_dir and Path(vectors_dir).is_dir():
        report.vectors = str(vectors_dir)
        names = None if ops is None else {op.name for op in wanted}
        n_models = 0
        for vm in vector_forms(report.vectors, names, report.bad_files.append):
            counted = [k for k in _counted_operations(vm) if vm.main.operations[k].type in report.operations]
            if not counted:
                continue
            if vm.version is not None and vm.version > _HIDL_NEWEST:
                for k in counted:
                    op = vm.main.operations[k]
                    a = _answer(report.operations[op.type], vm.operation_data_type(op), sig_versions[op.type])
                    a.not_asked = _NOT_ASKED.format(f"a vector form of {vm.minSupportedVersion}")
                continue
            try:
                model = vm.build_model()
            except Exception as e:  # noqa: BLE001  # NOTE: a vector the builder refuses is named, not asked
                report.bad_files.append(f"vector model {vm.name} ({vm.spec}): not buildable ({type(e).__name__}: "
                                        f"{e})")
                continue
            status, flags, reasons = _ask(device, model)
            if status == hal.ErrorStatus.DEVICE_UNAVAILABLE:
                raise DeviceUnavailable(f"the device became unavailable (DEVICE_UNAVAILABLE) at vector model "
                                        f"{vm.name}, after {n_models}")
            n_models += 1
            per: dict[tuple[hal.OperationType, str], str] = {}  # (op, type) -> "" or the first reason
            for k in counted:
                op = vm.main.operations[k]
                key = (hal.OperationType(op.type), vm.operation_data_type(op))
                if status != hal.ErrorStatus.NONE:
                    why = f"getSupportedOperations_1_3 returned {hal.ErrorStatus(status).name}"
                else:
                    why = "" if flags[k] else reasons[k]
                per[key] = per.get(key) or why
            for (op, tname), why in per.items():
                a = _answer(report.operations[op], tname, sig_versions[op])
                a.forms += 1
                a.details.append((vm.name, why))
                if not why:
                    a.supported += 1
                elif status != hal.ErrorStatus.NONE:
                    a.invalid[why] += 1
                else:
                    a.refusals[reason_key(why)] += 1
        report.note = (f"vector forms: {n_models} conformance vector models under {report.vectors} (concrete "
                       f"shapes; the quant8-signed copies the conformance runner makes included)")
        missing = [op.name for op, types in report.operations.items() if not any(a.forms for a in types.values())
                   and (op not in REGISTRY or any(sig.version <= _HIDL_NEWEST for sig in REGISTRY[op].signatures))]
        if missing:
            report.note += f"; no vector model uses {', '.join(missing)}: signature probes only there"
    else:
        report.note = (f"no conformance vectors at {vectors_dir} (set $NNHAL_VECTORS): signature probes only "
                       f"(unknown shapes)")
    if probe_unknown:
        for op in wanted:
            if op in NOT_PROBED or op not in REGISTRY:
                continue
            for tname, version, model in probe_models(op):
                tname = _report_name(tname)
                if version > _HIDL_NEWEST:
                    _answer(report.operations[op], tname, sig_versions[op]).not_asked = \
                        _NOT_ASKED.format(f"an {_version(version)} signature")
                    continue
                status, flags, reasons = _ask(device, model)
                if status == hal.ErrorStatus.DEVICE_UNAVAILABLE:
                    raise DeviceUnavailable(f"the device became unavailable (DEVICE_UNAVAILABLE) at the unknown-shape "
                                            f"probe of {op.name}")
                if status != hal.ErrorStatus.NONE or len(flags) != 1:
                    got = (False, f"probe model invalid for the device: getSupportedOperations_1_3 returned "
                                  f"{hal.ErrorStatus(status).name}")
                else:
                    got = (flags[0], "" if flags[0] else reasons[0])
                a = _answer(report.operations[op], tname, sig_versions[op])
                if a.unknown is None or (got[0] and not a.unknown[0]):
                    a.unknown = got
    report.seconds = time.perf_counter() - t0
    return report


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    # NOTE: a driver logs every refusal; the reasons are in the report
    logger = logging.getLogger("nnhal")
    level = logger.level
    logger.setLevel(max(level, logging.CRITICAL))
    try:
        yield
    finally:
        logger.setLevel(level)


def print_report(report: DeviceReport, name: str, out: TextIO, verbose: bool = False) -> None:
    """The report as text: per operation, per data type, the vector forms taken and every refusal's reason."""
    out.write(f"operations as {name} answers getSupportedOperations_1_3 (each refusal with the device's reason)\n")
    out.write(f"{report.note}\n")
    if report.vectors is not None:
        out.write("unknown shapes: one probe model per signature, tensors of unknown rank\n")
    for line in report.bad_files:
        out.write(f"skipped: {line}\n")
    done = report.supported()
    for op in sorted(report.operations, key=lambda o: o.name):
        types = report.operations[op]
        if not types:
            why = ("not implemented by the ops registry" if op not in REGISTRY else
                   "not probed: no vector model uses it, and its probe needs a referenced subgraph")
            out.write(f"\n{op.name}: {why}\n")
            continue
        if all(a.status == "not asked" for a in types.values()):
            first = min(a.hal_version or "" for a in types.values())
            out.write(f"\n{op.name}: not asked: an {first} operation (getSupportedOperations_1_3 takes only HAL "
                      f"1.3's operations; the device's AIDL face answers it): {', '.join(sorted(types))}\n")
            continue
        out.write(f"\n{op.name}: {'supported' if op.name in done else 'not supported'}\n")
        for tname, a in sorted(types.items(), key=lambda x: (x[1].hal_version is None, x[1].hal_version or "",
                                                             x[0])):
            hv = _hal_label(a.hal_version)
            if a.status == "not asked":
                out.write(f"  {tname:15s} {hv:12s} not asked (not a HAL 1.3 form)\n")
                continue
            if a.forms:
                vec = (f"supported in {a.supported} of {a.forms} vector forms" if a.supported else
                       f"refused in {a.forms} of {a.forms} vector forms")
            else:
                vec = "no vector forms" if report.vectors is not None else ""
            if a.unknown is not None:
                same = not a.unknown[0] and reason_key(a.unknown[1]) in a.refusals
                unk = "unknown shapes: " + ("supported" if a.unknown[0] else
                                            "refused (the same reason)" if same else f"refused ({a.unknown[1]})")
                vec = f"{vec}; {unk}" if vec else unk
            out.write(f"  {tname:15s} {hv:12s} {vec}\n")
            for why, n in a.refusals.most_common():
                out.write(f"      refused in {n}: {why}\n")
            for why, n in a.invalid.most_common():
                out.write(f"      invalid in {n}: {why}\n")
            if verbose:
                for model, why in a.details:
                    out.write(f"        {model}: {'supported' if not why else 'refused: ' + why}\n")
    asked = {op: {t: a for t, a in types.items() if a.status != "not asked"}
             for op, types in report.operations.items()}
    asked = {op: types for op, types in asked.items() if types or not report.operations[op]}
    n_types = sum(len(t) for t in asked.values())
    ok_types = sum(1 for t in asked.values() for a in t.values() if a.supported or
                   (not a.forms and a.unknown and a.unknown[0]))
    basis = "in at least one vector form" if report.vectors is not None else "in the signature probes"
    later = len(report.operations) - len(asked)
    not_asked = f"; {later} AIDL operation{'' if later == 1 else 's'} not asked" if later else ""
    out.write(f"\n{len(done)} of {len(asked)} operations supported by {name} {basis} "
              f"({ok_types} of {n_types} operation / data type pairs{not_asked}); {report.seconds:.1f} s\n")


def run(device: Any, name: str, out: TextIO, ops: Optional[set[str]] = None, vectors_dir: Optional[str] = None,
        verbose: bool = False) -> DeviceReport:
    """``nnhal ops --device NAME``: the report, printed on ``out`` (the driver's log lines of the refusals
    silenced: the reasons are in the report)."""
    with _quiet():
        report = device_report(device, ops, vectors_dir)
    print_report(report, name, out, verbose)
    return report


def write_json(report: DeviceReport, name: str, path: str) -> None:
    with open(path, "w") as f:
        json.dump(report.to_json(name), f, indent=1)
        f.write("\n")
