"""The sample backend: the numpy reference executor (``nnhal.engine.executor``) under
the shared HAL front end -- the ``sample-all`` driver (Android's
``SampleDriverFull``).  Supports every registered operation; compiles by
running every operation's prepare step; caches the prepared states
(``nnhal.driver.cache``'s format)."""

from __future__ import annotations

from typing import Any, Optional

from nnhal import hal
from nnhal.driver import cache as driver_cache
from nnhal.driver.backend import Backend
from nnhal.driver.device import Device
from nnhal.engine.capabilities import measure_capabilities
from nnhal.engine.executor import Executor
from nnhal.engine.validation import is_extension_type, subgraph_depths, subgraph_references
from nnhal.ops import registry
from nnhal.ops.base import MAX_RANK
from nnhal.ops.extension import split_type

VERSION_STRING = "nnhal-sample-all 0.1 (CPU reference, numpy)"


def supported_operations(model: hal.Model, defs: list) -> list[bool]:
    """One bool per main operation of a validated model: the operation is
    implemented and, for IF / WHILE, so is every operation of the subgraphs
    it references, transitively (the spec of getSupportedOperations_1_3), at
    any nesting depth (the executor keeps its own stack of subgraphs); no
    operand it (or they) use has a rank above ``MAX_RANK``."""
    refs = subgraph_references(model)
    depths = subgraph_depths(model, refs)
    nodes = [model.main, *model.referenced]
    # NOTE: no recursion: in a DAG a referenced subgraph is strictly shallower
    # than its referrer, so visiting the reachable subgraphs by increasing
    # depth settles every subgraph's answer once, after those it references.
    ok = [False] * len(nodes)
    for g in sorted((g for g in range(1, len(nodes)) if depths[g] >= 0), key=depths.__getitem__):
        ok[g] = all(registry.find(op.type) is not None for op in nodes[g].operations) and all(ok[r] for r in refs[g]) \
            and all(len(o.dimensions) <= MAX_RANK for o in nodes[g].operands)

    def operation_ok(op: hal.Operation) -> bool:
        main = model.main.operands
        if any(len(main[i].dimensions) > MAX_RANK for i in (*op.inputs, *op.outputs)):
            return False
        for i in op.inputs:
            o = model.main.operands[i]
            if o.lifetime == hal.OperandLifeTime.SUBGRAPH:
                g = int(o.location.offset) + 1
                if not ok[g]:
                    return False
        return True

    return [d is not None and registry.find(op.type) is not None and operation_ok(op)
            for d, op in zip(defs, model.main.operations)]


class SampleBackend(Backend):
    """The numpy reference executor as a backend."""

    name = "sample"
    caching = True
    reference_checked = False  # NOTE: it is the reference: it fails those executions itself
    shares_compiled = True  # NOTE: executions share only the Executor's read-only prepared state

    def __init__(self, version_string: str = VERSION_STRING):
        self.version_string = version_string

    measured_capabilities = True  # NOTE: timed: kept per machine (nnhal.driver.capcache)

    def capabilities(self) -> hal.Capabilities:
        return measure_capabilities()

    def supported(self, model: hal.Model, defs: list) -> list[tuple[bool, str]]:
        declared = {e.name for e in self.extensions()}
        return [(ok, "" if ok else _reason(model, op, declared))
                for ok, op in zip(supported_operations(model, defs), model.main.operations)]

    def compile(self, model: hal.Model, pool_views: list, deadline_ns: Optional[int]) -> Executor:
        # NOTE: the operations' prepare steps poll the deadline scope the front end opened
        return Executor(model, pool_views)

    def cache_encode(self, model: hal.Model, pool_views: list, compiled: Any, hal_version: int, priority: int,
                     key: bytes, token: bytes) -> tuple[bytes, list, int]:
        return driver_cache.encode(model, pool_views, compiled, hal_version, priority, key, self.version_string,
                                   token)

    def cache_load(self, model_fd: int, data_fd: int, key: bytes, token: bytes) -> driver_cache.Restored:
        return driver_cache.load(model_fd, data_fd, key, self.version_string, token, self.extensions())


def _reason(model: hal.Model, op: hal.Operation, declared: set) -> str:
    """Why the reference executor does not run ``op``."""
    if is_extension_type(op.type):
        prefix, local = split_type(op.type)
        name = next((e.name for e in model.extensionNameToPrefix if e.prefix == prefix), f"prefix {prefix}")
        if name in declared:
            return f"extension {name} has no operation {local}"
        return f"extension {name} is not declared by this device (getSupportedExtensions)"
    return ("not implemented by the reference executor (an OEM operation, an operand of rank above "
            f"{MAX_RANK}, or an IF / WHILE subgraph with one or with an extension operation)")


def sample_device(name: str = "sample-all", **options: Any) -> Device:
    """A new front end over a new sample backend, apart from the device table's
    ``sample-all`` (its own scheduler, cache key directory or version string:
    ``options`` are :class:`nnhal.driver.Device`'s)."""
    return Device(name, SampleBackend(), **options)
