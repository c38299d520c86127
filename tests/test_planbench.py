"""python -m nnhal.tools.planbench: where a small quantized model's CPU time goes (per operation type,
the static plans' requantization paths, the executor per step, the numpy call floor)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nnhal.tools import planbench

MODELS = Path(os.environ.get("NNHAL_MODELS") or Path(__file__).resolve().parents[1] / ".." / "shared" / "models")


def test_model_figures(capsys: pytest.CaptureFixture) -> None:
    path = MODELS / "kws_mobilenetv2_int8.tflite"
    if not path.exists():
        pytest.skip(f"{path} is missing (set NNHAL_MODELS)")
    r = planbench.measure(str(path), runs=2)
    # NOTE: every quantized convolution and the classifier of kws has a static plan
    assert len(r["layers"]) == r["by_type"]["CONV_2D"]["count"] + r["by_type"]["DEPTHWISE_CONV_2D"]["count"] + 1
    assert all(L["mode"] in ("f32", "f64") for L in r["layers"])
    assert r["run_us"] > 0 and 0 < r["executor_us_per_step"] < r["run_us"]
    assert planbench.main([str(path), "--runs", "2", "-v"]) == 0
    out = capsys.readouterr().out
    assert "executor" in out and "CONV_2D" in out and "planned layers: 53" in out


def test_unreadable_model_is_one_line_and_status_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"not a flatbuffer")
    assert planbench.main([str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(str(bad))
