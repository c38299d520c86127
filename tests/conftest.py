"""Shared fixtures: where the conformance vectors are."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def vectors_root() -> Path:
    env = os.environ.get("NNHAL_VECTORS")
    if env:
        return Path(env)
    return (ROOT / ".." / "shared" / "conformance").resolve()


@pytest.fixture(scope="session")
def vectors_dir() -> Path:
    root = vectors_root()
    if not root.is_dir():
        pytest.fail(f"conformance vectors not found at {root} (set NNHAL_VECTORS)")
    return root


@pytest.fixture(scope="session")
def device():  # noqa: ANN201
    """The in-process sample-all driver."""
    import nnhal

    return nnhal.get_device("sample-all")


@pytest.fixture
def quiet_driver() -> Iterator[None]:
    """Silences the driver's log lines (one per rejected argument) for tests
    that make tens of thousands of rejections."""
    logger = logging.getLogger("nnhal")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)
