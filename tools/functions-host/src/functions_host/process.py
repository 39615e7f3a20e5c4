"""The local host as a child process: start ``python -m functions_host``, wait, stop.

What the launcher (``devtools.stack``), the test fixtures and the benchmarks use; the
process handling itself is ``local_processes.Child``.
"""

from __future__ import annotations

import json
import re
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from local_processes import Child

STARTED = re.compile(r"Host started: (http://\S+)")
STARTUP_TIMEOUT_S = 60.0


class HostProcess:
    """One host; its output goes to ``log_path`` (or to stdout when None).

    ``keys_path`` defaults to the host's own default, ``<script-root>/.local/host-keys.json``.
    Stopping sends SIGINT (Ctrl-C): the host drains running invocations first.
    """

    def __init__(
        self,
        script_root: Path,
        settings_path: Path,
        log_path: Path | None,
        *,
        port: int = 0,
        keys_path: Path | None = None,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.keys_path = keys_path or script_root / ".local" / "host-keys.json"
        command = [sys.executable, "-m", "functions_host", "--script-root", str(script_root),
                   "--settings", str(settings_path), "--keys-file", str(self.keys_path),
                   "--port", str(port), *extra_args]  # fmt: skip
        self.child = Child("host", command, log_path, env=env)
        self.base_url = ""

    def wait_started(self, timeout: float = STARTUP_TIMEOUT_S) -> str:
        """The host's base URL once every trigger listens (its ``Host started`` line)."""
        self.base_url = self.child.wait_for(STARTED, timeout).group(1)
        return self.base_url

    @property
    def keys(self) -> dict[str, Any]:
        """The keys file: ``masterKey``, ``functionKeys``, ``systemKeys``."""
        result: dict[str, Any] = json.loads(self.keys_path.read_text())
        return result

    def log(self) -> str:
        return self.child.output()

    def stop(self, timeout: float = 30.0) -> int | None:
        return self.child.stop(signal.SIGINT, timeout)
