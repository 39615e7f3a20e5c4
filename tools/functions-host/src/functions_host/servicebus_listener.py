"""Service Bus triggers: one peek-lock receiver per function, batches as the extension does.

Batch functions (``cardinality="many"``) get up to ``maxMessageBatchSize`` messages; when
``minMessageBatchSize`` > 1 the listener waits up to ``maxBatchWaitTime`` to fill that
minimum, then dispatches what it has. Single-message functions get up to
``maxConcurrentCalls`` messages dispatched concurrently, one invocation each. Session
triggers hold one session at a time and process its messages in order, one by one.

Trigger data is what the Functions host sends (servicebus_binding.py): model binding data
for SDK types, body and metadata otherwise. While an invocation runs, its messages (and
session) are registered with the Settlement service, so ``ServiceBusMessageActions`` in
the worker settles them through this receiver. Settlement follows extension 5.x: with
``autoCompleteMessages`` (binding value, else host.json, default true) every message the
function did not settle is completed after success and abandoned after an exception; with
false the function settles and unsettled messages return when their locks expire. Not
done here: automatic lock renewal (``maxAutoLockRenewalDuration``) and message-count
based scaling.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
import time
from typing import Any

from azure.servicebus import (
    NEXT_AVAILABLE_SESSION,
    ServiceBusClient,
    ServiceBusReceivedMessage,
    ServiceBusReceiveMode,
    ServiceBusReceiver,
)

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
POLL_S = 1.0


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
        self._sessions = bool(trigger.get("isSessionsEnabled"))
        self._queue = trigger.get("queueName")
        self._topic = trigger.get("topicName")
        self._subscription = trigger.get("subscriptionName")
        self._connection = str(trigger.get("connection") or "AzureWebJobsServiceBus")
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._guarded_run, name=f"servicebus-{spec.name}", daemon=True
        )
        self._dispatch = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(1, options.max_concurrent_calls),
            thread_name_prefix=f"dispatch-{spec.name}",
        )

    @property
    def entity(self) -> str:
        return (
            str(self._queue) if self._queue else f"{self._topic}/Subscriptions/{self._subscription}"
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        self._dispatch.shutdown(wait=False, cancel_futures=True)

    def _receiver(self, client: ServiceBusClient) -> ServiceBusReceiver:
        kwargs: dict[str, Any] = {
            "receive_mode": ServiceBusReceiveMode.PEEK_LOCK,
            "prefetch_count": self._options.prefetch_count,
        }
        if self._sessions:
            kwargs["session_id"] = NEXT_AVAILABLE_SESSION
            kwargs["max_wait_time"] = POLL_S * 2  # bounds how long a stop waits
        if self._queue:
            return client.get_queue_receiver(str(self._queue), **kwargs)
        return client.get_subscription_receiver(str(self._topic), str(self._subscription), **kwargs)

    def _guarded_run(self) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            try:
                with open_client(self._connection) as client:
                    log.info("listening on %s for %s", self.entity, self.spec.name)
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
        """Receive and dispatch until stopped (or, for sessions, until the session is idle)."""
        receiver = self._receiver(client)
        lock = threading.Lock()
        try:
            with receiver:
                session_id = receiver.session.session_id if self._sessions else None
                session = (
                    self._locks.hold_session(session_id, receiver, lock) if session_id else None
                )
                try:
                    self._dispatch_until_idle(receiver, lock, session)
                finally:
                    if session_id:
                        self._locks.release_session(session_id)
        except Exception as error:
            if self._sessions and type(error).__name__ == "OperationTimeoutError":
                return  # no session available right now
            raise

    def _dispatch_until_idle(
        self, receiver: ServiceBusReceiver, lock: threading.Lock, session: HeldSession | None
    ) -> None:
        while not self._stop.is_set():
            if session is not None and session.released.is_set():
                return  # the function called release_session
            batch = self._receive_batch(receiver, lock)
            if not batch:
                if self._sessions:
                    return  # let another session have a turn
                continue
            if self._many:
                self._process(receiver, lock, batch)
            elif self._sessions:
                # One message at a time within a session (the extension's
                # maxConcurrentCallsPerSession default), so order is kept.
                for message in batch:
                    self._process(receiver, lock, [message])
            else:
                futures = [
                    self._dispatch.submit(self._process, receiver, lock, [message])
                    for message in batch
                ]
                concurrent.futures.wait(futures)

    def _receive_batch(
        self, receiver: ServiceBusReceiver, lock: threading.Lock
    ) -> list[ServiceBusReceivedMessage]:
        options = self._options
        limit = (
            options.max_message_batch_size if self._many else max(1, options.max_concurrent_calls)
        )
        minimum = min(options.min_message_batch_size, limit) if self._many else 1
        deadline = time.monotonic() + options.max_batch_wait_time_s if minimum > 1 else None
        batch: list[ServiceBusReceivedMessage] = []
        while not self._stop.is_set():
            wait = (
                POLL_S if deadline is None else max(0.05, min(POLL_S, deadline - time.monotonic()))
            )
            with lock:
                batch += receiver.receive_messages(
                    max_message_count=limit - len(batch), max_wait_time=wait
                )
            if len(batch) >= minimum:  # minimum <= limit, so a full batch also stops here
                break
            if deadline is None or time.monotonic() >= deadline:
                break
        return batch

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
        try:
            inputs, metadata = self._trigger_input(batch)
            trace_parent = _trace_parent_of(batch[0]) if len(batch) == 1 else None
            self._invoker.invoke(self.spec, inputs, metadata, trace_parent=trace_parent)
            succeeded = True
        except HostStoppingError:
            pass  # not invoked: abandoned below with auto-complete, else left to lock expiry
        except Exception as error:
            # The invoker logged it; the settlement below decides what the broker sees.
            log.debug("%s failed: %r", self.spec.name, error)
        finally:
            self._locks.release(held)
        if not self._auto_complete:
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
