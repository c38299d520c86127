"""nnhal demo's set-up: where it finds the trained models."""

from __future__ import annotations

from pathlib import Path

import pytest

from nnhal.cli.demo import default_models


def test_default_models_beside_the_checkout_from_any_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """nnhal demo finds ../shared/models beside the checkout when run from another folder (it looked in
    src/../shared: 'missing' for every model unless run from the checkout)."""
    beside = (Path(__file__).resolve().parents[1] / ".." / "shared" / "models").resolve()
    if not beside.is_dir():
        pytest.skip(f"no {beside}")
    monkeypatch.delenv("NNHAL_MODELS", raising=False)
    monkeypatch.chdir(tmp_path)
    assert default_models() == beside
