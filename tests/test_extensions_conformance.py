"""Extension models in the conformance runner and report (vectors may carry
``extensionNameToPrefix`` and operands' ``extension`` parameters; extension
operations are counted by name as ``extension:type``), and ``nnhal ops
--device`` / ``nnhal devices`` listing the extensions."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from nnhal.drivers.fibonacci import EXTENSION_NAME, quant64_params

P = 1
FIB = [1, 1, 2, 3, 5, 8, 13, 21, 34, 55]


def _operand(name: str, type_: Any, dims: list, life: str, dtype: str, values: list, consumers: int = 0,
             extension: bytes = None) -> dict:
    d = {"name": name, "channelQuant": None, "data": {"dtype": dtype, "values": values}, "dimensions": dims,
         "isIgnored": False, "lifetime": life, "numberOfConsumers": consumers, "scale": 0.0, "type": type_,
         "zeroPoint": 0}
    if extension is not None:
        d["extension"] = extension.hex()
    return d


def write_vectors(path: Path) -> None:
    quant = {"name": "fibonacci_quant64", "minSupportedVersion": "V1_2", "isRelaxed": False, "expectFailure": False,
             "extensionNameToPrefix": [{"name": EXTENSION_NAME, "prefix": P}],
             "main": {"inputIndexes": [0], "outputIndexes": [1],
                      "operands": [_operand("n", (P << 16) | 0, [], "SUBGRAPH_INPUT", "int64", [10], 1),
                                   _operand("y", (P << 16) | 1, [10], "SUBGRAPH_OUTPUT", "uint64",
                                            [f * 2 + 10 for f in FIB], extension=quant64_params(0.5, 10))],
                      "operations": [{"type": (P << 16) | 0, "inputs": [0], "outputs": [1]}]}}
    mixed = {"name": "fibonacci_float_add", "minSupportedVersion": "V1_2", "isRelaxed": False,
             "expectFailure": False, "extensionNameToPrefix": [{"name": EXTENSION_NAME, "prefix": P}],
             "main": {"inputIndexes": [0], "outputIndexes": [4],
                      "operands": [_operand("n", "TENSOR_FLOAT32", [1], "SUBGRAPH_INPUT", "float32", [10.0], 1),
                                   _operand("f", "TENSOR_FLOAT32", [10], "TEMPORARY_VARIABLE", "float32", [], 1),
                                   _operand("one", "TENSOR_FLOAT32", [10], "CONSTANT_COPY", "float32", [1.0] * 10, 1),
                                   _operand("act", "INT32", [], "CONSTANT_COPY", "int32", [0], 1),
                                   _operand("y", "TENSOR_FLOAT32", [10], "SUBGRAPH_OUTPUT", "float32",
                                            [f + 1.0 for f in FIB])],
                      "operations": [{"type": (P << 16) | 0, "inputs": [0], "outputs": [1]},
                                     {"type": "ADD", "inputs": [1, 2, 3], "outputs": [4]}]}}
    with gzip.open(path, "wt") as f:
        json.dump({"spec": "V1_2/fibonacci", "models": [quant, mixed]}, f)


def _nnhal(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nnhal", *args], capture_output=True, text=True, timeout=300)


def test_conformance_counts_extension_operations_by_name(tmp_path: Path) -> None:
    vectors = tmp_path / "fibonacci.json.gz"
    write_vectors(vectors)
    report = tmp_path / "report.json"
    r = _nnhal("conformance", str(vectors), "--device", "example-fibonacci", "--mode", "sync", "--jobs", "1",
               "--json", str(report), "--no-progress")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(report.read_text())
    ops = doc["operations"]
    assert ops[f"{EXTENSION_NAME}:0"]["pass"] >= 2, ops
    assert ops["ADD"]["pass"] >= 1, ops
    assert f"{EXTENSION_NAME}:0" in r.stdout
    assert doc["data_types"][f"{EXTENSION_NAME}:0"]["pass"] == 1, doc["data_types"]  # EXAMPLE_INT64's model


def test_conformance_through_the_runtime(tmp_path: Path) -> None:
    vectors = tmp_path / "fibonacci.json.gz"
    write_vectors(vectors)
    r = _nnhal("conformance", str(vectors), "--devices", "example-fibonacci,sample-all", "--mode", "sync",
               "--jobs", "1", "--no-progress")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "models: 2 passed, 0 failed, 0 unsupported" in r.stdout


def test_conformance_on_a_device_without_the_extension(tmp_path: Path) -> None:
    vectors = tmp_path / "fibonacci.json.gz"
    write_vectors(vectors)
    r = _nnhal("conformance", str(vectors), "--device", "sample-all", "--mode", "sync", "--jobs", "1",
               "--no-progress")
    assert r.returncode != 0
    assert "not declared by this device" in r.stdout + r.stderr


def test_ops_and_devices_list_the_extension() -> None:
    r = _nnhal("ops", "--device", "example-fibonacci")
    assert r.returncode == 0, r.stderr
    assert f"extensions declared (getSupportedExtensions): 1\n{EXTENSION_NAME}\n" in r.stdout
    assert "operand type 1 EXAMPLE_TENSOR_QUANT64_ASYMM: tensor, 8 bytes an element" in r.stdout
    assert "operation EXAMPLE_FIBONACCI (0): (EXAMPLE_INT64) -> (EXAMPLE_TENSOR_QUANT64_ASYMM) since HAL V1_2" \
        in r.stdout
    r = _nnhal("devices")
    assert r.returncode == 0, r.stderr
    assert f"extensions: {EXTENSION_NAME}" in r.stdout
