"""8 client processes x 1000 mixed executions (sync, async, fenced; three
prepared models of different shapes; each client its own random inputs)
through one service at once: nothing lost, nothing crossed (every client
checks every output it gets against its own inputs)."""

from __future__ import annotations

import time
from typing import Any

from tests.service_util import proc_counts, run_clients

CLIENTS = 8
EXECUTIONS = 1000

_CLIENT = r"""
import json, os, sys
import numpy as np
from nnhal import fence, hal
import nnhal
from tests.driver_util import Pools, add_model, prepared_model

S, M = hal.ErrorStatus, hal.MeasureTiming
seed, n = int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(seed)
dev = nnhal.connect(sys.argv[1])
shapes = [(2, 2), (3, 5), (7,)]
pms = [prepared_model(add_model(s), dev) for s in shapes]
counts = {"sync": 0, "async": 0, "fenced": 0}
bad = []
for k in range(n):
    j = int(rng.integers(len(shapes)))
    a = rng.standard_normal(shapes[j]).astype(np.float32) + seed * 1000
    b = rng.standard_normal(shapes[j]).astype(np.float32)
    mode = ("sync", "async", "fenced")[k % 3]
    with Pools([a, b], [a.nbytes]) as pools:
        req = pools.request()
        if mode == "sync":
            st = pms[j].executeSynchronously_1_3(req, M.NO, None, None)[0]
        elif mode == "async":
            cb = hal.ExecutionCallback()
            launch = pms[j].execute_1_3(req, M.NO, None, None, cb)
            st = cb.wait(60)[0] if launch == S.NONE else launch
        else:
            st, sync_fence, _ = pms[j].executeFenced(req, [], M.NO, None, None, None)
            if st == S.NONE and sync_fence is not None and sync_fence.fds:
                if not fence.wait(sync_fence, 60):
                    st = S.GENERAL_FAILURE
                fence.close(sync_fence)
        got = pools.output(0, np.float32, shapes[j])
        if st != S.NONE or not np.array_equal(got, a + b):
            bad.append((k, mode, int(st)))
        else:
            counts[mode] += 1
print(json.dumps({"seed": seed, "ok": sum(counts.values()), "counts": counts, "bad": bad[:5], "nbad": len(bad)}))
dev.close()
"""


def test_concurrent_clients_nothing_lost_or_crossed(service_process: Any) -> None:
    before = proc_counts(service_process.pid)
    t0 = time.monotonic()
    results = run_clients(service_process, [(_CLIENT, [str(seed + 1), str(EXECUTIONS)]) for seed in range(CLIENTS)])
    seconds = time.monotonic() - t0
    for r in results:
        assert r["nbad"] == 0 and r["ok"] == EXECUTIONS, r
    total = sum(r["ok"] for r in results)
    print(f"\n{CLIENTS} clients x {EXECUTIONS} executions: {total} correct in {seconds:.1f} s "
          f"({total / seconds:.0f} executions/s); service threads {before['threads']} -> "
          f"{proc_counts(service_process.pid)['threads']}")
