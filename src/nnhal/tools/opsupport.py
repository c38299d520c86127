"""``nnhal ops [--device NAME]``: every operation with the data types and the
HAL versions that allow them.

Without a device the answer comes from the operation signatures of the ops
registry (``OpDef.signatures``: operand types per position and the first HAL
version allowing them).  With a device, each signature becomes a
one-operation probe model (tensors of unknown shape as model inputs and
outputs, scalars as constants), and the device answers with
``getSupportedOperations_1_3`` -- the HAL call, so the answer is right for any
driver, in this process or a service.  IF and WHILE need referenced
subgraphs and are shown from their signatures only, marked as not probed.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from typing import Any, TextIO

from nnhal import hal
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
    return v.name[1:].replace("_", ".")


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
            for t in _types(specs[0]) if specs else []:
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
        for first in _types(in_specs[0]) if in_specs else []:
            values = bytearray()
            ins = [_operand(first if k == 0 else _types(s)[0], values, "in") for k, s in enumerate(in_specs)]
            # NOTE: an output of the same spec as input 0 takes its type (ADD of quant8 gives quant8)
            outs = [_operand(first if s == in_specs[0] else _types(s)[0], values, "out") for s in out_specs]
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


def device_types(device: Any) -> dict[hal.OperationType, tuple[dict[str, Any], set[str], set[str]]]:
    """operation -> ({supported type: first HAL version}, types refused, types whose probe the device found invalid)."""
    out = {}
    for op in REGISTRY:
        if op in NOT_PROBED:
            continue
        ok: dict[str, Any] = {}
        refused: set[str] = set()
        invalid: set[str] = set()
        for name, version, model in probe_models(op):
            status, supported = device.getSupportedOperations_1_3(model)
            if status != hal.ErrorStatus.NONE or len(supported) != 1:
                invalid.add(name)
            elif supported[0]:
                ok[name] = min(ok.get(name, version), version)
            else:
                refused.add(name)
        out[op] = (ok, refused - set(ok), invalid - set(ok) - refused)
    return out


def _fmt(types: dict[str, Any]) -> str:
    return ", ".join(f"{t} {_version(v)}" for t, v in sorted(types.items(), key=lambda x: (x[1], x[0])))


def print_registry(out: TextIO) -> int:
    sigs = signature_types()
    out.write("operation (from the operation signatures)  data types with the first HAL version allowing them\n")
    for op in sorted(hal.OperationType, key=lambda o: o.name):
        types = sigs.get(op)
        out.write(f"{op.name:34s} {_fmt(types) if types is not None else 'not implemented'}\n")
    return 0


def print_device(device: Any, name: str, out: TextIO) -> int:
    import logging

    # NOTE: the probes of types a driver refuses make it log; those lines are expected
    logger = logging.getLogger("nnhal")
    level = logger.level
    logger.setLevel(max(level, logging.CRITICAL))
    try:
        answers = device_types(device)
    finally:
        logger.setLevel(level)
    sigs = signature_types()
    out.write(f"operation (as {name} answers getSupportedOperations_1_3)  supported data types with the first "
              f"HAL version allowing them\n")
    counts: dict[str, int] = defaultdict(int)
    for op in sorted(hal.OperationType, key=lambda o: o.name):
        if op in NOT_PROBED and op in sigs:
            out.write(f"{op.name:34s} {_fmt(sigs[op])} (from the signatures: not probed)\n")
            continue
        if op not in answers:
            out.write(f"{op.name:34s} not implemented by the ops registry: not probed\n")
            continue
        ok, refused, invalid = answers[op]
        counts["operations supported"] += bool(ok)
        line = _fmt(ok) if ok else "not supported"
        if refused:
            line += f"; refused: {', '.join(sorted(refused))}"
        if invalid:
            line += f"; probe model invalid for the device: {', '.join(sorted(invalid))}"
        out.write(f"{op.name:34s} {line}\n")
    out.write(f"\n{counts['operations supported']} of {len(answers)} probed operations supported by {name}\n")
    return 0
