"""Wiring: the batch and chat services, the HTTP server and the auto-advance timer.

``Emulator`` is what ``python -m openai_emulator`` runs; the fixtures run it as a child
process like the other local services.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from .batches import BatchService, Limits
from .chat import ChatService, Quota, quota_fields
from .http_api import ApiServer

log = logging.getLogger("openai_emulator")
DEFAULT_KEY = "local-openai-key"  # the api-key requests must send unless told otherwise


@dataclass(frozen=True)
class ServerOptions:
    host: str = "127.0.0.1"
    port: int = 0
    api_key: str = DEFAULT_KEY
    auto_advance: float = 0.0  # seconds between a batch's automatic steps; 0 = off
    limits: Limits = field(default_factory=Limits)
    # Chat deployments with a quota: (name, tokens per minute, requests per minute,
    # latency in ms[, limiter: "window" when left out, or "minute"]); the others answer
    # without limit.
    deployments: tuple[Quota, ...] = ()


class Emulator:
    def __init__(self, options: ServerOptions) -> None:
        self.options = options
        self.service = BatchService(options.limits)
        self.chat = ChatService()
        for quota in options.deployments:
            self.chat.configure(*quota_fields(quota))
        self.http = ApiServer(
            (options.host, options.port), self.service, options.api_key, self.chat
        )
        self._serving = threading.Thread(
            target=self.http.serve_forever, args=(0.05,), name="http", daemon=True
        )
        self._stopping = threading.Event()
        self._timer = threading.Thread(target=self._auto_advance, name="auto-advance", daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self.http.server_address[:2]
        return f"http://{host!s}:{port}"

    def _auto_advance(self) -> None:
        interval = self.options.auto_advance
        while not self._stopping.wait(min(0.05, interval / 4)):
            try:
                self.service.tick(interval)
            except Exception:
                log.exception("auto-advance failed")

    def start(self) -> None:
        self._serving.start()
        if self.options.auto_advance > 0:
            self._timer.start()
        limits = self.options.limits
        limit = limits.enqueued_token_limit
        enqueued = ",".join(
            ["unlimited" if limit is None else str(limit)]
            + [f"{name}={value}" for name, value in limits.deployment_token_limits]
        )
        quotas = ",".join(
            f"{name}={tokens or '-'}tpm/{requests or '-'}rpm/{latency}ms/{limiter}"
            for name, tokens, requests, latency, limiter in map(
                quota_fields, self.options.deployments
            )
        )
        log.info(
            "ready http=%s auto-advance=%g enqueued-token-limit=%s deployments=%s",
            self.endpoint,
            self.options.auto_advance,
            enqueued,
            quotas or "unlimited",
        )

    def stop(self) -> None:
        self._stopping.set()
        self.http.shutdown()
        self.http.server_close()
        log.info("stopped")
