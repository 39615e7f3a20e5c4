"""Service Bus triggers: peek-lock receivers per function, as the extension 5.x runs them.

Batch functions (``cardinality="many"``) follow the receive loop of the Service Bus
extension 5.x (``ServiceBusListener.RunBatchReceiveLoopAsync``): one loop per function,
so one batch invocation at a time per host instance (dynamic concurrency does not apply),
and no receive while it runs. Each receive asks for ``maxMessageBatchSize`` messages and
returns once the first has arrived and 20 ms more have passed (the .NET SDK's AMQP batch
wait), or when it has them all. With ``minMessageBatchSize`` 1 what a receive returns is
dispatched at once. Above 1, received messages are held (``PendingBatch``): once the
minimum is there the oldest ``maxMessageBatchSize`` go at once; otherwise a partial batch
goes ``maxBatchWaitTime`` after the receive that first left messages waiting (later
arrivals do not restart that wait), when a session ends, and when the listener stops.
Session-enabled batch functions, as in that loop, hold ONE session at a time per listener
(``maxConcurrentSessions`` does not apply to batches): the loop accepts the next available
session, receives from it until a receive waits ``sessionIdleTimeout`` with nothing (then
what is held goes and the session is closed) or the function releases it, then accepts the
next one. The extension does not renew batch session locks either.

Single-message functions without sessions get up to ``maxConcurrentCalls`` messages
dispatched concurrently, one invocation each.

Single-message session functions follow the SDK's ``ServiceBusSessionProcessor``, which
the extension uses for them (``SessionReceiverManager``): ``maxConcurrentSessions``
receivers (default 8), each on a thread of its own, accept the next available session,
then receive one message per receive call (prefetch ``prefetchCount``, 0 by default) and
invoke the function for it before the next receive, so the messages of a session are
processed one at a time in order (``maxConcurrentCallsPerSession`` 1, the default and the
only value supported here) and a message the function abandons, or whose invocation
fails, is received again before the session's next one. When a receive has waited
``sessionIdleTimeout`` (else ``clientRetryOptions.tryTimeout``, 60 s) with nothing, or the
function called ``release_session``, the receiver closes the session and accepts the next
available one. While a session is held its lock is renewed automatically, as the
processor does, from its acceptance until ``maxAutoLockRenewalDuration`` (5 min) has
passed (``SessionLockRenewal``; at the SDK's time: the lock's remaining time less half of
it, at most 10 s before expiry). Receives and session accepts wait at most 1 s and 2 s per
call here (the SDK waits the whole idle timeout, and tryTimeout to accept), so stopping
ends every session receiver within about 3 s (after the invocation running, if any). A
receiver that loses its session lock (renewal over, or failed) drops the session, whose
messages return, and accepts the next available one, as the processor does.

Trigger data is what the Functions host sends (servicebus_binding.py): model binding data
for SDK types, body and metadata otherwise. While an invocation runs, its messages (and
session) are registered with the Settlement service, so ``ServiceBusMessageActions`` in
the worker settles them through this receiver. Settlement follows extension 5.x: every
message the function did not settle is abandoned after an exception, and, with
``autoCompleteMessages`` (binding value, else host.json, default true), completed after
success; with false, messages left unsettled by a successful invocation return when their
locks expire. Not done here: automatic renewal of message locks for single-message
functions without sessions (``maxAutoLockRenewalDuration``; the extension does not renew
locks of batches either) and message-count based scaling.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from azure.servicebus import (
    NEXT_AVAILABLE_SESSION,
    ServiceBusClient,
    ServiceBusReceivedMessage,
    ServiceBusReceiveMode,
    ServiceBusReceiver,
)
from azure.servicebus.exceptions import SessionLockLostError

from functions_host.config import HostConfigError, ServiceBusOptions
from functions_host.functions import FunctionSpec
from functions_host.invocation import HostStoppingError, Invoker
from functions_host.protos import messages as rpc
from functions_host.servicebus_binding import (
    message_body,
    message_trigger_metadata,
    sdk_trigger_data,
)
from functions_host.settlement import HeldSession, MessageLocks

log = logging.getLogger("host.servicebus")
# How long a receive waits for its first message. The extension waits ClientRetryOptions
# TryTimeout (60 s); the wait ends when a message arrives, so its length only bounds how
# soon the loop sees a stop. A longer wait (sessionIdleTimeout) is made of such receives.
POLL_S = 1.0
# How long accepting the next available session waits (the SDK waits TryTimeout, 60 s, and
# tries again): bounds how soon a session receiver with no session sees a stop.
ACCEPT_WAIT_S = 2.0
# The SDK's session lock renewal (ReceiverManager.CalculateRenewDelay): renew when the
# lock has half its remaining time left, at most MAX_RENEW_BUFFER_S before it expires, and
# at once when less than RENEW_AT_ONCE_S remains.
MAX_RENEW_BUFFER_S = 10.0
RENEW_AT_ONCE_S = 0.4
# After the first message, how long a receive keeps collecting: the .NET SDK's AmqpReceiver
# passes a 20 ms batch wait to its AMQP link. The Python SDK would keep going for 200 ms.
BATCH_WINDOW_S = 0.02
# The Python SDK checks its receive deadline between socket reads, which block for up to
# its socket timeout (0.2 s by default): the window above needs a read timeout as short.
SOCKET_TIMEOUT_S = 0.02


@contextmanager
def accepting(receiver: ServiceBusReceiver) -> Iterator[ServiceBusReceiver]:
    """A next-available session receiver opened with one try, then closed.

    A wait that finds no session ends with the broker refusing the link (``com.microsoft:
    timeout``), which the SDK would try again ``retry_total`` times (about four accept waits
    in all, its open having no deadline); the listener's loop is the retry here, and a
    stop must not wait for the SDK's. The receiver's later operations keep their retries.
    """
    config = receiver._config  # the SDK's per-handler retry policy, read at each operation
    retries = config.retry_total
    config.retry_total = 0
    try:
        receiver.__enter__()
    finally:
        config.retry_total = retries
    try:
        yield receiver
    finally:
        receiver.close()


def open_client(connection: str) -> ServiceBusClient:
    """The client for a binding's ``connection`` app setting (string or identity-based)."""
    value = os.environ.get(connection)
    if value:
        return ServiceBusClient.from_connection_string(value)
    namespace = os.environ.get(f"{connection}__fullyQualifiedNamespace")
    if namespace:
        from azure.identity import DefaultAzureCredential

        return ServiceBusClient(namespace, DefaultAzureCredential())
    raise RuntimeError(
        f"app setting {connection!r} (or {connection}__fullyQualifiedNamespace) is not set"
    )


class PendingBatch[Message]:
    """Received messages of a batch function that wait for ``minMessageBatchSize``.

    The extension's rule (ServiceBusMessageManager and the cache monitor of
    ServiceBusListener): messages join in arrival order; when the minimum is held the
    oldest ``max_size`` are taken at once. When messages are left waiting, one wait of
    ``wait_s`` starts (``arm``); more messages do not restart it, a dispatch cancels it.
    When it has passed (``due``) everything held goes as a partial batch. No I/O here
    (and no SDK: ``Message`` is the SDK's received message, anything in the unit tests).
    """

    def __init__(self, max_size: int, min_size: int, wait_s: float) -> None:
        self.max_size = max(1, max_size)
        self.min_size = min_size
        self.wait_s = wait_s
        self.deadline: float | None = None
        self._messages: list[Message] = []

    def __len__(self) -> int:
        return len(self._messages)

    def add(self, received: list[Message]) -> list[Message]:
        """The batch to dispatch now (the minimum is reached), else [] and the messages wait."""
        self._messages.extend(received)
        if len(self._messages) < self.min_size:
            return []
        return self.take()

    def take(self) -> list[Message]:
        """The oldest messages, at most ``max_size``, even fewer than the minimum."""
        self.deadline = None
        batch, self._messages = self._messages[: self.max_size], self._messages[self.max_size :]
        return batch

    def arm(self, now: float) -> None:
        """Start the wait for messages left behind, unless one is already running."""
        if self._messages and self.deadline is None:
            self.deadline = now + self.wait_s

    def due(self, now: float) -> bool:
        return self.deadline is not None and now >= self.deadline

    def receive_wait(self, now: float, longest: float) -> float:
        """How long the next receive may wait for a first message: not past the deadline."""
        if self.deadline is None:
            return longest
        return max(0.001, min(longest, self.deadline - now))


@dataclass
class _Held:
    """The open receiver of a batch function and the messages it holds for a batch."""

    receiver: ServiceBusReceiver
    lock: threading.Lock
    pending: PendingBatch[ServiceBusReceivedMessage]


def renew_delay(remaining_s: float) -> float:
    """How long to wait before renewing a lock that has ``remaining_s`` left (the SDK's
    CalculateRenewDelay)."""
    if remaining_s < RENEW_AT_ONCE_S:
        return 0.0
    return remaining_s - min(remaining_s / 2, MAX_RENEW_BUFFER_S)


class SessionLockRenewal:
    """Renews the lock of a held session in the background, as the SDK's session processor
    does: from acceptance until ``max_duration_s`` has passed (None: no limit), then no
    more (the lock then expires unless the function renews it). Renewals go through the
    receiver under ``lock``, as settlement does; a failed renewal is retried while the lock
    has not expired.
    """

    def __init__(
        self,
        receiver: ServiceBusReceiver,
        lock: threading.Lock,
        max_duration_s: float | None,
        label: str,
    ) -> None:
        self.renewals = 0
        self._receiver = receiver
        self._lock = lock
        self._deadline = None if max_duration_s is None else time.monotonic() + max_duration_s
        self._label = label
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"renew-{label}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()

    def _remaining_s(self) -> float:
        locked_until = self._receiver.session.locked_until_utc
        if locked_until is None:
            return 0.0
        if locked_until.tzinfo is None:
            locked_until = locked_until.replace(tzinfo=UTC)
        return (locked_until - datetime.now(UTC)).total_seconds()

    def _run(self) -> None:
        while not self._stopped.is_set():
            remaining = self._remaining_s()
            delay = renew_delay(remaining)
            if self._deadline is not None and time.monotonic() + delay >= self._deadline:
                return  # maxAutoLockRenewalDuration has passed by then
            if self._stopped.wait(delay):
                return
            try:
                with self._lock:
                    if self._stopped.is_set():
                        return
                    self._receiver.session.renew_lock(timeout=max(1.0, remaining))
                self.renewals += 1
                log.debug("renewed the lock of session %s", self._label)
            except Exception as error:
                if self._stopped.is_set():
                    return
                if self._remaining_s() <= 0:
                    log.warning("lost the lock of session %s: %r", self._label, error)
                    return
                log.warning("could not renew the lock of session %s: %r", self._label, error)
                if self._stopped.wait(1.0):
                    return


class ServiceBusListener:
    def __init__(
        self,
        spec: FunctionSpec,
        invoker: Invoker,
        options: ServiceBusOptions,
        locks: MessageLocks,
    ) -> None:
        trigger = spec.trigger
        self.spec = spec
        self._invoker = invoker
        self._options = options
        self._locks = locks
        self._many = str(trigger.get("cardinality", "one")).lower() == "many"
        self._sdk_types = spec.supports_deferred_binding
        if self._many and not self._sdk_types:
            raise HostConfigError(
                f"function {spec.name}: batches (cardinality many) need SDK-type parameters "
                "(azurefunctions.extensions.bindings.servicebus.ServiceBusReceivedMessage) "
                "on this host"
            )
        auto = trigger.get("autoCompleteMessages")
        self._auto_complete = options.auto_complete_messages if auto is None else bool(auto)
        # As for autoCompleteMessages, a binding value wins over host.json (extension 5.x).
        batch_size = trigger.get("maxMessageBatchSize")
        self._max_batch = options.max_message_batch_size if batch_size is None else int(batch_size)
        self._sessions = bool(trigger.get("isSessionsEnabled"))
        self._queue = trigger.get("queueName")
        self._topic = trigger.get("topicName")
        self._subscription = trigger.get("subscriptionName")
        self._connection = str(trigger.get("connection") or "AzureWebJobsServiceBus")
        self._stop = threading.Event()
        # Single-message session functions: one receiver (thread) per concurrent session,
        # as ServiceBusSessionProcessor; everything else: one receive loop.
        receivers = 1
        if self._sessions and not self._many:
            receivers = max(1, options.max_concurrent_sessions)
            if options.max_concurrent_calls_per_session != 1:
                log.warning(
                    "%s: maxConcurrentCallsPerSession %d is not supported by the local host; "
                    "it processes one message at a time per session (the default)",
                    spec.name,
                    options.max_concurrent_calls_per_session,
                )
        self._threads = [
            threading.Thread(
                target=self._guarded_run,
                args=(index,),
                name=f"servicebus-{spec.name}" + (f"-{index}" if receivers > 1 else ""),
                daemon=True,
            )
            for index in range(receivers)
        ]
        # The sessions held right now (session id -> renewal), for tests and diagnostics.
        self.held_sessions: dict[str, SessionLockRenewal | None] = {}
        self._held_sessions_lock = threading.Lock()
        self._dispatch = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(1, options.max_concurrent_calls),
            thread_name_prefix=f"dispatch-{spec.name}",
        )
        # Batch invocations (and taking messages out of the pending batch) happen under
        # this lock: one batch at a time, also when stop() dispatches what is held.
        self._dispatching = threading.Lock()
        self._held: _Held | None = None

    @property
    def entity(self) -> str:
        return (
            str(self._queue) if self._queue else f"{self._topic}/Subscriptions/{self._subscription}"
        )

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Stop receiving; messages held for a batch are dispatched now, as the extension's
        StopAsync does (after the batch running, if any), while invocations are accepted."""
        self._stop.set()
        held = self._held
        if held is not None and len(held.pending):
            self._flush(held)

    def join(self, timeout: float) -> None:
        """Wait (at most ``timeout`` in all) for every receiver of the listener to end."""
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._dispatch.shutdown(wait=False, cancel_futures=True)

    def is_alive(self) -> bool:
        return any(thread.is_alive() for thread in self._threads)

    def _receiver(self, client: ServiceBusClient) -> ServiceBusReceiver:
        kwargs: dict[str, Any] = {
            "receive_mode": ServiceBusReceiveMode.PEEK_LOCK,
            "prefetch_count": self._options.prefetch_count,
            "socket_timeout": SOCKET_TIMEOUT_S,
        }
        if self._sessions:
            kwargs["session_id"] = NEXT_AVAILABLE_SESSION
            kwargs["max_wait_time"] = ACCEPT_WAIT_S  # bounds how long a stop waits
        if self._queue:
            return client.get_queue_receiver(str(self._queue), **kwargs)
        return client.get_subscription_receiver(str(self._topic), str(self._subscription), **kwargs)

    def _guarded_run(self, index: int = 0) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            try:
                with open_client(self._connection) as client:
                    if index == 0:
                        log.info(
                            "listening on %s for %s%s",
                            self.entity,
                            self.spec.name,
                            f" ({len(self._threads)} session receivers)"
                            if len(self._threads) > 1
                            else "",
                        )
                    while not self._stop.is_set():
                        self._run_receiver(client)
                        backoff = 1.0
            except Exception as error:
                if self._stop.is_set():
                    return
                log.warning(
                    "listener %s on %s failed (%r); retrying in %.0fs",
                    self.spec.name,
                    self.entity,
                    error,
                    backoff,
                )
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)

    def _run_receiver(self, client: ServiceBusClient) -> None:
        """Receive and dispatch until stopped (or, for sessions, until the session ends)."""
        receiver = self._receiver(client)
        lock = threading.Lock()
        session_id: str | None = None
        try:
            with accepting(receiver) if self._sessions else receiver:
                if not self._sessions:
                    if self._many:
                        self._run_batches(receiver, lock, None)
                    else:
                        self._dispatch_until_idle(receiver, lock)
                    return
                accepted = receiver.session.session_id
                if not isinstance(accepted, str):  # a broker that granted no session id
                    return
                session_id = accepted
                session = self._locks.hold_session(session_id, receiver, lock)
                renewal = None
                renew_for = self._options.max_auto_lock_renewal_duration_s
                if not self._many and (renew_for is None or renew_for > 0):
                    renewal = SessionLockRenewal(receiver, lock, renew_for, session_id)
                    renewal.start()
                with self._held_sessions_lock:
                    self.held_sessions[session_id] = renewal
                try:
                    if self._many:
                        self._run_batches(receiver, lock, session)
                    else:
                        self._run_session(receiver, lock, session)
                finally:
                    if renewal is not None:
                        renewal.stop()
                    with self._held_sessions_lock:
                        self.held_sessions.pop(session_id, None)
                    # Before the receiver closes: nobody else can hold the session yet.
                    self._locks.release_session(session_id, session)
        except SessionLockLostError as error:
            # As the session processor: the session is gone, take the next one.
            log.warning("%s lost the lock of session %s: %r", self.spec.name, session_id, error)
        except Exception as error:
            if self._sessions and type(error).__name__ == "OperationTimeoutError":
                return  # no session available right now
            raise

    def _receive(
        self, receiver: ServiceBusReceiver, lock: threading.Lock, limit: int, wait_s: float
    ) -> list[ServiceBusReceivedMessage]:
        """Up to ``limit`` messages: the first within ``wait_s``, then what else arrives
        within BATCH_WINDOW_S (the extension's receive call).

        Two SDK calls, since a single one would collect for 200 ms after the first message
        (the Python SDK's further-pull time): one message, then the rest within the window.
        """
        with lock:
            received = receiver.receive_messages(max_message_count=1, max_wait_time=wait_s)
            if received and limit > 1:
                received += receiver.receive_messages(
                    max_message_count=limit - 1, max_wait_time=BATCH_WINDOW_S
                )
        return received

    def _run_batches(
        self, receiver: ServiceBusReceiver, lock: threading.Lock, session: HeldSession | None
    ) -> None:
        """The extension's batch receive loop, for one receiver (or one session).

        With ``minMessageBatchSize`` 1 nothing is ever held: each receive is a batch.
        """
        options = self._options
        pending = PendingBatch[ServiceBusReceivedMessage](
            self._max_batch, options.min_message_batch_size, options.max_batch_wait_time_s
        )
        held = _Held(receiver, lock, pending)
        with self._dispatching:
            self._held = held
        try:
            # A session ends when one receive (the extension's, of sessionIdleTimeout) got
            # nothing: that receive starts after the dispatch of what the last one got.
            idle_s = self._options.session_idle_s
            idle_deadline = time.monotonic() + idle_s
            while not self._stop.is_set():
                if session is not None and session.released.is_set():
                    break  # the function called release_session: what is held goes first
                received: list[ServiceBusReceivedMessage] = []
                if not pending.due(time.monotonic()):
                    now = time.monotonic()
                    wait = pending.receive_wait(now, POLL_S)
                    if session is not None:
                        wait = max(0.001, min(wait, idle_deadline - now))
                    received = self._receive(receiver, lock, self._max_batch, wait)
                    if not received:
                        if session is not None and time.monotonic() >= idle_deadline:
                            break  # session idle: what is held goes, then another session
                        continue
                with self._dispatching:
                    # Received messages join what is held; a passed wait takes it all.
                    batch = pending.add(received) if received else pending.take()
                    if batch:
                        self._process(receiver, lock, batch)
                    # As the extension's cache monitor, the wait starts after the dispatch.
                    pending.arm(time.monotonic())
                if received:
                    idle_deadline = time.monotonic() + idle_s
            self._flush(held)
        finally:
            with self._dispatching:
                # Still held here only when the receiver failed: the locks will expire.
                self._held = None

    def _flush(self, held: _Held) -> None:
        """Dispatch everything ``held`` holds, in batches of at most the maximum size."""
        with self._dispatching:
            if self._held is not held:
                return  # its receiver is gone; the messages return when their locks expire
            while len(held.pending):
                self._process(held.receiver, held.lock, held.pending.take())

    def _dispatch_until_idle(self, receiver: ServiceBusReceiver, lock: threading.Lock) -> None:
        """Single messages without sessions: up to maxConcurrentCalls at once."""
        limit = max(1, self._options.max_concurrent_calls)
        while not self._stop.is_set():
            batch = self._receive(receiver, lock, limit, POLL_S)
            if not batch:
                continue
            futures = [
                self._dispatch.submit(self._process, receiver, lock, [message]) for message in batch
            ]
            concurrent.futures.wait(futures)

    def _run_session(
        self, receiver: ServiceBusReceiver, lock: threading.Lock, session: HeldSession
    ) -> None:
        """One held session of a single-message function (SessionReceiverManager): one
        message per receive, invoked before the next receive, until a receive has waited
        sessionIdleTimeout with nothing, the function releases the session, or a stop."""
        idle_s = self._options.session_idle_s
        while not self._stop.is_set() and not session.released.is_set():
            idle_deadline = time.monotonic() + idle_s
            received: list[ServiceBusReceivedMessage] = []
            while not received:
                remaining = idle_deadline - time.monotonic()
                if remaining <= 0 or self._stop.is_set() or session.released.is_set():
                    return  # idle (another session gets this receiver), released or stopping
                received = self._receive(receiver, lock, 1, min(POLL_S, remaining))
            self._process(receiver, lock, received)

    def _trigger_input(
        self, batch: list[ServiceBusReceivedMessage]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """(inputs, trigger metadata) of one invocation, as the Functions host sends them."""
        if self._sdk_types:
            return {self.spec.trigger_parameter: sdk_trigger_data(batch, self._many)}, {}
        message = batch[0]
        data = rpc.TypedData(bytes=message_body(message))
        return {self.spec.trigger_parameter: data}, message_trigger_metadata(message)

    def _process(
        self,
        receiver: ServiceBusReceiver,
        lock: threading.Lock,
        batch: list[ServiceBusReceivedMessage],
    ) -> None:
        held = self._locks.hold(receiver, batch, lock)
        succeeded = False
        invoked = True
        try:
            inputs, metadata = self._trigger_input(batch)
            trace_parent = _trace_parent_of(batch[0]) if len(batch) == 1 else None
            self._invoker.invoke(self.spec, inputs, metadata, trace_parent=trace_parent)
            succeeded = True
        except HostStoppingError:
            invoked = False  # abandoned below with auto-complete, else left to lock expiry
        except Exception as error:
            # The invoker logged it; the settlement below decides what the broker sees.
            log.debug("%s failed: %r", self.spec.name, error)
        finally:
            self._locks.release(held)
        # Success completes only with auto-complete; a failed invocation abandons whatever
        # the function did not settle whatever autoCompleteMessages says (the extension's
        # batch loop does so explicitly, the SDK processor for single messages too).
        if not self._auto_complete and (succeeded or not invoked):
            return
        for entry in held:
            if entry.settled:
                continue
            try:
                with lock:
                    if succeeded:
                        receiver.complete_message(entry.message)
                    else:
                        receiver.abandon_message(entry.message)
            except Exception as error:
                log.warning(
                    "could not %s message %s of %s: %r",
                    "complete" if succeeded else "abandon",
                    entry.message.message_id,
                    self.spec.name,
                    error,
                )


def _trace_parent_of(message: ServiceBusReceivedMessage) -> str | None:
    """The trace a single message continues (``Diagnostic-Id``, else ``traceparent``)."""
    properties = message.application_properties or {}
    for key in (b"Diagnostic-Id", "Diagnostic-Id", b"traceparent", "traceparent"):
        value = properties.get(key)
        if value:
            return value.decode() if isinstance(value, bytes) else str(value)
    return None
