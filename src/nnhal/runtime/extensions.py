"""Extensions in the client runtime, as Android's ``TypeManager``
(``nn/runtime/TypeManager.cpp``): which devices declare which extension
(``getSupportedExtensions``), the operand type information of each (the first
device to declare an extension fixes it; a device declaring it differently
disables it, as Android does), and the numpy dtype an operand of an
extension type is read and written as (by its ``byteSize`` unless the model
says otherwise).  Prefixes are the model's own (``Model.extension_*_type``).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Optional

import numpy as np

from nnhal import hal

log = logging.getLogger("nnhal.runtime")
S = hal.ErrorStatus

_LOCK = threading.Lock()
_DECLARED: Optional[dict[str, hal.Extension]] = None
_DISABLED: set[str] = set()


def device_extensions(device: Any) -> list[hal.Extension]:
    """What an ``IDevice`` declares (empty when it cannot say)."""
    try:
        status, exts = device.getSupportedExtensions()
    except Exception:  # noqa: BLE001 - a device that breaks declares nothing
        log.exception("getSupportedExtensions raised")
        return []
    return list(exts) if status == S.NONE and exts else []


def declares(device: Any, name: str) -> bool:
    """``ANeuralNetworksDevice_getExtensionSupport``."""
    return any(e.name == name for e in device_extensions(device))


def _same(a: hal.Extension, b: hal.Extension) -> bool:
    def key(e: hal.Extension) -> list:
        return sorted((int(t.type), bool(t.isTensor), int(t.byteSize)) for t in e.operandTypes)
    return a.name == b.name and key(a) == key(b)


def register(device_name: str, extensions: list[hal.Extension]) -> None:
    """Records a device's extensions (the first declaration wins; an inconsistent one disables the name)."""
    global _DECLARED
    with _LOCK:
        if _DECLARED is None:
            _DECLARED = {}
        for e in extensions:
            if e.name in _DISABLED:
                continue
            known = _DECLARED.get(e.name)
            if known is None:
                _DECLARED[e.name] = e
            elif not _same(known, e):
                log.error("%s declares extension %s differently from an earlier device: disabled", device_name, e.name)
                del _DECLARED[e.name]
                _DISABLED.add(e.name)


def _discover() -> dict[str, hal.Extension]:
    global _DECLARED
    if _DECLARED is not None:
        return _DECLARED
    from nnhal.runtime import discovery

    for name in discovery.names():
        try:
            d = discovery.get(name)
        except Exception:  # noqa: BLE001 - a device that cannot be had declares nothing
            continue
        try:
            register(name, d.extensions())
        except Exception:  # noqa: BLE001 - a device that breaks declares nothing
            log.exception("%s: getSupportedExtensions raised", name)
        finally:
            d.close()
    with _LOCK:
        if _DECLARED is None:
            _DECLARED = {}
        return _DECLARED


def operand_info(extension: str, type: int) -> hal.ExtensionOperandTypeInformation:
    """The declared information of an extension's operand type (ValueError when no device declares it)."""
    ext = _discover().get(extension)
    if ext is None:
        raise ValueError(f"no device declares extension {extension!r}"
                         + (" (declared inconsistently: disabled)" if extension in _DISABLED else ""))
    for t in ext.operandTypes:
        if int(t.type) == int(type):
            return t
    raise ValueError(f"extension {extension} has no operand type {type}")


def default_dtype(byte_size: int) -> np.dtype:
    """How an element of ``byte_size`` bytes is read when the model gives no dtype: an unsigned integer of
    that size, else raw bytes."""
    return np.dtype({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}.get(int(byte_size), f"V{int(byte_size)}"))


def model_dtypes(model: hal.Model) -> dict[int, np.dtype]:
    """For every extension operand type of a ``hal.Model``: the dtype by its declared byteSize."""
    names = {int(e.prefix): e.name for e in model.extensionNameToPrefix}
    out: dict[int, np.dtype] = {}
    for sg in [model.main, *model.referenced]:
        for o in sg.operands:
            t = int(o.type)
            if t >> 16 and t not in out and (t >> 16) in names:
                try:
                    out[t] = default_dtype(operand_info(names[t >> 16], t & 0xFFFF).byteSize)
                except ValueError:
                    continue
    return out
