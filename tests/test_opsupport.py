"""``nnhal ops --device``: what a device supports of the operations, from the
conformance vectors' forms (concrete shapes) and the unknown-shape signature
probes, with the device's reason for every refusal, in process and through a
service (issue 16)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nnhal import cli

SUBSET = "CONV_2D,TRANSPOSE,WHILE,LSTM"


def _ops(capsys: pytest.CaptureFixture, *argv: str) -> str:
    assert cli.main(["ops", *argv]) == 0
    return capsys.readouterr().out


def _blocks(text: str) -> dict[str, str]:
    """operation -> its block of lines (header "OP: supported|not supported", then one line per data type)."""
    return {m.group(1): m.group(0) for m in re.finditer(r"^([A-Z0-9_]+): .*?(?=^\S|\Z)", text, re.M | re.S)}


def _same(text: str, name: str) -> str:
    """The report with the device's name in the header and summary and the seconds taken blanked (a reason
    may name the driver behind a service)."""
    text = text.replace(f"as {name} answers", "as DEVICE answers").replace(f"supported by {name} ", "by DEVICE ")
    return re.sub(r"; [\d.]+ s$", "", text, flags=re.M)


@pytest.fixture(scope="module")
def litert_subset(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict]:
    pytest.importorskip("ai_edge_litert")
    path = tmp_path_factory.mktemp("ops") / "ops.json"
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        assert cli.main(["ops", "--device", "litert-cpu", "--ops", SUBSET, "--json", str(path)]) == 0
    return buf.getvalue(), json.loads(path.read_text())


def test_litert_supports_what_the_coverage_tool_lists(litert_subset: tuple[str, dict], vectors_dir: Path) -> None:
    from nnhal.tools import litert_coverage

    text, doc = litert_subset
    coverage = litert_coverage.operation_support(str(vectors_dir), set(SUBSET.split(",")))
    listed = {op for op, types in coverage.items() if any(k for k, _ in types.values())}
    assert listed == {"CONV_2D", "TRANSPOSE"}  # NOTE: WHILE and LSTM are refused by the lowering
    assert set(doc["supported_operations"]) == listed
    pairs = {(op, t) for op, types in doc["operations"].items() for t, a in types.items() if a["supported"]}
    assert pairs == {(op, t) for op, types in coverage.items() for t, (k, _) in types.items() if k}
    blocks = _blocks(text)
    assert blocks["CONV_2D"].startswith("CONV_2D: supported") and blocks["WHILE"].startswith("WHILE: not supported")
    assert re.search(r"^2 of 4 operations supported by litert-cpu in at least one vector form", text, re.M)


def test_every_refusal_has_the_devices_reason(litert_subset: tuple[str, dict]) -> None:
    text, doc = litert_subset
    blocks = _blocks(text)
    refused = 0
    for op, types in doc["operations"].items():
        for t, a in types.items():
            assert a["forms"] == a["supported"] + a["refused"] + sum(a["invalid"].values()), (op, t)
            assert sum(a["reasons"].values()) == a["refused"], (op, t)
            for reason, n in a["reasons"].items():
                assert reason and f"refused in {n}: {reason}" in blocks[op], (op, t, reason)
            refused += a["refused"]
            forms = [d for d in a["details"]]
            assert len(forms) == a["forms"] and all(d["supported"] == (not d["reason"]) for d in forms)
    assert refused > 0
    assert doc["operations"]["WHILE"]["float32"]["status"] == "refused"
    assert "LiteRT's WHILE cannot be stopped at the HAL's loop timeout" in blocks["WHILE"]
    assert "not lowered" in blocks["LSTM"]
    # the unknown-shape probe, labelled as such: litert-cpu needs a known rank
    conv = doc["operations"]["CONV_2D"]["float32"]
    assert conv["status"] == "supported" and conv["unknown_shapes"] == {"supported": False,
                                                                        "reason": "a tensor of unknown rank"}
    assert re.search(r"^  float32 .* supported in (\d+) of \1 vector forms; unknown shapes: refused "
                     r"\(a tensor of unknown rank\)$", blocks["CONV_2D"], re.M)


def test_a_partial_driver_refuses_float_operations_with_its_reason(capsys: pytest.CaptureFixture) -> None:
    text = _ops(capsys, "--device", "sample-quant", "--ops", "LOGISTIC", "-v")
    op = _blocks(text)["LOGISTIC"]
    assert op.startswith("LOGISTIC: supported")
    assert re.search(r"^  quant8 asymm .* supported in (\d+) of \1 vector forms; unknown shapes: supported$", op,
                     re.M)
    n = int(re.search(r"^  float32 .* refused in (\d+) of \1 vector forms; unknown shapes: refused \(the same "
                      r"reason\)$", op, re.M).group(1))
    why = "sample-quant takes operations whose first input is TENSOR_QUANT8_ASYMM(_SIGNED), not TENSOR_FLOAT32"
    assert f"      refused in {n}: {why}\n" in op
    # NOTE: -v: every form by its vector model's name
    assert len(re.findall(rf"^        logistic\w*: refused: {re.escape(why)}$", op, re.M)) >= n
    assert re.search(r"^        logistic\w*quant8\w*: supported$", op, re.M)


def test_through_a_service_the_same_answer(capsys: pytest.CaptureFixture, service_process: object,
                                           service_factory: object) -> None:
    name = service_process.name  # type: ignore[attr-defined]
    local = _ops(capsys, "--device", "sample-all", "--ops", "TANH,TRANSPOSE")
    assert re.search(r"^2 of 2 operations supported", local, re.M)
    assert _same(_ops(capsys, "--device", name, "--ops", "TANH,TRANSPOSE"), name) == _same(local, "sample-all")
    # NOTE: a driver that refuses: its reasons cross the process boundary
    quant = service_factory(driver="sample-quant")  # type: ignore[operator]
    local = _ops(capsys, "--device", "sample-quant", "--ops", "LOGISTIC,SUB")
    served = _ops(capsys, "--device", quant.name, "--ops", "LOGISTIC,SUB")
    assert "sample-quant takes operations whose first input is TENSOR_QUANT8_ASYMM(_SIGNED), not TENSOR_FLOAT32" \
        in served
    assert _same(served, quant.name) == _same(local, "sample-quant")


def test_without_vectors_the_signature_probes_say_so(capsys: pytest.CaptureFixture, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NNHAL_VECTORS", str(tmp_path / "none"))
    text = _ops(capsys, "--device", "sample-quant", "--ops", "LOGISTIC,IF")
    assert text.splitlines()[1] == (f"no conformance vectors at {tmp_path / 'none'} (set $NNHAL_VECTORS): signature "
                                    f"probes only (unknown shapes)")
    op = _blocks(text)["LOGISTIC"]
    assert op.startswith("LOGISTIC: supported") and "vector forms" not in op
    assert re.search(r"^  quant8 asymm +HAL 1.0 +unknown shapes: supported$", op, re.M)
    assert re.search(r"^  float32 +HAL 1.0 +unknown shapes: refused \(sample-quant takes", op, re.M)
    assert _blocks(text)["IF"].startswith("IF: not probed: no vector model uses it")
    assert re.search(r"^1 of 2 operations supported by sample-quant in the signature probes", text, re.M)


def test_a_broken_vector_file_is_named_and_the_rest_answered(capsys: pytest.CaptureFixture, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             vectors_dir: Path) -> None:
    (tmp_path / "add.json.gz").write_bytes((vectors_dir / "V1_0" / "add.json.gz").read_bytes())
    (tmp_path / "bad.json.gz").write_bytes(b"\x1f\x8b not gzip")
    monkeypatch.setenv("NNHAL_VECTORS", str(tmp_path))
    text = _ops(capsys, "--device", "sample-all", "--ops", "ADD")
    assert re.search(r"^skipped: .*bad\.json\.gz: not a readable vector file", text, re.M)
    assert re.search(r"^  float32 +HAL 1.0 +supported in 1 of 1 vector forms; unknown shapes: supported$", text,
                     re.M)


@pytest.mark.parametrize("argv, message", [
    (["--device", "sample-all", "--ops", "CONV2D"], "--ops: no operation named CONV2D; did you mean CONV_2D"),
    (["--device", "sample-all", "--json", "/nonexistent/dir/ops.json"], "--json /nonexistent/dir/ops.json: no such "
                                                                        "directory"),
    (["--ops", "ADD"], "--ops needs --device"),
    (["--json", "x.json"], "--json needs --device"),
])
def test_mistakes_are_one_line_and_status_2(argv: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["ops", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and message in captured.err, captured.err


def test_a_service_that_dies_ends_the_report_in_one_line(service_factory: object, vectors_dir: Path) -> None:
    import nnhal
    from nnhal.tools import opsupport

    sp = service_factory(driver="sample-all")  # type: ignore[operator]
    dev = nnhal.connect(sp.name)
    try:
        sp.kill()
        with pytest.raises(opsupport.DeviceUnavailable, match="DEVICE_UNAVAILABLE"):
            opsupport.device_report(dev, {"TRANSPOSE"}, str(vectors_dir))
    finally:
        dev.close()


def test_litert_agrees_with_what_conformance_finds_supported(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Per operation and data type, nnhal conformance's supported (pass) and unsupported models are ops' forms
    supported and refused (models of these operations alone: no all-inputs-as-internal copies in either)."""
    pytest.importorskip("ai_edge_litert")
    ops, conf = tmp_path / "ops.json", tmp_path / "conformance.json"
    subset = "AVERAGE_POOL_2D,TRANSPOSE"  # NOTE: litert-cpu refuses some AVERAGE_POOL_2D paddings
    assert cli.main(["ops", "--device", "litert-cpu", "--ops", subset, "--json", str(ops)]) == 0
    # NOTE: exit status 1: some models are unsupported
    assert cli.main(["conformance", "--device", "litert-cpu", "--ops", subset, "--mode", "sync", "--jobs", "1",
                     "--skip-variant", "dynamic", "--no-progress", "--json", str(conf)]) == 1
    capsys.readouterr()
    got = {(op, t): (a["supported"], a["refused"]) for op, types in json.loads(ops.read_text())["operations"].items()
           for t, a in types.items() if a["forms"]}
    want = {(r["operation"], r["data_type"]): (r["pass"] + r["fail"], r["unsupported"])
            for r in json.loads(conf.read_text())["operations_and_types"]}
    assert got == want
    assert got[("AVERAGE_POOL_2D", "float32")][1] > 0


def test_aidl_forms_are_not_asked_through_hal_1_3(capsys: pytest.CaptureFixture, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """getSupportedOperations_1_3 cannot take the AIDL HAL's operations and operand types (a model using
    one is INVALID_ARGUMENT there): the report says so instead of counting them refused, from the
    signature probes and from AIDL vector forms alike."""
    from tests.conftest import aidl_vectors_root

    if not aidl_vectors_root().is_dir():
        pytest.skip("no AIDL vectors")
    monkeypatch.setenv("NNHAL_VECTORS", str(aidl_vectors_root()))
    path = tmp_path / "ops.json"
    text = _ops(capsys, "--device", "sample-all", "--ops", "PACK,RSQRT,REVERSE", "--json", str(path))
    blocks = _blocks(text)
    assert blocks["PACK"].startswith("PACK: not asked: an AIDL v2 operation (getSupportedOperations_1_3 takes only")
    assert blocks["PACK"].rstrip().endswith(": float16, float32, int32, quant8 asymm, quant8 signed")
    assert blocks["REVERSE"].startswith("REVERSE: not asked: an AIDL v3 operation")
    assert re.search(r"^  quant8 signed +AIDL v3 +not asked \(not a HAL 1\.3 form\)$", blocks["RSQRT"], re.M)
    assert re.search(r"^  float32 +HAL 1\.2 +no vector forms; unknown shapes: supported$", blocks["RSQRT"], re.M)
    assert re.search(r"^1 of 1 operations supported by sample-all .*; 2 AIDL operations not asked\)", text, re.M)
    report = json.loads(path.read_text())["operations"]
    assert report["RSQRT"]["quant8 asymm"]["status"] == "not asked"
    assert "a vector form of AIDL_V3" in report["RSQRT"]["quant8 asymm"]["not_asked"] or \
        "an AIDL v3 signature" in report["RSQRT"]["quant8 asymm"]["not_asked"]
    assert report["PACK"]["float32"]["hal_version"] == "AIDL v2"
