"""The host's Settlement gRPC service: what ``ServiceBusMessageActions`` talks to.

The Service Bus extension in the worker settles messages by calling this service on the
host's gRPC port (``--host``/``--port`` of the worker's command line) with the message's
lock token. As in the Functions host, the listener registers every message it hands to an
invocation (the host's actions cache) and removes it when the invocation ends; the
service applies the settlement through the SDK receiver that holds the lock, on the
emulator or on Azure. Errors come back as the host returns them: an unknown lock token is
``FAILED_PRECONDITION`` "LockToken <token> not found.", a failed settlement ``UNKNOWN``
with the error's text.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import grpc
from azure.servicebus import ServiceBusReceivedMessage, ServiceBusReceiver
from azurefunctions.extensions.bindings.protos import settlement_pb2, settlement_pb2_grpc
from google.protobuf.empty_pb2 import Empty

log = logging.getLogger("host.settlement")


def lock_key(lock_token: Any) -> str:
    return str(uuid.UUID(str(lock_token)))


@dataclass
class HeldMessage:
    """A message handed to an invocation, with the receiver (and its lock) that holds it."""

    receiver: ServiceBusReceiver
    message: ServiceBusReceivedMessage
    receiver_lock: threading.Lock
    key: str  # the lock token as the extension sends it (taken before settlement clears it)
    settled: bool = False


@dataclass
class HeldSession:
    receiver: ServiceBusReceiver
    receiver_lock: threading.Lock
    released: threading.Event = field(default_factory=threading.Event)


class MessageLocks:
    """The messages and sessions invocations may settle, by lock token and session id."""

    def __init__(self) -> None:
        self._messages: dict[str, HeldMessage] = {}
        self._sessions: dict[str, HeldSession] = {}
        self._lock = threading.Lock()

    def hold(
        self,
        receiver: ServiceBusReceiver,
        batch: Iterable[ServiceBusReceivedMessage],
        receiver_lock: threading.Lock,
    ) -> list[HeldMessage]:
        held = [
            HeldMessage(receiver, message, receiver_lock, lock_key(message.lock_token))
            for message in batch
        ]
        with self._lock:
            for entry in held:
                self._messages[entry.key] = entry
        return held

    def release(self, held: Iterable[HeldMessage]) -> None:
        with self._lock:
            for entry in held:
                self._messages.pop(entry.key, None)

    def message(self, lock_token: str) -> HeldMessage | None:
        try:
            key = lock_key(lock_token)
        except ValueError:
            return None
        with self._lock:
            return self._messages.get(key)

    def hold_session(
        self, session_id: str, receiver: ServiceBusReceiver, receiver_lock: threading.Lock
    ) -> HeldSession:
        session = HeldSession(receiver, receiver_lock)
        with self._lock:
            self._sessions[session_id] = session
        return session

    def release_session(self, session_id: str, held: HeldSession | None = None) -> None:
        """Forget the session; with ``held``, only if it is still that registration (a
        receiver that lost the session must not drop the next holder's)."""
        with self._lock:
            if held is None or self._sessions.get(session_id) is held:
                self._sessions.pop(session_id, None)

    def session(self, session_id: str) -> HeldSession | None:
        with self._lock:
            return self._sessions.get(session_id)


class SettlementService(settlement_pb2_grpc.SettlementServicer):  # type: ignore[misc]
    """Complete, abandon, dead-letter, defer and renew, applied through the holding receiver."""

    def __init__(self, locks: MessageLocks) -> None:
        self._locks = locks

    def _settle(
        self,
        request: Any,
        context: grpc.ServicerContext,
        action: str,
        apply: Callable[[ServiceBusReceiver, ServiceBusReceivedMessage], object],
    ) -> Empty:
        if getattr(request, "propertiesToModify", b""):
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                "propertiesToModify is not supported by the local host",
            )
        held = self._locks.message(request.locktoken)
        if held is None:
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION, f"LockToken {request.locktoken} not found."
            )
        assert held is not None
        try:
            with held.receiver_lock:
                apply(held.receiver, held.message)
        except Exception as error:
            log.warning("%s of message %s failed: %r", action, held.message.message_id, error)
            context.abort(grpc.StatusCode.UNKNOWN, f"{type(error).__name__}: {error}")
        if action != "renew":
            held.settled = True
        log.debug("%s message %s", action, held.message.message_id)
        return Empty()

    def Complete(self, request: Any, context: grpc.ServicerContext) -> Empty:  # noqa: N802
        return self._settle(request, context, "complete", lambda r, m: r.complete_message(m))

    def Abandon(self, request: Any, context: grpc.ServicerContext) -> Empty:  # noqa: N802
        return self._settle(request, context, "abandon", lambda r, m: r.abandon_message(m))

    def Defer(self, request: Any, context: grpc.ServicerContext) -> Empty:  # noqa: N802
        return self._settle(request, context, "defer", lambda r, m: r.defer_message(m))

    def Deadletter(self, request: Any, context: grpc.ServicerContext) -> Empty:  # noqa: N802
        reason = request.deadletterReason.value if request.HasField("deadletterReason") else None
        description = (
            request.deadletterErrorDescription.value
            if request.HasField("deadletterErrorDescription")
            else None
        )

        def dead_letter(receiver: ServiceBusReceiver, message: ServiceBusReceivedMessage) -> None:
            receiver.dead_letter_message(message, reason=reason, error_description=description)

        return self._settle(request, context, "dead-letter", dead_letter)

    def RenewMessageLock(self, request: Any, context: grpc.ServicerContext) -> Empty:  # noqa: N802
        return self._settle(request, context, "renew", lambda r, m: r.renew_message_lock(m))

    def _session(self, session_id: str, context: grpc.ServicerContext) -> HeldSession:
        session = self._locks.session(session_id)
        if session is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"SessionId {session_id} not found.")
        assert session is not None
        return session

    def _on_session(
        self, session_id: str, context: grpc.ServicerContext, apply: Callable[[Any], Any]
    ) -> Any:
        held = self._session(session_id, context)
        try:
            with held.receiver_lock:
                return apply(held.receiver.session)
        except Exception as error:
            context.abort(grpc.StatusCode.UNKNOWN, f"{type(error).__name__}: {error}")

    def GetSessionState(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        state = self._on_session(request.sessionId, context, lambda s: s.get_state())
        return settlement_pb2.GetSessionStateResponse(sessionState=state or b"")

    def SetSessionState(self, request: Any, context: grpc.ServicerContext) -> Empty:  # noqa: N802
        self._on_session(request.sessionId, context, lambda s: s.set_state(request.sessionState))
        return Empty()

    def RenewSessionLock(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        locked_until = self._on_session(request.sessionId, context, lambda s: s.renew_lock())
        response = settlement_pb2.RenewSessionLockResponse()
        response.lockedUntil.FromDatetime(locked_until)
        return response

    def ReleaseSession(self, request: Any, context: grpc.ServicerContext) -> Empty:  # noqa: N802
        self._session(request.sessionId, context).released.set()
        return Empty()

    def register(self, server: grpc.Server) -> None:
        settlement_pb2_grpc.add_SettlementServicer_to_server(self, server)
