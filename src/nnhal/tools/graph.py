"""A picture of a HAL 1.3 model (``types.hal`` ``Model.main``) a person can
open: a self-contained SVG (or HTML page holding it).

Operations are boxes in topological layers, each naming its
``OperationType`` with the constants it consumes folded in (scalars by value,
tensors by type and shape); edges carry the operand's type and dimensions.
With ``supported`` (from a device's ``getSupportedOperations_1_3``) each box
is green or red, and ``reasons`` says why an operation is not supported.
"""

from __future__ import annotations

import html
from typing import Optional, Sequence

import numpy as np

from nnhal import hal
from nnhal.hal import OperandLifeTime as L
from nnhal.hal import OperandType as T

_SHORT = {T.TENSOR_FLOAT32: "f32", T.TENSOR_FLOAT16: "f16", T.TENSOR_INT32: "i32", T.TENSOR_QUANT8_ASYMM: "u8",
          T.TENSOR_QUANT8_ASYMM_SIGNED: "s8", T.TENSOR_QUANT8_SYMM_PER_CHANNEL: "s8/ch",
          T.TENSOR_QUANT8_SYMM: "s8sym", T.TENSOR_QUANT16_SYMM: "s16", T.TENSOR_QUANT16_ASYMM: "u16",
          T.TENSOR_BOOL8: "bool", T.INT32: "int32", T.FLOAT32: "float32", T.BOOL: "bool", T.FLOAT16: "float16",
          T.UINT32: "uint32"}
_BOX_W, _BOX_LINE, _GAP_X, _GAP_Y = 230, 14, 40, 46


def operand_label(o: hal.Operand) -> str:
    t = _SHORT.get(o.type, str(int(o.type)))
    dims = "x".join(str(d) if d else "?" for d in o.dimensions)
    q = f" q({o.scale:.3g},{o.zeroPoint})" if o.scale and o.type not in (T.TENSOR_INT32,) else ""
    return f"{t}[{dims}]{q}"


def _scalar_value(model: hal.Model, o: hal.Operand) -> Optional[str]:
    if o.lifetime != L.CONSTANT_COPY or o.dimensions:
        return None
    raw = bytes(model.operandValues[o.location.offset: o.location.offset + o.location.length])
    dt = {T.INT32: np.int32, T.FLOAT32: np.float32, T.BOOL: np.bool_, T.FLOAT16: np.float16,
          T.UINT32: np.uint32}.get(o.type)
    if dt is None or len(raw) < np.dtype(dt).itemsize:
        return None
    return str(np.frombuffer(raw, dtype=dt, count=1)[0])


def _layers(sg: hal.Subgraph) -> list[int]:
    writer = {o: k for k, op in enumerate(sg.operations) for o in op.outputs}
    layer = [0] * len(sg.operations)
    for k, op in enumerate(sg.operations):  # NOTE: HAL operations are in a topological order
        for i in op.inputs:
            if i in writer:
                layer[k] = max(layer[k], layer[writer[i]] + 1)
    return layer


def svg(model: hal.Model, title: str = "", supported: Optional[Sequence[bool]] = None,
        reasons: Optional[dict[int, str]] = None, names: Optional[Sequence[str]] = None) -> str:
    """The SVG text of ``model.main``, then each referenced subgraph (IF / WHILE branches) below it.
    ``names``: an optional caption per main operation (e.g. the TFLite operator it came from)."""
    parts = [_panel(model, model.main, title, supported, reasons, names)]
    for i, ref in enumerate(model.referenced):
        parts.append(_panel(model, ref, f"referenced subgraph {i}", None, None, None))
    width = max(w for _, w, _ in parts)
    height = sum(h for _, _, h in parts)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{int(width)}" height="{int(height)}" '
           f'font-family="monospace" font-size="11">',
           '<defs><marker id="arrow" markerWidth="8" markerHeight="8" refX="7" refY="4" orient="auto">'
           '<path d="M0,0 L8,4 L0,8 z" fill="#555"/></marker></defs>']
    y = 0.0
    for body, _, h in parts:
        out.append(f'<g transform="translate(0,{y:.0f})">{body}</g>')
        y += h
    out.append("</svg>")
    return "\n".join(out)


def _panel(model: hal.Model, sg: hal.Subgraph, title: str, supported: Optional[Sequence[bool]],
           reasons: Optional[dict[int, str]], names: Optional[Sequence[str]]) -> tuple[str, float, float]:
    """One subgraph's drawing: (SVG elements, width, height)."""
    layer = _layers(sg)
    rows: dict[int, list[int]] = {}
    for k, lay in enumerate(layer):
        rows.setdefault(lay, []).append(k)
    lines: list[list[str]] = []
    for k, op in enumerate(sg.operations):
        name = hal.OperationType(op.type).name if op.type in hal.OperationType._value2member_map_ else str(op.type)
        ls = [f"#{k} {name}"]
        if names and k < len(names) and names[k]:
            ls.append(f"({names[k]})"[:36])
        for pos, i in enumerate(op.inputs):
            o = sg.operands[i]
            if o.lifetime in (L.CONSTANT_COPY, L.CONSTANT_REFERENCE):
                v = _scalar_value(model, o)
                ls.append(f"in{pos} = {v}" if v is not None else f"in{pos}: const {operand_label(o)}")
            elif o.lifetime == L.NO_VALUE:
                ls.append(f"in{pos}: (none)")
            elif o.lifetime == L.SUBGRAPH:
                ls.append(f"in{pos}: referenced subgraph {o.location.offset}")
        if supported is not None and k < len(supported) and not supported[k]:
            ls.append("NOT SUPPORTED" + (f": {reasons[k]}" if reasons and k in reasons else ""))
        lines.append(ls)
    height_of = [len(ls) * _BOX_LINE + 10 for ls in lines]
    row_h = {r: max(height_of[k] for k in ks) for r, ks in rows.items()}
    pos: dict[int, tuple[float, float]] = {}
    y = 70.0
    width = 0.0
    io_y_in = 30.0
    for r in sorted(rows):
        ks = rows[r]
        for n, k in enumerate(ks):
            pos[k] = (20 + n * (_BOX_W + _GAP_X), y)
        width = max(width, 20 + len(ks) * (_BOX_W + _GAP_X))
        y += row_h[r] + _GAP_Y
    height = y + 40
    out = [f'<text x="20" y="18" font-size="13" font-weight="bold">{html.escape(title)}</text>']
    writer = {o: k for k, op in enumerate(sg.operations) for o in op.outputs}
    # edges
    for k, op in enumerate(sg.operations):
        x1, y1 = pos[k]
        for i in op.inputs:
            o = sg.operands[i]
            if i in writer:
                x0, y0 = pos[writer[i]]
                y0 += height_of[writer[i]]
            elif o.lifetime == L.SUBGRAPH_INPUT:
                x0, y0 = x1, io_y_in
            else:
                continue
            out.append(f'<line x1="{x0 + _BOX_W / 2:.0f}" y1="{y0:.0f}" x2="{x1 + _BOX_W / 2:.0f}" y2="{y1:.0f}" '
                       'stroke="#555" marker-end="url(#arrow)"/>')
            lbl = ("input: " if o.lifetime == L.SUBGRAPH_INPUT else "") + operand_label(o)
            out.append(f'<text x="{(x0 + x1) / 2 + _BOX_W / 2 + 4:.0f}" y="{(y0 + y1) / 2:.0f}" fill="#246">'
                       f'{html.escape(lbl)}</text>')
        for i in op.outputs:
            if sg.operands[i].lifetime == L.SUBGRAPH_OUTPUT:
                x0, y0 = pos[k]
                y0 += height_of[k]
                out.append(f'<line x1="{x0 + _BOX_W / 2:.0f}" y1="{y0:.0f}" x2="{x0 + _BOX_W / 2:.0f}" '
                           f'y2="{y0 + 22:.0f}" stroke="#555" marker-end="url(#arrow)"/>')
                out.append(f'<text x="{x0 + _BOX_W / 2 + 4:.0f}" y="{y0 + 18:.0f}" fill="#246">output: '
                           f'{html.escape(operand_label(sg.operands[i]))}</text>')
    # boxes
    for k, ls in enumerate(lines):
        x, y0 = pos[k]
        fill = "#eef"
        if supported is not None:
            fill = "#cfc" if k < len(supported) and supported[k] else "#fcc"
        tip = html.escape(" | ".join(ls))
        out.append(f'<g><title>{tip}</title><rect x="{x:.0f}" y="{y0:.0f}" width="{_BOX_W}" '
                   f'height="{height_of[k]}" rx="5" fill="{fill}" stroke="#333"/>')
        for n, s in enumerate(ls):
            weight = ' font-weight="bold"' if n == 0 else ""
            out.append(f'<text x="{x + 6:.0f}" y="{y0 + 15 + n * _BOX_LINE:.0f}"{weight}>{html.escape(s[:40])}</text>')
        out.append("</g>")
    return "\n".join(out), max(width, 400), height


def html_page(model: hal.Model, title: str = "", **kw: object) -> str:
    """A self-contained HTML page holding the SVG and a legend."""
    body = svg(model, title, **kw)  # type: ignore[arg-type]
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" + html.escape(title) +
            "</title></head><body>\n<p>Operations of the HAL model in topological layers; edges carry operand "
            "type and dimensions; constants are listed in the operation that consumes them. Green: supported "
            "by the device, red: not.</p>\n" + body + "\n</body></html>\n")
