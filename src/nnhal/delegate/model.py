"""A ``.tflite`` file as the NNAPI delegate sees it: the main subgraph's
operators (builtin or custom code, op version, input / output tensors,
options) and tensors (type, shape, quantization, constant or not), read once
with the schema module.

Constant sparse tensors behind DENSIFY are densified here, at load, as the
delegate does (``nnapi_delegate.cc`` maps a DENSIFY of a constant into a
dense NNAPI constant): :func:`densify` expands every sparsity format the
TFLite schema allows (per dimension DENSE or SPARSE_CSR metadata, any
traversal order, block dimensions through ``block_map``), and the working
file (:attr:`Graph.data`) has each such DENSIFY's output as a constant, the
DENSIFY left as an operator that computes nothing (``Graph.folded``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np

from nnhal.tflite import schema as sch

if TYPE_CHECKING:
    from nnhal.tflite.verify import Verified

# schema TensorType -> numpy dtype name (types nnhal can hold; others keep their schema number)
TYPE_NAMES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 5: "string", 6: "bool", 7: "int16",
              8: "complex64", 9: "int8", 10: "float64", 11: "complex128", 12: "uint64", 15: "uint32", 16: "uint16"}


@dataclass
class TensorInfo:
    index: int
    name: str
    type: str  # numpy-style name ("float32", "int8", ...)
    shape: list[int]
    signature: Optional[list[int]]
    const: bool
    scales: list[float] = field(default_factory=list)
    zero_points: list[int] = field(default_factory=list)
    qdim: int = 0
    sparse: bool = False
    variable: bool = False
    densified: bool = False  # a DENSIFY's output made constant at load (not a constant in the file)

    @property
    def stored(self) -> bool:
        """A constant of the file itself (TFLite's kTfLiteMmapRo), as the delegate's checks see it."""
        return self.const and not self.densified

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def scale(self) -> float:
        return self.scales[0] if self.scales else 0.0

    @property
    def zero_point(self) -> int:
        return self.zero_points[0] if self.zero_points else 0

    @property
    def dynamic(self) -> bool:
        return self.signature is not None and any(d == -1 for d in self.signature)


@dataclass
class OperatorInfo:
    index: int
    name: str  # builtin name, or the custom code of a custom operator
    builtin: str  # builtin name ("CUSTOM" for a custom operator)
    version: int
    inputs: list[int]
    outputs: list[int]
    options: Any

    @property
    def custom(self) -> bool:
        return self.builtin == "CUSTOM"


class Graph:
    """The main subgraph of a .tflite model (see the module docstring).  The file is checked whole first
    (:func:`nnhal.tflite.verify.verify`, ``InvalidModelError`` naming its first problem) unless ``checked``
    is what that check gave for these bytes."""

    def __init__(self, source: Union[str, Path, bytes], checked: Optional[Verified] = None,
                 batch: Optional[int] = 1):
        """``checked``: the file's :func:`nnhal.tflite.loader.verify` for ``batch``, when the caller has
        it: its parse is shared (read only) unless this graph must change the model (buffers stored after
        the flatbuffer, constant DENSIFYs), and it serves :meth:`verified` for that batch; without it the
        file is checked here (for any batch)."""
        # NOTE: imported when used (the delegate package stays light to import)
        from nnhal.tflite.verify import unpack, verify

        raw = bytes(source) if isinstance(source, (bytes, bytearray)) else Path(source).read_bytes()
        self.original = raw
        self._verified: dict[Optional[int], Verified] = {}
        if checked is None:
            checked, batch = verify(raw, batch=None), None
        if not _changes(checked.model):
            self.m = checked.model
            self._verified[batch] = checked
        else:
            self.m = unpack(raw)  # NOTE: raw passed the check above (or the caller's)
        if not self.m.subgraphs:
            raise ValueError("the model has no subgraph")
        names = sch.builtin_names()
        self.sg = self.m.subgraphs[0]
        self.operators: list[OperatorInfo] = []
        for i, op in enumerate(self.sg.operators or []):
            if op.opcodeIndex >= len(self.m.operatorCodes or []):
                raise ValueError(f"operator {i} names operator code {op.opcodeIndex}, the model has "
                                 f"{len(self.m.operatorCodes or [])}")
            code = self.m.operatorCodes[op.opcodeIndex]
            b = max(int(code.builtinCode), int(code.deprecatedBuiltinCode))
            builtin = names.get(b, f"BUILTIN_{b}")
            name = builtin
            if builtin == "CUSTOM":
                cc = code.customCode
                name = cc.decode(errors="replace") if isinstance(cc, bytes) else str(cc)
            self.operators.append(OperatorInfo(i, name, builtin, int(code.version or 1), _ints(op.inputs),
                                               _ints(op.outputs), op.builtinOptions))
        self.inputs = _ints(self.sg.inputs)
        self.outputs = _ints(self.sg.outputs)
        self._inline_offset_buffers()
        self.tensors = [self._info(k) for k in range(len(self.sg.tensors or []))]
        self.folded: dict[int, str] = {}  # operator -> why it computes nothing at run time
        self.densified = 0
        for op in self.operators:
            if op.builtin == "DENSIFY" and op.inputs and self.tensors[op.inputs[0]].const:
                self._densify(op)
        self.data = sch.write_model(self.m) if self.folded else raw
        self.producer = {k: op.index for op in self.operators for k in op.outputs if k >= 0}
        self.consumers: dict[int, list[int]] = {}
        for op in self.operators:
            for k in dict.fromkeys(op.inputs):
                if k >= 0:
                    self.consumers.setdefault(k, []).append(op.index)

    def verified(self, batch: Optional[int]) -> Verified:
        """The working file (:attr:`data`) as the importer's reader checked it for ``batch``, once."""
        v = self._verified.get(batch)
        if v is None:
            from nnhal.tflite.verify import verify

            v = self._verified[batch] = verify(self.data, batch=batch)
        return v

    # ------------------------------------------------------------------ tensors

    def _inline_offset_buffers(self) -> None:
        # NOTE: buffers stored after the flatbuffer (offset / size) are made inline, so that a model
        # written again (densified, or cut into sub-models) still holds them
        for b in self.m.buffers or []:
            if b.offset > 1 and (b.data is None or len(b.data) == 0):
                b.data = np.frombuffer(self.original[b.offset: b.offset + b.size], np.uint8)
                b.offset, b.size = 0, 0

    def _info(self, k: int) -> TensorInfo:
        t = self.sg.tensors[k]
        shape = _ints(t.shape)
        sig = _ints(t.shapeSignature) if t.shapeSignature is not None and len(t.shapeSignature) == len(shape) else None
        q = t.quantization
        scales = [float(s) for s in q.scale] if q is not None and q.scale is not None else []
        zps = [int(z) for z in q.zeroPoint] if q is not None and q.zeroPoint is not None else []
        buf = self.m.buffers[t.buffer] if 0 < t.buffer < len(self.m.buffers or []) else None
        const = buf is not None and buf.data is not None and len(buf.data) > 0
        name = t.name.decode(errors="replace") if isinstance(t.name, bytes) else str(t.name or k)
        return TensorInfo(k, name, TYPE_NAMES.get(int(t.type), f"type{t.type}"), shape, sig, const, scales,
                          zps or [0] * len(scales), int(q.quantizedDimension) if q is not None else 0,
                          t.sparsity is not None, bool(t.isVariable))

    def value(self, k: int) -> np.ndarray:
        """The value of constant tensor ``k`` (sparse tensors as stored)."""
        t = self.sg.tensors[k]
        info = self.tensors[k]
        raw = np.asarray(self.m.buffers[t.buffer].data, np.uint8).tobytes()
        a = np.frombuffer(raw, np.dtype(info.type))
        return a if info.sparse else a.reshape(info.shape)

    def is_const(self, k: int) -> bool:
        """A tensor no partition passes to another: a constant, or a variable (state a kernel keeps)."""
        return k >= 0 and (self.tensors[k].const or self.tensors[k].variable)

    # ------------------------------------------------------------------ DENSIFY

    def _densify(self, op: OperatorInfo) -> None:
        src, out = op.inputs[0], op.outputs[0]
        t = self.sg.tensors[src]
        if t.sparsity is None:
            dense = self.value(src).reshape(self.tensors[out].shape)
        else:
            dense = densify(self.value(src), self.tensors[out].shape, t.sparsity)
        s = sch.schema()
        b = s.BufferT()
        b.data = np.frombuffer(np.ascontiguousarray(dense.astype(np.dtype(self.tensors[out].type))).tobytes(), np.uint8)
        self.m.buffers.append(b)
        self.sg.tensors[out].buffer = len(self.m.buffers) - 1
        self.tensors[out] = self._info(out)
        self.tensors[out].densified = True
        self.folded[op.index] = "DENSIFY of a constant: densified at load"
        self.densified += 1


def _changes(m: Any) -> bool:
    """Whether a Graph of model ``m`` changes it (a buffer stored after the flatbuffer, a DENSIFY)."""
    if any(b.offset > 1 and (b.data is None or len(b.data) == 0) for b in m.buffers or []):
        return True
    codes = m.operatorCodes or []
    dens = sch.builtin_code("DENSIFY")
    return any(max(int(c.builtinCode), int(c.deprecatedBuiltinCode)) == dens for c in codes)


def _ints(a: Any) -> list[int]:
    return [int(v) for v in a] if a is not None else []


def _vector(v: Any) -> np.ndarray:
    """The values of a SparseIndexVector union member (Int32Vector / Uint16Vector / Uint8Vector)."""
    if v is None or getattr(v, "values", None) is None:
        return np.zeros(0, np.int64)
    return np.asarray(v.values, np.int64)


def densify(values: np.ndarray, shape: list[int], sparsity: Any, max_bytes: Optional[int] = None) -> np.ndarray:
    """The dense array of shape ``shape`` a sparse constant stores (TFLite's SparsityParameters:
    ``traversalOrder`` over the original then the block dimensions, ``blockMap`` naming the original
    dimension of each block dimension, ``dimMetadata`` per traversed dimension: DENSE with
    ``denseSize`` or SPARSE_CSR with ``arraySegments`` / ``arrayIndices``).  Values are stored in
    traversal order; entries the format leaves out are zero.  The metadata's sizes must be the shape's
    (a DENSE level's ``denseSize`` its dimension, block sizes dividing theirs), and the indices of every
    dense entry within ``max_bytes`` (default ``$NNHAL_TFLITE_MAX_BYTES``) before anything is made."""
    from nnhal.tflite.verify import default_max_bytes

    rank = len(shape)
    order = _ints(sparsity.traversalOrder) or list(range(rank))
    block_map = _ints(sparsity.blockMap)
    meta = sparsity.dimMetadata or []
    if len(meta) != len(order) or len(order) != rank + len(block_map):
        raise ValueError(f"sparsity metadata for {len(meta)} dimensions, traversal order {len(order)}, "
                         f"rank {rank} + {len(block_map)} block dimensions")
    if sorted(order) != list(range(len(order))) or any(not 0 <= d < rank for d in block_map) \
            or len(set(block_map)) != len(block_map) or any(d < 0 for d in shape):
        raise ValueError("sparsity traversal order / block map out of range")
    block_size = [int(meta[order.index(rank + j)].denseSize) for j in range(len(block_map))]
    sizes = list(shape) + block_size  # NOTE: per traversed dimension (original ones, then blocks)
    for d, b in zip(block_map, block_size):
        if b < 1 or shape[d] % b:
            raise ValueError(f"sparsity block of {b} along dimension {d} of {list(shape)}")
        sizes[d] = shape[d] // b
    for level, md in enumerate(meta):
        if int(md.format) == 0 and int(md.denseSize) != sizes[order[level]]:
            raise ValueError(f"sparse level {level}: dense size {md.denseSize}, the shape {list(shape)} says "
                             f"{sizes[order[level]]}")
    # NOTE: a coordinate per level and entry, int64, plus the walk's own arrays
    need = 8 * (len(meta) + 2) * math.prod(shape)
    limit = default_max_bytes() if max_bytes is None else max_bytes
    if need > limit:
        raise ValueError(f"densifying a tensor of shape {list(shape)} needs {need} bytes of indices, above the limit "
                         f"of {limit} (NNHAL_TFLITE_MAX_BYTES)")
    # NOTE: level by level, every path so far at once: idx[level] the coordinate per path, prev the
    # position a CSR level's segments are indexed by (the path's flat position at a dense level, the
    # entry index at a sparse one)
    prev = np.zeros(1, np.int64)
    coords: list[np.ndarray] = []
    for level, md in enumerate(meta):
        if int(md.format) == 0:  # DENSE
            n = int(md.denseSize)
            coords = [np.repeat(c, n) for c in coords] + [np.tile(np.arange(n, dtype=np.int64), len(prev))]
            prev = (np.repeat(prev, n) * n + coords[-1]) if n else prev[:0]
        else:  # SPARSE_CSR
            seg, ind = _vector(md.arraySegments), _vector(md.arrayIndices)
            if prev.size and (prev.max() + 1 >= seg.size + (0 if seg.size else 1)):
                raise ValueError(f"sparse level {level}: {seg.size} segments for position {int(prev.max())}")
            lo, hi = seg[prev], seg[prev + 1]
            counts = np.maximum(hi - lo, 0)
            entry = np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()), dtype=np.int64)
            if entry.size and entry.max() >= ind.size:
                raise ValueError(f"sparse level {level}: indices end at {ind.size}, segments reach {int(entry.max())}")
            coords = [np.repeat(c, counts) for c in coords] + [ind[entry]]
            prev = entry
    n = len(prev)
    if values.size < n:
        raise ValueError(f"the sparse tensor stores {values.size} values, its metadata {n}")
    orig = [np.zeros(n, np.int64) for _ in range(rank)]
    for level in range(rank):
        orig[order[level]] = coords[level]
    for level in range(rank, len(order)):
        j = order[level] - rank
        d = block_map[j]
        orig[d] = orig[d] * block_size[j] + coords[level]
    dense = np.zeros(shape, values.dtype)
    if n:
        if any((o.max() >= s or o.min() < 0) for o, s in zip(orig, shape)):
            raise ValueError("sparse indices outside the dense shape")
        dense[tuple(orig)] = values[:n]
    return dense
