"""The importer on every model in ../shared/models (tolerance checks against
LiteRT, per tensor), dynamic batch, folded SHAPE / ZEROS_LIKE, the mapping
table, and the ``nnhal run / graph / bench MODEL / demo`` commands."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert", reason="ai-edge-litert is not installed (pip install 'nnhal[litert]')")
pytest.importorskip("flatbuffers", reason="flatbuffers is not installed")

import nnhal  # noqa: E402
from nnhal import hal  # noqa: E402
from nnhal.cli import app as cli  # noqa: E402
from nnhal.conformance.vectors import default_vectors  # noqa: E402
from nnhal.delegate.run import HalSession, LiteRT, diff, make_inputs  # noqa: E402
from nnhal.tflite import load, table  # noqa: E402
from nnhal.tflite.writer import Tensor, graph, one_op, options  # noqa: E402

MODELS = Path(os.environ.get("NNHAL_MODELS") or Path(__file__).resolve().parents[1] / ".." / "shared" / "models")
TRAINED = ["palm_detection_lite", "kws_mobilenetv2_int8", "vww_mobilenetv1_int8"]
ALL = TRAINED + ["mobilenet_v1_f32", "mobilenet_v2_f32"]


def model_path(name: str) -> Path:
    p = MODELS / f"{name}.tflite"
    if not p.exists():
        pytest.skip(f"{p} is missing (set NNHAL_MODELS)")
    return p


@pytest.fixture(scope="module")
def device():
    return nnhal.get_device("sample-all")


def _vww_input() -> np.ndarray:
    rng = np.random.default_rng(2)
    return np.kron(rng.uniform(0, 255, (1, 6, 6, 3)), np.ones((1, 16, 16, 1))).astype(np.float32)


@pytest.mark.parametrize("name", ALL)
def test_every_model_converts(name):
    model, io = load(model_path(name))
    assert io.hal_operations and sum(io.operators.values()) == len(io.operator_names)
    if name == "palm_detection_lite":
        assert io.operators["DEQUANTIZE"] == 113 and io.rewrites["fold_dequantize"] == 113
        assert "DEQUANTIZE" not in io.hal_operations  # every float16 weight folded at load
    if name == "kws_mobilenetv2_int8":
        assert io.inputs[0].shape == [-1, 59, 49, 1] and model.main.operands[model.main.inputIndexes[0]].dimensions[0] == 1
        assert io.rewrites["mean"] == 1  # MEAN with a requantizing output
        pc = [o for o in model.main.operands if o.type == hal.OperandType.TENSOR_QUANT8_SYMM_PER_CHANNEL]
        assert len(pc) == 52  # one per conv / depthwise filter


@pytest.mark.parametrize("name", ALL)
def test_models_match_litert_per_tensor(device, name):
    """Float tensors within 1e-4 of their range of LiteRT's builtin kernels; int8 tensors within
    1 step of TFLite's reference kernels, at every intermediate tensor."""
    path = model_path(name)
    model, io = load(path, expose_intermediates=True)
    x = [_vww_input()] if name.startswith("vww") else make_inputs(io)
    s = HalSession(device, model, io)
    ours = s.run(x)
    s.close()
    quant = name.endswith("int8")
    lr = LiteRT(path, kernels="ref" if quant else "builtin", preserve=True)
    lr.run(x)
    assert len(ours) == len(io.all_outputs) > len(io.outputs)
    bad = [str(df) for a, d in zip(ours, io.all_outputs) if not (df := diff(a, lr.tensor(d.tensor), d)).ok(1e-4, 1)]
    assert not bad, bad[:3]
    if quant:
        # NOTE: LiteRT's optimized builtin kernels round some int8 requantizations differently; the
        # outputs still agree closely on these inputs
        ref = LiteRT(path, kernels="builtin").run(x)
        for a, r, d in zip(ours, ref, io.outputs):
            assert diff(a, r, d).ok(1e-4, 2), diff(a, r, d)


def test_unknown_batch_kept(device):
    path = model_path("kws_mobilenetv2_int8")
    model, io = load(path, batch=None)
    assert model.main.operands[model.main.inputIndexes[0]].dimensions == [0, 59, 49, 1]
    x = [np.random.default_rng(4).integers(-128, 128, (3, 59, 49, 1)).astype(np.int8)]
    s = HalSession(device, model, io)
    ours = s.run(x)
    s.close()
    ref = LiteRT(path, kernels="ref").run(x)
    assert ours[0].shape == (3, 8) and np.abs(ours[0].astype(int) - ref[0].astype(int)).max() <= 1


def test_session_reuses_its_layout_and_changes_it_with_the_batch(device):
    """The same layout's runs (the common case) and a batch that changes the layout both give what a
    fresh session gives, and a run's outputs are its own (not the pool the next run overwrites)."""
    path = model_path("kws_mobilenetv2_int8")
    model, io = load(path, batch=None)
    rng = np.random.default_rng(5)
    xs = [rng.integers(-128, 128, (n, 59, 49, 1)).astype(np.int8) for n in (2, 2, 2, 3, 2)]
    s = HalSession(device, model, io)
    ours = [s.run([x]) for x in xs]
    s.close()
    for x, got in zip(xs, ours):
        fresh = HalSession(device, model, io)
        want = fresh.run([x])
        fresh.close()
        assert got[0].shape == (x.shape[0], 8)
        np.testing.assert_array_equal(got[0], want[0])


def test_shape_and_zeros_like_fold(device):
    ts = [Tensor([2, 3]), Tensor([6]), Tensor([2], "int32"), Tensor([2, 3]), Tensor([2, 3]), Tensor([2, 3])]
    data = graph(ts, [("SHAPE", [0], [2], options("ShapeOptions", outType=2)),
                      ("RESHAPE", [1, 2], [3], None),
                      ("ZEROS_LIKE", [0], [4], None),
                      ("ADD", [3, 4], [5], options("AddOptions"))], inputs=[0, 1], outputs=[5])
    model, io = load(data)
    assert io.rewrites["shape"] == 1 and io.rewrites["zeros_like"] == 1
    assert sorted(io.hal_operations) == ["ADD", "RESHAPE"]
    x = [np.ones((2, 3), np.float32), np.arange(6, dtype=np.float32)]
    out = HalSession(device, model, io).run(x)
    np.testing.assert_array_equal(out[0], np.arange(6, dtype=np.float32).reshape(2, 3))


def test_rank_folds(device):
    ts = [Tensor([2, 3, 4]), Tensor([], "int32"), Tensor([1], "int32"), Tensor([1], "int32")]
    data = graph(ts, [("RANK", [0], [1], None), ("ADD", [2, 1], [3], options("AddOptions"))], inputs=[0, 2], outputs=[3])
    model, io = load(data)
    assert io.rewrites["rank"] == 1 and list(io.hal_operations) == ["ADD"]
    out = HalSession(device, model, io).run([np.zeros((2, 3, 4), np.float32), np.array([10], np.int32)])
    assert out[0].tolist() == [13]


def test_constant_output_refused():
    data = one_op("SHAPE", [Tensor([2, 3])], [Tensor([2], "int32")], options("ShapeOptions", outType=2))
    with pytest.raises(ValueError, match="constant"):
        load(data)


def test_table_is_consistent():
    seen = set()
    for m in table.MAPPINGS:
        assert m.builtin not in seen
        seen.add(m.builtin)
        assert m.hal is None or isinstance(m.hal, hal.OperationType)
        assert m.rewrite or m.inputs or m.native, m.builtin  # a direct mapping says how every HAL input is made
        assert m.types, m.builtin
        if m.native is not None:  # NOTE: an AIDL operation of versions 2-3, its inputs said too
            assert m.native.inputs and m.native.version >= hal.HalVersion.AIDL_V2, m.builtin
    assert not seen & set(table.REFUSED)
    # HAL -> TFLite: the direct entries per HAL operation (what a LiteRT-backed driver reads)
    assert [m.builtin for m in table.BY_HAL[hal.OperationType.CONV_2D]] == ["CONV_2D"]
    assert {m.builtin for m in table.BY_HAL[hal.OperationType.PRELU]} == {"PRELU", "LEAKY_RELU"}


# --------------------------------------------------------------------------- command line

def test_cli_run_inputs_outputs_compare(tmp_path, capsys):
    path = model_path("vww_mobilenetv1_int8")
    np.save(tmp_path / "x.npy", _vww_input())
    rc = cli.main(["run", str(path), "--input", str(tmp_path / "x.npy"), "-o", str(tmp_path / "out"), "--compare"])
    out = capsys.readouterr().out
    assert rc == 0
    y = np.load(tmp_path / "out" / "output_0.npy")
    assert y.shape == (1, 2) and y.dtype == np.float32
    assert "top-1 same" in out and "max |err| 0 " in out
    # a wrong input (dtype) is an error, not a crash
    np.save(tmp_path / "bad.npy", np.zeros((1, 96, 96, 3), np.int32))
    assert cli.main(["run", str(path), "--input", str(tmp_path / "bad.npy")]) == 2
    assert "must be float32" in capsys.readouterr().err


def test_cli_run_per_tensor(capsys):
    rc = cli.main(["run", str(model_path("kws_mobilenetv2_int8")), "--per-tensor", "--kernels", "ref", "--strict"])
    out = capsys.readouterr().out
    assert rc == 0 and "every tensor within tolerance" in out and "71 tensors compared" in out


def test_cli_run_conversion_failure(tmp_path, capsys):
    # NOTE: an operator with no HAL form runs on LiteRT's CPU kernels, as on a phone
    bmm = tmp_path / "bmm.tflite"
    bmm.write_bytes(one_op("BATCH_MATMUL", [Tensor([2, 3]), Tensor([3, 4])], [Tensor([2, 4])],
                           options("BatchMatMulOptions")))
    assert cli.main(["run", str(bmm), "--compare", "--strict"]) == 0
    assert "1 on the CPU (LiteRT)" in capsys.readouterr().out
    # a model nothing can run (a custom operator neither LiteRT nor nnhal knows): its root cause, once
    bad = tmp_path / "custom.tflite"
    bad.write_bytes(one_op("NoSuchCustomOp", [Tensor([2])], [Tensor([2])], custom_options=b""))
    with pytest.raises(SystemExit) as e:
        cli.main(["run", str(bad)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "operator 0 NoSuchCustomOp is on the CPU" in err


def test_cli_graph(tmp_path, capsys):
    """(The picture itself: tests/test_graph_view.py.)"""
    dot = tmp_path / "palm.dot"
    assert cli.main(["graph", str(model_path("palm_detection_lite")), "-o", str(dot), "--device", "sample-all"]) == 0
    src = dot.read_text()
    assert "CONV_2D" in src and "f32[1x96x96x32]" in src and "119/119 supported" in src
    assert "TFLite op 231 CONCATENATION" in src  # each HAL operation names its TFLite operator
    # --hal: the HAL model alone (no plan partitions), laid out by Graphviz too
    hal = tmp_path / "kws.dot"
    assert cli.main(["graph", str(model_path("kws_mobilenetv2_int8")), "-o", str(hal), "--hal"]) == 0
    assert "cluster_g0" not in hal.read_text()
    plan = tmp_path / "kws_plan.dot"
    assert cli.main(["graph", str(model_path("kws_mobilenetv2_int8")), "-o", str(plan)]) == 0
    assert "cluster_g0" in plan.read_text() and "partition 0: nnapi" in plan.read_text()
    vec = Path(default_vectors()) / "V1_0" / "conv_float.json.gz"
    if vec.exists():
        assert cli.main(["graph", str(vec), "-o", str(tmp_path / "v.dot")]) == 0
        assert "CONV_2D" in (tmp_path / "v.dot").read_text()


def test_graph_marks_unsupported():
    import shutil
    import xml.etree.ElementTree as ET

    from nnhal.tools import graphview

    model, io = load(model_path("vww_mobilenetv1_int8"))
    sup = [True] * len(model.main.operations)
    sup[3] = False
    info = graphview.GraphInfo(title="t", supported=sup, reasons={3: "no reason"}, device="d")
    source, details = graphview.dot_source(model, info)
    assert "no reason" in source or any("no reason" in str(d) for d in details)
    if shutil.which("dot"):  # NOTE: Graphviz renders it (the README's test command installs it)
        ET.fromstring(graphview.render(source, "svg").decode())


def test_cli_bench_model(capsys):
    # NOTE: --block 2 with --runs 2: one round whatever the machine load (default blocks are about 50 ms of runs)
    rc = cli.main(["bench", str(model_path("vww_mobilenetv1_int8")), "--runs", "2", "--block", "2"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "nnhal sample-all" in out and "LiteRT xnnpack" in out and "LiteRT builtin" in out and "nnhal / LiteRT" in out
    assert "1 rounds of each engine in turn" in out and "nnhal sample-all 2 (2)" in out
    rc = cli.main(["bench", str(model_path("kws_mobilenetv2_int8")), "--runs", "3", "--block", "1",
                   "--baseline", "none"])
    out = capsys.readouterr().out
    assert rc == 0 and "3 rounds of each engine in turn" in out and "nnhal sample-all 3 (1)" in out
    # NOTE: by default, about a second of each engine in blocks of about 50 ms of it
    rc = cli.main(["bench", str(model_path("kws_mobilenetv2_int8")), "--seconds", "0.2", "--baseline", "none",
                   "--device", "sample-all"])
    out = capsys.readouterr().out
    assert rc == 0 and "4 rounds of each engine in turn" in out
    # NOTE: --floor: LiteRT with only the HAL's data path around it, which nnhal cannot beat
    rc = cli.main(["bench", str(model_path("vww_mobilenetv1_int8")), "--runs", "30", "--floor", "--baseline", "none",
                   "--device", "litert-cpu"])
    out = capsys.readouterr().out
    assert rc == 0 and "HAL data path floor / LiteRT xnnpack" in out and "nnhal / HAL data path floor" in out
    assert "us per execution" in out


def test_demo_trained_models(device, capsys):
    from nnhal.cli.demo import run_trained_models

    assert run_trained_models(device, MODELS if MODELS.exists() else None) == 0
    out = capsys.readouterr().out
    assert "keyword probabilities" in out and "p(person)" in out and "top palm anchors" in out


def test_operators_alone_on_litert_inputs(device):
    """operator_model / isolated: each TFLite operator's HAL operations alone, fed LiteRT's tensors."""
    from nnhal.delegate.run import isolated, operator_model

    path = model_path("vww_mobilenetv1_int8")
    model, io = load(path)
    sub, sub_io = operator_model(model, io, 1)  # the first CONV_2D
    assert [hal.OperationType(o.type).name for o in sub.main.operations] == ["CONV_2D"]
    assert len(sub.main.inputIndexes) == 1 and len(sub_io.outputs) == 1
    lr = LiteRT(path, kernels="builtin", preserve=True)
    lr.run([_vww_input()])
    res = isolated(device, model, io, lr)
    assert len(res) == 33 and all(df.ok(1e-4, 1) for _, _, df in res)


def test_cli_per_tensor_drift_explained(capsys):
    """kws against LiteRT's optimized kernels: 1-step rounding differences grow along the chain, but
    every operator alone on LiteRT's inputs is within 1 step (exit 0 with --strict)."""
    rc = cli.main(["run", str(model_path("kws_mobilenetv2_int8")), "--per-tensor", "--strict"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "first operation beyond tolerance" in out and "its inputs already differ" in out
    assert "each operator alone on LiteRT's own inputs (71 runs)" in out and "; 0 beyond tolerance" in out


def test_reshape_to_a_computed_shape(device):
    """RESHAPE whose shape input is computed at run time: the output's static shape is used."""
    ts = [Tensor([2, 3]), Tensor([2], "int32"), Tensor([3, 2])]
    data = graph(ts, [("RESHAPE", [0, 1], [2], None)], inputs=[0, 1], outputs=[2])
    model, io = load(data)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = HalSession(device, model, io).run([x, np.array([3, 2], np.int32)])
    np.testing.assert_array_equal(out[0], x.reshape(3, 2))


def test_data_path_floor_computes_the_model():
    """The bench's floor runs the model for real: its outputs, read back from the pool, are LiteRT's."""
    from nnhal import tflite
    from nnhal.delegate.run import DataPathFloor, LiteRT, make_inputs

    path = str(model_path("vww_mobilenetv1_int8"))
    _, io = tflite.load(path)
    x = make_inputs(io, seed=3)
    floor = DataPathFloor(path, x)
    try:
        for got, want in zip(floor.run(x), LiteRT(path, kernels="xnnpack").run(x)):
            assert got.dtype == want.dtype and np.array_equal(got, want)
    finally:
        floor.close()


def test_constants_read_in_place_and_copied_once():
    """The unpacked file's vectors are read-only views of immutable bytes (no copy of the file); a mutable
    buffer is copied first (its owner may change it); the HAL model's pool is its own copy."""
    from nnhal.platform import memory
    from nnhal.tflite import schema

    raw = model_path("vww_mobilenetv1_int8").read_bytes()
    m = schema.read_model(raw)
    data = max((b.data for b in m.buffers if b.data is not None), key=len)
    assert isinstance(data, np.ndarray) and not data.flags.writeable and np.shares_memory(data, np.frombuffer(raw, np.uint8))
    mutable = bytearray(raw)
    m2 = schema.read_model(mutable)
    d2 = max((b.data for b in m2.buffers if b.data is not None), key=len)
    before = bytes(d2)
    mutable[:] = bytes(len(mutable))
    assert bytes(d2) == before
    model, _ = load(raw)
    view = memory.map(model.pools[0])
    try:
        pool = np.frombuffer(view, np.uint8)
        assert not np.shares_memory(pool, np.frombuffer(raw, np.uint8))
        assert pool.tobytes().find(data[:64].tobytes()) >= 0  # NOTE: the constants' bytes, copied
        del pool
    finally:
        view.release()
    for p in model.pools:
        memory.free(p)


def _model_bytes(model: hal.Model) -> tuple:
    """What a HAL model holds: its structure and the bytes of its constants (pools read back)."""
    return (repr(model.main), repr(model.referenced), bytes(model.operandValues), repr(model.extensionNameToPrefix),
            [os.pread(p.handle.fds[0], p.size, 0) for p in model.pools])


def test_main_mapping_is_load_operators_of_every_operator():
    """The planner maps the model once (MainMapping): its failures are operator_failures', and with none
    the same mapping is load_operators of every operator, given once, for those inputs only."""
    from nnhal.tflite.loader import MainMapping, free_model, load_operators, operator_failures, verify

    w = np.arange(3 * 3 * 2 * 4, dtype=np.float32).reshape(4, 3, 3, 2) / 10  # NOTE: > 128 bytes: a pool constant
    data = graph([Tensor([1, 5, 5, 2]), Tensor(list(w.shape), data=w), Tensor([4], data=np.ones(4, np.float32)),
                  Tensor([1, 5, 5, 4]), Tensor([1, 5, 5, 4]), Tensor([1, 5, 5, 4])],
                 [("CONV_2D", [0, 1, 2], [3], options("Conv2DOptions", padding=0, strideW=1, strideH=1)),
                  ("RELU", [3], [4], None), ("ADD", [4, 3], [5], options("AddOptions"))], [0], [5])
    checked = verify(data)
    whole = MainMapping(data, [0], checked=checked)
    assert whole.failures == operator_failures(data, checked=checked) == {}
    assert whole.take([0, 1], [0], [4]) is None and whole.take([0, 1, 2], [3], [5]) is None
    model, io = whole.take([0, 1, 2], [0], [3, 5])
    again, io2 = load_operators(data, [0, 1, 2], [0], [3, 5], checked=verify(data))
    try:
        assert model.pools and _model_bytes(model) == _model_bytes(again) and repr(io) == repr(io2)
    finally:
        free_model(model)
        free_model(again)
    assert whole.take([0, 1, 2], [0], [3, 5]) is None  # NOTE: given once: the model is the caller's
    bad = graph([Tensor([2]), Tensor([2]), Tensor([2]), Tensor([2])],
                [("RELU", [0], [1], None), ("CEIL", [1], [2], None), ("ABS", [2], [3], None)], [0], [3])
    checked = verify(bad)
    whole = MainMapping(bad, [0], checked=checked)
    assert whole.failures == operator_failures(bad, checked=checked) and list(whole.failures) == [1]
    assert whole.take([0, 1, 2], [0], [3]) is None
