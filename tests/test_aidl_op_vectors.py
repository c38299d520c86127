"""The AIDL HAL's operation vectors (../shared/conformance-aidl: BATCH_MATMUL, PACK, RESHAPE of
TENSOR_INT32 at AIDL version 2, quantized RSQRT at version 3) through the engine: each model valid
as of its ``minSupportedVersion`` and invalid at every earlier version (the HIDL entry points'
1.0-1.3 included), executed by the reference executor and judged by the harness's rules; the
quant8-signed copies the conformance runner makes of coupled models too.  (Through the AIDL face of
a device: the AIDL conformance run.)"""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path

import pytest

from nnhal import hal
from nnhal.conformance import vectors
from nnhal.conformance.compare import compare
from nnhal.conformance.runner import has_quant8_coupled_operands, to_signed
from nnhal.engine.executor import Executor
from nnhal.engine.validation import ValidationError, validate_model
from tests.conftest import aidl_vectors_root

FILES = sorted(aidl_vectors_root().rglob("*.json.gz")) if aidl_vectors_root().is_dir() else []
V = hal.HalVersion


def _forms(path: Path) -> list[vectors.VectorModel]:
    out = []
    for vm in vectors.load_file(path):
        out.append(vm)
        if has_quant8_coupled_operands(vm):
            out.append(to_signed(vm))
    return out


def _run(vm: vectors.VectorModel) -> list[str]:
    """What fails of one model: its validation at each version, its outputs."""
    pools: list[bytearray] = []

    def factory(data: bytes) -> hal.Memory:
        pools.append(bytearray(data))
        return hal.Memory(name="ashmem", size=len(data))

    model = vm.build_model(factory)
    bad = []
    assert vm.version is not None and vm.version >= V.AIDL_V2, vm.minSupportedVersion
    for earlier in V:
        if earlier < vm.version:
            try:
                validate_model(model, pools, earlier)
                bad.append(f"valid at {earlier.name}")
            except ValidationError as e:
                assert e.status == hal.ErrorStatus.INVALID_ARGUMENT
    validate_model(model, pools, vm.version)
    outs = Executor(model, pools).run(vm.input_values())
    has_fp16 = any(o.type == hal.OperandType.TENSOR_FLOAT16 for o in vm.main.operands)
    for j, (a, o) in enumerate(zip(outs, vm.output_operands(), strict=True)):
        v = compare(a, o.data, o.type, model_has_fp16=has_fp16, relaxed=vm.isRelaxed, name=vm.name,
                    ignored=o.isIgnored)
        if not v.ok:
            bad.append(f"output {j}: {v.message}")
    return bad


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name}/{p.name[:-8]}" for p in FILES])
def test_vector_file(path: Path) -> None:
    failures = {vm.name: bad for vm in _forms(path) if (bad := _run(vm))}
    assert not failures, failures


def test_every_vector_is_counted() -> None:
    """The files and their models (a missing file would pass the parametrized test by its absence)."""
    if not FILES:
        pytest.skip(f"no AIDL vectors at {aidl_vectors_root()}")
    per_op: Counter = Counter()
    for path in FILES:
        for vm in _forms(path):
            per_op[(vm.minSupportedVersion, ",".join(sorted(vm.operation_types - {"ADD"})), vm.data_type)] += 1
    # NOTE: 83 models, and the signed copies of the single-operation quant8 asymm ones (4 RSQRT, 5 PACK)
    assert sum(per_op.values()) == 28 + 45 + 2 + 8 + 4 + 5
    assert {k[:2] for k in per_op} == {("AIDL_V2", "BATCH_MATMUL"), ("AIDL_V2", "PACK"), ("AIDL_V2", "RESHAPE"),
                                       ("AIDL_V3", "RSQRT")}
    assert per_op[("AIDL_V3", "RSQRT", "quant8 signed")] == 4
    assert {k[2] for k in per_op if k[1] == "PACK"} == {"float32", "float16", "quant8 asymm", "quant8 signed",
                                                        "int32"}


def test_unknown_version_names_make_a_file_unreadable(tmp_path: Path) -> None:
    assert vectors.hal_version("AIDL_V4") == V.AIDL_V4 and vectors.hal_version("V1_0") == V.V1_0
    assert vectors.hal_version("UNKNOWN") is None
    doc = b'{"spec": "x", "models": [{"name": "m", "minSupportedVersion": "AIDL_V9", "main": {}}]}'
    (tmp_path / "bad.json.gz").write_bytes(gzip.compress(doc))
    with pytest.raises(vectors.VectorFileError, match="AIDL_V9"):
        vectors.load_file_checked(tmp_path / "bad.json.gz")
