"""``nnhal ops --device NAME``'s extensions section: what a device declares
(``getSupportedExtensions``: each extension's operand types with ``isTensor``
and ``byteSize``) and, for a driver in this process, its operations with
their signatures (the HAL has no call that lists extension operations: a
service's are not known to its clients)."""

from __future__ import annotations

from typing import Any, TextIO

from nnhal import hal
from nnhal.driver import Device
from nnhal.ops.extension import Extension, Local


def _spec(spec: Any, ext: Extension) -> str:
    if isinstance(spec, frozenset):
        return "{" + ",".join(sorted(_spec(s, ext) for s in spec)) + "}"
    if isinstance(spec, Local):
        decl = ext.operand(spec.type)
        return decl.name if decl is not None else f"{ext.name}:{spec.type}"
    return hal.OperandType(spec).name


def signature_lines(ext: Extension) -> list[str]:
    """One line per declared operation signature: ``NAME (type): (inputs) -> (outputs) since HAL 1.x``."""
    lines = []
    for op in ext.operations:
        for sig in op.signatures:
            ins = [_spec(s, ext) for s in sig.inputs] + [f"[{_spec(s, ext)}]" for s in sig.optional]
            outs = [_spec(s, ext) for s in sig.outputs]
            lines.append(f"{op.name} ({op.type}): ({', '.join(ins)}) -> ({', '.join(outs)}) since HAL "
                         f"{sig.version.name}")
    return lines


def print_extensions(device: Any, name: str, out: TextIO) -> int:
    """The extensions section of ``nnhal ops --device``; the number of extensions listed."""
    status, exts = device.getSupportedExtensions()
    if status != hal.ErrorStatus.NONE:
        out.write(f"\nextensions: getSupportedExtensions failed ({hal.ErrorStatus(status).name})\n")
        return 0
    out.write(f"\nextensions declared (getSupportedExtensions): {len(exts) or 'none'}\n")
    declared = {e.name: e for e in device.extensions} if isinstance(device, Device) else {}
    for e in exts:
        out.write(f"{e.name}\n")
        decl = declared.get(e.name)
        for t in e.operandTypes:
            tname = decl.operand(int(t.type)).name if decl is not None and decl.operand(int(t.type)) else "operand"
            out.write(f"  operand type {int(t.type)} {tname}: {'tensor' if t.isTensor else 'scalar'}, "
                      f"{int(t.byteSize)} bytes{' an element' if t.isTensor else ''}\n")
        if decl is None:
            out.write("  operations: not listed by the HAL (known only for a driver in this process)\n")
            continue
        for line in signature_lines(decl):
            out.write(f"  operation {line}\n")
    return len(exts)
