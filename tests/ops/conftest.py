"""Kernel tests run each operation through validate, prepare and execute
(``nnhal.ops.run.run_operation`` with the test module's ``PHASES``)."""

from __future__ import annotations

import pytest


@pytest.fixture
def kernel_only(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Prepare and execute only: a test of a kernel's own run-time checks
    feeds it what a model validation would refuse."""
    monkeypatch.setitem(request.module.PHASES, "validate", False)
