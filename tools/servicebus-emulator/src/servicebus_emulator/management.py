"""The ``$management`` request/response node of every queue, subscription and DLQ.

Answers the operations the SDK sends (renew-lock, peek, schedule, cancel, receive by
sequence number, update-disposition, session lock/state, list sessions) and the rule
operations of subscriptions (add-rule, remove-rule, enumerate-rules).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from proton import UNDESCRIBED, Array, Data, Disposition, Message, timestamp

from .amqp_server import AmqpConnection
from .broker import BrokerError, Namespace
from .codec import parse_message
from .consumers import apply_outcome, optional_text
from .replies import status_reply
from .rule_ops import add_rule, enumerate_rules, remove_rule
from .store import EntityStore, Envelope, MessageState

LOG = logging.getLogger("servicebus_emulator.management")
LOCK_LOST = "com.microsoft:message-lock-lost"
_OUTCOMES = {"completed": Disposition.ACCEPTED, "abandoned": Disposition.MODIFIED}


def _array(kind: int, values: list[Any]) -> Array:
    undescribed: Any = UNDESCRIBED
    return Array(undescribed, kind, *values)


def _items(value: Any) -> list[Any]:
    return list(value.elements) if isinstance(value, Array) else list(value or [])


def _ms(seconds: float) -> timestamp:
    return timestamp(int(seconds * 1000))


def encode_for_reply(envelope: Envelope, locked: bool = False) -> bytes:
    annotations: dict[str, Any] = {
        "x-opt-sequence-number": envelope.sequence_number,
        "x-opt-enqueued-time": _ms(envelope.enqueued_at),
        "x-opt-message-state": int(envelope.state),
    }
    if envelope.scheduled_at is not None:
        annotations["x-opt-scheduled-enqueue-time"] = _ms(envelope.scheduled_at)
    if locked:
        annotations["x-opt-locked-until"] = _ms(envelope.locked_until)
    return envelope.message.encode(envelope.delivery_count, annotations)


class ManagementNode:
    """Dispatches one request to its operation; every operation returns a reply Message."""

    def __init__(self, namespace: Namespace, pump: Callable[[EntityStore], None]) -> None:
        self.namespace = namespace
        self.pump = pump
        self.operations: dict[str, Callable[[str, dict[str, Any]], Message]] = {
            "com.microsoft:renew-lock": self.renew_lock,
            "com.microsoft:peek-message": self.peek,
            "com.microsoft:schedule-message": self.schedule,
            "com.microsoft:cancel-scheduled-message": self.cancel,
            "com.microsoft:receive-by-sequence-number": self.receive_by_sequence,
            "com.microsoft:update-disposition": self.update_disposition,
            "com.microsoft:renew-session-lock": self.renew_session_lock,
            "com.microsoft:get-session-state": self.get_session_state,
            "com.microsoft:set-session-state": self.set_session_state,
            "com.microsoft:get-message-sessions": self.list_sessions,
            "com.microsoft:add-rule": lambda path, body: add_rule(self.namespace, path, body),
            "com.microsoft:remove-rule": lambda path, body: remove_rule(self.namespace, path, body),
            "com.microsoft:enumerate-rules": lambda path, body: enumerate_rules(
                self.namespace, path, body
            ),
        }

    def __call__(self, conn: AmqpConnection, node: str, request: Message) -> Message:
        properties: dict[Any, Any] = dict(request.properties or {})
        operation = str(properties.get("operation", ""))
        path = node.removesuffix("$management").rstrip("/")
        handler = self.operations.get(operation)
        if handler is None:
            return status_reply(
                501, f"Operation {operation} is not supported.", "amqp:not-implemented"
            )
        try:
            body = request.body if isinstance(request.body, dict) else {}
            return handler(path, {str(k): v for k, v in body.items()})
        except BrokerError as error:
            not_found = ("amqp:not-found", "com.microsoft:message-not-found")
            status = 404 if error.condition in not_found else 400
            return status_reply(status, error.description, error.condition)

    # --- locks and settlement ------------------------------------------------------------------
    def renew_lock(self, path: str, body: dict[str, Any]) -> Message:
        store, now = self.namespace.store(path), time.time()
        expirations = []
        for token in _items(body.get("lock-tokens")):
            renewed = store.renew(token, now)
            if renewed is None:
                return status_reply(
                    410, "The lock on the message has expired or was lost.", LOCK_LOST
                )
            expirations.append(_ms(renewed))
        return status_reply(200, "OK", body={"expirations": _array(Data.TIMESTAMP, expirations)})

    def update_disposition(self, path: str, body: dict[str, Any]) -> Message:
        store, now = self.namespace.store(path), time.time()
        status = str(body.get("disposition-status", ""))
        envelopes = [store.live_lock(token, now) for token in _items(body.get("lock-tokens"))]
        if any(e is None for e in envelopes):
            return status_reply(410, "The lock on the message has expired or was lost.", LOCK_LOST)
        for envelope in envelopes:
            assert envelope is not None
            if status == "suspended":
                store.remove(envelope)
                store.unlock(envelope)
                self.namespace.dead_letter(
                    store,
                    envelope,
                    optional_text(body.get("deadletter-reason")),
                    optional_text(body.get("deadletter-description")),
                )
            elif status == "defered":
                store.defer(envelope)
            else:
                apply_outcome(self.namespace, store, envelope, _OUTCOMES.get(status), False, None)
        self.pump(store)
        return status_reply(200, "OK")

    # --- reading -------------------------------------------------------------------------------
    def peek(self, path: str, body: dict[str, Any]) -> Message:
        store = self.namespace.store(path)
        start = int(body.get("from-sequence-number") or 0)
        count = int(body.get("message-count") or 1)
        session_id = body.get("session-id")
        found = []
        for envelope in store.ordered(start):
            if session_id is not None and envelope.session_id != session_id:
                continue
            found.append({"message": encode_for_reply(envelope)})
            if len(found) >= count:
                break
        if not found:
            return status_reply(204, "No messages")
        return status_reply(200, "OK", body={"messages": found})

    def receive_by_sequence(self, path: str, body: dict[str, Any]) -> Message:
        store, now = self.namespace.store(path), time.time()
        receive_and_delete = int(body.get("receiver-settle-mode") or 0) == 0
        session_id = body.get("session-id")
        # Every number is checked before any message is taken: a request that fails on one
        # missing number leaves the others deferred and unlocked, to be asked for again.
        envelopes = []
        for sequence in _items(body.get("sequence-numbers")):
            envelope = store.messages.get(int(sequence))
            if (
                envelope is None
                or envelope.state is not MessageState.DEFERRED
                or envelope.is_locked
                or (session_id is not None and envelope.session_id != session_id)
            ):
                return status_reply(
                    404,
                    f"Deferred message {sequence} not found.",
                    "com.microsoft:message-not-found",
                )
            envelopes.append(envelope)
        messages = []
        for envelope in envelopes:
            if receive_and_delete:
                store.remove(envelope)
                messages.append({"lock-token": uuid.uuid4(), "message": encode_for_reply(envelope)})
            else:
                token = store.lock(envelope, self, now)
                messages.append(
                    {"lock-token": token, "message": encode_for_reply(envelope, locked=True)}
                )
        return status_reply(200, "OK", body={"messages": messages})

    # --- scheduling ------------------------------------------------------------------------------
    def schedule(self, path: str, body: dict[str, Any]) -> Message:
        sequence_numbers: list[int] = []
        for item in _items(body.get("messages")):
            entry = {str(k): v for k, v in item.items()}
            message = parse_message(bytes(entry["message"]))
            when = message.annotations.get("x-opt-scheduled-enqueue-time")
            at = int(when) / 1000 if when is not None else time.time()
            sequence_numbers += self.namespace.send(path, [message], scheduled_at=at)
        return status_reply(
            200, "OK", body={"sequence-numbers": _array(Data.LONG, sequence_numbers)}
        )

    def cancel(self, path: str, body: dict[str, Any]) -> Message:
        self.namespace.cancel_scheduled(
            path, [int(s) for s in _items(body.get("sequence-numbers"))]
        )
        return status_reply(200, "OK")

    # --- sessions -----------------------------------------------------------------------------
    def _held_session(self, path: str, body: dict[str, Any]) -> tuple[EntityStore, str]:
        store, session_id = self.namespace.store(path), str(body.get("session-id"))
        info = store.sessions.get(session_id)
        if info is None or info.owner is None or info.locked_until < time.time():
            raise BrokerError(
                "com.microsoft:session-lock-lost", f"The lock on session '{session_id}' was lost."
            )
        return store, session_id

    def renew_session_lock(self, path: str, body: dict[str, Any]) -> Message:
        store, session_id = self._held_session(path, body)
        info = store.sessions[session_id]
        info.locked_until = time.time() + store.settings.lock_duration
        for envelope in store.locks.values():
            if envelope.session_id == session_id:
                envelope.locked_until = info.locked_until
        return status_reply(200, "OK", body={"expiration": _ms(info.locked_until)})

    def get_session_state(self, path: str, body: dict[str, Any]) -> Message:
        store, session_id = self._held_session(path, body)
        return status_reply(200, "OK", body={"session-state": store.sessions[session_id].state})

    def set_session_state(self, path: str, body: dict[str, Any]) -> Message:
        store, session_id = self._held_session(path, body)
        state = body.get("session-state")
        info = store.sessions[session_id]
        info.state = None if state is None else bytes(state)
        store.journal.session_changed(store, session_id)
        return status_reply(200, "OK")

    def list_sessions(self, path: str, body: dict[str, Any]) -> Message:
        store = self.namespace.store(path)
        skip, top = int(body.get("skip") or 0), int(body.get("top") or 100)
        ids = store.session_ids()[skip : skip + top]
        if not ids:
            return status_reply(204, "No sessions")
        payload = {"skip": skip, "sessions-ids": _array(Data.STRING, ids)}
        return status_reply(200, "OK", body=payload)
