"""The importer's defined errors.

Everything ``nnhal.tflite.load`` refuses is a :class:`ModelError` (a ``ValueError``):

- :class:`InvalidModelError`: the file is not a well-formed TFLite model (not a flatbuffer of the
  TFLite schema, truncated, an offset or index out of range, inconsistent shapes or quantization,
  a size beyond what the file or the configured memory limit allows, cyclic IF / WHILE references).
  The message names the first problem found and where it is.
- :class:`UnsupportedModelError`: a well-formed model with operators that have no exact HAL 1.3
  form; ``failures`` lists every one (operator index, name, reason).

``nnhal run / bench / graph`` print either as one line per problem and exit with status 2.
"""

from __future__ import annotations


class ModelError(ValueError):
    """A .tflite file the importer cannot turn into a HAL model."""


class InvalidModelError(ModelError):
    """A malformed or hostile .tflite file; the message names the first problem found."""


class UnsupportedModelError(ModelError):
    """Operators with no exact HAL 1.3 form; ``failures`` lists (operator index, name, reason)."""

    def __init__(self, failures: list[tuple[int, str, str]]):
        self.failures = failures
        lines = [f"  operator {i} {n}: {r}" for i, n, r in failures]
        super().__init__(f"{len(failures)} operator(s) cannot be mapped to HAL 1.3:\n" + "\n".join(lines))
