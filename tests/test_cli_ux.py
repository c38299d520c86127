"""The command line as a user meets it (issue 21): every mistake one line with exit status 2 and no
exception class name, ``nnhal run`` naming its inputs, device, latency and verdict, ``nnhal devices``
compact and reproducible, LiteRT's own log lines kept off stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nnhal import hal
from nnhal.cli import app as cli

MODELS = Path(os.environ.get("NNHAL_MODELS") or Path(__file__).resolve().parents[1] / ".." / "shared" / "models")


def model_path(name: str) -> Path:
    p = MODELS / f"{name}.tflite"
    if not p.exists():
        pytest.skip(f"{p} is missing (set NNHAL_MODELS)")
    return p


def one_line_error(capsys, rc: int, *words: str) -> str:
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1, err
    assert "Error" not in err and "Traceback" not in err, err
    for w in words:
        assert w in err, err
    return err


# ---------------------------------------------------------------- nnhal run: mistakes
def test_run_conflicting_flags_refused(capsys):
    path = str(model_path("vww_mobilenetv1_int8"))
    one_line_error(capsys, cli.main(["run", path, "--device", "sample-all", "--devices", "sample-all,sample-quant"]),
                   "--device sample-all and --devices")
    # NOTE: --explain alone explains the delegate plan (issue 18): no longer a mistake


def test_run_bad_input_files(tmp_path, capsys):
    path = str(model_path("vww_mobilenetv1_int8"))
    one_line_error(capsys, cli.main(["run", path, "--input", str(tmp_path / "missing.npy")]), "no such file")
    (tmp_path / "text.npy").write_text("not an array\n")
    one_line_error(capsys, cli.main(["run", path, "--input", str(tmp_path / "text.npy")]), "not a .npy file")
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    one_line_error(capsys, cli.main(["run", path, "--input", str(tmp_path / "obj.npy")]), "pickled")
    np.save(tmp_path / "int.npy", np.zeros((1, 96, 96, 3), np.int32))
    one_line_error(capsys, cli.main(["run", path, "--input", str(tmp_path / "int.npy")]), "must be float32")


# ---------------------------------------------------------------- nnhal run: what it says
def test_run_names_inputs_device_latency_and_saves_inputs(tmp_path, capsys):
    path = str(model_path("vww_mobilenetv1_int8"))
    rc = cli.main(["run", path, "-o", str(tmp_path / "o"), "--seed", "3"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "input 0 input_1: float32[1, 96, 96, 3] RANDOM (seed 3" in out
    assert "device: sample-all (nnhal-sample-all" in out
    assert "latency: imports " in out and " ms, plan " in out and "partitioned), prepare " in out \
        and " ms, execute " in out
    x = np.load(tmp_path / "o" / "input_0.npy")
    assert x.shape == (1, 96, 96, 3) and (tmp_path / "o" / "output_0.npy").exists()
    # the saved inputs run the same again, named as given, with the same outputs
    rc = cli.main(["run", path, "--input", str(tmp_path / "o" / "input_0.npy"), "-o", str(tmp_path / "p")])
    out = capsys.readouterr().out
    assert rc == 0 and f"from {tmp_path / 'o' / 'input_0.npy'}" in out and "RANDOM" not in out
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "output_0.npy"), np.load(tmp_path / "p" / "output_0.npy"))


def test_run_cache_dir_prepares_then_loads(tmp_path, capsys):
    """--cache-dir: the first run says it prepared and saved, the second that it loaded, same outputs; a
    --cache-dir that is a file is one line and exit status 2."""
    path = str(model_path("vww_mobilenetv1_int8"))
    outs = []
    for k, said in enumerate(("prepared and saved to the compilation cache", "loaded from the compilation cache")):
        rc = cli.main(["run", path, "--cache-dir", str(tmp_path / "c"), "-o", str(tmp_path / str(k))])
        out = capsys.readouterr().out
        assert rc == 0 and said in out, out
        outs.append(np.load(tmp_path / str(k) / "output_0.npy"))
    np.testing.assert_array_equal(outs[0], outs[1])
    (tmp_path / "f").write_text("")
    one_line_error(capsys, cli.main(["run", path, "--cache-dir", str(tmp_path / "f")]), "--cache-dir")


def test_run_verdict_line_and_no_top5_on_two_classes(capsys):
    rc = cli.main(["run", str(model_path("vww_mobilenetv1_int8")), "--compare", "--kernels", "ref"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "verdict: MATCH" in out and "quantized 1 step(s)" in out
    assert "top-1 same" in out and "top-5" not in out  # NOTE: 2 classes: a top-5 overlap means nothing


def test_run_verdict_beyond_tolerance_with_hint_and_strict(capsys):
    """A 0-step tolerance against LiteRT's optimized int8 kernels: the verdict names the tolerance, the
    hint names --kernels ref, --strict says why it exits 1."""
    path = str(model_path("kws_mobilenetv2_int8"))
    rc = cli.main(["run", path, "--per-tensor", "--no-isolate", "--steps", "0", "--strict"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "verdict: BEYOND TOLERANCE (tolerance: float 0.0001 of the tensor's range, quantized 0 step(s))" in out
    assert "--kernels ref" in out and "--strict: exit status 1" in out


# ---------------------------------------------------------------- other commands' mistakes
def test_demo_unknown_device(capsys):
    one_line_error(capsys, cli.main(["demo", "--device", "nope"]), "no device named 'nope'")


def test_serve_bad_name_and_driver(capsys):
    one_line_error(capsys, cli.main(["serve", "--name", "nodash"]), "--name 'nodash'")
    one_line_error(capsys, cli.main(["serve", "--name", "x-y", "--driver", "nope"]), "--driver 'nope'")


def test_graph_unknown_model_and_file(tmp_path, capsys):
    from nnhal.conformance.vectors import default_vectors

    vec = Path(default_vectors()) / "V1_0" / "conv_float.json.gz"
    if not vec.exists():
        pytest.skip("no vectors")
    one_line_error(capsys, cli.main(["graph", str(vec), "nope", "-o", str(tmp_path / "g.svg")]),
                   "no model named 'nope'")
    one_line_error(capsys, cli.main(["graph", str(tmp_path / "absent.json"), "-o", str(tmp_path / "g.svg")]),
                   "no such file")


def test_unexpected_error_names_no_class(capsys, monkeypatch):
    def boom(args):
        raise KeyError("the detail")

    monkeypatch.setattr(cli, "cmd_devices", boom)  # NOTE: build_parser binds the module's function
    rc = cli.main(["devices"])
    err = capsys.readouterr().err
    assert rc == 1 and "the detail" in err and "KeyError" not in err


# ---------------------------------------------------------------- nnhal devices
def test_devices_compact_json_and_kept_capabilities(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NNHAL_CACHE_KEY_DIR", str(tmp_path))
    import nnhal

    # NOTE: the in-process sample-all may have measured its figures in an earlier test (kept per device object)
    monkeypatch.setattr(nnhal.get_device("sample-all"), "_caps", None)
    assert cli.main(["devices", "--json", str(tmp_path / "d.json")]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.startswith("sample-all ")]
    assert len(lines) == 1 and "execTime float32 1.00" in lines[0]
    assert len(out.splitlines()) < 15
    data = json.loads((tmp_path / "d.json").read_text())
    first = {d["name"]: d for d in data["devices"]}["sample-all"]["performance"]
    kept = list((tmp_path / "capabilities").glob("*.json"))
    assert kept, "the measured capabilities are kept"
    # another process reads the same figures (reproducible partitioning)
    code = ("import nnhal, json; from nnhal.driver import capcache; "
            "print(json.dumps(capcache.to_json(nnhal.get_device('sample-all').getCapabilities_1_3()[1])))")
    env = {**os.environ, "NNHAL_CACHE_KEY_DIR": str(tmp_path)}
    other = json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                      check=True).stdout)
    q8 = [e for t, e, _ in other["operandPerformance"] if t == int(hal.OperandType.TENSOR_QUANT8_ASYMM)]
    assert q8 and abs(q8[0] - first["TENSOR_QUANT8_ASYMM"]) < 1e-3
    assert cli.main(["devices", "-v"]) == 0
    assert "TENSOR_QUANT16_SYMM" in capsys.readouterr().out
    assert cli.main(["devices", "--remeasure"]) == 0
    assert "forgot" in capsys.readouterr().err


def test_capability_file_garbage_is_measured_over(tmp_path, monkeypatch):
    from nnhal.driver import capcache

    monkeypatch.setenv("NNHAL_CACHE_KEY_DIR", str(tmp_path))
    calls = []

    def measure():
        calls.append(1)
        from nnhal.driver.backend import uniform_capabilities

        return uniform_capabilities(2.0)

    a = capcache.cached("x-dev", "v1", measure)
    b = capcache.cached("x-dev", "v1", measure)
    assert len(calls) == 1 and capcache.to_json(a) == capcache.to_json(b)
    for f in (tmp_path / "capabilities").glob("*.json"):
        f.write_text("{garbage")
    capcache.cached("x-dev", "v1", measure)
    assert len(calls) == 2
    capcache.cached("x-dev", "v2", measure)  # NOTE: another driver version is measured anew
    assert len(calls) == 3


# ---------------------------------------------------------------- LiteRT's log line
def test_litert_log_line_only_when_asked():
    path = model_path("vww_mobilenetv1_int8")
    code = f"from nnhal.delegate.run import LiteRT; LiteRT({str(path)!r}, kernels='xnnpack')"
    env = {k: v for k, v in os.environ.items() if k != "NNHAL_LITERT_LOG"}
    quiet = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert quiet.returncode == 0 and "XNNPACK" not in quiet.stderr, quiet.stderr
    loud = subprocess.run([sys.executable, "-c", code], env={**env, "NNHAL_LITERT_LOG": "1"}, capture_output=True,
                          text=True)
    assert "XNNPACK delegate" in loud.stderr


# ---------------------------------------------------------------- nnhal demo judges each device fairly
@pytest.mark.parametrize("device", ["sample-quant", "sample-all"])
def test_demo_unsupported_is_not_fail_and_expected_failure_needs_its_status(device, capsys, monkeypatch):
    from nnhal.cli import demo
    from nnhal.conformance.vectors import default_vectors

    if not (Path(default_vectors()) / "V1_0" / "conv_float.json.gz").exists():
        pytest.skip("no vectors")
    monkeypatch.setattr(demo, "run_trained_models", lambda *a, **k: 0)
    rc = demo.run_demo(default_vectors(), device)
    out = capsys.readouterr().out
    assert rc == 0 and "FAIL" not in out, out
    if device == "sample-quant":
        assert "unsupported (CONV_2D: sample-quant takes operations whose first input is TENSOR_QUANT8" in out
        assert "2/2 models run match the reference; 7 unsupported by sample-quant" in out
    else:
        assert "expected MISSED_DEADLINE_TRANSIENT or MISSED_DEADLINE_PERSISTENT: PASS (failed as expected)" in out


def test_demo_compares_trained_int8_with_the_devices_kernels():
    from nnhal.cli.demo import reference_kernels

    assert reference_kernels("sample-all", True) == "ref"
    assert reference_kernels("litert-cpu", True) == "xnnpack"
    assert reference_kernels("litert-cpu", False) == reference_kernels("sample-all", False) == "builtin"
