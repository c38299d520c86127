"""The AIDL face of a service: a client that says ``Hello(face="aidl",
version=N)`` gets, on the same service, process and front end as the HIDL
clients, the AIDL ``IDevice`` of the served driver at interface version N
(``nnhal.driver.aidl.AidlDevice``), with the same isolation, threads,
limits and death handling (:mod:`nnhal.service.server`: this connection class
only decodes, runs and answers calls by the AIDL method table,
:mod:`nnhal.service.aidl_wire`).

- A call of a method the connection's version does not have, or of a name
  the interface does not have, is answered UNKNOWN_TRANSACTION (as binder's
  stub of that version) before its arguments are read; malformed arguments,
  an unknown object, descriptors that do not match the arguments, a memory
  token (``IDevice.allocate``'s) this client was not given: INVALID_ARGUMENT.
- A face method's ``ServiceSpecificError`` / ``TransactionError`` travels as
  ``Fail(status, message)``; a callback passed with a call that fails is
  answered by the face (a refused preparation notifies) or by the client.
- ``IPreparedModelCallback``: the client's, called one-way; answered with
  DEVICE_UNAVAILABLE if the service shuts down first.
- An ``IBurst``'s memories are kept by token on the service side
  (:class:`nnhal.service.slots.ServiceTokens`, closed with the burst): once
  the service holds a token's memory, its executions pass no descriptor.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

from nnhal import hal
from nnhal.driver.aidl import AidlDevice, hal_version
from nnhal.hal import aidl
from nnhal.hal.aidl.interfaces import TransactionError
from nnhal.service import aidl_wire, wire
from nnhal.service.server import DEVICE, ClientRef, Connection
from nnhal.service.slots import ServiceTokens

log = logging.getLogger("nnhal.service")

S = hal.ErrorStatus
UNKNOWN_TRANSACTION = TransactionError.UNKNOWN_TRANSACTION
_BURST_CALLS = frozenset({"executeSynchronously", "executeSynchronouslyWithConfig"})  # IBurst's: memories by token
_MEMORY = (aidl.Memory,)


def _memory_fds(memory: Any) -> list[int]:
    return aidl_wire.collect_fds(_MEMORY, [memory])


class _PreparedModelCallbackProxy(ClientRef, aidl.IPreparedModelCallback):
    """The client's ``IPreparedModelCallback`` as the face sees it."""

    def notify(self, status: Any, preparedModel: Any) -> None:
        self._oneway("IPreparedModelCallback", "notify", (int(status), preparedModel))

    def _export(self, iface: str, method: str, args: tuple) -> Any:
        spec = aidl_wire.SPECS[iface][method]
        return aidl_wire.export_refs(spec.in_types, args, self._conn.ref_of)

    def fail(self, status: S) -> None:
        self.notify(status, None)


class AidlConnection(Connection):
    """One client of the AIDL face (interface ``version``, 1-4; ValueError otherwise)."""

    def __init__(self, service: Any, chan: Any, pid: int, version: int):
        self.face = AidlDevice(service.device, version)
        self.version = hal_version(version)
        super().__init__(service, chan, pid)

    # ------------------------------------------------------------ objects
    def ref_of(self, iface: str, obj: Any) -> Optional[bytes]:
        """A new reference to a service object handed to the client (an IBurst
        with its token memories)."""
        if iface in aidl_wire.CLIENT_SIDE:
            return None  # NOTE: never the service's to hand out
        attachments = [ServiceTokens(_memory_fds)] if iface == "IBurst" else None
        return self.register(iface, obj, attachments)

    def _obj_of(self, iface: str, ref: bytes) -> Any:
        if iface in aidl_wire.CLIENT_SIDE:
            proxy = _PreparedModelCallbackProxy(self, ref, "notify")
            with self.lock:
                self.outstanding.add(proxy)
            return proxy
        return self._lookup(iface, ref)

    def _tokens_ok(self, request: Any) -> bool:
        for p in request.pools:
            if p.token is not None and p.token not in self.tokens:
                log.error("request pool names memory token %r, not given to this client", p.token)
                return False
        return True

    # ------------------------------------------------------------ calls
    def dispatch(self, call: wire.Call, fds: list[int], send: Any, slots: Any = None) -> None:
        target = call.target
        attachments: list = []
        if target == DEVICE:
            iface, obj = "IDevice", self.face
        else:
            entry = self.objects.get(target)
            if entry is None:
                self._fail(call.cid, S.INVALID_ARGUMENT, "unknown object", send)
                return
            iface, obj, attachments = entry
        spec = aidl_wire.SPECS[iface].get(call.method)
        if spec is None or spec.since > self.version:
            self._fail(call.cid, UNKNOWN_TRANSACTION, f"{iface} version {int(self.version - hal.HalVersion.AIDL_V1) + 1} "
                                                      f"has no method {call.method!r}", send)
            return
        tokens: Optional[ServiceTokens] = attachments[0] if iface == "IBurst" and attachments else None
        by_token = tokens is not None and spec.name in _BURST_CALLS
        if (call.slots is not None or call.forget) and not by_token:
            self._fail(call.cid, S.INVALID_ARGUMENT, f"memory slots on {iface}.{spec.name}", send)
            return
        if tokens is not None and (by_token or spec.name == "releaseMemoryResource"):
            self._burst_call(call, spec, obj, tokens, by_token, fds, send)
            return
        args = self._arguments(call, spec, iface, fds, send)
        if args is not None:
            self._run(call, spec, iface, obj, args, send)

    def _arguments(self, call: wire.Call, spec: aidl_wire.AidlMethod, iface: str, fds: list[int],
                   send: Any) -> Optional[list]:
        """The call's arguments, decoded, with their descriptors and objects in
        place and their memory tokens checked; None once a Fail is sent."""
        try:
            args = list(spec.arg_decoder.decode(call.args))
        except wire.DECODE_ERRORS as e:
            log.error("%s.%s: malformed arguments: %s", iface, spec.name, e)
            self._fail(call.cid, S.INVALID_ARGUMENT, f"malformed arguments: {e}", send)
            return None
        if (fds or spec.arg_fds) and not aidl_wire.install_fds(spec.in_types, args, fds):
            log.error("%s.%s: %d descriptors do not match the arguments", iface, spec.name, len(fds))
            self._fail(call.cid, S.INVALID_ARGUMENT, "descriptor count mismatch", send)
            return None
        if spec.arg_refs:
            aidl_wire.import_refs(spec.in_types, args, self._obj_of)
        for k in spec.requests:
            if not self._tokens_ok(args[k]):
                self._fail(call.cid, S.INVALID_ARGUMENT, "a request names a memory token this client was not given",
                           send)
                return None
        return args

    def _burst_call(self, call: wire.Call, spec: aidl_wire.AidlMethod, obj: Any, tokens: ServiceTokens,
                    by_token: bool, fds: list[int], send: Any) -> None:
        """An IBurst execution (memories by token) or releaseMemoryResource."""
        # NOTE: held across the execution: a burst runs one at a time, and its kept memories stay open meanwhile
        if not tokens.lock.acquire(blocking=not by_token):
            self._fail(call.cid, S.GENERAL_FAILURE, "an execution is running on this burst; a burst runs one at a "
                                                    "time", send)
            return
        held = True

        def reply(body: bytes, out_fds: Any) -> None:
            # NOTE: the answer is the call's last act: the burst is free before the client can send its next call
            nonlocal held
            if held:
                held = False
                tokens.lock.release()
            send(body, out_fds)

        try:
            # NOTE: a client executing in a loop sends the same call each time: decoded and resolved once
            args = tokens.recall(call.args, call.slots) if by_token and not fds and not call.forget else None
            if args is None:
                args = self._arguments(call, spec, "IBurst", fds, reply)
                if args is None:
                    return
                if by_token:
                    err = tokens.resolve(args[0], args[1], call.slots, call.forget, fds)
                    if err:
                        log.error("IBurst.%s: %s", spec.name, err)
                        self._fail(call.cid, S.INVALID_ARGUMENT, err, reply)
                        return
                    if call.slots is not None:
                        tokens.remember(call.args, call.slots, args)
                else:
                    tokens.release(args[0])
            self._run(call, spec, "IBurst", obj, args, reply)
        finally:
            if held:
                tokens.lock.release()

    def _run(self, call: wire.Call, spec: aidl_wire.AidlMethod, iface: str, obj: Any, args: list, send: Any) -> None:
        full = args
        if spec.outs:
            # NOTE: out parameters do not travel: the callee fills fresh ones, sent back with the return value
            full = [None] * len(spec.params)
            for k, v in zip(spec.ins, args):
                full[k] = v
            for k, cls in zip(spec.outs, spec.out_classes):
                full[k] = cls()
        try:
            result = getattr(obj, spec.name)(*full)
        except Exception as e:  # noqa: BLE001 - every failure is an answer
            status, message = aidl_wire.fail_status(e)
            if not isinstance(e, (aidl.ServiceSpecificError, TransactionError)):
                log.exception("%s.%s raised", iface, spec.name)
            if spec.callback is not None:
                # NOTE: the face notified a refused launch already (or the client answers it): nothing pending
                proxy = args[spec.callback]
                if isinstance(proxy, ClientRef):
                    with self.lock:
                        proxy._done = True
                        self.outstanding.discard(proxy)
            self._fail(call.cid, status, message, send)
            return
        self._answer(call.cid, spec, [result, *(full[k] for k in spec.outs)], send)

    def _answer(self, cid: int, spec: aidl_wire.AidlMethod, values: list, send: Any) -> None:
        def answer(out_fds: list[int]) -> Any:
            # NOTE: a descriptor the face returns (a sync fence) is the caller's, the service's here
            if spec.result_fds:
                out_fds += aidl_wire.collect_fds(spec.result_types, values)
            if not spec.result_refs:
                return values
            out = aidl_wire.export_refs(spec.result_types, values, self.ref_of)
            if spec.name == "allocate" and out[0] is not None and out[0].buffer is not None:
                with self.lock:
                    self.tokens[out[0].token] = out[0].buffer
            return out

        self.send_reply(cid, spec.name, answer, send)
