"""``nnhal bench MODEL.tflite --device D --instructions``: machine instructions per execution of the
model on device ``D`` (as ``nnhal bench`` runs it: the NNAPI delegate's plan, in nnhal's process) and
of the HAL data path floor (:class:`nnhal.delegate.run.DataPathFloor`: LiteRT's XNNPACK with what any
in-process HAL execution must do around it), and their difference: what the device costs beyond the
floor.  Counted by valgrind's callgrind, the steadiest measure on a shared machine (wall time varies
with the load, instructions do not): each side in a process of its own under callgrind with
collection on only inside ``functools.reduce``, which runs the timed executions after a warm-up (both
sides built in both processes, so each process holds the same objects); the figure is the count
divided by the executions.  valgrind's instruction count of a ``rep movsb`` copy is one per byte:
copies both sides make count alike, the difference is what matters.
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from nnhal.cli.app import UserError

WARMUP = 30
TIMEOUT_S = 1800.0


def _engines(path: str, device: str, threads: int) -> tuple[Callable[[], Any], Callable[[], Any], Callable[[], None]]:
    """(a run on ``device``, a run of the floor, close) on the same generated input, in this process."""
    from nnhal.cli.delegate import add_cache_argument, run_engine
    from nnhal.cli.tflite import add_plan_arguments
    from nnhal.conformance.vts.device import open_device
    from nnhal.delegate.run import DataPathFloor

    ap = argparse.ArgumentParser()
    add_plan_arguments(ap)
    add_cache_argument(ap)
    args = ap.parse_args([])
    args.threads, args.seed = threads, 0
    _, x, run, close = run_engine(path, args, open_device, device)
    try:
        floor = DataPathFloor(path, x, threads=threads)
    except BaseException:
        close()
        raise

    def close_both() -> None:
        close()
        floor.close()

    return run, (lambda: floor.run(x)), close_both


def child(path: str, device: str, side: str, runs: int, threads: int) -> None:
    """The executions one callgrind process counts (``side``: "device" or "floor")."""
    run, floor, close = _engines(path, device, threads)
    try:
        fn = run if side == "device" else floor
        for _ in range(WARMUP):
            fn()
        gc.collect()
        gc.disable()  # NOTE: a collection inside the counted executions would be counted on one side only
        # NOTE: callgrind collects inside functools.reduce alone (--toggle-collect): these executions and nothing else
        functools.reduce(lambda acc, _: (fn(), acc)[1], range(runs), 0)
        gc.enable()
    finally:
        close()


def _start(path: str, device: str, side: str, runs: int, threads: int, out_dir: str) -> tuple[Any, str]:
    """The callgrind process counting ``side`` (started) and the file it writes."""
    out = os.path.join(out_dir, f"{side}.callgrind")
    env = {**os.environ, "NNHAL_LITERT_IN_PROCESS": "1", "NNHAL_LITERT_THREADS": str(threads)}
    cmd = ["valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=functools_reduce",
           f"--callgrind-out-file={out}", sys.executable, "-m", "nnhal.cli.floorcount", path, device, side, str(runs),
           str(threads)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env), out


def _counted(path: str, side: str, proc: Any, out: str) -> int:
    """The instructions ``proc`` (of :func:`_start`) counted; UserError when it failed."""
    try:
        _, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise UserError(f"{path}: counting the {side}'s instructions took over {TIMEOUT_S:.0f} s") from None
    summary = [ln for ln in Path(out).read_text().splitlines() if ln.startswith("summary:")] \
        if proc.returncode == 0 and os.path.exists(out) else []
    if not summary:
        tail = (err.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"{path}: counting the {side}'s instructions failed (valgrind exit {proc.returncode}: {tail})")
    return int(summary[0].split()[1])


def main(paths: list[str], device: str, runs: int, threads: int) -> int:
    """Prints, per model, the instructions per execution of ``device``, of the floor and the difference."""
    if shutil.which("valgrind") is None:
        raise UserError("--instructions counts with valgrind's callgrind: valgrind is not installed")
    if runs < 1:
        raise UserError(f"--runs {runs}: give at least one execution to count")
    from nnhal.conformance.vts.device import DeviceNotFound, open_device

    try:
        open_device(device)  # NOTE: a wrong name is one line here, not a failed valgrind run
    except DeviceNotFound as e:
        raise UserError(str(e)) from None
    for path in paths:
        if not os.path.isfile(path):
            raise UserError(f"{path}: no such file")
        with tempfile.TemporaryDirectory(prefix="nnhal-count-") as tmp:
            # NOTE: both sides at once (a process each): counts do not depend on what else runs
            started = {side: _start(path, device, side, runs, threads, tmp) for side in ("device", "floor")}
            try:
                counts = {side: _counted(path, side, p, out) / runs for side, (p, out) in started.items()}
            finally:
                for p, _ in started.values():
                    if p.poll() is None:
                        p.kill()
                        p.wait()
        dev, floor = counts["device"], counts["floor"]
        print(f"{Path(path).name}: instructions per execution (callgrind, {runs} executions each): nnhal {device} "
              f"{dev:.0f}, HAL data path floor {floor:.0f}; nnhal {device} - HAL data path floor: {dev - floor:+.0f}")
    return 0


if __name__ == "__main__":  # NOTE: the process callgrind counts (see _start)
    child(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
