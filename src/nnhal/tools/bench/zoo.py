"""The model zoo of ``nnhal bench``: MobileNet v1 and v2 as layer lists
(the published structure, random float weights, NHWC)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from nnhal.hal import OperandType, OperationType

T = OperandType
Op = OperationType
RELU6 = 3
SAME = 1
CONV_OPS = (Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.FULLY_CONNECTED)

# --------------------------------------------------------------------------
# network description (float weights, NHWC)


@dataclass
class Layer:
    kind: str  # conv | dw | add | pool | fc | softmax
    inputs: list[str]
    output: str
    act: int = 0
    stride: int = 1
    w: Optional[np.ndarray] = None
    b: Optional[np.ndarray] = None


@dataclass
class Net:
    name: str
    input_shape: tuple[int, ...]
    layers: list[Layer] = field(default_factory=list)


class _NetBuilder:
    def __init__(self, name: str, size: int, rng: np.random.Generator) -> None:
        self.net = Net(name, (1, size, size, 3))
        self.rng = rng
        self.n = 0
        self.ch = 3

    def _name(self) -> str:
        self.n += 1
        return f"t{self.n}"

    def conv(self, x: str, cout: int, k: int, stride: int, act: int) -> str:
        fan_in = k * k * self.ch
        w = self.rng.standard_normal((cout, k, k, self.ch)).astype(np.float32) * np.float32(np.sqrt(2.0 / fan_in))
        b = (self.rng.standard_normal(cout) * 0.05).astype(np.float32)
        y = self._name()
        self.net.layers.append(Layer("conv", [x], y, act, stride, w, b))
        self.ch = cout
        return y

    def dw(self, x: str, stride: int, act: int) -> str:
        w = self.rng.standard_normal((1, 3, 3, self.ch)).astype(np.float32) * np.float32(np.sqrt(2.0 / 9))
        b = (self.rng.standard_normal(self.ch) * 0.05).astype(np.float32)
        y = self._name()
        self.net.layers.append(Layer("dw", [x], y, act, stride, w, b))
        return y

    def add(self, a: str, b: str) -> str:
        y = self._name()
        self.net.layers.append(Layer("add", [a, b], y))
        return y

    def head(self, x: str, classes: int) -> None:
        p = self._name()
        self.net.layers.append(Layer("pool", [x], p))
        w = self.rng.standard_normal((classes, self.ch)).astype(np.float32) * np.float32(np.sqrt(1.0 / self.ch))
        b = (self.rng.standard_normal(classes) * 0.05).astype(np.float32)
        logits = self._name()
        self.net.layers.append(Layer("fc", [p], logits, 0, 1, w, b))
        self.net.layers.append(Layer("softmax", [logits], "probs"))


def _c(ch: float, alpha: float) -> int:
    return max(8, int(ch * alpha))


def mobilenet_v1(size: int = 224, alpha: float = 1.0, classes: int = 1000, seed: int = 0) -> Net:
    """MobileNet v1: 3x3/2 stem, 13 depthwise-separable blocks, pool, FC."""
    nb = _NetBuilder(f"mobilenet_v1_{alpha:g}_{size}", size, np.random.default_rng(seed))
    x = nb.conv("input", _c(32, alpha), 3, 2, RELU6)
    for cout, stride in [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + \
                        [(1024, 2), (1024, 1)]:
        x = nb.dw(x, stride, RELU6)
        x = nb.conv(x, _c(cout, alpha), 1, 1, RELU6)
    nb.head(x, classes)
    return nb.net


def mobilenet_v2(size: int = 224, alpha: float = 1.0, classes: int = 1000, seed: int = 1) -> Net:
    """MobileNet v2: 3x3/2 stem, 17 inverted residual bottlenecks (expand
    1x1 + ReLU6, depthwise 3x3 + ReLU6, linear 1x1 projection, residual add
    when the shape is kept), 1x1 to 1280, pool, FC."""
    nb = _NetBuilder(f"mobilenet_v2_{alpha:g}_{size}", size, np.random.default_rng(seed))
    x = nb.conv("input", _c(32, alpha), 3, 2, RELU6)
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                       (6, 160, 3, 2), (6, 320, 1, 1)]:
        for i in range(n):
            stride = s if i == 0 else 1
            cin = nb.ch
            y = x
            if t != 1:
                y = nb.conv(y, cin * t, 1, 1, RELU6)
            y = nb.dw(y, stride, RELU6)
            y = nb.conv(y, _c(c, alpha), 1, 1, 0)
            x = nb.add(x, y) if (stride == 1 and cin == nb.ch) else y
    x = nb.conv(x, max(1280, _c(1280, alpha)) if alpha > 1.0 else 1280, 1, 1, RELU6)
    nb.head(x, classes)
    return nb.net
