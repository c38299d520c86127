"""TFLite custom operators as extension operations, and the examples of
docs/extensions.md run as written: ``examples/cube_extension.py`` (a plugin
whose extension implements the custom operator ``Cube``) and
``examples/fibonacci_runtime.py``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nnhal import hal

pytest.importorskip("ai_edge_litert")

from nnhal.tflite import writer  # noqa: E402
from nnhal.tflite.loader import UnsupportedModelError, load  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = f"{ROOT / 'examples' / 'cube_extension.py'}:CubeBackend"


def cube_model(options: bytes = b"") -> bytes:
    return writer.one_op("Cube", [writer.Tensor([2, 3])], [writer.Tensor([2, 3])], custom_options=options)


def _nnhal(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nnhal", *args], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)


def test_the_loader_maps_a_declared_custom_operator_to_the_extension_operation() -> None:
    model, io = load(cube_model(), custom_ops={"Cube": ("com.example.cube", 0)})
    assert model.extensionNameToPrefix == [hal.ExtensionNameAndPrefix("com.example.cube", 1)]
    assert [int(op.type) for op in model.main.operations] == [(1 << 16) | 0]
    assert io.hal_operations["com.example.cube:0"] == 1 and io.rewrites["custom_as_extension"] == 1
    with pytest.raises(UnsupportedModelError, match="custom operator Cube has no NNAPI 1.3 mapping"):
        load(cube_model())
    with pytest.raises(UnsupportedModelError, match="custom options have no place"):
        load(cube_model(b"\x01"), custom_ops={"Cube": ("com.example.cube", 0)})


def test_nnhal_run_sends_the_custom_operator_to_the_device(tmp_path: Path) -> None:
    (tmp_path / "cube.tflite").write_bytes(cube_model())
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    np.save(tmp_path / "x.npy", x)
    # NOTE: --plan max: Android's NNAPI delegate never delegates a custom operator; nnhal's max plan maps it
    r = _nnhal("run", str(tmp_path / "cube.tflite"), "--plan", "max", "--device", PLUGIN, "--input",
               str(tmp_path / "x.npy"), "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    assert "1 on NNAPI" in r.stdout and "0 on the CPU" in r.stdout, r.stdout
    assert np.array_equal(np.load(tmp_path / "out" / "output_0.npy"), x ** 3)
    # NOTE: a device without the extension: the operator has no mapping, a user error (exit status 2)
    r = _nnhal("run", str(tmp_path / "cube.tflite"), "--plan", "max", "--device", "sample-all")
    assert r.returncode == 2 and "Cube" in r.stderr, r.stderr


def test_nnhal_run_places_the_custom_operator_through_the_runtime(tmp_path: Path) -> None:
    (tmp_path / "cube.tflite").write_bytes(cube_model())
    r = _nnhal("run", str(tmp_path / "cube.tflite"), "--plan", "max", "--devices", f"sample-all,{PLUGIN}",
               "--explain")
    assert r.returncode == 0, r.stderr
    # NOTE: the runtime names a device given by its spec by that spec
    assert f"operation 0 com.example.cube:0: {PLUGIN} (the only listed device that takes this " \
           "com.example.cube operation" in r.stdout
    assert "sample-all refused: extension com.example.cube is not declared by this device" in r.stdout


def test_the_runtime_example_runs_as_written() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "fibonacci_runtime.py")], capture_output=True,
                       text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "twice: [2.0, 2.0, 4.0, 6.0, 10.0, 16.0, 26.0, 42.0, 68.0, 110.0]" in r.stdout
    assert "partition 1: example-fibonacci" in r.stdout
