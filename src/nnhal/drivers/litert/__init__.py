"""The ``litert-cpu`` backend: HAL models lowered to TFLite flatbuffers
(``lower``) and run by LiteRT with XNNPACK (``backend``); its capability
measurement (``caps``)."""

from nnhal.drivers.litert.backend import THREADS_ENV, VERSION_STRING, LiteRTBackend, LiteRTCompiled, available

__all__ = ["LiteRTBackend", "LiteRTCompiled", "THREADS_ENV", "VERSION_STRING", "available"]
