"""The conformance suite through a driver service, as in process: a subset
in every default run (sync, async, burst and fenced), the whole suite with
``-m service_sweep``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nnhal.conformance import vectors
from nnhal.conformance.runner import MODES, Runner
from tests.conftest import vectors_root

SUBSET = ["V1_0/add", "V1_0/conv_float", "V1_1/mean_float_1", "V1_2/lstm2_float16", "V1_2/resize_bilinear_v1_2",
          "V1_3/if_constant", "V1_3/while_sum_of_powers_quant8", "V1_3/while_infinite_loop", "V1_2/quantize",
          "V1_3/add_int32", "V1_3/mul_quant8_signed"]
ALL = sorted(vectors_root().rglob("*.json.gz")) if vectors_root().is_dir() else []


def _files(names: list[str]) -> list[Path]:
    root = vectors_root()
    return [p for p in (root / f"{n}.json.gz" for n in names) if p.exists()]


def _run(device: Any, paths: list[Path]) -> tuple[int, list[str]]:
    runner = Runner(device, MODES)
    passed, bad = 0, []
    for path in paths:
        for vm in vectors.load_file(path):
            for r in runner.run_model(vm):
                if r.status == "pass":
                    passed += 1
                else:
                    bad.append(f"{path.parent.name}/{path.name[:-8]} {r.model} [{r.mode}/{r.variant}] {r.status}: "
                               f"{r.message}")
    return passed, bad


def test_conformance_subset_through_the_service(service: Any) -> None:
    paths = _files(SUBSET)
    assert len(paths) >= 6, paths
    passed, bad = _run(service, paths)
    assert not bad, "\n".join(bad[:20])
    assert passed > 100


@pytest.mark.service_sweep
@pytest.mark.timeout(7200)
@pytest.mark.parametrize("path", ALL, ids=[f"{p.parent.name}/{p.name[:-8]}" for p in ALL])
def test_vector_file_through_the_service(service: Any, path: Path) -> None:
    passed, bad = _run(service, [path])
    assert not bad, "\n".join(bad[:20])
