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


def test_bench_instructions_refusals(monkeypatch, capsys):
    """``--instructions``: what it cannot count is one line and exit status 2, before any valgrind run."""
    from nnhal.cli import floorcount

    path = MODELS / "kws_mobilenetv2_int8.tflite"
    if not path.exists():
        pytest.skip("no models")
    assert cli.main(["bench", str(path), "--device", "litert-cpu", "--instructions", "--runs", "-1"]) == 2
    assert "--runs -1" in capsys.readouterr().err
    assert cli.main(["bench", str(path.parent / "no_such_model.tflite"), "--instructions"]) == 2
    assert "no such file" in capsys.readouterr().err
    assert cli.main(["bench", str(path), "--device", "no-such-device", "--instructions"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    monkeypatch.setattr(floorcount.shutil, "which", lambda name: None)
    assert cli.main(["bench", str(path), "--instructions"]) == 2
    err = capsys.readouterr().err
    assert "valgrind is not installed" in err and len(err.strip().splitlines()) == 1


def test_bench_instructions_child_runs_each_side():
    """The process callgrind counts: the plan on the device and the floor built alike, either side run."""
    from nnhal.cli import floorcount
    from nnhal.drivers import litert

    path = MODELS / "kws_mobilenetv2_int8.tflite"
    if not path.exists() or not litert.available():
        pytest.skip("no models or no LiteRT")
    for side in ("device", "floor"):
        floorcount.child(str(path), "litert-cpu", side, 2, 1)


@pytest.mark.valgrind
def test_bench_instructions_counts_the_device_beyond_the_floor(capsys):
    """Counted under callgrind (about a minute): the floor does less than litert-cpu, and both run LiteRT's
    same kernels, so the difference is far below either count."""
    import re
    import shutil

    from nnhal.drivers import litert

    path = MODELS / "kws_mobilenetv2_int8.tflite"
    if not path.exists() or not litert.available() or shutil.which("valgrind") is None:
        pytest.skip("no models, LiteRT or valgrind")
    assert cli.main(["bench", str(path), "--device", "litert-cpu", "--instructions", "--runs", "5"]) == 0
    m = re.search(r"litert-cpu (\d+), HAL data path floor (\d+); .*: \+(\d+)", capsys.readouterr().out)
    assert m, "no counts"
    dev, floor, diff = map(int, m.groups())
    assert dev - floor == diff and 0 < diff < floor // 4
