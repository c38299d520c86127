"""The operation registry: every operation (HAL 1.3's and the AIDL HAL's)
registered exactly once, with signatures that are well-formed."""

from __future__ import annotations

from nnhal import hal
from nnhal.ops import registry
from nnhal.ops.base import OpDef, Signature


def test_every_operation_type_is_registered_once() -> None:
    expected = {t for t in hal.OperationType if t != hal.OperationType.OEM_OPERATION}
    assert len(expected) == 106  # NOTE: HAL 1.3's 0..101, the AIDL HAL's 102..105
    missing = sorted(t.name for t in expected - set(registry.REGISTRY))
    assert not missing, f"not registered: {missing}"
    seen: dict = {}
    for module in registry.FAMILIES:
        for op in module.OPS:
            assert op.type not in seen, f"{op.type.name} in {module.__name__} and {seen[op.type]}"
            seen[op.type] = module.__name__


def test_signatures_are_well_formed() -> None:
    for t, op in registry.REGISTRY.items():
        assert isinstance(op, OpDef) and op.type == t
        assert op.signatures, f"{t.name} has no signature"
        for sig in op.signatures:
            assert isinstance(sig, Signature)
            for spec in (*sig.inputs, *sig.optional, *sig.outputs):
                specs = spec if isinstance(spec, frozenset) else {spec}
                assert all(int(s) in hal.OperandType._value2member_map_ for s in specs), (t.name, spec)
        assert all(isinstance(i, int) for i in op.omittable_inputs)


def test_find_rejects_unknown_types() -> None:
    assert registry.find(106) is None
    assert registry.find(9999) is None
    assert registry.find(-1) is None
    assert registry.find(hal.OperationType.ADD).type == hal.OperationType.ADD


def test_reference_dispatch_flags() -> None:
    """Android 11's CpuExecutor runs these operations in its own switch, where a
    missing operand is BAD_DATA (INVALID_ARGUMENT), not OP_FAILED."""
    O = hal.OperationType  # noqa: E741
    bad_data = {O.RESHAPE, O.DEPTH_TO_SPACE, O.SPACE_TO_DEPTH, O.EMBEDDING_LOOKUP, O.HASHTABLE_LOOKUP,
                O.RANDOM_MULTINOMIAL, O.RNN, O.BATCH_TO_SPACE_ND, O.SPACE_TO_BATCH_ND, O.PAD, O.PAD_V2, O.CAST,
                O.MEAN, O.ARGMAX, O.ARGMIN, O.EXPAND_DIMS, O.SPLIT, O.MAXIMUM, O.MINIMUM, O.GROUPED_CONV_2D,
                O.TILE, O.QUANTIZED_16BIT_LSTM, O.POW}
    assert {t for t, op in registry.REGISTRY.items() if op.bad_data_on_missing_operand} == bad_data
    omitted_outputs = {O.IF, O.WHILE, O.LSH_PROJECTION, O.LSTM, O.BIDIRECTIONAL_SEQUENCE_LSTM, O.SVDF}
    assert {t for t, op in registry.REGISTRY.items() if op.allow_omitted_outputs} == omitted_outputs


def test_first_versions_of_the_aidl_operations() -> None:
    """AIDL version 2 (feature level 6) added BATCH_MATMUL, PACK and RESHAPE of TENSOR_INT32, version 3
    (feature level 7) MIRROR_PAD, REVERSE and quantized RSQRT; nothing else is newer than HAL 1.3."""
    O, T, V = hal.OperationType, hal.OperandType, hal.HalVersion  # noqa: E741
    newer = {(t, s.inputs[0] if s.inputs[0] != T.INT32 else s.variadic_inputs, s.version)
             for t, op in registry.REGISTRY.items() for s in op.signatures if s.version > V.V1_3}
    types = (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_INT32)
    assert newer == {
        *((O.BATCH_MATMUL, t, V.AIDL_V2) for t in (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_INT32,
                                                  T.TENSOR_QUANT8_ASYMM_SIGNED)),
        *((O.PACK, t, V.AIDL_V2) for t in types), (O.RESHAPE, T.TENSOR_INT32, V.AIDL_V2),
        *((O.MIRROR_PAD, t, V.AIDL_V3) for t in types), *((O.REVERSE, t, V.AIDL_V3) for t in types),
        (O.RSQRT, T.TENSOR_QUANT8_ASYMM, V.AIDL_V3), (O.RSQRT, T.TENSOR_QUANT8_ASYMM_SIGNED, V.AIDL_V3)}
    for t in (O.BATCH_MATMUL, O.PACK, O.MIRROR_PAD, O.REVERSE):
        assert all(s.version > V.V1_3 for s in registry.REGISTRY[t].signatures), t.name
