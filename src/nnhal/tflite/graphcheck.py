"""What TFLite's interpreter assumes of a model and never checks: the last step of
:func:`nnhal.tflite.verify.verify`, on the unpacked model, for every command that reads a ``.tflite``.

LiteRT runs a subgraph's operators in the file's order on tensors it allocates from what the file
declares, and several of its kernels read the file's options and shapes without checking them.  A
file breaking these assumptions is malformed (``InvalidModelError``), whatever nnhal or LiteRT would
make of it:

- dataflow, per subgraph: every tensor an operator reads is a subgraph input, a constant (a buffer
  holding data, or a tensor of no elements), a variable tensor, or an earlier operator's output (else
  it reads memory nothing wrote); every operator output is a tensor (not -1, which LiteRT's kernels
  dereference), written by that operator alone, never a subgraph input or a constant (the file's
  read-only mapping; DENSIFY excepted, whose output LiteRT allocates anew); every subgraph output is
  an input, a constant, a variable or written;
- a sparse tensor holds its data (sparsity describes how a constant is stored);
- kernels that trust the file (each a crash of LiteRT seen on a malformed model):
  ``TFLite_Detection_PostProcess`` (its flexbuffer options parsed unchecked, anchors indexed per box,
  outputs sized from ``max_detections``), ``SPLIT`` (writes ``num_splits`` outputs whatever the operator
  has), ``LOCAL_RESPONSE_NORMALIZATION`` with a negative radius (corrupts memory).
"""

from __future__ import annotations

import math
from typing import Any

from nnhal.tflite import schema as sch
from nnhal.tflite.errors import InvalidModelError

DETECTION = "TFLite_Detection_PostProcess"
# TFLite_Detection_PostProcess's options as LiteRT's kernel reads them (name -> default, the type
# saying the kind; detections_per_class and use_regular_nms optional there too)
DETECTION_OPTIONS: dict[str, Any] = {
    "num_classes": 0, "y_scale": 0.0, "x_scale": 0.0, "h_scale": 0.0, "w_scale": 0.0, "use_regular_nms": False,
    "max_detections": 0, "max_classes_per_detection": 1, "detections_per_class": 100, "nms_score_threshold": 0.0,
    "nms_iou_threshold": 0.0}


class _Bad(ValueError):
    """A problem :func:`flex_scalars` names itself (not the flexbuffers parser tripping)."""


def flex_scalars(raw: bytes, wanted: dict[str, Any]) -> dict[str, Any]:
    """The scalar entries ``wanted`` (name -> default, whose type says the kind) of a flexbuffer map of
    custom options.  Read by key, lazily: a hostile
    buffer (a huge length, entries sharing one nested vector many times) is never expanded as
    ``flexbuffers.Loads`` would.  ValueError names the problem."""
    if not raw:
        return dict(wanted)
    from flatbuffers import flexbuffers  # type: ignore[import-not-found]

    out = {}
    try:
        root = flexbuffers.GetRoot(raw)
        if not root.IsMap:
            raise _Bad("custom options are not a map")
        m = root.AsMap
        if len(m) * m.ByteWidth > len(raw):
            raise _Bad(f"custom options map of {len(m)} entries in {len(raw)} bytes")
        for key, default in wanted.items():
            try:
                r = m[key]
            except KeyError:
                out[key] = default
                continue
            if isinstance(default, bool) and (r.IsBool or r.IsInt):
                out[key] = bool(r.AsInt if r.IsInt else r.AsBool)
            elif isinstance(default, int) and not isinstance(default, bool) and r.IsInt:
                v = int(r.AsInt)
                if not -2**31 <= v < 2**31:
                    raise _Bad(f"custom option {key} is {v}")
                out[key] = v
            elif isinstance(default, float) and r.IsNumeric:
                out[key] = float(r.AsFloat if r.IsFloat else r.AsInt)
            else:
                raise _Bad(f"custom option {key} is not a {type(default).__name__}")
    except _Bad:
        raise
    except Exception as e:  # noqa: BLE001 - a malformed flexbuffer is a refusal, whatever the parser trips on
        raise _Bad(f"unreadable custom options ({e})") from None
    return out


def _ints(v: Any) -> list[int]:
    return [] if v is None else [int(x) for x in v]


class _Subgraph:
    """One subgraph's tensors as the checks see them."""

    def __init__(self, m: Any, g: int):
        self.g, self.sg = g, m.subgraphs[g]
        self.tensors = self.sg.tensors or []
        buffers = m.buffers or []
        self.where = "" if g == 0 else f" of subgraph {g}"
        self.const, self.empty = set(), set()
        for k, t in enumerate(self.tensors):
            b = buffers[int(t.buffer)] if 0 < int(t.buffer) < len(buffers) else None
            if b is not None and ((b.data is not None and len(b.data) > 0) or int(b.offset) > 1):
                self.const.add(k)
            elif 0 in _ints(t.shape):
                self.empty.add(k)  # NOTE: no elements, nothing to read (an empty shape constant holds no bytes)
        self.variable = {k for k, t in enumerate(self.tensors) if t.isVariable}

    def name(self, k: int) -> str:
        n = self.tensors[k].name
        n = n.decode(errors="replace") if isinstance(n, bytes) else str(n or "")
        return f"tensor {k}{self.where}" + (f" ({n})" if n else "")


def check(m: Any, max_bytes: int) -> None:
    """Raise :class:`InvalidModelError` for the first assumption (module docstring) ``m`` (a ModelT whose
    indexes :func:`~nnhal.tflite.verify.verify` has checked) breaks."""
    names = sch.builtin_names()
    codes = m.operatorCodes or []
    for g in range(len(m.subgraphs or [])):
        s = _Subgraph(m, g)
        for k, t in enumerate(s.tensors):
            if t.sparsity is not None and k not in s.const:
                raise InvalidModelError(f"{s.name(k)} is sparse but holds no data (sparsity describes a constant)")
        ready = set(_ints(s.sg.inputs)) | s.const | s.empty | s.variable
        writer: dict[int, int] = {}
        for i, op in enumerate(s.sg.operators or []):
            c = codes[int(op.opcodeIndex)]
            builtin = names.get(max(int(c.builtinCode), int(c.deprecatedBuiltinCode)), "")
            name = builtin
            if builtin == "CUSTOM":
                cc = c.customCode
                name = cc.decode(errors="replace") if isinstance(cc, bytes) else str(cc or "")
            what = f"operator {i} {name}{s.where}"
            for k in _ints(op.inputs):
                if k >= 0 and k not in ready:
                    raise InvalidModelError(f"{what} reads {s.name(k)}, which nothing writes before it (not an "
                                            "input, a constant, a variable or an earlier operator's output)")
            for k in _ints(op.outputs):
                if k < 0:
                    raise InvalidModelError(f"{what} has an omitted (-1) output")
                if k in writer:
                    by = "it" if writer[k] == i else f"operator {writer[k]}"
                    raise InvalidModelError(f"{what} writes {s.name(k)}, which {by} writes already")
                # NOTE: LiteRT's DENSIFY gives its output memory of its own (kTfLiteArenaRwPersistent): nnhal's
                # densified working file (nnhal.delegate.model) has it write the constant it computed
                if (k in s.const and builtin != "DENSIFY") or k in _ints(s.sg.inputs):
                    kind = "a constant" if k in s.const else "a subgraph input"
                    raise InvalidModelError(f"{what} writes {s.name(k)}, {kind}")
                if k not in s.variable:
                    writer[k] = i
                ready.add(k)
            _kernel(s, op, builtin, name, what, max_bytes)
        for k in _ints(s.sg.outputs):
            if k not in ready:
                raise InvalidModelError(f"subgraph {g} output {s.name(k)} is written by no operator")


def _kernel(s: _Subgraph, op: Any, builtin: str, name: str, what: str, max_bytes: int) -> None:
    """The LiteRT kernels that trust what the file says (module docstring)."""
    o = op.builtinOptions
    if builtin == "SPLIT" and o is not None and hasattr(o, "numSplits"):
        if int(o.numSplits) != len(_ints(op.outputs)):
            raise InvalidModelError(f"{what} splits into {o.numSplits} but has {len(_ints(op.outputs))} outputs")
    elif builtin == "LOCAL_RESPONSE_NORMALIZATION" and o is not None and hasattr(o, "radius") and int(o.radius) < 0:
        raise InvalidModelError(f"{what} has a negative radius ({o.radius})")
    elif builtin == "CUSTOM" and name == DETECTION:
        _detection(s, op, what, max_bytes)


def _detection(s: _Subgraph, op: Any, what: str, max_bytes: int) -> None:
    ins, outs = _ints(op.inputs), _ints(op.outputs)
    if len(ins) != 3 or len(outs) != 4 or min(ins) < 0:
        raise InvalidModelError(f"{what} needs 3 inputs (boxes, scores, anchors) and 4 outputs; it has "
                                f"{len(ins)} and {len(outs)}")
    raw = bytes(bytearray(op.customOptions)) if op.customOptions is not None else b""
    try:
        o = flex_scalars(raw, DETECTION_OPTIONS)
    except ValueError as e:
        raise InvalidModelError(f"{what}: {e}") from None
    boxes, scores, anchors = (_ints(s.tensors[k].shape) for k in ins)
    n_cls, det = o["num_classes"], o["max_detections"] * o["max_classes_per_detection"]
    if min(o["num_classes"], o["max_detections"], o["max_classes_per_detection"]) < 1:
        raise InvalidModelError(f"{what}: num_classes {n_cls}, max_detections {o['max_detections']}, "
                                f"max_classes_per_detection {o['max_classes_per_detection']}: each must be 1 or more")
    if det * 4 * 4 > max_bytes:
        raise InvalidModelError(f"{what}: {det} detections need {det * 16} bytes of output, above the limit of "
                                f"{max_bytes} (NNHAL_TFLITE_MAX_BYTES)")
    n = boxes[1] if len(boxes) == 3 else -1
    if not (len(boxes) == 3 and boxes[0] == 1 and boxes[2] >= 4 and len(scores) == 3 and scores[:2] == [1, n]
            and scores[2] in (n_cls, n_cls + 1) and anchors == [n, 4]):
        raise InvalidModelError(f"{what}: boxes {boxes}, scores {scores}, anchors {anchors} for {n_cls} classes: "
                                "give [1, N, >=4], [1, N, num_classes (+1)], [N, 4]")
    if math.prod(boxes) == 0:
        raise InvalidModelError(f"{what}: no boxes")
