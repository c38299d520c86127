"""OpDef.prepare_steps driven by nnhal.ops.base.run_prepare_jobs / prepare_now: the jobs of several
operations' prepares run together, each operation gets the state it gets alone, a job's error is raised
inside the operations that gave it."""

from __future__ import annotations

import pytest

from nnhal.ops.base import prepare_now, run_prepare_jobs


def _doubling(calls: list):
    def fn(items: list) -> None:
        calls.append(len(items))
        for box in items:
            box[0] *= 2
    return fn


def _steps(fn, n: int, rounds: int):
    """A prepare that hands out ``rounds`` jobs of one item each and returns what they made of it."""
    box = [n]
    for _ in range(rounds):
        yield fn, [box]
    return box[0]


def test_jobs_of_one_function_run_together_in_rounds():
    calls: list = []
    fn = _doubling(calls)
    pending = {k: (_steps(fn, k, rounds), None) for k, rounds in ((1, 2), (2, 1), (3, 0), (4, 2))}
    assert run_prepare_jobs(pending) == {1: 4, 2: 4, 3: 3, 4: 16}
    assert calls == [3, 2]  # NOTE: round one: three operations' jobs in one call; round two: two


def test_alone_gives_the_same_state():
    calls: list = []
    assert prepare_now(_steps(_doubling(calls), 5, 3)) == 40
    assert calls == [1, 1, 1]


def test_a_jobs_error_is_raised_inside_the_generators_that_gave_it():
    def failing(items: list) -> None:
        raise ValueError("no fit")

    def handles():
        try:
            yield failing, [None]
        except ValueError as e:
            return f"handled: {e}"
        return "not reached"

    def ignores():
        yield failing, [None]
        return "not reached"

    assert run_prepare_jobs({0: (handles(), None), 1: (handles(), None)}) == {0: "handled: no fit",
                                                                            1: "handled: no fit"}
    with pytest.raises(ValueError, match="no fit"):
        prepare_now(ignores())


def test_conv_prepare_turns_a_search_error_into_its_execution_error(monkeypatch):
    """As before the batch: an error of the requantization search (raised by the job) is the
    operation's, which records it for its executions (prepare is authoritative)."""
    from tests.ops.test_conv_plan import CONV_CASES, Q8, _conv_case

    from nnhal.hal import OperationType
    from nnhal.ops import conv as cv
    from nnhal.ops import conv_kernels as ck
    from nnhal.ops.base import OperandInfo, OpInfo

    def boom(items: list) -> None:
        raise ArithmeticError("search overflow")

    ops, _, oscale, ozp = _conv_case(CONV_CASES[0], Q8, True, 0)
    info = OpInfo(type=OperationType.CONV_2D, inputs=[o.info() for o in ops],
                  outputs=[OperandInfo(Q8, (), oscale, ozp)])
    assert cv._prepare(info).mult_error is None
    monkeypatch.setattr(ck, "verify_f32_batch", boom)
    st = cv._prepare(info)
    assert st.mult_error == "search overflow" and st.plan is None
