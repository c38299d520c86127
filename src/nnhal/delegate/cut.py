"""TFLite sub-models: some of the main subgraph's operators as a model of
their own, for LiteRT to run a CPU partition as TFLite runs the operators a
delegate left (the same operator codes, options, tensors with their types
and quantization, constant buffers).

The sub-model keeps the original tensor table (indexes unchanged: a
partition's boundary tensors are the same numbers in every partition) and the
other subgraphs (IF / WHILE bodies keep their indexes); only the constant
buffers its operators read are kept when the model has one subgraph.
"""

from __future__ import annotations

import copy
from typing import Sequence

import numpy as np

from nnhal.delegate.model import Graph
from nnhal.tflite import schema as sch


def submodel(g: Graph, operators: Sequence[int], inputs: Sequence[int], outputs: Sequence[int]) -> bytes:
    """The bytes of a .tflite model running ``operators`` (main-subgraph indexes, in order) from the
    tensors ``inputs`` to the tensors ``outputs``."""
    s = sch.schema()
    m = g.m
    new = s.ModelT()
    new.version = m.version
    new.operatorCodes = m.operatorCodes
    new.description = b"nnhal CPU partition"
    ops = [g.sg.operators[i] for i in operators]
    used = set(inputs) | set(outputs)
    for op in ops:
        for arr in (op.inputs, op.outputs, op.intermediates):
            if arr is not None:
                used.update(int(k) for k in arr if k >= 0)
    tensors = [copy.copy(t) for t in g.sg.tensors]
    if len(m.subgraphs) > 1:
        new.buffers = m.buffers
        for k, t in enumerate(tensors):
            if k not in used and not t.isVariable:
                t.buffer = 0
    else:
        new.buffers = [s.BufferT()]
        remap = {0: 0}
        for k, t in enumerate(tensors):
            if k not in used or t.buffer <= 0:
                t.buffer = 0
                continue
            if t.buffer not in remap:
                remap[t.buffer] = len(new.buffers)
                new.buffers.append(m.buffers[t.buffer])
            t.buffer = remap[t.buffer]
    sg = s.SubGraphT()
    sg.tensors = tensors
    sg.operators = ops
    sg.inputs = np.asarray(list(inputs), np.int32)
    sg.outputs = np.asarray(list(outputs), np.int32)
    sg.name = b"cpu_partition"
    new.subgraphs = [sg] + list(m.subgraphs[1:])
    return sch.write_model(new)
