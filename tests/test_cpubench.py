"""python -m nnhal.tools.cpubench: CPU time of a model on a HAL device and on LiteRT, and the ratio."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nnhal.tools import cpubench

MODELS = Path(os.environ.get("NNHAL_MODELS") or Path(__file__).resolve().parents[1] / ".." / "shared" / "models")


def test_best_cpu_time_alternates_and_keeps_the_best() -> None:
    calls: list[str] = []
    best = cpubench.best_cpu_time([lambda: calls.append("a"), lambda: calls.append("b")], 3)
    assert calls == ["a", "b"] * 3 and len(best) == 2 and all(0 <= t < 1 for t in best)


def test_model_figures(capsys: pytest.CaptureFixture) -> None:
    path = MODELS / "kws_mobilenetv2_int8.tflite"
    if not path.exists():
        pytest.skip(f"{path} is missing (set NNHAL_MODELS)")
    assert cpubench.main([str(path), "--runs", "1"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(str(path)) and "sample-all" in line and "ms CPU" in line and "ratio" in line


def test_unreadable_model_is_one_line_and_status_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"not a flatbuffer")
    assert cpubench.main([str(bad), str(tmp_path / "missing.tflite")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith(str(bad))
