"""The one device table: every name a device can be had by in this process.

A driver is the HAL front end (:class:`nnhal.driver.Device`) over a backend
(:class:`nnhal.driver.backend.Backend`).  Names resolve here, and only here:

* the built-in drivers: ``sample-all`` (the reference), Android's partial
  sample drivers (``sample-float-fast``, ``sample-float-slow``,
  ``sample-quant``, ``sample-minimal``), ``litert-cpu`` (with
  ``ai-edge-litert`` installed) and ``example-fibonacci`` (the reference plus
  Android's example extension ``com.example.fibonacci``);
* installed plugins: a distribution declares ``name = "module:Class"`` in the
  entry-point group ``nnhal.drivers``; ``name`` is the device name;
* a spec given where a device name is expected: ``module:Class`` or
  ``path/to/file.py:Class``; the device is named after the backend's ``name``.

``Class`` is a :class:`Backend` subclass (constructed without arguments) or
any callable returning a backend.  A plugin that fails to import or to build
is listed with its error (:func:`entries`) and never takes the others down;
asking for it raises :class:`DriverLoadError` with that error.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from nnhal.driver.backend import Backend
from nnhal.driver.device import Device

ENTRY_POINT_GROUP = "nnhal.drivers"


class DriverLoadError(LookupError):
    """A driver that exists but cannot be loaded (a plugin's import failed,
    LiteRT is not installed, the class is not a backend)."""


@dataclass(frozen=True)
class DriverEntry:
    """One row of the device table.  ``source``: "built-in", "plugin" (an
    entry point; ``target`` is its ``module:Class``) or "spec"; ``error``:
    why it cannot be loaded (None when it can, or before it was tried)."""

    name: str
    source: str
    target: str
    error: Optional[str] = None


def _sample() -> Backend:
    from nnhal.drivers.sample import SampleBackend

    return SampleBackend()


def _partial(name: str) -> Callable[[], Backend]:
    def make() -> Backend:
        from nnhal.drivers import partial

        return partial.backend(name)

    return make


def _fibonacci() -> Backend:
    from nnhal.drivers.fibonacci import FibonacciBackend

    return FibonacciBackend()


def _litert() -> Backend:
    if importlib.util.find_spec("ai_edge_litert") is None:
        raise DriverLoadError("litert-cpu needs ai-edge-litert (pip install 'nnhal[litert]')")
    from nnhal.drivers.litert import LiteRTBackend

    return LiteRTBackend()


def _has_litert() -> bool:
    try:
        return importlib.util.find_spec("ai_edge_litert") is not None
    except (ImportError, ValueError):
        return False


# NOTE: the partial drivers' names are partial.PARTIAL_DRIVERS' keys, written here so that listing the table
# imports no backend
BUILTIN: dict[str, Callable[[], Backend]] = {
    "sample-all": _sample,
    **{n: _partial(n) for n in ("sample-float-fast", "sample-float-slow", "sample-quant", "sample-minimal")},
    "litert-cpu": _litert,
    "example-fibonacci": _fibonacci,
}

_DEVICES: dict[str, Device] = {}
_LOCK = threading.RLock()


def _entry_points() -> list:
    """The installed plugins' entry points (``importlib.metadata``, imported here: ~15 ms that opening a
    built-in driver does not need)."""
    import importlib.metadata

    try:
        return list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
    except Exception:  # noqa: BLE001 - a broken distribution's metadata must not hide the built-in drivers
        return []


def is_spec(name: str) -> bool:
    """Whether ``name`` is a ``module:Class`` / ``file.py:Class`` spec rather than a device name."""
    left, sep, right = name.rpartition(":")
    return bool(sep and left and right.isidentifier() and (left.endswith(".py") or all(
        p.isidentifier() for p in left.split("."))))


def _load_file(path: str) -> object:
    p = Path(path).expanduser().resolve()
    if not p.is_file():
        raise DriverLoadError(f"no such file: {path}")
    # NOTE: a stable module name per file, so a worker process that loads the same file names its classes alike
    mod_name = f"nnhal_plugin_{p.stem}_{hashlib.sha256(str(p).encode()).hexdigest()[:8]}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(mod_name, p)
    if spec is None or spec.loader is None:
        raise DriverLoadError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[mod_name]
        raise
    return module


def _factory(target: str, where: str = "") -> Callable[[], Backend]:
    """The backend factory named by ``module:Class`` or ``file.py:Class`` (``where``: how errors name it)."""
    where = where or target
    left, _, attr = target.rpartition(":")
    try:
        module = _load_file(left) if left.endswith(".py") else importlib.import_module(left)
        obj = getattr(module, attr)
    except DriverLoadError:
        raise
    except AttributeError:
        raise DriverLoadError(f"{where}: {left} has no attribute {attr!r}") from None
    except Exception as e:  # noqa: BLE001 - any import-time failure of a plugin is its error, reported
        raise DriverLoadError(f"{where}: importing {left} failed: {e}") from e
    if isinstance(obj, type) and not issubclass(obj, Backend):
        raise DriverLoadError(f"{where}: {attr} is not a subclass of nnhal.driver.backend.Backend")
    if not callable(obj):
        raise DriverLoadError(f"{where}: {attr} is neither a Backend class nor a callable returning one")
    return obj  # type: ignore[return-value]


def _build(name: Optional[str], factory: Callable[[], Backend], where: str) -> Device:
    """The front end over ``factory()``'s backend, named ``name`` (None: the backend's name, or ``where``
    if the backend keeps the base class's placeholder)."""
    try:
        backend = factory()
    except DriverLoadError:
        raise
    except Exception as e:  # noqa: BLE001 - a plugin's constructor failing is its error, reported
        raise DriverLoadError(f"{where}: building the backend failed: {e}") from e
    if not isinstance(backend, Backend):
        raise DriverLoadError(f"{where}: returned {type(backend).__name__}, not a nnhal.driver.backend.Backend")
    if name is None:
        name = backend.name if backend.name != Backend.name else where
    return Device(name, backend=backend)


def entries(load: bool = False) -> list[DriverEntry]:
    """The table: built-in drivers, then installed plugins.  ``load``: try
    each one, so that ``error`` says why one cannot be had."""
    rows = [DriverEntry(n, "built-in", n) for n in BUILTIN]
    rows += [DriverEntry(ep.name, "plugin", ep.value) for ep in _entry_points() if ep.name not in BUILTIN]
    if load:
        out = []
        for r in rows:
            try:
                get_device(r.name)
                out.append(r)
            except DriverLoadError as e:
                out.append(DriverEntry(r.name, r.source, r.target, str(e)))
        rows = out
    elif not _has_litert():
        rows = [r if r.name != "litert-cpu" else DriverEntry(r.name, r.source, r.target, "needs ai-edge-litert")
                for r in rows]
    return rows


def names() -> list[str]:
    """The device names the table offers (without loading plugins; litert-cpu only with LiteRT installed)."""
    return [r.name for r in entries() if r.error is None]


def knows(name: str) -> bool:
    """Whether ``name`` is in the table or is a spec (nothing is loaded)."""
    return name in BUILTIN or is_spec(name) or any(ep.name == name for ep in _entry_points())


def get_device(name: str) -> Device:
    """The in-process device ``name`` (one per name and process).  Raises
    LookupError for an unknown name, :class:`DriverLoadError` (a LookupError)
    for one that cannot be loaded."""
    with _LOCK:
        if name in _DEVICES:
            return _DEVICES[name]
        if name in BUILTIN:
            device = _build(name, BUILTIN[name], name)
        elif is_spec(name):
            device = _build(None, _factory(name), name)
        else:
            eps = [ep for ep in _entry_points() if ep.name == name]
            if not eps:
                raise LookupError(f"no device named {name!r}; in-process devices: {', '.join(names())}")
            where = f"plugin {name} ({eps[0].value})"
            device = _build(name, _factory(eps[0].value, where), where)
        _DEVICES[name] = device
        return device
