"""Recipes of IF and WHILE with random bodies.

A body is a random chain of operations that keep their input's type, shape
and quantization (the recipes marked ``preserving``, IF and WHILE among
them, so bodies nest), drawn by the same generator over the body's inputs;
its new tensors are constants.  IF: a TENSOR_BOOL8 [1] condition (an
existing one, e.g. a comparison's result, or a new input) and two bodies
over the same inputs.  WHILE: the data variables are carried and output, a
counter is carried but not output, a limit is an input-only operand; the
condition is ``counter < limit`` (or ``limit > counter``), the body adds 1
to the counter and runs a random chain on each data variable."""

from __future__ import annotations

import numpy as np

from nnhal.conformance.randgraph.graph import CONST, INPUT, SUBGRAPH, TEMP, Graph, Op, Operand
from nnhal.conformance.randgraph.recipes.common import OT, Build, StepFailed, T, recipe

# the data types bodies are drawn for (each has preserving recipes)
BODY_TYPES = frozenset({T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED,
                        T.TENSOR_INT32, T.TENSOR_BOOL8})


def _anchor(sig: object) -> frozenset:
    return BODY_TYPES & sig.variadic_inputs


def _variables(b: Build) -> list[int]:
    """The data operands passed to the bodies: the anchor (or a new input), maybe one more."""
    t = b.operand(b.anchor).type if b.anchor is not None else b.d.pick(sorted(BODY_TYPES))
    first = b.anchor if b.anchor is not None else b.new(t, b.shape(b.d.integer(1, 4)))
    out = [first]
    if b.d.flag(0.3):
        o = b.operand(first)
        other = b.existing(o.type, lambda x: True, p_new=0.5)
        out.append(other if other is not None else b.new(o.type, b.shape(b.d.integer(1, 4))))
    return out


def _mirror(b: Build, outer: list[int]) -> Graph:
    """A body graph whose inputs stand for the outer operands ``outer``."""
    g = Graph()
    for k in outer:
        o = b.operand(k)
        g.inputs.append(g.add(Operand(o.type, o.dims, o.scale, o.zero_point, o.channel, INPUT, o.value)))
    return g


def _chain(b: Build, g: Graph, start: int) -> int:
    """A random chain of preserving operations on ``start`` in body ``g`` (at least one); its last result."""
    gen = b.gen
    saved = gen.g, gen.in_body
    gen.g, gen.in_body = g, True
    gen.depth += 1
    try:
        cur = start
        for n in range(3):
            if n and not b.d.flag(0.5):
                break
            j = gen.step(g.operands[start].type, anchor=cur, preserve=True)
            if j is None:
                break
            cur = g.ops[j].outputs[0]
        if cur == start:
            raise StepFailed("no operation keeps the body's variable")
        return cur
    finally:
        gen.g, gen.in_body = saved
        gen.depth -= 1


def _subgraph_operand(b: Build, index: int) -> int:
    k = b.g.add(Operand(T.SUBGRAPH, (), kind=SUBGRAPH, subgraph=index))
    b.created.append(k)
    return k


def _register(b: Build, g: Graph) -> int:
    b.gen.model.referenced.append(g)
    return len(b.gen.model.referenced) - 1


@recipe(OT.IF, "control", preserving=True)
def if_(b: Build) -> None:
    variables = _variables(b)
    cond = b.existing(T.TENSOR_BOOL8, lambda o: tuple(o.dims) == (1,), p_new=0.5)
    if cond is None:
        cond = b.new(T.TENSOR_BOOL8, (1,), domain="bool")
    bodies = []
    for name in ("then", "else"):
        g = _mirror(b, variables)
        g.outputs = [_chain(b, g, i) for i in g.inputs]
        bodies.append(_register(b, g))
        b.params[f"{name}_ops"] = tuple(op.type.name for op in g.ops)
    b.use(cond)
    b.use(_subgraph_operand(b, bodies[0]))
    b.use(_subgraph_operand(b, bodies[1]))
    for k in variables:
        b.use(k)
        o = b.operand(k)
        b.out(o.type, (o.scale, o.zero_point))
    b.params["condition"] = bool(np.asarray(b.operand(cond).value).reshape(-1)[0])


if_.anchor = _anchor


def _int_const(g: Graph, value: int) -> int:
    return g.add(Operand(T.TENSOR_INT32, (1,), kind=CONST, value=np.array([value], np.int32)))


@recipe(OT.WHILE, "control", preserving=True)
def while_(b: Build) -> None:
    variables = _variables(b)
    limit = b.d.integer(0, 3, simplest=1)
    counter = b.new(T.TENSOR_INT32, (1,), value=np.array([0], np.int32), role="param")
    bound = b.new(T.TENSOR_INT32, (1,), value=np.array([limit], np.int32), role="param")
    carried = variables + [counter, bound]
    m = len(variables)

    cond = _mirror(b, carried)
    i, n = cond.inputs[m], cond.inputs[m + 1]
    flip = b.d.flag(0.4)
    out = cond.add(Operand(T.TENSOR_BOOL8, (1,), kind=TEMP, value=np.array([0 < limit])))
    cond.ops.append(Op(OT.GREATER if flip else OT.LESS, [n, i] if flip else [i, n], [out], dtype="int32"))
    cond.outputs = [out]

    body = _mirror(b, carried)
    one, none = _int_const(body, 1), body.add(Operand(T.INT32, (), kind=CONST, value=np.array(0, np.int32)))
    nxt = body.add(Operand(T.TENSOR_INT32, (1,), kind=TEMP, value=np.array([1], np.int32)))
    body.ops.append(Op(OT.ADD, [body.inputs[m], one, none], [nxt], {"act": "NONE"}, dtype="int32"))
    body.outputs = [_chain(b, body, body.inputs[j]) for j in range(m)] + [nxt]

    cond_i, body_i = _register(b, cond), _register(b, body)
    b.use(_subgraph_operand(b, cond_i))
    b.use(_subgraph_operand(b, body_i))
    for k in carried:
        b.use(k)
    for k in variables:
        o = b.operand(k)
        b.out(o.type, (o.scale, o.zero_point))
    b.params["iterations"] = limit
    b.params["condition"] = "limit > counter" if flip else "counter < limit"
    b.params["body_ops"] = tuple(op.type.name for op in body.ops[1:])


while_.anchor = _anchor
