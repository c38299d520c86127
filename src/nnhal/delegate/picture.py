"""A picture of a plan (``nnhal graph MODEL.tflite``): the TFLite operators
in topological layers, each box coloured by its partition (NNAPI partitions
in greens, CPU partitions in greys) and captioned with the partition, each
CPU operator's reason in its tooltip, the partitions listed as a legend, the
tensors crossing partitions drawn bold."""

from __future__ import annotations

import html
from typing import Optional

from nnhal.delegate.plan import Plan

_W, _LINE, _GX, _GY = 210, 14, 30, 40
_NNAPI = ("#b7e4b0", "#8fd19e", "#cdeac0", "#a3d9a5")
_CPU = ("#e0e0e0", "#cfcfcf")


def svg(plan: Plan, title: str = "") -> str:
    g = plan.graph
    layer: dict[int, int] = {}
    for op in g.operators:
        deps = [layer[g.producer[k]] for k in op.inputs if k >= 0 and k in g.producer and g.producer[k] in layer]
        layer[op.index] = max(deps, default=-1) + 1
    rows: dict[int, list[int]] = {}
    for i, r in layer.items():
        rows.setdefault(r, []).append(i)
    part = {o.index: o.partition for o in plan.operators}
    colour = {}
    nn = cpu = 0
    for p in plan.partitions:
        if p.where == "nnapi":
            colour[p.index], nn = _NNAPI[nn % len(_NNAPI)], nn + 1
        else:
            colour[p.index], cpu = _CPU[cpu % len(_CPU)], cpu + 1
    legend_h = 20 + 16 * len(plan.partitions)
    pos: dict[int, tuple[float, float]] = {}
    h = 3 * _LINE + 8
    y, width = 40.0 + legend_h, 400.0
    for r in sorted(rows):
        for n, i in enumerate(rows[r]):
            pos[i] = (20 + n * (_W + _GX), y)
        width = max(width, 20 + len(rows[r]) * (_W + _GX))
        y += h + _GY
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{int(width)}" height="{int(y + 20)}" '
           'font-family="monospace" font-size="11">',
           '<defs><marker id="arrow" markerWidth="8" markerHeight="8" refX="7" refY="4" orient="auto">'
           '<path d="M0,0 L8,4 L0,8 z" fill="#555"/></marker></defs>',
           f'<text x="20" y="18" font-size="13" font-weight="bold">{html.escape(title)}</text>']
    for n, p in enumerate(plan.partitions):
        yy = 36 + 16 * n
        out.append(f'<rect x="20" y="{yy - 10}" width="14" height="12" fill="{colour[p.index]}" stroke="#333"/>')
        out.append(f'<text x="40" y="{yy}">partition {p.index}: {p.where} {html.escape(p.device or "LiteRT")}, '
                   f'{len(p.operators)} operators</text>')
    for op in g.operators:
        x1, y1 = pos[op.index]
        for k in dict.fromkeys(op.inputs):
            src = g.producer.get(k)
            if k < 0 or src is None:
                continue
            x0, y0 = pos[src]
            cross = part.get(src) != part.get(op.index)
            out.append(f'<line x1="{x0 + _W / 2:.0f}" y1="{y0 + h:.0f}" x2="{x1 + _W / 2:.0f}" y2="{y1:.0f}" '
                       f'stroke="{"#c33" if cross else "#777"}" stroke-width="{2 if cross else 1}" '
                       'marker-end="url(#arrow)"/>')
    for o in plan.operators:
        x, yy = pos[o.index]
        tip = f"operator {o.index} {o.name}: {o.where}" + (f" ({o.reason})" if o.where == "cpu" else "")
        out.append(f'<g><title>{html.escape(tip)}</title><rect x="{x:.0f}" y="{yy:.0f}" width="{_W}" height="{h}" '
                   f'rx="5" fill="{colour.get(o.partition, "#fff")}" stroke="#333"/>')
        lines = [f"#{o.index} {o.name}", f"partition {o.partition} {o.where}",
                 (o.reason[:34] if o.where == "cpu" else (o.device or ""))]
        for n, s in enumerate(lines):
            weight = ' font-weight="bold"' if n == 0 else ""
            out.append(f'<text x="{x + 6:.0f}" y="{yy + 14 + n * _LINE:.0f}"{weight}>{html.escape(s[:34])}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)


def html_page(plan: Plan, title: str = "", explain: Optional[str] = None) -> str:
    body = svg(plan, title)
    text = f"<pre>{html.escape(explain)}</pre>\n" if explain else ""
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" + html.escape(title) +
            "</title></head><body>\n<p>TFLite operators in topological layers, coloured by partition (greens: "
            "NNAPI, greys: LiteRT's CPU kernels); red edges cross partitions; hover a box for why an operator "
            "is on the CPU.</p>\n" + text + body + "\n</body></html>\n")
