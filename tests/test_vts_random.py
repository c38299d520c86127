"""The random section (issue 27): the generator covers every operation the
reference implements (or names why not), draws valid, meaningful models of
every graph shape the issue lists, the same ones from the same seed; the
criteria are Android's; the shrinker keeps the failure; reproducers replay;
the command line's options and mistakes; sample-all agrees with itself in
every executor and after a cache round trip."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import nnhal
from nnhal import hal
from nnhal.conformance import vectors
from nnhal.conformance.randgraph import criteria, probe
from nnhal.conformance.randgraph.differential import Devices, differential, exposed
from nnhal.conformance.randgraph.generator import Options, StepFailed, generate, replay, single
from nnhal.conformance.randgraph.graph import CONST, INPUT, TEMP, describe, validate
from nnhal.conformance.randgraph.recipes import EXCLUDED, RECIPES
from nnhal.conformance.randgraph.shrink import shrink
from nnhal.conformance.vts import random as section
from nnhal.ops import registry

OT, T = hal.OperationType, hal.OperandType
BROADCAST = {OT.ADD, OT.MUL, OT.SUB, OT.DIV, OT.POW, OT.MAXIMUM, OT.MINIMUM, OT.PRELU, OT.EQUAL, OT.NOT_EQUAL,
             OT.LESS, OT.LESS_EQUAL, OT.GREATER, OT.GREATER_EQUAL, OT.LOGICAL_AND, OT.LOGICAL_OR}


def _vts(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nnhal", "vts", *args], capture_output=True, text=True,
                          timeout=timeout)


# --------------------------------------------------------------------------
# coverage of the declarations


def test_every_operation_is_drawn_or_named_with_a_reason() -> None:
    """A new operation fails this until it gets a recipe or a reason."""
    implemented = set(registry.REGISTRY)
    assert not set(RECIPES) & set(EXCLUDED)
    missing = implemented - set(RECIPES) - set(EXCLUDED)
    assert not missing, f"no recipe and no reason for {sorted(op.name for op in missing)}"
    assert set(RECIPES) | set(EXCLUDED) <= implemented
    assert all(len(reason) > 20 for reason in EXCLUDED.values())


def test_every_operation_has_android_criteria() -> None:
    assert set(registry.REGISTRY) <= set(criteria.CLASS)


@pytest.mark.parametrize("op", sorted(RECIPES, key=lambda o: o.name), ids=lambda o: o.name)
def test_each_recipe_draws_valid_models_of_each_data_type(op: OT) -> None:
    """Every (operation, data type) a recipe takes gives a one-operation model the reference validates (at
    HAL 1.3, or the AIDL version that adds the operation)."""
    first = min(sig.version for sig in registry.REGISTRY[op].signatures)
    options = Options(version=max(hal.HalVersion.V1_3, first))
    pairs = [(o, t) for o, t in probe.pairs(options) if o == op]
    assert pairs, f"{op.name}: no signature usable at HAL {options.version.name}"
    made = 0
    for _, t in pairs:
        m = single(op, t, 11, options)
        if m is None:
            continue
        made += 1
        assert not validate(m), f"{op.name} {t.name}: {validate(m)}"
        assert any(o.type == op for _, o in m.all_ops())
    assert made >= max(1, len(pairs) // 2), f"{op.name}: only {made} of {len(pairs)} data types drawn"


# --------------------------------------------------------------------------
# the models


@pytest.fixture(scope="module")
def drawn() -> list:
    return [generate(3, n, Options())[0] for n in range(160)]


def test_models_have_the_graph_shapes_the_issue_lists(drawn: list) -> None:
    seen: Counter = Counter()
    for m in drawn:
        g = m.main
        reads = Counter(k for op in g.ops for k in op.inputs)
        producer = {k for op in g.ops for k in op.outputs}
        seen["chain"] += any(k in producer for op in g.ops for k in op.inputs)
        seen["fan-out"] += any(n > 1 and g.operands[k].kind != CONST for k, n in reads.items())
        seen["output also consumed"] += any(reads[k] for k in g.outputs)
        seen["several outputs"] += len(g.outputs) > 1
        seen["unknown dimensions"] += any(o.declared is not None for o in g.operands)
        seen["unknown rank"] += any(o.declared == () for o in g.operands)
        seen["dynamic outputs"] += m.dynamic_outputs
        seen["relaxed"] += m.relaxed
        seen["constant in a pool"] += any(o.kind == CONST and o.reference for o in g.operands)
        seen["scalar input"] += any(o.kind == INPUT and not o.is_tensor for o in g.operands)
        types = Counter(op.type for _, op in m.all_ops())
        seen["IF"] += bool(types[OT.IF])
        seen["WHILE"] += bool(types[OT.WHILE])
        seen["nested control flow"] += any(op.type in (OT.IF, OT.WHILE) for g2 in m.referenced for op in g2.ops)
        for op in g.ops:
            if op.type in BROADCAST and len({g.operands[k].dims for k in op.inputs[:2]}) > 1:
                a, b = (g.operands[k].dims for k in op.inputs[:2])
                r = max(len(a), len(b))
                a, b = (1,) * (r - len(a)) + a, (1,) * (r - len(b)) + b
                seen["broadcast"] += 1
                seen["middle-axis broadcast"] += any(x != y and 1 in (x, y) for x, y in zip(a[1:-1], b[1:-1]))
    assert all(seen[k] for k in ("chain", "fan-out", "output also consumed", "several outputs", "unknown dimensions",
                                  "unknown rank", "dynamic outputs", "relaxed", "constant in a pool", "scalar input",
                                  "IF", "WHILE", "nested control flow", "broadcast", "middle-axis broadcast")), seen


def test_models_are_valid_and_meaningful(drawn: list) -> None:
    for m in drawn:
        assert not validate(m)
        for g in [m.main, *m.referenced]:
            for o in g.operands:
                if o.kind in (INPUT, CONST, TEMP) and o.value is not None and o.value.dtype.kind == "f":
                    assert np.isfinite(o.value).all()
    dtypes = Counter(m.dtype for m in drawn)
    assert {"float32", "float16", "quant8_asymm", "quant8_signed", "int32", "bool8"} <= set(dtypes), dtypes


def test_the_same_seed_draws_the_same_models_and_choices_replay_them() -> None:
    for n in (0, 7, 21):
        a, d = generate(9, n, Options())
        b, _ = generate(9, n, Options())
        blob = vectors.encode_file("x", [a.to_vector("m", "x")])
        assert blob == vectors.encode_file("x", [b.to_vector("m", "x")])
        c, _ = replay(d.choices, Options())
        assert vectors.encode_file("x", [c.to_vector("m", "x")]) == blob
    assert vectors.encode_file("x", [generate(9, 0, Options())[0].to_vector("m", "x")]) != \
        vectors.encode_file("x", [generate(10, 0, Options())[0].to_vector("m", "x")])


def test_options_narrow_the_models() -> None:
    only = Options(ops=frozenset({"CONV_2D", "RELU"}), max_operations=3)
    for n in range(20):
        m, _ = generate(1, n, only)
        assert {op.type.name for _, op in m.all_ops()} <= {"CONV_2D", "RELU"}
        assert len(m.main.ops) <= 3
    old = Options(version=hal.HalVersion.V1_0)
    for n in range(20):
        m, _ = generate(1, n, old)
        assert not validate(m)
        assert all(o.type not in (T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_BOOL8)
                   for g in [m.main, *m.referenced] for o in g.operands)
    with pytest.raises(StepFailed):
        generate(1, 0, Options(claims=frozenset()))


def test_reproducer_vector_files_round_trip() -> None:
    m, _ = generate(4, 2, Options())
    vm = m.to_vector("r", "random/r")
    doc = json.loads(gzip.decompress(vectors.encode_file("random/r", [vm])))
    back = vectors.parse_model(doc["spec"], doc["models"][0])
    assert vectors.encode_file("random/r", [back]) == vectors.encode_file("random/r", [vm])
    assert [list(o.dimensions) for o in back.main.operands] == [list(o.dimensions) for o in vm.main.operands]


def test_describe_names_every_operation_and_its_parameters() -> None:
    m, _ = generate(3, 0, Options(ops=frozenset({"CONV_2D"}), max_operations=1))
    lines = describe(m)
    assert len(lines) == 1 and lines[0].startswith("CONV_2D ") and "stride=" in lines[0] and "padding=" in lines[0]


# --------------------------------------------------------------------------
# criteria


def test_criteria_are_androids() -> None:
    name, c = criteria.criteria_for([OT.CONV_2D], 1)
    assert name == "conv" and c["float32"].atol == 2e-2 and c["quant"].atol == 10
    assert criteria.criteria_for([OT.RESHAPE], 1)[0] == "strict"
    assert criteria.criteria_for([OT.ADD, OT.MUL], 2)[0] == "small"
    assert criteria.criteria_for([OT.ADD] * 9, 9)[0] == "large"
    crit = criteria.MEDIUM
    e = np.linspace(-2, 2, 20).astype(np.float32)
    assert criteria.judge(e, e, T.TENSOR_FLOAT32, crit).ok
    assert not criteria.judge(e + 1e-3, e, T.TENSOR_FLOAT32, crit).ok
    # NOTE: every element within atol, but all off the same way: the bias criterion fails
    assert "bias" in criteria.judge(e + 9e-6, e, T.TENSOR_FLOAT32, crit).message
    assert criteria.judge(e.astype(np.float16) + np.float16(1e-3), e.astype(np.float16), T.TENSOR_FLOAT16, crit).ok
    q = np.arange(20, dtype=np.uint8)
    assert criteria.judge(q + 1, q, T.TENSOR_QUANT8_ASYMM, criteria.RELAXED).ok
    assert not criteria.judge(q + 2, q, T.TENSOR_QUANT8_ASYMM, criteria.STRICT).ok
    b = np.zeros(20, bool)
    flipped = b.copy()
    flipped[:2] = True
    assert criteria.judge(flipped, b, T.TENSOR_BOOL8, crit).ok
    flipped[:3] = True
    assert not criteria.judge(flipped, b, T.TENSOR_BOOL8, crit).ok
    assert not criteria.judge(np.zeros(3), np.zeros(4), T.TENSOR_FLOAT32, crit).ok
    assert not criteria.judge(np.array([np.nan], np.float32), np.array([np.inf], np.float32), T.TENSOR_FLOAT32,
                              crit).ok


# --------------------------------------------------------------------------
# shrinking (a failure predicate of our own: no device needed)


def test_shrinking_keeps_the_failure_and_simplifies_the_rest() -> None:
    options = Options(max_operations=8)

    def strided_conv(m: object) -> bool:
        return any(op.type == OT.CONV_2D and max(op.params.get("stride", (1, 1))) > 1 for _, op in m.all_ops())

    for n in range(200):
        model, d = generate(5, n, options)
        if strided_conv(model) and model.op_count() >= 4:
            break
    else:
        pytest.fail("no model of 4 operations with a strided CONV_2D drawn")
    result = shrink(model, list(d.choices), options, strided_conv, max_tries=300, max_seconds=60)
    m = result.model
    assert strided_conv(m) and not validate(m)
    assert m.op_count() == 1 and len(m.main.outputs) == 1, describe(m)
    conv = m.main.ops[0]
    assert conv.params["act"] == "NONE" and conv.params.get("dilation", (1, 1)) == (1, 1)
    assert result.kept >= 2 and result.tried <= 300


def test_exposed_model_outputs_every_temporary() -> None:
    m, _ = generate(2, 5, Options())
    e = exposed(m)
    temps = {k for op in e.main.ops for k in op.outputs}
    assert temps <= set(e.main.outputs) and not validate(e)


# --------------------------------------------------------------------------
# the reference against itself, through every executor


def test_sample_all_agrees_with_itself_in_every_executor_and_after_a_cache_round_trip() -> None:
    device = nnhal.open_device("sample-all")
    devices = Devices(device, section.reference())
    assert devices.cache_files() != (0, 0)
    kinds: Counter = Counter()
    for n in range(24):
        m, _ = generate(0, n, Options())
        o = differential(devices, m)
        assert o.status == "pass", (n, [f.message for f in o.failures], describe(m))
        kinds[m.dtype] += 1
    assert len(kinds) >= 4


def test_a_case_is_the_same_wherever_it_runs() -> None:
    config = section.RandomConfig("sample-all", seed=6)
    device = nnhal.open_device("sample-all")
    one = [(c.name, c.status) for c in section.run_cases(device, config, 0, 6)]
    split = [(c.name, c.status) for k in range(6) for c in section.run_cases(device, config, k, 1)]
    assert one == split and all(s == "pass" for _, s in one)


def test_a_driver_refusing_an_operation_makes_its_cases_unsupported_and_its_claims_narrow_the_models() -> None:
    device = nnhal.open_device("sample-minimal")
    claims = probe.claims(device, Options())
    assert claims and claims != probe.claims(nnhal.open_device("sample-all"), Options())
    config = section.RandomConfig("sample-minimal", seed=1, claims=tuple(sorted(claims)))
    cases = section.run_cases(device, config, 0, 8)
    assert {c.status for c in cases} <= {"pass", "unsupported"}
    assert any(c.status == "pass" for c in cases)


# --------------------------------------------------------------------------
# the command line


def test_the_command_line_runs_the_section_with_every_report(tmp_path: Path) -> None:
    j, x, h = tmp_path / "r.json", tmp_path / "r.xml", tmp_path / "r.html"
    r = _vts("--device", "sample-all", "--section", "random", "--cases", "10", "--seed", "2", "--jobs", "2",
             "--max-operations", "4", "--json", str(j), "--junit-xml", str(x), "--html", str(h),
             "--reproducers", str(tmp_path / "repro"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert r.stdout.rstrip().splitlines()[-1] == "10 passed, 0 failed, 0 unsupported"
    doc = json.loads(j.read_text())
    assert doc["counts"] == {"pass": 10, "fail": 0, "unsupported": 0}
    assert [c["model"] for c in doc["cases"]] == [f"seed2/case{n}" for n in range(10)]
    assert all("reproducer" not in c and "attachment" not in c for c in doc["cases"])
    assert "random" in x.read_text() and "RandomGraphTest" in h.read_text()
    one = _vts("--device", "sample-all", "--section", "random", "--cases", "10", "--seed", "2", "--jobs", "1",
               "--max-operations", "4", "--json", str(tmp_path / "one.json"))
    assert one.returncode == 0
    assert [c["name"] for c in json.loads((tmp_path / "one.json").read_text())["cases"]] == \
        [c["name"] for c in doc["cases"]]


@pytest.mark.parametrize("args,message", [
    (["--cases", "3"], "options of the random section"),
    (["--section", "random", "--cases", "-1"], "--cases -1"),
    (["--section", "random", "--max-operations", "0"], "--max-operations 0"),
    (["--section", "random", "--seconds", "0"], "--seconds 0"),
    (["--section", "random", "--ops", "RANDOM_MULTINOMIAL"], "draws none of RANDOM_MULTINOMIAL"),
    (["--section", "random", "--hal-version", "V9"], "--hal-version V9"),
    (["--section", "randm"], "did you mean random"),
], ids=["no-section", "cases", "max-operations", "seconds", "excluded-op", "version", "section-typo"])
def test_mistakes_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    r = _vts("--device", "sample-all", *args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_a_plain_run_has_no_random_section() -> None:
    from nnhal.conformance.vts.sections import OPT_IN, SECTIONS

    assert "random" in OPT_IN and "random" not in SECTIONS
