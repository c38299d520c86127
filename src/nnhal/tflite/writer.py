"""A small ``.tflite`` writer (the schema module's object API): one-operator
models for the importer's tests, with LiteRT as their reference.

``one_op(builtin, inputs, outputs, options)`` builds a model whose subgraph
has one operator; tensors with ``data`` are constants (a buffer each), the
others model inputs; ``outputs`` may leave shapes to LiteRT
(``infer_shapes=True`` asks LiteRT for them, then writes the model again with
the shapes a converter would have stored).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union

import numpy as np

from nnhal.tflite.schema import builtin_code, interpreter_module, make_interpreter, schema, write_model

_TYPES = {"float32": 0, "float16": 1, "int32": 2, "uint8": 3, "int64": 4, "bool": 6, "int16": 7, "complex64": 8,
          "int8": 9}


@dataclass
class Tensor:
    """A tensor of the model: ``data`` makes it a constant; ``scale`` / ``zero_point`` (a list
    for per-channel, on ``axis``) its quantization; ``variable`` a state variable."""

    shape: Sequence[int]
    dtype: str = "float32"
    data: Optional[np.ndarray] = None
    scale: Union[float, Sequence[float], None] = None
    zero_point: Union[int, Sequence[int], None] = None
    axis: int = 0
    name: str = ""
    variable: bool = False
    signature: Optional[Sequence[int]] = None  # shape signature (-1 = unknown)
    extra: dict = field(default_factory=dict)


def _tensor_t(s: Any, t: Tensor, buffer: int, name: str) -> Any:
    tt = s.TensorT()
    tt.shape = np.asarray(list(t.shape), dtype=np.int32)
    if t.signature is not None:
        tt.shapeSignature = np.asarray(list(t.signature), dtype=np.int32)
    tt.type = _TYPES[t.dtype]
    tt.buffer = buffer
    tt.name = (t.name or name).encode()
    tt.isVariable = t.variable
    if t.scale is not None:
        q = s.QuantizationParametersT()
        scales = [t.scale] if np.isscalar(t.scale) else list(t.scale)
        zps = t.zero_point if t.zero_point is not None else 0
        zps = [zps] * len(scales) if np.isscalar(zps) else list(zps)
        q.scale = np.asarray(scales, dtype=np.float32)
        q.zeroPoint = np.asarray(zps, dtype=np.int64)
        q.quantizedDimension = t.axis
        tt.quantization = q
    return tt


def one_op(builtin: str, inputs: Sequence[Optional[Tensor]], outputs: Sequence[Tensor], options: Any = None,
           version: int = 1, custom_options: Optional[bytes] = None, infer_shapes: bool = False) -> bytes:
    """The bytes of a one-operator model.  ``builtin`` is a BuiltinOperator name, or a custom
    operator's code when ``custom_options`` is given; ``None`` in ``inputs`` is an omitted
    optional input (-1); ``options`` an ``*OptionsT`` object of the schema module."""
    s = schema()
    m = s.ModelT()
    m.version = 3
    m.description = b"nnhal one-operator test model"
    m.buffers = [s.BufferT()]
    sg = s.SubGraphT()
    sg.tensors = []
    ins, model_inputs = [], []
    for n, t in enumerate(inputs):
        if t is None:
            ins.append(-1)
            continue
        buf = 0
        if t.data is not None:
            b = s.BufferT()
            b.data = np.frombuffer(np.ascontiguousarray(np.asarray(t.data, dtype=t.dtype)).tobytes(), np.uint8)
            m.buffers.append(b)
            buf = len(m.buffers) - 1
        elif not t.variable:
            model_inputs.append(len(sg.tensors))
        sg.tensors.append(_tensor_t(s, t, buf, f"input_{n}"))
        ins.append(len(sg.tensors) - 1)
    outs = []
    for n, t in enumerate(outputs):
        sg.tensors.append(_tensor_t(s, t, 0, f"output_{n}"))
        outs.append(len(sg.tensors) - 1)
    op = s.OperatorT()
    op.opcodeIndex = 0
    op.inputs = np.asarray(ins, dtype=np.int32)
    op.outputs = np.asarray(outs, dtype=np.int32)
    code = s.OperatorCodeT()
    if custom_options is not None:
        code.builtinCode = code.deprecatedBuiltinCode = builtin_code("CUSTOM")
        code.customCode = builtin.encode()
        op.customOptions = np.frombuffer(custom_options, np.uint8)
    else:
        b = builtin_code(builtin)
        code.builtinCode = b
        code.deprecatedBuiltinCode = min(b, 127)
    code.version = version
    if options is not None:
        op.builtinOptionsType = getattr(s.BuiltinOptions, type(options).__name__[:-1])
        op.builtinOptions = options
    sg.operators = [op]
    sg.inputs = np.asarray(model_inputs, dtype=np.int32)
    sg.outputs = np.asarray(outs, dtype=np.int32)
    sg.name = b"main"
    m.subgraphs = [sg]
    m.operatorCodes = [code]
    data = write_model(m)
    if not infer_shapes:
        return data
    # NOTE: LiteRT computes the output shapes in its Prepare; store them as a converter would
    mod = interpreter_module()
    it = make_interpreter(model_content=data,
                          experimental_op_resolver_type=mod.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    shapes = {d["index"]: list(d["shape"]) for d in it.get_output_details()}
    fixed = [Tensor(**{**vars(t), "shape": shapes[outs[n]]}) for n, t in enumerate(outputs)]
    return one_op(builtin, inputs, fixed, options, version, custom_options, infer_shapes=False)


def options(name: str, **fields: Any) -> Any:
    """An ``<name>T`` options object of the schema module with ``fields`` set."""
    o = getattr(schema(), name + "T")()
    for k, v in fields.items():
        if not hasattr(o, k):
            raise AttributeError(f"{name} has no field {k}")
        setattr(o, k, v)
    return o


def graph(tensors: Sequence[Tensor], operators: Sequence[tuple], inputs: Sequence[int],
          outputs: Sequence[int]) -> bytes:
    """The bytes of a model of several operators: ``operators`` are
    ``(builtin, [input tensor indexes], [output tensor indexes], options or None)`` in execution
    order; ``inputs`` / ``outputs`` the model's tensor indexes."""
    return subgraphs([(tensors, operators, inputs, outputs)])


def subgraphs(graphs: Sequence[tuple]) -> bytes:
    """A model of several subgraphs (the first is the main one), each given as ``graph`` takes it:
    ``(tensors, operators, inputs, outputs)``; control-flow options name the others by index."""
    s = schema()
    m = s.ModelT()
    m.version = 3
    m.buffers = [s.BufferT()]
    codes: dict[str, int] = {}
    m.operatorCodes, m.subgraphs = [], []
    for tensors, operators, inputs, outputs in graphs:
        sg = s.SubGraphT()
        sg.tensors = []
        for n, t in enumerate(tensors):
            buf = 0
            if t.data is not None:
                b = s.BufferT()
                b.data = np.frombuffer(np.ascontiguousarray(np.asarray(t.data, dtype=t.dtype)).tobytes(), np.uint8)
                m.buffers.append(b)
                buf = len(m.buffers) - 1
            sg.tensors.append(_tensor_t(s, t, buf, f"t{n}"))
        sg.operators = []
        for builtin, ins, outs, opts in operators:
            if builtin not in codes:
                code = s.OperatorCodeT()
                code.builtinCode = builtin_code(builtin)
                code.deprecatedBuiltinCode = min(code.builtinCode, 127)
                code.version = 1
                codes[builtin] = len(m.operatorCodes)
                m.operatorCodes.append(code)
            op = s.OperatorT()
            op.opcodeIndex = codes[builtin]
            op.inputs = np.asarray(list(ins), dtype=np.int32)
            op.outputs = np.asarray(list(outs), dtype=np.int32)
            if opts is not None:
                op.builtinOptionsType = getattr(s.BuiltinOptions, type(opts).__name__[:-1])
                op.builtinOptions = opts
            sg.operators.append(op)
        sg.inputs = np.asarray(list(inputs), dtype=np.int32)
        sg.outputs = np.asarray(list(outputs), dtype=np.int32)
        m.subgraphs.append(sg)
    return write_model(m)
