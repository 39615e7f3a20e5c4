"""One test body for the sync and the async SDK.

``Sdk`` wraps a real azure-servicebus client, sender, receiver or session. Every method
becomes awaitable: the async SDK is awaited directly, the sync SDK runs unmodified in a
worker thread (``asyncio.to_thread``), so each scenario drives both real code paths.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from azure.servicebus import ServiceBusClient
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient

CALL_TIMEOUT_S = 60.0  # bounds every SDK call so a broker bug fails a test instead of hanging it
_HANDLES = {"ServiceBusClient", "ServiceBusSender", "ServiceBusReceiver", "ServiceBusSession"}


def wrap(value: Any, threaded: bool) -> Any:
    return Sdk(value, threaded) if type(value).__name__ in _HANDLES else value


class Sdk:
    def __init__(self, target: Any, threaded: bool) -> None:
        self._target = target
        self._threaded = threaded

    @property
    def raw(self) -> Any:
        return self._target

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._target, name)
        if not callable(attribute):
            return wrap(attribute, self._threaded)
        if name.startswith("get_") and type(self._target).__name__ == "ServiceBusClient":
            # Factories (get_queue_sender...) are plain calls in both SDKs.
            return lambda *args, **kwargs: wrap(attribute(*args, **kwargs), self._threaded)

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self._threaded:
                result = await asyncio.wait_for(
                    asyncio.to_thread(attribute, *args, **kwargs), CALL_TIMEOUT_S
                )
            else:
                result = attribute(*args, **kwargs)
                if inspect.isawaitable(result):
                    result = await asyncio.wait_for(result, CALL_TIMEOUT_S)
            return wrap(result, self._threaded)

        return call

    async def __aenter__(self) -> Sdk:
        if self._threaded:
            await asyncio.to_thread(self._target.__enter__)
        else:
            await self._target.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._threaded:
            await asyncio.to_thread(self._target.__exit__, *exc)
        else:
            await self._target.__aexit__(*exc)


def make_client(mode: str, connection_string: str, **options: Any) -> Sdk:
    if mode == "sync":
        return Sdk(
            ServiceBusClient.from_connection_string(connection_string, **options), threaded=True
        )
    client = AsyncServiceBusClient.from_connection_string(connection_string, **options)
    return Sdk(client, threaded=False)
