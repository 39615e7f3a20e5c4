"""AMQP 1.0 over asyncio: one proton engine (transport, connection, collector) per socket.

The broker is single-threaded: asyncio delivers bytes, proton turns them into events,
and every event handler runs guarded, so a bug in one handler is logged and answered
with an AMQP error instead of taking the process down.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from proton import Collector, Connection, Endpoint, Event, Transport

from .fastdecode import Unsupported, skip_value

if TYPE_CHECKING:
    from .links import LinkRouter

LOG = logging.getLogger("servicebus_emulator.amqp")
_MAX_FRAME = 256 * 1024
_TLS_HANDSHAKE = 0x16  # first byte of a TLS record carrying a ClientHello
TLS_ON_PLAIN_PORT = "this port speaks AMQP without TLS; use UseDevelopmentEmulator=true"
_BEGIN, _TRANSFER, _END = 0x11, 0x14, 0x17
_ID_MASK = 0xFFFFFFFF


@dataclass
class _SessionIds:
    """Delivery-id bookkeeping of one incoming session (one channel)."""

    next_id: int
    in_progress: dict[int, int] = field(default_factory=dict)  # handle -> id of a multi-frame


class DeliveryIdSequencer:
    """Renumbers the delivery-ids of incoming transfers so they are always sequential.

    The async SDK reads its session's next delivery-id, awaits the write and only then
    increments, so two transfers in flight at once (concurrent sends on one sender, lock
    renewals racing settlements on ``$management``) go out with the same id. Azure takes
    that as two deliveries; proton refuses it ("sequencing error, expected delivery-id 2,
    got 1") and ends the connection. The SDK still increments once per transfer, so giving
    each new delivery the next id of its session keeps every correct id unchanged and only
    moves a stale one forward. Frames other than transfers, and transfers that already
    carry the expected id, pass through byte for byte.
    """

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.sessions: dict[int, _SessionIds] = {}
        self.ended: set[int] = set()  # channels the client has sent End on
        self.late_frames = 0
        self.passthrough = False
        self.renumbered = 0

    def feed(self, data: bytes) -> bytes:
        """Whole headers and frames from data (what is incomplete waits for the next call).

        Anything that is not AMQP framing (another protocol, a frame larger than the
        broker allows) is handed to proton unchanged from then on, so proton reports it.
        """
        if self.passthrough:
            return data
        self.buffer += data
        out = bytearray()
        pos = 0
        while len(self.buffer) - pos >= 8:
            if self.buffer[pos : pos + 4] == b"AMQP":
                out += self.buffer[pos : pos + 8]
                pos += 8
                continue
            size = int.from_bytes(self.buffer[pos : pos + 4], "big")
            if not 8 <= size <= _MAX_FRAME:
                del self.buffer[:pos]
                return self._give_up(out)
            if len(self.buffer) - pos < size:
                break
            frame = bytes(self.buffer[pos : pos + size])
            pos += size
            try:
                out += self._frame(frame)
            except (Unsupported, IndexError):
                out += frame
        del self.buffer[:pos]
        return bytes(out)

    def _give_up(self, out: bytearray) -> bytes:
        self.passthrough = True
        out += self.buffer
        self.buffer.clear()
        return bytes(out)

    def _frame(self, frame: bytes) -> bytes:
        if frame[5] != 0 or len(frame) <= frame[4] * 4:  # SASL frame or heartbeat
            return frame
        channel = int.from_bytes(frame[6:8], "big")
        body = frame[4] * 4
        if frame[body] != 0x00:
            return frame
        descriptor_end = skip_value(frame, body + 1)
        code = frame[descriptor_end - 1] if frame[body + 1] in (0x53, 0x80) else -1
        if code == _BEGIN:
            fields = _list_fields(frame, descriptor_end)
            next_id = _uint_at(frame, fields[1]) if len(fields) > 2 else 0
            self.sessions[channel] = _SessionIds(next_id or 0)
            self.ended.discard(channel)
        elif channel in self.ended:
            # The async SDK ends a session while other tasks still detach its links;
            # Azure ignores those late frames, proton would end the connection for them.
            self.late_frames += 1
            LOG.debug("ignored a frame on ended channel %d", channel)
            return b""
        elif code == _END:
            self.sessions.pop(channel, None)
            self.ended.add(channel)
        elif code == _TRANSFER and channel in self.sessions:
            return self._transfer(frame, descriptor_end, self.sessions[channel])
        return frame

    def _transfer(self, frame: bytes, list_pos: int, session: _SessionIds) -> bytes:
        fields = _list_fields(frame, list_pos)
        handle = _uint_at(frame, fields[0])
        if handle is None:
            raise Unsupported("transfer without a handle")
        more = len(fields) > 6 and frame[fields[5]] in (0x41, 0x56) and _bool_at(frame, fields[5])
        if handle in session.in_progress:
            expected = session.in_progress[handle]
        else:
            expected = session.next_id
            session.next_id = (session.next_id + 1) & _ID_MASK
        if more:
            session.in_progress[handle] = expected
        else:
            session.in_progress.pop(handle, None)
        if len(fields) < 3 or frame[fields[1]] == 0x40 or _uint_at(frame, fields[1]) == expected:
            return frame
        self.renumbered += 1
        return _replace_field(frame, list_pos, fields, 1, b"\x70" + struct.pack(">I", expected))


def _list_fields(frame: bytes, pos: int) -> list[int]:
    """Start positions of a performative's list fields, plus the list's end position."""
    code = frame[pos]
    if code == 0x45:
        return [pos + 1]
    if code == 0xC0:
        count, first, end = frame[pos + 2], pos + 3, pos + 2 + frame[pos + 1]
    elif code == 0xD0:
        size, count = struct.unpack_from(">II", frame, pos + 1)
        first, end = pos + 9, pos + 5 + size
    else:
        raise Unsupported(hex(code))
    starts = [first]
    for _ in range(count):
        starts.append(skip_value(frame, starts[-1]))
    if starts[-1] != end:
        raise Unsupported("list size does not match its fields")
    return starts


def _uint_at(frame: bytes, pos: int) -> int | None:
    code = frame[pos]
    if code == 0x43:
        return 0
    if code == 0x52:
        return frame[pos + 1]
    if code == 0x70:
        value: int = struct.unpack_from(">I", frame, pos + 1)[0]
        return value
    if code == 0x40:
        return None
    raise Unsupported(hex(code))


def _bool_at(frame: bytes, pos: int) -> bool:
    return frame[pos] == 0x41 or (frame[pos] == 0x56 and frame[pos + 1] != 0)


def _replace_field(
    frame: bytes, list_pos: int, starts: list[int], index: int, encoded: bytes
) -> bytes:
    """The frame with one list field re-encoded (as a list32, whatever it was before)."""
    items = frame[starts[0] : starts[index]] + encoded + frame[starts[index + 1] : starts[-1]]
    listed = b"\xd0" + struct.pack(">II", len(items) + 4, len(starts) - 1) + items
    rest = frame[8:list_pos] + listed + frame[starts[-1] :]
    return struct.pack(">I", 8 + len(rest)) + frame[4:8] + rest


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
        self.sequencer = DeliveryIdSequencer()
        self.peer = "unknown peer"
        self.received_any = False
        self.drop_reported = False
        self.closed_by_peer = False

    # --- asyncio side --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.socket = transport
        self.router.connections.add(self)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        LOG.debug("connection from %s", self.peer)

    def data_received(self, data: bytes) -> None:
        if not self.received_any and data:
            self.received_any = True
            if data[0] == _TLS_HANDSHAKE:
                self.drop(f"TLS handshake received: {TLS_ON_PLAIN_PORT}")
                return
        if self.drop_reported:
            return
        view = memoryview(self.sequencer.feed(data))
        while view:
            capacity = self.engine.capacity()
            if capacity <= 0:
                break
            self.engine.push(bytes(view[:capacity]))
            view = view[capacity:]
        self.process()

    def drop(self, cause: str) -> None:
        """Close the socket and say why: a client only sees its connection go away."""
        self.report_drop(cause)
        if self.socket is not None and not self.socket.is_closing():
            self.socket.close()

    def report_drop(self, cause: str) -> None:
        if not self.drop_reported:
            self.drop_reported = True
            LOG.warning("dropped connection from %s: %s", self.peer, cause)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.received_any:
            LOG.debug("connection from %s closed before it sent anything", self.peer)
        elif not self.closed_by_peer and not self.router.stopping:
            cause = (
                f"socket error: {exc}"
                if exc
                else "the client closed the socket without an AMQP close"
            )
            self.report_drop(cause)
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
            condition = self.engine.condition
            if condition is not None:
                self.report_drop(f"{condition.name}: {condition.description}")
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
        if kind == Event.TRANSPORT_ERROR:
            condition = self.engine.condition
            if condition is not None:
                self.report_drop(f"{condition.name}: {condition.description}")
        elif kind == Event.CONNECTION_REMOTE_OPEN:
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
        elif kind == Event.CONNECTION_REMOTE_CLOSE:
            self.closed_by_peer = True
            if not self.connection.state & Endpoint.LOCAL_CLOSED:
                self.connection.close()
