"""Compilation caching of the sample driver (IDevice.hal 1.2 / 1.3
``getNumberOfCacheFilesNeeded``, ``prepareModel_1_2`` / ``prepareModel_1_3``
with cache handles, ``prepareModelFromCache`` / ``prepareModelFromCache_1_3``,
and the draft ``IPreparedModel.saveToCache`` / ``IDevice.isCachingSupported``).

The driver asks for one model cache file and one data cache file.

* The **data cache** holds raw array bytes: the model's constants
  (``operandValues`` and every model pool) and what preparation computed from
  them (re-laid-out filter matrices, requantization multipliers and their
  verified float32 constants...), each 64-byte aligned.
* The **model cache** is a versioned header, a msgpack payload checked
  against the :class:`CacheRecord` schema by msgspec (never pickle): the
  validated model (without its memories), the prepared state of every
  operation (``OpDef.save_state``) referring to arrays of the data cache, the
  data cache's size and SHA-256; then an HMAC-SHA256 tag over a domain label,
  the driver version string, the 32-byte token, the header and the payload.

The HMAC key is this driver's secret: 32 random bytes in ``cache-hmac.key``
(mode 0600, in a 0700 directory owned by the user: ``$NNHAL_CACHE_KEY_DIR``,
else ``$XDG_STATE_HOME/nnhal``, else ``~/.local/state/nnhal``), created once,
atomically (written to a private temporary file, then hard-linked into
place: two processes racing end up with the same key), and kept across
restarts, so a cache written before a restart loads and a cache written by
another driver version, or for another token, does not.

Loading reads each file once into memory (``pread`` from offset 0: the
descriptors' current offsets do not matter), checks the tag, decodes the
payload, checks the data cache's size and hash, and only then uses those
verified bytes: a file rewritten while it is read (TOCTOU) gives a mismatch
or the right model.  Since only this driver can produce a valid tag, a
loaded cache is a model this driver validated and prepared: loading skips
validation and the operations' prepare work, which is the point of the cache.
Saving truncates each file and writes it from offset 0.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import hashlib
import hmac
import logging
import math
import os
import secrets
import stat
import struct
import threading
from pathlib import Path
from typing import Any, Optional, Sequence

import msgspec
import numpy as np

from nnhal import hal
from nnhal.engine.executor import PREPARE, Executor
from nnhal.ops import registry
from nnhal.ops.extension import Extension, plain_model
from nnhal.ops.extension import resolve as resolve_extensions
from nnhal.platform import memory as hal_memory

log = logging.getLogger("nnhal.driver")

S = hal.ErrorStatus

NUM_MODEL_CACHE = 1
NUM_DATA_CACHE = 1
TOKEN_SIZE = int(hal.Constant.BYTE_SIZE_OF_CACHE_TOKEN)

MAGIC = b"NNHALMC\x00"
FORMAT_VERSION = 2  # NOTE: 2: data_sha256 is data_digest (the SHA-256 of the pieces' SHA-256)
_HEADER = struct.Struct("<8sIIQ")  # magic, format version, reserved (0), payload length
_TAG_SIZE = 32
_DOMAIN = b"nnhal compilation cache\x00"
_ALIGN = 64
DIGEST_PIECE = 1 << 20  # NOTE: data_digest's piece (bytes)
_PARALLEL_DIGEST = 4 << 20  # NOTE: data from this size on is hashed by two threads (thread start ~0.1 ms)
MAX_MODEL_CACHE_BYTES = 256 << 20  # NOTE: bounds what a hostile file can make the driver read before the tag check
KEY_ENV = "NNHAL_CACHE_KEY_DIR"
KEY_FILE = "cache-hmac.key"
KEY_SIZE = 32


class CacheError(Exception):
    """A cache argument or file is unusable; ``status`` is the HAL answer."""

    def __init__(self, status: S, msg: str):
        super().__init__(msg)
        self.status = status


# --------------------------------------------------------------------------
# the schema of the model cache payload


class BlobRef(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """An array in the data cache."""

    offset: int
    nbytes: int
    dtype: str
    shape: list[int]
    as_dtype: str = ""  # converted to this dtype on load (float32 matrices of small integers kept as int16)


class OpState(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """One operation's prepared state: ``kind`` "none" (no prepare), "saved"
    (``value`` from ``OpDef.save_state``) or "prepare" (run prepare on load)."""

    kind: str
    value: Any = None


class CacheRecord(msgspec.Struct, forbid_unknown_fields=True):
    driver_version: str
    hal_version: int
    priority: int
    model: hal.Model  # operandValues empty and no pools: their bytes are blobs
    operand_values: int  # blob index
    pool_sizes: list[int]
    pools: list[int]  # blob index per model pool
    states: list[list[OpState]]  # per subgraph (main first), per operation
    blobs: list[BlobRef]
    data_size: int
    data_sha256: bytes  # NOTE: data_digest of the data cache (the name kept from format 1)


_DECODER = msgspec.msgpack.Decoder(CacheRecord)
_ENCODER = msgspec.msgpack.Encoder()
_DTYPES = frozenset(np.dtype(t).str for t in (np.uint8, np.int8, np.uint16, np.int16, np.int32, np.uint32, np.int64,
                                             np.float16, np.float32, np.float64, np.bool_))


# --------------------------------------------------------------------------
# the key


def key_dir() -> Path:
    env = os.environ.get(KEY_ENV)
    if env:
        return Path(env)
    state = os.environ.get("XDG_STATE_HOME")
    base = Path(state) if state and os.path.isabs(state) else Path.home() / ".local" / "state"
    return base / "nnhal"


_KEYS: dict[str, bytes] = {}
_KEYS_LOCK = threading.Lock()


def load_key(directory: Optional[Path] = None) -> bytes:
    """This user's cache key (created on first use); raises OSError /
    PermissionError when the key cannot be kept private."""
    d = Path(directory) if directory is not None else key_dir()
    with _KEYS_LOCK:
        k = _KEYS.get(str(d))
        if k is None:
            k = _KEYS[str(d)] = _load_or_create_key(d)
        return k


def _check_private(st: os.stat_result, what: str) -> None:
    if st.st_uid != os.getuid():
        raise PermissionError(f"{what} is owned by uid {st.st_uid}, not by this user")
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise PermissionError(f"{what} is accessible to other users (mode {stat.S_IMODE(st.st_mode):o})")


def _load_or_create_key(d: Path) -> bytes:
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    dst = os.stat(d, follow_symlinks=False)
    if not stat.S_ISDIR(dst.st_mode):
        raise PermissionError(f"{d} is not a directory")
    if dst.st_uid == os.getuid() and stat.S_IMODE(dst.st_mode) & 0o077:
        os.chmod(d, 0o700)  # NOTE: our own directory made with a lax umask: tighten it
        dst = os.stat(d, follow_symlinks=False)
    _check_private(dst, str(d))
    path = d / KEY_FILE
    for _ in range(3):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            tmp = d / f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(8)}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, secrets.token_bytes(KEY_SIZE))
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, path)  # NOTE: atomic, never replaces: a racing creator's key wins for both
            except FileExistsError:
                pass
            finally:
                os.unlink(tmp)
            continue
        try:
            _check_private(os.fstat(fd), str(path))
            key = os.read(fd, KEY_SIZE + 1)
        finally:
            os.close(fd)
        if len(key) != KEY_SIZE:
            raise PermissionError(f"{path} does not hold a {KEY_SIZE}-byte key")
        return key
    raise OSError(f"cannot create {path}")


# --------------------------------------------------------------------------
# arguments


def token_bytes(token: Any) -> bytes:
    """The 32-byte token (bytes, bytearray, a list of ints or a uint8 array)."""
    try:
        if isinstance(token, np.ndarray):
            if token.dtype != np.uint8 or token.ndim != 1:
                raise ValueError
            b = token.tobytes()
        elif isinstance(token, (bytes, bytearray, memoryview)):
            b = bytes(token)
        elif isinstance(token, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in token):
            b = bytes(token)
        else:
            raise ValueError
    except (ValueError, TypeError):
        raise CacheError(S.INVALID_ARGUMENT, f"the token is not a uint8[{TOKEN_SIZE}]") from None
    if len(b) != TOKEN_SIZE:
        raise CacheError(S.INVALID_ARGUMENT, f"the token has {len(b)} bytes, not {TOKEN_SIZE}")
    return b


def cache_fds(handles: Any, expected: int, what: str, write: bool) -> list[int]:
    """The file descriptors of ``expected`` cache handles of one fd each,
    opened for reading and writing (``write``) or at least for reading."""
    if not isinstance(handles, (list, tuple)):
        raise CacheError(S.INVALID_ARGUMENT, f"{what} is not a vector of handles")
    if len(handles) != expected:
        raise CacheError(S.INVALID_ARGUMENT, f"{what} has {len(handles)} handles, the driver asks for {expected}")
    fds = []
    for k, h in enumerate(handles):
        if not isinstance(h, hal.Handle) or not isinstance(h.fds, (list, tuple)):
            raise CacheError(S.INVALID_ARGUMENT, f"{what}[{k}] is not a handle")
        if len(h.fds) != 1:
            raise CacheError(S.INVALID_ARGUMENT, f"{what}[{k}] holds {len(h.fds)} file descriptors, not 1")
        fd = h.fds[0]
        if not isinstance(fd, int) or isinstance(fd, bool) or fd < 0:
            raise CacheError(S.INVALID_ARGUMENT, f"{what}[{k}] holds an invalid file descriptor {fd!r}")
        try:
            mode = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
            st = os.fstat(fd)
        except OSError as e:
            raise CacheError(S.INVALID_ARGUMENT, f"{what}[{k}]: bad file descriptor ({e.strerror})") from None
        if not stat.S_ISREG(st.st_mode):
            raise CacheError(S.INVALID_ARGUMENT, f"{what}[{k}] is not a regular file")
        if write and mode != os.O_RDWR:
            raise CacheError(S.INVALID_ARGUMENT, f"{what}[{k}] is not open for reading and writing")
        if not write and mode == os.O_WRONLY:
            # NOTE: VTS PrepareModelFromCacheInvalidAccessMode wants exactly GENERAL_FAILURE here
            raise CacheError(S.GENERAL_FAILURE, f"{what}[{k}] is open for writing only")
        fds.append(fd)
    return fds


class CacheFiles:
    """The driver's own duplicates of the two cache descriptors and the token:
    "The file descriptors may be closed by the client once the asynchronous
    preparation has finished. The driver must dup a file descriptor if it
    wants to get access to the cache file later" (IDevice.hal 1.3), and a
    transport may close its received descriptors when the launch call
    returns.  ``close`` (idempotent) when the work is done."""

    def __init__(self, model_fd: int, data_fd: int, token: bytes):
        self.model_fd = fcntl.fcntl(model_fd, fcntl.F_DUPFD_CLOEXEC, 0)
        try:
            self.data_fd = fcntl.fcntl(data_fd, fcntl.F_DUPFD_CLOEXEC, 0)
        except OSError:
            os.close(self.model_fd)
            raise
        self.token = token
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            fds, self.model_fd, self.data_fd = (self.model_fd, self.data_fd), -1, -1
        for fd in fds:
            if fd >= 0:
                os.close(fd)


def check_save_args(modelCache: Any, dataCache: Any, token: Any) -> Optional[CacheFiles]:
    """The files to save to if the caller asks to save and the arguments
    allow it; None when caching information is not provided (both vectors
    empty).  Raises CacheError when it is provided but unusable."""
    if isinstance(modelCache, (list, tuple)) and isinstance(dataCache, (list, tuple)) and \
            not modelCache and not dataCache:
        return None
    mfd = cache_fds(modelCache, NUM_MODEL_CACHE, "modelCache", write=True)
    dfd = cache_fds(dataCache, NUM_DATA_CACHE, "dataCache", write=True)
    _distinct(mfd[0], dfd[0])
    return _dup(mfd[0], dfd[0], token_bytes(token))


def check_load_args(modelCache: Any, dataCache: Any, token: Any) -> CacheFiles:
    mfd = cache_fds(modelCache, NUM_MODEL_CACHE, "modelCache", write=False)
    dfd = cache_fds(dataCache, NUM_DATA_CACHE, "dataCache", write=False)
    _distinct(mfd[0], dfd[0])
    return _dup(mfd[0], dfd[0], token_bytes(token))


def _dup(model_fd: int, data_fd: int, token: bytes) -> CacheFiles:
    try:
        return CacheFiles(model_fd, data_fd, token)
    except OSError as e:  # NOTE: out of descriptors: a resource problem of the driver
        raise CacheError(S.GENERAL_FAILURE, f"cannot keep the cache descriptors: {e.strerror}") from None


def _distinct(model_fd: int, data_fd: int) -> None:
    a, b = os.fstat(model_fd), os.fstat(data_fd)
    if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino):
        # NOTE: one file cannot hold both caches (the second write would destroy the first)
        raise CacheError(S.INVALID_ARGUMENT, "the model cache and the data cache are the same file")


# --------------------------------------------------------------------------
# file I/O (whole files from offset 0, whatever the descriptors' offsets)


def _pwrite_all(fd: int, chunks: list, offset: int = 0) -> int:
    for c in chunks:
        mv = memoryview(c).cast("B")
        while len(mv):
            n = os.pwrite(fd, mv, offset)
            if n <= 0:
                raise OSError(errno.EIO, "short write")
            offset += n
            mv = mv[n:]
    return offset


def _read_model_file(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    if size > MAX_MODEL_CACHE_BYTES:
        raise CacheError(S.GENERAL_FAILURE, f"the model cache has {size} bytes, more than a cache of this driver")
    # NOTE: one read of at most the size seen plus one byte: a file growing
    # meanwhile shows as a length mismatch below, never as an unbounded read
    buf = bytearray(size + 1)
    n = hal_memory.pread_into(fd, memoryview(buf))
    return bytes(buf[:n])


def _read_data_file(fd: int, size: int) -> np.ndarray:
    """Exactly ``size`` bytes (in a fresh aligned buffer); more or fewer in the file is a failure."""
    have = os.fstat(fd).st_size
    if have != size:  # NOTE: checked before allocating what the record claims
        raise CacheError(S.GENERAL_FAILURE, f"the data cache has {have} bytes, the model cache says {size}")
    raw = np.empty(size + 1 + _ALIGN, np.uint8)
    skip = (-raw.ctypes.data) % _ALIGN  # NOTE: 64-byte aligned blobs, as freshly allocated arrays
    buf = raw[skip:skip + size + 1]
    n = hal_memory.pread_into(fd, memoryview(buf))
    if n != size:
        raise CacheError(S.GENERAL_FAILURE, f"the data cache has {'more' if n > size else n} bytes, "
                                            f"the model cache says {size}")
    return buf[:size]


# --------------------------------------------------------------------------
# saving


class DataDigest:
    """:func:`data_digest` of bytes fed in any chunks (saving: the data cache is written as a list of arrays)."""

    def __init__(self) -> None:
        self._outer = hashlib.sha256()
        self._piece = hashlib.sha256()
        self._left = DIGEST_PIECE
        self._any = False

    def update(self, chunk: Any) -> None:
        mv = memoryview(chunk).cast("B")
        while len(mv):
            n = min(self._left, len(mv))
            self._piece.update(mv[:n])
            self._any = True
            mv = mv[n:]
            self._left -= n
            if not self._left:
                self._outer.update(self._piece.digest())
                self._piece, self._left = hashlib.sha256(), DIGEST_PIECE

    def digest(self) -> bytes:
        if self._left != DIGEST_PIECE or not self._any:
            self._outer.update(self._piece.digest())  # NOTE: the last, shorter piece (or the empty data's one)
        return self._outer.digest()


def _piece_digests(mv: memoryview, first: int, last: int, out: list) -> None:
    for i in range(first, last):
        out[i] = hashlib.sha256(mv[i * DIGEST_PIECE:(i + 1) * DIGEST_PIECE]).digest()


def data_digest(data: Any) -> bytes:
    """The data cache's digest: SHA-256 over the concatenated SHA-256 of each ``DIGEST_PIECE`` bytes of
    ``data`` (the last piece shorter; empty data: the digest of one empty piece).  Data of
    ``_PARALLEL_DIGEST`` bytes or more is hashed by two threads (hashlib releases the GIL over large
    buffers): a load authenticates 10 MB in half the time on two cores; the same digest on one."""
    mv = memoryview(data).cast("B")
    n = max(1, -(-len(mv) // DIGEST_PIECE))
    out: list = [b""] * n
    if len(mv) < _PARALLEL_DIGEST:
        _piece_digests(mv, 0, n, out)
    else:
        half = n // 2
        t = threading.Thread(target=_piece_digests, args=(mv, half, n, out), name="nnhal-cache-digest", daemon=True)
        t.start()
        try:
            _piece_digests(mv, 0, half, out)
        finally:
            t.join()
    return hashlib.sha256(b"".join(out)).digest()



class _Blobs:
    """Collects arrays for the data cache (one copy of each array object)."""

    def __init__(self) -> None:
        self.refs: list[BlobRef] = []
        self.chunks: list[Any] = []
        self.size = 0
        self._ids: dict[int, tuple[int, Any]] = {}

    def put(self, arr: Any) -> int:
        if isinstance(arr, (bytes, bytearray, memoryview)):
            key = id(arr)
            a = np.frombuffer(arr, np.uint8) if len(memoryview(arr).cast("B")) else np.empty(0, np.uint8)
        else:
            key = id(arr)
            a = np.ascontiguousarray(arr)
        hit = self._ids.get(key)
        if hit is not None and hit[1] is arr:
            return hit[0]
        if a.dtype.str not in _DTYPES and a.dtype != np.bool_:
            raise TypeError(f"array of dtype {a.dtype} cannot be cached")
        as_dtype = ""
        if a.dtype == np.float32 and a.size >= 4096 and _small_integers(a):
            # NOTE: quantized filters re-laid out as float32 (w - zp) hold integers
            # of at most 9 bits: int16 halves what a load reads and hashes
            as_dtype, a = a.dtype.str, a.astype(np.int16)
        pad = (-self.size) % _ALIGN
        if pad:
            self.chunks.append(b"\0" * pad)
            self.size += pad
        self.refs.append(BlobRef(self.size, int(a.nbytes), a.dtype.str, [int(d) for d in a.shape], as_dtype))
        if a.nbytes:
            self.chunks.append(a.reshape(-1).view(np.uint8))
        self.size += int(a.nbytes)
        self._ids[key] = (len(self.refs) - 1, arr)  # NOTE: keeps arr alive, so its id is not reused
        return len(self.refs) - 1


def _small_integers(a: np.ndarray) -> bool:
    """Every value an integer int16 holds exactly, and no -0.0 (restored
    bit for bit)."""
    with np.errstate(invalid="ignore"):
        return bool(np.all(np.abs(a) <= 32767) and np.array_equal(a, np.trunc(a))
                    and not np.any(np.signbit(a) & (a == 0)))


def mac(key: bytes, version: str, token: bytes, header: bytes, payload: bytes) -> bytes:
    v = version.encode()
    msg = hmac.new(key, _DOMAIN, hashlib.sha256)
    msg.update(struct.pack("<I", len(v)))
    msg.update(v)
    msg.update(token)
    msg.update(header)
    msg.update(payload)
    return msg.digest()


def encode(model: hal.Model, pool_views: list, executor: Executor, hal_version: int, priority: int, key: bytes,
           version: str, token: bytes) -> tuple[bytes, list, int]:
    """(model cache bytes, data cache chunks, data size) of a prepared model."""
    blobs = _Blobs()
    values = blobs.put(model.operandValues)
    pools = [blobs.put(v) for v in pool_views]
    states: list[list[OpState]] = []
    for sg, sts in zip([model.main, *model.referenced], executor.prepared_states()):
        row = []
        for op, st in zip(sg.operations, sts):
            opdef = registry.find(op.type)
            if st is None:
                row.append(OpState("none"))
            elif opdef is not None and opdef.save_state is not None:
                row.append(OpState("saved", opdef.save_state(st, blobs.put)))
            else:
                row.append(OpState("prepare"))  # NOTE: a state this op cannot save: recomputed on load
        states.append(row)
    digest = DataDigest()
    for c in blobs.chunks:
        digest.update(c)
    shell = dataclasses.replace(plain_model(model), operandValues=b"", pools=[])
    record = CacheRecord(driver_version=version, hal_version=int(hal_version), priority=int(priority), model=shell,
                         operand_values=values, pool_sizes=[len(v) for v in pool_views], pools=pools, states=states,
                         blobs=blobs.refs, data_size=blobs.size, data_sha256=digest.digest())
    payload = _ENCODER.encode(record)
    header = _HEADER.pack(MAGIC, FORMAT_VERSION, 0, len(payload))
    return header + payload + mac(key, version, token, header, payload), blobs.chunks, blobs.size


def write_files(model_fd: int, data_fd: int, model_bytes: bytes, data_chunks: list) -> None:
    """Truncates both files and writes them from offset 0 (data first: a
    model cache only ever describes data written before it)."""
    os.ftruncate(data_fd, 0)
    os.ftruncate(model_fd, 0)
    _pwrite_all(data_fd, data_chunks)
    _pwrite_all(model_fd, [model_bytes])


# --------------------------------------------------------------------------
# loading


class BlobPool:
    """A model pool restored from the data cache (what a prepared model keeps
    alive in place of the client's mapped memory)."""

    def __init__(self, view: memoryview):
        self.view = view

    def close(self) -> None:
        pass  # NOTE: plain memory owned by the prepared model: nothing to unmap


@dataclasses.dataclass
class Restored:
    model: hal.Model
    pools: list[BlobPool]
    executor: Executor
    hal_version: int
    priority: int


def verify(model_bytes: bytes, key: bytes, version: str, token: bytes) -> CacheRecord:
    """The decoded payload of an authentic model cache, or CacheError."""
    if len(model_bytes) < _HEADER.size + _TAG_SIZE:
        raise CacheError(S.GENERAL_FAILURE, f"the model cache is too short ({len(model_bytes)} bytes)")
    header = model_bytes[:_HEADER.size]
    magic, fmt, reserved, n = _HEADER.unpack(header)
    if magic != MAGIC:
        raise CacheError(S.GENERAL_FAILURE, "not a model cache of this driver (bad magic)")
    if len(model_bytes) != _HEADER.size + n + _TAG_SIZE:
        raise CacheError(S.GENERAL_FAILURE, f"the model cache has {len(model_bytes)} bytes, its header says "
                                            f"{_HEADER.size + n + _TAG_SIZE}")
    payload = model_bytes[_HEADER.size:_HEADER.size + n]
    tag = model_bytes[_HEADER.size + n:]
    if not hmac.compare_digest(tag, mac(key, version, token, header, payload)):
        raise CacheError(S.GENERAL_FAILURE, "the model cache failed authentication (modified, written for another "
                                            "token, or by another driver version or key)")
    if fmt != FORMAT_VERSION or reserved != 0:
        raise CacheError(S.GENERAL_FAILURE, f"model cache format {fmt} is not {FORMAT_VERSION}")
    try:
        record = _DECODER.decode(payload)
    except Exception as e:  # noqa: BLE001 - any failure to decode (UnicodeDecodeError for invalid UTF-8 too)
        raise CacheError(S.GENERAL_FAILURE, f"the model cache does not match its schema: {type(e).__name__}: "
                                            f"{e}") from None
    if record.driver_version != version:
        raise CacheError(S.GENERAL_FAILURE, f"the cache was written by {record.driver_version!r}")
    return record


def restore(record: CacheRecord, data: np.ndarray, extensions: Sequence[Extension] = ()) -> Restored:
    """Rebuilds the prepared model from a verified record and data (no
    validation, no prepare work: both are what the cache holds);
    ``extensions``: the driver's, whose types the model's resolve to."""
    if data_digest(data) != record.data_sha256:
        raise CacheError(S.GENERAL_FAILURE, "the data cache does not match the model cache (modified or replaced)")
    data.flags.writeable = False
    views: list[np.ndarray] = []
    for k, b in enumerate(record.blobs):
        if b.as_dtype not in ("", "<f4") or (b.as_dtype and b.dtype != "<i2"):
            raise CacheError(S.GENERAL_FAILURE, f"blob {k}: unknown conversion {b.dtype} -> {b.as_dtype}")
        if b.dtype not in _DTYPES or any(d < 0 for d in b.shape) or not 0 <= b.offset <= b.offset + b.nbytes <= \
                data.size:
            raise CacheError(S.GENERAL_FAILURE, f"blob {k} lies outside the data cache")
        dt = np.dtype(b.dtype)
        count = math.prod(b.shape)  # NOTE: not np.prod: a Python reduction per blob of a small tuple
        if count * dt.itemsize != b.nbytes:
            raise CacheError(S.GENERAL_FAILURE, f"blob {k}: shape {b.shape} of {b.dtype} is not {b.nbytes} bytes")
        if b.nbytes == 0:
            empty = np.empty(b.shape, dt)
            empty.flags.writeable = False
            views.append(empty)
        else:
            v = np.frombuffer(data, dt, count, b.offset).reshape(b.shape)
            if b.as_dtype:
                v = v.astype(b.as_dtype)
                v.flags.writeable = False
            views.append(v)

    def get(i: Any) -> np.ndarray:
        if not isinstance(i, int) or not 0 <= i < len(views):
            raise CacheError(S.GENERAL_FAILURE, f"no blob {i!r}")
        return views[i]

    if len(record.pools) != len(record.pool_sizes):
        raise CacheError(S.GENERAL_FAILURE, "pool table mismatch")
    model = dataclasses.replace(
        record.model, operandValues=get(record.operand_values).tobytes(),
        pools=[hal.Memory(name="nnhal-cache", size=n) for n in record.pool_sizes])
    pools = [BlobPool(memoryview(get(i)).cast("B")) for i in record.pools]
    if extensions and model.extensionNameToPrefix:
        model = resolve_extensions(model, extensions).apply(model)
    sgs = [model.main, *model.referenced]
    if len(record.states) != len(sgs):
        raise CacheError(S.GENERAL_FAILURE, "state table mismatch")
    states: list[list[Any]] = []
    for sg, row in zip(sgs, record.states):
        if len(row) != len(sg.operations):
            raise CacheError(S.GENERAL_FAILURE, "state table mismatch")
        out = []
        for op, st in zip(sg.operations, row):
            opdef = registry.find(op.type)
            if opdef is None:
                raise CacheError(S.GENERAL_FAILURE, f"operation {op.type} is not supported")
            if st.kind == "none":
                out.append(None)
            elif st.kind == "prepare":
                out.append(PREPARE)
            elif st.kind == "saved" and opdef.load_state is not None:
                out.append(opdef.load_state(st.value, get))
            else:
                raise CacheError(S.GENERAL_FAILURE, f"unknown state kind {st.kind!r} for {opdef.name}")
        states.append(out)
    executor = Executor(model, [p.view for p in pools], states)
    return Restored(model, pools, executor, record.hal_version, record.priority)


def _read_verified(model_fd: int, data_fd: int, key: bytes, version: str, token: bytes) -> tuple[Any, bytes]:
    """(the authenticated record, the data cache bytes); CacheError on any problem."""
    try:
        record = verify(_read_model_file(model_fd), key, version, token)
        return record, _read_data_file(data_fd, record.data_size)
    except OSError as e:
        raise CacheError(S.GENERAL_FAILURE, f"cannot read the cache files: {e}") from None


def load(model_fd: int, data_fd: int, key: bytes, version: str, token: bytes,
         extensions: Sequence[Extension] = ()) -> Restored:
    """Reads, authenticates and restores; CacheError on any problem."""
    record, data = _read_verified(model_fd, data_fd, key, version, token)
    try:
        return restore(record, data, extensions)
    except CacheError:
        raise
    except Exception as e:  # NOTE: an authentic cache that still does not rebuild (a driver bug): refused
        log.exception("restoring an authenticated cache failed")
        raise CacheError(S.GENERAL_FAILURE, f"cannot restore the cached model: {type(e).__name__}: {e}") from None


# --------------------------------------------------------------------------
# opaque compiled models (a backend whose compilation is one byte string)


@dataclasses.dataclass
class OpaqueRestored:
    model: hal.Model  # the validated model without its constants (request validation needs types and shapes)
    data: bytes  # the backend's compiled form, authenticated
    hal_version: int
    priority: int


def encode_opaque(model: hal.Model, data: bytes, hal_version: int, priority: int, key: bytes, version: str,
                  token: bytes) -> tuple[bytes, list, int]:
    """(model cache bytes, data cache chunks, data size) for a backend whose
    compiled model is ``data`` (litert-cpu: the lowered flatbuffer is the data
    cache): the same record, header and HMAC as :func:`encode`, with the data
    as the one blob and no operation states."""
    blobs = _Blobs()
    values = blobs.put(bytes(data))
    digest = DataDigest()
    for c in blobs.chunks:
        digest.update(c)
    shell = dataclasses.replace(plain_model(model), operandValues=b"", pools=[])
    record = CacheRecord(driver_version=version, hal_version=int(hal_version), priority=int(priority), model=shell,
                         operand_values=values, pool_sizes=[], pools=[], states=[], blobs=blobs.refs,
                         data_size=blobs.size, data_sha256=digest.digest())
    payload = _ENCODER.encode(record)
    header = _HEADER.pack(MAGIC, FORMAT_VERSION, 0, len(payload))
    return header + payload + mac(key, version, token, header, payload), blobs.chunks, blobs.size


def load_opaque(model_fd: int, data_fd: int, key: bytes, version: str, token: bytes) -> OpaqueRestored:
    """Reads and authenticates what :func:`encode_opaque` wrote; CacheError on any problem."""
    record, data = _read_verified(model_fd, data_fd, key, version, token)
    if data_digest(data) != record.data_sha256:
        raise CacheError(S.GENERAL_FAILURE, "the data cache does not match the model cache (modified or replaced)")
    if record.states or record.pools or len(record.blobs) != 1 or record.operand_values != 0:
        raise CacheError(S.GENERAL_FAILURE, "not an opaque compiled model")
    b = record.blobs[0]
    if not 0 <= b.offset <= b.offset + b.nbytes <= data.size:
        raise CacheError(S.GENERAL_FAILURE, "blob 0 lies outside the data cache")
    return OpaqueRestored(record.model, bytes(data[b.offset:b.offset + b.nbytes]), record.hal_version,
                          record.priority)
