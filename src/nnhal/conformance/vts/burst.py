"""Section "burst": the burst's robustness, for every base model that
prepares: as VTS 1.3's ``ValidateBurst.cpp`` checks the HAL 1.3 burst
server (below), and as the AIDL VTS's ``validateBurst``
(``ValidateRequest.cpp``) checks an ``IBurst``: a valid request with one
pool's memory identifier token -2, with one token too few or too many, and
``releaseMemoryResource(-2)`` must each raise INVALID_ARGUMENT.

HAL 1.3:
The client side is driven by hand, as VTS drives it: two fast message queues
(``nnhal.fmq``, the binding's form of ``MQDescriptorSync``), an
``IBurstCallback`` answering slots with the request's memories, and request
packets encoded with ``nnhal.burst_packets``.  From the model's valid request
packet, VTS removes each datum (``removeDatumTest``), inserts each bad entry
at every position (``addDatumTest``) and replaces each datum by each bad
entry (``mutateDatumTest``): every one must give an error result with no
shapes and no timing, never a crash or a hang.  A result larger than the
result queue must fail without a fallback (``validateBurstFmqLength``), and
the padding bytes of a result must be zero (``validateBurstSanitized``).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, Callable, Optional

from nnhal import hal
from nnhal.conformance.face import AidlFace, as_face
from nnhal.conformance.vectors import VectorModel
from nnhal.conformance.vts.case import Case, Recorder, name, sample_indexes
from nnhal.conformance.vts.request import RequestPools, gate, model_id
from nnhal.platform import burst_packets as bp
from nnhal.platform import memory as hal_memory
from nnhal.platform.fmq import MessageQueue

SECTION = "burst"
S = hal.ErrorStatus
WAIT_S = 60.0
D = bp.DATUM_SIZE


class RawBurst:
    """A burst whose packets are built by hand (as ValidateBurst.cpp does)."""

    def __init__(self, prepared: Any, memories: dict[int, hal.Memory], result_length: int = 1024):
        self.memories = memories
        self.requests = MessageQueue.create(D, 1024, "writer")
        self.results = MessageQueue.create(D, result_length, "reader")
        self.answer: Any = None  # replaces getMemories' answer when set (a callable of the slots, or a value)
        raw = self

        class Callback(hal.IBurstCallback):
            def getMemories(self, slots: list) -> tuple:
                if raw.answer is not None:
                    return raw.answer(slots) if callable(raw.answer) else raw.answer
                try:
                    return S.NONE, [raw.memories[s] for s in slots]
                except (KeyError, TypeError):
                    return S.INVALID_ARGUMENT, []

        self.callback = Callback()
        self.status, self.context = prepared.configureExecutionBurst(self.callback, self.requests.descriptor(),
                                                                     self.results.descriptor())
        self.requests.release_descriptor()
        self.results.release_descriptor()

    def send_raw(self, packet: bytes) -> bytes:
        self.requests.write_blocking(packet, WAIT_S)
        return self.results.read_packet_blocking(WAIT_S)

    def send(self, packet: bytes) -> tuple:
        return bp.decode_result(self.send_raw(packet))

    def close(self) -> None:
        if self.context is not None:
            close = getattr(self.context, "close", None)
            if close is not None:
                close()
        self.requests.close()
        self.results.close()


def datums(raw: bytes) -> list[bytes]:
    return [raw[k:k + D] for k in range(0, len(raw), D)]


def bad_entries() -> list[bytes]:
    """One bad entry per request datum kind (VTS's createBadRequestPacketEntries):
    bad packet information, operands of 10 dimensions, dimension 0, an unknown
    pool identifier, a measureTiming datum."""
    info = hal.RequestArgument(location=hal.DataLocation(), dimensions=[0] * 10)
    op_in = bp.encode_request([info], [], [], 0)[D:2 * D]
    op_out = bp.encode_request([], [info], [], 0)[D:2 * D]
    return [struct.pack("<B3xIIII4x", bp.REQ_PACKET_INFORMATION, 10, 10, 10, 10), op_in,
            struct.pack("<B3xI16x", bp.REQ_INPUT_DIMENSION, 0), op_out,
            struct.pack("<B3xI16x", bp.REQ_OUTPUT_DIMENSION, 0),
            struct.pack("<B3xi16x", bp.REQ_POOL_IDENTIFIER, 2**31 - 1),
            struct.pack("<B3xi16x", bp.REQ_MEASURE_TIMING, 1)]


_KINDS = {bp.REQ_PACKET_INFORMATION: "packet information", bp.REQ_INPUT_OPERAND_INFORMATION: "input operand",
          bp.REQ_INPUT_DIMENSION: "input dimension", bp.REQ_OUTPUT_OPERAND_INFORMATION: "output operand",
          bp.REQ_OUTPUT_DIMENSION: "output dimension", bp.REQ_POOL_IDENTIFIER: "pool identifier",
          bp.REQ_MEASURE_TIMING: "measure timing"}


def _kind(d: bytes) -> str:
    return _KINDS.get(d[0], f"discriminator {d[0]}")


def _mutation_specs(d: list[bytes], bad: list[bytes]) -> list[tuple[str, int, int]]:
    """(VTS test, datum position, bad entry or -1) of every remove / add / mutate of one datum of the
    packet of datums ``d``, in VTS's order; no packet built (:func:`_mutation` builds one)."""
    out = [("removeDatumTest", k, -1) for k in range(len(d))]
    out += [("addDatumTest", k, j) for k in range(len(d) + 1) for j in range(len(bad))]
    for k in range(len(d)):
        for j, e in enumerate(bad):
            # NOTE: VTS leaves out replacing a dimension by a dimension (it may still be valid)
            same_dim = e[0] == d[k][0] and e[0] in (bp.REQ_INPUT_DIMENSION, bp.REQ_OUTPUT_DIMENSION)
            if e != d[k] and not same_dim:
                out.append(("mutateDatumTest", k, j))
    return out


def _mutation(d: list[bytes], bad: list[bytes], spec: tuple[str, int, int]) -> tuple[str, str, bytes]:
    """(VTS test, description, packet) of one mutation of :func:`_mutation_specs`."""
    test, k, j = spec
    if test == "removeDatumTest":
        return test, f"datum {k} ({_kind(d[k])}) removed", b"".join(d[:k] + d[k + 1:])
    e = bad[j]
    if test == "addDatumTest":
        return test, f"bad {_kind(e)} inserted at {k}", b"".join(d[:k] + [e] + d[k:])
    return test, f"datum {k} ({_kind(d[k])}) replaced by a bad {_kind(e)}", b"".join(d[:k] + [e] + d[k + 1:])


def serialization_mutations(good: bytes) -> list[tuple[str, str, bytes]]:
    """(VTS test, description, packet) for every remove / add / mutate of one datum."""
    d, bad = datums(good), bad_entries()
    return [_mutation(d, bad, spec) for spec in _mutation_specs(d, bad)]


NO_TIMING = hal.Timing()


def _judge_error(raw: RawBurst, packet: bytes) -> tuple[str, str]:
    status, shapes, timing = raw.send(packet)
    if status == S.NONE or shapes or timing != NO_TIMING:
        return name(status), f"gave {name(status)}, {len(shapes)} shapes, {timing}"
    return name(status), ""


def _judge_fmq_length(prepared: Any, pools: RequestPools, packet: bytes, n_outputs: int) -> tuple[str, str]:
    shapes = [hal.OutputShape([0] * 0, True)] * n_outputs
    small = RawBurst(prepared, {0: pools.in_mem, 1: pools.out_mem}, result_length=bp.result_packet_length(shapes) - 1)
    try:
        if small.status != S.NONE:
            return name(small.status), f"configureExecutionBurst gave {name(small.status)}"
        return _judge_error(small, packet)
    finally:
        small.close()


def _judge_sanitized(raw: RawBurst, packet: bytes) -> tuple[str, str]:
    res = raw.send_raw(packet)
    status = bp.decode_result(res)[0]
    for k, d in enumerate(datums(res)):
        bad = d[1:8] != bytes(7)
        if d[0] == bp.RES_OPERAND_INFORMATION:
            bad |= d[9:12] != bytes(3) or d[16:] != bytes(8)
        elif d[0] == bp.RES_PACKET_INFORMATION:
            bad |= d[20:] != bytes(4)
        elif d[0] == bp.RES_DIMENSION:
            bad |= d[12:] != bytes(12)
        if bad:
            return name(status), f"result datum {k} has non-zero padding: {d.hex()}"
    return name(status), ""


class _NoBurst(Exception):
    """configureExecutionBurst refused: the model's one (failed) case."""

    def __init__(self, test: str, status: Any):
        super().__init__(test, status)
        self.test, self.status = test, status


class _Planned(Sequence):
    """The checks of a plan, each (VTS test, mutation, judge) made when asked for: a sampled run builds
    only the packets it sends."""

    def __init__(self, n: int, make: Callable[[int], tuple[str, str, Any]]):
        self._n, self._make = n, make

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, k: Any) -> Any:
        if not isinstance(k, int) or not -self._n <= k < self._n:
            raise IndexError(k)
        return self._make(k % self._n)


def _packet_plan(prepared: Any, pools: RequestPools, closers: list) -> Sequence[tuple[str, str, Any]]:
    """(VTS test, mutation, judge) of every HAL 1.3 burst packet check (ValidateBurst.cpp)."""
    request = pools.request()
    good = bp.encode_request(request.inputs, request.outputs, [0, 1], hal.MeasureTiming.YES)
    raw = RawBurst(prepared, {0: pools.in_mem, 1: pools.out_mem})
    closers.append(raw.close)
    if raw.status != S.NONE:
        raise _NoBurst("ValidationTest.configureExecutionBurst", raw.status)
    d, bad = datums(good), bad_entries()
    specs = _mutation_specs(d, bad)

    def make(k: int) -> tuple[str, str, Any]:
        if k < len(specs):
            t, what, p = _mutation(d, bad, specs[k])
            return f"ValidationTest.validateBurstSerialization.{t}", what, lambda: _judge_error(raw, p)
        if k == len(specs):
            return ("ValidationTest.validateBurstFmqLength", "result larger than the result queue",
                    lambda: _judge_fmq_length(prepared, pools, good, len(request.outputs)))
        return "ValidationTest.validateBurstSanitized", "padding of the result", lambda: _judge_sanitized(raw, good)

    return _Planned(len(specs) + 2, make)


def _token_plan(face: AidlFace, prepared: Any, pools: RequestPools) -> list[tuple[str, str, Any]]:
    """(VTS test, mutation, judge) of every AIDL ``IBurst`` check (ValidateRequest.cpp's validateBurst)."""
    status, burst = face.call(prepared.configureExecutionBurst)
    if status != S.NONE:
        raise _NoBurst("ValidationTest.validateBurst", status)
    request = face.request(pools.request())
    good = list(range(len(request.pools)))  # NOTE: two shared-memory pools: tokens 0, 1

    def refused(call: Any, *args: Any) -> tuple[str, str]:
        got, _ = face.call(call, *args)
        return name(got), "" if got == S.INVALID_ARGUMENT else f"gave {name(got)}, VTS wants INVALID_ARGUMENT"

    def execute(tokens: list[int]) -> tuple[str, str]:
        return refused(burst.executeSynchronously, request, tokens, False, -1, -1)

    planned = [("ValidationTest.validateBurst", f"memory identifier token of pool {k} -2",
                lambda k=k: execute(good[:k] + [-2] + good[k + 1:])) for k in range(len(good))]
    planned += [("ValidationTest.validateBurst", f"{len(good) - 1} memory identifier tokens for {len(good)} pools",
                 lambda: execute([-1] * (len(good) - 1))),
                ("ValidationTest.validateBurst", f"{len(good) + 1} memory identifier tokens for {len(good)} pools",
                 lambda: execute([-1] * (len(good) + 1))),
                ("ValidationTest.validateBurst", "releaseMemoryResource(-2)",
                 lambda: refused(burst.releaseMemoryResource, -2))]
    return planned


def run_model(device: Any, vm: VectorModel, sample: Optional[int] = None) -> list[Case]:
    face = as_face(device)
    rec = Recorder(SECTION, model_id(vm))
    model = vm.build_model()
    pools: Optional[RequestPools] = None
    closers: list = []
    try:
        if vm.expectFailure:
            return rec.cases  # NOTE: VTS validates bursts only with the models' valid requests
        if not gate(rec, "ValidationTest.validateBurst", "an error result", face, model, vm):
            return rec.cases
        _, status, prepared = face.prepare(model)
        if status != S.NONE or prepared is None:
            rec.add("ValidationTest.createPreparedModel", "", "NONE", name(status), False,
                    f"a supported model did not prepare: {name(status)}")
            return rec.cases
        pools = RequestPools(vm)
        try:
            planned = _token_plan(face, prepared, pools) if isinstance(face, AidlFace) else \
                _packet_plan(prepared, pools, closers)
        except _NoBurst as e:
            rec.add(e.test, "configureExecutionBurst", "NONE", name(e.status), False,
                    f"configureExecutionBurst gave {name(e.status)}")
            return rec.cases
        for k in sample_indexes(len(planned), sample):
            test, what, run = planned[k]
            expected = "padding zero" if test.endswith("Sanitized") else \
                "INVALID_ARGUMENT" if isinstance(face, AidlFace) else "an error, no shapes, no timing"
            rec.check(test, what, expected, run)
    finally:
        for close in closers:
            close()
        if pools is not None:
            pools.close()
        for p in model.pools:
            hal_memory.free(p)
    return rec.cases
