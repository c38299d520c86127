"""Control flow (HAL 1.3 IF and WHILE): run referenced subgraphs.

The branch / condition / body subgraphs are SUBGRAPH operands; the executor
passed in ``ExecContext.executor`` runs them.  WHILE checks the loop timeout
(``loopTimeoutDuration`` of the request, 2 s by default) after each
condition evaluation, as the reference does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator

import numpy as np

from nnhal.hal import OperandType, OperationType
from nnhal.ops.base import ANY_TYPE, V1_3, ExecContext, OpDef, OpInfo, Signature, SubgraphRunner
from nnhal.ops.deadline import DeadlineMissed

# NOTE: IF / WHILE are written as generators (``OpDef.steps``): they yield each
# referenced subgraph they run as (subgraph index, inputs) and receive its
# outputs, so the executor runs nested control flow from its own stack, without
# recursion: any nesting depth validation accepts runs (issue 17 item 5).
# ``execute`` drives the same generator through ``SubgraphRunner.run_subgraph``
# for a runner that offers only that.

T = OperandType


def _subgraph_index(ctx: ExecContext, i: int) -> int:
    return int(ctx.inputs[i].data)


def _outer(ctx: ExecContext, values: list) -> list:
    return [np.asarray(v).astype(spec.dtype, copy=False) for v, spec in zip(values, ctx.outputs)]


def _runner(ctx: ExecContext) -> SubgraphRunner:
    if ctx.executor is None:
        raise ctx.fail("IF / WHILE run referenced subgraphs: they need an executor")
    return ctx.executor


def if_steps(ctx: ExecContext) -> Generator[tuple[int, list], list, list]:
    cond = ctx.inputs[0].data
    if cond is None or cond.size != 1:
        raise ctx.fail("the condition must be a TENSOR_BOOL8 of shape [1]")
    branch = _subgraph_index(ctx, 1 if bool(cond.reshape(-1)[0]) else 2)
    outs = yield branch, [t.data for t in ctx.inputs[3:]]
    return _outer(ctx, outs)


def while_steps(ctx: ExecContext) -> Generator[tuple[int, list], list, list]:
    run = _runner(ctx)
    cond_g, body_g = _subgraph_index(ctx, 0), _subgraph_index(ctx, 1)
    m = len(ctx.outputs)
    k = run.subgraph_output_count(body_g) - m
    values = [t.data for t in ctx.inputs[2:]]
    start = time.monotonic_ns()
    while True:
        cond = (yield cond_g, values)[0]
        if not bool(np.asarray(cond).reshape(-1)[0]):
            break
        elapsed = time.monotonic_ns() - start
        if elapsed > run.loop_timeout_ns:
            raise DeadlineMissed(f"WHILE loop timed out after {elapsed / 1e6:.1f} ms "
                                 f"(loop timeout {run.loop_timeout_ns / 1e6:.1f} ms)")
        outs = yield body_g, values
        values = list(outs[: m + k]) + values[m + k:]
    return _outer(ctx, values[:m])


def _driven(steps: Callable[[ExecContext], Generator]) -> Callable[[ExecContext], list]:
    """``steps`` as a plain ``execute``: each subgraph run by ``run_subgraph``."""

    def execute(ctx: ExecContext) -> list:
        run = _runner(ctx)
        gen = steps(ctx)
        sent = None
        while True:
            try:
                index, inputs = gen.send(sent)
            except StopIteration as stop:
                return stop.value
            sent = run.run_subgraph(index, inputs)

    return execute


execute_if = _driven(if_steps)
execute_while = _driven(while_steps)


def _check_subgraph_io(info: OpInfo, sg_index: int, operands: list, outputs: list | None, what: str) -> None:
    """The referenced subgraph's inputs (and outputs) must agree in type, rank,
    dimensions, scale, zeroPoint and extraParams with the operation's."""
    if not 0 <= sg_index < len(info.subgraphs):
        raise info.fail(f"{what} subgraph index {sg_index} out of range ({len(info.subgraphs)} referenced)")
    sg = info.subgraphs[sg_index]
    ins = [sg.operands[i] for i in sg.inputIndexes]
    if len(ins) != len(operands):
        raise info.fail(f"{what} subgraph has {len(ins)} inputs, the operation passes {len(operands)}")
    pairs = list(zip(ins, operands))
    if outputs is not None:
        outs = [sg.operands[i] for i in sg.outputIndexes]
        if len(outs) != len(outputs):
            raise info.fail(f"{what} subgraph has {len(outs)} outputs, the operation has {len(outputs)}")
        pairs += list(zip(outs, outputs))
    for inner, outer in pairs:
        desc = f"{what} subgraph operand ({OperandType(inner.type).name} {list(inner.dimensions)}, scale " \
               f"{inner.scale}, zeroPoint {inner.zeroPoint})"
        if (int(inner.type) != int(outer.type) or inner.scale != outer.scale or inner.zeroPoint != outer.zero_point
                or inner.extraParams.channelQuant != outer.channel_quant):
            raise info.fail(f"{desc} does not match the operation's operand ({outer.type.name} "
                            f"{list(outer.dimensions)}, scale {outer.scale}, zeroPoint {outer.zero_point})")
        # NOTE: an unknown rank (no dimensions) or dimension (0) on either side is compatible
        if inner.dimensions and outer.dimensions and (
                len(inner.dimensions) != len(outer.dimensions)
                or any(a and b and a != b for a, b in zip(inner.dimensions, outer.dimensions))):
            raise info.fail(f"{desc} has dimensions that conflict with {list(outer.dimensions)}")


def _sg(info: OpInfo, i: int) -> int:
    v = info.inputs[i].value
    if v is None:
        raise info.fail(f"input {i} must be a SUBGRAPH reference")
    return int(v)


def validate_if(info: OpInfo) -> None:
    cond = info.inputs[0]
    if tuple(cond.dimensions) != (1,):
        raise info.fail(f"the condition must have shape [1], has {list(cond.dimensions)}")
    for branch in (1, 2):
        _check_subgraph_io(info, _sg(info, branch), info.inputs[3:], info.outputs,
                           "then" if branch == 1 else "else")


def validate_while(info: OpInfo) -> None:
    cond_i, body_i = _sg(info, 0), _sg(info, 1)
    if not 0 <= body_i < len(info.subgraphs) or not 0 <= cond_i < len(info.subgraphs):
        raise info.fail("condition or body subgraph index out of range")
    body = info.subgraphs[body_i]
    m = len(info.outputs)
    k = len(body.outputIndexes) - m
    n = len(body.inputIndexes) - m - k
    if m < 1 or k < 0 or n < 0 or len(info.inputs) - 2 != m + k + n:
        raise info.fail(f"inconsistent operand counts (m={m}, k={k}, n={n}, inputs={len(info.inputs) - 2})")
    loop_in = info.inputs[2:]
    _check_subgraph_io(info, body_i, loop_in, loop_in[: m + k], "body")
    _check_subgraph_io(info, cond_i, loop_in, None, "condition")
    cond = info.subgraphs[cond_i]
    if len(cond.outputIndexes) != 1:
        raise info.fail("the condition subgraph must have exactly one output")
    out = cond.operands[cond.outputIndexes[0]]
    if out.type != T.TENSOR_BOOL8 or list(out.dimensions) not in ([1], [0]):
        raise info.fail("the condition subgraph output must be a TENSOR_BOOL8 of shape [1]")
    for j, o in enumerate(info.outputs):
        outer = loop_in[j]
        if o.type != outer.type or o.scale != outer.scale or o.zero_point != outer.zero_point:
            raise info.fail(f"output {j} does not match input-output operand {j}")


OPS = [
    OpDef(OperationType.IF,
          [Signature((T.TENSOR_BOOL8, T.SUBGRAPH, T.SUBGRAPH), (), V1_3, variadic_inputs=ANY_TYPE,
                     variadic_outputs=ANY_TYPE, min_variadic_outputs=1)],
          execute_if, validate=validate_if, allow_zero_sized=True, allow_omitted_outputs=True, steps=if_steps),
    OpDef(OperationType.WHILE,
          [Signature((T.SUBGRAPH, T.SUBGRAPH), (), V1_3, variadic_inputs=ANY_TYPE, min_variadic_inputs=1,
                     variadic_outputs=ANY_TYPE, min_variadic_outputs=1)],
          execute_while, validate=validate_while, allow_zero_sized=True, allow_omitted_outputs=True,
          steps=while_steps),
]
