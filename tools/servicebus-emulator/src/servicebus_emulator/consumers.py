"""Receivers: delivering messages under credit, settlement over the link, and sessions.

A consumer is one receive link bound to one entity (and, for session entities, to the
one session it holds). ``pump`` runs whenever an entity gains available messages.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from proton import Condition, Data, Disposition, Link, symbol, timestamp

from .broker import BrokerError, Namespace
from .replies import SESSION_WAIT_TIMED_OUT, error_condition, refuse
from .store import EntityStore, Envelope

if TYPE_CHECKING:
    from .amqp_server import AmqpConnection

LOG = logging.getLogger("servicebus_emulator.consumers")
SESSION_FILTER = symbol("com.microsoft:session-filter")
TIMEOUT_PROPERTY = symbol("com.microsoft:timeout")
LOCKED_UNTIL_UTC = symbol("com.microsoft:locked-until-utc")
DOTNET_EPOCH_TICKS = 621355968000000000
DEFAULT_SESSION_WAIT_S = 60.0


def dotnet_ticks(seconds: float) -> int:
    return DOTNET_EPOCH_TICKS + int(seconds * 10_000_000)


@dataclass(eq=False)
class Consumer:
    """One receive link: where it reads, how it settles, which session it holds."""

    conn: AmqpConnection
    link: Link
    store: EntityStore
    receive_and_delete: bool
    session_id: str | None = None
    wait_deadline: float | None = None


class ConsumerRegistry:
    """All consumers, by entity, plus session receivers still waiting for a session."""

    def __init__(self, namespace: Namespace) -> None:
        self.namespace = namespace
        self.by_store: dict[str, list[Consumer]] = {}
        self.waiting: list[Consumer] = []

    # --- attach / detach ------------------------------------------------------------------
    def attach(self, conn: AmqpConnection, link: Link, address: str) -> None:
        store = self.namespace.store(address)
        settled = link.remote_snd_settle_mode == Link.SND_SETTLED
        consumer = Consumer(conn, link, store, receive_and_delete=settled)
        link.consumer = consumer
        filters = _filters(link)
        if store.settings.requires_session:
            requested = filters.get(SESSION_FILTER)
            if requested is None:
                props = link.remote_properties or {}
                wait_ms = props.get(TIMEOUT_PROPERTY)
                wait = DEFAULT_SESSION_WAIT_S if not wait_ms else int(wait_ms) / 1000
                consumer.wait_deadline = time.time() + wait
                self.waiting.append(consumer)
                self._offer_sessions(store)
                return
            self._lock_session(consumer, str(requested))
        elif SESSION_FILTER in filters:
            raise BrokerError("amqp:not-allowed", f"'{store.path}' is not session-enabled.")
        link.open()
        self.by_store.setdefault(store.path, []).append(consumer)
        LOG.info("receiver attached to %s", store.path)

    def _lock_session(self, consumer: Consumer, session_id: str) -> None:
        now = time.time()
        info = consumer.store.session(session_id)
        if info.owner is not None and info.locked_until > now:
            raise BrokerError(
                "com.microsoft:session-cannot-be-locked",
                f"The session '{session_id}' is locked by another receiver.",
            )
        info.owner, info.locked_until = consumer, now + consumer.store.settings.lock_duration
        consumer.session_id = session_id
        link = consumer.link
        link.source.filter.clear()
        link.source.filter.put_map()
        link.source.filter.enter()
        link.source.filter.put_symbol(SESSION_FILTER)
        link.source.filter.put_string(session_id)
        link.source.filter.exit()
        link.properties = {LOCKED_UNTIL_UTC: dotnet_ticks(info.locked_until)}

    def _offer_sessions(self, store: EntityStore) -> None:
        for consumer in [c for c in self.waiting if c.store is store]:
            session_id = store.free_session_with_messages(time.time())
            if session_id is None:
                return
            self.waiting.remove(consumer)
            self._lock_session(consumer, session_id)
            consumer.link.open()
            self.by_store.setdefault(store.path, []).append(consumer)
            self.serve(consumer)
            consumer.conn.flush()

    def detach(self, consumer: Consumer) -> None:
        if consumer in self.waiting:
            self.waiting.remove(consumer)
        consumers = self.by_store.get(consumer.store.path, [])
        if consumer in consumers:
            consumers.remove(consumer)
        if consumer.session_id is not None:
            info = consumer.store.sessions.get(consumer.session_id)
            if info is not None and info.owner is consumer:
                consumer.store.release_session(
                    consumer.session_id, self.namespace.dead_letter_sink(consumer.store)
                )
                self.pump(consumer.store)
        consumer.link.consumer = None

    def connection_closed(self, conn: AmqpConnection) -> None:
        for consumer in [c for group in self.by_store.values() for c in group] + list(self.waiting):
            if consumer.conn is conn:
                self.detach(consumer)

    # --- delivering ---------------------------------------------------------------------------
    def pump(self, store: EntityStore) -> None:
        if store.settings.requires_session and self.waiting:
            self._offer_sessions(store)
        touched = set()
        for consumer in list(self.by_store.get(store.path, [])):
            if self.serve(consumer, flush=False):
                touched.add(consumer.conn)
        for conn in touched:
            conn.flush()

    def serve(self, consumer: Consumer, flush: bool = True) -> bool:
        link, store = consumer.link, consumer.store
        sent = 0
        while link.credit > 0 and not (link.state & Link.LOCAL_CLOSED):
            envelope = store.take(consumer.session_id)
            if envelope is None:
                break
            if envelope.expires_at is not None and envelope.expires_at <= time.time():
                store.expire(envelope, self.namespace.dead_letter_sink(store))
                continue
            self._deliver(consumer, envelope)
            sent += 1
        if link.drain_mode and link.credit > 0:
            link.drained()
            sent += 1
        if sent and flush:
            consumer.conn.flush()
        return sent > 0

    def _deliver(self, consumer: Consumer, envelope: Envelope) -> None:
        store, link = consumer.store, consumer.link
        annotations: dict[str, Any] = {
            "x-opt-sequence-number": envelope.sequence_number,
            "x-opt-enqueued-time": timestamp(int(envelope.enqueued_at * 1000)),
            "x-opt-message-state": int(envelope.state),
        }
        if consumer.receive_and_delete:
            store.remove(envelope)
            token = uuid.uuid4()
        else:
            token = store.lock(envelope, consumer, time.time())
            annotations["x-opt-locked-until"] = timestamp(int(envelope.locked_until * 1000))
        payload = envelope.message.encode(envelope.delivery_count, annotations)
        tag: Any = token.bytes_le  # binary tag; proton's str annotation is too narrow
        delivery = link.delivery(tag)
        delivery.lock_token = token
        delivery.store = None if consumer.receive_and_delete else store
        link.send(payload)
        link.advance()
        if consumer.receive_and_delete:
            delivery.settle()

    # --- settlement ------------------------------------------------------------------------------
    def settle(self, delivery: Any) -> None:
        """Apply the client's outcome; echo it unless the client already settled."""
        store: EntityStore = delivery.store
        delivery.store = None
        token: uuid.UUID | None = getattr(delivery, "lock_token", None)
        outcome = delivery.remote_state
        envelope = store.live_lock(token, time.time()) if token else None
        echo = not delivery.settled  # proton: settled means settled by the remote peer
        if outcome == Disposition.RELEASED and envelope is not None:
            store.return_unconsumed(envelope)
        elif envelope is None:
            if echo:
                delivery.local.condition = error_condition(
                    "com.microsoft:message-lock-lost",
                    "The lock on the message has expired or was lost.",
                )
                delivery.update(Disposition.REJECTED)
            delivery.settle()
            return
        else:
            error = delivery.remote.condition
            undeliverable = delivery.remote.undeliverable
            apply_outcome(self.namespace, store, envelope, outcome, undeliverable, error)
        if echo:
            echo_outcome(delivery, outcome)
        else:
            delivery.settle()
        if outcome in (Disposition.MODIFIED, Disposition.RELEASED):  # back in the queue
            self.pump(store)

    def tick(self, now: float) -> None:
        """Session waits that timed out, and session locks that expired."""
        for consumer in [
            c for c in self.waiting if c.wait_deadline is not None and c.wait_deadline <= now
        ]:
            self.waiting.remove(consumer)
            refuse(
                consumer.link, SESSION_WAIT_TIMED_OUT, "No session available within the wait time."
            )
            consumer.conn.flush()
        for consumers in self.by_store.values():
            for consumer in list(consumers):
                if consumer.session_id is None:
                    continue
                info = consumer.store.sessions.get(consumer.session_id)
                if info is not None and info.owner is consumer and info.locked_until <= now:
                    self.detach(consumer)
                    consumer.link.condition = error_condition(
                        "com.microsoft:session-lock-lost", "The session lock has expired."
                    )
                    consumer.link.close()
                    consumer.conn.flush()


def apply_outcome(
    namespace: Namespace,
    store: EntityStore,
    envelope: Envelope,
    outcome: Any,
    undeliverable: bool,
    error: Condition | None,
) -> None:
    """Complete, abandon, defer or dead-letter one locked message."""
    if outcome == Disposition.ACCEPTED:
        store.remove(envelope)
    elif outcome == Disposition.MODIFIED and undeliverable:
        store.defer(envelope)
    elif outcome == Disposition.MODIFIED:
        store.release(envelope, namespace.dead_letter_sink(store))
    elif outcome == Disposition.REJECTED:
        raw_info: Any = error.info if error is not None else None
        info = {str(k): v for k, v in dict(raw_info or {}).items()}
        store.remove(envelope)
        store.unlock(envelope)
        namespace.dead_letter(
            store,
            envelope,
            optional_text(info.get("DeadLetterReason")),
            optional_text(info.get("DeadLetterErrorDescription")),
        )


def optional_text(value: Any) -> str | None:
    """A dead-letter reason or description as text; AMQP null (or absent) stays None."""
    return None if value is None else str(value)


def echo_outcome(delivery: Any, outcome: Any) -> None:
    """Answer with the same outcome, settled (a rejected echo carries no error)."""
    if outcome == Disposition.MODIFIED:
        delivery.local.failed = delivery.remote.failed
        delivery.local.undeliverable = delivery.remote.undeliverable
    delivery.update(outcome)
    delivery.settle()


def _filters(link: Link) -> dict[Any, Any]:
    data: Data | None = link.remote_source.filter if link.remote_source else None
    if data is None:
        return {}
    data.rewind()
    if not data.next():
        return {}
    value: Any = data.get_object()
    return dict(value) if isinstance(value, dict) else {}


__all__ = ["Consumer", "ConsumerRegistry"]
