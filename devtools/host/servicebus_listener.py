"""Service Bus triggers: one peek-lock receiver per function, batches as the extension does.

Batch functions (``cardinality="many"``) get up to ``maxMessageBatchSize`` messages; when
``minMessageBatchSize`` > 1 the listener waits up to ``maxBatchWaitTime`` to fill that
minimum, then dispatches what it has. Single-message functions get up to
``maxConcurrentCalls`` messages dispatched concurrently, one invocation each. Session
triggers hold one session at a time and process its messages in order, one by one.

Settlement follows extension 5.x: with ``autoCompleteMessages`` (binding value, else
host.json, default true) every message the function did not settle is completed after
success and abandoned after an exception; with false the function settles and unsettled
messages return when their locks expire. Not done here: automatic lock renewal
(``maxAutoLockRenewalDuration``) and message-count based scaling.
"""

from __future__ import annotations

import collections.abc
import concurrent.futures
import logging
import os
import threading
import time
import typing
from typing import Any

from azure.servicebus import (
    NEXT_AVAILABLE_SESSION,
    ServiceBusClient,
    ServiceBusReceivedMessage,
    ServiceBusReceiveMode,
    ServiceBusReceiver,
)

from devtools.host.app_loader import FunctionSpec
from devtools.host.config import ServiceBusOptions
from devtools.host.invocation import HostStoppingError, Invoker
from devtools.host.servicebus_actions import LocalMessageActions
from devtools.host.servicebus_convert import to_function_message

log = logging.getLogger("host.servicebus")
POLL_S = 1.0

try:
    from azurefunctions.extensions.bindings import servicebus as _extension
except ImportError:  # pragma: no cover
    _extension = None


def _is_sdk_message_type(annotation: Any) -> bool:
    candidates: tuple[type, ...] = (ServiceBusReceivedMessage,)
    if _extension is not None:
        candidates += (_extension.ServiceBusReceivedMessage,)
    origin = typing.get_origin(annotation)
    if (
        origin is not None
        and isinstance(origin, type)
        and issubclass(origin, collections.abc.Iterable)
    ):
        args = typing.get_args(annotation)
        return len(args) == 1 and _is_sdk_message_type(args[0])
    return isinstance(annotation, type) and issubclass(annotation, candidates)


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
    def __init__(self, spec: FunctionSpec, invoker: Invoker, options: ServiceBusOptions) -> None:
        trigger = spec.trigger
        self.spec = spec
        self._invoker = invoker
        self._options = options
        self._many = str(trigger.get("cardinality", "one")).lower() == "many"
        auto = trigger.get("autoCompleteMessages")
        self._auto_complete = options.auto_complete_messages if auto is None else bool(auto)
        self._sessions = bool(trigger.get("isSessionsEnabled"))
        self._queue = trigger.get("queueName")
        self._topic = trigger.get("topicName")
        self._subscription = trigger.get("subscriptionName")
        self._connection = str(trigger.get("connection") or "AzureWebJobsServiceBus")
        self._sdk_types = _is_sdk_message_type(spec.annotations.get(spec.trigger_parameter))
        self._actions_parameter = (
            spec.parameter_of_type(_extension.ServiceBusMessageActions) if _extension else None
        )
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
                while not self._stop.is_set():
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
        except Exception as error:
            if self._sessions and type(error).__name__ == "OperationTimeoutError":
                return  # no session available right now
            raise

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

    def _arguments(
        self, messages: list[ServiceBusReceivedMessage], actions: LocalMessageActions
    ) -> dict[str, Any]:
        values: list[Any] = (
            messages if self._sdk_types else [to_function_message(m) for m in messages]
        )
        arguments: dict[str, Any] = {
            self.spec.trigger_parameter: values if self._many else values[0]
        }
        if self._actions_parameter:
            arguments[self._actions_parameter] = actions
        return arguments

    def _process(
        self,
        receiver: ServiceBusReceiver,
        lock: threading.Lock,
        messages: list[ServiceBusReceivedMessage],
    ) -> None:
        actions = LocalMessageActions(receiver, lock)
        succeeded = False
        try:
            self._invoker.invoke(self.spec, self._arguments(messages, actions))
            succeeded = True
        except HostStoppingError:
            pass  # not invoked: abandoned below with auto-complete, else left to lock expiry
        except Exception as error:
            # The invoker logged it; the settlement below decides what the broker sees.
            log.debug("%s failed: %r", self.spec.name, error)
        if not self._auto_complete:
            return
        for message in messages:
            if actions.was_settled(message):
                continue
            try:
                with lock:
                    if succeeded:
                        receiver.complete_message(message)
                    else:
                        receiver.abandon_message(message)
            except Exception as error:
                log.warning(
                    "could not %s message %s of %s: %r",
                    "complete" if succeeded else "abandon",
                    message.message_id,
                    self.spec.name,
                    error,
                )
