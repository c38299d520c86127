"""TFLite models through the HAL: the TFLite <-> HAL 1.3 operator mapping
(:mod:`nnhal.tflite.table`), the importer (``load``), a one-operator
``.tflite`` writer for tests, running a model on a device and comparing it with
LiteRT (:mod:`nnhal.delegate.run`), and a picture of the HAL model
(:mod:`nnhal.tools.graphview`).  Needs the optional ``ai-edge-litert`` and
``flatbuffers`` packages (``pip install 'nnhal[litert]'``)."""

from __future__ import annotations

from nnhal.tflite.errors import InvalidModelError, ModelError, UnsupportedModelError
from nnhal.tflite.loader import IODescription, TensorDesc, free_model, load
from nnhal.tflite.schema import MissingDependency, available
from nnhal.tflite.table import MAPPINGS, mapped_builtins

__all__ = ["load", "free_model", "IODescription", "TensorDesc", "ModelError", "InvalidModelError",
           "UnsupportedModelError", "MissingDependency", "available", "MAPPINGS", "mapped_builtins"]
