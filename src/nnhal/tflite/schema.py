"""Access to the TFLite flatbuffer schema (the generated module that ships in
``ai-edge-litert``, object API) and to LiteRT's interpreter, both optional
dependencies (``pip install nnhal[litert]``)."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from typing import Any, Iterator


class MissingDependency(ImportError):
    """ai-edge-litert / flatbuffers are not installed."""


def schema() -> Any:
    """The generated TFLite schema module (``ai_edge_litert.schema_py_generated``)."""
    try:
        from ai_edge_litert import schema_py_generated as s  # type: ignore[import-not-found]
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise MissingDependency("reading .tflite files needs ai-edge-litert and flatbuffers "
                                "(pip install 'nnhal[litert]')") from e
    return s


def interpreter_module() -> Any:
    """``ai_edge_litert.interpreter`` (LiteRT's Python interpreter)."""
    try:
        from ai_edge_litert import interpreter  # type: ignore[import-not-found]
    except ImportError as e:  # pragma: no cover
        raise MissingDependency("comparing with LiteRT needs ai-edge-litert (pip install 'nnhal[litert]')") from e
    return interpreter


_FD2_LOCK = threading.Lock()


def quiet_litert() -> bool:
    """Whether LiteRT's own C++ log lines (``INFO: Created TensorFlow Lite XNNPACK delegate for CPU.``)
    are kept off stderr: yes unless the ``nnhal`` logger shows INFO (``nnhal -v``) or
    ``$NNHAL_LITERT_LOG`` is set."""
    return not (os.environ.get("NNHAL_LITERT_LOG") or logging.getLogger("nnhal").isEnabledFor(logging.INFO))


@contextlib.contextmanager
def litert_stderr_quiet() -> Iterator[None]:
    """File descriptor 2 on /dev/null inside (when :func:`quiet_litert`): LiteRT logs through C++ on
    the descriptor itself, which no Python setting reaches."""
    if not quiet_litert():
        yield
        return
    with _FD2_LOCK:
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        saved = os.dup(2)
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, 2)
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            os.close(null)


def make_interpreter(**kwargs: Any) -> Any:
    """``ai_edge_litert.interpreter.Interpreter(**kwargs)``, tensors allocated, with LiteRT's creation
    log (the XNNPACK delegate line, applied at the first allocation) kept off stderr unless asked
    (``-v``): the one way every part of nnhal makes an interpreter."""
    mod = interpreter_module()
    with litert_stderr_quiet():
        it = mod.Interpreter(**kwargs)
        it.allocate_tensors()
    return it


def available() -> bool:
    """Whether the schema module and LiteRT can be imported."""
    try:
        schema()
        interpreter_module()
    except MissingDependency:
        return False
    return True


def builtin_names() -> dict[int, str]:
    """BuiltinOperator value -> name."""
    s = schema()
    return {v: k for k, v in vars(s.BuiltinOperator).items() if not k.startswith("_") and isinstance(v, int)}


def builtin_code(name: str) -> int:
    return int(getattr(schema().BuiltinOperator, name))


def read_model(data: bytes) -> Any:
    """A ``ModelT`` (object API) from the bytes of a .tflite file."""
    s = schema()
    if len(data) < 8 or data[4:8] != b"TFL3":
        raise ValueError("not a TFLite flatbuffer (file identifier TFL3 missing)")
    # NOTE: immutable bytes read in place (the unpacked vectors are read-only views of them: a 16 MB
    # MobileNet's copy and its page faults cost ~6 ms); anything else copied first (its owner may change it)
    return s.ModelT.InitFromPackedBuf(data if isinstance(data, bytes) else bytearray(data), 0)


def write_model(model: Any) -> bytes:
    """The bytes of a .tflite file from a ``ModelT``."""
    import flatbuffers  # type: ignore[import-not-found]

    b = flatbuffers.Builder(1024)
    b.Finish(model.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())
