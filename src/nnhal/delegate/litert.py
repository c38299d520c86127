"""LiteRT's interpreter on a ``.tflite`` file, as nnhal runs and times it (:class:`LiteRT`, :func:`timed`):
a light module (numpy and LiteRT), so the child process that contains LiteRT
(:mod:`nnhal.delegate.litert_child`) starts without the rest of nnhal."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from nnhal.tflite.schema import interpreter_module, make_interpreter


class LiteRT:
    """LiteRT's interpreter on the same file: ``kernels`` "builtin" (the optimized builtin kernels,
    no default delegate), "ref" (TFLite's reference kernels) or "xnnpack" (the default delegate)."""

    def __init__(self, path: str | Path | bytes, threads: int = 1, kernels: str = "builtin", preserve: bool = False):
        mod = interpreter_module()
        rt = {"builtin": mod.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES, "ref": mod.OpResolverType.BUILTIN_REF,
              "xnnpack": mod.OpResolverType.AUTO}[kernels]
        src = {"model_content": bytes(path)} if isinstance(path, (bytes, bytearray)) else {"model_path": str(path)}
        self.it = make_interpreter(**src, num_threads=threads, experimental_op_resolver_type=rt,
                                   experimental_preserve_all_tensors=preserve)
        self.inputs = self.it.get_input_details()
        self.outputs = self.it.get_output_details()
        self.shapes: Optional[list] = None

    def set_inputs(self, inputs: Sequence[np.ndarray]) -> None:
        shapes = [list(a.shape) for a in inputs]
        if shapes != self.shapes:
            for d, s in zip(self.inputs, shapes):
                if list(d["shape"]) != s:
                    self.it.resize_tensor_input(d["index"], s)
            self.it.allocate_tensors()
            self.shapes = shapes
        for d, a in zip(self.inputs, inputs):
            self.it.set_tensor(d["index"], a)

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        self.set_inputs(inputs)
        self.it.invoke()
        return [self.it.get_tensor(d["index"]).copy() for d in self.outputs]

    def tensor(self, k: int) -> np.ndarray:
        return self.it.get_tensor(k).copy()


def timed(fn: Any, repeats: int, warmup: int = 2) -> list[float]:
    """Wall-clock seconds of ``repeats`` calls after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out
