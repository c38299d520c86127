"""``nnhal demo``: prepare and run a handful of real models from the
conformance vectors on a driver, through the public HAL API, and print the
results, pass/fail against the reference outputs and timings; then run trained
``.tflite`` models from ``../shared/models`` (or ``$NNHAL_MODELS``) through the
HAL and print what they found next to LiteRT."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from nnhal import hal
from nnhal.conformance import vectors
from nnhal.conformance.runner import Runner

# (vector file, model name): real networks and graphs of several families
DEMO_MODELS = [
    ("V1_0/conv_float.json.gz", None),
    ("V1_0/depthwise_conv2d_quant8_large.json.gz", None),
    ("V1_0/softmax_quant8_2.json.gz", None),
    ("V1_0/lstm3.json.gz", None),
    ("V1_2/bbox_graph.json.gz", None),
    ("V1_3/while_sum_of_powers_quant8.json.gz", None),
    ("V1_3/if_constant.json.gz", None),
    ("V1_3/hard_swish.json.gz", None),
    ("V1_3/while_infinite_loop.json.gz", None),
]


def _summary(a: Any) -> str:
    a = np.asarray(a)
    flat = a.reshape(-1)
    head = ", ".join(f"{v:.4g}" if a.dtype.kind == "f" else str(v) for v in flat[:6])
    return f"{a.dtype}{list(a.shape)} [{head}{', ...' if flat.size > 6 else ''}]"


# NOTE: what an expected failure must end in: VTS's infinite-loop test accepts only a missed deadline
# (the loop timeout, 1 ms here as VTS sets it); any other expected failure must at least fail at execution
_EXPECTED_STATUS = {"while_infinite_loop": (hal.ErrorStatus.MISSED_DEADLINE_TRANSIENT,
                                            hal.ErrorStatus.MISSED_DEADLINE_PERSISTENT)}


def _unsupported(device: Any, vm: Any) -> str:
    """Why ``device`` refuses the model ("" when it takes every operation): the device's own reasons."""
    import nnhal

    try:
        status, flags, reasons = nnhal.supported_operations(device, vm.build_model())
    except Exception as e:  # noqa: BLE001 - a device that cannot answer is reported, the demo goes on
        return f"getSupportedOperations_1_3 failed: {e}"
    if status != hal.ErrorStatus.NONE:
        return f"getSupportedOperations_1_3 returned {hal.ErrorStatus(status).name}"
    ops = vm.main.operations
    refused = [f"{hal.operation_name(op.type)}: {r}" for op, ok, r in zip(ops, flags, reasons) if not ok]
    return "; ".join(dict.fromkeys(refused))


def run_demo(vector_root: str, device_name: str = "sample-all", device: Any = None) -> int:
    import nnhal

    if device is None:
        device = nnhal.open_device(device_name)
    _, version = device.getVersionString()
    print(f"device {device_name}: {version}\n")
    runner = Runner(device, modes=("sync",), variants=("plain",))
    failures = unsupported = 0
    for rel, name in DEMO_MODELS:
        path = Path(vector_root) / rel
        if not path.exists():
            print(f"{rel}: missing vector file")
            failures += 1
            continue
        vm = next(m for m in vectors.load_file(path) if name is None or m.name == name)
        ops = ",".join(sorted(vm.operation_types))
        print(f"{vm.name}  ({ops})")
        why = _unsupported(device, vm)
        if why:
            unsupported += 1
            print(f"  unsupported ({why})  -> not run\n")
            continue
        t0 = time.perf_counter()
        status, prepared, msg = runner.prepare(vm, dynamic=False)
        t_prep = (time.perf_counter() - t0) * 1e3
        if status != hal.ErrorStatus.NONE:
            failures += 1
            want = " (an expected failure must fail at execution, not at preparation)" if vm.expectFailure else ""
            print(f"  prepare: {hal.ErrorStatus(status).name} {msg}  -> FAIL{want}\n")
            continue
        if vm.expectFailure:
            failures += not _expected_failure(vm, prepared, t_prep)
            continue
        st, m, _ = runner.run_mode(vm, prepared, "sync", False, lambda mode, st, m="", err=0.0: (st, m, err))
        # one more timed execution for the figures
        t1 = time.perf_counter()
        from nnhal.conformance.runner import RequestPools, nbytes

        pools = RequestPools(vm.input_values(), [max(nbytes(o), 1) for o in vm.output_operands()])
        s2, shapes, timing = prepared.executeSynchronously_1_3(pools.request(), hal.MeasureTiming.YES,
                                                               hal.OptionalTimePoint(), hal.OptionalTimeoutDuration())
        t_exec = (time.perf_counter() - t1) * 1e3
        if s2 == hal.ErrorStatus.NONE:
            for k, o in enumerate(vm.output_operands()):
                print(f"  output {k}: {_summary(pools.read_output(k, o, list(shapes[k].dimensions)))}")
        pools.close()
        failures += st != "pass"
        dev = f"{timing.timeOnDevice} us on device" if timing.timeOnDevice != hal.UINT64_MAX else "no timing"
        print(f"  status {hal.ErrorStatus(s2).name}; prepare {t_prep:.1f} ms, execute {t_exec:.1f} ms ({dev}); "
              f"{'PASS' if st == 'pass' else 'FAIL'} {m}\n")
    ran = len(DEMO_MODELS) - unsupported
    print(f"{ran - failures}/{ran} models run match the reference" +
          (f"; {unsupported} unsupported by {device_name}" if unsupported else ""))
    failures += run_trained_models(device, device_name=device_name)
    return 1 if failures else 0


def _expected_failure(vm: Any, prepared: Any, t_prep: float) -> bool:
    """A model that must fail at execution: PASS only with the status VTS expects."""
    from nnhal.conformance.runner import RequestPools, nbytes

    expected = _EXPECTED_STATUS.get(vm.name)
    timeout = hal.OptionalTimeoutDuration(nanoseconds=1_000_000) if expected else hal.OptionalTimeoutDuration()
    pools = RequestPools(vm.input_values(), [max(nbytes(o), 1) for o in vm.output_operands()])
    t1 = time.perf_counter()
    try:
        status, _, _ = prepared.executeSynchronously_1_3(pools.request(), hal.MeasureTiming.NO,
                                                         hal.OptionalTimePoint(), timeout)
    finally:
        pools.close()
    t_exec = (time.perf_counter() - t1) * 1e3
    name = hal.ErrorStatus(status).name
    if expected:
        ok = status in expected
        want = " or ".join(s.name for s in expected)
    else:
        ok = status != hal.ErrorStatus.NONE
        want = "an error"
    print(f"  status {name}; prepare {t_prep:.1f} ms, execute {t_exec:.1f} ms; expected {want}: "
          f"{'PASS (failed as expected)' if ok else 'FAIL'}\n")
    return ok


# --------------------------------------------------------------------------
# trained .tflite models from ../shared/models, through the HAL, next to LiteRT

KWS_LABELS = ["left", "right", "up", "down", "stop", "go", "_unknown_", "_silence_"]


def default_models() -> Path:
    """$NNHAL_MODELS, else ../shared/models beside the checkout or the current folder."""
    here = Path(__file__).resolve().parents[3] / ".." / "shared" / "models"  # NOTE: src/nnhal/cli/demo.py
    for cand in (os.environ.get("NNHAL_MODELS"), here, Path.cwd() / ".." / "shared" / "models",
                 Path.cwd() / "shared" / "models"):
        if cand and Path(cand).is_dir():
            return Path(cand).resolve()
    return here.resolve()


def _palm_image() -> np.ndarray:
    """A synthetic 192x192 RGB image in [-1, 1]: a skin-toned open hand (palm disc and five
    finger bars) on a grey background."""
    yy, xx = np.mgrid[0:192, 0:192].astype(np.float32)
    img = np.full((192, 192, 3), 0.35, np.float32)
    hand = ((yy - 120) ** 2 + (xx - 96) ** 2) < 38 ** 2
    for k, x0 in enumerate((52, 74, 96, 118, 140)):
        top = 40 + abs(k - 2) * 12
        hand |= (np.abs(xx - x0) < 8) & (yy > top) & (yy < 110)
    img[hand] = (0.87, 0.67, 0.55)
    return (img[None] * 2 - 1).astype(np.float32)


def _vww_image() -> np.ndarray:
    """A low-frequency 96x96 RGB image with pixel values in [0, 255] (as the model expects)."""
    rng = np.random.default_rng(3)
    return np.kron(rng.uniform(0, 255, (1, 6, 6, 3)), np.ones((1, 16, 16, 1))).astype(np.float32)


def _kws_input() -> np.ndarray:
    rng = np.random.default_rng(5)
    return rng.integers(-128, 128, (1, 59, 49, 1)).astype(np.int8)


def reference_kernels(device_name: str, quantized: bool) -> str:
    """The LiteRT kernels a device's outputs are compared with: a quantized model on nnhal's reference
    kernels against TFLite's reference kernels (both requantize with two roundings, as NNAPI's
    reference); on a LiteRT device against XNNPACK, which it runs (one rounding); float models
    against the builtin kernels."""
    if not quantized:
        return "builtin"
    return "xnnpack" if device_name.startswith("litert") else "ref"


def run_trained_models(device: Any, models_dir: Path | None = None, device_name: str = "sample-all") -> int:
    """Keyword spotting, visual wake words and palm detection through ``device``; prints what
    each found next to LiteRT (builtin kernels) when it is installed.  Returns the number of
    models that failed (conversion, execution, or a mismatch with LiteRT beyond tolerance)."""
    from nnhal import tflite
    from nnhal.delegate.run import HalSession, LiteRT, diff

    models_dir = models_dir or default_models()
    print(f"\ntrained .tflite models from {models_dir} (through the HAL{', next to LiteRT' if tflite.available() else ''})")
    if not tflite.available():
        print("  ai-edge-litert is not installed: pip install 'nnhal[litert]'")
        return 0
    cases = [("kws_mobilenetv2_int8.tflite", _kws_input), ("vww_mobilenetv1_int8.tflite", _vww_image),
             ("palm_detection_lite.tflite", _palm_image)]
    failures = 0
    for fname, make in cases:
        path = models_dir / fname
        if not path.exists():
            print(f"{fname}: missing")
            failures += 1
            continue
        try:
            model, io = tflite.load(path)
            why = _refused(device, model)
            if why:
                tflite.free_model(model)
                print(f"{fname}: unsupported ({why})")
                continue
            t0 = time.perf_counter()
            session = HalSession(device, model, io)
            t_prep = (time.perf_counter() - t0) * 1e3
            tflite.free_model(model)
            x = [make()]
            t1 = time.perf_counter()
            ours = session.run(x)
            t_exec = (time.perf_counter() - t1) * 1e3
            session.close()
        except Exception as e:  # noqa: BLE001 - reported, the demo goes on
            print(f"{fname}: FAIL {e}")
            failures += 1
            continue
        # NOTE: int8 outputs against TFLite's reference kernels: LiteRT's optimized int8 kernels round
        # some requantizations differently, and 1-step differences grow through deep int8 networks
        kernels = reference_kernels(device_name, io.outputs[0].quantized)
        ref = LiteRT(path, kernels=kernels).run(x)
        ok = all(diff(a, r, d).ok() for a, r, d in zip(ours, ref, io.outputs))
        failures += not ok
        print(f"{fname}  ({sum(io.operators.values())} TFLite operators -> {sum(io.hal_operations.values())} "
              f"HAL operations; prepare {t_prep:.0f} ms, execute {t_exec:.0f} ms)")
        if fname.startswith("kws"):
            d = io.outputs[0]
            p_ours = (ours[0].astype(np.float32) - d.zero_point) * d.scale
            p_ref = (ref[0].astype(np.float32) - d.zero_point) * d.scale
            order = np.argsort(-p_ours[0])[:3]
            print("  keyword probabilities (nnhal / LiteRT): " + ", ".join(
                f"{KWS_LABELS[k]} {p_ours[0, k]:.3f}/{p_ref[0, k]:.3f}" for k in order))
        elif fname.startswith("vww"):
            print(f"  p(person) nnhal {ours[0][0, 1]:.4f}, LiteRT {ref[0][0, 1]:.4f}")
        else:
            scores = 1 / (1 + np.exp(-ours[1].reshape(-1).astype(np.float64)))
            ref_scores = 1 / (1 + np.exp(-ref[1].reshape(-1).astype(np.float64)))
            top = np.argsort(-scores)[:3]
            print("  top palm anchors (score nnhal / LiteRT): " + ", ".join(
                f"#{k} {scores[k]:.4f}/{ref_scores[k]:.4f}" for k in top))
        print(f"  {'PASS' if ok else 'FAIL'}: outputs match LiteRT {kernels} kernels "
              f"({'; '.join(str(diff(a, r, d)) for a, r, d in zip(ours, ref, io.outputs))})")
    return failures


def _refused(device: Any, model: Any) -> str:
    import nnhal

    status, flags, reasons = nnhal.supported_operations(device, model)
    if status != hal.ErrorStatus.NONE:
        return f"getSupportedOperations_1_3 returned {hal.ErrorStatus(status).name}"
    refused = [f"{hal.operation_name(op.type)}: {r}" for op, ok, r in zip(model.main.operations, flags, reasons)
               if not ok]
    return "; ".join(list(dict.fromkeys(refused))[:3]) + (" ..." if len(set(refused)) > 3 else "")
