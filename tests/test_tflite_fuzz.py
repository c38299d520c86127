"""The .tflite importer does not trust the file (issue 17 item 1): every malformed or hostile model
ends in the importer's defined errors (``InvalidModelError`` for a malformed file,
``UnsupportedModelError`` for operators with no HAL form), and ``nnhal run`` in one line and exit
status 2.  One test per class of failure the issue lists, then the fuzz test (a seeded, time-bounded
run of ``python -m nnhal.tools.fuzz tflite`` in a memory-capped subprocess); the long run is
``python -m pytest -m fuzz tests/test_tflite_fuzz.py`` (``$NNHAL_FUZZ_MINUTES``, default 10)."""

from __future__ import annotations

import json
import os
import re
import resource
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert", reason="ai-edge-litert is not installed (pip install 'nnhal[litert]')")
pytest.importorskip("flatbuffers", reason="flatbuffers is not installed")

from nnhal import cli  # noqa: E402
from nnhal.tflite import InvalidModelError, ModelError, UnsupportedModelError, load, verify  # noqa: E402
from nnhal.tflite.schema import read_model, write_model  # noqa: E402
from nnhal.tflite.writer import Tensor, graph, one_op, options, subgraphs  # noqa: E402

MODELS = Path(os.environ.get("NNHAL_MODELS") or Path(__file__).resolve().parents[1] / ".." / "shared" / "models")
CLASS_NAME = re.compile(r"\b[A-Z][A-Za-z]*(Error|Exception)\b|Traceback")


def model_path(name: str) -> Path:
    p = MODELS / f"{name}.tflite"
    if not p.exists():
        pytest.skip(f"{p} is missing (set NNHAL_MODELS)")
    return p


def add_model() -> bytes:
    return one_op("ADD", [Tensor([2, 3]), Tensor([2, 3])], [Tensor([2, 3])], options("AddOptions"))


def edit(data: bytes, fn) -> bytes:
    """The model written again after ``fn`` changed its object form."""
    m = read_model(data)
    fn(m)
    return write_model(m)


def poke(data: bytes, pos: int, fmt: str, value: int) -> bytes:
    b = bytearray(data)
    struct.pack_into(fmt, b, pos, value)
    return bytes(b)


def refused(data: bytes, match: str, **kw) -> UnsupportedModelError:
    with pytest.raises(UnsupportedModelError, match=match) as e:
        load(data, **kw)
    return e.value


def invalid(data: bytes, match: str, **kw) -> InvalidModelError:
    with pytest.raises(InvalidModelError, match=match) as e:
        load(data, **kw)
    return e.value


def c(values, dtype="int32") -> Tensor:
    a = np.asarray(values, dtype)
    return Tensor(list(a.shape), dtype, data=a)


# --------------------------------------------------------------------------- 1. parser errors


def test_truncated_file_is_named_with_its_size():
    data = model_path("vww_mobilenetv1_int8").read_bytes()
    e = invalid(data[:100000], r"^file truncated: 100000 of at least \d+ bytes")
    assert int(re.search(r"at least (\d+)", str(e)).group(1)) > 100000
    for cut in (len(add_model()) // 2, 40, 12, 7, 0):
        with pytest.raises(InvalidModelError, match="truncated|TFL3"):
            load(add_model()[:cut])


def test_offsets_past_the_end_or_negative():
    data = add_model()
    lay = verify.layout(data)
    # an offset to a vector past the end (struct.error "unpack_from requires a buffer of at least ..." before)
    pos = next(p for k, p, _ in lay if k == "uoffset" and p > 8)
    invalid(poke(data, pos, "<I", 1 << 20), "truncated|past the end")
    # the root table's vtable before the start of the file (TypeError "bad number -N for type uint32" before)
    root = struct.unpack_from("<I", data, 0)[0]
    invalid(poke(data, root, "<i", 1 << 24), "vtable at byte -\\d+ is outside")
    # a vector length reaching past the end
    pos = next(p for k, p, _ in lay if k == "veclen")
    invalid(poke(data, pos, "<I", 1 << 30), "truncated: .* vector of 1073741824 elements")


def test_shared_objects_cannot_amplify():
    # every tensor of a 2-tensor vector pointing at the same Tensor table is fine (small); a vector whose
    # 1000 elements all point at one table holding a large shape would be unpacked 1000 times
    m = read_model(one_op("ADD", [Tensor([2, 3]), Tensor([2, 3])], [Tensor([2] * 3000)], options("AddOptions")))
    data = write_model(m)
    lay = verify.layout(data)
    # the subgraph's tensors vector: make every entry point at the output tensor (the one with the long shape)
    sg_tensors = [p for k, p, _ in lay if k == "veclen"]
    b = bytearray(data)
    for vec in sg_tensors:
        n = struct.unpack_from("<I", b, vec)[0]
        elems = [vec + 4 + 4 * i for i in range(n)]
        targets = [e + struct.unpack_from("<I", b, e)[0] for e in elems] if n == 3 else []
        if targets and all(t < len(b) and t > vec for t in targets):
            big = targets[2]
            for e in elems[:2]:
                struct.pack_into("<I", b, e, big - e)
            break
    # NOTE: 3 references to one 12 KB shape in a file of about 12 KB: more payload than the file holds
    invalid(bytes(b), "shared")
    # many small tables, each unpacked into a Python object: bounded by max_bytes too
    many = graph([Tensor([1]) for _ in range(200)], [("ABS", [k], [k + 1], None) for k in range(199)], [0], [199])
    assert load(many)[1].operators["ABS"] == 199
    invalid(many, "tables and vectors would take about", max_bytes=200 * verify.OBJECT_BYTES)


# --------------------------------------------------------------------------- 2. operator arity


def test_operator_inputs_or_outputs_absent_or_short():
    conv = options("Conv2DOptions", padding=1, strideW=1, strideH=1)
    # too short (IndexError in the mapping functions before)
    refused(one_op("CONV_2D", [Tensor([1, 4, 4, 2])], [Tensor([1, 4, 4, 3])], conv),
            "CONV_2D needs 2 inputs, the operator has 1")
    # absent (TypeError 'NoneType' object is not subscriptable before)
    data = edit(add_model(), lambda m: setattr(m.subgraphs[0].operators[0], "inputs", None))
    refused(data, "ADD needs 2 inputs, the operator has 0")
    # NOTE: its output then written by nothing: a malformed file (nnhal.tflite.graphcheck), not a refusal
    data = edit(add_model(), lambda m: setattr(m.subgraphs[0].operators[0], "outputs", None))
    invalid(data, r"subgraph 0 output tensor 2 \(\w+\) is written by no operator")
    # an input a check_* reads that the mapping's HAL inputs do not (BATCH_TO_SPACE_ND's crops)
    refused(one_op("BATCH_TO_SPACE_ND", [Tensor([4, 2, 2, 1]), c([2, 2])], [Tensor([1, 4, 4, 1])],
                   options("BatchToSpaceNDOptions")), "needs 3 inputs")
    # an omitted (-1) input where one is required
    refused(one_op("RANGE", [c(0), None, c(1)], [Tensor([1], "int32")]), "omitted")


# --------------------------------------------------------------------------- 3. builtin options


def test_options_absent_or_of_another_type():
    # absent: ARG_MAX's output type (AttributeError before)
    refused(one_op("ARG_MAX", [Tensor([2, 3]), c([1])], [Tensor([2], "int32")]), "missing option outputType")
    # of another operator's type: PACK with AddOptions (AttributeError 'AddOptionsT' ... 'axis' before)
    refused(one_op("PACK", [Tensor([2]), Tensor([2])], [Tensor([2, 2])], options("AddOptions")),
            "options of type AddOptions, not PackOptions")
    # IF without its options
    ts = [Tensor([], "bool"), Tensor([2]), Tensor([2])]
    sub = ([Tensor([2]), Tensor([2])], [("ABS", [0], [1], None)], [0], [1])
    refused(subgraphs([(ts, [("IF", [0, 1], [2], None)], [0, 1], [2]), sub]), "missing option thenSubgraphIndex")
    # absent where TFLite's default applies: PACK along axis 0
    model, io = load(one_op("PACK", [Tensor([2]), Tensor([2])], [Tensor([2, 2])]))
    assert io.rewrites["pack"] == 1


def test_custom_options_read_lazily_and_typed():
    from flatbuffers import flexbuffers

    def ssd(opts: bytes) -> bytes:
        return one_op("TFLite_Detection_PostProcess", [Tensor([1, 6, 4]), Tensor([1, 6, 3]),
                                                       Tensor([6, 4], data=np.ones((6, 4), np.float32))],
                      [Tensor([1, 3, 4]), Tensor([1, 3]), Tensor([1, 3]), Tensor([1])], custom_options=opts)

    good = {"num_classes": 2, "max_detections": 3, "y_scale": 10.0, "x_scale": 10.0, "h_scale": 5.0, "w_scale": 5.0}
    assert load(ssd(flexbuffers.Dumps(good)))[1].hal_operations["DETECTION_POSTPROCESSING"] == 1
    # NOTE: LiteRT's kernel parses them unchecked (a crash): a malformed file for every command
    invalid(ssd(flexbuffers.Dumps([1, 2, 3])), "custom options are not a map")
    invalid(ssd(flexbuffers.Dumps({**good, "num_classes": "two"})), "custom option num_classes is not a int")
    invalid(ssd(flexbuffers.Dumps({**good, "max_detections": 2**40})), "custom option max_detections is 1099511627776")
    invalid(ssd(b"\x07\xff\xff\xff"), "custom options")
    # an entry the operator does not read is never expanded (flexbuffers.Loads would build all of it)
    assert load(ssd(flexbuffers.Dumps({**good, "extra": list(range(1000))})))[1].operators


# --------------------------------------------------------------------------- 4. index fields


def test_index_fields_out_of_range():
    invalid(edit(add_model(), lambda m: setattr(m.subgraphs[0].operators[0], "opcodeIndex", 5)),
            "opcode index 5; the model has 1 operator codes")
    invalid(edit(add_model(), lambda m: setattr(m.subgraphs[0].operators[0], "inputs", np.int32([0, 99]))),
            "input 99 is not one of the 3 tensors")
    invalid(edit(add_model(), lambda m: setattr(m.subgraphs[0].tensors[0], "buffer", 99)), "uses buffer 99")
    invalid(edit(add_model(), lambda m: setattr(m.subgraphs[0], "outputs", np.int32([7]))),
            "subgraph 0 output 7 is not one of its 3 tensors")
    # IF / WHILE subgraph indexes (indexed before the range check before)
    ts = [Tensor([], "bool"), Tensor([2]), Tensor([2])]
    sub = ([Tensor([2]), Tensor([2])], [("ABS", [0], [1], None)], [0], [1])
    data = subgraphs([(ts, [("IF", [0, 1], [2], options("IfOptions", thenSubgraphIndex=1, elseSubgraphIndex=7))],
                       [0, 1], [2]), sub])
    invalid(data, "refers to subgraph 7; the model has 2")
    # PACK / UNPACK axis
    refused(one_op("PACK", [Tensor([2]), Tensor([2])], [Tensor([2, 2])], options("PackOptions", axis=5)),
            "PACK axis 5")
    refused(one_op("UNPACK", [Tensor([2, 3])], [Tensor([3]), Tensor([3])], options("UnpackOptions", num=2, axis=-4)),
            "UNPACK axis")
    # a zero-point array shorter than the scale array
    w = Tensor([3, 1, 1, 2], "int8", data=np.ones((3, 1, 1, 2), np.int8), scale=[0.1, 0.2, 0.3], zero_point=[0, 0])
    invalid(one_op("CONV_2D", [Tensor([1, 4, 4, 2], "int8", scale=0.1), w, None], [Tensor([1, 4, 4, 3], "int8",
                                                                                          scale=0.1)],
                   options("Conv2DOptions", padding=1, strideW=1, strideH=1)), "3 scales and 2 zero points")
    # per-channel scales on an axis the shape does not have
    w = Tensor([3, 1, 1, 2], "int8", data=np.ones((3, 1, 1, 2), np.int8), scale=[0.1, 0.2, 0.3], zero_point=[0] * 3,
               axis=6)
    invalid(one_op("CONV_2D", [Tensor([1, 4, 4, 2], "int8", scale=0.1), w, None],
                   [Tensor([1, 4, 4, 3], "int8", scale=0.1)], options("Conv2DOptions", padding=1)), "on axis 6")
    # constant data that does not match its shape
    invalid(one_op("ADD", [Tensor([2, 3]), Tensor([2, 3], data=np.ones(5, np.float32))], [Tensor([2, 3])],
                   options("AddOptions")), "needs 24 bytes of data; buffer 1 holds 20")


# --------------------------------------------------------------------------- 5. KeyError: types, outputs


def test_unknown_tensor_type_and_unproduced_output():
    invalid(edit(add_model(), lambda m: setattr(m.subgraphs[0].tensors[1], "type", 60)),
            "tensor 1 has type 60, not a TFLite tensor type")
    # a TFLite type with no HAL form where the loader used to look it up directly (SHAPE's output, float64)
    refused(one_op("SHAPE", [Tensor([2, 3])], [Tensor([2], "int32")], options("ShapeOptions")), "constant")
    data = edit(graph([Tensor([2, 3]), Tensor([2], "int32"), Tensor([2], "int32"), Tensor([2], "int32")],
                      [("SHAPE", [0], [1], None), ("ADD", [1, 2], [3], options("AddOptions"))], [0, 2], [3]),
                lambda m: setattr(m.subgraphs[0].tensors[1], "type", 10))
    refused(data, "TFLite type 10 with no HAL operand type")
    # a subgraph output the mapping does not produce (the RNN's second TFLite output; KeyError before)
    w = [Tensor(s, data=np.ones(s, np.float32)) for s in ([4, 3], [4, 4], [4])]
    data = one_op("RNN", [Tensor([2, 3])] + w + [Tensor([2, 4], variable=True)], [Tensor([2, 4]), Tensor([2, 4])],
                  options("RNNOptions", fusedActivationFunction=1))
    e = refused(data, "written by no mapped operator")
    assert e.failures[0][1] == "OUTPUT"


# --------------------------------------------------------------------------- 6. memory bombs


def _bombs() -> dict[str, bytes]:
    big = 1 << 30
    return {
        # 504 bytes: RANGE from 0 to 2^31-1 (nnhal run grew to 24 GB before)
        "range": graph([c(0), c(2**31 - 1), c(1), Tensor([1], "int32")], [("RANGE", [0, 1, 2], [3], None)], [], [3]),
        # ZEROS_LIKE of a 16 GiB tensor
        "zeros_like": graph([Tensor([65536, 65536]), Tensor([65536, 65536])], [("ZEROS_LIKE", [0], [1], None)], [0], [1]),
        # REVERSE_V2 / MIRROR_PAD of a 1 GiB input: 8 GiB of int64 indices, 24+ GiB of Python lists
        "reverse": graph([Tensor([big], "uint8"), c([0]), Tensor([big], "uint8")],
                         [("REVERSE_V2", [0, 1], [2], None)], [0], [2]),
        "mirror_pad": graph([Tensor([big], "uint8"), c([[1, 1]]), Tensor([big + 2], "uint8")],
                            [("MIRROR_PAD", [0, 1], [2], options("MirrorPadOptions", mode=0))], [0], [2]),
    }


def _run_capped(args: list[str], limit_mb: int, env: dict, timeout: float = 120) -> tuple[int, str, str]:
    """A Python subprocess with its address space capped at ``limit_mb``."""
    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit_mb << 20, limit_mb << 20))

    p = subprocess.run([sys.executable] + args, capture_output=True, text=True, preexec_fn=cap,
                       env={**os.environ, **env}, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def test_memory_bombs_are_refused_before_allocating(tmp_path):
    paths = []
    for name, data in _bombs().items():
        assert len(data) < 1024
        p = tmp_path / f"{name}.tflite"
        p.write_bytes(data)
        paths.append(p)
    # NOTE: each through `nnhal run` in a process capped at 2 GiB of address space: a MemoryError (exit 1)
    # there is what the kernel's OOM killer was before; the defined error is exit 2 and one line
    script = ("import resource, sys\nfrom nnhal import cli\nfor p in sys.argv[1:]:\n"
              "    try:\n        rc = cli.main(['run', p])\n    except SystemExit as e:\n        rc = e.code\n"
              "    print(p, rc, flush=True)\n"
              # NOTE: VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec, from the forked pytest process
              "hwm = [ln for ln in open('/proc/self/status') if ln.startswith('VmHWM')][0]\n"
              "print('peak', int(hwm.split()[1]) // 1024)\n")
    rc, out, err = _run_capped(["-c", script] + [str(p) for p in paths], 2048, {"NNHAL_TFLITE_MAX_BYTES": str(3 << 30)})
    assert rc == 0, err
    lines = out.strip().splitlines()
    assert [ln.split()[-1] for ln in lines[:-1]] == ["2"] * len(paths), (out, err)
    assert int(lines[-1].split()[-1]) < 500, out  # peak RSS (MB): nothing large was allocated
    msgs = err.strip().splitlines()
    assert len(msgs) == len(paths) and not any(CLASS_NAME.search(m) for m in msgs), err
    assert "RANGE" in msgs[0] and "above the limit" in msgs[0]
    assert "tensor 0 of shape [65536, 65536] is 17179869184 bytes, above the limit" in msgs[1]


def test_max_bytes_is_configurable():
    # NOTE: the sequence's length comes from the constants, whatever shape the file declares for it
    data = graph([c(0), c(100000), c(1), Tensor([1], "int32"), Tensor([1], "int32"), Tensor([1], "int32")],
                 [("RANGE", [0, 1, 2], [3], None), ("ADD", [3, 4], [5], options("AddOptions"))], [4], [5])
    invalid(data, "RANGE: the constants made at load need 800000 bytes, above the limit of 400000", max_bytes=400000)
    assert load(data, max_bytes=800000)[1].rewrites["range"] == 1


# --------------------------------------------------------------------------- 7. nesting without recursion


def _nested_ifs(depth: int) -> bytes:
    """Main IF -> subgraph 1 IF -> ... -> subgraph ``depth`` (an ABS); each level's condition a constant."""
    graphs = []
    for level in range(depth):
        cond = Tensor([], "bool", data=np.bool_(True))
        ts = [Tensor([2]), cond, Tensor([2])]
        opts = options("IfOptions", thenSubgraphIndex=level + 1, elseSubgraphIndex=level + 1)
        graphs.append((ts, [("IF", [1, 0], [2], opts)], [0], [2]))
    graphs.append(([Tensor([2]), Tensor([2])], [("ABS", [0], [1], None)], [0], [1]))
    return subgraphs(graphs)


def test_deeply_nested_subgraphs_map_without_recursion():
    data = _nested_ifs(200)
    assert len(data) < 64_000
    model, io = load(data)
    assert len(model.referenced) == 200 and io.hal_operations["IF"] == 200
    # callees first: the innermost subgraph is referenced[0]; the main IF refers to the last one
    assert model.main.operands[model.main.operations[0].inputs[1]].location.offset == 199
    model, io = load(_nested_ifs(2000))
    assert len(model.referenced) == 2000


def test_cyclic_subgraph_references():
    data = edit(_nested_ifs(3), lambda m: setattr(m.subgraphs[2].operators[0].builtinOptions, "thenSubgraphIndex", 1))
    invalid(data, r"call each other in a cycle: 1 -> 2 -> 1")
    ts = [Tensor([], "bool"), Tensor([2]), Tensor([2])]
    data = subgraphs([(ts, [("IF", [0, 1], [2], options("IfOptions", thenSubgraphIndex=0, elseSubgraphIndex=0))],
                       [0, 1], [2])])
    invalid(data, r"cycle: 0 -> 0")


# --------------------------------------------------------------------------- 8. the command line


def _npy_bomb(tmp_path: Path) -> Path:
    """A 144-byte .npy whose header asks for a 1 TiB array (np.load would allocate it first)."""
    import io

    from numpy.lib import format as npy

    buf = io.BytesIO()
    npy.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": (2**38,)})
    p = tmp_path / "bomb.npy"
    p.write_bytes(buf.getvalue() + bytes(16))
    return p


def test_cli_one_line_and_exit_2(tmp_path, capsys):
    data = model_path("vww_mobilenetv1_int8").read_bytes()
    bad = tmp_path / "cut.tflite"
    bad.write_bytes(data[:100000])
    cases = [
        (["run", str(bad)], r"cut.tflite: not a valid TFLite model: file truncated: 100000 of at least \d+ bytes"),
        (["run", str(tmp_path / "missing.tflite")], "missing.tflite: cannot read the model: No such file"),
        (["graph", str(bad), "-o", str(tmp_path / "g.svg")], "file truncated"),
        (["bench", str(bad)], "file truncated"),
    ]
    good = tmp_path / "add.tflite"
    good.write_bytes(add_model())
    (tmp_path / "text.npy").write_text("not an array\n")
    np.savez(tmp_path / "arch.npz", a=np.zeros(3))
    cases += [
        (["run", str(good), "--input", str(tmp_path / "text.npy"), "--input", str(tmp_path / "text.npy")],
         "text.npy: not a .npy file"),
        (["run", str(good), "--input", str(tmp_path / "nope.npy")], "nope.npy: no such file"),
        (["run", str(good), "--input", str(tmp_path / "arch.npz")], "a .npz archive"),
        (["run", str(good), "--input", str(tmp_path)], "is a folder"),
        (["run", str(good), "--batch", "-2"], "--batch -2: give 1 or more"),
        (["run", str(good), "--input", str(_npy_bomb(tmp_path))], "truncated: its header says 1099511627776 bytes"),
    ]
    for argv, pattern in cases:
        try:
            rc = cli.main(argv)
        except SystemExit as e:
            rc = e.code
        err = capsys.readouterr().err.strip()
        assert rc == 2, (argv, err)
        assert len(err.splitlines()) == 1 and re.search(pattern, err), (argv, err)
        assert not CLASS_NAME.search(err), err


def test_defined_errors_are_value_errors():
    assert issubclass(InvalidModelError, ModelError) and issubclass(UnsupportedModelError, ModelError)
    assert issubclass(ModelError, ValueError)


def test_schema_shape_read_from_the_generated_module():
    from nnhal.tflite import table
    from nnhal.tflite.schema import schema

    sc = verify.schema_shape()
    op = {f.name: f for f in sc.tables["Operator"]}
    assert (op["Inputs"].kind, op["Inputs"].size, op["Inputs"].slot) == ("vector", 4, 6)
    assert op["BuiltinOptions"].kind == "union" and op["BuiltinOptions"].union == "BuiltinOptions"
    assert op["BuiltinOptionsType"].kind == "scalar" and op["BuiltinOptionsType"].size == 1
    model = {f.name: f for f in sc.tables["Model"]}
    assert model["Subgraphs"].kind == "tables" and model["Subgraphs"].table == "SubGraph"
    assert model["Description"].kind == "string"
    assert sc.unions["BuiltinOptions"][schema().BuiltinOptions.Conv2DOptions] == "Conv2DOptions"
    assert sc.unions["QuantizationDetails"][1] == "CustomQuantization"
    # every options table the importer expects is a member of the union
    members = set(sc.unions["BuiltinOptions"].values())
    assert set(table.READ_OPTIONS.values()) <= members
    # every mapping's arity is defined and at least what its Args read
    for mp in table.MAPPINGS:
        n_in, lo, hi = table.arity(mp)
        assert n_in >= 0 and lo >= 1 and (hi is None or hi >= lo), mp.builtin


def test_real_models_verify_as_trees():
    for name in ("kws_mobilenetv2_int8", "vww_mobilenetv1_int8", "palm_detection_lite"):
        data = model_path(name).read_bytes()
        checked = verify.verify(data)
        assert checked.order == [] and len(checked.model.subgraphs) == 1
        lay = verify.layout(data)
        assert {k for k, _, _ in lay} == {"uoffset", "veclen", "soffset", "vtentry", "scalar"}


def _same_objects(a, b, path: str = "model") -> None:
    """``a`` and ``b`` the same object-API tree: same classes, attributes, values and value types (numpy
    vectors of the same dtype and bytes, read-only alike)."""
    assert type(a) is type(b), f"{path}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, np.ndarray):
        assert (a.dtype, a.shape, a.tobytes(), a.flags.writeable) == (b.dtype, b.shape, b.tobytes(), b.flags.writeable), path
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _same_objects(x, y, f"{path}[{i}]")
    elif hasattr(a, "__dict__"):
        assert list(vars(a)) == list(vars(b)), path
        for k in vars(a):
            _same_objects(vars(a)[k], vars(b)[k], f"{path}.{k}")
    else:
        assert a == b or (a != a and b != b), f"{path}: {a!r} vs {b!r}"


def _every_kind_of_field() -> bytes:
    """A model with strings, vectors of strings and tables, nested tables, unions of several members (an
    unknown one too), custom options, sparsity, quantization details, signatures, metadata."""
    from nnhal.tflite.schema import schema

    s = schema()
    m = read_model(one_op("CONV_2D", [Tensor([1, 4, 4, 2]), c(np.ones((3, 1, 1, 2)), "float32"), c([0, 0, 0], "float32")],
                          [Tensor([1, 4, 4, 3])], options("Conv2DOptions", strideW=1, strideH=1, dilationWFactor=2)))
    m.description = "every kind of field"
    sg = m.subgraphs[0]
    t = sg.tensors[0]
    t.shapeSignature = np.asarray([-1, 4, 4, 2], np.int32)
    t.quantization = q = s.QuantizationParametersT()
    q.scale, q.zeroPoint, q.min = np.asarray([0.5], np.float32), np.asarray([3], np.int64), np.asarray([-1.0], np.float32)
    q.detailsType, q.details = s.QuantizationDetails.CustomQuantization, s.CustomQuantizationT()
    q.details.custom = np.asarray([1, 2, 3], np.uint8)
    t.isVariable, t.hasRank = True, True
    sp = sg.tensors[1].sparsity = s.SparsityParametersT()
    sp.traversalOrder = np.asarray([0, 1, 2, 3], np.int32)
    md = s.DimensionMetadataT()
    md.format, md.denseSize = 1, 3
    md.arraySegmentsType, md.arraySegments = s.SparseIndexVector.Uint16Vector, s.Uint16VectorT()
    md.arraySegments.values = np.asarray([0, 3], np.uint16)
    sp.dimMetadata = [md, s.DimensionMetadataT()]
    op = sg.operators[0]
    op.customOptions = np.asarray([9, 8, 7], np.uint8)
    op.intermediates = np.asarray([], np.int32)
    sig = s.SignatureDefT()
    sig.signatureKey = "serving_default"
    tm = s.TensorMapT()
    tm.name, tm.tensorIndex = "x", 0
    sig.inputs, sig.outputs = [tm], []
    m.signatureDefs = [sig]
    meta = s.MetadataT()
    meta.name, meta.buffer = "min_runtime_version", 0
    m.metadata = [meta]
    sg.name = "main"
    # NOTE: a union type no member of the installed schema has: the object API leaves the member out
    op.builtinOptionsType = 250
    return write_model(m)


def test_unpack_is_the_object_api_field_for_field():
    """verify.unpack (the reader behind verify) makes what the object API's InitFromPackedBuf makes."""
    datas = [_every_kind_of_field(), add_model(),
             subgraphs([([Tensor([1]), Tensor([1]), Tensor([1])],
                         [("WHILE", [0], [1], options("WhileOptions", condSubgraphIndex=1, bodySubgraphIndex=2))],
                         [0], [1]),
                        ([Tensor([1]), Tensor([1], "bool")], [("LESS", [0, 0], [1], None)], [0], [1]),
                        ([Tensor([1]), Tensor([1])], [("ADD", [0, 0], [1], options("AddOptions"))], [0], [1])])]
    for name in ("kws_mobilenetv2_int8", "palm_detection_lite"):
        if (MODELS / f"{name}.tflite").exists():
            datas.append((MODELS / f"{name}.tflite").read_bytes())
    for data in datas:
        verify.layout(data)  # NOTE: unpack reads only what the walk accepted
        _same_objects(read_model(data), verify.unpack(data))
        _same_objects(read_model(bytearray(data)), verify.unpack(bytearray(data)))


def test_pack_writes_what_the_builder_writes():
    """verify.pack (the litert-cpu lowering's writer) writes the tree the flatbuffers Builder writes: read
    back, the same objects; the walk accepts it; LiteRT runs it to the same bits."""
    from nnhal.tflite.schema import make_interpreter

    datas = [_every_kind_of_field(), add_model()]
    for name in ("kws_mobilenetv2_int8", "palm_detection_lite"):
        if (MODELS / f"{name}.tflite").exists():
            datas.append((MODELS / f"{name}.tflite").read_bytes())
    for data in datas:
        m = verify.unpack(data)
        packed = verify.pack(m)
        verify.layout(packed)
        _same_objects(verify.unpack(write_model(m)), verify.unpack(packed))
        assert verify.pack(verify.unpack(packed)) == packed
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    outs = []
    for data in (write_model(read_model(add_model())), verify.pack(read_model(add_model()))):
        it = make_interpreter(model_content=data)
        for d in it.get_input_details():
            it.set_tensor(d["index"], x)
        it.invoke()
        outs.append(it.get_tensor(it.get_output_details()[0]["index"]))
    assert outs[0].tobytes() == outs[1].tobytes() == (2 * x).tobytes()


# --------------------------------------------------------------------------- the fuzz


def _fuzz(args: list[str], limit_mb: int, timeout: float) -> dict:
    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit_mb << 20, limit_mb << 20))

    p = subprocess.Popen([sys.executable, "-m", "nnhal.tools.fuzz", "tflite", "--json"] + args,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=cap)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        pytest.fail(f"the fuzz did not finish in {timeout} s (a hang)")
    res = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    assert res, err
    return res


def _check(res: dict, saved: Path) -> None:
    assert not res["findings"], f"inputs and tracebacks in {saved}: " + json.dumps(res["findings"][:10], indent=1)
    if res["inputs"] >= 200:  # NOTE: the mutations reach every outcome (a few dozen inputs on a loaded machine may not)
        assert all(res["outcomes"].get(k) for k in ("invalid", "unsupported", "ok")), res["outcomes"]
    assert res["peak_rss_mb"] < 1024, res["peak_rss_mb"]


def test_fuzz_only_defined_errors(tmp_path):
    seconds = float(os.environ.get("NNHAL_FUZZ_SECONDS", "12"))
    res = _fuzz(["--seconds", str(seconds), "--seed", os.environ.get("NNHAL_FUZZ_SEED", "17"), "--save", str(tmp_path)],
                3072, seconds + 120)
    _check(res, tmp_path)
    # NOTE: about 70 a second on an idle core, 10 at a load average of 20 on two cores
    assert res["inputs"] >= 20, res


LONG_MINUTES = float(os.environ.get("NNHAL_FUZZ_MINUTES", "10"))


@pytest.mark.fuzz
@pytest.mark.timeout(int(LONG_MINUTES * 60) + 600)
def test_fuzz_long(tmp_path):
    minutes = LONG_MINUTES
    res = _fuzz(["--minutes", str(minutes), "--large", "--seed", os.environ.get("NNHAL_FUZZ_SEED", "1"),
                 "--save", str(tmp_path)], 6144, minutes * 60 + 300)
    _check(res, tmp_path)
    print(json.dumps({k: res[k] for k in ("inputs", "seconds", "per_second", "outcomes", "peak_rss_mb")}))


@pytest.mark.parametrize("shape", [[1970302569, 959537012, 0, 2, 2, 4, 1048592, 12], [2, 1 << 30]])
def test_a_variable_tensor_numpy_cannot_make_is_an_invalid_model(shape):
    """A fuzz finding (seed lstm, a field mutation): an LSTM state whose shape has a 0 among dimensions that
    multiply past numpy's largest size made np.zeros raise ValueError out of load; such a state (and one
    above max_bytes) is an InvalidModelError, before anything is allocated."""
    from nnhal.tools.fuzz import written_seeds

    m = read_model(written_seeds()["lstm"])
    state = next(t for t in m.subgraphs[0].tensors if t.isVariable)
    state.shape = np.asarray(shape, np.int32)
    with pytest.raises(InvalidModelError):
        load(write_model(m))
