"""The example extension through the client runtime: a model mixing
``com.example.fibonacci``'s ``EXAMPLE_FIBONACCI`` with ordinary operations,
compiled across ``example-fibonacci`` and ``sample-all`` (docs/extensions.md).

    python examples/fibonacci_runtime.py
"""

import numpy as np

from nnhal import hal, runtime
from nnhal.drivers.fibonacci import EXAMPLE_FIBONACCI, EXAMPLE_TENSOR_QUANT64_ASYMM, EXTENSION_NAME, quant64_params

m = runtime.Model()
fib = m.extension_operation_type(EXTENSION_NAME, EXAMPLE_FIBONACCI)  # (prefix << 16) | 0, this model's prefix
q64 = m.extension_operand_type(EXTENSION_NAME, EXAMPLE_TENSOR_QUANT64_ASYMM)  # read back as uint64

n = m.input("n", np.float32, [1])
n1 = m.operation(hal.OperationType.ADD, [n, np.ones(1, np.float32), 0], (np.float32, [1]))  # n + 1
seq = m.operation(fib, [n1], (np.float32, [0]))  # F(1) .. F(n + 1); the length known when it runs
m.output(m.operation(hal.OperationType.MUL, [seq, np.full(1, 2, np.float32), 0], (np.float32, [0])), "twice")
m.output(m.operation(fib, [n1], m.tensor(q64, [0], extension_params=quant64_params(0.5, 3))), "quantized")

with runtime.Compilation(m, ["example-fibonacci", "sample-all"]) as c:
    print(c.placement())
    out = c.run({"n": np.array([9], np.float32)})
print("twice:", out["twice"].tolist())
print("quantized:", out["quantized"].tolist())
assert out["twice"].tolist() == [2, 2, 4, 6, 10, 16, 26, 42, 68, 110]
assert out["quantized"].tolist() == [5, 5, 7, 9, 13, 19, 29, 45, 71, 113]  # F / 0.5 + 3
