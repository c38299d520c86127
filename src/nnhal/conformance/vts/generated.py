"""Section "generated": the ``GeneratedTestHarness.cpp`` of each VTS over the
vector models, which is what ``nnhal conformance`` runs (:mod:`nnhal.
conformance.runner`), through the face judged: every model through every
executor of the face (VTS 1.3: sync, async, burst, fenced; AIDL: sync,
burst, fenced and, from version 4, reusable sync and fenced and the
``*WithConfig`` calls, all again on the model prepared with
``prepareModelWithConfig``) with timing NO and YES, the dynamic output shape
variant (``DynamicOutputShapeTest``), the quant8 signed coupling
(``QuantizationCouplingTest``), and the memory-domain runs with every input
and output in driver-allocated buffers (``MemoryDomainTest``: VTS 1.3
async, sync, fenced; AIDL every executor, and in hardware-buffer blobs too,
as the AIDL VTS runs on a device).  One case per model, variant and
executor; the runner's verdict and message become the case's status and
actual answer."""

from __future__ import annotations

from typing import Any, Optional

from nnhal.conformance.face import as_face
from nnhal.conformance.runner import MODES, VARIANTS, CaseResult, Runner
from nnhal.conformance.vectors import VectorModel
from nnhal.conformance.vts.case import Case
from nnhal.conformance.vts.request import model_id

SECTION = "generated"
MEMORY_DOMAIN_MODES = ("async", "sync", "fenced")  # VTS 1.3's
_TESTS = {"plain": "GeneratedTest", "dynamic": "DynamicOutputShapeTest", "signed": "QuantizationCouplingTest",
          "signed+dynamic": "QuantizationCouplingTest+DynamicOutputShape"}


class Generated:
    """The runners of one device (kept across models: a burst per prepared
    model), each with the label its cases carry before the executor."""

    def __init__(self, device: Any):
        self.device = device
        face = as_face(device)
        self.runners: list[tuple[str, str, Runner]] = []
        if face.name == "hidl":
            self.runners = [("", "", Runner(face, MODES, VARIANTS, "ashmem")),
                            ("MemoryDomainTest", "", Runner(face, MEMORY_DOMAIN_MODES, ("plain",), "device"))]
            return
        modes = face.all_modes
        self.runners.append(("", "", Runner(face, modes, VARIANTS, "ashmem")))
        if face.has_config:
            # NOTE: as VTS (version 4): every test but the quantization coupling again on a prepareModelWithConfig
            self.runners.append(("", "prepareModelWithConfig, ",
                                 Runner(face, modes, ("plain", "dynamic"), "ashmem", prepare_config=True)))
        for memory in ("hardware_buffer_blob", "device"):
            self.runners.append(("MemoryDomainTest", f"{memory}, ", Runner(face, modes, ("plain",), memory)))
            if face.has_config:
                self.runners.append(("MemoryDomainTest", f"prepareModelWithConfig, {memory}, ",
                                     Runner(face, modes, ("plain",), memory, prepare_config=True)))

    def run_model(self, vm: VectorModel, sample: Optional[int] = None) -> list[Case]:
        mid = model_id(vm)
        return [_case(mid, r, test or _TESTS.get(r.variant, r.variant), label, vm)
                for test, label, runner in self.runners for r in runner.run_model(vm)]


def _case(mid: str, r: CaseResult, test: str, label: str, vm: VectorModel) -> Case:
    expected = "an error" if vm.expectFailure else "NONE and the expected outputs"
    actual = r.message or ("as expected" if r.status == "pass" else r.status)
    # NOTE: a skip is VTS's early return (no device memory allocated): the driver does not offer it
    status = "unsupported" if r.status == "skip" else r.status
    model = mid if r.variant in ("plain", "dynamic") else f"{mid}_signed"
    return Case(SECTION, f"TestGenerated.{test}", model, f"{label}{r.mode}", expected, actual, status,
                r.message if status != "pass" else "", r.seconds)


_CACHE: dict[int, Generated] = {}


def run_model(device: Any, vm: VectorModel, sample: Optional[int] = None) -> list[Case]:
    g = _CACHE.get(id(device))
    if g is None or g.device is not device:
        g = _CACHE[id(device)] = Generated(device)
    return g.run_model(vm, sample)

