"""The emulator as a child process: start it, read its ready line, stop it.

What the launcher (``devtools.stack``), the test fixtures and the benchmarks use to run
``python -m servicebus_emulator``; the process handling itself is ``local_processes.Child``.
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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from local_processes import Child

SAS_KEY_NAME = "RootManageSharedAccessKey"
SAS_KEY_VALUE = "SAS_KEY_VALUE"
STARTUP_TIMEOUT_S = 30.0
READY = re.compile(r"ready amqp=(?P<host>[\d.]+):(?P<port>\d+) admin=(?P<admin>http://\S+)")


@dataclass(frozen=True)
class ServiceBusEmulator:
    """Where a running emulator listens and how to reach it."""

    host: str
    port: int
    connection_string: str
    config_path: Path
    admin_url: str
    log_path: Path | None = field(default=None, compare=False)
    data_dir: Path | None = field(default=None, compare=False)

    def connection_string_with_key(self, key: str) -> str:
        """The same endpoint signed with another SAS key (for negative auth tests)."""
        return self.connection_string.replace(
            f"SharedAccessKey={SAS_KEY_VALUE}", f"SharedAccessKey={key}"
        )

    def runtime_properties(self, entity_path: str) -> dict[str, Any]:
        """Runtime counts of a queue (``name``) or subscription (``topic/Subscriptions/sub``)."""
        url = f"{self.admin_url}/runtime/{urllib.parse.quote(entity_path)}"
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 (loopback http)
            result: dict[str, Any] = json.loads(response.read())
            return result


def connection_string(host: str, port: int, key: str = SAS_KEY_VALUE) -> str:
    return (
        f"Endpoint=sb://{host}:{port};SharedAccessKeyName={SAS_KEY_NAME};"
        f"SharedAccessKey={key};UseDevelopmentEmulator=true"
    )


class EmulatorProcess:
    """``python -m servicebus_emulator`` as a child; ``wait_ready`` reads its ready line.

    Port 0 (the default) lets the emulator pick free ports itself, so runs in parallel
    never collide. ``sas_key`` None starts it without signature checks. ``data_dir`` keeps
    its messages in that folder across restarts (None: nothing is kept).
    """

    def __init__(
        self,
        config_path: Path,
        log_path: Path | None,
        *,
        port: int = 0,
        admin_port: int = 0,
        sas_key: str | None = SAS_KEY_VALUE,
        data_dir: Path | None = None,
    ) -> None:
        self.config_path = config_path
        self.log_path = log_path
        self.sas_key = sas_key
        self.data_dir = data_dir
        command = [sys.executable, "-m", "servicebus_emulator", "--config", str(config_path),
                   "--host", "127.0.0.1", "--port", str(port),
                   "--admin-port", str(admin_port)]  # fmt: skip
        if sas_key:
            command += ["--sas-key", sas_key]
        if data_dir is not None:
            command += ["--data-dir", str(data_dir)]
        self.child = Child("Service Bus emulator", command, log_path)

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT_S) -> ServiceBusEmulator:
        match = self.child.wait_for(READY, timeout)
        host, port = match["host"], int(match["port"])
        return ServiceBusEmulator(
            host=host,
            port=port,
            connection_string=connection_string(host, port, self.sas_key or SAS_KEY_VALUE),
            config_path=self.config_path,
            admin_url=match["admin"],
            log_path=self.log_path,
            data_dir=self.data_dir,
        )

    def stop(self, timeout: float = 10.0) -> int | None:
        return self.child.stop(signal.SIGTERM, timeout)

    def kill(self, timeout: float = 10.0) -> int | None:
        """SIGKILL: no clean shutdown (what a crash does to the data folder)."""
        return self.child.stop(signal.SIGKILL, timeout)


@contextmanager
def run_emulator(
    config_path: Path, log_dir: Path | None = None, data_dir: Path | None = None
) -> Iterator[ServiceBusEmulator]:
    """An emulator with ``config_path`` on free ports until the block ends (tests, benchmarks);
    with ``data_dir`` its messages are kept there across runs."""
    workdir = log_dir or Path(tempfile.mkdtemp(prefix="servicebus-emulator-"))
    emulator = EmulatorProcess(config_path.resolve(), workdir / "emulator.log", data_dir=data_dir)
    try:
        yield emulator.wait_ready()
    finally:
        emulator.stop()
        if log_dir is None:
            shutil.rmtree(workdir, ignore_errors=True)
