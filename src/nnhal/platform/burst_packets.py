"""The burst packets of HAL 1.2 (``neuralnetworks/1.2/types.hal``):
``FmqRequestDatum`` and ``FmqResultDatum`` as fixed-size binary elements of a
fast message queue (:mod:`nnhal.platform.fmq`), and the packet layout that Android 11's
ExecutionBurstController / ExecutionBurstServer exchange.

Each datum is a ``safe_union``: a discriminator byte (the member's index in
the HAL declaration) then the member, little-endian, 24 bytes in all; every
byte that no field covers is zero ("padding bytes in results are zero",
ValidateBurst.cpp).

Request packet: ``packetInformation`` (packetSize, numberOfInputOperands,
numberOfOutputOperands, numberOfPools); per input ``inputOperandInformation``
(hasNoValue, location, numberOfDimensions) and that many
``inputOperandDimensionValue``; the same for the outputs; one
``poolIdentifier`` (a slot) per pool; ``measureTiming``.

Result packet: ``packetInformation`` (packetSize, errorStatus,
numberOfOperands); per output ``operandInformation`` (isSufficient,
numberOfDimensions) and its ``operandDimensionValue``\\ s;
``executionTiming``.

The 1.2 burst carries no deadline and no loop timeout (the packet has no
field for them; VTS runs no loop-timeout test through the burst), and its
status is a 1.0 ``ErrorStatus``.

Decoding checks what the reference's ``deserialize`` checks (the discriminator
sequence, the counts, the packet size) and more: unknown discriminators,
non-zero padding and bools other than 0/1 are malformed.  A malformed packet
raises :class:`PacketError`, nothing else.
"""

from __future__ import annotations

import struct
from typing import Sequence

from nnhal import hal

__all__ = ["DATUM_SIZE", "PacketError", "RequestPacket", "decode_request", "decode_result", "encode_request",
           "encode_result", "request_packet_length", "result_packet_length"]

DATUM_SIZE = 24

# FmqRequestDatum members, in the order of types.hal
REQ_PACKET_INFORMATION = 0
REQ_INPUT_OPERAND_INFORMATION = 1
REQ_INPUT_DIMENSION = 2
REQ_OUTPUT_OPERAND_INFORMATION = 3
REQ_OUTPUT_DIMENSION = 4
REQ_POOL_IDENTIFIER = 5
REQ_MEASURE_TIMING = 6

# FmqResultDatum members
RES_PACKET_INFORMATION = 0
RES_OPERAND_INFORMATION = 1
RES_DIMENSION = 2
RES_EXECUTION_TIMING = 3

# NOTE: one format per member, in discriminator order; a packet is decoded with one Struct made of
# its members' formats (cached by discriminator sequence): one unpack, and one re-pack whose
# comparison with the packet checks every padding byte
_REQ_FORMATS = ("B3xIIII4x", "B3xB3xIIII", "B3xI16x", "B3xB3xIIII", "B3xI16x", "B3xi16x", "B3xi16x")
_RES_FORMATS = ("B7xIiI4x", "B7xB3xI8x", "B7xI12x", "B7xQQ")
_REQ_PACKET = struct.Struct("<B3xIIII4x")  # packetSize, inputs, outputs, pools
_REQ_OPERAND = struct.Struct("<B3xB3xIIII")  # hasNoValue, poolIndex, offset, length, numberOfDimensions
_REQ_U32 = struct.Struct("<B3xI16x")
_REQ_I32 = struct.Struct("<B3xi16x")
_RES_PACKET = struct.Struct("<B7xIiI4x")  # packetSize, errorStatus, numberOfOperands
_RES_OPERAND = struct.Struct("<B7xB3xI8x")  # isSufficient, numberOfDimensions
_RES_U32 = struct.Struct("<B7xI12x")
_RES_TIMING = struct.Struct("<B7xQQ")
assert all(s.size == DATUM_SIZE for s in (_REQ_PACKET, _REQ_OPERAND, _REQ_U32, _REQ_I32, _RES_PACKET, _RES_OPERAND,
                                          _RES_U32, _RES_TIMING))

_U32 = 0xFFFFFFFF
_V1_0_STATUSES = frozenset(range(hal.ErrorStatus.INVALID_ARGUMENT + 1))


class PacketError(ValueError):
    """A malformed burst packet."""


class RequestPacket:
    """A decoded request packet: a 1.0 request without pools, the pools'
    slots, and the MeasureTiming value (as sent; validated by the execution)."""

    __slots__ = ("inputs", "outputs", "slots", "measure")

    def __init__(self, inputs: list[hal.RequestArgument], outputs: list[hal.RequestArgument], slots: list[int],
                 measure: int):
        self.inputs, self.outputs, self.slots, self.measure = inputs, outputs, slots, measure


# --------------------------------------------------------------------------
# request


def request_packet_length(inputs: Sequence[hal.RequestArgument], outputs: Sequence[hal.RequestArgument],
                          n_pools: int) -> int:
    return 2 + len(inputs) + len(outputs) + n_pools + sum(len(a.dimensions) for a in (*inputs, *outputs))


def _u32(v: object, what: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= _U32:
        raise PacketError(f"{what} {v!r} is not a uint32")
    return v


def encode_request(inputs: Sequence[hal.RequestArgument], outputs: Sequence[hal.RequestArgument],
                   slots: Sequence[int], measure: int) -> bytes:
    """The request packet (the reference's ``serialize(request, measure, slots)``)."""
    n = request_packet_length(inputs, outputs, len(slots))
    parts = [_REQ_PACKET.pack(REQ_PACKET_INFORMATION, n, len(inputs), len(outputs), len(slots))]
    try:
        for info, dim, args in ((REQ_INPUT_OPERAND_INFORMATION, REQ_INPUT_DIMENSION, inputs),
                                (REQ_OUTPUT_OPERAND_INFORMATION, REQ_OUTPUT_DIMENSION, outputs)):
            for a in args:
                loc = a.location
                parts.append(_REQ_OPERAND.pack(info, 1 if a.hasNoValue else 0, loc.poolIndex, loc.offset, loc.length,
                                               len(a.dimensions)))
                parts.extend(_REQ_U32.pack(dim, d) for d in a.dimensions)
        parts.extend(_REQ_I32.pack(REQ_POOL_IDENTIFIER, s) for s in slots)
        parts.append(_REQ_I32.pack(REQ_MEASURE_TIMING, int(measure)))
    except (struct.error, AttributeError, TypeError) as e:
        raise PacketError(f"request cannot be serialized: {e}") from None
    return b"".join(parts)


class _Codec:
    """Splits a packet into per-datum tuples (discriminator first)."""

    def __init__(self, formats: tuple[str, ...]):
        self.formats = formats
        self.counts = [len(struct.Struct("<" + f).unpack(bytes(DATUM_SIZE))) for f in formats]
        self.cache: dict[bytes, struct.Struct] = {}

    def split(self, data: bytes) -> list[tuple]:
        if not data or len(data) % DATUM_SIZE:
            raise PacketError(f"a packet of {len(data)} bytes is not a positive number of {DATUM_SIZE}-byte datums")
        data = bytes(data)
        discs = data[0::DATUM_SIZE]
        if max(discs) >= len(self.formats):
            k = next(i for i, d in enumerate(discs) if d >= len(self.formats))
            raise PacketError(f"datum {k} has an unknown discriminator {discs[k]}")
        s = self.cache.get(discs)
        if s is None:
            s = struct.Struct("<" + "".join(self.formats[d] for d in discs))
            if len(self.cache) >= 256:  # NOTE: bounded: random packets cannot grow it
                self.cache.clear()
            self.cache[discs] = s
        values = s.unpack(data)
        if s.pack(*values) != data:
            raise PacketError("non-zero padding")
        out, i = [], 0
        counts = self.counts
        for d in discs:
            n = counts[d]
            out.append(values[i:i + n])
            i += n
        return out


_REQ_CODEC = _Codec(_REQ_FORMATS)
_RES_CODEC = _Codec(_RES_FORMATS)


def _expect(datums: list[tuple], index: int, disc: int, what: str, *args: object) -> tuple:
    """Datum ``index``, which must have discriminator ``disc``; ``what`` (a
    format string of ``args``: NOTE: formatted only for an error, not per
    datum) names it in the error."""
    if index >= len(datums):
        raise PacketError(f"packet ends where {what.format(*args)} should be (datum {index})")
    d = datums[index]
    if d[0] != disc:
        raise PacketError(f"datum {index} has discriminator {d[0]}, {what.format(*args)} expected")
    return d


def _bool(v: int, what: str) -> bool:
    if v not in (0, 1):
        raise PacketError(f"{what} {v} is not a bool")
    return bool(v)


def decode_request(data: bytes) -> RequestPacket:
    """Decode and check a request packet; :class:`PacketError` if malformed."""
    datums = _REQ_CODEC.split(data)
    _, size, n_in, n_out, n_pools = _expect(datums, 0, REQ_PACKET_INFORMATION, "packetInformation")
    if size != len(datums):
        raise PacketError(f"packetSize {size} but the packet has {len(datums)} datums")
    index = 1
    args: list[list[hal.RequestArgument]] = [[], []]
    for side, (count, info, dim, name) in enumerate(
            ((n_in, REQ_INPUT_OPERAND_INFORMATION, REQ_INPUT_DIMENSION, "input"),
             (n_out, REQ_OUTPUT_OPERAND_INFORMATION, REQ_OUTPUT_DIMENSION, "output"))):
        if count > len(datums):
            raise PacketError(f"{count} {name} operands cannot fit a packet of {len(datums)} datums")
        for k in range(count):
            _, no_value, pool, offset, length, n_dims = _expect(datums, index, info, "{}OperandInformation[{}]",
                                                                name, k)
            index += 1
            if n_dims > len(datums) - index:
                raise PacketError(f"{name}OperandInformation[{k}]: {n_dims} dimensions do not fit the packet")
            dims = []
            for j in range(n_dims):
                dims.append(_expect(datums, index, dim, "{} {} dimension {}", name, k, j)[1])
                index += 1
            if no_value not in (0, 1):
                _bool(no_value, f"{name}OperandInformation[{k}].hasNoValue")
            args[side].append(hal.RequestArgument(hasNoValue=no_value == 1,
                                                  location=hal.DataLocation(pool, offset, length), dimensions=dims))
    if n_pools > len(datums) - index:
        raise PacketError(f"{n_pools} pools do not fit the packet")
    slots = []
    for k in range(n_pools):
        slots.append(_expect(datums, index, REQ_POOL_IDENTIFIER, "poolIdentifier[{}]", k)[1])
        index += 1
    measure = _expect(datums, index, REQ_MEASURE_TIMING, "measureTiming")[1]
    index += 1
    if index != size:
        raise PacketError(f"{size - index} datums after measureTiming")
    return RequestPacket(args[0], args[1], slots, measure)


# --------------------------------------------------------------------------
# result


def result_packet_length(shapes: Sequence[hal.OutputShape]) -> int:
    return 2 + len(shapes) + sum(len(s.dimensions) for s in shapes)


def encode_result(status: int, shapes: Sequence[hal.OutputShape], timing: hal.Timing) -> bytes:
    """The result packet (the reference's ``serialize(status, shapes, timing)``)."""
    if status not in _V1_0_STATUSES:
        raise PacketError(f"status {status!r} is not a 1.0 ErrorStatus")
    try:
        parts = [_RES_PACKET.pack(RES_PACKET_INFORMATION, result_packet_length(shapes), int(status), len(shapes))]
        for s in shapes:
            parts.append(_RES_OPERAND.pack(RES_OPERAND_INFORMATION, 1 if s.isSufficient else 0, len(s.dimensions)))
            parts.extend(_RES_U32.pack(RES_DIMENSION, d) for d in s.dimensions)
        parts.append(_RES_TIMING.pack(RES_EXECUTION_TIMING, timing.timeOnDevice, timing.timeInDriver))
    except (struct.error, AttributeError, TypeError) as e:
        raise PacketError(f"result cannot be serialized: {e}") from None
    return b"".join(parts)


def decode_result(data: bytes) -> tuple[hal.ErrorStatus, list[hal.OutputShape], hal.Timing]:
    """Decode and check a result packet; :class:`PacketError` if malformed."""
    datums = _RES_CODEC.split(data)
    _, size, status, n = _expect(datums, 0, RES_PACKET_INFORMATION, "packetInformation")
    if size != len(datums):
        raise PacketError(f"packetSize {size} but the packet has {len(datums)} datums")
    if status not in _V1_0_STATUSES:
        raise PacketError(f"errorStatus {status} is not a 1.0 ErrorStatus")
    if n > len(datums):
        raise PacketError(f"{n} operands cannot fit a packet of {len(datums)} datums")
    index = 1
    shapes = []
    for k in range(n):
        _, sufficient, n_dims = _expect(datums, index, RES_OPERAND_INFORMATION, "operandInformation[{}]", k)
        index += 1
        if n_dims > len(datums) - index:
            raise PacketError(f"operandInformation[{k}]: {n_dims} dimensions do not fit the packet")
        dims = []
        for j in range(n_dims):
            dims.append(_expect(datums, index, RES_DIMENSION, "operand {} dimension {}", k, j)[1])
            index += 1
        if sufficient not in (0, 1):
            _bool(sufficient, f"operandInformation[{k}].isSufficient")
        shapes.append(hal.OutputShape(dimensions=dims, isSufficient=sufficient == 1))
    _, on_device, in_driver = _expect(datums, index, RES_EXECUTION_TIMING, "executionTiming")
    index += 1
    if index != size:
        raise PacketError(f"{size - index} datums after executionTiming")
    return hal.ErrorStatus(status), shapes, hal.Timing(timeOnDevice=on_device, timeInDriver=in_driver)
