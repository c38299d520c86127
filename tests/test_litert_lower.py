"""The HAL -> TFLite lowering of the ``litert-cpu`` driver (nnhal.drivers.litert.lower): the rewrites
into operators with a direct TFLite form, float16 models computed in float32 between CASTs,
the refusals and their reasons (what getSupportedOperations_1_3 logs), and the coverage
command.  The results themselves are checked against the conformance vectors in
tests/test_litert_driver.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterator

import pytest

from nnhal.drivers import litert as litert_backend

if not litert_backend.available():  # pragma: no cover - only without the optional dependency
    pytest.skip("ai-edge-litert is not installed", allow_module_level=True)

from nnhal import hal  # noqa: E402
from nnhal import memory as hal_memory  # noqa: E402
from nnhal.conformance import vectors  # noqa: E402
from nnhal.drivers.litert import lower  # noqa: E402
from nnhal.tflite.schema import schema  # noqa: E402
from nnhal.tools import litert_coverage  # noqa: E402
from tests.conftest import vectors_root  # noqa: E402

Op = hal.OperationType


def _vector(spec: str, name: str) -> Any:
    files = sorted(vectors_root().rglob(f"{spec}.json*"))
    if not files:
        pytest.skip(f"no vector file {spec}.json")
    vm = next((vm for vm in vectors.load_file(str(files[0])) if vm.name == name), None)
    if vm is None:
        pytest.skip(f"no model {name} in {spec}")
    return vm


class Built:
    """A vector model built, its pools mapped (freed on exit)."""

    def __init__(self, spec: str, name: str):
        self.model = _vector(spec, name).build_model()
        self.views = [hal_memory.PrivateCopy(p).view for p in self.model.pools]

    def __enter__(self) -> "Built":
        return self

    def __exit__(self, *exc: Any) -> None:
        for p in self.model.pools:
            hal_memory.free(p)

    def reasons(self) -> list[str]:
        return [lower.check_operation(self.model, self.views, op) for op in self.model.main.operations]

    def rewritten(self, k: int = 0) -> list[str]:
        return lower.rewritten(self.model, self.views, self.model.main.operations[k])


@pytest.fixture
def built() -> Iterator[Any]:
    opened: list[Built] = []

    def make(spec: str, name: str) -> Built:
        opened.append(Built(spec, name))
        return opened[-1]

    yield make
    for b in opened:
        b.__exit__()


@pytest.mark.parametrize("spec,name,ops", [
    ("conv2d_dilation", "conv2d_dilation_nchw", ["TRANSPOSE", "CONV_2D", "TRANSPOSE"]),
    ("grouped_conv2d", "grouped_conv2d_nhwc_none", ["SPLIT", "CONV_2D", "CONV_2D", "CONCATENATION"]),
    ("grouped_conv2d", "grouped_conv2d_nchw_none",
     ["TRANSPOSE", "SPLIT", "CONV_2D", "CONV_2D", "CONCATENATION", "TRANSPOSE"]),
    ("channel_shuffle", "channel_shuffle_dim4_axis0", ["RESHAPE", "TRANSPOSE", "RESHAPE"]),
    ("softmax_v1_2", "softmax_v1_2_axis_dim4_axis0", ["TRANSPOSE", "SOFTMAX", "TRANSPOSE"]),
    ("local_response_normalization_v1_2", "local_response_normalization_v1_2_axis_dim2_axis0",
     ["TRANSPOSE", "RESHAPE", "LOCAL_RESPONSE_NORMALIZATION", "RESHAPE", "TRANSPOSE"]),
    ("conv2d_per_channel", "conv2d_per_channel", ["QUANTIZE", "CONV_2D", "QUANTIZE"]),
    ("less", "less_quantized_different_scale", ["CAST", "GATHER", "CAST", "GATHER", "LESS"]),
    ("select_v1_2", "select_v1_2_one_dim_quant8", ["QUANTIZE", "QUANTIZE", "SELECT"]),
    ("instance_normalization", "instance_normalization_nhwc",
     ["MEAN", "SUB", "MUL", "MEAN", "ADD", "RSQRT", "MUL", "MUL", "ADD"]),
    ("elu", "elu_alpha01", ["ELU", "MINIMUM", "MUL", "RELU", "ADD"]),
    ("add", "add", ["ADD"]),
])
def test_rewrites(built: Any, spec: str, name: str, ops: list[str]) -> None:
    b = built(spec, name)
    assert b.rewritten() == ops
    assert b.reasons() == [""] * len(b.model.main.operations)


def _flatbuffer_ops(data: bytes) -> tuple[list[str], list[int], list[int]]:
    """(operator names of the main subgraph, its input tensor types, its output tensor types)."""
    s = schema()
    m = s.ModelT.InitFromPackedBuf(data, 0)
    names = {v: k for k, v in vars(s.BuiltinOperator).items() if not k.startswith("_")}
    sg = m.subgraphs[0]
    ops = [names[m.operatorCodes[o.opcodeIndex].builtinCode] for o in sg.operators]
    return ops, [sg.tensors[i].type for i in sg.inputs], [sg.tensors[i].type for i in sg.outputs]


def test_float16_model_computes_in_float32_between_casts(built: Any) -> None:
    b = built("add_v1_2", "add_v1_2")  # NOTE: float16 operands
    assert b.reasons() == [""]
    ops, ins, outs = _flatbuffer_ops(lower.lower(b.model, b.views))
    assert ops == ["CAST", "CAST", "ADD", "CAST"]
    assert ins == [1, 1] and outs == [1]  # NOTE: TensorType FLOAT16: the HAL's own buffers
    # NOTE: the backend scans the model for float16 once (uses_float16) and hands it to every check
    op = b.model.main.operations[0]
    assert lower.uses_float16(b.model) and not lower.uses_float16(built("add", "add").model)
    assert lower.check_operation(b.model, b.views, op, True) == lower.check_operation(b.model, b.views, op) == ""
    assert "FLOAT16" in lower.check_operation(b.model, b.views, op, False)  # NOTE: the flag is what decides


def test_if_lowers_its_branches(built: Any) -> None:
    b = built("if_constant", "if_constant_copy_true")
    assert b.reasons() == [""] * len(b.model.main.operations)
    s = schema()
    m = s.ModelT.InitFromPackedBuf(lower.lower(b.model, b.views), 0)
    assert len(m.subgraphs) == 1 + len(b.model.referenced)


@pytest.mark.parametrize("spec,name,reason", [
    ("cast", "cast_int32_to_quant8_overflow", "CAST of int32 to quant8 (NNAPI saturates, TFLite wraps)"),
    ("rank", "rank_1d", "RANK: its output is a scalar"),
    ("lsh_projection", "lsh_projection", "LSH_PROJECTION: TFLite's LSH_PROJECTION is not NNAPI's"),
    ("while_infinite_loop", "while_infinite_loop", "cannot be stopped at the HAL's loop timeout"),
    ("heatmap_max_keypoint", "heatmap_max_keypoint_nhwc", "HEATMAP_MAX_KEYPOINT has no direct TFLite operator"),
])
def test_refusals_name_their_reason(built: Any, spec: str, name: str, reason: str) -> None:
    reasons = [r for r in built(spec, name).reasons() if r]
    assert reasons and reason in reasons[0], reasons


def test_refusals_of_shapes_the_rewrites_need(built: Any) -> None:
    """A rewrite that needs a static shape or rank refuses with the reason instead of guessing."""
    b = built("channel_shuffle", "channel_shuffle_dim4_axis0")
    op = b.model.main.operations[0]
    x = b.model.main.operands[op.inputs[0]]
    x.dimensions = [0] * len(x.dimensions)
    assert lower.check_operation(b.model, b.views, op) == "CHANNEL_SHUFFLE on an input of unknown shape"
    x.dimensions = []
    assert "unknown" in lower.check_operation(b.model, b.views, op)
    c = built("conv2d_dilation", "conv2d_dilation_nchw")
    op = c.model.main.operations[0]
    c.model.main.operands[op.inputs[0]].dimensions = []
    assert lower.check_operation(c.model, c.views, op) == "NCHW input of unknown rank"
    with pytest.raises(lower.Unsupported, match="unknown rank"):
        lower.lower(c.model, c.views)


def test_check_operation_never_raises(built: Any) -> None:
    """A malformed operation (check_operation runs on validated models, but must not crash the
    driver's getSupportedOperations) gives a reason, not an exception."""
    b = built("add", "add")
    bad = dataclasses.replace(b.model.main.operations[0], inputs=[0, 1, 999])
    assert lower.check_operation(b.model, b.views, bad).startswith("not lowered (KeyError")
    other = dataclasses.replace(b.model.main.operations[0], type=12345)
    assert lower.check_operation(b.model, b.views, other) == "OEM / extension operation"
    b.model.main.operations[0] = bad
    with pytest.raises(lower.Unsupported, match="not lowered"):
        lower.lower(b.model, b.views)


def test_coverage_command(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    for spec in ("add", "heatmap_max_keypoint"):
        src = sorted(vectors_root().rglob(f"{spec}.json*"))[0]
        (tmp_path / src.name).symlink_to(src)
    (tmp_path / "broken.json.gz").write_bytes(b"not gzip")
    assert litert_coverage.main([str(tmp_path), "--top", "3"]) == 0
    out, err = capsys.readouterr()
    assert "broken.json.gz" in err
    first = out.splitlines()[0]
    assert first.startswith("litert-cpu coverage: ") and "/ " in first and "%" in first
    supported, total = (int(x) for x in first.split(": ")[1].split(" conformance")[0].split(" / "))
    assert 0 < supported < total
    assert "HEATMAP_MAX_KEYPOINT has no direct TFLite operator in the table" in out
