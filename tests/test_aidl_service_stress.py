"""AIDL client processes x mixed executions (sync, fenced, burst by token,
reusable; three prepared models of different shapes; each client its own
random inputs) through one service, beside a HIDL client of the same
service: nothing lost, nothing crossed (every client checks every output it
gets against its own inputs)."""

from __future__ import annotations

from typing import Any

from tests.service_util import run_clients

CLIENTS = 3
EXECUTIONS = 200

_CLIENT = r"""
import json, os, sys
import numpy as np
from nnhal import aidl, fence, hal
from nnhal import memory as hal_memory
from tests.aidl_util import AidlPools, prepare
from tests.driver_util import add_model

seed, n = int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(seed)
dev = aidl.connect(sys.argv[1])
shapes = [(2, 2), (3, 5), (7,)]
pms = [prepare(dev, aidl.convert.from_canonical(add_model(s))) for s in shapes]
bursts = [pm.configureExecutionBurst() for pm in pms]
# a reusable execution per shape, over pools of its own: inputs written into its memory each time
kept = [AidlPools([np.zeros(s, np.float32)] * 2, [int(np.prod(s)) * 4]) for s in shapes]
executions = [pm.createReusableExecution(p.aidl_request(), aidl.ExecutionConfig()) for pm, p in zip(pms, kept)]
counts = {"sync": 0, "fenced": 0, "burst": 0, "reusable": 0}
bad = []
for k in range(n):
    j = int(rng.integers(len(shapes)))
    a = rng.standard_normal(shapes[j]).astype(np.float32) + seed * 1000
    b = rng.standard_normal(shapes[j]).astype(np.float32)
    mode = ("sync", "fenced", "burst", "reusable")[k % 4]
    try:
        if mode == "reusable":
            pools = kept[j]
            view = hal_memory.map(pools.in_mem)
            view[:a.nbytes * 2] = a.tobytes() + b.tobytes()
            view.release()
            executions[j].executeSynchronously(-1)
        else:
            pools = AidlPools([a, b], [a.nbytes])
            req = pools.aidl_request()
            if mode == "sync":
                pms[j].executeSynchronously(req, False, -1, -1)
            elif mode == "fenced":
                r = pms[j].executeFenced(req, [], False, -1, -1, -1)
                ok = fence.wait(hal.Handle(fds=[r.syncFence]), 60)
                os.close(r.syncFence)
                if not ok:
                    raise RuntimeError("fence not signaled")
            else:
                bursts[j].executeSynchronously(req, [2 * k, 2 * k + 1], False, -1, -1)
                bursts[j].releaseMemoryResource(2 * k)
                bursts[j].releaseMemoryResource(2 * k + 1)
        got = pools.output(0, np.float32, shapes[j])
        if np.array_equal(got, a + b):
            counts[mode] += 1
        else:
            bad.append((k, mode, "wrong output"))
    except aidl.ServiceSpecificError as e:
        bad.append((k, mode, str(e)))
    finally:
        if mode != "reusable":
            pools.close()
print(json.dumps({"seed": seed, "ok": sum(counts.values()), "counts": counts, "bad": bad[:5], "nbad": len(bad)}))
dev.close()
"""

_HIDL_CLIENT = r"""
import json, sys
import numpy as np
import nnhal
from nnhal import hal
from tests.driver_util import Pools, add_model, prepared_model

dev = nnhal.connect(sys.argv[1])
pm = prepared_model(add_model((3, 5)), dev)
rng, ok = np.random.default_rng(99), 0
for _ in range(int(sys.argv[3])):
    a, b = (rng.standard_normal((3, 5)).astype(np.float32) for _ in range(2))
    with Pools([a, b], [a.nbytes]) as pools:
        st = pm.executeSynchronously_1_3(pools.request(), hal.MeasureTiming.NO, None, None)[0]
        ok += st == hal.ErrorStatus.NONE and np.array_equal(pools.output(0, np.float32, (3, 5)), a + b)
print(json.dumps({"ok": int(ok), "nbad": int(sys.argv[3]) - int(ok), "counts": "hidl"}))
dev.close()
"""


def test_concurrent_aidl_clients_nothing_lost_or_crossed(service_process: Any) -> None:
    scripts = [(_CLIENT, [str(seed + 1), str(EXECUTIONS)]) for seed in range(CLIENTS)]
    for r in run_clients(service_process, [*scripts, (_HIDL_CLIENT, ["0", str(EXECUTIONS)])], timeout=300):
        assert r["nbad"] == 0 and r["ok"] == EXECUTIONS, r
