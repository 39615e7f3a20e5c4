"""The local host: wires configuration, the language worker and every trigger together.

Start order: settings into the environment, the gRPC server and the worker process (the
runtime indexes the app at worker init; any indexing error fails the start, as it fails
the app in Azure), function metadata and loads, HTTP server (so webhooks answer), blob
watcher (subscribes synchronously), Service Bus listeners, timers. Stop order (graceful
drain): stop accepting HTTP and stop the trigger sources, let running invocations finish
for up to ``drain_timeout_s``, close receivers, then terminate the worker.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from functions_host.blob_watcher import BlobWatcher
from functions_host.config import HostConfig, apply_values_to_environment, load_host_config
from functions_host.eventgrid_delivery import RetryPolicy
from functions_host.functions import FunctionSpec, spec_from_metadata
from functions_host.http_server import Dispatcher, LocalHttpServer
from functions_host.invocation import Invoker
from functions_host.keys import HostKeys, load_or_create_keys
from functions_host.language_worker import LanguageWorker, WorkerError
from functions_host.servicebus_listener import ServiceBusListener
from functions_host.settlement import MessageLocks, SettlementService
from functions_host.singleton import ListenerLock
from functions_host.timers import TimerRunner
from functions_host.worker_logs import WorkerLogPrinter

log = logging.getLogger("host")

TriggerSource = ServiceBusListener | TimerRunner


@dataclass(frozen=True)
class SourceContext:
    """What a trigger source needs from the host to start."""

    invoker: Invoker
    config: HostConfig
    locks: MessageLocks
    host_id: str


@dataclass(frozen=True)
class Address:
    """Where the host answers, for the start-up listing of the functions."""

    base_url: str
    route_prefix: str


@dataclass(frozen=True)
class TriggerKind:
    """What the host does for one trigger type. ``source``: the source it starts for each
    function of the kind, or None when the HTTP server or the blob watcher (both started
    for every app) serves it; ``describe``: the function's line in the start-up listing."""

    describe: Callable[[FunctionSpec, Address], str]
    source: Callable[[FunctionSpec, SourceContext], TriggerSource] | None = None


def _describe_http(spec: FunctionSpec, where: Address) -> str:
    methods = ",".join(spec.trigger.get("methods") or ["ALL"])
    route = spec.trigger.get("route") or spec.name
    prefix = f"/{where.route_prefix}" if where.route_prefix else ""
    return f"[{methods}] {where.base_url}{prefix}/{route}"


def _describe_event_grid(spec: FunctionSpec, where: Address) -> str:
    webhook = f"{where.base_url}/runtime/webhooks/eventgrid"
    return f"eventGridTrigger {webhook}?functionName={spec.name}"


def _describe_blob(spec: FunctionSpec, where: Address) -> str:
    source = spec.trigger.get("source", "LogsAndContainerScan")
    return f"blobTrigger {spec.trigger.get('path')} (source {source})"


def _describe_service_bus(spec: FunctionSpec, where: Address) -> str:
    trigger = spec.trigger
    entity = (
        trigger.get("queueName") or f"{trigger.get('topicName')}/{trigger.get('subscriptionName')}"
    )
    cardinality = str(trigger.get("cardinality", "one")).lower()
    return f"serviceBusTrigger {entity} (cardinality {cardinality})"


def _describe_by_type(spec: FunctionSpec, where: Address) -> str:
    return f"{spec.trigger_type} {spec.trigger.get('schedule', '')}".rstrip()


def _service_bus_listener(spec: FunctionSpec, context: SourceContext) -> TriggerSource:
    return ServiceBusListener(spec, context.invoker, context.config.service_bus, context.locks)


def _timer_runner(spec: FunctionSpec, context: SourceContext) -> TriggerSource:
    lock = ListenerLock.for_timer(context.host_id, spec.name)
    return TimerRunner(spec, context.invoker, lock)


# Every trigger type this host runs, in one place: a new binding kind is one row here
# (and its source's module); a function of any other type is listed as not supported.
TRIGGER_KINDS: dict[str, TriggerKind] = {
    "httpTrigger": TriggerKind(_describe_http),
    "eventGridTrigger": TriggerKind(_describe_event_grid),
    "blobTrigger": TriggerKind(_describe_blob),
    "serviceBusTrigger": TriggerKind(_describe_service_bus, _service_bus_listener),
    "timerTrigger": TriggerKind(_describe_by_type, _timer_runner),
}
SUPPORTED_TRIGGERS = frozenset(TRIGGER_KINDS)


@dataclass(frozen=True)
class HostOptions:
    script_root: Path
    settings_path: Path | None = None
    keys_path: Path | None = None
    bind: str = "127.0.0.1"
    port: int | None = None
    drain_timeout_s: float = 30.0
    blob_poll_interval_s: float = 2.0
    eventgrid_time_scale: float = 1.0
    disabled: tuple[str, ...] = ()


class LocalHost:
    def __init__(self, options: HostOptions) -> None:
        self.options = options
        self.config: HostConfig = load_host_config(options.script_root, options.settings_path)
        self.keys: HostKeys = load_or_create_keys(
            options.keys_path or options.script_root / ".local" / "host-keys.json"
        )
        self.functions: list[FunctionSpec] = []
        self._server: LocalHttpServer | None = None
        self._watcher: BlobWatcher | None = None
        self._sources: list[TriggerSource] = []
        self._invoker: Invoker | None = None
        self._worker: LanguageWorker | None = None
        self._locks = MessageLocks()
        self.stopped = threading.Event()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_port)

    @property
    def base_url(self) -> str:
        return f"http://{self.options.bind}:{self.port}"

    def _enabled(self, spec: FunctionSpec) -> bool:
        disabled = os.environ.get(f"AzureWebJobs.{spec.name}.Disabled", "").lower() in ("1", "true")
        return not disabled and spec.name not in self.options.disabled

    def start(self) -> None:
        skipped = apply_values_to_environment(self.config.values)
        for name in skipped:
            log.info(
                "Skipping '%s' from local settings as it's already defined in the environment", name
            )
        all_functions, invoker = self._start_worker()
        self.functions = [f for f in all_functions if self._enabled(f)]
        for spec in all_functions:
            if spec.trigger_type not in SUPPORTED_TRIGGERS:
                log.warning(
                    "function %s: %s is not supported by this host; it will not run",
                    spec.name,
                    spec.trigger_type,
                )
        dispatcher = Dispatcher(self.functions, invoker, self.keys, self.config.route_prefix)
        port = self.config.local_http_port if self.options.port is None else self.options.port
        try:
            self._server = LocalHttpServer((self.options.bind, port), dispatcher)
        except OSError as error:
            raise SystemExit(
                f"port {port} on {self.options.bind} is not available: {error.strerror}"
            ) from error
        self._server.start()
        self._watcher = BlobWatcher(
            self.functions,
            self.base_url,
            self.keys.system_keys["blobs_extension"],
            _host_id(self.options.script_root),
            poll_interval_s=self.options.blob_poll_interval_s,
            retry=RetryPolicy(time_scale=self.options.eventgrid_time_scale),
        )
        self._watcher.start()
        context = SourceContext(
            invoker, self.config, self._locks, _host_id(self.options.script_root)
        )
        for spec in self.functions:
            kind = TRIGGER_KINDS.get(spec.trigger_type)
            if kind is not None and kind.source is not None:
                source = kind.source(spec, context)
                self._sources.append(source)
                source.start()
        self._log_functions()

    def _start_worker(self) -> tuple[list[FunctionSpec], Invoker]:
        """Start the worker (the runtime indexes the app), then read and load the functions."""
        # Invocation id -> function name: the invoker fills it, the log printer reads it.
        running: dict[str, str] = {}
        printer = WorkerLogPrinter(running)
        settlement = SettlementService(self._locks)
        self._worker = LanguageWorker(
            self.options.script_root, printer.print, services=[settlement.register]
        )
        self._worker.start()
        specs: list[FunctionSpec] = []
        for metadata in self._worker.functions_metadata():
            spec = spec_from_metadata(metadata)
            if spec is None:
                continue
            try:
                self._worker.load(metadata)
            except WorkerError as error:
                log.error("Function '%s' failed to load: %s", spec.name, error)
                continue
            specs.append(spec)
        self._invoker = Invoker(self._worker, self.config.function_timeout_s, running)
        return specs, self._invoker

    def _log_functions(self) -> None:
        lines = ["Functions:"]
        where = Address(self.base_url, self.config.route_prefix)
        for spec in self.functions:
            kind = TRIGGER_KINDS.get(spec.trigger_type)
            describe = kind.describe if kind is not None else _describe_by_type
            detail = describe(spec, where)
            lines.append(f"    {spec.name}: {detail}")
        log.info("\n".join(lines))

    def stop(self) -> None:
        """Graceful drain; safe to call more than once."""
        if self.stopped.is_set():
            return
        self.stopped.set()
        log.info(
            "Stopping host: draining running invocations (up to %.0fs)",
            self.options.drain_timeout_s,
        )
        if self._server is not None:
            self._server.dispatcher.stopping = True
            threading.Thread(target=self._server.shutdown, daemon=True).start()
        sources = list(self._sources)
        for source in sources:
            source.stop()
        if self._watcher is not None:
            self._watcher.stop()
        if self._invoker is not None:
            self._invoker.stop_accepting()
            if not self._invoker.drain(self.options.drain_timeout_s):
                log.warning(
                    "%d invocation(s) still running after the drain timeout",
                    self._invoker.in_flight,
                )
        for source in sources:
            source.join(10)
        if self._watcher is not None:
            self._watcher.join(5)
        if self._server is not None:
            self._server.wait_idle(5)
            self._server.server_close()
        if self._worker is not None:
            self._worker.stop()
        log.info("Host stopped")

    def kill_worker(self) -> None:
        """Kill the worker's process group if it still runs: the host is ending without a
        clean stop (a start that failed half-way, an unexpected error), and a worker left
        behind would keep its Service Bus locks and the app's resources."""
        if self._worker is not None:
            self._worker.kill()


def _host_id(script_root: Path) -> str:
    """The host id of the app, as the Functions host has one: the app setting
    ``AzureFunctionsWebHost__hostid``, else one from the app's folder (every host of one
    app shares it: its timers' singleton locks and blob receipts)."""
    configured = os.environ.get("AzureFunctionsWebHost__hostid", "").strip()  # noqa: SIM112 (its name)
    if configured:
        return configured[:32]
    name = re.sub(r"[^a-z0-9-]", "-", script_root.resolve().name.lower()).strip("-")
    return (name or "local")[:32] + "-local"
