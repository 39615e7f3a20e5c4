"""Run ``python -m devtools.host`` as a subprocess for tests, and read what it records."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE_APP = Path(__file__).with_name("sample_app")
_STARTED = re.compile(r"Host started: (http://\S+)")
STARTUP_TIMEOUT_S = 45.0


class HostProcess:
    """One host subprocess; its output goes to ``log_path``."""

    def __init__(self, workdir: Path, values: dict[str, str], *extra_args: str) -> None:
        self.workdir = workdir
        self.settings_path = workdir / "local.settings.json"
        self.keys_path = workdir / "host-keys.json"
        self.record_path = Path(values["SAMPLE_RECORD_FILE"])
        self.log_path = workdir / f"host-{time.monotonic_ns()}.log"
        self.settings_path.write_text(json.dumps({"IsEncrypted": False, "Values": values}))
        environment = {k: v for k, v in os.environ.items() if k not in values}
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "devtools.host",
                "--script-root", str(SAMPLE_APP),
                "--settings", str(self.settings_path),
                "--keys-file", str(self.keys_path),
                "--port", "0",
                "--blob-poll-interval", "0.3",
                "--eventgrid-retry-scale", "0.02",
                *extra_args,
            ],
            cwd=REPO_ROOT,
            env=environment,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.base_url = self._wait_started()

    def _wait_started(self) -> str:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            match = _STARTED.search(self.log())
            if match:
                return match.group(1)
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"host did not start:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    @property
    def keys(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.keys_path.read_text())
        return result

    def stop(self, timeout: float = 30.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self._log.close()
        return int(self.process.returncode)

    def records(self, function: str | None = None) -> list[dict[str, Any]]:
        if not self.record_path.exists():
            return []
        rows = [json.loads(line) for line in self.record_path.read_text().splitlines() if line]
        return [row for row in rows if function is None or row["function"] == function]


def wait_for(condition: Callable[[], Any], timeout: float = 45.0, what: str = "condition") -> Any:
    """Poll ``condition`` until it returns something truthy (never a timing assertion)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def http(
    method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, list[str]], bytes]:
    """(status, headers with every value, body) of one loopback request."""
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            status, message, payload = response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        status, message, payload = error.code, error.headers, error.read()
    collected: dict[str, list[str]] = {}
    for key, value in message.items():
        collected.setdefault(key.lower(), []).append(value)
    return int(status), collected, bytes(payload)
