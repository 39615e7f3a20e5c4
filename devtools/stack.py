"""``python -m devtools.stack`` (``make run``): Azurite, the emulators and the app.

The emulators are the Service Bus emulator, the Event Grid namespace emulator (the pull
door's namespace, at ``EventGridPull__namespaceEndpoint``) and the Azure OpenAI emulator
(the Global Batch lane's service, and chat completions for the catalog's aliases that point
at it: ``GlobalBatch__endpoint`` or ``AzureOpenAI__endpoint`` on this machine).

The model catalog is checked before anything starts (``models.json``, or ``ModelCatalog``),
and the tenant catalog against it (``tenants.json`` when there is one, or
``TenantCatalog``): a catalog the app could not serve stops the launch with the file, the
alias or tenant and the field named, and the banner lists the aliases served.

Ports come from the local settings connection strings (``AzureWebJobsStorage``/``Storage``
endpoints, ``ServiceBusConnection``). A port that already answers is probed: Azurite (HTTP
with an ``x-ms-request-id`` or ``Server: Azurite-*`` header), an AMQP listener (the
Service Bus emulator) or an HTTP emulator answering ``/health`` is reused, anything else
stops the launch with a message naming the port.
Azurite keeps its data in ``.local/azurite`` and the Service Bus emulator its messages in
``.local/servicebus`` (``--servicebus-data DIR`` for another folder), so jobs, blobs and
queued messages survive a restart (``--in-memory`` to start clean).
A Service Bus emulator started here that dies is started again on the same ports with the
same data folder while the host keeps running (``devtools.emulator_restarts``); only
repeated fast failures (5 within a minute) stop the stack.
``--instances N`` runs N hosts of the app on the same queues and storage, as the platform
scales it out: competing consumers on every queue, HTTP on consecutive ports (the first
is the one printed), timers once per schedule across them (the hosts' listener locks),
each instance's share of a model quota from the live ones.

Child processes run in their own sessions: Ctrl-C reaches only this launcher, which drains
the hosts first, then stops the emulators and Azurite it started, and nothing else.

Telemetry takes the one path it takes in Azure: the worker runtime configures Azure Monitor
when ``PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY`` is true and exports to
``APPLICATIONINSIGHTS_CONNECTION_STRING``. ``--telemetry`` points both at a local ingestion
endpoint (``devtools.appinsights``) and prints what arrives; without it the settings decide
(a real Application Insights connection string is used as it is).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit

from devtools.appinsights import IngestionRecorder, LinePrinter
from devtools.emulator_restarts import EmulatorGaveUp, SupervisedEmulator
from eventgrid_emulator.process import EventGridEmulatorProcess
from functions_host.process import HostProcess
from local_processes import PORT_OWNERS, Child, StartError, describe_port, start_azurite
from openai_emulator.chat import QUOTA_SYNTAX, Quota, parse_quota
from openai_emulator.process import OpenAIEmulatorProcess

if TYPE_CHECKING:
    from shared.settings import Settings

REPO_ROOT = Path(__file__).resolve().parents[1]
LOCAL_DIR = REPO_ROOT / ".local"
EMULATOR_CONFIG = REPO_ROOT / "infra" / "local" / "servicebus-emulator.json"
EVENTGRID_CONFIG = REPO_ROOT / "infra" / "local" / "eventgrid-namespace.json"
DEFAULT_STORAGE_PORTS = {"Blob": 10000, "Queue": 10001, "Table": 10002}
TELEMETRY_SWITCH = "PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY"
TELEMETRY_CONNECTION = "APPLICATIONINSIGHTS_CONNECTION_STRING"
# With the local recorder: export within a second (the SDK defaults are 5 s for spans and
# logs, 60 s for metrics), keep every trace (the distro's default samples 5 traces per
# second), and keep the exporter's own reporting (statsbeat, SDK stats) and its remote
# configuration (OneSettings) from calling Microsoft's endpoints from a developer machine.
LOCAL_TELEMETRY_TUNING = {
    "OTEL_BSP_SCHEDULE_DELAY": "500",
    "OTEL_BLRP_SCHEDULE_DELAY": "500",
    "OTEL_METRIC_EXPORT_INTERVAL": "5000",
    "OTEL_TRACES_SAMPLER": "microsoft.fixed_percentage",
    "OTEL_TRACES_SAMPLER_ARG": "1.0",
    "APPLICATIONINSIGHTS_STATSBEAT_DISABLED_ALL": "true",
    "APPLICATIONINSIGHTS_SDKSTATS_DISABLED": "true",
    "APPLICATIONINSIGHTS_CONTROLPLANE_DISABLED": "true",
}


class StackError(Exception):
    """The stack cannot start; the message says what to do."""


def connection_parts(connection_string: str) -> dict[str, str]:
    parts = (item.split("=", 1) for item in connection_string.split(";") if "=" in item)
    return {key.strip(): value.strip() for key, value in parts}


def storage_ports(values: dict[str, str]) -> dict[str, int]:
    text = values.get("AzureWebJobsStorage") or values.get("Storage") or ""
    parts = connection_parts(text)
    if parts.get("UseDevelopmentStorage", "").lower() == "true" or not parts:
        return dict(DEFAULT_STORAGE_PORTS)
    ports = {}
    for service, default in DEFAULT_STORAGE_PORTS.items():
        endpoint = parts.get(f"{service}Endpoint")
        match = re.match(r"https?://[^:/]+:(\d+)", endpoint or "")
        ports[service] = int(match.group(1)) if match else default
    return ports


def servicebus_endpoint(values: dict[str, str]) -> tuple[int, str | None]:
    parts = connection_parts(values.get("ServiceBusConnection", ""))
    match = re.match(r"sb://[^:/]+:(\d+)", parts.get("Endpoint", ""))
    return (int(match.group(1)) if match else 5672), parts.get("SharedAccessKey")


def ensure_azurite(ports: dict[str, int], in_memory: bool, started: list[Child]) -> None:
    states = {service: describe_port(port) for service, port in ports.items()}
    for service, state in states.items():
        if state not in ("free", "azurite"):
            raise StackError(
                f"port {ports[service]} ({service} storage) is taken by something that is not "
                f"Azurite: it looks like {PORT_OWNERS[state]}; free it or change the endpoints "
                "in local.settings.json (or use --no-azurite)"
            )
    if states["Blob"] == "azurite":
        print(f"Reusing the Azurite already answering on port {ports['Blob']}")
        return
    if any(state == "azurite" for state in states.values()):
        raise StackError(f"an Azurite answers on some of {sorted(ports.values())} but not on blob")
    location = None if in_memory else LOCAL_DIR / "azurite"
    log_path = LOCAL_DIR / "logs" / "azurite.log"
    started.append(start_azurite(ports, log_path, location=location, root=REPO_ROOT))
    print(
        f"Started Azurite on ports {ports['Blob']}-{ports['Table']} (log .local/logs/azurite.log)"
    )


def runtime_counts_port(values: dict[str, str]) -> int:
    """The emulator's admin port from ``ServiceBusRuntimeCountsUrl`` (0: any free port)."""
    url = values.get("ServiceBusRuntimeCountsUrl", "")
    return urlsplit(url).port or 0 if url else 0


def ensure_emulator(
    port: int, sas_key: str | None, admin_port: int, data_dir: Path | None, started: list[Child]
) -> SupervisedEmulator | None:
    """Start (or reuse) the emulator, its messages in ``data_dir`` (None: in memory); the
    emulator started here is returned, to be restarted if it dies (None when reused)."""
    state = describe_port(port)
    if state == "amqp":
        print(f"Reusing the AMQP service (Service Bus emulator) already on port {port}")
        return None
    if state != "free":
        raise StackError(
            f"port {port} (ServiceBusConnection) is taken by something that does not speak AMQP "
            f"(it looks like {PORT_OWNERS[state]}); free it or change ServiceBusConnection in "
            "local.settings.json (or use --no-emulator)"
        )
    emulator = SupervisedEmulator(
        EMULATOR_CONFIG,
        LOCAL_DIR / "logs" / "servicebus-emulator.log",
        port=port,
        admin_port=admin_port,
        sas_key=sas_key,
        data_dir=data_dir,
    )
    try:
        emulator.start()
    finally:
        started.append(emulator.child)
    kept = f"messages in {data_dir}" if data_dir is not None else "messages in memory"
    print(
        f"Started the Service Bus emulator on port {port} (pid {emulator.child.process.pid}, "
        f"{kept}, log .local/logs/servicebus-emulator.log)"
    )
    return emulator


def servicebus_data_dir(requested: Path | None, in_memory: bool) -> Path | None:
    """Where the emulator keeps its messages: ``--servicebus-data``, else
    ``.local/servicebus`` (as Azurite keeps ``.local/azurite``), None with ``--in-memory``."""
    if requested is not None:
        return requested.resolve()
    return None if in_memory else LOCAL_DIR / "servicebus"


def _loopback_port(url: str) -> int | None:
    """The port of ``url`` when it points at this machine, else None."""
    endpoint = urlsplit(url)
    if endpoint.hostname not in ("127.0.0.1", "localhost"):
        return None
    return endpoint.port or 80


def eventgrid_port(values: dict[str, str]) -> int | None:
    """The local namespace emulator's port from ``EventGridPull__namespaceEndpoint``, or None
    when the pull door is off or points elsewhere than this machine."""
    return _loopback_port(values.get("EventGridPull__namespaceEndpoint", ""))


def _is_local_emulator(port: int) -> bool:
    """Whether one of the project's HTTP emulators answers on ``port`` (``GET /health``)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as response:
            return bool(json.loads(response.read()).get("status") == "ok")
    except (OSError, ValueError):
        return False


class _EmulatorProcess(Protocol):
    child: Child

    def wait_ready(self, timeout: float) -> object: ...


def _ensure_http_emulator(
    port: int,
    what: str,
    setting: str,
    flag: str,
    start: Callable[[Path], _EmulatorProcess],
    started: list[Child],
) -> None:
    """Start one of the project's HTTP emulators on ``port`` (its log in .local/logs),
    or reuse the one already there; refuse a port something else holds."""
    state = describe_port(port)
    if state == "http" and _is_local_emulator(port):
        print(f"Reusing {what} already on port {port}")
        return
    if state != "free":
        raise StackError(
            f"port {port} ({setting}) is taken by {PORT_OWNERS[state]}; "
            f"free it or change the endpoint in local.settings.json (or use {flag})"
        )
    log_name = f"{flag.removeprefix('--no-')}-emulator.log"
    process = start(LOCAL_DIR / "logs" / log_name)
    started.append(process.child)
    process.wait_ready(timeout=30)
    print(f"Started {what} on port {port} (log .local/logs/{log_name})")


def ensure_eventgrid(port: int, storage: str, started: list[Child]) -> None:
    """Start (or reuse) the Event Grid namespace emulator; dead letters go to Azurite."""
    _ensure_http_emulator(
        port,
        "the Event Grid namespace emulator",
        "EventGridPull__namespaceEndpoint",
        "--no-eventgrid",
        lambda log: EventGridEmulatorProcess(EVENTGRID_CONFIG, log, port=port, storage=storage),
        started,
    )


# Seconds between the local batch emulator's status steps (validating, in_progress,
# finalizing, completed): a batch-mode request completes in well under a minute locally.
OPENAI_AUTO_ADVANCE_SECONDS = 2.0


def openai_port(values: dict[str, str]) -> int | None:
    """The local Azure OpenAI emulator's port: that of ``GlobalBatch__endpoint`` or
    ``AzureOpenAI__endpoint`` when it points at this machine, else None."""
    for setting in ("GlobalBatch__endpoint", "AzureOpenAI__endpoint"):
        port = _loopback_port(values.get(setting, ""))
        if port is not None:
            return port
    return None


def ensure_openai(port: int, api_key: str, quotas: tuple[Quota, ...], started: list[Child]) -> None:
    """Start (or reuse) the Azure OpenAI emulator: the Global Batch lane's service, and the
    chat completions of the catalog's aliases that point at it (``quotas``: its
    deployments' tokens and requests per minute and latency)."""
    _ensure_http_emulator(
        port,
        "the Azure OpenAI emulator",
        "GlobalBatch__endpoint",
        "--no-openai",
        lambda log: OpenAIEmulatorProcess(
            log,
            port=port,
            api_key=api_key,
            auto_advance=OPENAI_AUTO_ADVANCE_SECONDS,
            deployments=quotas,
        ),
        started,
    )


def model_quota(text: str) -> Quota:
    """``--model-quota DEPLOYMENT=TPM[,RPM[,LATENCY_MS[,LIMITER]]]`` (an empty TPM or RPM:
    no limit; LIMITER ``window``, the default, or ``minute``)."""
    try:
        return parse_quota(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def app_settings(settings_path: Path, values: dict[str, str]) -> Settings:
    """The app's settings as the host will see them: the file's Values, the environment
    winning for the names the file has."""
    from shared.errors import ConfigurationError
    from shared.settings import load_settings

    try:
        return load_settings({k: v for k, v in os.environ.items() if k in values}, settings_path)
    except ConfigurationError as error:
        raise StackError(f"{settings_path.name}: {error}") from None


def served_models(settings: Settings) -> list[str]:
    """The aliases the app will serve, each with its provider and task, after checking the
    model catalog and then the tenant catalog against it as the app will (StackError
    naming the file, the alias or tenant and the field otherwise)."""
    from shared.accounting.tenants import tenant_catalog_for
    from shared.adapters.models import check_catalog
    from shared.errors import ConfigurationError
    from shared.inference.catalog import catalog_for

    try:
        catalog = catalog_for(settings)
        check_catalog(catalog)
    except ConfigurationError as error:
        raise StackError(f"the model catalog cannot be served: {error}") from None
    try:
        tenant_catalog_for(settings, catalog)
    except ConfigurationError as error:
        raise StackError(f"the tenant catalog cannot be used: {error}") from None
    return [f"{alias} ({card.provider}, {card.task.name})" for alias, card in catalog.cards.items()]


def ensure_containers(settings: Settings) -> list[str]:
    from shared.adapters.blob_storage import AzureBlobStore, blob_service_client

    names = settings.containers.names()
    AzureBlobStore(blob_service_client(settings)).ensure_containers(names)
    return names


def local_telemetry_settings(
    connection_string: str, configured: dict[str, str] | None = None
) -> dict[str, str]:
    """The app settings that send the worker's telemetry to ``connection_string``: the
    switch and the connection string, plus ``LOCAL_TELEMETRY_TUNING`` where ``configured``
    (the settings file's Values and the environment) does not already choose."""
    configured = configured or {}
    tuning = {k: v for k, v in LOCAL_TELEMETRY_TUNING.items() if k not in configured}
    return {TELEMETRY_SWITCH: "true", TELEMETRY_CONNECTION: connection_string, **tuning}


def telemetry_destination(values: dict[str, str]) -> str:
    """Where the worker will send telemetry with these settings (environment first, as for
    the host), in words for the banner; never the connection string itself."""
    switch = os.environ.get(TELEMETRY_SWITCH, values.get(TELEMETRY_SWITCH, ""))
    if switch.strip().lower() not in ("1", "true", "t", "yes", "y"):
        return f"off ({TELEMETRY_SWITCH} is not true; --telemetry records it here)"
    connection = os.environ.get(TELEMETRY_CONNECTION, values.get(TELEMETRY_CONNECTION, ""))
    endpoint = connection_parts(connection).get("IngestionEndpoint")
    if not connection.strip():
        return f"on, but {TELEMETRY_CONNECTION} is empty: nothing is exported"
    return f"exported to {endpoint or 'the global Application Insights ingestion endpoint'}"


def start_telemetry_recorder(values: dict[str, str]) -> tuple[IngestionRecorder, dict[str, str]]:
    """The local ingestion endpoint, printing here, and the host's environment that points
    the worker at it (variables in the environment win over the settings file's Values)."""
    from shared.telemetry import QUEUE_GAUGES  # collected at every export: print changes

    printer = LinePrinter(sys.stdout, unless_changed=QUEUE_GAUGES)
    recorder = IngestionRecorder(on_items=printer).start()
    configured = {**values, **os.environ}
    environment = {
        **os.environ,
        **local_telemetry_settings(recorder.connection_string, configured),
    }
    return recorder, environment


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m devtools.stack", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--settings", type=Path, help="default: local.settings.json, else the sample"
    )
    parser.add_argument(
        "--port", type=int, help="HTTP port of the host (default: Host.LocalHttpPort or 7071)"
    )
    parser.add_argument(
        "--no-azurite", action="store_true", help="do not start Azurite (use the one configured)"
    )
    parser.add_argument(
        "--no-emulator", action="store_true", help="do not start the Service Bus emulator"
    )
    parser.add_argument(
        "--no-eventgrid",
        action="store_true",
        help="do not start the Event Grid namespace emulator",
    )
    parser.add_argument(
        "--no-openai",
        action="store_true",
        help="do not start the Azure OpenAI emulator (the Global Batch lane's service, and "
        "chat completions for the aliases pointed at it)",
    )
    parser.add_argument(
        "--in-memory",
        action="store_true",
        help="Azurite and the Service Bus emulator keep nothing on disk",
    )
    parser.add_argument(
        "--servicebus-data",
        type=Path,
        metavar="DIR",
        help="where the Service Bus emulator keeps its messages across restarts "
        "(default .local/servicebus; given, it wins over --in-memory)",
    )
    parser.add_argument(
        "--model-quota",
        type=model_quota,
        action="append",
        default=[],
        metavar=QUOTA_SYNTAX,
        help="limit a deployment of the OpenAI emulator: tokens and requests per minute "
        "(429 with retry-after-ms beyond them), a latency per call, and LIMITER 'window' "
        "(the default: 10-second windows, as Azure) or 'minute' (a sliding minute); "
        "repeatable",
    )
    parser.add_argument(
        "--instances",
        type=int,
        default=1,
        choices=range(1, 17),
        metavar="N",
        help="hosts of the app on the same queues, on consecutive HTTP ports (default 1)",
    )
    parser.add_argument(
        "--telemetry",
        action="store_true",
        help="export the app's telemetry to a local Application Insights ingestion endpoint "
        "and print it here (one 'telemetry:' line per span, metric point, log record)",
    )
    return parser.parse_args(argv)


def missing_settings(values: dict[str, str]) -> list[str]:
    """The sample's settings that ``values`` lacks: a ``local.settings.json`` copied before
    they were added (the Makefile copies the sample only once)."""
    sample = json.loads((REPO_ROOT / "local.settings.sample.json").read_text(encoding="utf-8"))
    return sorted(set(sample.get("Values") or {}) - set(values))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    settings_path = args.settings or next(
        (
            p
            for p in (REPO_ROOT / "local.settings.json", REPO_ROOT / "local.settings.sample.json")
            if p.is_file()
        ),
        None,
    )
    if settings_path is None:
        print("no local.settings.json (copy local.settings.sample.json)", file=sys.stderr)
        return 2
    document = json.loads(settings_path.read_text(encoding="utf-8"))
    values = {str(k): str(v) for k, v in (document.get("Values") or {}).items()}
    if missing := missing_settings(values):
        print(
            f"{settings_path.name} lacks settings that local.settings.sample.json has "
            f"(added since it was copied; the host stops on a %Name% it cannot resolve): "
            f"{', '.join(missing)}. Copy them from the sample.",
            file=sys.stderr,
        )
    http_port = args.port or int((document.get("Host") or {}).get("LocalHttpPort", 7071))
    stop = threading.Event()
    ready = threading.Event()

    def request_stop(signum: int, frame: object) -> None:
        stop.set()
        if not ready.is_set():
            raise KeyboardInterrupt  # abandon start-up; `finally` stops what was started

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    started: list[Child] = []
    recorder: IngestionRecorder | None = None
    try:
        settings = app_settings(settings_path, values)
        models = served_models(settings)
        for port in range(http_port, http_port + args.instances):
            http_state = describe_port(port)
            if http_state != "free":
                owner = PORT_OWNERS.get(http_state, http_state)
                raise StackError(f"port {port} is taken by {owner}: stop it or use --port")
        if not args.no_azurite:
            ensure_azurite(storage_ports(values), args.in_memory, started)
        emulator = None
        if not args.no_emulator:
            port, key = servicebus_endpoint(values)
            data_dir = servicebus_data_dir(args.servicebus_data, args.in_memory)
            emulator = ensure_emulator(port, key, runtime_counts_port(values), data_dir, started)
        admin_url = emulator.admin_url if emulator is not None else None
        eventgrid = eventgrid_port(values)
        if eventgrid is not None and not args.no_eventgrid:
            ensure_eventgrid(eventgrid, values.get("Storage", ""), started)
        openai = openai_port(values)
        if openai is not None and not args.no_openai:
            ensure_openai(
                openai, values.get("GlobalBatch__apiKey", ""), tuple(args.model_quota), started
            )
        containers = ensure_containers(settings)
        host_environment = None
        if args.telemetry:
            recorder, host_environment = start_telemetry_recorder(values)
            telemetry = f"recorded here (local ingestion endpoint {recorder.endpoint})"
        else:
            telemetry = telemetry_destination(values)
        base_urls, key = start_hosts(
            settings_path, http_port, args.instances, host_environment, started
        )
        print_banner(base_urls, key, containers, admin_url, telemetry, models)
        ready.set()
        while not stop.wait(0.5):
            emulator_died = emulator is not None and not emulator.child.running()
            if emulator_died and emulator is not None and not emulator.revive(stop, started):
                break  # stopped (Ctrl-C) while waiting to restart it
            if any(child.process.poll() is not None for child in started):
                crashed = [c.name for c in started if c.process.poll() is not None]
                raise StackError(f"{', '.join(crashed)} stopped unexpectedly (logs in .local/logs)")
        return 0
    except (StackError, StartError, EmulatorGaveUp) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        ready.set()  # a second Ctrl-C must not interrupt the shutdown below
        for child in reversed(started):
            child.stop(signal.SIGINT if child.name == "host" else signal.SIGTERM, timeout=45)
        if recorder is not None:  # last: the worker flushes its telemetry as it stops
            recorder.stop()


def start_hosts(
    settings_path: Path,
    first_port: int,
    instances: int,
    environment: dict[str, str] | None,
    started: list[Child],
) -> tuple[list[str], str]:
    """The app's hosts on consecutive ports (the first alone, then the others at once:
    they share its function keys); their URLs and the default function key."""
    hosts = []
    for offset in range(instances):
        log_path = None if offset == 0 else LOCAL_DIR / "logs" / f"host-{offset + 1}.log"
        host = HostProcess(
            REPO_ROOT, settings_path, log_path, port=first_port + offset, env=environment
        )
        started.append(host.child)
        hosts.append(host)
        if offset == 0:
            host.wait_started(timeout=60)
    urls = [hosts[0].base_url] + [host.wait_started(timeout=60) for host in hosts[1:]]
    if instances > 1:
        print(f"Started {instances} hosts of the app (logs of the others: .local/logs/host-N.log)")
    return urls, hosts[0].keys["functionKeys"]["default"]


def print_banner(
    base_urls: list[str],
    key: str,
    containers: list[str],
    admin_url: str | None,
    telemetry: str,
    models: list[str],
) -> None:
    local = base_urls[0].replace("127.0.0.1", "localhost")
    others = [url.replace("127.0.0.1", "localhost") for url in base_urls[1:]]
    lines = [
        "",
        "Inferbus is running." + (f" ({len(base_urls)} instances)" if others else ""),
        f"  API:             {local}/api/v1/requests",
        *([f"  Instances:       {', '.join([local, *others])}"] if others else []),
        f"  Function key:    {key}   (.local/host-keys.json)",
        f"  Models:          {', '.join(models)}",
        f"  Containers:      {', '.join(containers)}",
        *([f"  Emulator counts: {admin_url}/runtime"] if admin_url else []),
        "  Logs:            .local/logs/ (Azurite, emulators); the host logs here",
        f"  Telemetry:       {telemetry}",
        "",
        "Try:",
        f'  curl -X POST "{local}/api/v1/requests?code={key}" -H "Content-Type: application/json" '
        '-H "X-Tenant-Id: contoso" -d \'{"model":"local-analyzer","input":{"text":"hello"}}\'',
        '  (with "mode":"batch" in the body it goes through the Global Batch lane instead)',
        "",
        "Ctrl-C stops everything started here.",
        "",
    ]
    print("\n".join(lines), flush=True)


if __name__ == "__main__":
    sys.exit(main())
