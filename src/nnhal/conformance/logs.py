"""Log lines of a conformance run: each names the model it belongs to, and
what the driver logs while rejecting a run that is expected to fail (VTS's
expectFailure models, the one-byte-short output of the dynamic-shape check)
is lowered to DEBUG, so ``nnhal -v conformance`` shows real problems only.

The runner says which model runs with :func:`running`; the command line puts
:class:`RunFilter` on its log handler.  The current run is a process-wide
value, not a context variable: the driver logs from its own threads
(scheduler, fence watcher, burst server), which do not see the runner's
context.  One runner runs at a time per process (``--jobs`` uses processes).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator

_current: tuple[str, bool] = ("-", False)  # (model name, expected to fail)


def current_model() -> str:
    """The model the runner is running now ("-" between runs)."""
    return _current[0]


@contextlib.contextmanager
def running(model: str, expect_failure: bool = False) -> Iterator[None]:
    """Mark the log lines emitted inside as belonging to ``model``; with
    ``expect_failure``, the driver's WARNING / ERROR lines become DEBUG."""
    global _current
    previous = _current
    _current = (model, expect_failure)
    try:
        yield
    finally:
        _current = previous


class RunFilter(logging.Filter):
    """A handler filter: adds ``record.model`` and lowers the rejection logs
    of expected failures to DEBUG (dropped unless ``debug`` is on)."""

    def __init__(self, debug: bool = False):
        super().__init__()
        self.debug = debug

    def filter(self, record: logging.LogRecord) -> bool:
        model, expected = _current
        record.model = model
        if expected and record.levelno > logging.DEBUG and record.levelno < logging.CRITICAL:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return self.debug
        return True


FORMAT = "%(levelname)s %(name)s [%(model)s]: %(message)s"


def install(level: int) -> None:
    """Root logging at ``level`` with one stderr handler carrying :class:`RunFilter`."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.addFilter(RunFilter(debug=level <= logging.DEBUG))
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "_nnhal", False):
            root.removeHandler(h)
    handler._nnhal = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
