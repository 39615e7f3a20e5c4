"""AMQP 1.0 over asyncio: one proton engine (transport, connection, collector) per socket.

The broker is single-threaded: asyncio delivers bytes, proton turns them into events,
and every event handler runs guarded, so a bug in one handler is logged and answered
with an AMQP error instead of taking the process down.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from proton import Collector, Connection, Endpoint, Event, Transport

if TYPE_CHECKING:
    from .links import LinkRouter

LOG = logging.getLogger("servicebus_emulator.amqp")
_MAX_FRAME = 256 * 1024


class AmqpConnection(asyncio.Protocol):
    """One client socket driven through a server-mode proton transport."""

    def __init__(self, router: LinkRouter) -> None:
        self.router = router
        self.socket: asyncio.Transport | None = None
        self.engine = Transport(Transport.SERVER)
        self.engine.max_frame_size = _MAX_FRAME
        sasl = self.engine.sasl()
        sasl.allow_insecure_mechs = True
        sasl.allowed_mechs("ANONYMOUS PLAIN")
        self.connection = Connection()
        self.collector = Collector()
        self.connection.collect(self.collector)
        self.engine.bind(self.connection)
        self.connection.owner = self
        self.closed = False
        self.authorized = False

    # --- asyncio side --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.socket = transport
        self.router.connections.add(self)
        LOG.debug("connection from %s", transport.get_extra_info("peername"))

    def data_received(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            capacity = self.engine.capacity()
            if capacity <= 0:
                break
            self.engine.push(bytes(view[:capacity]))
            view = view[capacity:]
        self.process()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.engine.close_tail()
        self.engine.close_head()
        self.process()
        self.router.connection_closed(self)
        self.router.connections.discard(self)

    # --- proton side -----------------------------------------------------------------------
    def process(self) -> None:
        """Dispatch pending engine events, then write what the engine produced."""
        while True:
            event = self.collector.peek()
            if event is None:
                break
            try:
                self._dispatch(event)
            except Exception:
                LOG.exception("handler failed for %s", event.type)
            finally:
                self.collector.pop()
        self.flush()

    def flush(self) -> None:
        if self.socket is None or self.socket.is_closing():
            return
        while True:
            pending = self.engine.pending()
            if pending <= 0:
                break
            chunk: bytes = self.engine.peek(pending) or b""
            self.socket.write(chunk)
            self.engine.pop(len(chunk))
        if pending < 0:
            self.socket.close()

    def tick(self, now: float) -> None:
        """Heartbeats and idle timeouts the peer negotiated."""
        if not self.closed:
            self.engine.tick(now)
            self.flush()

    def _dispatch(self, event: Event) -> None:
        kind = event.type
        link: Any = event.link
        session: Any = event.session
        if kind == Event.CONNECTION_REMOTE_OPEN:
            if self.connection.state & Endpoint.LOCAL_UNINIT:
                self.connection.container = "servicebus-emulator"
                self.connection.open()
        elif kind == Event.SESSION_REMOTE_OPEN:
            if session.state & Endpoint.LOCAL_UNINIT:
                # Proton's default (unbounded) incoming window: setting a capacity makes it
                # send an extra session flow frame that every SDK handler waits a cycle for.
                session.open()
        elif kind == Event.LINK_REMOTE_OPEN:
            self.router.link_opened(self, link)
        elif kind == Event.LINK_FLOW:
            if link.is_sender:
                self.router.link_flow(link)
        elif kind == Event.DELIVERY:
            if link.is_receiver:
                self.router.incoming(self, link, event.delivery)
            else:
                self.router.settled_by_client(link, event.delivery)
        elif kind in (Event.LINK_REMOTE_CLOSE, Event.LINK_REMOTE_DETACH):
            self.router.link_closed(link)
            if not link.state & Endpoint.LOCAL_CLOSED:
                link.close()
        elif kind == Event.SESSION_REMOTE_CLOSE and not session.state & Endpoint.LOCAL_CLOSED:
            session.close()
        elif (
            kind == Event.CONNECTION_REMOTE_CLOSE
            and not self.connection.state & Endpoint.LOCAL_CLOSED
        ):
            self.connection.close()
