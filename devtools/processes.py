"""Child processes and port probing for the local stack launcher (``devtools/stack.py``).

The launcher must stop exactly what it started, and must say clearly what already holds a
port it needs; both live here so the launcher itself reads as the sequence of steps.
"""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

REPO_ROOT = Path(__file__).resolve().parents[1]


class StackError(Exception):
    """The stack cannot start; the message says what to do."""


PORT_OWNERS = {
    "azurite": "Azurite",
    "amqp": "an AMQP listener (a Service Bus emulator?)",
    "http": "an HTTP server that is not Azurite",
    "other": "a service that speaks neither HTTP nor AMQP",
}


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


class Child:
    """A child process in its own session, output to a log file or forwarded to stdout."""

    def __init__(self, name: str, command: list[str], log_path: Path | None) -> None:
        self.name = name
        self.log_path = log_path
        self.lines: list[str] = []
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log: IO[bytes] | None = log_path.open("ab") if log_path else None
        # The log is appended across runs: only what this process writes counts as its
        # output, so a "ready" line from an earlier run is never taken for this one's.
        self._log_start = self._log.tell() if self._log else 0
        self.process = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            stdout=self._log if self._log else subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        if self._log is None:
            threading.Thread(target=self._forward, name=f"{name}-output", daemon=True).start()

    def _forward(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.decode(errors="replace")
            self.lines.append(line)
            sys.stdout.write(line)
            sys.stdout.flush()

    def output(self) -> str:
        """What this process has written so far (not earlier runs' lines in the same log)."""
        if self.log_path is not None:
            with self.log_path.open("rb") as log_file:
                log_file.seek(self._log_start)
                return log_file.read().decode(errors="replace")
        return "".join(self.lines)

    def wait_for(self, pattern: re.Pattern[str], timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = pattern.search(self.output())
            if match:
                return match
            if self.process.poll() is not None:
                raise StackError(f"{self.name} exited early:\n{self.output()[-3000:]}")
            time.sleep(0.1)
        raise StackError(f"{self.name} did not become ready within {timeout:.0f}s")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if self._log:
            self._log.close()


def wait_for_ports(ports: list[int], child: Child, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(describe_port(port) == "azurite" for port in ports):
            return
        if child.process.poll() is not None:
            raise StackError(f"Azurite exited early:\n{child.output()[-3000:]}")
        time.sleep(0.2)
    raise StackError(f"Azurite did not listen on {ports} within {timeout:.0f}s")
