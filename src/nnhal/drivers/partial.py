"""The partial sample drivers Android ships beside ``sample-all``
(``nn/driver/sample/SampleDriverFloatFast.cpp``, ``...FloatSlow``,
``...Quant``, ``...Minimal`` in Android 11): the same CPU reference driver
(the shared front end, :class:`nnhal.driver.device.Device`, over
the sample backend, :class:`nnhal.drivers.sample.SampleBackend`) with an
operation filter in the backend's ``supported`` (so
``getSupportedOperations_1_3`` and ``prepareModel*`` apply it, and each
refusal has its reason), and the fixed capabilities Android gives them.  They exist to
exercise a client runtime's partitioning: each takes only part of a model.

What each takes (as Android's, decided by a main operation's first input):
  * ``sample-float-fast`` / ``sample-float-slow``: first input TENSOR_FLOAT32;
  * ``sample-quant``: first input TENSOR_QUANT8_ASYMM or _SIGNED (for SELECT
    the second input, the first being the boolean condition);
  * ``sample-minimal``: ADD, CONCATENATION and CONV_2D on TENSOR_FLOAT32.
IF and WHILE have a TENSOR_BOOL8 condition / a SUBGRAPH first input, so no
partial driver takes control flow: a runtime keeps it whole elsewhere.

NOTE: these names have two '-' while VTS.md section 7 wants service instance
names with exactly one: they are the names API.md and Android give the
drivers; a service serving one needs its own instance name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from nnhal import hal
from nnhal.drivers.sample import SampleBackend

T = hal.OperandType
OT = hal.OperationType
QUANT8 = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)


def _first_input_type(model: hal.Model, op: hal.Operation, k: int = 0) -> Optional[T]:
    if len(op.inputs) <= k:
        return None
    t = model.main.operands[op.inputs[k]].type
    return T(t) if t in T._value2member_map_ else t


def _type_name(t: object) -> str:
    return t.name if isinstance(t, T) else str(t)


def float_filter(name: str) -> Callable[[hal.Model, hal.Operation], Optional[str]]:
    def accept(model: hal.Model, op: hal.Operation) -> Optional[str]:
        t = _first_input_type(model, op)
        if t is None:
            return f"{name} takes operations whose first input is TENSOR_FLOAT32; this one has no input"
        if t != T.TENSOR_FLOAT32:
            return f"{name} takes operations whose first input is TENSOR_FLOAT32, not {_type_name(t)}"
        return None

    return accept


def quant_filter(model: hal.Model, op: hal.Operation) -> Optional[str]:
    k = 1 if op.type == OT.SELECT else 0
    t = _first_input_type(model, op, k)
    which = "second" if k else "first"
    if t not in QUANT8:
        return (f"sample-quant takes operations whose {which} input is TENSOR_QUANT8_ASYMM(_SIGNED), "
                f"not {_type_name(t) if t is not None else 'missing'}")
    return None


MINIMAL_OPS = (OT.ADD, OT.CONCATENATION, OT.CONV_2D)


def minimal_filter(model: hal.Model, op: hal.Operation) -> Optional[str]:
    if op.type not in MINIMAL_OPS:
        name = OT(op.type).name if op.type in OT._value2member_map_ else str(op.type)
        return f"sample-minimal takes only ADD, CONCATENATION and CONV_2D, not {name}"
    t = _first_input_type(model, op)
    if t != T.TENSOR_FLOAT32:
        return f"sample-minimal takes {OT(op.type).name} on TENSOR_FLOAT32 only, not {_type_name(t)}"
    return None


def _caps(default: tuple[float, float], float32: Optional[tuple[float, float]], relaxed: tuple[float, float],
          control_flow: tuple[float, float] = (1.0, 1.0)) -> hal.Capabilities:
    def info(p: tuple[float, float]) -> hal.PerformanceInfo:
        return hal.PerformanceInfo(execTime=p[0], powerUsage=p[1])

    perf = []
    for t in sorted(T, key=int):
        if t == T.SUBGRAPH:  # NOTE: as measure_capabilities: a subgraph operand has no cost of its own
            continue
        p = float32 if float32 is not None and t in (T.TENSOR_FLOAT32, T.FLOAT32) else default
        perf.append(hal.OperandPerformance(type=t, info=info(p)))
    return hal.Capabilities(relaxedFloat32toFloat16PerformanceScalar=info(relaxed),
                            relaxedFloat32toFloat16PerformanceTensor=info(relaxed), operandPerformance=perf,
                            ifPerformance=info(control_flow), whilePerformance=info(control_flow))


@dataclass(frozen=True)
class PartialDriver:
    name: str
    op_filter: Callable[[hal.Model, hal.Operation], Optional[str]]
    capabilities: Callable[[], hal.Capabilities]


class PartialBackend(SampleBackend):
    """The sample backend taking only what ``spec.op_filter`` accepts (and
    what the reference supports), declaring ``spec.capabilities``."""

    def __init__(self, spec: PartialDriver):
        super().__init__(f"nnhal-{spec.name} 0.1 (CPU reference, numpy; Android's partial sample driver)")
        self.name = spec.name
        self.spec = spec

    measured_capabilities = False  # NOTE: Android's fixed figures: nothing to keep

    def capabilities(self) -> hal.Capabilities:
        return self.spec.capabilities()

    def supported(self, model: hal.Model, defs: list) -> list[tuple[bool, str]]:
        out = []
        for (ok, reason), op in zip(super().supported(model, defs), model.main.operations):
            why = self.spec.op_filter(model, op) if ok else reason
            out.append((why is None, why or ""))
        return out


# NOTE: the capability figures are Android 11's (relative to its CPU path, 1.0): honest in that they
# are what these drivers declare, not measurements of this process.
PARTIAL_DRIVERS: dict[str, PartialDriver] = {
    "sample-float-fast": PartialDriver("sample-float-fast", float_filter("sample-float-fast"),
                                       lambda: _caps((1.0, 1.0), (0.8, 1.2), (0.7, 1.1))),
    "sample-float-slow": PartialDriver("sample-float-slow", float_filter("sample-float-slow"),
                                       lambda: _caps((1.0, 1.0), (1.3, 0.7), (1.2, 0.6))),
    "sample-quant": PartialDriver("sample-quant", quant_filter, lambda: _caps((50.0, 1.0), None, (50.0, 1.0),
                                                                              (50.0, 1.0))),
    "sample-minimal": PartialDriver("sample-minimal", minimal_filter,
                                    lambda: _caps((1.0, 1.0), (0.4, 0.5), (0.4, 0.5))),
}


def backend(name: str) -> PartialBackend:
    """A new backend of the partial driver ``name`` (KeyError if none)."""
    return PartialBackend(PARTIAL_DRIVERS[name])
