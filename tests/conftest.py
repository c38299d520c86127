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


def aidl_vectors_root() -> Path:
    """The AIDL HAL's vectors (nnhal.conformance.vectors.default_aidl_vectors, from the checkout)."""
    env = os.environ.get("NNHAL_AIDL_VECTORS")
    if env:
        return Path(env)
    return (ROOT / ".." / "shared" / "conformance-aidl").resolve()


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


# --------------------------------------------------------------------------
def _private_dir(tmp_path_factory: pytest.TempPathFactory, name: str, env: str) -> Iterator[Path]:
    """A 0700 session directory named in ``env`` while the fixture lives (the
    variable's old value is put back after)."""
    d = tmp_path_factory.mktemp(name)
    os.chmod(d, 0o700)
    old = os.environ.get(env)
    os.environ[env] = str(d)
    try:
        yield d
    finally:
        if old is None:
            os.environ.pop(env, None)
        else:
            os.environ[env] = old


@pytest.fixture(scope="session", autouse=True)
def private_cache_key_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The compilation cache's HMAC key lives in a session directory, never in the
    user's ~/.local/state/nnhal (services started by tests inherit it)."""
    yield from _private_dir(tmp_path_factory, "nnhal-key", "NNHAL_CACHE_KEY_DIR")


# driver services (nnhal serve) for tests that cross the process boundary


@pytest.fixture(scope="session")
def service_runtime_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private registry directory (NNHAL_RUNTIME_DIR) for this test session."""
    yield from _private_dir(tmp_path_factory, "nnhal-run", "NNHAL_RUNTIME_DIR")


@pytest.fixture(scope="module")
def service_process(service_runtime_dir: Path) -> Iterator[object]:
    """A ``nnhal serve`` process of sample-all for this test module (a
    tests.service_util.ServiceProcess), stopped (killed if need be) after it."""
    from tests.service_util import ServiceProcess

    sp = ServiceProcess(service_runtime_dir)
    try:
        sp.start()
        yield sp
    finally:
        sp.stop()


@pytest.fixture(scope="module")
def service(service_process: object) -> Iterator[object]:
    """A proxy ``IDevice`` (``nnhal.connect``) of a sample-all service running
    in its own process for this test module: use it as the in-process
    ``device`` fixture."""
    dev = service_process.connect()  # type: ignore[attr-defined]
    try:
        yield dev
    finally:
        dev.close()


@pytest.fixture
def service_factory(service_runtime_dir: Path) -> Iterator[object]:
    """Starts services on demand (``service_factory()`` -> ServiceProcess, with
    ``name=``/``driver=``/``env=``); every one is stopped after the test."""
    from tests.service_util import ServiceProcess

    started: list = []

    def start(**kwargs: object) -> object:
        sp = ServiceProcess(service_runtime_dir, **kwargs)  # type: ignore[arg-type]
        started.append(sp)
        return sp.start()

    try:
        yield start
    finally:
        for sp in started:
            sp.stop()


@pytest.fixture(autouse=True)
def logging_restored() -> Iterator[None]:
    """Every test leaves logging as it found it: the command line (``nnhal ... -q``) sets the root level and
    installs its handler, tools silence the ``nnhal`` logger; a later test reading the driver's log lines
    (the runtime's placement messages) must not depend on which ran before."""
    root, nn = logging.getLogger(), logging.getLogger("nnhal")
    saved = (root.level, nn.level, nn.propagate, logging.root.manager.disable)
    handlers = list(root.handlers)
    yield
    root.setLevel(saved[0])
    nn.setLevel(saved[1])
    nn.propagate = saved[2]
    logging.disable(saved[3])
    for h in list(root.handlers):
        if h not in handlers and getattr(h, "_nnhal", False):
            root.removeHandler(h)
