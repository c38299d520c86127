"""Executions of one prepared model from many threads at once get the same
bits as alone (issue 16): executions share only read-only prepared state,
and every memo they fill (nnhal.ops.memo) is locked and bounded.  The memos
are bounded to one entry here, so entries are evicted while other threads
read them.

The default run takes a sample: for every operation, the vector models of
each data type using it, the first of each (not the infinite WHILE loops,
which only wait for the loop timeout); ``-m thread_sweep`` runs every
vector model."""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any

import numpy as np
import pytest

from nnhal import memory
from nnhal.conformance import vectors
from nnhal.engine.executor import Executor
from nnhal.ops import memo
from tests.conftest import vectors_root

THREADS = 8
ROUNDS = 2  # executions per thread per model


def _models(sample: bool) -> list[vectors.VectorModel]:
    root = vectors_root()
    if not root.is_dir():
        return []
    models = list(vectors.load([root]))
    if not sample:
        return models
    picked: dict[str, vectors.VectorModel] = {}
    per: dict[tuple, int] = defaultdict(int)
    for m in models:
        for op in sorted(m.operation_types):
            key = (op, m.data_type)
            if per[key] < 1 and "infinite" not in m.name:
                per[key] += 1
                picked[m.name] = m
    return list(picked.values())


def _outcome(ex: Executor, inputs: list) -> Any:
    """The outputs' bytes and shapes, or the exception's type."""
    try:
        outs = ex.run(inputs)
    except Exception as e:  # noqa: BLE001  (compared, not hidden)
        return type(e).__name__
    return [(o.dtype.str, o.shape, np.ascontiguousarray(o).tobytes()) for o in outs]


def _check(models: list[vectors.VectorModel]) -> None:
    prepared = []
    for vm in models:
        model = vm.build_model()
        views = [memory.map(m) for m in model.pools]
        try:
            ex = Executor(model, views)
        except Exception:  # noqa: BLE001  (a model the executor refuses to prepare has no executions)
            continue
        inputs = vm.input_values()
        prepared.append((vm.name, ex, inputs, _outcome(ex, inputs)))
    assert prepared
    failures: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(THREADS)

    def worker(k: int) -> None:
        start.wait()
        order = prepared[k::2] + prepared[(k + 1) % 2::2]  # NOTE: threads in different models at once too
        for _ in range(ROUNDS):
            for name, ex, inputs, alone in order:
                got = _outcome(ex, inputs)
                if got != alone:
                    with lock:
                        failures.append(f"{name}: thread {k} differs from the run alone")

    with memo.limit(1):
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not failures, "\n".join(sorted(set(failures))[:20])


def test_memo_bounded_and_shared() -> None:
    m = memo.Memo(4)
    for k in range(10):
        assert m.get_or_compute(k, lambda k=k: [k]) == [k]
    assert len(m) == 4 and m.get(0) is None and m.get(9) == [9]
    with memo.limit(1):
        m.put("x", 1)
        assert len(m) == 1
    first = m.get_or_compute("y", lambda: ["a"])
    assert m.put("y", ["b"]) is first  # another thread's value for the same key is kept


def test_memo_compute_failure_not_remembered() -> None:
    m = memo.Memo(2)
    with pytest.raises(ValueError):
        m.get_or_compute("k", lambda: (_ for _ in ()).throw(ValueError("bad")))
    assert m.get("k") is None


def test_concurrent_executions_sample() -> None:
    """A sample over every operation and data type, 8 threads, memos bounded to 1."""
    models = _models(sample=True)
    if not models:
        pytest.fail(f"conformance vectors not found at {vectors_root()}")
    _check(models)


@pytest.mark.thread_sweep
def test_concurrent_executions_all() -> None:
    """Every vector model, 8 threads, memos bounded to 1."""
    _check(_models(sample=False))
