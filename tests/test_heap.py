"""nnhal.platform.heap: an execution's arrays reuse heap pages instead of
faulting fresh mappings in on every run (each case in its own process: the
policy is process-wide)."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import resource, sys
import numpy as np
from nnhal.platform import heap
on = heap.keep_freed_memory()
assert heap.keep_freed_memory() == on  # NOTE: set once; later calls only answer
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
# NOTE: growing sizes (1-3 MiB), as an execution's first runs see: glibc's dynamic threshold stays one
# array behind, each a fresh mapping
for i in range(200):
    np.ones((1 << 17) + i * 1300)
print(int(on), resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _probe(env_extra: dict[str, str]) -> tuple[int, int]:
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
                                                            "GLIBC_TUNABLES", "NNHAL_MALLOC_POLICY")}
    env.update(env_extra)
    p = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    on, faults = p.stdout.split()
    return int(on), int(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc policy")
def test_freed_arrays_reuse_heap_pages() -> None:
    on, faults = _probe({})
    assert on == 1
    # NOTE: 200 fresh mappings of 1-3 MiB would fault ~100,000 pages in
    assert faults < 2000, faults


@pytest.mark.parametrize("env", [{"NNHAL_MALLOC_POLICY": "0"}, {"MALLOC_MMAP_THRESHOLD_": "131072"}])
def test_a_policy_of_the_environment_is_kept(env: dict[str, str]) -> None:
    on, _ = _probe(env)
    assert on == 0


FROZEN_PROBE = """
import gc
from nnhal.platform import heap
assert gc.get_freeze_count() == 0
kept = [[k] for k in range(1000)]  # long-lived data, tracked by the collector
with heap.frozen():
    frozen = gc.get_freeze_count()
    assert frozen >= len(kept)
    with heap.frozen():  # nested: the inner block neither freezes again nor unfreezes
        assert gc.get_freeze_count() == frozen
    assert gc.get_freeze_count() == frozen
    garbage = []
    garbage.append(garbage)  # a cycle made within the block is collected as always
    del garbage
    assert gc.collect() >= 1
assert gc.get_freeze_count() == 0
try:
    with heap.frozen():
        raise RuntimeError("the block failed")
except RuntimeError:
    pass
assert gc.get_freeze_count() == 0  # unfrozen on the way out of a failure too
gc.freeze()  # the process's own freeze (nnhal bench's): left as it was, the block's objects with it
mine = gc.get_freeze_count()
more = [[k] for k in range(1000)]
with heap.frozen():
    assert gc.get_freeze_count() >= mine + len(more)
assert gc.get_freeze_count() >= mine + len(more)
print("ok")
"""


def test_frozen_leaves_the_objects_alive_at_its_start_out_of_collections_for_the_block_only():
    out = subprocess.run([sys.executable, "-c", FROZEN_PROBE], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_vts_cases_are_not_tracked_by_the_collector():
    import gc

    from nnhal.conformance.vts.case import Case

    c = Case("model", "ValidationTest.x", "add", "", "NONE", "NONE", "pass", "", 0.5)
    assert not gc.is_tracked(c)
