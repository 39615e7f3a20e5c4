"""The local stack, piece by piece, so that chaos can strike one piece at a time.

The pieces and settings are those of ``python -m devtools.stack`` (``make run``): Azurite
(blob, queue, table), the Service Bus emulator and the Event Grid namespace emulator with
the repository's entity files, the containers the app declares, and the local Functions
host on the app. Here the host can be killed (SIGKILL, no drain) and started again on the
same port; Azurite stopped and started again on the same ports with its data on disk
(``--location``), as a restarted storage service keeps its data; and the Service Bus
emulator killed (SIGKILL) and started again on the same ports, with its data folder when
the stack has one (``servicebus_data``, as ``make run`` gives it ``.local/servicebus``).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from pathlib import Path

from devtools.emulator_restarts import SupervisedEmulator
from devtools.stack import (
    EMULATOR_CONFIG,
    EVENTGRID_CONFIG,
    app_settings,
    ensure_containers,
    eventgrid_port,
    runtime_counts_port,
    servicebus_endpoint,
    storage_ports,
)
from eventgrid_emulator.process import EventGridEmulatorProcess
from functions_host.process import HostProcess
from local_processes import Child, start_azurite

HOST_STARTUP_TIMEOUT_S = 90.0


@dataclass
class ChaosStack:
    """Every process of the local stack, started from one settings file."""

    root: Path
    workdir: Path
    settings_path: Path
    values: dict[str, str]
    http_port: int
    base_url: str = ""
    key: str = ""
    servicebus_data: Path | None = None
    host_restarts: int = 0
    _azurite: Child | None = field(default=None, repr=False)
    _servicebus: SupervisedEmulator | None = field(default=None, repr=False)
    _host: HostProcess | None = field(default=None, repr=False)
    _others: list[Child] = field(default_factory=list, repr=False)

    @property
    def storage_connection_string(self) -> str:
        return self.values["Storage"]

    @property
    def servicebus_connection_string(self) -> str:
        return self.values["ServiceBusConnection"]

    @property
    def runtime_counts_url(self) -> str:
        return self.values["ServiceBusRuntimeCountsUrl"]

    def start(self) -> None:
        """Azurite, both emulators, the containers, then the host (as the launcher does)."""
        self.start_storage()
        self.start_servicebus()
        eventgrid = eventgrid_port(self.values)
        if eventgrid is not None:
            namespace = EventGridEmulatorProcess(
                EVENTGRID_CONFIG,
                self.workdir / "eventgrid-emulator.log",
                port=eventgrid,
                storage=self.values.get("Storage"),
            )
            self._others.append(namespace.child)
            namespace.wait_ready(timeout=30)
        ensure_containers(app_settings(self.settings_path, self.values))
        self.start_host()

    def start_storage(self) -> None:
        """Azurite on the settings' ports, its data in ``workdir/azurite`` (kept across stops)."""
        self._azurite = start_azurite(
            storage_ports(self.values),
            self.workdir / "azurite.log",
            location=self.workdir / "azurite",
            root=self.root,
        )

    def stop_storage(self) -> None:
        """Azurite stops as a service does (SIGTERM: it writes its data out first)."""
        if self._azurite is not None:
            self._azurite.stop(signal.SIGTERM, timeout=20)
            self._azurite = None

    def start_servicebus(self) -> None:
        """The Service Bus emulator on the settings' ports (the same ones each time), its
        messages in ``servicebus_data`` when set."""
        if self._servicebus is None:
            port, sas_key = servicebus_endpoint(self.values)
            self._servicebus = SupervisedEmulator(
                EMULATOR_CONFIG,
                self.workdir / "servicebus-emulator.log",
                port=port,
                admin_port=runtime_counts_port(self.values),
                sas_key=sas_key,
                data_dir=self.servicebus_data,
            )
        self._servicebus.start()

    def kill_servicebus(self) -> None:
        """SIGKILL: the emulator writes nothing more; what it keeps is what it had written."""
        if self._servicebus is not None:
            self._servicebus.child.stop(signal.SIGKILL, timeout=10)

    def start_host(self) -> None:
        host = HostProcess(
            self.root,
            self.settings_path,
            self.workdir / f"host-{self.host_restarts}.log",
            port=self.http_port,
            keys_path=self.workdir / "host-keys.json",
        )
        self._host = host
        self.base_url = host.wait_started(timeout=HOST_STARTUP_TIMEOUT_S)
        self.key = str(host.keys["functionKeys"]["default"])

    def kill_host(self) -> None:
        """SIGKILL: no drain, no settlement; locks held by the host expire at the broker."""
        if self._host is not None:
            self._host.child.stop(signal.SIGKILL, timeout=10)
            self._host = None
            self.host_restarts += 1

    def log_tail(self, characters: int = 6000) -> str:
        """The end of the current host's log (for a failing run's report)."""
        path = self.workdir / f"host-{self.host_restarts}.log"
        return path.read_text(errors="replace")[-characters:] if path.exists() else ""

    def stop(self) -> None:
        if self._host is not None:
            self._host.stop(timeout=30)
            self._host = None
        for child in reversed(self._others):
            child.stop(signal.SIGTERM, timeout=15)
        self._others.clear()
        if self._servicebus is not None:
            self._servicebus.child.stop(signal.SIGTERM, timeout=15)
            self._servicebus = None
        self.stop_storage()
