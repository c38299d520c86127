"""``nnhal bench``: how fast the sample-all driver runs real networks.

Builds MobileNet v1 and MobileNet v2 (224x224, alpha 1.0, the published layer
structure: SAME-padded 3x3 stem, depthwise-separable / inverted-residual
blocks with ReLU6, average pool, fully connected, softmax) as HAL 1.3 models
with random weights, in float32 and in TENSOR_QUANT8_ASYMM (per-layer scales
calibrated on a float forward pass so activations do not saturate; ReLU6
outputs use scale 6/255 and zero point 0 as TFLite's quantized MobileNets).

It prints:

* the median latency of one whole execution through the driver
  (``prepareModel_1_3`` + ``executeSynchronously_1_3`` on shared-memory
  request pools);
* for each distinct convolution / fully-connected layer shape, the layer's
  achieved GFLOP/s (its kernel timed through the operation registry on the
  real activations) next to numpy's own matmul GFLOP/s at the same GEMM shape
  measured in the same run (a depthwise layer is C independent
  (M x K) @ (K x 1) products: numpy's batched matmul of that shape);
* the ratio of the whole-network latency to the sum of the bare matrix
  products the network needs, and flags every layer below a quarter of the
  matmul speed.  Targets: ratio <= 2, no flagged layer.

Times are medians (the ratio is also given on best times); a layer is flagged
on its best time against numpy's best, which is robust to other load on the
machine.  On a machine whose cores are shared with other work, OpenBLAS's
threads wait for each other and small GEMMs get 10-50x slower: ``--threads 1``
then gives stable, comparable numbers (the kernels' own elementwise threads,
``NNHAL_KERNEL_THREADS``, default 1, step aside by themselves while the load
average is above the core count).  ``--tune-malloc`` shows what keeping freed pages in
the process (glibc ``mallopt``) saves: a fresh multi-MB activation otherwise
page-faults in on every execution.

The package, by concern: :mod:`.zoo` (the networks), :mod:`.lowering` (to HAL
models), :mod:`.calibration` (op-by-op runs through nnhal.ops.run),
:mod:`.timing`, :mod:`.tuning` (BLAS threads, malloc); the report and the command line
are ``nnhal.cli.bench``.  ``nnhal bench --ipc`` is tools/ipcbench,
``nnhal bench MODEL.tflite`` cli/tflite, the QoS bench cli/bench_qos.
"""

from nnhal.tools.bench.calibration import RegistryRunner, calibrate
from nnhal.tools.bench.lowering import Graph, Opnd, lower, to_model
from nnhal.tools.bench.timing import LayerStat, Timing, driver_latency, layer_stats, matmul_time, time_it
from nnhal.tools.bench.tuning import blas_threads, set_blas_threads, tune_malloc
from nnhal.tools.bench.zoo import CONV_OPS, Layer, Net, mobilenet_v1, mobilenet_v2

__all__ = ["CONV_OPS", "Graph", "Layer", "LayerStat", "Net", "Opnd", "RegistryRunner", "Timing", "blas_threads",
           "calibrate", "driver_latency", "layer_stats", "lower", "matmul_time", "mobilenet_v1",
           "mobilenet_v2", "set_blas_threads", "time_it", "to_model", "tune_malloc"]
