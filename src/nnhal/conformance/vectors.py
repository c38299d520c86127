"""Loading the conformance vectors (``shared/conformance/<version>/<spec>.json.gz``).

Each JSON model becomes a :class:`VectorModel` that can build a ``hal.Model``
(CONSTANT_COPY values in ``operandValues``, CONSTANT_REFERENCE values in a
shared memory pool), and carries the request inputs and expected outputs as
numpy arrays.  Uses only the public API (``nnhal.hal``, ``nnhal.memory``).
"""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Callable, Iterator, Optional

import msgspec
import numpy as np

from nnhal import hal

DTYPES = {
    "float32": np.float32,
    "float16": np.float16,
    "int32": np.int32,
    "uint32": np.uint32,
    "int16": np.int16,
    "uint16": np.uint16,
    "int8": np.int8,
    "uint8": np.uint8,
    "bool8": np.bool_,
    "int64": np.int64,  # NOTE: extension operand types (com.example.fibonacci's)
    "uint64": np.uint64,
}

ALIGN = 8

# short names of the data types a model tests (the breakdown of the conformance reports)
DATA_TYPE_NAMES = {
    hal.OperandType.TENSOR_FLOAT32: "float32", hal.OperandType.FLOAT32: "float32",
    hal.OperandType.TENSOR_FLOAT16: "float16", hal.OperandType.FLOAT16: "float16",
    hal.OperandType.TENSOR_QUANT8_ASYMM: "quant8 asymm", hal.OperandType.TENSOR_QUANT8_ASYMM_SIGNED: "quant8 signed",
    hal.OperandType.TENSOR_QUANT8_SYMM: "quant8 symm", hal.OperandType.TENSOR_QUANT8_SYMM_PER_CHANNEL: "quant8 channel",
    hal.OperandType.TENSOR_QUANT16_ASYMM: "quant16 asymm", hal.OperandType.TENSOR_QUANT16_SYMM: "quant16 symm",
    hal.OperandType.TENSOR_INT32: "int32", hal.OperandType.INT32: "int32", hal.OperandType.UINT32: "uint32",
    hal.OperandType.TENSOR_BOOL8: "bool8", hal.OperandType.BOOL: "bool8",
}


def _align(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


@dataclass
class VectorOperand:
    name: str
    type: int  # hal.OperandType value (kept as int: vectors may name any type)
    dimensions: list[int]
    numberOfConsumers: int
    scale: float
    zeroPoint: int
    lifetime: hal.OperandLifeTime
    channelQuant: Optional[hal.SymmPerChannelQuantParams]
    isIgnored: bool
    data: Optional[np.ndarray]  # None when the vector has no values
    extension: Optional[bytes] = None  # extraParams.extension (extension operand types)

    @property
    def raw(self) -> bytes:
        return b"" if self.data is None else self.data.tobytes()


@dataclass
class VectorSubgraph:
    operands: list[VectorOperand]
    operations: list[hal.Operation]
    inputIndexes: list[int]
    outputIndexes: list[int]


@dataclass
class VectorModel:
    name: str
    spec: str
    minSupportedVersion: str
    isRelaxed: bool
    expectFailure: bool
    multinomialTolerance: float
    main: VectorSubgraph
    referenced: list[VectorSubgraph] = field(default_factory=list)
    extensionNameToPrefix: list[hal.ExtensionNameAndPrefix] = field(default_factory=list)

    # ------------------------------------------------------------------
    @cached_property
    def has_fp16(self) -> bool:
        """Whether any operand of any subgraph is float16 (VTS's comparison tolerance widens then); looked up
        once per model (every execution's judgement asks)."""
        return any(o.type in (hal.OperandType.TENSOR_FLOAT16, hal.OperandType.FLOAT16)
                   for sg in [self.main, *self.referenced] for o in sg.operands)

    @property
    def version(self) -> Optional[hal.HalVersion]:
        """``minSupportedVersion`` as a HalVersion (V1_0..V1_3, AIDL_V1..AIDL_V4: the interface version a
        model needs, the one to validate it as of); None for UNKNOWN (the generator did not say)."""
        return hal_version(self.minSupportedVersion)

    @property
    def data_type(self) -> str:
        """The data type the model tests, named as Android's test generator does
        (float32, relaxed, float16, quant8 asymm, quant8 signed, ...): the type of
        the first operation's first data input (after an IF condition and subgraph operands, a tensor
        before a scalar)."""
        if not self.main.operations:
            return "none"
        return self.operation_data_type(self.main.operations[0])

    def operation_data_type(self, op: hal.Operation) -> str:
        """The data type one operation of the main subgraph computes in, named as :attr:`data_type`."""
        ins = list(op.inputs[1:] if op.type == hal.OperationType.IF else op.inputs)
        ins = [i for i in ins if self.main.operands[i].type != hal.OperandType.SUBGRAPH]
        # NOTE: the first tensor: PACK's input 0 is its axis scalar
        ins = [i for i in ins if hal.is_tensor_type(self.main.operands[i].type)] or ins
        t = self.main.operands[ins[0]].type if ins else self.main.operands[op.outputs[0]].type
        if t in (hal.OperandType.TENSOR_FLOAT32, hal.OperandType.FLOAT32) and self.isRelaxed:
            return "relaxed"
        prefixes = {int(e.prefix): e.name for e in self.extensionNameToPrefix}
        if int(t) >> 16 and int(t) >> 16 in prefixes:  # NOTE: an extension operand type: extension:type
            return f"{prefixes[int(t) >> 16]}:{int(t) & 0xFFFF}"
        return DATA_TYPE_NAMES.get(t, hal.OperandType(t).name.lower() if t in hal.OperandType._value2member_map_
                                   else str(t))

    @property
    def operation_types(self) -> set[str]:
        """The operations the model uses, by name; an extension operation as ``extension:type``."""
        names = set()
        prefixes = {int(e.prefix): e.name for e in self.extensionNameToPrefix}
        for sg in [self.main, *self.referenced]:
            for op in sg.operations:
                t = int(op.type)
                if t in hal.OperationType._value2member_map_:
                    names.add(hal.OperationType(t).name)
                elif t >> 16 and (t >> 16) in prefixes:
                    names.add(f"{prefixes[t >> 16]}:{t & 0xFFFF}")
                else:
                    names.add(str(t))
        return names

    def input_values(self) -> list[Optional[np.ndarray]]:
        """Value of each main input (None: omitted, pass hasNoValue)."""
        vals = []
        for i in self.main.inputIndexes:
            d = self.main.operands[i].data
            # NOTE: as Android's test harness does, an input with no data is
            # omitted (hasNoValue), even when its dimensions contain a 0.
            vals.append(None if d is None or d.size == 0 else d)
        return vals

    def expected_outputs(self) -> list[np.ndarray]:
        return [self.main.operands[i].data for i in self.main.outputIndexes]

    def output_operands(self) -> list[VectorOperand]:
        return [self.main.operands[i] for i in self.main.outputIndexes]

    def build_model(self, memory_factory: Optional[Callable[[bytes], hal.Memory]] = None) -> hal.Model:
        """The HAL model.  ``memory_factory(data) -> hal.Memory`` makes the pool
        holding CONSTANT_REFERENCE values (default: an ashmem pool)."""
        values = bytearray()
        pool = bytearray()
        subgraphs = []
        for sg in [self.main, *self.referenced]:
            operands = []
            for o in sg.operands:
                loc = hal.DataLocation()
                raw = o.raw
                if o.lifetime == hal.OperandLifeTime.CONSTANT_COPY:
                    off = _align(len(values))
                    values.extend(b"\0" * (off - len(values)))
                    values.extend(raw)
                    loc = hal.DataLocation(poolIndex=0, offset=off, length=len(raw))
                elif o.lifetime == hal.OperandLifeTime.CONSTANT_REFERENCE:
                    off = _align(len(pool))
                    pool.extend(b"\0" * (off - len(pool)))
                    pool.extend(raw)
                    loc = hal.DataLocation(poolIndex=0, offset=off, length=len(raw))
                elif o.lifetime == hal.OperandLifeTime.SUBGRAPH:
                    loc = hal.DataLocation(poolIndex=0, offset=int(o.data.reshape(-1)[0]), length=0)
                extra = hal.OperandExtraParams(channelQuant=o.channelQuant) if o.channelQuant else \
                    hal.OperandExtraParams(extension=o.extension) if o.extension is not None else hal.OperandExtraParams()
                operands.append(hal.Operand(type=o.type, dimensions=list(o.dimensions),
                                            numberOfConsumers=o.numberOfConsumers, scale=o.scale,
                                            zeroPoint=o.zeroPoint, lifetime=o.lifetime, location=loc,
                                            extraParams=extra))
            subgraphs.append(hal.Subgraph(operands=operands,
                                          operations=[hal.Operation(op.type, list(op.inputs), list(op.outputs))
                                                      for op in sg.operations],
                                          inputIndexes=list(sg.inputIndexes), outputIndexes=list(sg.outputIndexes)))
        pools = []
        if pool:
            if memory_factory is None:
                from nnhal.platform import memory

                memory_factory = memory.allocate_filled
            pools.append(memory_factory(bytes(pool)))
        return hal.Model(main=subgraphs[0], referenced=subgraphs[1:], operandValues=bytes(values), pools=pools,
                         relaxComputationFloat32toFloat16=self.isRelaxed,
                         extensionNameToPrefix=[hal.ExtensionNameAndPrefix(e.name, e.prefix)
                                                for e in self.extensionNameToPrefix])


def hal_version(name: str) -> Optional[hal.HalVersion]:
    """A vector's ``minSupportedVersion`` (``V1_0``..``V1_3``, ``AIDL_V1``..``AIDL_V4``, ``UNKNOWN``) as a
    HalVersion, None for UNKNOWN; ValueError for any other name."""
    if name == "UNKNOWN":
        return None
    try:
        return hal.HalVersion[name]
    except KeyError:
        raise ValueError(f"unknown minSupportedVersion {name!r}") from None


def _operand(d: dict) -> VectorOperand:
    t = d["type"]
    type_ = hal.OperandType[t] if isinstance(t, str) else int(t)
    cq = d.get("channelQuant")
    data = d.get("data")
    arr = None
    if data is not None:
        dtype = DTYPES[data["dtype"]]
        arr = np.asarray(data["values"], dtype=np.float64 if dtype in (np.float32, np.float16) else None)
        arr = arr.astype(dtype)
        dims = d["dimensions"]
        if arr.size and arr.size == int(np.prod(dims)) and type_ != hal.OperandType.SUBGRAPH:
            arr = arr.reshape(dims)
        elif arr.size == 0 and 0 in dims:
            arr = arr.reshape(dims)
        elif arr.size == 0:
            arr = None if d["lifetime"] not in ("SUBGRAPH_OUTPUT",) else arr
    return VectorOperand(
        name=d.get("name", ""),
        type=type_,
        dimensions=list(d["dimensions"]),
        numberOfConsumers=d["numberOfConsumers"],
        scale=float(d["scale"]),
        zeroPoint=int(d["zeroPoint"]),
        lifetime=hal.OperandLifeTime[d["lifetime"]],
        channelQuant=hal.SymmPerChannelQuantParams(scales=list(cq["scales"]), channelDim=cq["channelDim"]) if cq else None,
        isIgnored=bool(d.get("isIgnored", False)),
        data=arr,
        extension=bytes.fromhex(d["extension"]) if d.get("extension") is not None else None,
    )


def _subgraph(d: dict) -> VectorSubgraph:
    return VectorSubgraph(
        operands=[_operand(o) for o in d["operands"]],
        operations=[hal.Operation(hal.OperationType[o["type"]] if o["type"] in hal.OperationType.__members__
                                  else int(o["type"]), list(o["inputs"]), list(o["outputs"]))
                    for o in d["operations"]],
        inputIndexes=list(d["inputIndexes"]),
        outputIndexes=list(d["outputIndexes"]),
    )


def parse_model(spec: str, m: dict) -> VectorModel:
    """One model of a vector file's ``models`` list (``spec``: the file's spec name)."""
    version = m.get("minSupportedVersion", "UNKNOWN")
    hal_version(version)  # NOTE: an unknown version name makes the file unreadable, as any malformed field
    return VectorModel(
        name=m["name"], spec=spec, minSupportedVersion=version,
        isRelaxed=bool(m.get("isRelaxed", False)), expectFailure=bool(m.get("expectFailure", False)),
        multinomialTolerance=float(m.get("expectedMultinomialDistributionTolerance", 0) or 0),
        main=_subgraph(m["main"]), referenced=[_subgraph(s) for s in m.get("referenced", [])],
        extensionNameToPrefix=[hal.ExtensionNameAndPrefix(name=e["name"], prefix=int(e["prefix"]))
                               for e in m.get("extensionNameToPrefix", [])])


_DTYPE_NAMES = {np.dtype(v): k for k, v in DTYPES.items()}


def _operand_dict(o: VectorOperand) -> dict:
    d: dict = {"name": o.name, "type": hal.OperandType(o.type).name if o.type in hal.OperandType._value2member_map_
               else int(o.type), "dimensions": [int(x) for x in o.dimensions],
               "numberOfConsumers": int(o.numberOfConsumers), "scale": float(o.scale), "zeroPoint": int(o.zeroPoint),
               "lifetime": hal.OperandLifeTime(o.lifetime).name,
               "channelQuant": {"channelDim": int(o.channelQuant.channelDim),
                                "scales": [float(x) for x in o.channelQuant.scales]} if o.channelQuant else None,
               "isIgnored": bool(o.isIgnored)}
    if o.data is not None:
        data = np.asarray(o.data)
        d["data"] = {"dtype": _DTYPE_NAMES[data.dtype], "values": data.reshape(-1).tolist()}
    if o.extension is not None:
        d["extension"] = o.extension.hex()
    return d


def _subgraph_dict(sg: VectorSubgraph) -> dict:
    return {"operands": [_operand_dict(o) for o in sg.operands],
            "operations": [{"type": hal.operation_name(op.type), "inputs": list(op.inputs), "outputs": list(op.outputs)}
                           for op in sg.operations],
            "inputIndexes": list(sg.inputIndexes), "outputIndexes": list(sg.outputIndexes)}


def model_dict(m: VectorModel) -> dict:
    """A model as a vector file's ``models`` entry (``shared/conformance/README.md``); :func:`parse_model` reads it back."""
    d = {"name": m.name, "minSupportedVersion": m.minSupportedVersion, "isRelaxed": bool(m.isRelaxed),
         "expectFailure": bool(m.expectFailure),
         "expectedMultinomialDistributionTolerance": float(m.multinomialTolerance), "main": _subgraph_dict(m.main),
         "referenced": [_subgraph_dict(s) for s in m.referenced]}
    if m.extensionNameToPrefix:
        d["extensionNameToPrefix"] = [{"name": e.name, "prefix": int(e.prefix)} for e in m.extensionNameToPrefix]
    return d


def encode_file(spec: str, models: list[VectorModel]) -> bytes:
    """A vector file (gzipped JSON) of ``models`` under ``spec``."""
    doc = {"spec": spec, "models": [model_dict(m) for m in models]}
    return gzip.compress(json.dumps(doc).encode(), mtime=0)


def load_file(path: str | Path) -> list[VectorModel]:
    with gzip.open(path, "rb") as f:
        raw = f.read()
    try:
        doc = msgspec.json.decode(raw)  # NOTE: 3x json's speed (the full vector set: 0.93 -> 0.31 s)
    except msgspec.DecodeError:
        doc = json.loads(raw)  # NOTE: what msgspec does not read (NaN / Infinity literals) or says why not
    return [parse_model(doc["spec"], m) for m in doc["models"]]


def find_files(paths: list[str | Path]) -> list[Path]:
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            files.extend(sorted(p.rglob("*.json.gz")))
        elif p.exists():
            files.append(p)
        else:
            raise FileNotFoundError(f"no such vector file or directory: {p}")
    return files


class VectorFileError(ValueError):
    """A vector file that cannot be read (corrupt, truncated, not a vector file)."""


def load_file_checked(path: str | Path) -> list[VectorModel]:
    """:func:`load_file`, with every way a file can be bad turned into one
    :class:`VectorFileError` naming the file."""
    try:
        return load_file(path)
    except (OSError, EOFError, ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
        # NOTE: gzip.BadGzipFile is an OSError, a truncated stream an EOFError, bad JSON a ValueError,
        # a JSON document of the wrong shape a KeyError / TypeError / IndexError / AttributeError
        raise VectorFileError(f"{path}: not a readable vector file ({type(e).__name__}: {e})") from e


def load(paths: list[str | Path], ops: Optional[set[str]] = None,
         on_error: Optional[Callable[[Path, str], None]] = None) -> Iterator[VectorModel]:
    """Every model under ``paths``; with ``ops``, only models whose operations
    are all in that set.  With ``on_error(path, message)``, a file that cannot
    be read is reported there and skipped (else :class:`VectorFileError`)."""
    for _, _, m in load_indexed(paths, ops, on_error):
        yield m


def load_indexed(paths: list[str | Path], ops: Optional[set[str]] = None,
                 on_error: Optional[Callable[[Path, str], None]] = None) -> Iterator[tuple[Path, int, VectorModel]]:
    """As :func:`load`, with each model's file and index in it (how a worker process finds it again)."""
    for f in find_files(paths):
        try:
            models = load_file_checked(f)
        except VectorFileError as e:
            if on_error is None:
                raise
            on_error(f, str(e))
            continue
        for k, m in enumerate(models):
            if ops is None or m.operation_types <= ops:
                yield f, k, m


# the repository's sibling folder shared/conformance (src/nnhal/conformance/vectors.py -> repo root -> ..)
DEFAULT_VECTORS = Path(__file__).resolve().parents[3] / ".." / "shared" / "conformance"


def default_vectors(folder: str = "conformance", env: str = "NNHAL_VECTORS") -> str:
    """The vector folder to use: $NNHAL_VECTORS, else ../shared/conformance beside
    the checkout or the current folder (``folder`` / ``env``: another set of shared vectors)."""
    default = DEFAULT_VECTORS.parent / folder
    for cand in (os.environ.get(env), default, Path.cwd() / ".." / "shared" / folder, Path.cwd() / "shared" / folder):
        if cand and Path(cand).is_dir():
            return str(Path(cand).resolve())
    return str(default.resolve())


def default_aidl_vectors() -> str:
    """The AIDL HAL's vectors (operations and operand types of AIDL versions 2 and 3, kept apart from
    HAL 1.3's): $NNHAL_AIDL_VECTORS, else ../shared/conformance-aidl as :func:`default_vectors`."""
    return default_vectors("conformance-aidl", "NNHAL_AIDL_VECTORS")
