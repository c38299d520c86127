"""Fuzz the ``.tflite`` importer: mutated models must end in the importer's defined errors.

    python -m nnhal.tools.fuzz tflite [--minutes 10 | --seconds S | --count N] [--seed 0] [--models DIR]
                                      [--large] [--max-bytes 64M] [--save DIR] [--json]
    python -m nnhal.tools.fuzz tflite --commands run,bench,graph,ops|all [--minutes N per family] [--memory-mb M]
                                      (each input end to end through those commands: nnhal.tools.fuzz_commands)
    python -m nnhal.tools.fuzz cache|wire|burst|hal|all --minutes N    (nnhal.tools.fuzz_driver)

Seeds: the real models of ``../shared/models`` (or ``$NNHAL_MODELS``; the two 14-17 MB MobileNets
only with ``--large``) and small models written here (one per importer path: convolutions, per-channel
int8, reshapes, PACK / UNPACK, MIRROR_PAD, RANGE, ZEROS_LIKE, REVERSE_V2, SPLIT_V, SELECT_V2, dequantized
float16 weights, IF / WHILE subgraphs, SSD post-processing options, LSTM).  Each input is a seed with
one to four mutations:

- ``flip``: random bytes or bits changed;
- ``truncate``: the file cut short;
- ``field``: a structure-aware change at a position the verifier's walk reports (a vtable entry set to 0,
  i.e. a field removed, or another value; an offset, vector length, or scalar field such as an index or
  count set to a boundary or random value);
- ``object``: through the schema's object API and written again: operator inputs / outputs cut, emptied or
  pointed elsewhere, opcode / buffer / subgraph indexes changed, options removed or swapped with another
  operator's, tensor types, shapes and quantization arrays changed, constant data changed or resized.

Every input goes through ``nnhal.tflite.load`` (``max_bytes`` 64 MiB by default).  Outcomes: ``ok``,
``invalid`` (InvalidModelError), ``unsupported`` (UnsupportedModelError), ``skipped`` (a mutation the
writer could not serialise); anything else is a finding: another exception, a hang (an input using more
than ``--timeout`` seconds of CPU, or ten times as long in wall time) or a MemoryError (``--rlimit-mb``
caps the address space).  Findings are written to ``--save`` (the input and its traceback).  Prints inputs per second, counts by outcome and the peak RSS;
exits 1 if anything was found.
"""

from __future__ import annotations

import argparse
import collections
import copy
import json
import os
import random
import resource
import signal
import struct
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

_DEFAULT_MODELS = Path(__file__).resolve().parents[3] / ".." / "shared" / "models"
SMALL_REAL = ["kws_mobilenetv2_int8", "vww_mobilenetv1_int8", "palm_detection_lite"]
LARGE_REAL = ["mobilenet_v1_f32", "mobilenet_v2_f32"]


class _Hang(BaseException):
    """Raised by the per-input timers (a BaseException so no ``except Exception`` swallows it)."""

    def __init__(self, what: str):
        super().__init__(what)
        self.what = what


# --------------------------------------------------------------------------- seeds


def written_seeds() -> dict[str, bytes]:
    """Small models through the importer's paths, written with :mod:`nnhal.tflite.writer`."""
    from nnhal.tflite.writer import Tensor, graph, one_op, options, subgraphs

    rng = np.random.default_rng(0)

    def w(shape: list[int], dtype: str = "float32", **kw: Any) -> Tensor:
        if dtype == "float32":
            data = rng.uniform(-1, 1, shape).astype(np.float32)
        elif dtype == "float16":
            data = rng.uniform(-1, 1, shape).astype(np.float16)
        else:
            data = rng.integers(-100, 100, shape).astype(dtype)
        return Tensor(shape, dtype, data=data, **kw)

    def c(values: list, dtype: str = "int32") -> Tensor:
        a = np.asarray(values, dtype)
        return Tensor(list(a.shape), dtype, data=a)

    conv = options("Conv2DOptions", padding=0, strideW=1, strideH=1, fusedActivationFunction=1,
                   dilationWFactor=1, dilationHFactor=1)
    dw = options("DepthwiseConv2DOptions", padding=1, strideW=1, strideH=1, depthMultiplier=2,
                 fusedActivationFunction=3, dilationWFactor=1, dilationHFactor=1)
    q = {"scale": 0.05, "zero_point": 3}
    seeds = {
        "add": one_op("ADD", [Tensor([2, 3]), Tensor([2, 3])], [Tensor([2, 3])], options("AddOptions")),
        "conv": one_op("CONV_2D", [Tensor([1, 5, 5, 2]), w([3, 3, 3, 2]), w([3])], [Tensor([1, 5, 5, 3])], conv),
        "conv_int8_pc": one_op(
            "CONV_2D", [Tensor([1, 4, 4, 2], "int8", **q), w([3, 1, 1, 2], "int8", scale=[0.1, 0.2, 0.3],
                                                           zero_point=[0, 0, 0], axis=0),
                        w([3], "int32", scale=[0.005, 0.01, 0.015], zero_point=[0, 0, 0])],
            [Tensor([1, 4, 4, 3], "int8", scale=0.1, zero_point=-2)], conv),
        "depthwise": one_op("DEPTHWISE_CONV_2D", [Tensor([1, 4, 4, 2]), w([1, 3, 3, 4]), None], [Tensor([1, 4, 4, 4])],
                            dw),
        "fc_keep": one_op("FULLY_CONNECTED", [Tensor([2, 3, 4]), w([5, 4]), w([5])], [Tensor([2, 3, 5])],
                          options("FullyConnectedOptions", keepNumDims=True)),
        "reshape_squeeze": graph(
            [Tensor([2, 1, 3]), c([3, 2]), Tensor([3, 2]), Tensor([3, 1, 2]), Tensor([3, 2]), c([1])],
            [("RESHAPE", [0, 1], [2], options("ReshapeOptions", newShape=[3, 2])),
             ("EXPAND_DIMS", [2, 5], [3], None), ("SQUEEZE", [3], [4], options("SqueezeOptions", squeezeDims=[1]))],
            [0], [4]),
        "pack_unpack": graph(
            [Tensor([2, 3]), Tensor([2, 3]), Tensor([2, 2, 3]), Tensor([2, 3]), Tensor([2, 3])],
            [("PACK", [0, 1], [2], options("PackOptions", valuesCount=2, axis=1)),
             ("UNPACK", [2], [3, 4], options("UnpackOptions", num=2, axis=1))], [0, 1], [3, 4]),
        "mirror_pad": one_op("MIRROR_PAD", [Tensor([2, 3]), c([[1, 1], [2, 1]])], [Tensor([4, 6])],
                             options("MirrorPadOptions", mode=0)),
        "range_add": graph(
            [c([0]), c([10]), c([2]), Tensor([5], "int32"), Tensor([5], "int32"), Tensor([5], "int32")],
            [("RANGE", [0, 1, 2], [3], None), ("ADD", [3, 4], [5], options("AddOptions"))], [4], [5]),
        "zeros_like": graph([Tensor([2, 3]), Tensor([2, 3]), Tensor([2, 3])],
                            [("ZEROS_LIKE", [0], [1], None), ("ADD", [0, 1], [2], options("AddOptions"))], [0], [2]),
        "reverse_split_v": graph(
            [Tensor([4, 3]), c([0]), Tensor([4, 3]), c([1, 3]), c([0]), Tensor([1, 3]), Tensor([3, 3])],
            [("REVERSE_V2", [0, 1], [2], None), ("SPLIT_V", [2, 3, 4], [5, 6], options("SplitVOptions", numSplits=2))],
            [0], [5, 6]),
        "select_v2": one_op("SELECT_V2", [Tensor([1, 3], "bool"), Tensor([2, 3]), Tensor([2, 1])], [Tensor([2, 3])]),
        "dequantize_f16": graph([w([3, 4], "float16"), Tensor([3, 4]), Tensor([2, 3, 4]), Tensor([2, 3, 4])],
                                [("DEQUANTIZE", [0], [1], None), ("MUL", [2, 1], [3], options("MulOptions"))],
                                [2], [3]),
        "quant_chain": graph(
            [Tensor([1, 4, 4, 2]), Tensor([1, 4, 4, 2], "int8", **q), Tensor([1, 2, 2, 2], "int8", **q),
             Tensor([1, 2, 2, 2])],
            [("QUANTIZE", [0], [1], None),
             ("MAX_POOL_2D", [1], [2], options("Pool2DOptions", padding=1, strideW=2, strideH=2, filterWidth=2,
                                               filterHeight=2)),
             ("DEQUANTIZE", [2], [3], None)], [0], [3]),
        "concat_gather_strided": graph(
            [Tensor([2, 3]), Tensor([2, 3]), Tensor([2, 6]), c([1, 0]), Tensor([2, 6]), c([0, 1]), c([2, 5]),
             c([1, 2]), Tensor([2, 2])],
            [("CONCATENATION", [0, 1], [2], options("ConcatenationOptions", axis=1)),
             ("GATHER", [2, 3], [4], options("GatherOptions", axis=0)),
             ("STRIDED_SLICE", [4, 5, 6, 7], [8], options("StridedSliceOptions"))], [0, 1], [8]),
        "lstm": one_op("LSTM", [Tensor([2, 3])] + [w([4, 3]) for _ in range(4)] + [w([4, 4]) for _ in range(4)]
                       + [None] * 3 + [w([4]) for _ in range(4)] + [None, None]
                       + [Tensor([2, 4], variable=True), Tensor([2, 4], variable=True)],
                       [Tensor([2, 4])], options("LSTMOptions", fusedActivationFunction=4)),
    }
    from flatbuffers import flexbuffers  # type: ignore[import-not-found]

    ssd = flexbuffers.Dumps({"num_classes": 2, "max_detections": 3, "max_classes_per_detection": 1,
                             "detections_per_class": 10, "nms_score_threshold": 0.1, "nms_iou_threshold": 0.5,
                             "y_scale": 10.0, "x_scale": 10.0, "h_scale": 5.0, "w_scale": 5.0,
                             "use_regular_nms": False})
    seeds["ssd"] = one_op("TFLite_Detection_PostProcess",
                          [Tensor([1, 6, 4]), Tensor([1, 6, 3]), w([6, 4])],
                          [Tensor([1, 3, 4]), Tensor([1, 3]), Tensor([1, 3]), Tensor([1])], custom_options=ssd)
    # IF / WHILE: main IF(c, x, y) -> then x + y / else x * y; WHILE(i < 5) { i += 1; v *= 2 }
    f2, b1, i1 = Tensor([2]), Tensor([], "bool"), Tensor([], "int32")
    main = ([b1, f2, f2, f2], [("IF", [0, 1, 2], [3], options("IfOptions", thenSubgraphIndex=1, elseSubgraphIndex=2))],
            [0, 1, 2], [3])
    then = ([f2, f2, f2], [("ADD", [0, 1], [2], options("AddOptions"))], [0, 1], [2])
    other = ([f2, f2, f2], [("MUL", [0, 1], [2], options("MulOptions"))], [0, 1], [2])
    seeds["if"] = subgraphs([main, then, other])
    five, one = Tensor([], "int32", data=np.int32(5)), Tensor([], "int32", data=np.int32(1))
    two = Tensor([2], data=np.full(2, 2, np.float32))
    wmain = ([i1, f2, i1, f2], [("WHILE", [0, 1], [2, 3], options("WhileOptions", condSubgraphIndex=1,
                                                                   bodySubgraphIndex=2))], [0, 1], [2, 3])
    cond = ([i1, f2, five, b1], [("LESS", [0, 2], [3], None)], [0, 1], [3])
    body = ([i1, f2, one, two, i1, f2], [("ADD", [0, 2], [4], options("AddOptions")),
                                         ("MUL", [1, 3], [5], options("MulOptions"))], [0, 1], [4, 5])
    seeds["while"] = subgraphs([wmain, cond, body])
    return seeds


def seeds(models: Optional[Path] = None, large: bool = False, real: bool = True) -> dict[str, bytes]:
    """The fuzz seeds: the shared real models found (the MobileNets only with ``large``) and the written ones."""
    out: dict[str, bytes] = {}
    d = Path(models or os.environ.get("NNHAL_MODELS") or _DEFAULT_MODELS)
    if real:
        for name in SMALL_REAL + (LARGE_REAL if large else []):
            p = d / f"{name}.tflite"
            if p.exists():
                out[name] = p.read_bytes()
    out.update(written_seeds())
    return out


# --------------------------------------------------------------------------- mutations


_BOUNDARY = [0, 1, 2, 3, 4, 7, 8, 16, 255, 256, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, 0x80000000,
             0xFFFFFFFF, 0xFFFFFFFE, 0x10000, 0x1000000, 2**31 - 16, 200, 1000, 100000]


class Mutator:
    """Mutations of one seed (its walk layout and unpacked object model cached)."""

    def __init__(self, name: str, data: bytes):
        from nnhal.tflite import verify

        self.name, self.data = name, data
        self.layout = verify.layout(data)
        self.small = len(data) < 400_000
        self._model: Any = None

    def model(self) -> Any:
        from nnhal.tflite.schema import read_model

        if self._model is None:
            self._model = read_model(self.data)
        return copy.deepcopy(self._model)

    def mutate(self, rng: random.Random) -> tuple[Optional[bytes], str]:
        kinds = ["flip", "truncate", "field", "field", "field"] + (["object"] * 3 if self.small else [])
        kind = rng.choice(kinds)
        if kind == "object":
            return self.object_mutation(rng), kind
        buf = bytearray(self.data)
        for _ in range(rng.choice([1, 1, 1, 2, 3, 4])):
            if kind == "truncate":
                buf = buf[: rng.randrange(0, len(buf))]
                break
            if kind == "flip":
                p = rng.randrange(len(buf))
                buf[p] = buf[p] ^ (1 << rng.randrange(8)) if rng.random() < 0.5 else rng.randrange(256)
                continue
            what, pos, size = rng.choice(self.layout)
            if pos + size > len(buf):
                continue
            if what == "vtentry" and rng.random() < 0.6:
                v = 0  # NOTE: the field removed
            elif what == "uoffset" and rng.random() < 0.5:
                old = struct.unpack_from("<I", buf, pos)[0]
                v = old + rng.choice([-8, -4, -2, -1, 1, 2, 4, 8, 4096, -4096, len(buf)])
            elif what == "veclen" and rng.random() < 0.5:
                old = struct.unpack_from("<I", buf, pos)[0]
                v = rng.choice([0, old - 1, old + 1, old * 2 + 1, 2**30, old + 1000])
            else:
                v = rng.choice(_BOUNDARY) if rng.random() < 0.7 else rng.getrandbits(8 * size)
                if rng.random() < 0.3:
                    v = -v
            v %= 1 << (8 * size)
            buf[pos: pos + size] = v.to_bytes(size, "little")
        return bytes(buf), kind

    def object_mutation(self, rng: random.Random) -> Optional[bytes]:
        from nnhal.tflite.schema import schema, write_model

        s = schema()
        m = self.model()
        for _ in range(rng.choice([1, 1, 2, 3])):
            sg = rng.choice(m.subgraphs)
            ops = sg.operators or []
            tensors = sg.tensors or []
            nt = len(tensors)
            r = rng.randrange(14)
            try:
                if r <= 3 and ops:
                    op = rng.choice(ops)
                    attr = rng.choice(["inputs", "outputs"])
                    v = list(getattr(op, attr) if getattr(op, attr) is not None else [])
                    choice = rng.randrange(5)
                    if choice == 0:
                        v = None
                    elif choice == 1 and v:
                        v = v[: rng.randrange(len(v))]
                    elif choice == 2 and v:
                        v[rng.randrange(len(v))] = rng.choice([-1, -2, nt, nt + 5, 2**31 - 1, 0])
                    elif choice == 3:
                        v = v + [rng.randrange(max(nt, 1))] * rng.randrange(1, 4)
                    elif v:
                        v[rng.randrange(len(v))] = rng.randrange(max(nt, 1))
                    setattr(op, attr, None if v is None else np.asarray(v, np.int32))
                elif r == 4 and ops:
                    op = rng.choice(ops)
                    op.opcodeIndex = rng.choice([-1, len(m.operatorCodes), 2**31 - 1, rng.randrange(len(m.operatorCodes))])
                elif r == 5 and ops:
                    op = rng.choice(ops)
                    other = rng.choice(ops)
                    if rng.random() < 0.5 or other is op:
                        op.builtinOptionsType, op.builtinOptions = 0, None
                    else:
                        op.builtinOptionsType, op.builtinOptions = other.builtinOptionsType, other.builtinOptions
                    if rng.random() < 0.2:
                        op.builtinOptionsType = rng.randrange(0, 130)
                elif r == 6 and tensors:
                    t = rng.choice(tensors)
                    t.type = rng.choice([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 13, 17, 22, 23, 60, 127])
                elif r == 7 and tensors:
                    t = rng.choice(tensors)
                    shape = list(t.shape) if t.shape is not None else []
                    choice = rng.randrange(5)
                    if choice == 0 or not shape:
                        shape = shape + [rng.choice([1, 2, 3, 65536, 2**31 - 1])]
                    elif choice == 1:
                        shape = shape[:-1]
                    else:
                        shape[rng.randrange(len(shape))] = rng.choice([-1, -2, 0, 1, 3, 1 << 20, 2**31 - 1])
                    t.shape = np.asarray(shape, np.int32)
                    if rng.random() < 0.3:
                        t.shapeSignature = np.asarray([-1] + shape[1:], np.int32)
                elif r == 8 and tensors:
                    t = rng.choice(tensors)
                    t.buffer = rng.choice([0, len(m.buffers), len(m.buffers) + 3, rng.randrange(len(m.buffers))])
                elif r == 9 and tensors:
                    t = rng.choice(tensors)
                    q = t.quantization or s.QuantizationParametersT()
                    q.scale = np.asarray([rng.choice([0.1, 0.0, -1.0, float("nan"), 1e30])] * rng.choice([1, 2, 3]),
                                         np.float32)
                    q.zeroPoint = np.asarray([rng.choice([0, 1, -128, 300])] * rng.choice([0, 1, 2, 3]), np.int64)
                    q.quantizedDimension = rng.choice([0, 1, 3, -1, 7])
                    t.quantization = q
                elif r == 10 and m.buffers:
                    b = rng.choice(m.buffers)
                    data = b.data if b.data is not None else np.zeros(0, np.uint8)
                    choice = rng.randrange(3)
                    if choice == 0:
                        data = data[: rng.randrange(len(data) + 1)]
                    elif choice == 1:
                        data = np.concatenate([data, np.zeros(rng.choice([1, 4, 8]), np.uint8)])
                    else:
                        data = np.frombuffer(np.asarray([rng.choice([0, -1, 2**31 - 1, -2**31, 7])] *
                                                        max(1, len(data) // 4), np.int32).tobytes(), np.uint8)
                    b.data = data
                elif r == 11:
                    for op in ops:
                        o = op.builtinOptions
                        for f in ("thenSubgraphIndex", "elseSubgraphIndex", "condSubgraphIndex", "bodySubgraphIndex",
                                  "axis", "numSplits", "newShape", "squeezeDims", "mode", "outputType"):
                            if o is not None and hasattr(o, f) and rng.random() < 0.5:
                                setattr(o, f, rng.choice([-1, 0, 1, 2, 3, len(m.subgraphs), 2**31 - 1, -5])
                                        if f not in ("newShape", "squeezeDims") else
                                        np.asarray([rng.choice([-1, 0, 5, 2**31 - 1])], np.int32))
                elif r == 12:
                    attr = rng.choice(["inputs", "outputs"])
                    v = list(getattr(sg, attr) if getattr(sg, attr) is not None else [])
                    v = v[: rng.randrange(len(v) + 1)] + ([rng.choice([-1, nt, 0])] if rng.random() < 0.5 else [])
                    setattr(sg, attr, np.asarray(v, np.int32))
                elif r == 13 and ops:
                    op = rng.choice(ops)
                    op.customOptions = np.frombuffer(bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 24))),
                                                     np.uint8)
                    if rng.random() < 0.5:
                        m.subgraphs.append(copy.deepcopy(rng.choice(m.subgraphs)))
            except (ValueError, OverflowError, IndexError):
                return None
        try:
            return write_model(m)
        except Exception:  # noqa: BLE001 - a mutation the writer cannot serialise is skipped, not a finding
            return None


# --------------------------------------------------------------------------- the loop


def _load(data: bytes, max_bytes: int, device: Any = None) -> str:
    """``load`` (and with ``device``, what ``nnhal run`` does next: prepare, execute on generated inputs)."""
    from nnhal.delegate.run import ExecutionError, HalSession, make_inputs
    from nnhal.tflite import InvalidModelError, UnsupportedModelError, free_model, load

    try:
        model, io = load(data, max_bytes=max_bytes)
    except InvalidModelError:
        return "invalid"
    except UnsupportedModelError:
        return "unsupported"
    try:
        if device is None:
            return "ok"
        try:
            session = HalSession(device, model, io)
        except ExecutionError:
            return "ok, prepare refused"
        try:
            session.run(make_inputs(io))
        except ExecutionError:
            return "ok, execution failed"
        finally:
            session.close()
        return "ok, ran"
    finally:
        free_model(model)


def fuzz(seconds: float = 15.0, count: int = 0, seed: int = 0, max_bytes: int = 64 << 20,
         timeout: float = 10.0, models: Optional[Path] = None, large: bool = False, real: bool = True,
         save: Optional[Path] = None, progress: Optional[Callable[[str], None]] = None,
         run: bool = False) -> dict:
    """Run the fuzz loop; returns ``{"inputs", "seconds", "per_second", "outcomes", "by_mutation", "findings",
    "peak_rss_mb", "seeds"}``."""
    rng = random.Random(seed)
    device = None
    if run:
        import nnhal

        device = nnhal.get_device("sample-all")
    corpus = seeds(models, large, real)
    mutators = [Mutator(n, d) for n, d in corpus.items()]
    outcomes: collections.Counter = collections.Counter()
    by_mutation: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    findings: list[dict] = []
    t0 = time.monotonic()
    n = 0

    # NOTE: a hang is measured in CPU time (ITIMER_PROF: a process starved on a loaded machine is not
    # hanging; 0.5 s of CPU took 12 s of wall time at a load average of 20), and, for a hang that
    # blocks without computing, in wall time ten times as long
    wall = max(60.0, 10 * timeout)

    def on_cpu(signum: int, frame: Any) -> None:
        raise _Hang(f"used more than {timeout} s of CPU")

    def on_wall(signum: int, frame: Any) -> None:
        raise _Hang(f"took more than {wall} s")

    old = signal.signal(signal.SIGPROF, on_cpu), signal.signal(signal.SIGALRM, on_wall)
    try:
        while (count and n < count) or (not count and time.monotonic() - t0 < seconds):
            mut = rng.choice(mutators)
            data, kind = mut.mutate(rng)
            n += 1
            if data is None:
                outcomes["skipped"] += 1
                by_mutation[kind]["skipped"] += 1
                continue
            t1, c1 = time.monotonic(), time.process_time()
            signal.setitimer(signal.ITIMER_PROF, timeout)
            signal.setitimer(signal.ITIMER_REAL, wall)
            try:
                result = _load(data, max_bytes, device)
            except _Hang as e:
                result = "hang"
                tb = e.what
            except BaseException as e:  # noqa: BLE001 - every other outcome is a finding
                if isinstance(e, KeyboardInterrupt):
                    raise
                result = f"crash:{type(e).__name__}"
                tb = traceback.format_exc()
            finally:
                signal.setitimer(signal.ITIMER_PROF, 0)
                signal.setitimer(signal.ITIMER_REAL, 0)
            outcomes[result] += 1
            by_mutation[kind][result] += 1
            if not result.startswith(("ok", "invalid", "unsupported")):
                f = {"seed": mut.name, "mutation": kind, "outcome": result, "seconds": time.monotonic() - t1,
                     "cpu_seconds": time.process_time() - c1,
                     "error": tb.strip().splitlines()[-1], "traceback": tb}
                findings.append(f)
                if save is not None:
                    save.mkdir(parents=True, exist_ok=True)
                    stem = save / f"finding_{len(findings):04d}_{mut.name}_{kind}"
                    stem.with_suffix(".tflite").write_bytes(data)
                    stem.with_suffix(".txt").write_text(tb)
                if progress:
                    progress(f"finding {len(findings)}: {mut.name} {kind}: {f['error']}")
    finally:
        signal.signal(signal.SIGPROF, old[0])
        signal.signal(signal.SIGALRM, old[1])
    elapsed = time.monotonic() - t0
    return {"inputs": n, "seconds": round(elapsed, 2), "per_second": round(n / elapsed, 1) if elapsed else 0.0,
            "outcomes": dict(outcomes), "by_mutation": {k: dict(v) for k, v in by_mutation.items()},
            "findings": [{k: v for k, v in f.items() if k != "traceback"} for f in findings],
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "seeds": {m.name: len(m.data) for m in mutators}}


def _size(text: str) -> int:
    t = text.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    return int(float(t[:-1] if t[-1:] in "KMG" else t) * mult)


def main(argv: Optional[list[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] != "tflite" and not args[0].startswith("-"):
        # NOTE: one command for every surface: the driver's (cache, wire, burst, hal, all) are fuzz_driver's
        from nnhal.tools import fuzz_driver

        return fuzz_driver.main(args)
    ap = argparse.ArgumentParser(prog="python -m nnhal.tools.fuzz", description=__doc__.split("\n\n")[0],
                                 epilog="The driver's surfaces: python -m nnhal.tools.fuzz {cache,wire,burst,hal,all} "
                                        "--minutes N (nnhal.tools.fuzz_driver).")
    ap.add_argument("target", choices=["tflite"], help="what to fuzz (the .tflite importer; cache, wire, burst, "
                                                       "hal: the driver's surfaces)")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--minutes", type=float, help="run this long")
    g.add_argument("--seconds", type=float, help="run this long (default 15)")
    g.add_argument("--count", type=int, help="run this many inputs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--models", type=Path, help="directory of the real seed models (default ../shared/models)")
    ap.add_argument("--large", action="store_true", help="also the 14-17 MB MobileNets as seeds")
    ap.add_argument("--no-real", action="store_true", help="only the written seed models")
    ap.add_argument("--max-bytes", type=_size, default=64 << 20, help="load(max_bytes=...) (default 64M)")
    ap.add_argument("--timeout", type=float, default=0.0,
                    help="CPU seconds one input may use (default 10; with --run 60: preparing a real model takes "
                         "seconds); ten times as long in wall time (at least 60 s)")
    ap.add_argument("--rlimit-mb", type=int, default=0,
                    help="cap this process's address space (MiB): an allocation beyond it is a finding")
    ap.add_argument("--save", type=Path, help="write each finding's input and traceback here")
    ap.add_argument("--run", action="store_true",
                    help="also prepare and execute every model that loads on sample-all, as nnhal run does (an "
                         "error status is an outcome; an exception out of it a finding)")
    ap.add_argument("--commands", default="",
                    help="run,bench,graph,ops (or all): each input also through these command families end to end, "
                         "each command in a process of its own, judged as the command line promises "
                         "(nnhal.tools.fuzz_commands); --minutes / --seconds / --count per family")
    ap.add_argument("--memory-mb", type=float, default=2048,
                    help="with --commands: a command's peak resident memory above this is a finding (default 2048)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args(argv)
    if args.commands:
        return _main_commands(args)
    import logging

    logging.disable(logging.CRITICAL)  # NOTE: with --run the driver logs every refusal; the counts say it
    try:
        if args.rlimit_mb:
            lim = args.rlimit_mb << 20
            resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
        seconds = args.minutes * 60 if args.minutes else (args.seconds or 15.0)
        res = fuzz(seconds=seconds, count=args.count or 0, seed=args.seed, max_bytes=args.max_bytes,
                   timeout=args.timeout or (60.0 if args.run else 10.0), models=args.models, large=args.large, real=not args.no_real, save=args.save,
                   progress=None if args.json else (lambda s: print(s, file=sys.stderr)), run=args.run)
        if args.json:
            print(json.dumps(res))
        else:
            print(f"{res['inputs']} mutated inputs in {res['seconds']} s: {res['per_second']} per second; "
                  f"peak RSS {res['peak_rss_mb']} MB")
            print("outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(res["outcomes"].items())))
            for kind, c in sorted(res["by_mutation"].items()):
                print(f"  {kind:9s} " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
            print(f"seeds: {len(res['seeds'])} ({', '.join(res['seeds'])})")
            print(f"findings: {len(res['findings'])}")
            for f in res["findings"][:20]:
                print(f"  {f['seed']} {f['mutation']}: {f['outcome']}: {f['error']}")
        return 1 if res["findings"] else 0
    finally:
        logging.disable(logging.NOTSET)  # NOTE: main() may run in a caller's process (tests)


def _main_commands(args: argparse.Namespace) -> int:
    """``--commands``: the families in turn, inputs and findings per family."""
    from nnhal.tools.fuzz_commands import FAMILIES, fuzz_commands

    families = list(FAMILIES) if args.commands.strip() == "all" else \
        [f.strip() for f in args.commands.split(",") if f.strip()]
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        print(f"--commands {args.commands}: unknown {', '.join(unknown)}; give {','.join(FAMILIES)} or all",
              file=sys.stderr)
        return 2
    seconds = args.minutes * 60 if args.minutes else (args.seconds or 15.0)
    res = fuzz_commands(families, seconds=seconds, count=args.count or 0, seed=args.seed, max_bytes=args.max_bytes,
                        timeout=args.timeout or 60.0, rlimit_mb=args.rlimit_mb or 4096, memory_mb=args.memory_mb,
                        models=args.models, large=args.large, real=not args.no_real, save=args.save,
                        progress=None if args.json else (lambda s: print(s, file=sys.stderr)))
    found = sum(len(f["findings"]) for f in res["families"].values())
    if args.json:
        print(json.dumps(res))
        return 1 if found else 0
    for fam, f in res["families"].items():
        print(f"{fam}: {f['inputs']} inputs, {f['commands']} commands in {f['seconds']} s; "
              + ", ".join(f"{k} {v}" for k, v in sorted(f["outcomes"].items())) + f"; findings {len(f['findings'])}")
        for kind in ("contained", "failed"):
            for reason, n in list(f[kind].items())[:5]:
                print(f"  {kind} x{n}: {reason}")
        for x in f["findings"][:10]:
            print(f"  {x['seed']} {x['mutation']}: {x['command']}: {x['verdict']}: {x['error']}")
    print(f"seeds: {len(res['seeds'])}; findings: {found}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
