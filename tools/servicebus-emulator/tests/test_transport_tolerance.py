"""What the emulator tolerates on the wire, and how it reports a connection it drops.

The delivery-id tests drive two real proton engines (a client and the emulator's server
mode) over bytes in memory, so they show what proton itself does with the frames the
async SDK sends when two tasks transfer at once on one session.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from proton import Collector, Connection, Endpoint, Event, Sender, Transport

from servicebus_emulator.amqp_server import TLS_ON_PLAIN_PORT, DeliveryIdSequencer
from servicebus_emulator.process import ServiceBusEmulator

# A TLS 1.2 record header and the start of a ClientHello, as any TLS client sends first.
TLS_CLIENT_HELLO = bytes.fromhex("160301 00c8 01 0000c4 0303") + bytes(32)
LOG_WAIT_S = 20.0


@dataclass
class Pair:
    """A proton client and server whose bytes the test carries (and may tamper with)."""

    client: Transport
    sender: Sender
    server: Transport
    server_connection: Connection
    collector: Collector
    to_server: Callable[[bytes], bytes]

    def client_to_server(self, tamper: Callable[[bytes], bytes] = lambda b: b) -> None:
        data = _drain(self.client)
        if data:
            self.server.push(self.to_server(tamper(data)))
        self._serve()

    def server_to_client(self) -> None:
        data = _drain(self.server)
        if data:
            self.client.push(data)

    def _serve(self) -> None:
        while (event := self.collector.peek()) is not None:
            if event.type == Event.CONNECTION_REMOTE_OPEN:
                self.server_connection.open()
            elif event.type == Event.SESSION_REMOTE_OPEN:
                session: Any = event.session
                session.open()
            elif event.type == Event.LINK_REMOTE_OPEN:
                link: Any = event.link
                link.target.copy(link.remote_target)
                link.open()
                link.flow(10)
            self.collector.pop()


def _drain(transport: Transport) -> bytes:
    out = bytearray()
    while (pending := transport.pending()) > 0:
        out += transport.peek(pending) or b""
        transport.pop(pending)
    return bytes(out)


def attached_pair(to_server: Callable[[bytes], bytes]) -> Pair:
    client = Transport()
    connection = Connection()
    client.bind(connection)
    connection.open()
    session = connection.session()
    session.open()
    sender = session.sender("sender")
    sender.target.address = "queue"
    sender.open()
    server = Transport(Transport.SERVER)
    server_connection = Connection()
    collector = Collector()
    server_connection.collect(collector)
    server.bind(server_connection)
    pair = Pair(client, sender, server, server_connection, collector, to_server)
    pair.client_to_server()
    pair.server_to_client()
    assert sender.credit == 10
    return pair


def send_two(pair: Pair, tamper: Callable[[bytes], bytes]) -> None:
    for tag in ("one", "two"):
        pair.sender.delivery(tag)
        pair.sender.send(b"payload-" + tag.encode())
        pair.sender.advance()
    pair.client_to_server(tamper)


def reuse_first_delivery_id(data: bytes) -> bytes:
    """Give the second transfer the delivery-id of the first, as the async SDK does."""
    first = data.index(b"\x00\x53\x14")
    second = data.index(b"\x00\x53\x14", first + 1)
    start, end = _delivery_id_span(data, first)
    reused = 0 if data[start] == 0x43 else int.from_bytes(data[start + 1 : end], "big")
    start, end = _delivery_id_span(data, second)
    width = end - start - 1  # keep the second's encoding width, so no size field changes
    assert width > 0, "the second transfer's id must not be encoded as uint0"
    return data[: start + 1] + reused.to_bytes(width, "big") + data[end:]


def _delivery_id_span(data: bytes, performative: int) -> tuple[int, int]:
    pos = performative + 3
    pos += 3 if data[pos] == 0xC0 else 9  # list8 / list32 header
    pos += {0x43: 1, 0x52: 2, 0x70: 5}[data[pos]]  # handle
    width = {0x43: 1, 0x52: 2, 0x70: 5}[data[pos]]
    return pos, pos + width


def received(pair: Pair) -> list[bytes]:
    link: Any = pair.server_connection.link_head(0)
    bodies: list[bytes] = []
    while (delivery := link.current) is not None:
        bodies.append(bytes(link.recv(delivery.pending)))
        link.advance()
    return bodies


def test_proton_alone_drops_a_reused_delivery_id() -> None:
    pair = attached_pair(to_server=lambda data: data)
    send_two(pair, reuse_first_delivery_id)
    assert pair.server.condition is not None
    assert "sequencing error" in (pair.server.condition.description or "")


def test_a_reused_delivery_id_is_taken_as_a_new_delivery() -> None:
    sequencer = DeliveryIdSequencer()
    pair = attached_pair(to_server=sequencer.feed)
    send_two(pair, reuse_first_delivery_id)
    assert pair.server.condition is None
    assert received(pair) == [b"payload-one", b"payload-two"]
    assert sequencer.renumbered == 1


def test_frames_arrive_whole_whatever_the_chunking() -> None:
    sequencer = DeliveryIdSequencer()

    def byte_by_byte(data: bytes) -> bytes:
        return b"".join(sequencer.feed(data[i : i + 1]) for i in range(len(data)))

    pair = attached_pair(to_server=byte_by_byte)
    send_two(pair, reuse_first_delivery_id)
    assert pair.server.condition is None
    assert received(pair) == [b"payload-one", b"payload-two"]
    assert sequencer.buffer == bytearray()


def test_frames_after_the_clients_end_are_ignored() -> None:
    sequencer = DeliveryIdSequencer()
    pair = attached_pair(to_server=sequencer.feed)
    pair.sender.session.close()
    pair.client_to_server()
    # A detach of a link of the ended session, on the ended channel (sent late by the SDK).
    channel = 0
    detach = b"\x00\x53\x16\xc0\x03\x02\x43\x41"
    frame = struct.pack(">IBBH", 8 + len(detach), 2, 0, channel) + detach
    pair.server.push(sequencer.feed(frame))
    pair.client_to_server()
    assert pair.server.condition is None
    assert sequencer.late_frames == 1
    assert pair.server_connection.state & Endpoint.REMOTE_ACTIVE


def test_a_tls_handshake_on_the_plain_port_is_logged_and_closed(
    test_emulator: ServiceBusEmulator,
) -> None:
    assert test_emulator.log_path is not None
    with socket.create_connection((test_emulator.host, test_emulator.port), timeout=10) as sock:
        local = "{}:{}".format(*sock.getsockname())
        sock.sendall(TLS_CLIENT_HELLO)
        assert sock.recv(1024) == b""  # closed without an answer, not left hanging
    line = wait_for_log_line(test_emulator.log_path, local)
    assert "WARNING" in line
    assert TLS_ON_PLAIN_PORT in line


@pytest.mark.parametrize(
    "opening",
    [b"AMQP\x09\x09\x09\x09", b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"],
    ids=["unknown-amqp-version", "http-request"],
)
def test_a_protocol_error_is_logged_with_its_cause(
    test_emulator: ServiceBusEmulator, opening: bytes
) -> None:
    assert test_emulator.log_path is not None
    with socket.create_connection((test_emulator.host, test_emulator.port), timeout=10) as sock:
        local = "{}:{}".format(*sock.getsockname())
        sock.sendall(opening)
        while sock.recv(1024):
            pass
    line = wait_for_log_line(test_emulator.log_path, local)
    assert "WARNING" in line
    assert "amqp:connection:framing-error" in line


def wait_for_log_line(log_path: Path, needle: str) -> str:
    """The first log line naming needle (the emulator logs from its own process)."""
    deadline = time.monotonic() + LOG_WAIT_S
    while time.monotonic() < deadline:
        for line in log_path.read_text().splitlines():
            if needle in line and "dropped connection" in line:
                return line
        time.sleep(0.1)
    pytest.fail(f"no 'dropped connection' line for {needle} in {log_path}")
