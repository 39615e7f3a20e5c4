"""Azurite, the storage emulator, as a child process.

Azurite comes from a project's pinned npm package (``node_modules/.bin``, found from the
given folder upwards, as npm does; else from PATH). ``run_azurite`` is the throwaway kind
tests and benchmarks use: the blob service alone, in memory, on a port Azurite picks
itself (read back from its log, so parallel runs never race for a port).
``start_azurite`` is what a launcher uses: the services and ports it names, optionally
persistent.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from local_processes.child import Child, StartError
from local_processes.ports import wait_for_ports

# The documented, public development-storage account of Azurite (not a secret).
ACCOUNT_NAME = "devstoreaccount1"
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
STARTUP_TIMEOUT_S = 30.0
_BLOB_LISTENING = re.compile(r"Blob service successfully listens on http://[\d.]+:(\d+)")
_COMMON_FLAGS = ("--skipApiVersionCheck", "--loose", "--disableTelemetry")


@dataclass(frozen=True)
class Azurite:
    """A running Azurite blob service."""

    blob_endpoint: str

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT_NAME};"
            f"AccountKey={ACCOUNT_KEY};BlobEndpoint={self.blob_endpoint};"
        )


def find_azurite(executable: str = "azurite", start: Path | None = None) -> str:
    """``node_modules/.bin/<executable>`` in ``start`` (default: cwd) or above it, else PATH."""
    folder = (start or Path.cwd()).resolve()
    for candidate in (folder, *folder.parents):
        local = candidate / "node_modules" / ".bin" / executable
        if local.exists():
            return str(local)
    found = shutil.which(executable)
    if found is None:
        raise StartError(f"Azurite is not installed: run `npm ci` ({executable} not found)")
    return found


def start_azurite(
    ports: Mapping[str, int],
    log_path: Path,
    *,
    location: Path | None = None,
    root: Path | None = None,
    timeout: float = STARTUP_TIMEOUT_S,
) -> Child:
    """Azurite serving ``ports`` ({"Blob": 10000, "Queue": ..., "Table": ...}), ready.

    ``location`` keeps its data on disk there; without it nothing is kept. Returns the
    running child (the caller stops it); a failed start stops it and raises StartError.
    """
    services = set(ports)
    executable = "azurite" if services - {"Blob"} else "azurite-blob"
    command = [find_azurite(executable, root)]
    for service, port in ports.items():
        host = service.lower()
        command += [f"--{host}Host", "127.0.0.1", f"--{host}Port", str(port)]
    command += [*_COMMON_FLAGS, *(["--location", str(location)] if location else [])]
    if location is None:
        command.append("--inMemoryPersistence")
    else:
        location.mkdir(parents=True, exist_ok=True)
    child = Child("Azurite", command, log_path, cwd=location or log_path.parent)
    try:
        if any(port == 0 for port in ports.values()):
            child.wait_for(_BLOB_LISTENING, timeout)
        else:
            wait_for_ports(ports.values(), child, "azurite", timeout)
    except BaseException:
        child.stop()
        raise
    return child


def blob_port(child: Child) -> int:
    """The port a started Azurite's blob service listens on (as its log says)."""
    return int(child.wait_for(_BLOB_LISTENING, 0).group(1))


@contextmanager
def run_azurite(root: Path | None = None) -> Iterator[Azurite]:
    """Azurite's blob service, in memory, on a free port; stopped on exit (tests, benchmarks)."""
    workdir = Path(tempfile.mkdtemp(prefix="azurite-"))
    try:
        child = start_azurite({"Blob": 0}, workdir / "azurite.log", root=root)
        try:
            port = blob_port(child)
            yield Azurite(blob_endpoint=f"http://127.0.0.1:{port}/{ACCOUNT_NAME}")
        finally:
            child.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
