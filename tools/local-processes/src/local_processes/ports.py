"""Loopback ports: a free one, and what already listens on a taken one."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterable

from local_processes.child import Child, StartError

PORT_OWNERS = {
    "azurite": "Azurite",
    "amqp": "an AMQP listener (a Service Bus emulator?)",
    "http": "an HTTP server that is not Azurite",
    "other": "a service that speaks neither HTTP nor AMQP",
}


def free_port() -> int:
    """A loopback port nothing listens on now (prefer a child's own ``--port 0`` where it can)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def describe_port(port: int) -> str:
    """'free', 'azurite', 'amqp', 'http' or 'other' for a loopback port."""
    with socket.socket() as sock:
        sock.settimeout(1.0)
        if sock.connect_ex(("127.0.0.1", port)) != 0:
            return "free"
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1) as response:
            headers = response.headers
    except urllib.error.HTTPError as error:
        headers = error.headers
    except Exception:
        headers = None
    server = (headers.get("Server") or "") if headers is not None else ""
    if headers is not None and (headers.get("x-ms-request-id") or server.startswith("Azurite")):
        return "azurite"
    if headers is not None:
        return "http"
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"AMQP\x03\x01\x00\x00")
            if sock.recv(8).startswith(b"AMQP"):
                return "amqp"
    except OSError:
        pass
    return "other"


def wait_for_ports(
    ports: Iterable[int], child: Child, owner: str = "azurite", timeout: float = 30.0
) -> None:
    """Wait until every port is described as ``owner``; StartError if ``child`` exits first."""
    wanted = list(ports)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(describe_port(port) == owner for port in wanted):
            return
        if child.process.poll() is not None:
            raise StartError(f"{child.name} exited early:\n{child.output()[-3000:]}")
        time.sleep(0.1)
    raise StartError(f"{child.name} did not listen on {wanted} within {timeout:.0f}s")
