"""One VTS case and its verdict, and what every section shares: the
expected-versus-actual judgement, sampling and the status names."""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

import msgspec

from nnhal import hal

S = hal.ErrorStatus
STATUSES = ("pass", "fail", "unsupported")


class Case(msgspec.Struct, array_like=True, gc=False):
    """A case as VTS names it: ``section`` (``model``, ``request``, ...), the
    VTS ``test`` (``ValidationTest.mutateOperandTypeTest``,
    ``MemoryDomainCopyTest.CopyTo_UninitializedMemory``...), the ``model``
    (a vector model ``spec/name`` or a parameter such as an operand type),
    the ``mutation`` (what was changed or asked; "" when nothing), the
    ``expected`` and the ``actual`` answer of the driver (status names),
    and the verdict: ``pass``, ``fail`` or ``unsupported`` (with the driver's
    reason in ``message``).  A failed case of the random section also
    carries ``operations`` (the operations of its shrunk model) and
    ``reproducer`` (the path of that model's vector file); ``attachment``
    carries the file's bytes from the worker to the command, which writes
    it (never reported).  NOTE: ``gc=False``: strings and numbers only, never
    in a reference cycle, so the collector need not track the hundreds of
    thousands of cases a full run keeps."""
    section: str
    test: str
    model: str
    mutation: str
    expected: str
    actual: str
    status: str
    message: str = ""
    seconds: float = 0.0
    operations: int = 0
    reproducer: str = ""
    attachment: bytes = b""

    @property
    def name(self) -> str:
        return "/".join(p for p in (self.section, self.test, self.model, self.mutation) if p)


def name(status: Any) -> str:
    """A status as its HAL name (``INVALID_ARGUMENT``), whatever came back."""
    try:
        return S(status).name
    except (ValueError, TypeError):
        return repr(status)


def sample_indexes(n: int, sample: Optional[int]) -> range | list[int]:
    """Which of ``n`` mutations a ``--sample`` run makes: all without a
    sample, else ``sample`` of them spread evenly (the first and, with two
    or more, the last included), the same on every run."""
    if sample is None or sample >= n:
        return range(n)
    if sample <= 0:
        return []
    if sample == 1:
        return [0]
    return sorted({round(k * (n - 1) / (sample - 1)) for k in range(sample)})


class Recorder:
    """Collects a section's cases, timing each from the previous one."""

    def __init__(self, section: str, model: str = ""):
        self.section, self.model = section, model
        self.cases: list[Case] = []
        self._t = time.perf_counter()

    def add(self, test: str, mutation: str, expected: str, actual: str, ok: bool, message: str = "",
            model: Optional[str] = None) -> Case:
        now = time.perf_counter()
        c = Case(self.section, test, self.model if model is None else model, mutation, expected, actual,
                 "pass" if ok else "fail", "" if ok else message, now - self._t)
        self._t = now
        self.cases.append(c)
        return c

    def unsupported(self, test: str, mutation: str, expected: str, reason: str, model: Optional[str] = None) -> Case:
        now = time.perf_counter()
        c = Case(self.section, test, self.model if model is None else model, mutation, expected, "unsupported",
                 "unsupported", reason, now - self._t)
        self._t = now
        self.cases.append(c)
        return c

    def check(self, test: str, mutation: str, expected: str, run: Callable[[], tuple[str, str]],
              model: Optional[str] = None) -> Case:
        """``run()`` gives (actual, problem): the case passes when there is no
        problem; an exception out of the driver is a failure naming it."""
        try:
            actual, problem = run()
        except Exception as e:  # noqa: BLE001 - a driver that raises is a failing driver
            actual, problem = "raised", f"raised {type(e).__name__}: {e}"
        return self.add(test, mutation, expected, actual, not problem, problem, model)
