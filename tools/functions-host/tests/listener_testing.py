"""What the listener tests share: a stand-in invoker, the trigger, running listeners, senders.

The tests run one ``ServiceBusListener`` each (the real SDK receivers, on a queue of their
own in ``listener-emulator.json``; fixtures in conftest.py) with an invoker that records
what it is given instead of calling a worker.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSender
from azure.servicebus import ServiceBusReceivedMessage as SdkMessage
from azurefunctions.extensions.bindings.servicebus import (
    ServiceBusReceivedMessage as ExtensionMessage,
)

from functions_host.config import ServiceBusOptions
from functions_host.functions import FunctionSpec
from functions_host.servicebus_listener import ServiceBusListener
from functions_host.settlement import MessageLocks

# The app setting the triggers name; the ``connected`` fixture sets it.
CONNECTION = "ListenerTestServiceBus"


def body_text(message: SdkMessage) -> str:
    return b"".join(message.body).decode()


class StubInvoker:
    """Stands in for the worker (``functions_host.invocation.Invoker``): decodes the SDK
    messages of each invocation from the model binding data the host sends and hands them,
    with when the invocation started (monotonic), to ``run``, which plays the function."""

    def invoke(
        self,
        spec: FunctionSpec,
        inputs: Mapping[str, Any],
        trigger_metadata: Mapping[str, Any] | None = None,
        trace_parent: str | None = None,
    ) -> None:
        started = time.monotonic()
        data = inputs[spec.trigger_parameter]
        if spec.trigger.get("cardinality") == "many":
            items = list(data.collection_model_binding_data.model_binding_data)
        else:
            items = [data.model_binding_data]
        self.run([ExtensionMessage(data=item).get_sdk_type() for item in items], started)

    def run(self, messages: list[Any], started: float) -> None:
        """Play the function for ``messages`` (SDK ServiceBusReceivedMessage, untyped as the
        extension returns them); raising fails the invocation."""
        raise NotImplementedError


def listener_spec(queue: str, *, many: bool, **trigger: Any) -> FunctionSpec:
    """A Service Bus trigger on ``queue`` with an SDK-type parameter: a batch (``messages``)
    or single messages (``message``); ``trigger`` adds to or overrides the binding."""
    return FunctionSpec(
        name=f"{'batch' if many else 'single'}_{queue.replace('-', '_')}",
        function_id=f"id-{queue}",
        trigger_type="serviceBusTrigger",
        trigger={
            "type": "serviceBusTrigger",
            "name": "messages" if many else "message",
            "queueName": queue,
            "connection": CONNECTION,
            "cardinality": "many" if many else "one",
            "properties": {"SupportsDeferredBinding": True},
            **trigger,
        },
        bindings=[],
    )


def new_listener(
    spec: FunctionSpec, invoker: StubInvoker, options: ServiceBusOptions, locks: MessageLocks
) -> ServiceBusListener:
    return ServiceBusListener(spec, invoker, options, locks)  # type: ignore[arg-type]


@contextmanager
def running(listener: ServiceBusListener) -> Iterator[ServiceBusListener]:
    """``listener`` started; stopped (and joined) on leaving."""
    listener.start()
    try:
        yield listener
    finally:
        listener.stop()
        listener.join(10)


class Senders:
    """One open sender per queue for the module (closing a sender takes about a second)."""

    def __init__(self, connection_string: str) -> None:
        self._client = ServiceBusClient.from_connection_string(connection_string)
        self._senders: dict[str, ServiceBusSender] = {}

    def send(self, queue: str, bodies: list[str], **kwargs: Any) -> float:
        """Send ``bodies`` in one call; returns when the send started (monotonic)."""
        return self._send(queue, [(body, kwargs) for body in bodies])

    def send_to_sessions(self, queue: str, messages: list[tuple[str, str]]) -> float:
        """(session, body) pairs, in this order, in one send."""
        return self._send(queue, [(body, {"session_id": sid}) for sid, body in messages])

    def _send(self, queue: str, messages: list[tuple[str, dict[str, Any]]]) -> float:
        if queue not in self._senders:
            self._senders[queue] = self._client.get_queue_sender(queue).__enter__()  # opens it
        started = time.monotonic()
        self._senders[queue].send_messages([ServiceBusMessage(b, **kw) for b, kw in messages])
        return started

    def close(self) -> None:
        for sender in self._senders.values():
            sender.close()
        self._client.close()
