"""The NNAPI delegate's per-operator rules by API level (nnhal.delegate.rules), one test per rule,
each naming the line of ``NNAPIDelegateKernel::Validate`` it follows (nnhal.delegate.rules.SOURCE:
google-ai-edge/LiteRT tflite/delegates/nnapi/nnapi_delegate.cc, the same function as TensorFlow's
tensorflow/lite/delegates/nnapi/nnapi_delegate.cc)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert", reason="ai-edge-litert is not installed (pip install 'nnhal[litert]')")

from nnhal.delegate import levels  # noqa: E402
from nnhal.delegate.levels import LEVEL5, LEVEL6, LEVEL7, LEVEL8  # noqa: E402
from nnhal.delegate.model import Graph  # noqa: E402
from nnhal.delegate.rules import LEVELS, RULES, validate  # noqa: E402
from nnhal.hal.types import HalVersion  # noqa: E402
from nnhal.tflite.writer import Tensor, graph, one_op, options  # noqa: E402
from tests.delegate_util import plan_of, run_and_compare, where  # noqa: E402


def lines(data: bytes, api: int, accel: bool = False, op: int = 0) -> list[int]:
    """The delegate source lines of the conditions operator ``op`` fails at ``api`` (empty: delegated)."""
    g = Graph(data)
    return [f.line for f in validate(g.operators[op], g, api, accel)]


def accepted_from(data: bytes, **kw) -> int:
    """The first level (API 27-30, feature levels 5-8) at which the operator is delegated (99: never)."""
    return next((api for api in LEVELS if not lines(data, api, **kw)), 99)


def _q(shape, dtype="int8", scale=0.5, zp=0, data=None, axis=0):
    return Tensor(list(shape), dtype, data=data, scale=scale, zero_point=zp, axis=axis)


def _conv(dtype="int8", per_channel=False, dilation=1, bias=True, in_scale=0.5, w_scale=0.1, out_scale=1.0):
    w = np.ones((3, 1, 1, 2), dtype)
    ws = [w_scale, w_scale * 2, w_scale * 3] if per_channel else w_scale
    ins = [_q([1, 4, 4, 2], dtype, in_scale), _q([3, 1, 1, 2], dtype, ws, [0, 0, 0] if per_channel else 0, w)]
    if bias:
        ins.append(Tensor([3], "int32", data=np.zeros(3, np.int32), scale=in_scale * w_scale))
    return one_op("CONV_2D", ins, [_q([1, 4, 4, 3], dtype, out_scale)],
                  options("Conv2DOptions", padding=0, strideW=1, strideH=1, dilationWFactor=dilation,
                          dilationHFactor=dilation))


def _float_conv(dilation=1, bias=True):
    ins = [Tensor([1, 6, 6, 2]), Tensor([3, 3, 3, 2], data=np.ones((3, 3, 3, 2), np.float32))]
    if bias:
        ins.append(Tensor([3], data=np.zeros(3, np.float32)))
    return one_op("CONV_2D", ins, [Tensor([1, 6, 6, 3])],
                  options("Conv2DOptions", padding=0, strideW=1, strideH=1, dilationWFactor=dilation,
                          dilationHFactor=dilation))


def _dw(dtype="int8", dilation=1):
    w = np.ones((1, 1, 1, 2), dtype if dtype != "float32" else np.float32)
    q = dtype != "float32"
    x = _q([1, 4, 4, 2], dtype, 0.5) if q else Tensor([1, 4, 4, 2])
    wt = _q([1, 1, 1, 2], dtype, 0.1, 0, w) if q else Tensor([1, 1, 1, 2], data=w)
    b = Tensor([2], "int32", data=np.zeros(2, np.int32), scale=0.05) if q else Tensor([2], data=np.zeros(2, np.float32))
    y = _q([1, 4, 4, 2], dtype, 1.0) if q else Tensor([1, 4, 4, 2])
    return one_op("DEPTHWISE_CONV_2D", [x, wt, b], [y],
                  options("DepthwiseConv2DOptions", padding=0, strideW=1, strideH=1, depthMultiplier=1,
                          dilationWFactor=dilation, dilationHFactor=dilation))


def _fc(dtype="int8"):
    w = np.ones((3, 8), dtype)
    return one_op("FULLY_CONNECTED", [_q([1, 8], dtype, 0.5), _q([3, 8], dtype, 0.1, 0, w),
                                      Tensor([3], "int32", data=np.zeros(3, np.int32), scale=0.05)],
                  [_q([1, 3], dtype, 1.0)], options("FullyConnectedOptions"))


def _add(dtype="float32", rank=2, version=1, op="ADD"):
    shape = [2] * rank
    t = (lambda: _q(shape, dtype, 0.5)) if dtype in ("int8", "uint8") else (lambda: Tensor(shape, dtype))
    return one_op(op, [t(), t()], [t()], options(f"{op.capitalize()}Options"), version=version)


# --------------------------------------------------------------------------- API levels


def test_prelu_from_api_29():
    """PRELU: ExpectMinAndroidSdkVersion(kMinSdkVersionForNNAPI12) (nnapi_delegate.cc:3240)."""
    data = one_op("PRELU", [Tensor([1, 4]), Tensor([4], data=np.full(4, 0.1, np.float32))], [Tensor([1, 4])])
    assert lines(data, 28) == [3240] and lines(data, 29) == []


@pytest.mark.parametrize("build,line", [(_conv, 2498), (_dw, 2538), (_fc, 2565)])
def test_int8_conv_dw_fc_only_from_api_29(build, line):
    """CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED take float or uint8 only before API 29
    (ExpectIsFloatOrUint8Operator, nnapi_delegate.cc:2498 / 2538 / 2565); int8 from 29 (converted to uint8)."""
    data = build("int8")
    assert line in lines(data, 28) and lines(data, 29) == []
    assert lines(build("uint8"), 28) == []


def test_int8_add_delegated_at_api_27_as_uint8():
    """ADD takes float or quant8 (int8 included) at every level (ExpectIsFloatOrQuant8Operator,
    nnapi_delegate.cc:2383): at API 27 its HAL 1.0 partition computes in uint8, exactly."""
    data = _add("int8")
    assert lines(data, 27) == []
    plan = plan_of(data, 27)
    assert where(plan) == ["nnapi"]
    assert all(d.ok(1e-4, 0) for d in run_and_compare(plan, "ref"))


def test_int32_add_only_from_api_30():
    """int32 ADD from NNAPI 1.3 (ExpectIsFloatQuant8OrInt32Operator, nnapi_delegate.cc:2375; before: 2383)."""
    data = _add("int32")
    assert lines(data, 29) == [2383] and lines(data, 30) == []


def test_hard_swish_before_api_29_as_its_decomposition():
    """HARD_SWISH has no API level (nnapi_delegate.cc:2579): before API 30 the delegate lowers it into
    MUL / ADD (TransformHardSwishIntoSupportedOps), which nnhal's HAL 1.0 partition runs."""
    data = one_op("HARD_SWISH", [Tensor([1, 16])], [Tensor([1, 16])])
    assert lines(data, 27) == []
    plan = plan_of(data, 27)
    assert where(plan) == ["nnapi"]
    x = [np.linspace(-5, 5, 16, dtype=np.float32).reshape(1, 16)]
    assert all(d.ok(1e-5) for d in run_and_compare(plan, inputs=x))


def test_reshape_needs_a_constant_shape():
    """RESHAPE: "The shape input tensor must be constant." (nnapi_delegate.cc:2623) at every level."""
    ts = [Tensor([2, 3]), Tensor([2], "int32"), Tensor([3, 2])]
    computed = graph(ts, [("RESHAPE", [0, 1], [2], None)], inputs=[0, 1], outputs=[2])
    assert all(lines(computed, api) == [2623] for api in LEVELS)
    const = one_op("RESHAPE", [Tensor([2, 3]), Tensor([2], "int32", data=np.array([3, 2], np.int32))],
                   [Tensor([3, 2])])
    assert accepted_from(const) == 27


def test_reshape_shape_from_options():
    """A one-input RESHAPE takes its shape from the options (new_shape); an empty one is a scalar
    reshape the delegate refuses ("New shape rank should be > 0", nnapi_delegate.cc:2638)."""
    opts = options("ReshapeOptions", newShape=np.array([1, -1, 2], np.int32))
    data = one_op("RESHAPE", [Tensor([1, 4, 4, 2])], [Tensor([1, 16, 2])], opts)
    assert lines(data, 27) == []
    scalar = one_op("RESHAPE", [Tensor([1])], [Tensor([])], options("ReshapeOptions"))
    assert lines(scalar, 30) == [2638]


def test_restricted_scales_before_api_29():
    """uint8 CONV_2D with input_scale * filter_scale >= output_scale: refused before NNAPI 1.2
    (ExpectIsRestrictedScalesCompliant, nnapi_delegate.cc:2514)."""
    data = _conv("uint8", in_scale=1.0, w_scale=1.0, out_scale=0.5)
    assert lines(data, 28) == [2514] and lines(data, 29) == []


def test_per_channel_conv_before_api_29():
    """Per-channel quantized CONV_2D before NNAPI 1.2 (nnapi_delegate.cc:2504)."""
    data = _conv("uint8", per_channel=True)
    assert 2504 in lines(data, 28) and lines(data, 29) == []


def test_dilation_from_api_29():
    """Dilated CONV_2D (nnapi_delegate.cc:2523) and DEPTHWISE_CONV_2D (2547) from NNAPI 1.2."""
    assert lines(_float_conv(dilation=2), 28) == [2523] and lines(_float_conv(dilation=2), 29) == []
    assert lines(_dw("float32", dilation=2), 28) == [2547] and lines(_dw("float32", dilation=2), 29) == []


def test_conv_without_bias_refused():
    """"Conv2D with omitted bias not supported" (nnapi_delegate.cc:2518)."""
    assert lines(_float_conv(bias=False), 30) == [2518]


def test_rank_limits():
    """ADD inputs of rank <= 4 (nnapi_delegate.cc:2389); SOFTMAX rank 2 or 4 before API 29 (2600)."""
    assert lines(_add(rank=5), 30) == [2389] and lines(_add(rank=4), 30) == []
    sm = one_op("SOFTMAX", [Tensor([1, 2, 3])], [Tensor([1, 2, 3])], options("SoftmaxOptions", beta=1.0))
    assert lines(sm, 28) == [2600] and lines(sm, 29) == []


def test_op_versions():
    """MUL up to version 2, 3 with an accelerator named (nnapi_delegate.cc:2436); ADD up to 2 (2373)."""
    mul3 = _add(version=3, op="MUL")
    assert lines(mul3, 30) == [2436] and lines(mul3, 30, accel=True) == []
    assert lines(_add(version=3), 30) == [2373]


def test_average_pool_window_limit():
    """A quantized AVERAGE_POOL_2D window over 256 overflows the reference path: refused unless an
    accelerator is named (nnapi_delegate.cc:2466)."""
    data = one_op("AVERAGE_POOL_2D", [_q([1, 17, 17, 1], "uint8")], [_q([1, 1, 1, 1], "uint8")],
                  options("Pool2DOptions", padding=1, strideW=1, strideH=1, filterWidth=17, filterHeight=17))
    assert lines(data, 30) == [2466] and lines(data, 30, accel=True) == []


def test_resize_bilinear_half_pixel_from_api_30():
    """RESIZE_BILINEAR half_pixel_centers up to NNAPI 1.2 (nnapi_delegate.cc:2673); width == height before
    1.2 (2661); float only before 1.2 (2678)."""
    def rb(half=False, out=(1, 4, 4, 1), dtype="float32"):
        x = _q([1, 2, 2, 1], dtype) if dtype != "float32" else Tensor([1, 2, 2, 1])
        y = _q(list(out), dtype) if dtype != "float32" else Tensor(list(out))
        return one_op("RESIZE_BILINEAR", [x, Tensor([2], "int32", data=np.array(out[1:3], np.int32))], [y],
                      options("ResizeBilinearOptions", halfPixelCenters=half))
    assert lines(rb(half=True), 29) == [2673] and lines(rb(half=True), 30) == []
    assert lines(rb(out=(1, 4, 6, 1)), 28) == [2661] and lines(rb(out=(1, 4, 6, 1)), 29) == []
    assert lines(rb(dtype="uint8"), 28) == [2678] and lines(rb(dtype="uint8"), 29) == []


def test_pad_levels():
    """PAD from API 28 (nnapi_delegate.cc:2902), quantized PAD from 29 (2925), PADV2 from 29 (2918)."""
    pad = np.array([[0, 0], [1, 1]], np.int32)
    f = one_op("PAD", [Tensor([1, 2]), Tensor([2, 2], "int32", data=pad)], [Tensor([1, 4])])
    q = one_op("PAD", [_q([1, 2], "uint8"), Tensor([2, 2], "int32", data=pad)], [_q([1, 4], "uint8")])
    v2 = one_op("PADV2", [Tensor([1, 2]), Tensor([2, 2], "int32", data=pad), Tensor([1], data=np.zeros(1, np.float32))],
                [Tensor([1, 4])])
    assert lines(f, 27) == [2902] and accepted_from(f) == 28
    assert lines(q, 28) == [2925] and accepted_from(q) == 29
    assert lines(v2, 28) == [2918] and accepted_from(v2) == 29


def test_quantize_output_types():
    """QUANTIZE from API 29 (nnapi_delegate.cc:3418), to int8 only from 30 (3433)."""
    q = one_op("QUANTIZE", [Tensor([4])], [_q([4], "int8")])
    assert lines(q, 28) == [3418, 3433] and lines(q, 29) == [3433] and lines(q, 30) == []


def test_dequantize_int8_symmetric_at_api_29():
    """DEQUANTIZE of int8 needs zero point 0 at API 29 (nnapi_delegate.cc:2820), uint8 only before (2813)."""
    d = one_op("DEQUANTIZE", [_q([4], "int8", 0.5, 3)], [Tensor([4])])
    assert lines(d, 28) == [2813] and lines(d, 29) == [2820] and lines(d, 30) == []


def test_squeeze_and_transpose():
    """SQUEEZE from API 28 (nnapi_delegate.cc:2710) with squeeze_dims at 28 (2714); TRANSPOSE from 28 (2964)."""
    sq = one_op("SQUEEZE", [Tensor([1, 4])], [Tensor([4])], options("SqueezeOptions"))
    assert lines(sq, 27) == [2710] and lines(sq, 28) == [2714] and lines(sq, 29) == []
    tr = one_op("TRANSPOSE", [Tensor([2, 3]), Tensor([2], "int32", data=np.array([1, 0], np.int32))], [Tensor([3, 2])])
    assert lines(tr, 27) == [2964] and lines(tr, 28) == []


def test_pack_split_v_elu_fill_from_api_30():
    """PACK (nnapi_delegate.cc:3542), SPLIT_V (3376), ELU (3489), FILL (3498): NNAPI 1.3."""
    pack = one_op("PACK", [Tensor([2]), Tensor([2])], [Tensor([2, 2])], options("PackOptions", valuesCount=2, axis=0))
    elu = one_op("ELU", [Tensor([4])], [Tensor([4])])
    fill = one_op("FILL", [Tensor([1], "int32", data=np.array([3], np.int32)), Tensor([], data=np.array(1.0, np.float32))],
                  [Tensor([3])])
    assert lines(pack, 29) == [3542] and accepted_from(pack) == 30
    assert lines(elu, 29) == [3489] and accepted_from(elu) == 30
    assert lines(fill, 29) == [3498] and accepted_from(fill) == 30


def test_never_delegated_below_later_feature_levels():
    """BATCH_MATMUL (feature level 6, nnapi_delegate.cc:3604), and operators without a case (CUMSUM:
    "Unsupported operation type.", 3652), and custom operators."""
    bmm = one_op("BATCH_MATMUL", [Tensor([2, 3]), Tensor([3, 4])], [Tensor([2, 4])], options("BatchMatMulOptions"))
    assert lines(bmm, 30) == [3604]
    cs = one_op("CUMSUM", [Tensor([4]), Tensor([], "int32", data=np.array(0, np.int32))], [Tensor([4])],
                options("CumsumOptions"))
    assert lines(cs, 30) == [3652]
    custom = one_op("MyOp", [Tensor([2])], [Tensor([2])], custom_options=b"")
    assert lines(custom, 30) == [3652]


def test_fp16_weights_checked_on_the_float16_constant():
    """A constant float16 DEQUANTIZE's consumers are validated on the float16 weights themselves
    (FP16GraphPartitionHelper; CONCATENATION takes float16, nnapi_delegate.cc:2780): the whole model is
    delegated, the DEQUANTIZE with it; one operator the delegate refuses (CUMSUM) keeps the DEQUANTIZE
    on the CPU while its NNAPI consumer still reads the weights as a constant."""
    w = np.full((1, 2), 0.5, np.float16)
    ts = [Tensor([1, 2], "float16", data=w), Tensor([1, 2]), Tensor([1, 2]), Tensor([1, 4]), Tensor([1, 4]),
          Tensor([], "int32", data=np.array(1, np.int32)), Tensor([1, 4])]
    ops = [("DEQUANTIZE", [0], [1], None), ("CONCATENATION", [1, 2], [3], options("ConcatenationOptions", axis=1)),
           ("RELU", [3], [4], None)]
    full = graph(ts[:5], ops, inputs=[2], outputs=[4])
    assert where(plan_of(full, 30)) == ["nnapi"] * 3
    partial = graph(ts, ops + [("CUMSUM", [4, 5], [6], options("CumsumOptions"))], inputs=[2], outputs=[6])
    plan = plan_of(partial, 30)
    assert where(plan) == ["cpu", "nnapi", "nnapi", "cpu"]
    assert "FP16GraphPartitionHelper" in plan.operators[0].reason
    assert all(d.ok() for d in run_and_compare(plan))


def test_every_rule_names_existing_lines():
    """Every rule and check names a line inside Validate (nnapi_delegate.cc:2358-3656)."""
    for name, r in RULES.items():
        for line in [r.line, r.version_line, r.api_line] + [c.line for c in r.checks]:
            assert line == 0 or 2358 <= line <= 3656, (name, line)


@pytest.mark.parametrize("api", [27, 28, 29, 30])
def test_uint8_conv_runs_at_every_hal_version(api):
    """A uint8 CONV_2D whose scales the pre-1.2 rule accepts (2514) is delegated at every level; its HAL
    1.0 / 1.1 form is the 7-input implicit-padding one; TFLite's reference kernels' result to the step."""
    data = _conv("uint8", in_scale=0.5, w_scale=0.1, out_scale=0.25)
    plan = plan_of(data, api)
    assert where(plan) == ["nnapi"]
    assert all(d.ok(1e-4, 1) for d in run_and_compare(plan, "ref"))


def test_cast_of_int8_from_api_30():
    """CAST from API 29 (nnapi_delegate.cc:3208); int8 only from 30 (3215; before: 3226)."""
    data = one_op("CAST", [_q([4], "int8", 1.0)], [Tensor([4])])
    assert lines(data, 28) == [3208, 3226] and lines(data, 29) == [3226] and lines(data, 30) == []


# --------------------------------------------------------------------------- feature levels 5-8

def _bmm(a=(1, 2, 8), b=(1, 8, 5), dtype="float32", dtype_b=None, version=1):
    ta = _q(a, dtype, 0.5) if dtype == "int8" else Tensor(list(a), dtype)
    db = dtype_b or dtype
    tb = _q(b, db, 0.5) if db == "int8" else Tensor(list(b), db)
    out = list(a[:-1]) + [b[-1]]
    to = _q(out, dtype, 1.0) if dtype == "int8" else Tensor(out, dtype)
    return one_op("BATCH_MATMUL", [ta, tb], [to], options("BatchMatMulOptions"), version=version)


def test_batch_matmul_from_feature_level_6():
    """BATCH_MATMUL (nnapi_delegate.cc:3602): feature level 6 (3604); float32 / int32 / int8 (3608), both
    inputs of one type (3610), rank 2-4 (3613), no broadcast batch (IsBroadcastBatchMatMul, 3617); op
    version 2 at most (3603)."""
    assert lines(_bmm(), 30) == [3604] and lines(_bmm(), LEVEL5) == [3604]
    assert accepted_from(_bmm()) == LEVEL6 and accepted_from(_bmm(dtype="int8")) == LEVEL6
    assert lines(_bmm(), 33) == [3604]  # NOTE: the API level itself as the level (no target devices)
    assert lines(_bmm(dtype="uint8"), LEVEL6) == [3608]
    assert lines(_bmm(dtype="float32", dtype_b="int8"), LEVEL6) == [3610]
    assert lines(_bmm((2, 1, 1, 2, 8), (2, 1, 1, 8, 5)), LEVEL6) == [3613]
    assert lines(_bmm((3, 2, 8), (1, 8, 5)), LEVEL6) == [3617] and lines(_bmm((2, 8), (1, 8, 5)), LEVEL6) == [3617]
    assert lines(_bmm(version=3), LEVEL8) == [3603]


def test_reshape_of_int32_and_pack_from_feature_level_6():
    """RESHAPE of int32 from feature level 6 (nnapi_delegate.cc:2612; before: float or quant8, 2610);
    PACK of int32 / uint8 and along the last axis from level 6 (3546; before: float32 / int8 (3549) and not
    the last axis (3551))."""
    reshape = one_op("RESHAPE", [Tensor([2, 3], "int32"), Tensor([2], "int32", data=np.array([3, 2], np.int32))],
                     [Tensor([3, 2], "int32")])
    assert lines(reshape, 30) == [2610] and lines(reshape, LEVEL5) == [2610] and accepted_from(reshape) == LEVEL6
    pack = one_op("PACK", [Tensor([2], "int32"), Tensor([2], "int32")], [Tensor([2, 2], "int32")],
                  options("PackOptions", valuesCount=2, axis=-1))
    assert lines(pack, 30) == [3549, 3551] and accepted_from(pack) == LEVEL6
    boolean = one_op("PACK", [Tensor([2], "bool"), Tensor([2], "bool")], [Tensor([2, 2], "bool")],
                     options("PackOptions", valuesCount=2, axis=0))
    assert lines(boolean, LEVEL6) == [3546]


def test_mirror_pad_reverse_and_quantized_rsqrt_from_feature_level_7():
    """MIRROR_PAD (nnapi_delegate.cc:3621) and REVERSE_V2 (3641) from feature level 7 (3623 / 3643), of
    float, quant8 or int32 (3625 / 3645), MIRROR_PAD of a tensor with elements (3633); quantized RSQRT from
    level 7 (2991; before: float only, 2989)."""
    pads = Tensor([2, 2], "int32", data=np.array([[1, 1], [0, 0]], np.int32))
    mp = one_op("MIRROR_PAD", [Tensor([3, 2], "int32"), pads], [Tensor([5, 2], "int32")],
                options("MirrorPadOptions", mode=0))
    assert lines(mp, LEVEL6) == [3623] and accepted_from(mp) == LEVEL7
    empty = one_op("MIRROR_PAD", [Tensor([3, 0]), pads], [Tensor([5, 0])], options("MirrorPadOptions", mode=1))
    assert lines(empty, LEVEL7) == [3633]
    axis = Tensor([1], "int32", data=np.array([0], np.int32))
    rev = one_op("REVERSE_V2", [_q([4, 2], "uint8"), axis], [_q([4, 2], "uint8")])
    assert lines(rev, LEVEL6) == [3643] and accepted_from(rev) == LEVEL7
    assert lines(one_op("REVERSE_V2", [Tensor([4], "bool"), axis], [Tensor([4], "bool")]), LEVEL7) == [3645]
    rsqrt = one_op("RSQRT", [_q([4], "int8", 0.5)], [_q([4], "int8", 0.25)], version=2)
    assert lines(rsqrt, 30) == [2989] and lines(rsqrt, LEVEL6) == [2989] and accepted_from(rsqrt) == LEVEL7
    assert accepted_from(one_op("RSQRT", [Tensor([4])], [Tensor([4])])) == 29


def test_the_levels_validate_is_called_with():
    """Validate's level (nnhal.delegate.levels): with target devices the runtime's feature level
    (GetTargetFeatureLevel, nnapi_delegate.cc:6865; 31 and 32 both level 5, 35 level 8), lowered to the
    devices' (678: a HIDL 1.3 device keeps it at 30); without, the API level itself (6842)."""
    V = HalVersion
    want = {27: (27, V.V1_0), 28: (28, V.V1_1), 29: (29, V.V1_2), 30: (30, V.V1_3), 31: (LEVEL5, V.AIDL_V1),
            32: (LEVEL5, V.AIDL_V1), 33: (LEVEL6, V.AIDL_V2), 34: (LEVEL7, V.AIDL_V3), 35: (LEVEL8, V.AIDL_V4)}
    for api, (level, version) in want.items():
        got = levels.levels(api, True, [V.AIDL_V4])
        assert (got.runtime, got.validate, got.version) == (level, level, version), api
        assert got.execution == ("reusable" if api == 35 else "burst" if api >= 31 else "sync"), api
    hidl = levels.levels(33, True, [V.V1_3])
    assert (hidl.validate, hidl.version, hidl.execution) == (30, V.V1_3, "sync") and ":678" in hidl.why
    free = levels.levels(33, False, [V.AIDL_V4])
    assert (free.validate, free.version, free.execution) == (33, V.AIDL_V2, "sync") and "6842" in free.why
    assert levels.levels(28, True, [V.AIDL_V4]).validate == 28  # NOTE: no target devices before API 29
    with pytest.raises(ValueError, match="27..35"):
        levels.check_api(36)
