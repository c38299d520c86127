"""Discovery of running services: the binding's stand-in for Android's
service manager (``IDevice`` instances registered under a name).

A per-user runtime directory holds one socket per running service,
``<dir>/<name>.sock``, and a lock file ``<dir>/<name>.lock`` that the
service holds (``flock``) while it runs, so two services cannot take one
name.  The directory is ``$NNHAL_RUNTIME_DIR`` if set, else
``$XDG_RUNTIME_DIR/nnhal``, else ``/tmp/nnhal-<uid>``; it is created with mode
0700 and refused unless it is a real directory (not a symlink) owned by this
user and closed to everybody else.  A socket whose service died (nothing
accepts on it) is stale and removed when found.

Instance names follow VTS's rule for NN HAL instances: exactly one ``-``,
neither first nor last (``vendor-name``), letters, digits, ``_`` and ``.``
otherwise.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import socket
import stat
from pathlib import Path

SUFFIX = ".sock"
_NAME = re.compile(r"^[A-Za-z0-9_.]+-[A-Za-z0-9_.]+$")


class RegistryError(Exception):
    """The runtime directory is unusable (wrong owner, a symlink, open to others)."""


class NoSuchService(LookupError):
    """No service of that name runs."""


def validate_name(name: str) -> str:
    """``name`` if it is a valid instance name, else ValueError saying why."""
    if not isinstance(name, str) or not _NAME.match(name) or name.count("-") != 1:
        raise ValueError(f"invalid service name {name!r}: an instance name has exactly one '-', neither first "
                         f"nor last, and otherwise only letters, digits, '_' and '.' (e.g. 'nnhal-cpu')")
    return name


def runtime_dir(create: bool = True) -> Path:
    """The checked per-user runtime directory (created if ``create``)."""
    env = os.environ.get("NNHAL_RUNTIME_DIR")
    if env:
        d = Path(env)
    elif os.environ.get("XDG_RUNTIME_DIR"):
        d = Path(os.environ["XDG_RUNTIME_DIR"]) / "nnhal"
    else:
        d = Path(f"/tmp/nnhal-{os.getuid()}")
    if create:
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass
        except FileNotFoundError:
            os.makedirs(d.parent, exist_ok=True)
            os.mkdir(d, 0o700)
    check_dir(d)
    return d


def check_dir(d: Path) -> None:
    """RegistryError unless ``d`` is a directory, not a symlink, owned by
    this user, with no access for group or others."""
    try:
        st = os.lstat(d)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise RegistryError(f"runtime directory {d} is not a plain directory (a symlink or a file)")
    if st.st_uid != os.getuid():
        raise RegistryError(f"runtime directory {d} is owned by uid {st.st_uid}, not by this user ({os.getuid()})")
    if st.st_mode & 0o077:
        raise RegistryError(f"runtime directory {d} is open to other users (mode {stat.S_IMODE(st.st_mode):o}); "
                            f"it must be 0700")


def socket_path(name: str, d: Path | None = None) -> Path:
    return (d or runtime_dir()) / (validate_name(name) + SUFFIX)


def lock_path(name: str, d: Path | None = None) -> Path:
    return (d or runtime_dir()) / (validate_name(name) + ".lock")


def probe(path: Path) -> bool:
    """True if a service accepts on ``path``; removes the socket if it is stale."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        s.settimeout(1.0)
        s.connect(str(path))
        return True
    except (ConnectionRefusedError, FileNotFoundError):
        _remove_stale(path)
        return False
    except OSError as e:
        if e.errno == errno.ECONNREFUSED:
            _remove_stale(path)
        return False
    finally:
        s.close()


def _remove_stale(path: Path) -> None:
    """Remove a socket nobody accepts on, unless its service holds the name's
    lock (it is starting: bound, not yet listening)."""
    lock = path.with_suffix(".lock")
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        fd = -1
    except OSError:
        return
    try:
        if fd >= 0:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # a live service holds the name
        st = os.lstat(path)
        if stat.S_ISSOCK(st.st_mode) and st.st_uid == os.getuid():
            os.unlink(path)
    except OSError:
        pass
    finally:
        if fd >= 0:
            os.close(fd)


def list_services() -> list[str]:
    """Names of the services running now (stale sockets are removed)."""
    try:
        d = runtime_dir(create=False)
        entries = sorted(os.listdir(d))
    except (FileNotFoundError, RegistryError):
        return []
    names = []
    for e in entries:
        if e.endswith(SUFFIX) and _NAME.match(e[: -len(SUFFIX)]) and probe(d / e):
            names.append(e[: -len(SUFFIX)])
    return names
