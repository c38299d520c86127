"""The NNAPI delegate's compilation caching (``cache_dir`` and ``model_token``
in TFLite's ``nnapi_delegate.cc``; ``ANeuralNetworksCompilation_setCaching`` in
the runtime) for an NNAPI partition: the token names the partition's cache
files in the directory; when they exist the device is asked to
``prepareModelFromCache`` first, and when that fails (no files yet, another
driver version or key, files modified) the partition is prepared with the
files given to ``prepareModel`` so that the driver saves into them, as
Android's runtime does.

The token is 32 bytes of SHA-256 over the model token (``nnhal run`` /
``bench`` take it from the model file's bytes), the partition (its operators,
inputs and outputs), the HAL version and preference it is prepared with, and
the device's name and version string: another model, partition, Android API
level or driver never meets these files.  Files are created 0600; what is in
them is the driver's to authenticate (nnhal's drivers refuse tampered,
truncated, swapped or re-signed files: ``nnhal.driver.cache``).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from nnhal import hal
from nnhal.delegate import halmodel
from nnhal.hal.types import HalVersion


@dataclass(frozen=True)
class CacheDir:
    """A compilation cache directory and the model token of the files in it."""

    path: Path
    model_token: bytes

    @staticmethod
    def for_model(directory: str, model_bytes: bytes) -> "CacheDir":
        """``directory`` (created if missing) with the token of a model's bytes (OSError if unusable)."""
        p = Path(directory).expanduser()
        if p.exists() and not p.is_dir():
            raise NotADirectoryError(20, "not a directory")
        p.mkdir(parents=True, exist_ok=True)
        if not os.access(p, os.W_OK | os.X_OK):
            raise PermissionError(f"{p}: not a writable directory")
        return CacheDir(p, hashlib.sha256(model_bytes).digest())


def partition_token(cache: CacheDir, partition: tuple, version: HalVersion, preference: str, device_name: str,
                    device_version: str) -> bytes:
    """The 32-byte token of one partition on one device (see the module docstring)."""
    h = hashlib.sha256(b"nnhal-delegate-cache-1\0")
    h.update(cache.model_token)
    for part in (repr(partition), str(int(version)), preference, device_name, device_version):
        h.update(part.encode() + b"\0")
    return h.digest()


def prepare(device: Any, model: hal.Model, version: HalVersion, preference: str, relaxed: bool, cache: CacheDir,
            partition: tuple) -> tuple[Any, str]:
    """(prepared model, how): loaded from ``cache``'s files, or prepared (saving into them when the
    device caches); ``how`` says which, in a few words.  RuntimeError when the device refuses to prepare
    (as :func:`halmodel.prepare`)."""
    if version < HalVersion.V1_2:
        return halmodel.prepare(device, model, version, preference, relaxed), \
            f"prepared (HAL {version.name[1:].replace('_', '.')} has no compilation cache)"
    status, n_model, n_data = device.getNumberOfCacheFilesNeeded()
    if status != hal.ErrorStatus.NONE or n_model + n_data == 0:
        return halmodel.prepare(device, model, version, preference, relaxed), \
            "prepared (the device does not cache compilations)"
    _, dev_version = device.getVersionString()
    token = partition_token(cache, partition, version, preference, getattr(device, "name", ""), str(dev_version))
    paths = [cache.path / f"{token.hex()}_{i}" for i in range(n_model + n_data)]
    if all(p.is_file() and p.stat().st_size > 0 for p in paths):
        prepared = _load(device, paths, n_model, token, version)
        if prepared is not None:
            return prepared, f"loaded from the compilation cache ({cache.path})"
    fds = []
    try:
        for p in paths:
            fds.append(os.open(p, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600))
        handles = [hal.Handle(fds=[fd]) for fd in fds]
        prepared = halmodel.prepare(device, model, version, preference, relaxed,
                                    cache=(handles[:n_model], handles[n_model:], token))
    except OSError as e:
        return halmodel.prepare(device, model, version, preference, relaxed), f"prepared (cache files: {e.strerror})"
    finally:
        for fd in fds:
            os.close(fd)
    return prepared, f"prepared and saved to the compilation cache ({cache.path})"


def _load(device: Any, paths: list[Path], n_model: int, token: bytes, version: HalVersion) -> Optional[Any]:
    """The prepared model loaded from ``paths``, or None (the driver refused the files: prepare again)."""
    fds = []
    try:
        for p in paths:
            fds.append(os.open(p, os.O_RDONLY))
        handles = [hal.Handle(fds=[fd]) for fd in fds]
        cb = hal.PreparedModelCallback()
        if version >= HalVersion.V1_3:
            st = device.prepareModelFromCache_1_3(hal.OptionalTimePoint(), handles[:n_model], handles[n_model:],
                                                  token, cb)
        else:
            st = device.prepareModelFromCache(handles[:n_model], handles[n_model:], token, cb)
        status, prepared = cb.wait()
    except OSError:
        return None
    finally:
        for fd in fds:
            os.close(fd)
    if st != hal.ErrorStatus.NONE or status != hal.ErrorStatus.NONE or prepared is None:
        return None
    return prepared
