"""The sample app on the local host for tests, and what its functions record."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from functions_host.process import HostProcess

SAMPLE_APP = Path(__file__).with_name("sample_app")
STARTUP_TIMEOUT_S = 45.0
# Blob scans and Event Grid retries at test speed.
SAMPLE_HOST_ARGS = ("--blob-poll-interval", "0.3", "--eventgrid-retry-scale", "0.02")


class SampleHost(HostProcess):
    """The sample app on one host; settings, keys and log live in ``workdir``."""

    def __init__(self, workdir: Path, values: dict[str, str], *extra_args: str) -> None:
        self.workdir = workdir
        self.settings_path = workdir / "local.settings.json"
        self.record_path = Path(values["SAMPLE_RECORD_FILE"])
        self.settings_path.write_text(json.dumps({"IsEncrypted": False, "Values": values}))
        super().__init__(
            SAMPLE_APP,
            self.settings_path,
            workdir / f"host-{time.monotonic_ns()}.log",
            keys_path=workdir / "host-keys.json",
            extra_args=[*SAMPLE_HOST_ARGS, *extra_args],
            # The settings file is what the test means: no inherited variable overrides it.
            env={k: v for k, v in os.environ.items() if k not in values},
        )
        try:
            self.wait_started(STARTUP_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise

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
        time.sleep(0.05)
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
