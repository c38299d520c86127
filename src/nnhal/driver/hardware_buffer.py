"""Non-BLOB ``hardware_buffer`` memories (an ``AHardwareBuffer`` image) as
execution inputs and outputs and as ``IBuffer`` copy sources/targets: the
optional part of the NN HAL memory guide ("a non-BLOB hardware buffer is
supported for model execution only"; a handle the driver cannot use fails the
execution, GENERAL_FAILURE recommended).

The emulated handle (see ``nnhal.memory``) is one memfd and the ints
``[width, height, layers, format, usage_lo, usage_hi, stride]``; the
hidl_memory size is 0, as in Android, so a request argument in such a pool
has offset 0 and length 0 and the whole image is the operand.

Layout (what a CPU lock of the buffer would show): pixels of ``bpp`` bytes
(from the format), rows of ``width`` pixels that start every ``stride``
pixels, ``height`` rows per layer, ``layers`` layers one after the other.  A
tensor maps to the image as its bytes in row-major order, packed into the
rows' pixel bytes (the padding between ``width`` and ``stride`` is skipped):
an input reads the first ``nbytes`` packed bytes (the image must hold at
least that many), an output writes them (an image too small is
OUTPUT_INSUFFICIENT_SIZE with the needed shape), a copy needs the image's
packed capacity to equal the buffer's size exactly.  So an RGBA8888 image of
W x H pixels is exactly a ``[1, H, W, 4]`` quant8 tensor, whatever its
stride.

Answers: a format without a single plane of whole-byte pixels (YUV, depth
with stencil, unknown) or a buffer without the CPU usage the access needs is
GENERAL_FAILURE (the guide's recommendation for a handle the driver cannot
use); a malformed description (zero sizes, stride below width, a backing
file smaller than the layout) is INVALID_ARGUMENT.
"""

from __future__ import annotations

import os
import stat
from typing import Optional

from nnhal import hal
from nnhal.platform import memory as hal_memory

# NOTE: AHardwareBuffer formats (android/hardware_buffer.h) with one plane of
# whole-byte pixels: bytes per pixel.
BYTES_PER_PIXEL: dict[int, int] = {
    1: 4,     # R8G8B8A8_UNORM
    2: 4,     # R8G8B8X8_UNORM
    3: 3,     # R8G8B8_UNORM
    4: 2,     # R5G6B5_UNORM
    0x16: 8,  # R16G16B16A16_FLOAT
    0x2B: 4,  # R10G10B10A2_UNORM
    0x30: 2,  # D16_UNORM
    0x33: 4,  # D32_FLOAT
    0x35: 1,  # S8_UINT
    0x38: 1,  # R8_UNORM
}


class ImageError(ValueError):
    """A hardware buffer that cannot be used; ``status`` says how to answer."""

    def __init__(self, status: hal.ErrorStatus, message: str):
        super().__init__(message)
        self.status = status


class Image:
    """One non-BLOB hardware buffer, read and written with ``pread`` /
    ``pwrite`` row by row: ``capacity`` packed bytes, ``read(n)`` the first
    ``n``, ``write(data)`` from the start."""

    def __init__(self, memory: hal.Memory, writable: bool):
        if not isinstance(memory, hal.Memory) or memory.name != "hardware_buffer":
            raise ImageError(hal.ErrorStatus.INVALID_ARGUMENT, "not a 'hardware_buffer' memory")
        try:
            hal_memory.validate(memory)
            desc = hal_memory.hardware_buffer_desc(memory)
        except hal_memory.InvalidMemory as e:
            raise ImageError(hal.ErrorStatus.INVALID_ARGUMENT, str(e)) from None
        bad, unsupported = hal.ErrorStatus.INVALID_ARGUMENT, hal.ErrorStatus.GENERAL_FAILURE
        if min(desc.width, desc.height, desc.layers) <= 0 or desc.stride < desc.width:
            raise ImageError(bad, f"malformed hardware buffer {desc}: sizes must be positive and stride >= width")
        bpp = BYTES_PER_PIXEL.get(desc.format)
        if bpp is None:
            raise ImageError(unsupported, f"hardware buffer format {desc.format:#x} is not supported (one plane "
                                          "of whole-byte pixels is)")
        if not desc.usage & hal_memory.AHARDWAREBUFFER_USAGE_CPU_READ_MASK:
            raise ImageError(unsupported, "hardware buffer has no CPU read usage")
        if writable and not desc.usage & hal_memory.AHARDWAREBUFFER_USAGE_CPU_WRITE_MASK:
            raise ImageError(unsupported, "hardware buffer has no CPU write usage but must be written")
        self.desc, self.bpp = desc, bpp
        self.row_bytes, self.pitch = desc.width * bpp, desc.stride * bpp
        self.rows = desc.height * desc.layers
        self.capacity = self.row_bytes * self.rows
        self.extent = (self.rows - 1) * self.pitch + self.row_bytes
        fd = memory.handle.fds[0]
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_size < self.extent:
            raise ImageError(bad, f"hardware buffer {desc} needs {self.extent} bytes, its file has {st.st_size}")
        if not stat.S_ISREG(st.st_mode):
            raise ImageError(bad, "hardware buffer fd is not a regular file (memfd)")
        if (os.O_ACCMODE & _flags(fd)) != os.O_RDWR and writable:
            raise ImageError(bad, "hardware buffer fd is read-only but the buffer must be written")
        # NOTE: pread / pwrite on our own duplicate, never a mapping: a client that shrinks the
        # file meanwhile gets an error, not a SIGBUS in the driver
        self._fd: Optional[int] = os.dup(fd)

    def _rows(self, n: int) -> list[tuple[int, int, int]]:
        """(file offset, packed offset, length) of the row pieces holding the first ``n`` packed bytes."""
        if self.pitch == self.row_bytes:
            return [(0, 0, n)] if n else []
        return [(r * self.pitch, start, min(self.row_bytes, n - start))
                for r, start in enumerate(range(0, n, self.row_bytes))]

    def _fd_open(self) -> int:
        if self._fd is None:
            raise ImageError(hal.ErrorStatus.GENERAL_FAILURE, "the hardware buffer is closed")
        return self._fd

    def read(self, n: int) -> bytes:
        """The first ``n`` packed bytes (``n`` <= capacity)."""
        if n > self.capacity:
            raise ValueError(f"{n} bytes asked of an image of {self.capacity}")
        fd = self._fd_open()
        out = bytearray(n)
        view = memoryview(out)
        for off, start, k in self._rows(n):
            got = 0
            while got < k:
                chunk = os.pread(fd, k - got, off + got)
                if not chunk:
                    raise ImageError(hal.ErrorStatus.INVALID_ARGUMENT, "the hardware buffer's file shrank")
                view[start + got: start + got + len(chunk)] = chunk
                got += len(chunk)
        return bytes(out)

    def write(self, data: bytes) -> None:
        n = len(data)
        if n > self.capacity:
            raise ValueError(f"{n} bytes written to an image of {self.capacity}")
        fd = self._fd_open()
        if os.fstat(fd).st_size < self.extent:  # NOTE: pwrite would grow a shrunk file: refuse instead
            raise ImageError(hal.ErrorStatus.INVALID_ARGUMENT, "the hardware buffer's file shrank")
        view = memoryview(data)
        for off, start, k in self._rows(n):
            done = 0
            while done < k:
                done += os.pwrite(fd, view[start + done: start + k], off + done)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def _flags(fd: int) -> int:
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_GETFL)


def open_image(memory: hal.Memory, writable: bool) -> Image:
    return Image(memory, writable)
