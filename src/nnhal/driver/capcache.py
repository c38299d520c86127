"""Measured capabilities, measured once per machine and kept.

A backend whose ``capabilities()`` times kernels (``Backend.measured_capabilities``
true: the sample and LiteRT backends) would otherwise give figures that differ
from process to process, so the runtime's partitioning would not be
reproducible and every ``nnhal devices`` would pay the measurement.  The front
end's ``Device.getCapabilities_1_3`` reads them through :func:`cached`: a JSON
file in the state folder beside the compilation cache key
(``nnhal.driver.cache.key_dir()/capabilities``), keyed by the device name, the
driver version string and the machine (host name, architecture, processor,
CPU count).  ``nnhal devices --remeasure`` (:func:`forget`) measures again.
A file that cannot be read or written is measured over, never an error.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import tempfile
from pathlib import Path
from typing import Callable, Optional

from nnhal import hal

__all__ = ["cached", "forget", "cache_dir", "to_json", "from_json"]


def cache_dir() -> Path:
    from nnhal.driver.cache import key_dir

    return key_dir() / "capabilities"


def _machine() -> str:
    return "|".join([platform.node(), platform.machine(), platform.processor(), str(os.cpu_count())])


def _path(name: str, version: str) -> Path:
    h = hashlib.sha256(f"{name}\0{version}\0{_machine()}".encode()).hexdigest()[:20]
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:64]
    return cache_dir() / f"{safe}-{h}.json"


def _perf(p: hal.PerformanceInfo) -> list[float]:
    return [float(p.execTime), float(p.powerUsage)]


def to_json(caps: hal.Capabilities) -> dict:
    return {"relaxedScalar": _perf(caps.relaxedFloat32toFloat16PerformanceScalar),
            "relaxedTensor": _perf(caps.relaxedFloat32toFloat16PerformanceTensor),
            "operandPerformance": [[int(p.type), *_perf(p.info)] for p in caps.operandPerformance],
            "if": _perf(caps.ifPerformance), "while": _perf(caps.whilePerformance)}


def from_json(d: dict) -> hal.Capabilities:
    def perf(v: list) -> hal.PerformanceInfo:
        return hal.PerformanceInfo(execTime=float(v[0]), powerUsage=float(v[1]))

    return hal.Capabilities(
        relaxedFloat32toFloat16PerformanceScalar=perf(d["relaxedScalar"]),
        relaxedFloat32toFloat16PerformanceTensor=perf(d["relaxedTensor"]),
        operandPerformance=[hal.OperandPerformance(type=hal.OperandType(int(t)), info=perf([e, p]))
                            for t, e, p in d["operandPerformance"]],
        ifPerformance=perf(d["if"]), whilePerformance=perf(d["while"]))


def cached(name: str, version: str, measure: Callable[[], hal.Capabilities]) -> hal.Capabilities:
    """The kept figures of device ``name`` at driver ``version`` on this machine, else ``measure()``
    kept for the next process (written atomically)."""
    path = _path(name, version)
    try:
        return from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        pass  # NOTE: absent, unreadable or malformed: measured again and rewritten
    caps = measure()
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".caps-")
        with os.fdopen(fd, "w") as f:
            json.dump({"device": name, "version": version, "machine": _machine(), **to_json(caps)}, f)
        os.replace(tmp, path)
    except OSError:
        pass  # NOTE: a read-only state folder: the figures are this process's only
    return caps


def forget(name: Optional[str] = None) -> int:
    """Drop the kept figures (of ``name``, or every device's); returns how many files went."""
    n = 0
    try:
        files = list(cache_dir().glob("*.json"))
    except OSError:
        return 0
    for f in files:
        if name is not None:
            try:
                if json.loads(f.read_text()).get("device") != name:
                    continue
            except (OSError, ValueError):
                pass
        try:
            f.unlink()
            n += 1
        except OSError:
            pass
    return n
