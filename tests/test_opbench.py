"""opbench --constants: every model input but each operation's first made a
constant (the prepared path of the ops' prepare/execute split), same results."""

from __future__ import annotations

import pytest

from nnhal import hal
from nnhal.conformance import vectors
from nnhal.engine.executor import Executor
from nnhal.tools import opbench
from tests.conftest import vectors_root


def _picked(op: str) -> vectors.VectorModel:
    root = vectors_root()
    if not root.is_dir():
        pytest.skip("no conformance vectors")
    picked = opbench.pick_models(str(root), {op}, ("float32",))
    if not picked:
        pytest.skip(f"no single-operation {op} vector model")
    return picked[(op, "float32")]


@pytest.mark.parametrize("op", ["BIDIRECTIONAL_SEQUENCE_LSTM", "GENERATE_PROPOSALS"])
def test_constant_inputs_same_results(op: str) -> None:
    vm = _picked(op)
    model = vm.build_model(lambda data: hal.Memory(name="ashmem", size=len(data)))
    pools = [bytearray()]  # NOTE: these vector models keep no constant in a pool
    want = Executor(model, pools).run(vm.input_values())
    const, inputs = opbench.constant_inputs(vm, model)
    first = model.main.operations[0].inputs[0]
    assert const.main.inputIndexes == [first] and len(inputs) == 1
    assert len(model.main.inputIndexes) > 1
    lifetimes = {const.main.operands[i].lifetime for i in model.main.inputIndexes if i != first}
    assert lifetimes <= {hal.OperandLifeTime.CONSTANT_COPY, hal.OperandLifeTime.NO_VALUE}
    got = Executor(const, pools).run(inputs)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    assert len(model.main.inputIndexes) == len(vm.main.inputIndexes)  # NOTE: the model given is left as it was


def test_constants_option_times(capsys: pytest.CaptureFixture) -> None:
    _picked("RNN")
    assert opbench.main(["--ops", "RNN", "--types", "float32", "--ms", "1", "--constants"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("rnn "))
    assert 0 < float(line.split()[-1]) < 1e6
