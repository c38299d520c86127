"""``nnhal bench MODEL.tflite`` against TFLite's benchmark_model (issue 21): init, first inference,
warm-up, steady state (mean / median / p90 / std), peak memory, --profile per HAL operation and
type, --json; ``nnhal bench --help`` shows every form."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nnhal.cli import app as cli

MODELS = Path(os.environ.get("NNHAL_MODELS") or Path(__file__).resolve().parents[1] / ".." / "shared" / "models")


def test_bench_help_shows_every_form(capsys):
    assert cli.main(["bench", "--help"]) == 0
    out = capsys.readouterr().out
    for flag in ("MODEL.tflite", "--profile", "--json", "--cache", "--priority", "--nets", "--floor"):
        assert flag in out, flag
    assert "the HAL device timed" in out and "seed of the generated input" in out and "one or more .tflite" in out
    assert cli.main(["bench", "x.tflite", "--help"]) == 0
    assert "--cache" in capsys.readouterr().out


def test_bench_model_phases_profile_json(tmp_path, capsys):
    path = MODELS / "vww_mobilenetv1_int8.tflite"
    if not path.exists():
        pytest.skip("no models")
    out_json = tmp_path / "b.json"
    rc = cli.main(["bench", str(path), "--runs", "3", "--profile", "--top", "4", "--json", str(out_json)])
    out = capsys.readouterr().out
    assert rc == 0
    for word in ("init", "first", "warm-up", "mean", "median", "p90", "std", "peak memory (process RSS)",
                 "top 4 operations", "by operation type", "DEPTHWISE_CONV_2D", "no per-operator profiler",
                 "one-time imports, not in init", "init nnhal sample-all", "x LiteRT xnnpack (", "(CPU "):
        assert word in out, word
    doc = json.loads(out_json.read_text())
    m = doc["models"][0]
    engines = {e["name"]: e for e in m["engines"]}
    assert set(engines) == {"nnhal sample-all", "LiteRT xnnpack", "LiteRT builtin"}
    e = engines["nnhal sample-all"]
    assert e["init_ms"] > 0 and e["first_ms"] > 0 and e["steady"]["count"] == 3 and e["peak_rss_mb"] > 0
    assert 0 < e["init_cpu_ms"]
    assert {"mean_ms", "median_ms", "p90_ms", "std_ms"} <= set(e["steady"])
    prof = m["profile"]
    assert len(prof["operations"]) == 33  # every HAL operation of the model
    assert sum(t["count"] for t in prof["types"]) == 33
    assert abs(sum(o["percent"] for o in prof["operations"]) - 100) < 1e-6
    assert prof["operations_ms"] <= prof["execution_ms"] * 1.05


def test_bench_json_path_refused_before_timing(capsys):
    path = MODELS / "vww_mobilenetv1_int8.tflite"
    if not path.exists():
        pytest.skip("no models")
    assert cli.main(["bench", str(path), "--json", "/proc/b.json"]) == 2
    err = capsys.readouterr().err
    assert "--json /proc/b.json" in err and len(err.strip().splitlines()) == 1


def test_initbench_phases_and_litert(capsys):
    """python -m nnhal.tools.initbench: per init the plan and prepare phases in wall and CPU time, LiteRT's
    interpreter creation beside (in this process: measure(); the command runs it per model in a child)."""
    from nnhal.tools import initbench

    path = MODELS / "vww_mobilenetv1_int8.tflite"
    if not path.exists():
        pytest.skip("no models")
    r = initbench.measure(str(path), "sample-all", 2)
    assert len(r["inits"]) == 2 and r["litert_ms"] > 0
    for init in r["inits"]:
        assert set(init) == {"plan", "prepare", "total", "usage"}
        assert all(w > 0 and c > 0 for w, c in (init[k] for k in ("plan", "prepare", "total")))
        assert abs(init["total"][1] - init["plan"][1] - init["prepare"][1]) < 1.0
        # NOTE: getrusage's user and system time and minor faults per phase (the first init touches pages)
        assert set(init["usage"]) == {"plan", "prepare"}
        assert all(len(u) == 3 and u[0] >= 0 and u[1] >= 0 and u[2] >= 0 for u in init["usage"].values())
    assert sum(u[2] for u in r["inits"][0]["usage"].values()) > 0
    initbench.report([r])
    out = capsys.readouterr().out
    assert "vww_mobilenetv1_int8.tflite" in out and "sample-all" in out and "x)" in out
    assert "minor faults" in out
