"""Assembles the emulator: namespace, AMQP listener, admin endpoint and the timer loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from dataclasses import dataclass

from .admin_http import start_admin
from .amqp_server import AmqpConnection
from .broker import Namespace
from .cbs import make_cbs_handler
from .config import NamespaceConfig
from .links import LinkRouter
from .management import ManagementNode

LOG = logging.getLogger("servicebus_emulator")
TICK_S = 0.05


@dataclass(frozen=True)
class ServerOptions:
    host: str = "127.0.0.1"
    port: int = 5672
    admin_port: int = 5300
    sas_key: str | None = None


class Emulator:
    """Owns every socket and the periodic work (locks, schedules, TTL, heartbeats)."""

    def __init__(self, config: NamespaceConfig, options: ServerOptions) -> None:
        self.options = options
        self.namespace = Namespace(config)
        self.router = LinkRouter(
            namespace=self.namespace,
            cbs=make_cbs_handler(options.sas_key),
            management=ManagementNode(
                self.namespace, lambda store: self.router.consumers.pump(store)
            ),
            requires_auth=options.sas_key is not None,
        )
        self.stopping = asyncio.Event()

    def _tick(self) -> None:
        now = time.time()
        try:
            self.namespace.tick()
            self.router.consumers.tick(now)
        except Exception:
            LOG.exception("timer work failed")
        for conn in list(self.router.connections):
            try:
                conn.flush()
                conn.tick(now)
            except Exception:
                LOG.exception("connection tick failed")

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        amqp = await loop.create_server(
            lambda: AmqpConnection(self.router), self.options.host, self.options.port
        )
        admin = await start_admin(self.namespace, self.options.host, self.options.admin_port)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stopping.set)
        amqp_port = amqp.sockets[0].getsockname()[1]
        admin_port = admin.sockets[0].getsockname()[1]
        queues = ", ".join(s.name for s, _ in self.namespace.queues.values()) or "-"
        topics = ", ".join(t.name for t in self.namespace.topics.values()) or "-"
        LOG.info("namespace %s: queues [%s], topics [%s]", self.namespace.name, queues, topics)
        LOG.info(
            "SAS signature check %s", "on" if self.options.sas_key else "off (any token accepted)"
        )
        LOG.info(
            "ready amqp=%s:%d admin=http://%s:%d",
            self.options.host,
            amqp_port,
            self.options.host,
            admin_port,
        )
        try:
            while not self.stopping.is_set():
                self._tick()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stopping.wait(), TICK_S)
        finally:
            LOG.info("stopping")
            self.router.stopping = True
            amqp.close()
            admin.close()
            for conn in list(self.router.connections):
                if conn.socket is not None:
                    conn.socket.close()
            await amqp.wait_closed()
            await admin.wait_closed()
            LOG.info("stopped")
