"""nnhal bench on tiny MobileNets: the CLI runs end to end through the
sample-all driver, the driver agrees with the registry kernels, and the
quantized network tracks the float one (its calibration does not saturate)."""

from __future__ import annotations

import numpy as np

from nnhal.cli import bench as cli_bench
from nnhal.hal import OperandType
from nnhal.ops.quant import quantize
from nnhal.tools import bench


def test_bench_cli_tiny(capsys):
    rc = cli_bench.main(["--size", "32", "--alpha", "0.25", "--classes", "10", "--runs", "2", "--repeats", "1"])
    out = capsys.readouterr().out
    assert rc == 0
    for name in ("mobilenet_v1_0.25_32 float32", "mobilenet_v1_0.25_32 quant8", "mobilenet_v2_0.25_32 float32",
                 "mobilenet_v2_0.25_32 quant8"):
        assert name in out
    assert "median latency" in out and "whole network / bare matmul sum" in out
    assert "driver sample-all" in out


def test_bench_structure():
    v1 = bench.mobilenet_v1()
    kinds = [layer.kind for layer in v1.layers]
    assert kinds.count("conv") == 14 and kinds.count("dw") == 13 and kinds[-2:] == ["fc", "softmax"]
    v2 = bench.mobilenet_v2()
    kinds = [layer.kind for layer in v2.layers]
    assert kinds.count("dw") == 17 and kinds.count("add") == 10 and kinds.count("conv") == 35


def test_driver_matches_registry_and_quant_tracks_float():
    net = bench.mobilenet_v2(32, 0.5, 10)
    rng = np.random.default_rng(3)
    xf = rng.uniform(-1, 1, net.input_shape).astype(np.float32)
    gf = bench.lower(net, quant=False)
    lat, yf = bench.driver_latency(gf, xf, runs=1)
    assert lat.median > 0 and lat.best <= lat.median and yf.shape == (1, 10)
    ref = bench.RegistryRunner(gf).run(xf)[gf.outputs[0]]
    np.testing.assert_allclose(yf, ref, rtol=1e-6, atol=1e-7)
    gq = bench.lower(net, quant=True, ranges=bench.calibrate(net, xf))
    xq = quantize(xf, 2.0 / 255.0, 128, OperandType.TENSOR_QUANT8_ASYMM)
    _, yq = bench.driver_latency(gq, xq, runs=1)
    np.testing.assert_array_equal(yq, bench.RegistryRunner(gq).run(xq)[gq.outputs[0]])
    # the quantized probabilities (scale 1/256) follow the float ones
    assert np.abs(yq.astype(np.float64) / 256.0 - yf).max() < 0.1


def test_per_operation_overhead_chain() -> None:
    """The ADD chain of `nnhal bench`'s overhead line computes what the kernels do, and the figure is printed."""
    import io

    from nnhal.engine.executor import Executor
    from nnhal.hal import OperandType, OperationType
    from nnhal.ops.base import OutputSpec, Tensor
    from nnhal.ops.run import run_operation
    from nnhal.tools.bench import overhead
    from nnhal.tools.bench.lowering import to_model

    g = overhead.add_chain(3)
    model = to_model(g)
    x = np.arange(-8, 8, dtype=np.int8).reshape(1, 16)
    (got,) = Executor(model, []).run([x])
    c = g.operands[1]
    want = x
    for _ in range(3):
        (want,) = run_operation(OperationType.ADD, [Tensor(OperandType.TENSOR_QUANT8_ASYMM_SIGNED, want, 0.05, -3),
                                                     Tensor(c.type, c.value, c.scale, c.zp),
                                                     Tensor(OperandType.INT32, np.array(0, np.int32))],
                                [OutputSpec(OperandType.TENSOR_QUANT8_ASYMM_SIGNED, (1, 16), 0.05, -3)],
                                constants=[False, True, True])
    np.testing.assert_array_equal(got, want)
    out = io.StringIO()
    r = overhead.report(out, n=5, runs=5)
    assert r["ops"] == 5 and r["chain_ms"] > 0
    assert "per-operation overhead" in out.getvalue() and "chain of 5 quantized ADDs" in out.getvalue()
