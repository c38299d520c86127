"""TFLite models through the HAL: the TFLite <-> HAL 1.3 operator mapping
(:mod:`nnhal.tflite.table`), the importer (``load``), a one-operator
``.tflite`` writer for tests, running a model on a device and comparing it with
LiteRT (:mod:`nnhal.delegate.run`), and a picture of the HAL model
(:mod:`nnhal.tools.graphview`).  Needs the optional ``ai-edge-litert`` and
``flatbuffers`` packages (``pip install 'nnhal[litert]'``)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from nnhal.tflite.errors import InvalidModelError, ModelError, UnsupportedModelError
from nnhal.tflite.schema import MissingDependency, available

if TYPE_CHECKING:
    from nnhal.tflite.loader import IODescription, TensorDesc, free_model, load
    from nnhal.tflite.table import MAPPINGS, mapped_builtins

# NOTE: the importer's names, imported when first used: the process that contains LiteRT
# (nnhal.delegate.litert_child) reads no model and needs none of them
_LAZY = {"IODescription": "loader", "TensorDesc": "loader", "free_model": "loader", "load": "loader",
         "MAPPINGS": "table", "mapped_builtins": "table"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["load", "free_model", "IODescription", "TensorDesc", "ModelError", "InvalidModelError",
           "UnsupportedModelError", "MissingDependency", "available", "MAPPINGS", "mapped_builtins"]
