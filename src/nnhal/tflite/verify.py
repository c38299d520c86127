"""One structural check of a whole ``.tflite`` flatbuffer before anything reads it.

The generated schema module (``ai_edge_litert.schema_py_generated``) trusts its input: an offset
past the end is a ``struct.error``, a negative one a ``TypeError``, a vector length of 2^31 a loop
over garbage, a shared object referenced a million times a million copies.  :func:`verify` walks the
raw bytes first, with an explicit stack and explicit bounds:

- structure: the root offset, every table's vtable (inside the buffer, even size >= 4, the table's
  inline size inside the buffer), every present field inside its table, every offset to a table,
  vector or string inside the buffer, every vector's and string's length inside the buffer (strings
  NUL-terminated), union values of a known member verified as that member's table;
- amplification: the object API unpacks every reference separately, so the walk counts objects and
  payload bytes with multiplicity and refuses more than a tree-shaped file of that size can hold (a
  shared object referenced many times), and more objects than ``max_bytes`` holds at
  :data:`OBJECT_BYTES` each once unpacked;

then, on the unpacked model, the semantics the importer relies on:

- at least one subgraph; every operator's opcode index, every tensor index (operator inputs /
  outputs / intermediates: -1 or a tensor; subgraph inputs / outputs: a tensor), every buffer index
  in range; external buffer data (offset / size) inside the file;
- every tensor of a TFLite tensor type, dimensions >= -1, quantization arrays consistent (as many zero
  points as scales, a per-channel axis inside the shape with one scale per channel), constant data
  exactly ``prod(shape) * itemsize`` bytes;
- every tensor's size, and all non-constant tensors together, within ``max_bytes``;
- what TFLite's interpreter assumes and never checks (:mod:`nnhal.tflite.graphcheck`: every tensor
  written before it is read and by one operator, sparse tensors holding data, the LiteRT kernels that
  trust the file's options and shapes);
- IF / WHILE subgraph indexes in range and the subgraphs they reach acyclic; the order in which the
  reachable subgraphs can be mapped without recursion (callees first).

The first problem found raises :class:`~nnhal.tflite.errors.InvalidModelError` naming it.

The schema's shape (field slots and kinds per table) is read from the generated module itself by
calling each accessor on a recording stand-in for its flatbuffers table, so the check follows the
installed schema version.  The same shape reads a checked file into the object API's classes
(:func:`unpack`: what ``ModelT.InitFromPackedBuf`` makes, without its three flatbuffers calls per
field) and writes one back (:func:`pack`: what ``ModelT.Pack`` through a ``Builder`` writes, as read).
"""

from __future__ import annotations

import bisect
import dis
import inspect
import math
import os
import re
import struct
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Optional

import numpy as np

from nnhal.tflite import graphcheck
from nnhal.tflite import schema as sch
from nnhal.tflite.errors import InvalidModelError

# TFLite TensorType -> item size in bytes, for the types whose constants the importer reads
ITEMSIZE = {0: 4, 1: 2, 2: 4, 3: 1, 4: 8, 6: 1, 7: 2, 9: 1}
_MAX_DEPTH = 64
# bytes the schema module's object API takes per unpacked table or vector (measured: 500 for kws, 1100 for palm)
OBJECT_BYTES = 1024


def default_max_bytes() -> int:
    """``$NNHAL_TFLITE_MAX_BYTES``, else a quarter of the physical memory, at most 4 GiB."""
    env = os.environ.get("NNHAL_TFLITE_MAX_BYTES", "").strip()
    if env:
        try:
            return max(1, int(float(env)))
        except ValueError:
            pass
    try:
        phys = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        phys = 4 << 30
    return int(min(phys // 4, 4 << 30))


# --------------------------------------------------------------------------- the schema, by probing


@dataclass(frozen=True)
class Field:
    name: str
    slot: int  # vtable offset (4, 6, ...)
    kind: str  # scalar | table | vector | tables | string | strings | union
    size: int = 0  # scalar / vector element size
    table: str = ""  # table / tables: the table's class name
    union: str = ""  # union: the union enum's name
    flags: Any = field(default=None, compare=False)  # scalar / vector: the flatbuffers number type read


class _Probe:
    """Stands in for ``flatbuffers.table.Table`` and records what an accessor asks of it."""

    Pos = 0
    Bytes = bytearray(16)

    def __init__(self) -> None:
        self.slot = 0
        self.ops: list[tuple[str, int]] = []
        self.flags: Any = None

    def Offset(self, n: int) -> int:  # noqa: N802 - the flatbuffers API
        self.slot = n
        return 4

    def Get(self, flags: Any, off: int) -> int:  # noqa: N802
        self.ops.append(("get", flags.bytewidth))
        self.flags = flags
        return 0

    def Vector(self, off: int) -> int:  # noqa: N802
        self.ops.append(("vector", 0))
        return 0

    def VectorLen(self, off: int) -> int:  # noqa: N802
        return 0

    def Indirect(self, off: int) -> int:  # noqa: N802
        self.ops.append(("indirect", 0))
        return 0

    def String(self, off: int) -> bytes:  # noqa: N802
        self.ops.append(("string", 0))
        return b""

    def Union(self, t: Any, off: int) -> None:  # noqa: N802
        self.ops.append(("union", 0))


_SKIP = re.compile(r"(Length|IsNone|AsNumpy|BufferHasIdentifier)$|^(GetRootAs|Init$)")
_HELPER = re.compile(r"(Length|IsNone|AsNumpy)$")


def _skipped(cls: Any, meth: str) -> bool:
    """Whether method ``meth`` of a generated table class is no field accessor: a vector's helper
    (``XLength``, ``XIsNone``, ``XAsNumpy`` beside ``X``; a field named ``length`` stays a field)."""
    m = _HELPER.search(meth)
    if m is not None:
        return meth[: m.start()] in vars(cls)
    return _SKIP.search(meth) is not None


def _is_table(cls: Any) -> bool:
    return isinstance(cls, type) and getattr(cls, "__slots__", None) == ["_tab"] and hasattr(cls, "Init")


@dataclass
class Schema:
    tables: dict[str, tuple[Field, ...]] = field(default_factory=dict)
    unions: dict[str, dict[int, str]] = field(default_factory=dict)  # union enum -> member value -> table


@lru_cache(maxsize=1)
def schema_shape() -> Schema:
    """Field slots and kinds of every table of the installed TFLite schema module."""
    s = sch.schema()
    out = Schema()
    classes = {n: c for n, c in vars(s).items() if _is_table(c)}
    for name, cls in classes.items():
        fields = []
        for meth, fn in vars(cls).items():
            if meth.startswith("_") or _skipped(cls, meth) or not callable(fn):
                continue
            code = getattr(fn, "__code__", None)
            nparams = code.co_argcount if code is not None else len(inspect.signature(fn).parameters)
            if nparams not in (1, 2):
                continue
            params = range(nparams)
            obj = cls.__new__(cls)
            obj._tab = probe = _Probe()
            res = fn(obj, 0) if len(params) == 2 else fn(obj)
            ops = [k for k, _ in probe.ops]
            sub = type(res).__name__ if _is_table(type(res)) else ""
            if ops == ["get"]:
                f = Field(meth, probe.slot, "scalar", size=probe.ops[0][1], flags=probe.flags)
            elif ops == ["vector", "get"]:
                f = Field(meth, probe.slot, "vector", size=probe.ops[1][1], flags=probe.flags)
            elif ops == ["indirect"] and sub:
                f = Field(meth, probe.slot, "table", table=sub)
            elif ops == ["vector", "indirect"] and sub:
                f = Field(meth, probe.slot, "tables", table=sub)
            elif ops == ["string"]:
                f = Field(meth, probe.slot, "string")
            elif ops == ["vector", "string"]:
                f = Field(meth, probe.slot, "strings")
            elif ops == ["union"]:
                f = Field(meth, probe.slot, "union")
            else:  # pragma: no cover - a schema construct this checker does not know (structs)
                raise RuntimeError(f"cannot check {name}.{meth}: accessor does {ops}")
            fields.append(f)
        out.tables[name] = tuple(sorted(fields, key=lambda f: f.slot))
    # NOTE: which union enum a union field holds: the object API's unpacker names its creator
    for name in out.tables:
        objcls = getattr(s, name + "T", None)
        if objcls is None or not any(f.kind == "union" for f in out.tables[name]):
            continue
        creators = _union_creators(objcls._UnPack)
        fixed = []
        for f in out.tables[name]:
            if f.kind == "union":
                if f.name not in creators:  # pragma: no cover
                    raise RuntimeError(f"cannot tell the union of {name}.{f.name}")
                f = Field(f.name, f.slot, "union", union=creators[f.name])
            fixed.append(f)
        out.tables[name] = tuple(fixed)
    for u in {f.union for fs in out.tables.values() for f in fs if f.kind == "union"}:
        enum = getattr(s, u)
        out.unions[u] = {v: k for k, v in vars(enum).items() if isinstance(v, int) and k in out.tables}
    return out


def _union_creators(unpack: Any) -> dict[str, str]:
    """{union accessor: union enum} of an object-API ``_UnPack``, whose union fields read
    ``self.x = <Enum>Creator(self.xType, table.<Accessor>())``: the names its bytecode loads in that
    order (``dis``: microseconds, where reading and tokenizing its source took milliseconds)."""
    out: dict[str, str] = {}
    pending = None
    for ins in dis.get_instructions(unpack):
        if ins.opname == "LOAD_GLOBAL" and isinstance(ins.argval, str) and ins.argval.endswith("Creator"):
            pending = ins.argval[: -len("Creator")]
        elif pending is not None and ins.opname in ("LOAD_METHOD", "LOAD_ATTR") and \
                not str(ins.argval).endswith("Type"):  # NOTE: past self.xType, the accessor
            out[str(ins.argval)] = pending
            pending = None
    return out


# --------------------------------------------------------------------------- structural walk


_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")


class _Walk:
    """The raw walk.  ``layout`` (when given) receives ``(kind, position, size)`` of every vtable
    entry, offset, length and scalar field seen: the fuzzer's map of the file."""

    def __init__(self, data: bytes, layout: Optional[list] = None, max_bytes: Optional[int] = None):
        self.d = data
        self.max_bytes = max_bytes
        self.n = len(data)
        self.sc = schema_shape()
        self.layout = layout
        self.objects = 0
        self.payload = 0
        # NOTE: a tree-shaped file holds at most one object per 4-byte offset and its payloads are disjoint
        self.max_objects = self.n // 4 + 1
        self.max_payload = self.n

    def need(self, end: int, what: str, detail: str = "ends past the end") -> None:
        if end > self.n:
            raise InvalidModelError(f"file truncated: {self.n} of at least {end} bytes ({what} {detail})")

    def uoffset(self, p: int, what: str) -> int:
        self.need(p + 4, what)
        u = _U32.unpack_from(self.d, p)[0]
        if self.layout is not None:
            self.layout.append(("uoffset", p, 4))
        if u == 0 or u >= 1 << 31:
            raise InvalidModelError(f"{what}: offset {u} at byte {p} is not a forward offset")
        t = p + u
        self.need(t + 4, what)
        return t

    def count(self, payload: int, what: str) -> None:
        self.objects += 1
        self.payload += payload
        if self.objects > self.max_objects or self.payload > self.max_payload:
            raise InvalidModelError(f"{what}: the file's objects are shared: more than a {self.n}-byte file can "
                                    f"hold once each ({self.objects} objects, {self.payload} payload bytes so far)")
        if self.max_bytes is not None and self.objects * OBJECT_BYTES > self.max_bytes:
            raise InvalidModelError(f"{what}: more than {self.objects} tables and vectors would take about "
                                    f"{self.objects * OBJECT_BYTES} bytes once unpacked, above the limit of "
                                    f"{self.max_bytes} (NNHAL_TFLITE_MAX_BYTES)")

    def vector(self, t: int, elem: int, what: str) -> int:
        length = _U32.unpack_from(self.d, t)[0]
        if self.layout is not None:
            self.layout.append(("veclen", t, 4))
        self.need(t + 4 + length * elem, what, f"is a vector of {length} elements of {elem} bytes at byte {t}")
        self.count(length * elem, what)
        return length

    def run(self) -> None:
        if self.n < 8:
            raise InvalidModelError(f"file truncated: {self.n} bytes, not even a flatbuffer header")
        root = self.uoffset(0, "root table")
        stack: list[tuple[str, int, str, int]] = [("Model", root, "model", 0)]
        while stack:
            name, pos, what, depth = stack.pop()
            if depth > _MAX_DEPTH:
                raise InvalidModelError(f"{what}: tables nested deeper than {_MAX_DEPTH}")
            stack.extend(self.table(name, pos, what, depth))

    def table(self, name: str, pos: int, what: str, depth: int) -> list[tuple[str, int, str, int]]:
        d = self.d
        self.need(pos + 4, what)
        self.count(0, what)
        vt = pos - _I32.unpack_from(d, pos)[0]
        if self.layout is not None:
            self.layout.append(("soffset", pos, 4))
        if vt < 0:
            raise InvalidModelError(f"{what}: vtable at byte {vt} is outside the {self.n}-byte file")
        self.need(vt + 4, what, f"has its vtable at byte {vt}")
        vsize, tsize = _U16.unpack_from(d, vt)[0], _U16.unpack_from(d, vt + 2)[0]
        if vsize < 4 or vsize % 2:
            raise InvalidModelError(f"{what}: vtable at byte {vt} has a bad size {vsize}")
        self.need(vt + vsize, what, f"has a {vsize}-byte vtable at byte {vt}")
        if tsize < 4:
            raise InvalidModelError(f"{what}: table at byte {pos} has a bad size {tsize}")
        self.need(pos + tsize, what)
        todo = []
        fields = self.sc.tables[name]
        present = {}
        for f in fields:
            if f.slot + 2 > vsize:
                continue
            if self.layout is not None:
                self.layout.append(("vtentry", vt + f.slot, 2))
            fo = _U16.unpack_from(d, vt + f.slot)[0]
            if fo == 0:
                continue
            size = f.size if f.kind == "scalar" else 4
            if fo < 4 or fo + size > tsize:
                raise InvalidModelError(f"{what}.{f.name}: field at offset {fo} outside its {tsize}-byte table")
            p = pos + fo
            present[f.name] = p
            if f.kind == "scalar":
                if self.layout is not None:
                    self.layout.append(("scalar", p, size))
                continue
            sub = f"{what}.{f.name}"
            if f.kind == "union":
                continue  # NOTE: checked below, with its type field
            t = self.uoffset(p, sub)
            if f.kind == "table":
                todo.append((f.table, t, sub, depth + 1))
            elif f.kind == "string":
                length = self.vector(t, 1, sub)
                if d[t + 4 + length: t + 5 + length] != b"\0":
                    raise InvalidModelError(f"{sub}: string at byte {t} is not NUL-terminated inside the file")
            elif f.kind == "vector":
                self.vector(t, f.size, sub)
            else:  # tables / strings
                length = self.vector(t, 4, sub)
                kind = "Table" if f.kind == "tables" else "String"
                for i in range(length - 1, -1, -1):
                    e = self.uoffset(t + 4 + 4 * i, f"{sub}[{i}]")
                    if kind == "Table":
                        todo.append((f.table, e, f"{sub}[{i}]", depth + 1))
                    else:
                        n = self.vector(e, 1, f"{sub}[{i}]")
                        if d[e + 4 + n: e + 5 + n] != b"\0":
                            raise InvalidModelError(f"{sub}[{i}]: string is not NUL-terminated inside the file")
        for f in fields:
            if f.kind != "union" or f.name not in present:
                continue
            tp = present.get(f.name + "Type")
            utype = d[tp] if tp is not None else 0
            member = self.sc.unions[f.union].get(utype)
            if member is not None:
                todo.append((member, self.uoffset(present[f.name], f"{what}.{f.name}"), f"{what}.{f.name}", depth + 1))
        return todo[::-1]


def layout(data: bytes) -> list[tuple[str, int, int]]:
    """``(kind, position, size)`` of every vtable entry, offset, vector length and scalar field of a
    well-formed file (for the fuzzer's structure-aware mutations)."""
    out: list = []
    _Walk(data, out).run()
    return out


# --------------------------------------------------------------------------- unpacking a checked file

_SCALAR, _VECTOR, _TABLE, _TABLES, _STRING, _STRINGS, _UNION = range(7)
_KINDS = {"scalar": _SCALAR, "vector": _VECTOR, "table": _TABLE, "tables": _TABLES, "string": _STRING,
          "strings": _STRINGS, "union": _UNION}


@lru_cache(maxsize=1)
def unpack_plans() -> Optional[dict[str, tuple[Any, dict, tuple]]]:
    """Per table of the schema: its object-API class, the attributes a fresh one holds, and per field in
    slot order ``(attribute, slot, kind, what to read it with)``; None when the installed object API does
    not have the shape of :func:`schema_shape` (then :func:`unpack` is the object API's own unpacking)."""
    from flatbuffers import number_types  # type: ignore[import-not-found]

    s = sch.schema()
    sc = schema_shape()
    plans: dict[str, tuple[Any, dict, tuple]] = {}
    for name, fields in sc.tables.items():
        cls = getattr(s, name + "T", None)
        if cls is None:
            continue
        defaults = vars(cls())
        if any(not isinstance(v, (int, float, bool, type(None))) for v in defaults.values()):
            return None
        attrs = {a.lower(): a for a in defaults}
        out, seen = [], set()
        for f in fields:
            attr = attrs.get(f.name.lower())
            if attr is None:
                return None
            seen.add(attr)
            kind = _KINDS[f.kind]
            arg: Any = None
            if kind == _SCALAR:
                arg = f.flags.packer_type
            elif kind == _VECTOR:
                arg = number_types.to_numpy_type(f.flags)
            elif kind in (_TABLE, _TABLES):
                arg = f.table
            elif kind == _UNION:
                tattr = attrs.get(f.name.lower() + "type")
                tslot = [g.slot for g in fields if g.name.lower() == f.name.lower() + "type"]
                if tattr is None or tslot != [f.slot - 2]:  # NOTE: the type field is read first, in slot order
                    return None
                arg = (tattr, sc.unions[f.union])
            out.append((attr, f.slot, kind, arg))
        if seen != set(defaults):
            return None
        plans[name] = (cls, defaults, tuple(out))
    return plans if "Model" in plans else None


_VTABLES: dict[int, struct.Struct] = {}


def unpack(data: bytes) -> Any:
    """The ``ModelT`` (object API) of a file :func:`verify`'s structural walk accepted: the same objects,
    field for field, as the object API's ``ModelT.InitFromPackedBuf`` makes (numeric vectors as numpy
    views of ``data``, strings as bytes, union members as their tables), read straight from the bytes
    with one ``struct`` call per vtable (the object API reads each field through three flatbuffers
    calls: ~10 ms of a 140-operator model's plan, this ~2 ms).  Unchecked bytes must not come here: it
    relies on the walk's bounds."""
    plans = unpack_plans()
    if plans is None:  # pragma: no cover - an object API of another shape
        return sch.read_model(data)
    d = data if isinstance(data, bytes) else bytearray(data)
    return _table(d, plans, "Model", _U32.unpack_from(d, 0)[0])


def _table(d: Any, plans: dict, name: str, pos: int) -> Any:
    cls, defaults, fields = plans[name]
    obj = cls.__new__(cls)
    od = obj.__dict__
    od.update(defaults)
    vt = pos - _I32.unpack_from(d, pos)[0]
    vsize = _U16.unpack_from(d, vt)[0]
    vst = _VTABLES.get(vsize)
    if vst is None:
        vst = _VTABLES[vsize] = struct.Struct(f"<{vsize // 2}H")
    entries = vst.unpack_from(d, vt)
    n = len(entries)
    for attr, slot, kind, arg in fields:
        i = slot >> 1
        if i >= n:
            break
        fo = entries[i]
        if not fo:
            continue
        p = pos + fo
        if kind == _SCALAR:
            od[attr] = arg.unpack_from(d, p)[0]
            continue
        t = p + _U32.unpack_from(d, p)[0]
        if kind == _VECTOR:
            od[attr] = np.frombuffer(d, arg, _U32.unpack_from(d, t)[0], t + 4)
        elif kind == _TABLE:
            od[attr] = _table(d, plans, arg, t)
        elif kind == _TABLES:
            k = _U32.unpack_from(d, t)[0]
            od[attr] = [_table(d, plans, arg, e + o) for e, o in
                        zip(range(t + 4, t + 4 + 4 * k, 4), struct.unpack_from(f"<{k}I", d, t + 4))]
        elif kind == _STRING:
            od[attr] = bytes(d[t + 4: t + 4 + _U32.unpack_from(d, t)[0]])
        elif kind == _STRINGS:
            k = _U32.unpack_from(d, t)[0]
            out = []
            for e, o in zip(range(t + 4, t + 4 + 4 * k, 4), struct.unpack_from(f"<{k}I", d, t + 4)):
                e += o
                out.append(bytes(d[e + 4: e + 4 + _U32.unpack_from(d, e)[0]]))
            od[attr] = out
        else:  # NOTE: a union: its member's table when the type field (an earlier slot) names one
            tattr, members = arg
            member = members.get(od[tattr])
            od[attr] = None if member is None else _table(d, plans, member, t)
    return obj


# --------------------------------------------------------------------------- writing


def pack(model: Any) -> bytes:
    """The bytes of a .tflite file from a ``ModelT`` (object API): what ``model.Pack`` through a
    flatbuffers ``Builder`` writes (:func:`nnhal.tflite.schema.write_model`), as :func:`unpack` and
    LiteRT read it, written front to back by the plans of :func:`unpack_plans` (a referenced object
    always after its referrer: every offset forward; each field aligned to its size, each vector's
    elements to theirs; fields at their defaults left out, as ``Pack`` does; vtables not shared).
    A few times faster than the Builder's per-field calls (a 180-tensor model: ~6 ms there)."""
    plans = _pack_plans()
    if plans is None:  # pragma: no cover - an object API of another shape
        return sch.write_model(model)
    w = _Packer(plans)
    w.put(bytearray(b"\0\0\0\0TFL3"))  # NOTE: the root's offset is written into it below
    todo: list[tuple[int, int, Any, Any]] = [(0, _TABLE, None, model)]  # (where its offset goes, kind, arg, value)
    k = 0
    while k < len(todo):
        ref, kind, arg, v = todo[k]
        k += 1
        if kind == _TABLE:
            at = w.table(v, todo)
        elif kind == _VECTOR:  # NOTE: its elements aligned to their size
            a = np.ascontiguousarray(np.asarray(v, dtype=arg))
            at = w.pad(max(4, a.itemsize), 4)
            w.put(_U32.pack(a.size))
            w.put(memoryview(a.reshape(-1).view(np.uint8)))  # NOTE: copied once, by the join below
        elif kind == _TABLES:
            at = w.pad(4, 0)
            w.put(_U32.pack(len(v)))
            for i, e in enumerate(v):
                todo.append((at + 4 + 4 * i, _TABLE, None, e))
            w.put(bytearray(4 * len(v)))  # NOTE: the elements' offsets are written into it below
        elif kind == _STRINGS:  # pragma: no cover - no TFLite table has a vector of strings
            raise ValueError("a vector of strings: not written")
        else:  # a string
            raw = v.encode() if isinstance(v, str) else bytes(v)
            at = w.pad(4, 0)
            w.put(_U32.pack(len(raw)) + raw + b"\0")
        w.offsets.append((ref, at - ref))
    w.pad(16, 0)
    # NOTE: every offset lands inside one of the small mutable chunks (the root's, a table's, a vector of
    # tables'): written there, then one join makes the file's bytes (the weights copied once, not a second
    # time from a bytearray into bytes: a MobileNet's 16 MB, ~4,000 page faults)
    for ref, off in w.offsets:
        c = bisect.bisect_right(w.starts, ref) - 1
        _U32.pack_into(w.chunks[c], ref - w.starts[c], off)
    return b"".join(w.chunks)


@lru_cache(maxsize=1)
def _pack_plans() -> Optional[dict[type, tuple]]:
    """Per object-API class: its fields widest first ``(attribute, vtable entry, kind, arg, default,
    inline size)``, and its vtable's entry count."""
    plans = unpack_plans()
    if plans is None:  # pragma: no cover
        return None
    out = {}
    for cls, defaults, fields in plans.values():
        rows = []
        for attr, slot, kind, arg in fields:
            size = arg.size if kind == _SCALAR else 4
            rows.append((attr, slot >> 1, _TABLE if kind == _UNION else kind, arg, defaults[attr], size))
        rows.sort(key=lambda r: -r[5])
        out[cls] = (tuple(rows), max((r[1] for r in rows), default=1) + 1)
    return out


class _Packer:
    def __init__(self, plans: dict):
        self.plans = plans
        self.chunks: list = []
        self.starts: list[int] = []  # NOTE: each chunk's position in the file
        self.size = 0
        self.offsets: list[tuple[int, int]] = []

    def put(self, b: Any) -> None:
        self.chunks.append(b)
        self.starts.append(self.size)
        self.size += len(b)

    def pad(self, align: int, before: int) -> int:
        """Pads so that ``before`` bytes on the position is aligned to ``align``; the position."""
        n = -(self.size + before) % align
        if n:
            self.put(bytes(n))
        return self.size

    def table(self, obj: Any, todo: list) -> int:
        rows, nslots = self.plans[type(obj)]
        od = obj.__dict__
        present = []
        top = 1
        for row in rows:
            v = od.get(row[0])
            if v is None or (row[2] == _SCALAR and v == row[4]):
                continue
            present.append((row, v))
            if row[1] > top:
                top = row[1]
        vt = self.pad(2, 0)
        n = top + 1
        table = vt + 2 * n
        table += -table % 4
        entries = [0] * n
        at = table + 4
        inline = []
        for row, v in present:
            size = row[5]
            at += -at % size  # NOTE: widest first: aligned where it lands in the file
            entries[row[1]] = at - table
            inline.append((at, row, v))
            at += size
        entries[0], entries[1] = 2 * n, at - table
        b = bytearray(at - vt)
        struct.pack_into(f"<{n}H", b, 0, *entries)
        _I32.pack_into(b, table - vt, table - vt)
        for p, row, v in inline:
            if row[2] == _SCALAR:
                row[3].pack_into(b, p - vt, v)
            else:
                todo.append((p, row[2], row[3], v))
        self.put(b)
        return table


# --------------------------------------------------------------------------- semantic checks


@dataclass
class Verified:
    model: Any  # the schema module's ModelT
    order: list[int]  # reachable referenced subgraphs, callees before callers (main not included)
    max_bytes: int


def _ints(v: Any) -> list[int]:
    return [] if v is None else int_list(v)


def int_list(v: Any) -> list[int]:
    """``[int(x) for x in v]`` of a schema vector (an integer numpy array as unpacked: one ``tolist``)."""
    if isinstance(v, np.ndarray) and v.dtype.kind in "iu":
        return v.tolist()
    return [int(x) for x in v]


def float_list(v: Any) -> list[float]:
    """``[float(x) for x in v]`` of a schema vector (a float numpy array as unpacked: one ``tolist``)."""
    if isinstance(v, np.ndarray) and v.dtype.kind == "f":
        return v.tolist()
    return [float(x) for x in v]


def nbytes(shape: list[int], itemsize: int, batch: Optional[int]) -> int:
    """Bytes of a tensor of ``shape`` (-1 -> ``batch``, or 1 when unknown dimensions stay unknown)."""
    return math.prod((batch or 1) if d == -1 else d for d in shape) * itemsize


def verify(data: bytes, *, max_bytes: Optional[int] = None, batch: Optional[int] = 1) -> Verified:
    """Check ``data`` (the bytes of a .tflite file) structurally and semantically, then unpack it.

    Raises :class:`InvalidModelError` naming the first problem."""
    max_bytes = default_max_bytes() if max_bytes is None else int(max_bytes)
    if len(data) < 8 or data[4:8] != b"TFL3":
        raise InvalidModelError("not a TFLite flatbuffer (file identifier TFL3 missing)"
                                if len(data) >= 8 else f"file truncated: {len(data)} bytes, not even a header")
    _Walk(data, max_bytes=max_bytes).run()
    m = unpack(data)
    order = _semantic(m, data, max_bytes, batch)
    return Verified(m, order, max_bytes)


def _semantic(m: Any, data: bytes, max_bytes: int, batch: Optional[int]) -> list[int]:
    s = sch.schema()
    types = {v for k, v in vars(s.TensorType).items() if not k.startswith("_") and isinstance(v, int)}
    subgraphs = m.subgraphs or []
    if not subgraphs:
        raise InvalidModelError("the model has no subgraph")
    n_codes = len(m.operatorCodes or [])
    buffers = m.buffers or []
    for b, buf in enumerate(buffers):
        if buf is not None and int(buf.offset) > 1 and int(buf.offset) + int(buf.size) > len(data):
            raise InvalidModelError(f"buffer {b}: data at bytes {buf.offset}..{int(buf.offset) + int(buf.size)} is "
                                    f"past the end of the {len(data)}-byte file")
    if batch is not None and batch < 1:
        raise InvalidModelError(f"batch {batch}: give 1 or more")
    total = 0
    for g, sg in enumerate(subgraphs):
        tensors = sg.tensors or []
        nt = len(tensors)
        where = "" if g == 0 else f" of subgraph {g}"
        for role, idx in (("input", sg.inputs), ("output", sg.outputs)):
            for k in _ints(idx):
                if not 0 <= k < nt:
                    raise InvalidModelError(f"subgraph {g} {role} {k} is not one of its {nt} tensors")
        for t, ten in enumerate(tensors):
            if ten is None:  # pragma: no cover - the object API always makes one
                raise InvalidModelError(f"tensor {t}{where} is empty")
            if int(ten.type) not in types:
                raise InvalidModelError(f"tensor {t}{where} has type {ten.type}, not a TFLite tensor type")
            shape = _ints(ten.shape)
            sig = _ints(ten.shapeSignature)
            if any(d < -1 for d in shape + sig):
                raise InvalidModelError(f"tensor {t}{where} has a negative dimension: shape {shape}, signature {sig}")
            if not 0 <= int(ten.buffer) < max(1, len(buffers)):
                raise InvalidModelError(f"tensor {t}{where} uses buffer {ten.buffer}; the model has {len(buffers)}")
            _check_quant(ten, t, where, shape)
            size = ITEMSIZE.get(int(ten.type), 1)
            nb = nbytes(shape if len(sig) != len(shape) else [-1 if q == -1 else d for d, q in zip(shape, sig)],
                        size, batch)
            if nb > max_bytes:
                raise InvalidModelError(f"tensor {t}{where} of shape {shape} is {nb} bytes, above the limit of "
                                        f"{max_bytes} (NNHAL_TFLITE_MAX_BYTES)")
            buf = buffers[int(ten.buffer)] if int(ten.buffer) < len(buffers) else None
            raw = _raw_len(buf)
            if raw and int(ten.type) in ITEMSIZE and ten.sparsity is None:
                want = math.prod(shape) * size if all(d >= 0 for d in shape) else -1
                if raw != want:
                    raise InvalidModelError(f"tensor {t}{where} of shape {shape} needs {want} bytes of data; "
                                            f"buffer {ten.buffer} holds {raw}")
            elif not raw:
                total += nb
        if total > max_bytes:
            raise InvalidModelError(f"the model's tensors (through subgraph {g}) need {total} bytes together, above "
                                    f"the limit of {max_bytes} (NNHAL_TFLITE_MAX_BYTES)")
        for i, op in enumerate(sg.operators or []):
            if op is None:  # pragma: no cover
                raise InvalidModelError(f"operator {i}{where} is empty")
            if not 0 <= int(op.opcodeIndex) < n_codes:
                raise InvalidModelError(f"operator {i}{where} has opcode index {op.opcodeIndex}; the model has "
                                        f"{n_codes} operator codes")
            for role, idx in (("input", op.inputs), ("output", op.outputs), ("intermediate", op.intermediates)):
                for k in _ints(idx):
                    if not -1 <= k < nt:
                        raise InvalidModelError(f"operator {i}{where} {role} {k} is not one of the {nt} tensors")
    graphcheck.check(m, max_bytes)
    return _order(m, subgraphs)


def _raw_len(buf: Any) -> int:
    if buf is None:
        return 0
    if buf.data is not None and len(buf.data) > 0:
        return len(buf.data)
    if int(buf.offset) > 1:
        return int(buf.size)
    return 0


def _check_quant(ten: Any, t: int, where: str, shape: list[int]) -> None:
    q = ten.quantization
    if q is None:
        return
    n = 0 if q.scale is None else len(q.scale)
    if n and q.zeroPoint is not None and len(q.zeroPoint) != n:
        raise InvalidModelError(f"tensor {t}{where} has {n} scales and {len(q.zeroPoint)} zero points")
    if n > 1:
        qd = int(q.quantizedDimension)
        if not 0 <= qd < len(shape) or shape[qd] not in (-1, n):
            raise InvalidModelError(f"tensor {t}{where} of shape {shape} has {n} per-channel scales on "
                                    f"axis {qd}")


def _order(m: Any, subgraphs: list) -> list[int]:
    """IF / WHILE references: in range, acyclic from the main subgraph; callees-first order."""
    s = sch.schema()
    names = sch.builtin_names()
    codes = m.operatorCodes or []
    n = len(subgraphs)
    edges: list[list[int]] = []
    for g, sg in enumerate(subgraphs):
        out = []
        for i, op in enumerate(sg.operators or []):
            c = codes[int(op.opcodeIndex)]
            name = names.get(max(int(c.builtinCode), int(c.deprecatedBuiltinCode)))
            o = op.builtinOptions
            refs = []
            if name == "IF" and isinstance(o, s.IfOptionsT):
                refs = [int(o.thenSubgraphIndex), int(o.elseSubgraphIndex)]
            elif name == "WHILE" and isinstance(o, s.WhileOptionsT):
                refs = [int(o.condSubgraphIndex), int(o.bodySubgraphIndex)]
            for r in refs:
                if not 0 <= r < n:
                    raise InvalidModelError(f"operator {i} {name} of subgraph {g} refers to subgraph {r}; the model "
                                            f"has {n}")
            out.extend(refs)
        edges.append(out)
    # NOTE: iterative depth-first search (no recursion however deep the nesting): grey = on the path
    state = [0] * n  # 0 unseen, 1 on the path, 2 done
    order: list[int] = []
    stack = [(0, 0)]
    state[0] = 1
    while stack:
        g, k = stack[-1]
        if k < len(edges[g]):
            stack[-1] = (g, k + 1)
            r = edges[g][k]
            if state[r] == 1:
                path = [x for x, _ in stack]
                cycle = path[path.index(r):] + [r]
                raise InvalidModelError("IF / WHILE subgraphs call each other in a cycle: "
                                        + " -> ".join(str(x) for x in cycle))
            if state[r] == 0:
                state[r] = 1
                stack.append((r, 0))
        else:
            stack.pop()
            state[g] = 2
            if g != 0:
                order.append(g)
    return order
