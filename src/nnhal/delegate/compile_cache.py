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
from typing import Optional

from nnhal import hal
from nnhal.delegate import halmodel
from nnhal.hal.types import HalVersion
from nnhal.runtime.face import Face, Prepared


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


def prepare(face: Face, model: hal.Model, preference: str, relaxed: bool, cache: CacheDir,
            partition: tuple) -> tuple[Prepared, str]:
    """(prepared model, how): loaded from ``cache``'s files, or prepared (saving into them when the
    device caches) through ``face`` (HIDL 1.2-1.3 or AIDL); ``how`` says which, in a few words.
    RuntimeError when the device refuses to prepare (as :func:`halmodel.prepare`)."""
    version = face.version
    if version < HalVersion.V1_2:
        return halmodel.prepare(face, model, preference, relaxed), \
            f"prepared ({face.interface} has no compilation cache)"
    status, n_model, n_data = face.cache_files()
    if status != hal.ErrorStatus.NONE or n_model + n_data == 0:
        return halmodel.prepare(face, model, preference, relaxed), \
            "prepared (the device does not cache compilations)"
    token = partition_token(cache, partition, version, preference, face.name, face.version_string())
    paths = [cache.path / f"{token.hex()}_{i}" for i in range(n_model + n_data)]
    if all(p.is_file() and p.stat().st_size > 0 for p in paths):
        prepared = _load(face, paths, n_model, token)
        if prepared is not None:
            return prepared, f"loaded from the compilation cache ({cache.path})"
    fds: list[int] = []
    try:
        for p in paths:
            fds.append(os.open(p, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600))
        prepared = halmodel.prepare(face, model, preference, relaxed, cache=(fds[:n_model], fds[n_model:], token))
    except OSError as e:
        return halmodel.prepare(face, model, preference, relaxed), f"prepared (cache files: {e.strerror})"
    finally:
        for fd in fds:
            os.close(fd)
    return prepared, f"prepared and saved to the compilation cache ({cache.path})"


def _load(face: Face, paths: list[Path], n_model: int, token: bytes) -> Optional[Prepared]:
    """The prepared model loaded from ``paths``, or None (the driver refused the files: prepare again)."""
    fds: list[int] = []
    try:
        for p in paths:
            fds.append(os.open(p, os.O_RDONLY))
        status, prepared = face.prepare_from_cache(None, fds[:n_model], fds[n_model:], token)
    except OSError:
        return None
    finally:
        for fd in fds:
            os.close(fd)
    if status != hal.ErrorStatus.NONE or prepared is None:
        return None
    return prepared
