"""Shared fixtures: where the conformance vectors are."""

from __future__ import annotations

import os
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
