"""Section "generated": VTS 1.3's ``GeneratedTestHarness.cpp`` over the
vector models, which is what ``nnhal conformance`` runs (:mod:`nnhal.
conformance.runner`): every model through the four executors (sync, async,
burst, fenced) with timing NO and YES, the dynamic output shape variant
(``DynamicOutputShapeTest``), the quant8 signed coupling
(``QuantizationCouplingTest``), and the memory-domain runs with every input
and output in driver-allocated buffers (``MemoryDomainTest``: async, sync,
fenced).  One case per model, variant and executor; the runner's verdict
and message become the case's status and actual answer."""

from __future__ import annotations

from typing import Any, Optional

from nnhal import hal
from nnhal.conformance.runner import MODES, VARIANTS, CaseResult, Runner
from nnhal.conformance.vectors import VectorModel
from nnhal.conformance.vts.case import Case
from nnhal.conformance.vts.request import model_id

SECTION = "generated"
MEMORY_DOMAIN_MODES = ("async", "sync", "fenced")
_TESTS = {"plain": "GeneratedTest", "dynamic": "DynamicOutputShapeTest", "signed": "QuantizationCouplingTest",
          "signed+dynamic": "QuantizationCouplingTest+DynamicOutputShape"}


class Generated:
    """The runners of one device (kept across models: a burst per prepared model)."""

    def __init__(self, device: hal.IDevice):
        self.runner = Runner(device, MODES, VARIANTS, "ashmem")
        self.device_runner = Runner(device, MEMORY_DOMAIN_MODES, ("plain",), "device")

    def run_model(self, vm: VectorModel, sample: Optional[int] = None) -> list[Case]:
        mid = model_id(vm)
        out = [_case(mid, r, _TESTS.get(r.variant, r.variant), vm) for r in self.runner.run_model(vm)]
        out += [_case(mid, r, "MemoryDomainTest", vm) for r in self.device_runner.run_model(vm)]
        return out


def _case(mid: str, r: CaseResult, test: str, vm: VectorModel) -> Case:
    expected = "an error" if vm.expectFailure else "NONE and the expected outputs"
    actual = r.message or ("as expected" if r.status == "pass" else r.status)
    # NOTE: a skip is VTS's early return (no device memory allocated): the driver does not offer it
    status = "unsupported" if r.status == "skip" else r.status
    model = mid if r.variant in ("plain", "dynamic") else f"{mid}_signed"
    return Case(SECTION, f"TestGenerated.{test}", model, r.mode, expected, actual, status,
                r.message if status != "pass" else "", r.seconds)


_CACHE: dict[int, Generated] = {}


def run_model(device: Any, vm: VectorModel, sample: Optional[int] = None) -> list[Case]:
    g = _CACHE.get(id(device))
    if g is None or g.runner.device is not device:
        g = _CACHE[id(device)] = Generated(device)
    return g.run_model(vm, sample)
