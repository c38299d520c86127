"""TFLite models as Android's NNAPI delegate runs them.

The delegate (TFLite's ``delegates/nnapi/nnapi_delegate.cc``) checks every
operator against its rules for the device's API level, hands the accepted
ones to NNAPI as partitions (the largest ``max_number_delegated_partitions``)
and leaves the rest on TFLite's CPU kernels.  Here the NNAPI partitions are
HAL models on an nnhal device (or through the client runtime) and the CPU
partitions are TFLite sub-models on LiteRT:

>>> from nnhal import delegate
>>> plan = delegate.make_plan("model.tflite", android_api=29)          # doctest: +SKIP
>>> print(plan.explain())                                          # doctest: +SKIP
>>> with delegate.Runner(plan) as r:                               # doctest: +SKIP
...     outputs = r.run(inputs)

- :mod:`~nnhal.delegate.rules`: ``Validate`` as a table, with the delegate's lines;
- :mod:`~nnhal.delegate.partition`: TFLite's greedy partitioning and the partition limit;
- :mod:`~nnhal.delegate.plan`: the plan (``delegate`` or ``max``), its JSON and explanation;
- :mod:`~nnhal.delegate.model`: the graph read once, sparse constants densified at load;
- :mod:`~nnhal.delegate.halmodel`: NNAPI partitions at the API level's HAL version;
- :mod:`~nnhal.delegate.cut` and :mod:`~nnhal.delegate.runner`: the sub-models and the runner;
- :mod:`~nnhal.delegate.run`: a HAL model run through a device (``HalSession``) beside LiteRT on the
  original file (``LiteRT``), inputs made and outputs compared;
- :mod:`~nnhal.delegate.picture`: the plan drawn (``nnhal graph``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Callable, Optional

if TYPE_CHECKING:
    from nnhal.delegate.model import Graph, densify
    from nnhal.delegate.plan import Options, Plan, build_plan
    from nnhal.delegate.runner import PlanError, Runner, run_plan

# NOTE: the public names, imported when first used: the process that contains LiteRT
# (nnhal.delegate.litert_child) imports this package and needs none of them
_LAZY = {"Graph": "model", "densify": "model", "Options": "plan", "Plan": "plan", "build_plan": "plan",
         "PlanError": "runner", "Runner": "runner", "run_plan": "runner"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_plan(model: Any, device_of: Optional[Callable[[str], Any]] = None, **options: Any) -> "Plan":
    """The plan of a .tflite model (a path, its bytes or a :class:`Graph`); ``options`` are
    :class:`Options`' fields (``plan``, ``android_api``, ``max_partitions``, ``accelerator``, ``device``,
    ``devices``, ``allow_fp16``, ``allow_nnapi_cpu``, ``preference``, ``batch``); ``device_of``: how a
    device name becomes an ``IDevice`` of either interface (default: the device's face opened by name,
    AIDL from API 31 when it has one: ``nnhal.runtime.face.open_face``)."""
    from nnhal.delegate.plan import Options, build_plan

    return build_plan(model, Options(**options), device_of)


def default_device(name: str) -> Any:
    """An in-process device by name, else a running service (``nnhal.open_device``)."""
    import nnhal

    return nnhal.open_device(name)


__all__ = ["Graph", "Options", "Plan", "PlanError", "Runner", "build_plan", "default_device", "densify", "make_plan",
           "run_plan"]
