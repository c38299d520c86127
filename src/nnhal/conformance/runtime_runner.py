"""The conformance vectors run through the client runtime (``nnhal.runtime``)
over several devices (``nnhal conformance --devices A,B,...``): each model is
compiled across the devices (partitioned wherever a device refuses part of
it, operations no device takes on the CPU reference) and executed with numpy
arrays in the runtime's four modes (sync, async, burst, fenced), as NNAPI's
CTS runs the generated tests through the runtime.

Variants as :mod:`nnhal.conformance.runner`: ``plain``; ``signed`` (quant8
models converted to QUANT8_ASYMM_SIGNED); ``dynamic`` (model outputs of
unknown shape: the runtime must return the real shapes; a fenced execution
must refuse them with INVALID_ARGUMENT, as NNAPI's
startComputeWithDependencies).  The request-level checks of the HAL runner
(an output one byte short) do not apply: the runtime sizes its own buffers.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from nnhal import hal
from nnhal.conformance.compare import compare
from nnhal.conformance.runner import (
    BASIC_MODES,
    VARIANTS,
    CaseResult,
    case_result,
    run_variants,
)
from nnhal.conformance.vectors import VectorModel
from nnhal.platform import memory as hal_memory
from nnhal.runtime import Compilation, CompilationError, ExecutionError

S = hal.ErrorStatus
T = hal.OperandType


class RuntimeRunner:
    """Runs vector models through ``nnhal.runtime`` over ``devices`` (names)."""

    def __init__(self, devices: Sequence[str], modes: tuple[str, ...] = BASIC_MODES,
                 variants: tuple[str, ...] = VARIANTS):
        from nnhal.runtime import discovery as rt_devices

        self.devices = [rt_devices.get(d) for d in devices]
        self.modes = modes
        self.variants = variants
        self.partitions: dict[str, int] = {}  # model name -> partitions of its plain variant

    def run_model(self, vm: VectorModel) -> list[CaseResult]:
        return run_variants(vm, self.variants, self._run_variant)

    def _run_variant(self, vm: VectorModel, variant: str, dynamic: bool) -> list[CaseResult]:
        result = case_result(vm, variant)

        model = vm.build_model()
        if dynamic:
            for i in model.main.outputIndexes:
                o = model.main.operands[i]
                o.dimensions = [0] * len(o.dimensions)
        comp = Compilation(model, self.devices)
        try:
            try:
                comp.finish()
            except CompilationError as e:
                if vm.expectFailure:
                    return [result(m, "pass", f"failed as expected at compilation ({e})") for m in self.modes]
                return [result(m, "fail", f"compilation: {e}") for m in self.modes]
            except Exception as e:  # noqa: BLE001 - a runtime that raises otherwise is failing
                return [result(m, "fail", f"compilation raised {type(e).__name__}: {e}") for m in self.modes]
            if variant == "plain":
                self.partitions[vm.name] = len(comp.steps)
            out = []
            for mode in self.modes:
                try:
                    out.append(self.run_mode(vm, comp, mode, dynamic, result))
                except Exception as e:  # noqa: BLE001
                    out.append(result(mode, "fail", f"raised {type(e).__name__}: {e}"))
            return out
        finally:
            comp.close()
            for m in model.pools:
                hal_memory.free(m)

    def run_mode(self, vm: VectorModel, comp: Compilation, mode: str, dynamic: bool, result: Any) -> CaseResult:
        inputs = vm.input_values()
        outs = vm.output_operands()
        # NOTE: as VTS's InfiniteLoopTimeoutTest, the infinite loop runs with a 1 ms loop timeout
        infinite_loop = vm.expectFailure and vm.main.operations[0].type == hal.OperationType.WHILE
        zero_sized = any(0 in o.dimensions for o in outs)
        ex = comp.execution()
        try:
            got = ex.compute(inputs, mode=mode, loop_timeout_ns=1_000_000 if infinite_loop else None,
                             measure=mode == "sync")
        except ExecutionError as e:
            if vm.expectFailure:
                return result(mode, "pass", f"failed as expected ({e.status.name})")
            if mode == "fenced" and (dynamic or zero_sized) and e.status == S.INVALID_ARGUMENT:
                return result(mode, "pass", "INVALID_ARGUMENT as expected (fenced needs fully specified outputs)")
            return result(mode, "fail", f"execution: {e}")
        if vm.expectFailure:
            return result(mode, "fail", "expected a failure, the execution succeeded")
        if mode == "fenced" and (dynamic or zero_sized):
            return result(mode, "fail", "a fenced execution with unspecified outputs succeeded")
        timing = ex.timing
        if timing is not None and timing.timeOnDevice != hal.UINT64_MAX and timing.timeOnDevice > timing.timeInDriver:
            return result(mode, "fail", f"timeOnDevice {timing.timeOnDevice} > timeInDriver {timing.timeInDriver}")
        has_fp16 = vm.has_fp16
        worst = 0.0
        for k, o in enumerate(outs):
            name = comp.output_names[k]
            shape = ex.output_shapes[name]
            if list(shape) != list(o.dimensions):
                return result(mode, "fail", f"output {k}: shape {shape} != expected {o.dimensions}")
            expected = o.data if o.data is not None else np.zeros(o.dimensions, got[name].dtype)
            v = compare(got[name], expected, o.type, model_has_fp16=has_fp16, relaxed=vm.isRelaxed, name=vm.name,
                        ignored=o.isIgnored, multinomial_tolerance=vm.multinomialTolerance,
                        multinomial_logits=inputs[0] if vm.multinomialTolerance > 0 else None)
            worst = max(worst, v.max_error)
            if not v.ok:
                return result(mode, "fail", f"output {k}: {v.message}", v.max_error)
        return result(mode, "pass", f"{len(comp.steps)} partition(s)", worst)
