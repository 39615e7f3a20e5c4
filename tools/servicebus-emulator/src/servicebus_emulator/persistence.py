"""Broker state kept in a data folder (``--data-dir``), so messages survive a restart.

One SQLite file (``servicebus.sqlite3``, WAL journal, ``synchronous=NORMAL``): a committed
transaction is in the WAL file before the client hears back, so it survives the emulator
being killed (SIGKILL); only an operating-system crash can lose the last ones. Sends are
committed before they are acknowledged; settlements, lock changes and timer work ride on
the commit of the next timer tick (50 ms), so a kill can at worst redeliver a message
settled in the last tick, never lose one.

What is kept: every message of every queue, subscription and dead-letter queue with its
state (active, deferred, scheduled with its enqueue time), delivery count, enqueue and
expiry times and lock expiry; messages scheduled on topics; each entity's next sequence
number; session state; the duplicate-detection history (the message ids each entity saw
within its window, as Azure keeps it durable: a sender that retries a send whose answer
a restart swallowed must not store the message twice). Not kept: rules added at run time
(entities and rules come from the config file).
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import time
from pathlib import Path

from .broker import Namespace, Sendable, Topic
from .codec import StoredMessage, parse_message
from .store import EntityStore, Envelope, MessageState

LOG = logging.getLogger("servicebus_emulator.persistence")
DATABASE_NAME = "servicebus.sqlite3"
LOCK_NAME = "emulator.lock"
PRUNE_EVERY_SECONDS = 60.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    entity TEXT NOT NULL,
    sequence_number INTEGER NOT NULL,
    body BLOB NOT NULL,
    enqueued_at REAL NOT NULL,
    expires_at REAL,
    state INTEGER NOT NULL,
    scheduled_at REAL,
    delivery_count INTEGER NOT NULL,
    locked_until REAL NOT NULL,
    PRIMARY KEY (entity, sequence_number)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS topic_schedule (
    topic TEXT NOT NULL,
    sequence_number INTEGER NOT NULL,
    due_at REAL NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (topic, sequence_number)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sequences (
    entity TEXT PRIMARY KEY,
    next_sequence INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS duplicate_history (
    entity TEXT NOT NULL,
    message_id TEXT NOT NULL,
    seen_at REAL NOT NULL,
    PRIMARY KEY (entity, message_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS session_states (
    entity TEXT NOT NULL,
    session_id TEXT NOT NULL,
    state BLOB,
    PRIMARY KEY (entity, session_id)
) WITHOUT ROWID;
"""

_UPDATE_STATE = (
    "UPDATE messages SET enqueued_at = ?, expires_at = ?, state = ?, scheduled_at = ?,"
    " delivery_count = ?, locked_until = ? WHERE entity = ? AND sequence_number = ?"
)
_INSERT = (
    "INSERT OR REPLACE INTO messages (enqueued_at, expires_at, state, scheduled_at,"
    " delivery_count, locked_until, entity, sequence_number, body)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_DELETE = "DELETE FROM messages WHERE entity = ? AND sequence_number = ?"


class PersistenceError(Exception):
    """The data folder cannot be used (not a folder, not writable, not an emulator file)."""


def _body(message: StoredMessage) -> bytes:
    """The message as the sender's sections (no broker annotations): parse_message reads it."""
    return message.encode(0, {})


def _state_row(path: str, envelope: Envelope) -> tuple[object, ...]:
    locked_until = envelope.locked_until if envelope.is_locked else 0.0
    return (
        envelope.enqueued_at,
        envelope.expires_at,
        int(envelope.state),
        envelope.scheduled_at,
        envelope.delivery_count,
        locked_until,
        path,
        envelope.sequence_number,
    )


class SqliteJournal:
    """The ``store.Journal`` of a data folder: collects what changed, writes it in one
    transaction per ``flush``."""

    def __init__(
        self, database: sqlite3.Connection, namespace: Namespace, folder_lock: int = -1
    ) -> None:
        self.database = database
        self.namespace = namespace
        self.folder_lock = folder_lock
        self._persisted: set[tuple[str, int]] = set()
        self._messages: dict[tuple[str, int], EntityStore] = {}
        self._sessions: dict[tuple[str, str], EntityStore] = {}
        self._topic_schedule: set[tuple[str, int]] = set()
        self._sequences: set[str] = set()
        self._seen_ids: list[tuple[str, str, float]] = []
        self._pruned_at = 0.0

    # --- store.Journal ---------------------------------------------------------------------
    def message_changed(self, store: EntityStore, sequence_number: int) -> None:
        self._messages[(store.path.lower(), sequence_number)] = store

    def session_changed(self, store: EntityStore, session_id: str) -> None:
        self._sessions[(store.path.lower(), session_id)] = store

    def topic_schedule_changed(self, topic: str, sequence_number: int) -> None:
        self._topic_schedule.add((topic, sequence_number))

    def sequence_advanced(self, entity: str) -> None:
        self._sequences.add(entity)

    def message_id_seen(self, entity: str, message_id: str, seen_at: float) -> None:
        self._seen_ids.append((entity, message_id, seen_at))

    def flush(self) -> None:
        """Write every change since the last flush in one committed transaction."""
        if not (
            self._messages
            or self._sessions
            or self._topic_schedule
            or self._sequences
            or self._seen_ids
        ):
            return
        with self.database:
            self._write_messages()
            self._write_topic_schedule()
            self._write_sequences()
            self._write_sessions()
            self._write_seen_ids()

    def close(self) -> None:
        self.flush()
        self.database.close()
        _release(self.folder_lock)

    # --- writing -----------------------------------------------------------------------------
    def _write_messages(self) -> None:
        inserts, updates, deletes = [], [], []
        for key, store in self._messages.items():
            envelope = store.messages.get(key[1])
            if envelope is None:
                if key in self._persisted:
                    self._persisted.discard(key)
                    deletes.append(key)
            elif key in self._persisted:
                updates.append(_state_row(key[0], envelope))
            else:
                self._persisted.add(key)
                inserts.append((*_state_row(key[0], envelope), _body(envelope.message)))
        self._messages.clear()
        self.database.executemany(_DELETE, deletes)
        self.database.executemany(_UPDATE_STATE, updates)
        self.database.executemany(_INSERT, inserts)

    def _write_topic_schedule(self) -> None:
        for topic_name, sequence in self._topic_schedule:
            entry = self.namespace.topics[topic_name].scheduled.get(sequence)
            if entry is None:
                self.database.execute(
                    "DELETE FROM topic_schedule WHERE topic = ? AND sequence_number = ?",
                    (topic_name, sequence),
                )
            else:
                self.database.execute(
                    "INSERT OR REPLACE INTO topic_schedule VALUES (?, ?, ?, ?)",
                    (topic_name, sequence, entry[0], _body(entry[1])),
                )
        self._topic_schedule.clear()

    def _write_sequences(self) -> None:
        rows = []
        for name in self._sequences:
            sendable = self.namespace.topics.get(name) or self.namespace.queues[name][0]
            rows.append((name, sendable.next_sequence))
        self._sequences.clear()
        self.database.executemany("INSERT OR REPLACE INTO sequences VALUES (?, ?)", rows)

    def _write_sessions(self) -> None:
        for (path, session_id), store in self._sessions.items():
            info = store.sessions.get(session_id)
            state = None if info is None else info.state
            self.database.execute(
                "INSERT OR REPLACE INTO session_states VALUES (?, ?, ?)", (path, session_id, state)
            )
        self._sessions.clear()

    def _write_seen_ids(self) -> None:
        self.database.executemany(
            "INSERT OR REPLACE INTO duplicate_history VALUES (?, ?, ?)", self._seen_ids
        )
        self._seen_ids.clear()
        if time.time() - self._pruned_at > PRUNE_EVERY_SECONDS:
            self._prune_duplicate_history()

    # --- reading back ------------------------------------------------------------------------
    def restore(self) -> int:
        """Load the saved state into the (fresh) namespace; returns the messages restored."""
        restored, unknown = 0, set()
        rows = self.database.execute(
            "SELECT entity, sequence_number, body, enqueued_at, expires_at, state,"
            " scheduled_at, delivery_count, locked_until FROM messages"
            " ORDER BY entity, sequence_number"
        )
        for entity, sequence, body, enqueued, expires, state, scheduled, count, until in rows:
            store = self.namespace.stores.get(entity)
            if store is None:
                unknown.add(entity)
                continue
            envelope = Envelope(
                sequence,
                parse_message(bytes(body)),
                enqueued,
                expires,
                MessageState(state),
                scheduled,
                delivery_count=count,
            )
            store.restore(envelope, until)
            self._persisted.add((entity, sequence))
            restored += 1
        for name, next_sequence in self.database.execute("SELECT * FROM sequences"):
            sendable = (
                self.namespace.topics.get(name) or self.namespace.queues.get(name, (None,))[0]
            )
            if sendable is not None:
                sendable.next_sequence = max(sendable.next_sequence, next_sequence)
        restored += self._restore_topic_schedule(unknown)
        self._restore_duplicate_history()
        for entity, session_id, state in self.database.execute("SELECT * FROM session_states"):
            store = self.namespace.stores.get(entity)
            if store is not None and state is not None:
                store.session(session_id).state = bytes(state)
        for entity in sorted(unknown):
            LOG.warning("data folder holds messages of %s, which the config no longer has", entity)
        return restored

    def _restore_duplicate_history(self) -> None:
        """Each entity's ids still within its window, oldest first (the order
        ``Sendable.is_duplicate`` expires them in)."""
        with self.database:
            self._prune_duplicate_history()
        for name, sendable in self._sendables().items():
            for message_id, seen_at in self.database.execute(
                "SELECT message_id, seen_at FROM duplicate_history WHERE entity = ?"
                " ORDER BY seen_at",
                (name,),
            ):
                sendable.seen_ids[message_id] = seen_at

    def _prune_duplicate_history(self) -> None:
        """Drop the ids that left their entity's window (the file stays the window's size)."""
        now = time.time()
        for name, sendable in self._sendables().items():
            self.database.execute(
                "DELETE FROM duplicate_history WHERE entity = ? AND seen_at < ?",
                (name, now - sendable.send_settings.duplicate_window),
            )
        self._pruned_at = now

    def _sendables(self) -> dict[str, Sendable]:
        sendables: dict[str, Sendable] = {
            name: queue for name, (queue, _) in self.namespace.queues.items()
        }
        sendables.update(self.namespace.topics)
        return sendables

    def _restore_topic_schedule(self, unknown: set[str]) -> int:
        restored = 0
        for name, sequence, due_at, body in self.database.execute(
            "SELECT topic, sequence_number, due_at, body FROM topic_schedule"
        ):
            target: Topic | None = self.namespace.topics.get(name)
            if target is None:
                unknown.add(name)
                continue
            target.scheduled[sequence] = (due_at, parse_message(bytes(body)))
            target.schedule_heap.append((due_at, sequence))
            restored += 1
        for topic in self.namespace.topics.values():
            topic.schedule_heap.sort()  # a sorted list is a valid heap
        return restored


def _lock_folder(data_dir: Path) -> int:
    """One emulator per data folder: a second one would restore the same messages and both
    would write them. The lock goes with the process, however it ends."""
    descriptor = os.open(data_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise PersistenceError(
            f"cannot use data folder {data_dir}: another emulator is running on it"
        ) from None
    return descriptor


def _release(descriptor: int) -> None:
    if descriptor >= 0:
        os.close(descriptor)


def open_journal(data_dir: Path, namespace: Namespace) -> SqliteJournal:
    """Open (or create) the data folder, restore what it holds into ``namespace`` and make
    every later change durable there."""
    folder_lock = -1
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        folder_lock = _lock_folder(data_dir)
        database = sqlite3.connect(data_dir / DATABASE_NAME)
        database.execute("PRAGMA journal_mode=WAL")
        database.execute("PRAGMA synchronous=NORMAL")
        database.executescript(SCHEMA)
    except (OSError, sqlite3.Error) as error:
        _release(folder_lock)
        raise PersistenceError(f"cannot use data folder {data_dir}: {error}") from error
    journal = SqliteJournal(database, namespace, folder_lock)
    try:
        restored = journal.restore()
    except (sqlite3.Error, ValueError) as error:
        database.close()
        _release(folder_lock)
        raise PersistenceError(f"cannot read {data_dir / DATABASE_NAME}: {error}") from error
    namespace.use_journal(journal)
    LOG.info("data folder %s: %d message(s) restored", data_dir, restored)
    return journal


__all__ = ["DATABASE_NAME", "PersistenceError", "SqliteJournal", "open_journal"]
