"""Base models for the VTS-style validation tests (``test_vts_validate_*``):
the conformance vector models, either all of them (the ``sweep`` runs) or a
deterministic, varied sample that keeps the default run short."""

from __future__ import annotations

import functools

from nnhal.conformance.vectors import VectorModel, load
from tests.conftest import vectors_root

VECTORS = vectors_root()


@functools.lru_cache(maxsize=1)
def all_models() -> tuple[VectorModel, ...]:
    return tuple(load([VECTORS])) if VECTORS.is_dir() else ()


def _kind(vm: VectorModel) -> tuple:
    """What makes two models 'the same sort': their operations and the types of
    the first operation's first input (float32 / float16 / quant8 / ...)."""
    main = vm.main
    first = main.operations[0] if main.operations else None
    in_type = main.operands[first.inputs[0]].type if first is not None and first.inputs else -1
    return (tuple(sorted(vm.operation_types)), int(in_type))


def _size(vm: VectorModel) -> int:
    return sum(len(sg.operands) + len(sg.operations) for sg in [vm.main, *vm.referenced])


_VARIANT_MARKS = ("all_inputs_as_internal", "all_tensors_as_inputs")


@functools.lru_cache(maxsize=1)
def sample_models() -> tuple[VectorModel, ...]:
    """A deterministic, varied sample: for each set of operations, the smallest
    model of each of its first two input types (plain variants preferred),
    models with referenced subgraphs (IF / WHILE) of up to three input types
    and the smallest of each control-flow spec, and a few 'all inputs as internal' / 'all tensors as inputs' variants."""
    by_kind: dict[tuple, list[VectorModel]] = {}
    for vm in all_models():
        by_kind.setdefault(_kind(vm), []).append(vm)
    picked: list[VectorModel] = []
    per_opset: dict[tuple, int] = {}
    variants: dict[str, list[VectorModel]] = {mark: [] for mark in _VARIANT_MARKS}
    for kind, models in by_kind.items():  # NOTE: dicts keep file order, so this is deterministic
        for mark in _VARIANT_MARKS:
            variants[mark] += [vm for vm in models if mark in vm.name]
        plain = [vm for vm in models if not any(mark in vm.name for mark in _VARIANT_MARKS)]
        opset = kind[0]
        limit = 3 if models[0].referenced else 2
        if not plain or per_opset.get(opset, 0) >= limit:
            continue
        per_opset[opset] = per_opset.get(opset, 0) + 1
        picked.append(min(plain, key=_size))
    # every control-flow spec (IF / WHILE with referenced subgraphs): its smallest plain model
    by_spec: dict[str, list[VectorModel]] = {}
    for vm in all_models():
        if vm.referenced and not any(mark in vm.name for mark in _VARIANT_MARKS):
            by_spec.setdefault(vm.spec, []).append(vm)
    chosen = {id(vm) for vm in picked}
    picked += [vm for vm in (min(ms, key=_size) for ms in by_spec.values()) if id(vm) not in chosen]
    for mark in _VARIANT_MARKS:
        # NOTE: every 25th of the smallest 500, so a handful of different operations
        picked += sorted(variants[mark], key=_size)[:400:40]
    return tuple(picked)


def model_id(vm: VectorModel) -> str:
    return f"{vm.spec}:{vm.name}"
