"""The emulator as a child process: start it, read its ready line, stop it; its controls.

What launchers, the test fixtures and benchmarks use to run ``python -m openai_emulator``;
the process handling itself is ``local_processes.Child`` (own session, this run's log,
ready line, stop with a signal), as for the other emulators. ``OpenAIEmulator`` also
drives the ``/_emulator/`` control endpoints over urllib.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import sys
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from local_processes import Child
from openai_emulator.chat import DEFAULT_LIMITER, Limiter, Quota, quota_fields
from openai_emulator.server import DEFAULT_KEY

STARTUP_TIMEOUT_S = 30.0
API_VERSION = "2025-04-01-preview"  # a dated version clients may send; any is accepted
READY = re.compile(r"ready http=(?P<endpoint>http://[\d.]+:\d+) auto-advance=(?P<auto>\S+)")


@dataclass(frozen=True)
class OpenAIEmulator:
    """Where a running emulator listens, the key that opens it, and its controls."""

    endpoint: str  # what AzureOpenAI(azure_endpoint=...) takes
    api_key: str
    log_path: Path | None = field(default=None, compare=False)

    @property
    def v1_base_url(self) -> str:
        """What OpenAI(base_url=...) takes for the v1 API."""
        return f"{self.endpoint}/openai/v1/"

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        request = urllib.request.Request(  # noqa: S310 (the emulator's own http URL)
            self.endpoint + path,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 (loopback)
            return json.loads(response.read())

    def advance(self, batch_id: str, to: str | None = None) -> dict[str, Any]:
        """Move the batch one status on, or up to ``to``; answers the batch."""
        body = {} if to is None else {"to": to}
        path = f"/_emulator/batches/{urllib.parse.quote(batch_id)}/advance"
        result: dict[str, Any] = self._call("POST", path, body)
        return result

    def expire(self, batch_id: str, completed_lines: int) -> dict[str, Any]:
        """End the batch ``expired`` with answers for its first ``completed_lines`` lines."""
        path = f"/_emulator/batches/{urllib.parse.quote(batch_id)}/expire"
        result: dict[str, Any] = self._call("POST", path, {"completed_lines": completed_lines})
        return result

    def set_quota(self, limit: int | None, deployment: str | None = None) -> None:
        """The enqueued-token limit from now on (None: unlimited): every deployment's not
        named otherwise, or ``deployment``'s own."""
        body: dict[str, Any] = {"enqueued_token_limit": limit}
        if deployment is not None:
            body["deployment"] = deployment
        self._call("PUT", "/_emulator/quota", body)

    def stats(self) -> dict[str, Any]:
        """Counts of uploads and batches, and each batch's status, file and line count."""
        result: dict[str, Any] = self._call("GET", "/_emulator/stats")
        return result

    def reset(self) -> None:
        """Forget every file and batch, the chat deployments' quotas and counts (and the
        enqueued-token quota set at runtime)."""
        self._call("POST", "/_emulator/reset", {})

    def set_deployment(
        self,
        name: str,
        tokens_per_minute: int | None = None,
        requests_per_minute: int | None = None,
        latency_ms: int = 0,
        limiter: Limiter = DEFAULT_LIMITER,
    ) -> dict[str, Any]:
        """A chat deployment's quota, its limiter (``"window"``: 10-second windows, as
        Azure's; ``"minute"``: a sliding minute) and latency from now on (its counts start
        over)."""
        path = f"/_emulator/deployments/{urllib.parse.quote(name)}"
        body = {
            "tokens_per_minute": tokens_per_minute,
            "requests_per_minute": requests_per_minute,
            "latency_ms": latency_ms,
            "limiter": limiter,
        }
        result: dict[str, Any] = self._call("PUT", path, body)
        return result

    def chat_stats(self) -> dict[str, Any]:
        """Per chat deployment: calls served and throttled, tokens, its quota (``/stats``)."""
        result: dict[str, Any] = self._call("GET", "/stats")
        return result


class OpenAIEmulatorProcess:
    """``python -m openai_emulator`` as a child; ``wait_ready`` reads its ready line.

    Port 0 (the default) lets the emulator pick a free port itself, so parallel runs never
    collide.
    """

    def __init__(
        self,
        log_path: Path | None,
        *,
        port: int = 0,
        api_key: str = DEFAULT_KEY,
        auto_advance: float = 0.0,
        max_lines: int | None = None,
        max_bytes: int | None = None,
        enqueued_token_limit: int | None = None,
        deployment_token_limits: Mapping[str, int] | None = None,
        deployments: tuple[Quota, ...] = (),
    ) -> None:
        self.log_path = log_path
        self.api_key = api_key
        command = [
            sys.executable,
            "-m",
            "openai_emulator",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--key",
            api_key,
            "--auto-advance",
            repr(auto_advance),
        ]
        for option, value in (
            ("--max-lines", max_lines),
            ("--max-bytes", max_bytes),
            ("--enqueued-token-limit", enqueued_token_limit),
        ):
            if value is not None:
                command += [option, str(value)]
        for name, limit in (deployment_token_limits or {}).items():
            command += ["--enqueued-token-limit", f"{name}={limit}"]
        for quota in deployments:
            name, tokens, requests, latency, limiter = quota_fields(quota)
            command += [
                "--deployment",
                f"{name}={tokens or ''},{requests or ''},{latency},{limiter}",
            ]
        self.child = Child("OpenAI emulator", command, log_path)

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT_S) -> OpenAIEmulator:
        match = self.child.wait_for(READY, timeout)
        return OpenAIEmulator(match["endpoint"], self.api_key, self.log_path)

    def stop(self, timeout: float = 10.0) -> int | None:
        return self.child.stop(signal.SIGTERM, timeout)


@contextmanager
def run_emulator(
    *, auto_advance: float = 0.0, log_dir: Path | None = None
) -> Iterator[OpenAIEmulator]:
    """An emulator on a free port until the block ends."""
    workdir = log_dir or Path(tempfile.mkdtemp(prefix="openai-emulator-"))
    process = OpenAIEmulatorProcess(workdir / "emulator.log", auto_advance=auto_advance)
    try:
        yield process.wait_ready()
    finally:
        process.stop()
        if log_dir is None:
            shutil.rmtree(workdir, ignore_errors=True)
