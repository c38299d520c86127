"""``nnhal demo``: prepare and run a handful of real models from the
conformance vectors on a driver, through the public HAL API, and print the
results, pass/fail against the reference outputs and timings."""

from __future__ import annotations

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


def run_demo(vector_root: str, device_name: str = "sample-all") -> int:
    import nnhal

    device = nnhal.get_device(device_name) if device_name in nnhal.IN_PROCESS_DEVICES else nnhal.connect(device_name)
    _, version = device.getVersionString()
    print(f"device {device_name}: {version}\n")
    runner = Runner(device, modes=("sync",), variants=("plain",))
    failures = 0
    for rel, name in DEMO_MODELS:
        path = Path(vector_root) / rel
        if not path.exists():
            print(f"{rel}: missing vector file")
            failures += 1
            continue
        vm = next(m for m in vectors.load_file(path) if name is None or m.name == name)
        t0 = time.perf_counter()
        status, prepared, msg = runner.prepare(vm, dynamic=False)
        t_prep = (time.perf_counter() - t0) * 1e3
        ops = ",".join(sorted(vm.operation_types))
        print(f"{vm.name}  ({ops})")
        if status != hal.ErrorStatus.NONE:
            ok = vm.expectFailure
            failures += not ok
            print(f"  prepare: {hal.ErrorStatus(status).name} {msg}  -> {'PASS (expected failure)' if ok else 'FAIL'}\n")
            continue
        res = runner._run_mode(vm, prepared, "sync", False,
                               lambda mode, st, m="", err=0.0: (st, m, err))
        st, m, err = res
        # one more timed execution for the figures
        t1 = time.perf_counter()
        from nnhal.conformance.runner import RequestPools, _nbytes

        pools = RequestPools(vm.input_values(), [max(_nbytes(o), 1) for o in vm.output_operands()])
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
    print(f"{len(DEMO_MODELS) - failures}/{len(DEMO_MODELS)} models match the reference")
    return 1 if failures else 0
