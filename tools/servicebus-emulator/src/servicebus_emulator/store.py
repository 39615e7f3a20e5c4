"""Message state of one receivable entity (a queue, a subscription or a dead-letter queue).

All methods run on the broker's single event-loop thread. Ordering uses heaps of
sequence numbers with lazy deletion, so availability, lock expiry, scheduling and TTL
cost O(log n) per message and never scan the whole entity.
"""

from __future__ import annotations

import heapq
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Protocol

from .codec import StoredMessage
from .config import EntitySettings


class MessageState(IntEnum):
    """Values of the ``x-opt-message-state`` annotation."""

    ACTIVE = 0
    DEFERRED = 1
    SCHEDULED = 2


@dataclass
class Envelope:
    """Broker-side state of one message inside one entity."""

    sequence_number: int
    message: StoredMessage
    enqueued_at: float
    expires_at: float | None
    state: MessageState = MessageState.ACTIVE
    scheduled_at: float | None = None
    delivery_count: int = 0
    lock_token: uuid.UUID | None = None
    locked_until: float = 0.0
    lock_owner: object | None = None
    # Its place in the entity's order (``EntityStore._make_available``): its sequence
    # number, or, for a scheduled message, the tail of the entity when it was activated.
    position: tuple[int, int] | None = None

    @property
    def session_id(self) -> str | None:
        return self.message.session_id

    @property
    def is_locked(self) -> bool:
        return self.lock_token is not None


@dataclass
class SessionInfo:
    """A message session: who holds it, until when, and its opaque state."""

    owner: object | None = None
    locked_until: float = 0.0
    state: bytes | None = None


DeadLetterSink = Callable[["Envelope", str, str], None]


class Journal(Protocol):
    """Where changes of broker state go to be made durable (``persistence.SqliteJournal``).

    Calls only say *what* changed; the journal reads the current state when it writes, so
    several changes of one message between two writes cost one write.
    """

    def message_changed(self, store: EntityStore, sequence_number: int) -> None: ...

    def session_changed(self, store: EntityStore, session_id: str) -> None: ...

    def topic_schedule_changed(self, topic: str, sequence_number: int) -> None: ...

    def sequence_advanced(self, entity: str) -> None: ...

    def message_id_seen(self, entity: str, message_id: str, seen_at: float) -> None: ...

    def flush(self) -> None: ...


class NoJournal:
    """Nothing is persisted (no data folder): every call is free."""

    def message_changed(self, store: EntityStore, sequence_number: int) -> None:
        pass

    def session_changed(self, store: EntityStore, session_id: str) -> None:
        pass

    def topic_schedule_changed(self, topic: str, sequence_number: int) -> None:
        pass

    def sequence_advanced(self, entity: str) -> None:
        pass

    def message_id_seen(self, entity: str, message_id: str, seen_at: float) -> None:
        pass

    def flush(self) -> None:
        pass


NO_JOURNAL = NoJournal()


@dataclass
class EntityStore:
    """Messages, locks and sessions of one receivable entity."""

    path: str
    settings: EntitySettings
    messages: dict[int, Envelope] = field(default_factory=dict)
    locks: dict[uuid.UUID, Envelope] = field(default_factory=dict)
    sessions: dict[str, SessionInfo] = field(default_factory=dict)
    _available: dict[str | None, list[tuple[tuple[int, int], int]]] = field(default_factory=dict)
    _lock_heap: list[tuple[float, int]] = field(default_factory=list)
    _schedule_heap: list[tuple[float, int]] = field(default_factory=list)
    _expiry_heap: list[tuple[float, int]] = field(default_factory=list)
    _last_sequence: int = 0  # the highest sequence number this entity holds or held
    _activations: int = 0  # scheduled messages activated so far (their order at the tail)
    journal: Journal = NO_JOURNAL

    # --- enqueue -------------------------------------------------------------------
    def add(self, envelope: Envelope) -> None:
        self.messages[envelope.sequence_number] = envelope
        self._last_sequence = max(self._last_sequence, envelope.sequence_number)
        self.journal.message_changed(self, envelope.sequence_number)
        if envelope.expires_at is not None:
            heapq.heappush(self._expiry_heap, (envelope.expires_at, envelope.sequence_number))
        if envelope.state is MessageState.SCHEDULED and envelope.scheduled_at is not None:
            heapq.heappush(self._schedule_heap, (envelope.scheduled_at, envelope.sequence_number))
        else:
            self._make_available(envelope)

    def restore(self, envelope: Envelope, locked_until: float) -> None:
        """Put back a message read from the data folder, in the state it was saved in.

        A message that was locked stays unavailable until its lock would have expired
        (no one can settle it: its holder's link died with the broker), then comes back as
        after any lock loss, its delivery count kept and counted up. A lock that expired
        while the broker was down is lost on the first tick, the same way.
        """
        self.messages[envelope.sequence_number] = envelope
        self._last_sequence = max(self._last_sequence, envelope.sequence_number)
        if envelope.expires_at is not None:
            heapq.heappush(self._expiry_heap, (envelope.expires_at, envelope.sequence_number))
        if envelope.state is MessageState.SCHEDULED and envelope.scheduled_at is not None:
            heapq.heappush(self._schedule_heap, (envelope.scheduled_at, envelope.sequence_number))
            return
        if envelope.state is MessageState.ACTIVE:
            self._make_available(envelope)
        if locked_until > 0.0:
            token = uuid.uuid4()
            envelope.lock_token, envelope.lock_owner, envelope.locked_until = (
                token,
                None,
                locked_until,
            )
            self.locks[token] = envelope
            heapq.heappush(self._lock_heap, (locked_until, envelope.sequence_number))

    def _make_available(self, envelope: Envelope) -> None:
        """Available in its place: its sequence number, kept through abandons and lost
        locks (a message given back is delivered again before the ones behind it)."""
        envelope.state = MessageState.ACTIVE
        key = envelope.session_id if self.settings.requires_session else None
        position = envelope.position or (envelope.sequence_number, 0)
        heapq.heappush(self._available.setdefault(key, []), (position, envelope.sequence_number))

    def _is_available(self, sequence_number: int) -> Envelope | None:
        envelope = self.messages.get(sequence_number)
        if envelope is None or envelope.is_locked or envelope.state is not MessageState.ACTIVE:
            return None
        return envelope

    # --- taking messages -------------------------------------------------------------
    def take(self, session_id: str | None = None) -> Envelope | None:
        """The oldest available message (of one session for session entities)."""
        heap = self._available.get(session_id)
        while heap:
            envelope = self._is_available(heap[0][1])
            heapq.heappop(heap)
            if envelope is not None:
                return envelope
        return None

    def has_available(self, session_id: str | None = None) -> bool:
        heap = self._available.get(session_id)
        while heap:
            if self._is_available(heap[0][1]) is not None:
                return True
            heapq.heappop(heap)
        return False

    def lock(self, envelope: Envelope, owner: object, now: float) -> uuid.UUID:
        token = uuid.uuid4()
        envelope.lock_token = token
        envelope.lock_owner = owner
        session = (
            self.sessions.get(envelope.session_id or "") if self.settings.requires_session else None
        )
        envelope.locked_until = (
            session.locked_until if session else now + self.settings.lock_duration
        )
        self.locks[token] = envelope
        if session is None:
            heapq.heappush(self._lock_heap, (envelope.locked_until, envelope.sequence_number))
        self.journal.message_changed(self, envelope.sequence_number)
        return token

    def remove(self, envelope: Envelope) -> None:
        self.messages.pop(envelope.sequence_number, None)
        self.journal.message_changed(self, envelope.sequence_number)
        if envelope.lock_token is not None:
            self.locks.pop(envelope.lock_token, None)
            envelope.lock_token = None

    # --- settlement --------------------------------------------------------------------
    def unlock(self, envelope: Envelope) -> None:
        if envelope.lock_token is not None:
            self.locks.pop(envelope.lock_token, None)
        envelope.lock_token, envelope.lock_owner, envelope.locked_until = None, None, 0.0
        self.journal.message_changed(self, envelope.sequence_number)

    def release(self, envelope: Envelope, dead_letter: DeadLetterSink) -> None:
        """Abandon or lock loss: count the failed delivery, then retry or dead-letter."""
        self.unlock(envelope)
        envelope.delivery_count += 1  # unlock already told the journal: it reads this value
        if envelope.state is MessageState.DEFERRED:
            return
        if envelope.delivery_count >= self.settings.max_delivery_count:
            self.remove(envelope)
            description = (
                f"Message could not be consumed after {envelope.delivery_count} delivery attempts."
            )
            dead_letter(envelope, "MaxDeliveryCountExceeded", description)
        else:
            self._make_available(envelope)

    def return_unconsumed(self, envelope: Envelope) -> None:
        """Released (e.g. prefetched but unread at close): not a failed delivery."""
        self.unlock(envelope)
        if envelope.state is MessageState.ACTIVE:
            self._make_available(envelope)

    def defer(self, envelope: Envelope) -> None:
        envelope.state = MessageState.DEFERRED
        self.unlock(envelope)

    def renew(self, token: uuid.UUID, now: float) -> float | None:
        envelope = self.locks.get(token)
        if envelope is None or envelope.locked_until < now:
            return None
        envelope.locked_until = now + self.settings.lock_duration
        heapq.heappush(self._lock_heap, (envelope.locked_until, envelope.sequence_number))
        self.journal.message_changed(self, envelope.sequence_number)
        return envelope.locked_until

    def live_lock(self, token: uuid.UUID, now: float) -> Envelope | None:
        """The message a lock token still holds; session messages live by the session lock."""
        envelope = self.locks.get(token)
        if envelope is None:
            return None
        if self.settings.requires_session:
            info = self.sessions.get(envelope.session_id or "")
            alive = (
                info is not None and info.owner is envelope.lock_owner and info.locked_until >= now
            )
            return envelope if alive else None
        return None if envelope.locked_until < now else envelope

    # --- time-driven transitions ---------------------------------------------------------
    def tick(self, now: float, dead_letter: DeadLetterSink) -> bool:
        """Apply lock expiry, due schedules and TTL expiry; True if anything became available."""
        changed = False
        while self._lock_heap and self._lock_heap[0][0] <= now:
            _, seq = heapq.heappop(self._lock_heap)
            envelope = self.messages.get(seq)
            if envelope is not None and envelope.is_locked and envelope.locked_until <= now:
                self.release(envelope, dead_letter)
                changed = True
        while self._schedule_heap and self._schedule_heap[0][0] <= now:
            _, seq = heapq.heappop(self._schedule_heap)
            envelope = self.messages.get(seq)
            if envelope is not None and envelope.state is MessageState.SCHEDULED:
                # As Service Bus does, an activated message joins the tail of the entity,
                # behind every message sent before it became due, whatever its sequence
                # number (assigned when it was scheduled).
                envelope.enqueued_at = time.time()
                self._activations += 1
                envelope.position = (self._last_sequence, self._activations)
                self._make_available(envelope)
                self.journal.message_changed(self, envelope.sequence_number)
                changed = True
        while self._expiry_heap and self._expiry_heap[0][0] <= now:
            _, seq = heapq.heappop(self._expiry_heap)
            envelope = self.messages.get(seq)
            if envelope is None or envelope.is_locked or envelope.state is MessageState.SCHEDULED:
                if envelope is not None and envelope.expires_at is not None:
                    retry_at = max(envelope.locked_until, envelope.scheduled_at or 0.0, now) + 0.05
                    heapq.heappush(self._expiry_heap, (retry_at, seq))
                continue
            self.expire(envelope, dead_letter)
        return changed

    def expire(self, envelope: Envelope, dead_letter: DeadLetterSink) -> None:
        self.remove(envelope)
        if self.settings.dead_letter_on_expiration:
            dead_letter(
                envelope, "TTLExpiredException", "The message expired and was dead lettered."
            )

    def is_scheduled(self, sequence_number: int) -> bool:
        envelope = self.messages.get(sequence_number)
        return envelope is not None and envelope.state is MessageState.SCHEDULED

    def cancel_scheduled(self, sequence_number: int) -> bool:
        envelope = self.messages.get(sequence_number)
        if envelope is None or envelope.state is not MessageState.SCHEDULED:
            return False
        self.remove(envelope)
        return True

    # --- sessions ------------------------------------------------------------------------
    def session(self, session_id: str) -> SessionInfo:
        return self.sessions.setdefault(session_id, SessionInfo())

    def free_session_with_messages(self, now: float) -> str | None:
        """The session whose oldest available message is oldest, among unlocked ones."""
        best: tuple[tuple[tuple[int, int], int], str] | None = None  # (place, sequence), id
        for session_id, heap in self._available.items():
            if session_id is None or not self.has_available(session_id):
                continue
            info = self.sessions.get(session_id)
            if info is not None and info.owner is not None and info.locked_until > now:
                continue
            if best is None or heap[0] < best[0]:
                best = (heap[0], session_id)
        return None if best is None else best[1]

    def release_session(self, session_id: str, dead_letter: DeadLetterSink) -> None:
        """The holder let go (or lost the lock): its unsettled messages are abandoned."""
        info = self.sessions.get(session_id)
        if info is None:
            return
        owner = info.owner
        info.owner, info.locked_until = None, 0.0
        for envelope in [e for e in self.locks.values() if e.session_id == session_id]:
            if envelope.lock_owner is owner or owner is None:
                self.release(envelope, dead_letter)

    def session_ids(self) -> list[str]:
        with_messages = {e.session_id for e in self.messages.values() if e.session_id}
        with_state = {sid for sid, info in self.sessions.items() if info.state is not None}
        return sorted(with_messages | with_state)

    # --- reading -----------------------------------------------------------------------
    def ordered(self, from_sequence: int = 0) -> Iterator[Envelope]:
        for seq in sorted(s for s in self.messages if s >= from_sequence):
            yield self.messages[seq]

    def counts(self) -> dict[str, int | float | None]:
        active = deferred = scheduled = 0
        oldest: float | None = None
        for envelope in self.messages.values():
            if envelope.state is MessageState.DEFERRED:
                deferred += 1
            elif envelope.state is MessageState.SCHEDULED:
                scheduled += 1
            else:
                active += 1
                if oldest is None or envelope.enqueued_at < oldest:
                    oldest = envelope.enqueued_at
        return {
            "active_message_count": active,
            "deferred_message_count": deferred,
            "scheduled_message_count": scheduled,
            "oldest_active_enqueued_at": oldest,
        }
