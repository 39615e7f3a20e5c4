"""Wiring: the broker, the dead-letter sink and the HTTP server, run until told to stop.

``Emulator`` is what ``python -m eventgrid_emulator`` runs; tests that want the emulator
in-process can use it directly (``start``/``stop``), though the fixtures run it as a child
process like the other local services.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from .broker import Broker
from .clock import Clock
from .config import NamespaceConfig
from .dead_letter import BlobDeadLetterWriter, DeadLetterSink, DroppingSink
from .http_api import ApiServer
from .webhook import WebhookClient

log = logging.getLogger("eventgrid_emulator")


@dataclass(frozen=True)
class ServerOptions:
    host: str = "127.0.0.1"
    port: int = 0
    storage: str | None = None  # blob connection string for dead letters (Azurite)
    time_scale: float = 1.0
    push_timeout: float = 30.0  # seconds a webhook may take to answer (not scaled)


class Emulator:
    def __init__(self, config: NamespaceConfig, options: ServerOptions) -> None:
        self.config = config
        self.options = options
        clock = Clock(options.time_scale)
        sink: DeadLetterSink = (
            BlobDeadLetterWriter(options.storage, clock) if options.storage else DroppingSink()
        )
        self.broker = Broker(config, clock, sink, WebhookClient(options.push_timeout))
        self.http = ApiServer((options.host, options.port), self.broker)
        self._serving = threading.Thread(target=self.http.serve_forever, name="http", daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self.http.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> None:
        self.broker.start()
        self._serving.start()
        log.info(
            "ready http=%s namespace=%s topics=%d time-scale=%g dead-letters=%s",
            self.endpoint,
            self.config.name,
            len(self.config.topics),
            self.options.time_scale,
            "blob" if self.options.storage else "dropped",
        )

    def stop(self) -> None:
        self.broker.close()  # answers waiting receives first
        self.http.shutdown()
        self.http.server_close()
        self.broker.sink.close()
        log.info("stopped")
