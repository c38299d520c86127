"""``nnhal graph``: a HAL 1.3 model laid out by Graphviz (``dot``: layered, edges routed around the
nodes), as a person compares it with Netron.

Each operation is a node naming its ``OperationType``, the TFLite operator it came from, its
parameters by name (``padding=SAME stride=2x2 act=RELU6``: :data:`PARAMS`, the NNAPI operand order of
each operation's signatures in ``nnhal.ops``) and a summary of its constant tensors (weights, bias);
edges carry the tensor's name, type, shape and quantization; the model's inputs and outputs are
named nodes; referenced subgraphs (IF / WHILE bodies) are boxed groups of their own.

Colouring, either:

* ``supported`` / ``reasons`` (a device's ``getSupportedOperations_1_3`` and its reasons): green or
  red, the reason in the node and its details;
* ``groups``: ``{operation index: (group label, colour)}``, e.g. the client runtime's partitions
  (device per operation) or a delegate plan: operations of one label are drawn in one coloured,
  labelled box (each contiguous run of one label its own box; colours are any Graphviz / CSS colour
  such as ``#8dd3c7``).

Output by the file's extension: ``.svg``, ``.png``, ``.pdf`` (Graphviz renders), ``.dot`` / ``.gv``
(the Graphviz source), ``.html`` (the SVG in a self-contained page: zoom with the wheel, pan by
dragging, search by tensor / operation name or type, click a node for its operands, constants
and the device's reason; no network; ``page.html#q=CONV_2D&select=op3`` opens it searched and with
operation 3's details).  Graphviz is a system package (Debian: ``apt-get install
graphviz``; ``.ci/run`` installs it); without ``dot`` only ``.dot`` is written and the others are
refused in one line.
"""

from __future__ import annotations

import html
import json
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from nnhal import hal
from nnhal.hal import OperandLifeTime as L
from nnhal.hal import OperandType as T

__all__ = ["FORMATS", "GraphError", "GraphInfo", "PARAMS", "dot_source", "render", "html_page", "named_params",
           "operand_text", "PALETTE"]

FORMATS = ("svg", "html", "htm", "png", "pdf", "dot", "gv")

# NOTE: a qualitative palette (ColorBrewer Set3): groups (devices, partitions) in order of appearance
PALETTE = ["#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69", "#fccde5", "#d9d9d9",
           "#bc80bd", "#ccebc5", "#ffed6f"]


class GraphError(Exception):
    """The picture cannot be made (no Graphviz, an unknown format): one line for the user."""


_SHORT = {T.TENSOR_FLOAT32: "f32", T.TENSOR_FLOAT16: "f16", T.TENSOR_INT32: "i32", T.TENSOR_QUANT8_ASYMM: "u8",
          T.TENSOR_QUANT8_ASYMM_SIGNED: "s8", T.TENSOR_QUANT8_SYMM_PER_CHANNEL: "s8/ch",
          T.TENSOR_QUANT8_SYMM: "s8sym", T.TENSOR_QUANT16_SYMM: "s16", T.TENSOR_QUANT16_ASYMM: "u16",
          T.TENSOR_BOOL8: "bool", T.INT32: "int32", T.FLOAT32: "float32", T.BOOL: "bool", T.FLOAT16: "float16",
          T.UINT32: "uint32"}

# Per operation, the NNAPI names of its inputs in operand order, for each input count its signatures
# take (the implicit- / explicit-padding forms of a convolution differ in count).  Tensors keep their
# place (None: named by its own tensor); the names of the scalars become ``name=value``.
_ACT = "act"
_CONV_IMPLICIT = (None, "filter", "bias", "padding", "stride_w", "stride_h", _ACT, "nchw", "dilation_w", "dilation_h")
_CONV_EXPLICIT = (None, "filter", "bias", "pad_l", "pad_r", "pad_t", "pad_b", "stride_w", "stride_h", _ACT, "nchw",
                  "dilation_w", "dilation_h")
_DW_IMPLICIT = (None, "filter", "bias", "padding", "stride_w", "stride_h", "multiplier", _ACT, "nchw", "dilation_w",
                "dilation_h")
_DW_EXPLICIT = (None, "filter", "bias", "pad_l", "pad_r", "pad_t", "pad_b", "stride_w", "stride_h", "multiplier",
                _ACT, "nchw", "dilation_w", "dilation_h")
_POOL_IMPLICIT = (None, "padding", "stride_w", "stride_h", "filter_w", "filter_h", _ACT, "nchw")
_POOL_EXPLICIT = (None, "pad_l", "pad_r", "pad_t", "pad_b", "stride_w", "stride_h", "filter_w", "filter_h", _ACT,
                  "nchw")
_BINARY = (None, None, _ACT)
PARAMS: dict[str, list[tuple[str | None, ...]]] = {
    "CONV_2D": [_CONV_IMPLICIT, _CONV_EXPLICIT],
    "DEPTHWISE_CONV_2D": [_DW_IMPLICIT, _DW_EXPLICIT],
    "AVERAGE_POOL_2D": [_POOL_IMPLICIT, _POOL_EXPLICIT], "MAX_POOL_2D": [_POOL_IMPLICIT, _POOL_EXPLICIT],
    "L2_POOL_2D": [_POOL_IMPLICIT, _POOL_EXPLICIT],
    "ADD": [_BINARY], "MUL": [_BINARY], "SUB": [_BINARY], "DIV": [_BINARY],
    "FULLY_CONNECTED": [(None, "weights", "bias", _ACT)],
    "SOFTMAX": [(None, "beta", "axis")], "L2_NORMALIZATION": [(None, "axis")],
    "LOCAL_RESPONSE_NORMALIZATION": [(None, "radius", "bias", "alpha", "beta", "axis")],
    "RESHAPE": [(None, "shape")], "SQUEEZE": [(None, "axes")], "TRANSPOSE": [(None, "perm")],
    "MEAN": [(None, "axes", "keep_dims")], "REDUCE_SUM": [(None, "axes", "keep_dims")],
    "REDUCE_MAX": [(None, "axes", "keep_dims")], "REDUCE_MIN": [(None, "axes", "keep_dims")],
    "PAD": [(None, "paddings")], "PAD_V2": [(None, "paddings", "pad_value")],
    "RESIZE_BILINEAR": [(None, "out_w", "out_h", "nchw", "align_corners", "half_pixel_centers")],
    "RESIZE_NEAREST_NEIGHBOR": [(None, "out_w", "out_h", "nchw", "align_corners", "half_pixel_centers")],
    "DEPTH_TO_SPACE": [(None, "block", "nchw")], "SPACE_TO_DEPTH": [(None, "block", "nchw")],
    "STRIDED_SLICE": [(None, "begin", "end", "strides", "begin_mask", "end_mask", "shrink_mask")],
    "SLICE": [(None, "begin", "size")], "GATHER": [(None, "axis", None)], "ARGMAX": [(None, "axis")],
    "ARGMIN": [(None, "axis")], "EXPAND_DIMS": [(None, "axis")], "SPLIT": [(None, "axis", "splits")],
    "TRANSPOSE_CONV_2D": [(None, "filter", "bias", "output_shape", "padding", "stride_w", "stride_h", _ACT, "nchw"),
                          (None, "filter", "bias", "pad_l", "pad_r", "pad_t", "pad_b", "stride_w", "stride_h", _ACT,
                           "nchw")],
    "PRELU": [(None, "alpha")], "HARD_SWISH": [(None,)], "LOGISTIC": [(None,)], "TANH": [(None,)],
    "QUANTIZE": [(None,)], "DEQUANTIZE": [(None,)],
}
# NOTE: control flow: the named operands come first, then any number of data operands
_VARIADIC: dict[str, tuple[str | None, ...]] = {"WHILE": ("cond", "body"), "IF": ("condition", "then", "else")}
_PADDING = {1: "SAME", 2: "VALID"}
_WEIGHTS = {"filter", "bias", "weights", "alpha"}  # NOTE: tensors summarized as constants, never values
_ACTS = {0: "NONE", 1: "RELU", 2: "RELU1", 3: "RELU6"}


def operand_text(o: hal.Operand) -> str:
    """``f32[1x96x96x32]``, with ``q(scale,zero point)`` for a quantized tensor."""
    t = _SHORT.get(o.type, str(int(o.type)))
    dims = "x".join(str(d) if d else "?" for d in o.dimensions)
    q = f" q({o.scale:.3g},{o.zeroPoint})" if o.scale and o.type != T.TENSOR_INT32 else ""
    return f"{t}[{dims}]{q}"


def _const_value(model: hal.Model, o: hal.Operand) -> Optional[np.ndarray]:
    """A small constant's value (CONSTANT_COPY, up to 16 elements), else None."""
    if o.lifetime != L.CONSTANT_COPY:
        return None
    dt = {T.INT32: np.int32, T.FLOAT32: np.float32, T.BOOL: np.bool_, T.FLOAT16: np.float16, T.UINT32: np.uint32,
          T.TENSOR_INT32: np.int32, T.TENSOR_FLOAT32: np.float32, T.TENSOR_FLOAT16: np.float16,
          T.TENSOR_BOOL8: np.bool_}.get(o.type)
    if dt is None:
        return None
    n = int(np.prod(o.dimensions)) if o.dimensions else 1
    raw = bytes(model.operandValues[o.location.offset: o.location.offset + o.location.length])
    if n > 16 or len(raw) < n * np.dtype(dt).itemsize:
        return None
    return np.frombuffer(raw, dtype=dt, count=n)


def _fmt(v: np.ndarray, scalar: bool) -> str:
    vals = [f"{x:.4g}" if v.dtype.kind == "f" else str(x) for x in v.tolist()]
    return vals[0] if scalar and len(vals) == 1 else "[" + ",".join(vals) + "]"


def named_params(model: hal.Model, sg: hal.Subgraph, op: hal.Operation) -> tuple[list[str], list[str]]:
    """(``name=value`` parameters, constant-tensor summaries) of one operation.  Strides, dilations and
    paddings are folded (``stride=2x2``), padding codes and fused activations spelled (SAME, RELU6)."""
    name = hal.operation_name(op.type)
    forms = [f for f in PARAMS.get(name, []) if len(f) >= len(op.inputs)]
    names = min(forms, key=len) if forms else _VARIADIC.get(name, ())
    params: dict[str, str] = {}
    consts: list[str] = []
    for pos, i in enumerate(op.inputs):
        o = sg.operands[i]
        pname = names[pos] if pos < len(names) else None
        if o.lifetime == L.NO_VALUE:
            if pname:
                params[pname] = "none"
            continue
        if o.lifetime == L.SUBGRAPH:
            params[pname or f"in{pos}"] = f"subgraph {o.location.offset}"
            continue
        if o.lifetime not in (L.CONSTANT_COPY, L.CONSTANT_REFERENCE):
            continue
        v = _const_value(model, o)
        if o.dimensions and (v is None or len(v) > 8 or pname in _WEIGHTS or pname is None):
            consts.append(f"{pname or f'in{pos}'}: {operand_text(o)}")
            continue
        label = pname or f"in{pos}"
        params[label] = _fmt(v, not o.dimensions) if v is not None else operand_text(o)
    return _fold(params), consts


def _fold(p: dict[str, str]) -> list[str]:
    out = dict(p)
    for a, b, name in (("stride_w", "stride_h", "stride"), ("dilation_w", "dilation_h", "dilation"),
                       ("filter_w", "filter_h", "filter"), ("out_w", "out_h", "size")):
        if a in out and b in out:
            out[name] = f"{out.pop(a)}x{out.pop(b)}"
    if all(k in out for k in ("pad_l", "pad_r", "pad_t", "pad_b")):
        out["pad"] = f"{out.pop('pad_l')},{out.pop('pad_r')},{out.pop('pad_t')},{out.pop('pad_b')}"
    if out.get("padding", "").isdigit():
        out["padding"] = _PADDING.get(int(out["padding"]), out["padding"])
    if out.get(_ACT, "").isdigit():
        out[_ACT] = _ACTS.get(int(out[_ACT]), out[_ACT])
    if out.get("nchw") in ("False", "false"):
        out.pop("nchw")  # NOTE: the default layout (NHWC) is not worth a line
    if out.get("dilation") == "1x1":
        out.pop("dilation")
    if out.get(_ACT) == "NONE":
        out.pop(_ACT)
    return [f"{k}={v}" for k, v in out.items()]


@dataclass
class GraphInfo:
    """What a picture shows beside the model: names and the colouring."""

    title: str = ""
    op_labels: Optional[Sequence[str]] = None  # per main operation, e.g. "TFLite op 12 CONV_2D"
    operand_names: dict[int, str] = field(default_factory=dict)  # main operand index -> tensor name
    supported: Optional[Sequence[bool]] = None
    reasons: dict[int, str] = field(default_factory=dict)
    groups: Optional[dict[int, tuple[str, str]]] = None  # op index -> (group label, colour)
    device: str = ""


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _h(s: str, limit: int = 60) -> str:
    s = s if len(s) <= limit else s[: limit - 3] + "..."
    return html.escape(s, quote=True)


def _node_details(model: hal.Model, sg: hal.Subgraph, k: int, info: GraphInfo, main: bool) -> dict:
    op = sg.operations[k]
    names = info.operand_names if main else {}

    def operand(i: int) -> dict:
        o = sg.operands[i]
        return {"index": i, "name": names.get(i, ""), "type": hal.OperandType(o.type).name if o.type in
                hal.OperandType._value2member_map_ else str(o.type), "shape": list(o.dimensions),
                "scale": o.scale, "zeroPoint": o.zeroPoint, "lifetime": L(o.lifetime).name, "text": operand_text(o)}

    params, consts = named_params(model, sg, op)
    d = {"id": f"op{k}" if main else None, "index": k, "type": hal.operation_name(op.type),
         "label": (info.op_labels[k] if main and info.op_labels and k < len(info.op_labels) else ""),
         "params": params, "constants": consts, "inputs": [operand(i) for i in op.inputs],
         "outputs": [operand(i) for i in op.outputs]}
    if main and info.supported is not None and k < len(info.supported):
        d["supported"] = bool(info.supported[k])
        d["reason"] = info.reasons.get(k, "")
    if main and info.groups and k in info.groups:
        d["group"] = info.groups[k][0]
    return d


def dot_source(model: hal.Model, info: GraphInfo) -> tuple[str, list[dict]]:
    """The Graphviz source of ``model`` and the details of every main operation (for the page)."""
    out = ["digraph model {", '  graph [rankdir=TB, fontname="Helvetica", fontsize=12, nodesep=0.25, ranksep=0.35, '
           f'labelloc=t, label={_q(chr(10).join(_wrap_text(info.title, 90)))}, tooltip=" "];',
           '  node [fontname="Helvetica", fontsize=10, shape=plain];',
           '  edge [fontname="Helvetica", fontsize=8, color="#666666", fontcolor="#224466", arrowsize=0.6];']
    details: list[dict] = []
    _subgraph(out, model, model.main, "", info, True, details)
    for r, ref in enumerate(model.referenced):
        out.append(f"  subgraph cluster_ref{r} {{")
        out.append(f'    label={_q(f"referenced subgraph {r}")}; style="rounded,dashed"; color="#888888";')
        _subgraph(out, model, ref, f"r{r}_", GraphInfo(), False, [])
        out.append("  }")
    out.append("}")
    return "\n".join(out), details


def _subgraph(out: list[str], model: hal.Model, sg: hal.Subgraph, prefix: str, info: GraphInfo, main: bool,
              details: list[dict]) -> None:
    names = info.operand_names if main else {}
    writer = {o: k for k, op in enumerate(sg.operations) for o in op.outputs}
    fills: dict[int, str] = {}
    for k in range(len(sg.operations)):
        d = _node_details(model, sg, k, info, main)
        details.append(d)
        fill = "#eef2ff"
        if main and info.supported is not None and k < len(info.supported):
            fill = "#d4f7d4" if info.supported[k] else "#ffd0d0"
        if main and info.groups and k in info.groups and info.supported is None:
            fill = info.groups[k][1]  # NOTE: with a device, the nodes say what it takes and the boxes the groups
        fills[k] = fill
    node_lines = {}
    for k, d in enumerate(details[-len(sg.operations):] if sg.operations else []):
        rows = [f'<TR><TD ALIGN="LEFT"><B>{_h(d["type"])}</B> <FONT COLOR="#666666">#{k}</FONT></TD></TR>']
        if d["label"]:
            rows.append(f'<TR><TD ALIGN="LEFT"><FONT POINT-SIZE="8" COLOR="#555555">{_h(d["label"])}</FONT></TD></TR>')
        for line in _wrap(d["params"], 46):
            rows.append(f'<TR><TD ALIGN="LEFT"><FONT POINT-SIZE="9">{_h(line, 80)}</FONT></TD></TR>')
        for c in d["constants"][:3]:
            rows.append(f'<TR><TD ALIGN="LEFT"><FONT POINT-SIZE="8" COLOR="#555555">{_h(c, 50)}</FONT></TD></TR>')
        if d.get("supported") is False:
            reason = d.get("reason") or "refused"
            for line in _wrap_text("refused: " + reason, 50)[:4]:
                rows.append(f'<TR><TD ALIGN="LEFT"><FONT POINT-SIZE="8" COLOR="#aa0000">{_h(line, 56)}</FONT></TD></TR>')
        label = (f'<<TABLE BORDER="1" CELLBORDER="0" CELLSPACING="0" CELLPADDING="2" STYLE="ROUNDED" '
                 f'BGCOLOR="{fills[k]}" COLOR="#333333">{"".join(rows)}</TABLE>>')
        tip = f"{d['type']} #{k}" + (f" ({d['label']})" if d["label"] else "")
        node_lines[k] = f"  {prefix}op{k} [id={_q(prefix + 'op' + str(k))}, label={label}, tooltip={_q(tip)}];"
    # NOTE: groups (partitions, a delegate plan): each contiguous run of one label is one coloured box
    if main and info.groups:
        run: list[int] = []
        runs: list[tuple[str, str, list[int]]] = []
        for k in range(len(sg.operations)):
            g = info.groups.get(k)
            if g is None:
                continue
            if runs and runs[-1][0] == g[0] and run and run[-1] == k - 1:
                run.append(k)
            else:
                run = [k]
                runs.append((g[0], g[1], run))
        placed = set()
        for n, (label, colour, ks) in enumerate(runs):
            out.append(f"  subgraph cluster_g{n} {{")
            out.append(f'    label={_q(label)}; style="rounded,filled"; fillcolor="{colour}40"; color="{colour}"; '
                       f'penwidth=2; fontsize=11;')
            out += ["  " + node_lines[k] for k in ks]
            placed.update(ks)
            out.append("  }")
        out += [node_lines[k] for k in range(len(sg.operations)) if k not in placed]
    else:
        out += [node_lines[k] for k in range(len(sg.operations))]
    # inputs and outputs, named
    for n, i in enumerate(sg.inputIndexes):
        o = sg.operands[i]
        nm = names.get(i, "") or f"input {n}"
        out.append(f"  {prefix}in{i} [id={_q(prefix + 'in' + str(i))}, shape=box, style=\"rounded,filled\", "
                   f"fillcolor=\"#fff3c4\", label={_q(nm + chr(10) + operand_text(o))}, fontsize=9];")
    for n, i in enumerate(sg.outputIndexes):
        o = sg.operands[i]
        nm = names.get(i, "") or f"output {n}"
        out.append(f"  {prefix}out{i} [id={_q(prefix + 'out' + str(i))}, shape=box, style=\"rounded,filled\", "
                   f"fillcolor=\"#dff0ff\", label={_q(nm + chr(10) + operand_text(o))}, fontsize=9];")
    inputs = set(sg.inputIndexes)
    for k, op in enumerate(sg.operations):
        for i in dict.fromkeys(op.inputs):
            o = sg.operands[i]
            if i in writer:
                src = f"{prefix}op{writer[i]}"
            elif i in inputs:
                src = f"{prefix}in{i}"
            else:
                continue
            out.append(f"  {src} -> {prefix}op{k} [label={_q(_edge_label(names.get(i, ''), o))}];")
        for i in op.outputs:
            if i in sg.outputIndexes:
                out.append(f"  {prefix}op{k} -> {prefix}out{i};")


def _edge_label(name: str, o: hal.Operand) -> str:
    short = name if len(name) <= 28 else "..." + name[-25:]
    return (short + "\n" if short else "") + operand_text(o)


def _wrap(items: list[str], width: int) -> list[str]:
    lines, cur = [], ""
    for it in items:
        if cur and len(cur) + 1 + len(it) > width:
            lines.append(cur)
            cur = it
        else:
            cur = f"{cur} {it}" if cur else it
    if cur:
        lines.append(cur)
    return lines


def _wrap_text(s: str, width: int) -> list[str]:
    return _wrap(s.split(" "), width)


def _dot() -> str:
    exe = shutil.which("dot")
    if exe is None:
        raise GraphError("drawing needs Graphviz's dot (Debian: apt-get install graphviz); "
                         "-o FILE.dot writes the source without it")
    return exe


def render(source: str, fmt: str) -> bytes:
    """Graphviz's rendering of ``source`` as ``fmt`` (svg, png, pdf)."""
    r = subprocess.run([_dot(), f"-T{fmt}"], input=source.encode(), capture_output=True, timeout=300)
    if r.returncode != 0:
        raise GraphError(f"Graphviz failed: {r.stderr.decode(errors='replace').strip()[:300]}")
    return r.stdout


_PAGE_CSS = """html,body{margin:0;height:100%;font-family:system-ui,sans-serif;font-size:13px}
#bar{position:fixed;top:0;left:0;right:0;height:38px;background:#f4f4f4;border-bottom:1px solid #ccc;display:flex;
align-items:center;gap:10px;padding:0 10px;z-index:2}#bar h1{font-size:14px;margin:0;white-space:nowrap;overflow:hidden;
text-overflow:ellipsis;max-width:45%}#q{width:260px}#count{color:#555}
#view{position:fixed;top:39px;left:0;right:360px;bottom:0;overflow:hidden;cursor:grab;background:#fff}
#view.drag{cursor:grabbing}#view svg{position:absolute;left:0;top:0;transform-origin:0 0}
#side{position:fixed;top:39px;right:0;width:360px;bottom:0;overflow:auto;border-left:1px solid #ccc;padding:8px;
box-sizing:border-box;background:#fafafa}#side table{border-collapse:collapse;width:100%;font-size:12px}
#side td,#side th{border:1px solid #ddd;padding:2px 4px;text-align:left;vertical-align:top;word-break:break-all}
.legend span{display:inline-block;padding:1px 6px;margin:2px;border:1px solid #999;border-radius:3px}
g.node.hit>*{filter:drop-shadow(0 0 4px #f0a)}g.node.dim{opacity:.25}g.node.sel>*{filter:drop-shadow(0 0 5px #06f)}
.refused{color:#a00}button{font-size:12px}"""

_PAGE_JS = """const data=JSON.parse(document.getElementById('nodes').textContent);
const byId={};data.forEach(d=>{if(d.id)byId[d.id]=d;});
const view=document.getElementById('view'),svg=view.querySelector('svg');
let s=1,x=0,y=0;function apply(){svg.style.transform=`translate(${x}px,${y}px) scale(${s})`;}
function fit(whole){const w=svg.viewBox.baseVal.width||svg.getBBox().width,h=svg.viewBox.baseVal.height||svg.getBBox().height;
s=Math.min(view.clientWidth/w,whole?view.clientHeight/h:1,1.5);x=Math.max((view.clientWidth-w*s)/2,0);y=4;apply();}
svg.removeAttribute('width');svg.removeAttribute('height');
const vb=svg.viewBox.baseVal;svg.setAttribute('width',vb.width);svg.setAttribute('height',vb.height);
view.addEventListener('wheel',e=>{e.preventDefault();const r=view.getBoundingClientRect(),mx=e.clientX-r.left,
my=e.clientY-r.top,k=Math.exp(-e.deltaY*0.0015);x=mx-(mx-x)*k;y=my-(my-y)*k;s*=k;apply();},{passive:false});
let drag=null;view.addEventListener('mousedown',e=>{drag=[e.clientX-x,e.clientY-y,e.clientX,e.clientY];
view.classList.add('drag');});
window.addEventListener('mouseup',e=>{view.classList.remove('drag');if(drag&&Math.abs(e.clientX-drag[2])+
Math.abs(e.clientY-drag[3])<4){const g=e.target.closest&&e.target.closest('g.node');if(g)select(g.id);}drag=null;});
window.addEventListener('mousemove',e=>{if(drag){x=e.clientX-drag[0];y=e.clientY-drag[1];apply();}});
function esc(t){return String(t).replace(/[&<>"]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c]));}
function row(o){return `<tr><td>${o.index}</td><td>${esc(o.name||'')}</td><td>${esc(o.text)}</td><td>${o.lifetime}</td></tr>`;}
function select(id){document.querySelectorAll('g.node.sel').forEach(g=>g.classList.remove('sel'));
const g=document.getElementById(id);if(g)g.classList.add('sel');const d=byId[id],side=document.getElementById('detail');
if(!d){side.innerHTML=g?`<p>${esc(g.querySelector('title')?g.textContent:id)}</p>`:'';return;}
let h=`<h3>${esc(d.type)} #${d.index}</h3>`;if(d.label)h+=`<p>${esc(d.label)}</p>`;
if(d.group)h+=`<p>group: <b>${esc(d.group)}</b></p>`;
if('supported' in d)h+=d.supported?'<p>supported by the device</p>':`<p class="refused">refused: ${esc(d.reason||'(no reason given)')}</p>`;
if(d.params.length)h+=`<p>${d.params.map(esc).join('<br>')}</p>`;
if(d.constants.length)h+=`<h4>constants</h4><p>${d.constants.map(esc).join('<br>')}</p>`;
const head='<tr><th>#</th><th>name</th><th>type</th><th>lifetime</th></tr>';
h+=`<h4>inputs</h4><table>${head}${d.inputs.map(row).join('')}</table>`;
h+=`<h4>outputs</h4><table>${head}${d.outputs.map(row).join('')}</table>`;side.innerHTML=h;}
function search(){const q=document.getElementById('q').value.trim().toLowerCase();let n=0;
document.querySelectorAll('g.node').forEach(g=>{g.classList.remove('hit','dim');if(!q)return;
const d=byId[g.id],text=(g.textContent+' '+(d?[d.type,d.label,...d.inputs.map(o=>o.name),...d.outputs.map(o=>o.name)].join(' '):'')).toLowerCase();
if(text.includes(q)){g.classList.add('hit');n++;}else g.classList.add('dim');});
document.getElementById('count').textContent=q?`${n} match${n==1?'':'es'}`:`${data.length} operations`;}
document.getElementById('q').addEventListener('input',search);
document.getElementById('fit').addEventListener('click',()=>fit(true));
const opts={};decodeURIComponent((location.hash||'').slice(1)).split('&').forEach(kv=>{const i=kv.indexOf('=');
if(i>0)opts[kv.slice(0,i)]=kv.slice(i+1);});if(opts.q)document.getElementById('q').value=opts.q;
fit(false);search();if(opts.select)select(opts.select);document.body.dataset.ready='1';"""


def html_page(svg_text: str, details: list[dict], info: GraphInfo) -> str:
    """A self-contained page around Graphviz's SVG: zoom, pan, search, a details panel (no network)."""
    legend = []
    if info.groups:
        seen: dict[str, str] = {}
        for label, colour in info.groups.values():
            seen.setdefault(label, colour)
        legend = [f"<span style='background:{html.escape(c)}'>{html.escape(lbl)}</span>" for lbl, c in seen.items()]
    if info.supported is not None:
        legend += [f"<span style='background:#d4f7d4'>supported by {html.escape(info.device)}</span>",
                  f"<span style='background:#ffd0d0'>refused by {html.escape(info.device)}</span>"]
    svg_body = svg_text[svg_text.find("<svg"):]
    data = json.dumps(details).replace("</", "<\\/")
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>" + html.escape(info.title) +
            f"</title><style>{_PAGE_CSS}</style></head><body>"
            f"<div id='bar'><h1>{html.escape(info.title)}</h1><input id='q' type='search' "
            "placeholder='search: tensor or operation name, type'><span id='count'></span>"
            "<button id='fit'>whole graph</button></div>"
            f"<div id='view'>{svg_body}</div><div id='side'>"
            + (f"<div class='legend'>{''.join(legend)}</div>" if legend else "")
            + "<p>Wheel: zoom; drag: pan; click an operation for its operands, constants"
            + (" and the device's answer" if info.supported is not None else "") + ".</p><div id='detail'></div></div>"
            f"<script type='application/json' id='nodes'>{data}</script><script>{_PAGE_JS}</script></body></html>\n")
