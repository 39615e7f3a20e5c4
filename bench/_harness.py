"""Shared parts of the app's benchmarks (``bench/*.py``); not a benchmark itself.

The benchmarks drive Inferbus only through its public surfaces: HTTP (the request API and
the host's admin endpoints), the ``azure-servicebus`` SDK against the project's emulator,
``azure-storage-blob`` against Azurite, and the local host as a child process. Nothing of
the app is imported except ``shared.settings`` (to know its container names).

What lives here:

* statistics: a figure is the median of repeats with its spread, ``12.3 [11.0..13.9, n=5]``
  (median [min..max, number of repeats]);
* CPU seconds of a process and its descendants, read from ``/proc``;
* the stack: Azurite in memory (a fresh one whenever a figure must not depend on what
  earlier runs left behind: Azurite's per-operation cost grows with the blobs it holds),
  the Service Bus emulator with the app's entities (infra/local) plus one benchmark
  subscription on the results topic that takes every message (the Event Grid pull door is
  switched off: ``EventGridPull__namespaceEndpoint`` empty), and the local host serving
  a snapshot of the app (function_app.py, host.json, triggers/, shared/ copied into the
  run's folder, host.json optionally edited) so that every repeat of a run serves the same
  code, even while the app is being edited;
* the request API over HTTP and load generators;
* ``OutcomeWatcher``: completion as the world sees it, without competing with the system
  under test: result messages on the benchmark subscription (outcome per request id) and
  the request queue's dead-letter queue (reason, delivery count);
* the storage boundary: ``CountingProxy``, a reverse proxy between the app and Azurite that
  records every storage request; ``calibrate`` counts the storage operations of one request
  (intake = while the POST waits for its 202, processing = the rest) and keeps each
  request's sequence of operations; ``replay`` runs the same sequences with
  ``azure-storage-blob`` against a fresh Azurite (Azurite's rate for the app's op mix);
* the Service Bus side of the local limit: receive+complete through the SDK with the
  app's host.json prefetch and batch size (``servicebus_ceiling``).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from azure.core import MatchConditions
from azure.core.exceptions import (
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
)
from azure.servicebus import (
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusReceivedMessage,
    ServiceBusReceiveMode,
    ServiceBusReceiver,
    ServiceBusSubQueue,
)
from azure.storage.blob import BlobServiceClient, ContentSettings

from functions_host.process import HostProcess
from local_processes import Azurite, Child, start_azurite
from local_processes.azurite import blob_port
from servicebus_emulator.process import EmulatorProcess, ServiceBusEmulator

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from shared.settings import Settings  # noqa: E402

EMULATOR_CONFIG = REPO / "infra" / "local" / "servicebus-emulator.json"
SAMPLE_SETTINGS = REPO / "local.settings.sample.json"
# What .funcignore leaves in the deployment package, less requirements.txt.
APP_FILES = ("function_app.py", "host.json", "models.json", "triggers", "shared")
BENCH_SUBSCRIPTION = "bench-outcomes"
TENANT = "bench"
PING_APP = REPO / "tools" / "functions-host" / "bench" / "ping_app"  # one empty HTTP function
PROCESSOR = "process_requests"  # the request queue's batch trigger (checked at calibration)
TEXT = (
    "Invoice 2291 for consulting services. The total amount due is 4,200 EUR, payable within "
    "30 days. Late payment incurs interest. Please quote the invoice number with your payment. "
) * 8  # about 1.4 KB, like a short document
SUBMIT_BODY = json.dumps({"model": "local-analyzer", "input": {"text": TEXT}}).encode()
GOOD_OUTCOMES = ("completed", "refused")
# After a batch's first message, how long the extension's receive keeps collecting (the .NET
# SDK's AMQP batch wait); the SDK's socket timeout must be as short for it to hold.
BATCH_WINDOW_S = 0.02
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def now_stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def machine() -> str:
    """CPUs and load average: other work on the machine shows up in every figure."""
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return f"{os.cpu_count()} CPUs, load average {load}"


def argument_parser(doc: str | None) -> argparse.ArgumentParser:
    """A benchmark's command line: its docstring's first line says what it measures."""
    return argparse.ArgumentParser(
        description=doc.split("\n")[0] if doc else None,
        epilog="See the module docstring for how to read the figures.",
    )


@contextmanager
def work_folder(prefix: str, keep: Path | None = None) -> Iterator[Path]:
    """A benchmark run's folder (app snapshot, settings, every process's log): ``keep``
    when given (created if need be, left in place afterwards), else a temporary folder
    named ``prefix...`` that is removed when the block ends."""
    if keep is not None:
        folder = keep.resolve()
        folder.mkdir(parents=True, exist_ok=True)
        yield folder
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as temporary:
        yield Path(temporary)


# --- statistics ---------------------------------------------------------------------------


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by linear interpolation; nan when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def spread(values: Sequence[float], digits: int = 1, unit: str = "") -> str:
    """``median [min..max, n=R]`` of repeats (a figure and how far its runs were apart)."""
    if not values:
        return "n/a"
    middle = f"{median(values):,.{digits}f}{unit}"
    if len(values) == 1:
        return f"{middle} [1 run]"
    return f"{middle} [{min(values):,.{digits}f}..{max(values):,.{digits}f}, n={len(values)}]"


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else float("nan")


# --- CPU seconds from /proc ---------------------------------------------------------------


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of one live process (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (the host's worker process, for instance)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found


def tree_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and its live descendants."""
    return sum(process_cpu(p) for p in (pid, *descendants(pid)))


class CpuMeter:
    """CPU seconds of named process trees (and of this process) between start and stop."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self._start: dict[str, float] = {}
        self.used: dict[str, float] = {}

    def _read(self) -> dict[str, float]:
        figures = {name: tree_cpu(pid) for name, pid in self.pids.items()}
        figures["bench client"] = time.process_time()
        return figures

    def start(self) -> None:
        self._start = self._read()

    def stop(self) -> dict[str, float]:
        end = self._read()
        self.used = {name: end[name] - self._start[name] for name in end}
        return self.used


@dataclass
class CpuParts:
    """CPU ms per request of named parts (processes, or calls), one figure per repeat."""

    parts: dict[str, list[float]] = field(default_factory=dict)

    def add(self, name: str, ms: float) -> None:
        self.parts.setdefault(name, []).append(ms)

    def totals(self) -> list[float]:
        """Per repeat, the sum of the parts."""
        repeats = min((len(values) for values in self.parts.values()), default=0)
        return [sum(values[i] for values in self.parts.values()) for i in range(repeats)]

    def text(self, digits: int = 2) -> str:
        return "; ".join(f"{name} {spread(ms, digits)}" for name, ms in self.parts.items())


def per_call_ms(used: dict[str, float], names: Sequence[str], calls: int) -> float:
    """CPU ms per call of the named processes, from a ``CpuMeter``'s seconds."""
    return sum(used[name] for name in names) * 1000 / max(1, calls)


# --- the stack ----------------------------------------------------------------------------


def host_service_bus(script_root: Path) -> dict[str, Any]:
    """host.json ``extensions.serviceBus`` of an app folder."""
    document = json.loads((script_root / "host.json").read_text())
    section: dict[str, Any] = document.get("extensions", {}).get("serviceBus", {})
    return section


def timespan_seconds(text: str) -> float:
    """``[d.]hh:mm:ss[.fff]`` (a host.json TimeSpan) in seconds."""
    hours, minutes, seconds = text.strip().split(":")
    days, _, hours = hours.rpartition(".")
    return int(days or 0) * 86400 + int(hours) * 3600 + int(minutes) * 60 + float(seconds)


@dataclass(frozen=True)
class BatchSettings:
    """host.json serviceBus batch settings, with the defaults Microsoft documents."""

    prefetch: int = 0
    max_batch: int = 1000
    min_batch: int = 1
    max_wait_s: float = 30.0

    @classmethod
    def of(cls, script_root: Path) -> BatchSettings:
        section = host_service_bus(script_root)
        wait = section.get("maxBatchWaitTime")
        return cls(
            prefetch=int(section.get("prefetchCount", 0)),
            max_batch=int(section.get("maxMessageBatchSize", 1000)),
            min_batch=int(section.get("minMessageBatchSize", 1)),
            max_wait_s=timespan_seconds(str(wait)) if wait else 30.0,
        )

    def label(self) -> str:
        return (
            f"prefetchCount {self.prefetch}, maxMessageBatchSize {self.max_batch}, "
            f"minMessageBatchSize {self.min_batch}, maxBatchWaitTime {self.max_wait_s:g}s"
        )


def app_snapshot(destination: Path, service_bus: dict[str, Any] | None = None) -> Path:
    """A copy of the app (what the deployment package holds) with host.json's
    ``extensions.serviceBus`` updated by ``service_bus``; returns the script root."""
    destination.mkdir(parents=True, exist_ok=True)
    for name in APP_FILES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(
                source, destination / name, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            shutil.copy2(source, destination / name)
    if service_bus:
        path = destination / "host.json"
        document = json.loads(path.read_text())
        document.setdefault("extensions", {}).setdefault("serviceBus", {}).update(service_bus)
        path.write_text(json.dumps(document, indent=2))
    return destination


def emulator_config(work: Path) -> Path:
    """infra/local's emulator entities plus a subscription taking every result message."""
    config = json.loads(EMULATOR_CONFIG.read_text())
    subscription = {
        "Name": BENCH_SUBSCRIPTION,
        "Properties": {"LockDuration": "PT1M", "MaxDeliveryCount": 10},
        "Rules": [
            {
                "Name": "$Default",
                "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}},
            }
        ],
    }
    topic_name = sample_settings().queues.results_topic
    for namespace in config["UserConfig"]["Namespaces"]:
        for topic in namespace.get("Topics", []):
            if topic["Name"] == topic_name:
                topic.setdefault("Subscriptions", []).append(subscription)
    path = work / "servicebus-emulator.json"
    path.write_text(json.dumps(config))
    return path


def sample_values() -> dict[str, str]:
    """The sample's Values: only what differs locally from the model's defaults (and what
    the host needs); ``sample_settings`` reads them through the model."""
    values: dict[str, str] = json.loads(SAMPLE_SETTINGS.read_text())["Values"]
    return values


def sample_settings(overrides: dict[str, str] | None = None) -> Settings:
    """The settings the app runs with on the sample's Values (and ``overrides``)."""
    return Settings.model_validate(sample_values() | (overrides or {}))


def fresh_azurite(work: Path, name: str) -> tuple[Child, str]:
    """A new, empty in-memory Azurite (blob service): (its child process, connection string)."""
    child = start_azurite({"Blob": 0}, work / f"{name}-azurite.log", root=REPO)
    endpoint = f"http://127.0.0.1:{blob_port(child)}/devstoreaccount1"
    return child, Azurite(blob_endpoint=endpoint).connection_string


@dataclass(frozen=True)
class Services:
    """A fresh Azurite and emulator for one run."""

    work: Path
    storage: str  # connection string
    blob_port: int
    azurite_pid: int
    emulator: ServiceBusEmulator
    emulator_pid: int

    @property
    def servicebus(self) -> str:
        return self.emulator.connection_string

    def values(self, **overrides: str) -> dict[str, str]:
        """The sample local settings pointed at these services, with ``overrides``."""
        values = sample_values() | {
            "AzureWebJobsStorage": self.storage,
            "Storage": self.storage,
            "ServiceBusConnection": self.servicebus,
            "ServiceBusRuntimeCountsUrl": f"{self.emulator.admin_url}/runtime",
            # The Event Grid pull door and the Global Batch lane are off: no request of
            # these benchmarks goes through them, and their sample endpoints (fixed ports)
            # could reach another stack's emulators (bench/global_batch.py measures the lane).
            "EventGridPull__namespaceEndpoint": "",
            "GlobalBatch__deployments": "",
        }
        return values | overrides

    def queue_counts(self, queue: str) -> dict[str, Any]:
        return self.emulator.runtime_properties(queue)

    def outcome_watcher(self, values: dict[str, str]) -> OutcomeWatcher:
        """An ``OutcomeWatcher`` on this emulator for the results topic and request queue
        that ``values`` (the host's settings) name."""
        settings = Settings.model_validate(values)
        return OutcomeWatcher(
            self.servicebus, settings.queues.results_topic, settings.queues.requests
        )

    def cpu_meter(self, host_pid: int, **others: int) -> CpuMeter:
        """A ``CpuMeter`` of the host (with its worker), this Azurite, this emulator and
        ``others`` (name -> pid); the bench client is always metered too."""
        return CpuMeter(
            {"host+worker": host_pid, "azurite": self.azurite_pid, "emulator": self.emulator_pid}
            | others
        )


@contextmanager
def services(work: Path, name: str) -> Iterator[Services]:
    """A new in-memory Azurite and a new emulator (infra/local entities + the benchmark
    subscription) on free ports; stopped when the block ends."""
    azurite, storage = fresh_azurite(work, name)
    try:
        emulator_process = EmulatorProcess(emulator_config(work), work / f"{name}-emulator.log")
        try:
            emulator = emulator_process.wait_ready()
            yield Services(
                work=work,
                storage=storage,
                blob_port=blob_port(azurite),
                azurite_pid=azurite.process.pid,
                emulator=emulator,
                emulator_pid=emulator_process.child.process.pid,
            )
        finally:
            emulator_process.stop()
    finally:
        azurite.stop()


def create_containers(storage: str, values: dict[str, str]) -> list[str]:
    """The app's containers (``settings.containers.names``), created with the SDK."""
    names = Settings.model_validate(values).containers.names()
    client = BlobServiceClient.from_connection_string(storage)
    for name in names:
        with suppress(ResourceExistsError):
            client.create_container(name)
    return names


class Host:
    """The local host serving ``script_root`` with ``values`` as its local settings.

    ``disabled`` functions get ``AzureWebJobs.<name>.Disabled=true`` in the settings (the
    host honours it as the Functions host does). The host logs at host.json's level, as
    ``make run`` does; its log stays in the run's folder.
    """

    def __init__(
        self,
        script_root: Path,
        values: dict[str, str],
        work: Path,
        name: str,
        disabled: Sequence[str] = (),
    ) -> None:
        settings = dict(values)
        for function in disabled:
            settings[f"AzureWebJobs.{function}.Disabled"] = "true"
        settings_path = work / f"{name}.settings.json"
        settings_path.write_text(json.dumps({"IsEncrypted": False, "Values": settings}))
        self.name = name
        self.process = HostProcess(
            script_root, settings_path, work / f"{name}.log", keys_path=work / "host-keys.json"
        )
        self.port = 0
        self.key = ""
        self.master_key = ""

    def start(self) -> Host:
        base_url = self.process.wait_started(timeout=90)
        self.port = int(base_url.rsplit(":", 1)[1])
        keys = self.process.keys
        self.key = keys["functionKeys"]["default"]
        self.master_key = keys["masterKey"]
        return self

    @property
    def pid(self) -> int:
        return self.process.child.process.pid

    def functions(self) -> list[dict[str, Any]]:
        """The enabled functions and their bindings (``GET /admin/functions``)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request("GET", f"/admin/functions?code={self.master_key}")
            response = connection.getresponse()
            listing: list[dict[str, Any]] = json.loads(response.read())
        finally:
            connection.close()
        return listing

    def invocations(self, function: str) -> int:
        """Invocations of ``function`` so far, from the host's ``Executed`` lines."""
        return len(re.findall(rf"Executed 'Functions\.{re.escape(function)}' \(", self.log()))

    def log(self) -> str:
        return self.process.log()

    def stop(self) -> None:
        self.process.stop(timeout=60)


@contextmanager
def running_host(
    script_root: Path,
    values: dict[str, str],
    work: Path,
    name: str,
    disabled: Sequence[str] = (),
) -> Iterator[Host]:
    host = Host(script_root, values, work, name, disabled)
    try:
        yield host.start()
    finally:
        host.stop()


def trigger_type(function: dict[str, Any]) -> str:
    for binding in function["config"]["bindings"]:
        if str(binding.get("type", "")).endswith("Trigger"):
            return str(binding["type"])
    return ""


def background_functions(functions: list[dict[str, Any]]) -> list[str]:
    """Functions that are neither HTTP nor the request processor (timers, blob and Event
    Grid doors, other queues): idle during a benchmark but with storage traffic of their
    own (the blob watcher lists its container every 2 s)."""
    return [
        f["name"] for f in functions if trigger_type(f) != "httpTrigger" and f["name"] != PROCESSOR
    ]


# --- the request API over HTTP -------------------------------------------------------------


def connect(port: int) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", port, timeout=60)


def submit(
    connection: http.client.HTTPConnection, key: str, body: bytes = SUBMIT_BODY
) -> tuple[int, str | None]:
    """``POST /api/v1/requests``: (status, request id of a 202)."""
    connection.request(
        "POST",
        f"/api/v1/requests?code={key}",
        body=body,
        headers={"Content-Type": "application/json", "X-Tenant-Id": TENANT},
    )
    response = connection.getresponse()
    payload = response.read()
    if response.status == 202:
        return 202, str(json.loads(payload)["id"])
    return response.status, None


def job_status(connection: http.client.HTTPConnection, key: str, request_id: str) -> dict[str, Any]:
    """``GET /api/v1/requests/{id}``: the job as the API shows it ({} unless 200)."""
    connection.request(
        "GET", f"/api/v1/requests/{request_id}?code={key}", headers={"X-Tenant-Id": TENANT}
    )
    response = connection.getresponse()
    payload = response.read()
    if response.status != 200:
        return {}
    document: dict[str, Any] = json.loads(payload)
    return document


@dataclass
class Load:
    """What a load generator sent: accepted ids with send/answer times, status counts."""

    accepted: dict[str, tuple[float, float]] = field(default_factory=dict)
    statuses: Counter[int] = field(default_factory=Counter)
    began: float = 0.0
    ended: float = 0.0


def submit_load(port: int, key: str, count: int, callers: int) -> Load:
    """``count`` submissions by ``callers`` concurrent clients (keep-alive connections),
    each sending its next request when the previous one is answered."""
    load = Load()
    lock = threading.Lock()
    remaining = [count]

    def caller() -> None:
        connection = connect(port)
        try:
            while True:
                with lock:
                    if remaining[0] <= 0:
                        return
                    remaining[0] -= 1
                began = time.perf_counter()
                try:
                    status, request_id = submit(connection, key)
                except (OSError, http.client.HTTPException):
                    status, request_id = -1, None
                    connection.close()
                    connection = connect(port)
                answered = time.perf_counter()
                with lock:
                    load.statuses[status] += 1
                    if request_id:
                        load.accepted[request_id] = (began, answered)
        finally:
            connection.close()

    load.began = time.perf_counter()
    run_threads(caller, callers)
    load.ended = time.perf_counter()
    return load


@dataclass
class Loop:
    """A fixed-duration closed loop: latencies (s) of answered requests, status counts."""

    latencies: list[float]
    statuses: Counter[int]
    seconds: float

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else 0.0


def closed_loop(
    port: int, request: Callable[[http.client.HTTPConnection], int], callers: int, seconds: float
) -> Loop:
    """``callers`` clients calling ``request`` back to back for ``seconds``."""
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    lock = threading.Lock()
    barrier = threading.Barrier(callers + 1)
    stop_at = [0.0]

    def caller() -> None:
        connection = connect(port)
        mine: list[float] = []
        codes: Counter[int] = Counter()
        barrier.wait()
        try:
            while time.monotonic() < stop_at[0]:
                began = time.perf_counter()
                try:
                    codes[request(connection)] += 1
                except (OSError, http.client.HTTPException):
                    codes[-1] += 1
                    connection.close()
                    connection = connect(port)
                    continue
                mine.append(time.perf_counter() - began)
        finally:
            connection.close()
            with lock:
                latencies.extend(mine)
                statuses.update(codes)

    threads = [threading.Thread(target=caller) for _ in range(callers)]
    for thread in threads:
        thread.start()
    stop_at[0] = time.monotonic() + seconds
    began = time.perf_counter()
    barrier.wait()
    for thread in threads:
        thread.join()
    return Loop(latencies, statuses, time.perf_counter() - began)


def post_request(key: str) -> Callable[[http.client.HTTPConnection], int]:
    """A ``closed_loop`` request: ``POST /api/v1/requests`` with the function ``key``,
    returning the status."""

    def post(connection: http.client.HTTPConnection) -> int:
        return submit(connection, key)[0]

    return post


def ping(connection: http.client.HTTPConnection) -> int:
    """A ``closed_loop`` request to the ping app (``PING_APP``): ``GET /api/ping``."""
    connection.request("GET", "/api/ping")
    response = connection.getresponse()
    response.read()
    return response.status


def host_round_trip_cpu(stack: Services, work: Path, name: str, callers: int) -> float:
    """CPU ms of the host and its worker per call of an empty function: the ping app on
    its own host, a closed loop of ``callers`` for 2 s."""
    with running_host(PING_APP, stack.values(), work, name) as pinger:
        closed_loop(pinger.port, ping, 2, 0.5)  # warm-up
        meter = stack.cpu_meter(pinger.pid)
        meter.start()
        loop = closed_loop(pinger.port, ping, callers, 2.0)
        used = meter.stop()
    return per_call_ms(used, ("host+worker",), len(loop.latencies))


def run_threads(target: Callable[[], None], count: int) -> None:
    """``count`` threads running ``target``, until all of them return."""
    threads = [threading.Thread(target=target) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


# --- outcomes: the results topic and the dead-letter queue ---------------------------------


@dataclass(frozen=True)
class DeadLetter:
    at: float
    reason: str
    delivery_count: int  # the broker's count of failed deliveries (lock lost, abandoned)

    @property
    def deliveries(self) -> int:
        """Times the message was delivered: its failed deliveries, plus the one on which a
        receiver dead-lettered it (the broker's own dead-lettering, after too many
        deliveries or on expiry, happens between deliveries)."""
        broker_made = self.reason in ("MaxDeliveryCountExceeded", "TTLExpiredException")
        return self.delivery_count + (0 if broker_made else 1)


class OutcomeWatcher:
    """Receives (and deletes) every result message on the benchmark subscription and every
    dead-lettered request message, in threads of their own; the system under test never
    reads either, so watching costs it nothing but the broker's delivery to one more
    subscription. Results are keyed by the request id in their body, dead letters by
    message id (the request id for the app's own messages)."""

    def __init__(self, connection_string: str, topic: str, queue: str) -> None:
        self._connection_string = connection_string
        self._topic = topic
        self._queue = queue
        self.results: dict[str, tuple[float, str]] = {}
        self.dead_letters: dict[str, DeadLetter] = {}
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._guarded, args=(self._watch_results,), daemon=True),
            threading.Thread(target=self._guarded, args=(self._watch_dead_letters,), daemon=True),
        ]

    def __enter__(self) -> OutcomeWatcher:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=15)

    def _guarded(self, watch: Callable[[ServiceBusClient], None]) -> None:
        while not self._stop.is_set():
            try:
                with ServiceBusClient.from_connection_string(self._connection_string) as client:
                    watch(client)
            except Exception:  # the emulator dropped the link: open a new one
                self._stop.wait(0.5)

    def _watch_results(self, client: ServiceBusClient) -> None:
        receiver = client.get_subscription_receiver(
            self._topic,
            BENCH_SUBSCRIPTION,
            receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE,
            prefetch_count=200,
            max_wait_time=0.5,
        )
        self._receive_each(receiver, self._record_result)

    def _watch_dead_letters(self, client: ServiceBusClient) -> None:
        receiver = client.get_queue_receiver(
            self._queue,
            sub_queue=ServiceBusSubQueue.DEAD_LETTER,
            receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE,
            prefetch_count=200,
            max_wait_time=0.5,
        )
        self._receive_each(receiver, self._record_dead_letter)

    def _receive_each(
        self,
        receiver: ServiceBusReceiver,
        record: Callable[[ServiceBusReceivedMessage, float], None],
    ) -> None:
        """Hand every message to ``record`` with the time it arrived, until stopped."""
        with receiver:
            while not self._stop.is_set():
                for message in receiver:
                    at = time.perf_counter()
                    if self._stop.is_set():
                        break
                    with self._changed:
                        record(message, at)
                        self._changed.notify_all()

    def _record_result(self, message: ServiceBusReceivedMessage, at: float) -> None:
        body = json.loads(b"".join(message.body))
        request_id = str(body.get("request_id"))
        properties = message.application_properties or {}
        outcome = properties.get(b"outcome", properties.get("outcome"))
        if isinstance(outcome, bytes):
            outcome = outcome.decode()
        if request_id not in self.results:  # a repeated result keeps the first one's time
            self.results[request_id] = (at, str(outcome or body.get("outcome")))

    def _record_dead_letter(self, message: ServiceBusReceivedMessage, at: float) -> None:
        self.dead_letters[str(message.message_id)] = DeadLetter(
            at, str(message.dead_letter_reason), int(message.delivery_count or 0)
        )

    def observed(self, request_id: str) -> float | None:
        """When the first outcome of ``request_id`` was seen (result or dead letter)."""
        times = []
        if request_id in self.results:
            times.append(self.results[request_id][0])
        if request_id in self.dead_letters:
            times.append(self.dead_letters[request_id].at)
        return min(times) if times else None

    def wait_for(self, ids: Sequence[str], timeout: float) -> bool:
        """Until every id has an outcome (True) or ``timeout`` seconds pass (False)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                if all(self.observed(i) is not None for i in ids):
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 0.5))

    def last_outcome_at(self, ids: Sequence[str]) -> float:
        return max((t for t in (self.observed(i) for i in ids) if t is not None), default=0.0)

    def outcomes(self, ids: Sequence[str]) -> Counter[str]:
        """Per id: the announced outcome, ``dead-lettered (<reason>)`` when only the
        dead-letter queue has it, ``missing`` when neither. Failures that are both
        announced and dead-lettered count once, as announced."""
        counts: Counter[str] = Counter()
        for request_id in ids:
            if request_id in self.results:
                counts[self.results[request_id][1]] += 1
            elif request_id in self.dead_letters:
                counts[f"dead-lettered ({self.dead_letters[request_id].reason})"] += 1
            else:
                counts["missing"] += 1
        return counts


def good(outcomes: Counter[str]) -> int:
    return sum(outcomes[name] for name in GOOD_OUTCOMES)


def outcome_text(outcomes: Counter[str], dead_lettered: int | None = None) -> str:
    text = ", ".join(f"{name} {count}" for name, count in sorted(outcomes.items()))
    if dead_lettered is not None:
        text += f"; request DLQ {dead_lettered}"
    return text


@dataclass
class LoadRun:
    """A load to its outcomes: what was sent, what came of it, the CPU it cost."""

    load: Load
    ids: list[str]  # the accepted requests
    finished: bool  # every accepted request had its outcome before the timeout
    ended: float  # perf_counter of the last outcome (or of giving up, if not finished)
    cpu: dict[str, float]  # seconds per process tree, from the first submit to ``ended``
    outcomes: Counter[str]

    @property
    def good_rate(self) -> float:
        """Completed or refused requests per second, first submit -> last outcome."""
        seconds = self.ended - self.load.began
        return good(self.outcomes) / seconds if seconds > 0 else 0.0


def load_to_outcomes(
    stack: Services,
    host: Host,
    watcher: OutcomeWatcher,
    requests: int,
    callers: int,
    timeout: float,
) -> LoadRun:
    """``submit_load`` of ``requests`` at ``callers`` clients, then wait up to ``timeout``
    seconds for every accepted request's outcome; the host, Azurite and the emulator are
    metered (``Services.cpu_meter``) from before the first submit until the wait ends."""
    meter = stack.cpu_meter(host.pid)
    meter.start()
    load = submit_load(host.port, host.key, requests, callers)
    ids = list(load.accepted)
    finished = watcher.wait_for(ids, timeout=timeout)
    ended = watcher.last_outcome_at(ids) if finished else time.perf_counter()
    cpu = meter.stop()
    return LoadRun(load, ids, finished, ended, cpu, watcher.outcomes(ids))


# --- Service Bus: request messages and the receive+complete ceiling ------------------------


@dataclass(frozen=True)
class MessageShape:
    """Body, properties and content type of one of the app's request messages."""

    body: bytes
    properties: dict[str | bytes, Any]
    content_type: str | None

    def message(self) -> ServiceBusMessage:
        return ServiceBusMessage(
            self.body,
            message_id=str(uuid.uuid4()),
            application_properties=dict(self.properties),
            content_type=self.content_type,
        )


FALLBACK_SHAPE = MessageShape(
    body=json.dumps(
        {
            "request_id": str(uuid.uuid4()),
            "tenant_id": TENANT,
            "model": "local-analyzer",
            "input": {
                "blob_uri": "http://127.0.0.1:10000/devstoreaccount1/inputs/bench/x",
                "sha256": "0" * 64,
                "size": len(TEXT),
                "media_type": "text/plain; charset=utf-8",
            },
            "priority": "normal",
        }
    ).encode(),
    properties={"tenant": TENANT, "model_name": "local-analyzer", "priority": "normal"},
    content_type="application/json",
)


def peek_request_message(connection_string: str, queue: str) -> MessageShape | None:
    """The shape of a request message waiting in ``queue`` (peeked: nothing is locked)."""
    with (
        ServiceBusClient.from_connection_string(connection_string) as client,
        client.get_queue_receiver(queue) as receiver,
    ):
        for message in receiver.peek_messages(max_message_count=1):
            return MessageShape(
                b"".join(message.body),
                dict(message.application_properties or {}),
                message.content_type,
            )
    return None


def send_messages(
    connection_string: str, queue: str, messages: Sequence[ServiceBusMessage]
) -> None:
    with (
        ServiceBusClient.from_connection_string(connection_string) as client,
        client.get_queue_sender(queue) as sender,
    ):
        batch = sender.create_message_batch()
        for message in messages:
            try:
                batch.add_message(message)
            except ValueError:
                sender.send_messages(batch)
                batch = sender.create_message_batch()
                batch.add_message(message)
        if len(batch):
            sender.send_messages(batch)


def servicebus_ceiling(
    connection_string: str,
    queue: str,
    shape: MessageShape,
    count: int,
    batch: BatchSettings,
    meter: CpuMeter | None = None,
) -> float:
    """Receive+complete msgs/s of ``count`` messages shaped like the app's, through the SDK,
    received the way the Service Bus extension (and the local host) receives for a batch
    function: one peek-lock receiver with host.json's ``prefetchCount``; per batch, a first
    message, then up to ``maxMessageBatchSize`` - 1 more that arrive within 20 ms (two SDK
    calls, as the local host makes them: one call would keep collecting for 200 ms); then
    each message completed on its own (the settle round trip). With a full queue the batch
    minimum is always met, so ``minMessageBatchSize`` plays no part. The queue is filled
    first (not timed), and the link is opened on a first message before the clock starts;
    ``meter``, when given, runs while the clock does."""
    send_messages(connection_string, queue, [shape.message() for _ in range(count + 1)])
    with (
        ServiceBusClient.from_connection_string(connection_string) as client,
        client.get_queue_receiver(
            queue, prefetch_count=batch.prefetch, socket_timeout=BATCH_WINDOW_S
        ) as receiver,
    ):
        for message in receiver.receive_messages(max_message_count=1, max_wait_time=10):
            receiver.complete_message(message)
        done = 0
        if meter is not None:
            meter.start()
        began = time.perf_counter()
        while done < count:
            limit = min(batch.max_batch, count - done)
            messages = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            if not messages:
                raise RuntimeError(f"only {done} of {count} messages came back")
            if limit > 1:
                messages += receiver.receive_messages(
                    max_message_count=limit - 1, max_wait_time=BATCH_WINDOW_S
                )
            for message in messages:
                receiver.complete_message(message)
            done += len(messages)
        seconds = time.perf_counter() - began
        if meter is not None:
            meter.stop()
        return done / seconds


def send_latencies(
    connection_string: str,
    queue: str,
    shape: MessageShape,
    count: int,
    meter: CpuMeter | None = None,
) -> list[float]:
    """Seconds per single send of a request-shaped message (sender opened beforehand);
    ``meter``, when given, runs over the ``count`` sends only (not the opening)."""
    latencies = []
    with (
        ServiceBusClient.from_connection_string(connection_string) as client,
        client.get_queue_sender(queue) as sender,
    ):
        sender.send_messages(shape.message())
        if meter is not None:
            meter.start()
        for _ in range(count):
            message = shape.message()
            began = time.perf_counter()
            sender.send_messages(message)
            latencies.append(time.perf_counter() - began)
        if meter is not None:
            meter.stop()
    return latencies


# --- the storage boundary: counting proxy, calibration, replay -----------------------------

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


@dataclass(frozen=True)
class StorageOp:
    """One storage request as it crossed the boundary."""

    at: float
    method: str
    container: str
    blob: str
    kind: str  # create | replace | put | get | head | delete | list | container | other
    size: int  # request body bytes (writes) or response body bytes (reads)
    status: int

    @property
    def label(self) -> str:
        return f"{self.kind} {self.container}"


def classify(method: str, blob: str, query: dict[str, str], headers: Any) -> str:
    if query.get("comp") == "list" or query.get("restype") == "container":
        return "list" if query.get("comp") == "list" else "container"
    if query.get("comp") or not blob:
        return "other"
    if method == "PUT":
        if headers.get("If-None-Match") == "*":
            return "create"
        return "replace" if headers.get("If-Match") else "put"
    return {"GET": "get", "HEAD": "head", "DELETE": "delete"}.get(method, "other")


class CountingProxy:
    """A reverse proxy between the app and Azurite that records every request.

    The app's ``Storage`` connection string points here; each request is forwarded
    unchanged over a keep-alive connection (one per proxy thread) and recorded as a
    ``StorageOp`` with its time, verb, container, blob, condition and size. Used only for
    calibration (it adds a hop): the timed runs talk to Azurite directly.
    """

    def __init__(self, upstream_port: int) -> None:
        self.ops: list[StorageOp] = []
        self._lock = threading.Lock()
        self._local = threading.local()
        self._upstream_port = upstream_port
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def forward(self) -> None:
                proxy.forward(self)

            def log_message(self, format: str, *args: Any) -> None:
                return

        for verb in ("GET", "PUT", "HEAD", "DELETE", "POST"):
            setattr(Handler, f"do_{verb}", Handler.forward)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def connection_string(self) -> str:
        return Azurite(
            blob_endpoint=f"http://127.0.0.1:{self.port}/devstoreaccount1"
        ).connection_string

    def _upstream(self, fresh: bool = False) -> http.client.HTTPConnection:
        connection: http.client.HTTPConnection | None = getattr(self._local, "connection", None)
        if connection is None or fresh:
            if connection is not None:
                connection.close()
            connection = http.client.HTTPConnection("127.0.0.1", self._upstream_port, timeout=60)
            self._local.connection = connection
        return connection

    def forward(self, handler: BaseHTTPRequestHandler) -> None:
        at = time.perf_counter()
        # The answer's headers and body are written apart: without this, the body waits
        # for the client's delayed ACK (Nagle), some 40 ms a request.
        handler.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in _HOP_BY_HOP}
        for attempt in (0, 1):
            connection = self._upstream(fresh=attempt > 0)
            try:
                connection.request(
                    handler.command, handler.path, body=body or None, headers=headers
                )
                response = connection.getresponse()
                data = response.read()
                break
            except (OSError, http.client.HTTPException):
                if attempt:
                    raise
        handler.send_response_only(response.status, response.reason)
        for key, value in response.getheaders():
            if key.lower() not in _HOP_BY_HOP:
                handler.send_header(key, value)
        if handler.command == "HEAD":
            handler.send_header("Content-Length", response.getheader("Content-Length") or "0")
        else:
            handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(data)
        parts = urlsplit(handler.path)
        segments = parts.path.lstrip("/").split("/", 2)  # account, container, blob
        container = segments[1] if len(segments) > 1 else ""
        blob = unquote(segments[2]) if len(segments) > 2 else ""
        query = dict(parse_qsl(parts.query))
        op = StorageOp(
            at=at,
            method=handler.command,
            container=container,
            blob=blob,
            kind=classify(handler.command, blob, query, handler.headers),
            size=len(body) if body else len(data),
            status=response.status,
        )
        with self._lock:
            self.ops.append(op)

    def between(self, start: float, end: float) -> list[StorageOp]:
        with self._lock:
            return [op for op in self.ops if start <= op.at <= end]

    def wait_quiet(self, quiet: float = 1.0, timeout: float = 10.0) -> None:
        """Until no request has crossed for ``quiet`` seconds, or ``timeout`` seconds pass."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and time.perf_counter() - self._last_at() < quiet:
            time.sleep(0.1)

    def _last_at(self) -> float:
        with self._lock:
            return self.ops[-1].at if self.ops else 0.0

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@dataclass(frozen=True)
class TemplateOp:
    """One operation of a request's storage sequence, with blobs numbered per request."""

    phase: str  # intake | processing
    kind: str
    container: str
    blob: int
    size: int
    status: int


@dataclass
class Calibration:
    """Storage operations per request, measured at the storage boundary."""

    requests: int
    intake: dict[str, list[StorageOp]]
    processing: dict[str, list[StorageOp]]
    unattributed: list[StorageOp]
    shape: MessageShape | None
    under_load: tuple[int, int, float] | None = None

    def per_request(self, phase: str) -> list[int]:
        ops = self.intake if phase == "intake" else self.processing
        return [len(ops.get(request_id, [])) for request_id in self.intake]

    def ops_per_request(self, phases: Sequence[str] = ("intake", "processing")) -> float:
        return sum(statistics.mean(self.per_request(phase)) for phase in phases)

    def templates(self) -> list[list[TemplateOp]]:
        """Each request's operations in order, blobs renumbered (0, 1, ...) per request."""
        result = []
        for request_id, intake_ops in self.intake.items():
            numbers: dict[tuple[str, str], int] = {}
            template = []
            for phase, ops in (
                ("intake", intake_ops),
                ("processing", self.processing.get(request_id, [])),
            ):
                for op in ops:
                    number = numbers.setdefault((op.container, op.blob), len(numbers))
                    template.append(
                        TemplateOp(phase, op.kind, op.container, number, op.size, op.status)
                    )
            result.append(template)
        return result

    def print(self) -> None:
        def counted(values: list[int]) -> str:
            return f"{statistics.mean(values):.1f} (min {min(values)}, max {max(values)})"

        phases = ("intake", "processing") if self.processing else ("intake",)
        print(
            f"  storage ops per request, counted at the storage boundary over {self.requests} "
            f"requests: intake {counted(self.per_request('intake'))}, processing "
            + (counted(self.per_request("processing")) if self.processing else "not measured")
            + f", total {self.ops_per_request(phases):.1f}"
        )
        for phase, ops in (("intake", self.intake), ("processing", self.processing)):
            if not ops:
                continue
            mix: Counter[str] = Counter()
            sizes: dict[str, list[int]] = {}
            statuses: dict[str, Counter[int]] = {}
            for request_ops in ops.values():
                for op in request_ops:
                    mix[op.label] += 1
                    sizes.setdefault(op.label, []).append(op.size)
                    statuses.setdefault(op.label, Counter())[op.status] += 1
            parts = [
                f"{label} x{count / self.requests:.2f} (~{statistics.mean(sizes[label]):.0f} B, "
                + ",".join(str(code) for code in sorted(statuses[label]))
                + ")"
                for label, count in sorted(mix.items())
            ]
            print(f"    {phase}: " + "; ".join(parts))
        if self.under_load:
            requests, callers, per_request = self.under_load
            print(
                f"    under load ({requests} requests, {callers} callers, processor running): "
                f"{per_request:.2f} ops per request"
            )
        if self.unattributed:
            kinds = Counter(op.label for op in self.unattributed)
            print(f"    not attributed to a request (start-up, timers; excluded): {dict(kinds)}")


def calibrate(
    work: Path,
    script_root: Path,
    count: int,
    *,
    processing: bool = True,
    load: tuple[int, int] | None = None,
    **overrides: str,
) -> Calibration:
    """Count the storage operations of ``count`` requests through a ``CountingProxy``.

    Own Azurite and emulator; the app's ``Storage`` goes through the proxy (the host's own
    ``AzureWebJobsStorage`` bookkeeping does not). Functions other than HTTP and the
    processor are disabled so that only request work crosses the proxy. Intake: a host
    with the processor disabled takes the requests one at a time; every operation between
    sending a POST and reading its 202 belongs to that request. Processing: a second host
    with the processor enabled drains the queue; an operation belongs to the request whose
    blob it touches (a path seen in its intake, or containing its id; the same rule catches
    an intake operation outside its window, should one occur); the count stops once
    every request's outcome is on the results topic and the proxy has been quiet for 1 s.
    ``load`` = (requests, callers) also counts operations per request under load
    (``ops_under_load``), a check that concurrency adds no conflicts or retries.
    """
    with services(work, "calibration") as stack:
        proxy = CountingProxy(stack.blob_port)
        try:
            values = stack.values(**overrides)
            values["Storage"] = proxy.connection_string()
            create_containers(stack.storage, values)
            queue = values["RequestsQueueName"]
            with running_host(script_root, values, work, "discovery", (PROCESSOR,)) as host:
                functions = host.functions()
            disabled = background_functions(functions)
            intake: dict[str, list[StorageOp]] = {}
            with running_host(
                script_root, values, work, "calibration-intake", (PROCESSOR, *disabled)
            ) as host:
                connection = connect(host.port)
                submit(connection, host.key)  # warm-up: first-use costs are not per request
                for _ in range(count):
                    began = time.perf_counter()
                    status, request_id = submit(connection, host.key)
                    answered = time.perf_counter()
                    if status != 202 or request_id is None:
                        raise RuntimeError(f"calibration: POST answered {status}")
                    intake[request_id] = proxy.between(began, answered)
                connection.close()
            shape = peek_request_message(stack.servicebus, queue)
            intake_end = time.perf_counter()
            attributed = {op for ops in intake.values() for op in ops}
            for op in proxy.between(0, intake_end):  # outside its window (not seen so far)
                owner = next((rid for rid in intake if rid in op.blob), None)
                if owner is not None and op not in attributed:
                    intake[owner].append(op)
                    attributed.add(op)
            for ops in intake.values():
                ops.sort(key=lambda op: op.at)
            processing_ops: dict[str, list[StorageOp]] = {}
            if processing:
                owners = {(op.container, op.blob): rid for rid, ops in intake.items() for op in ops}
                with (
                    stack.outcome_watcher(values) as watcher,
                    running_host(script_root, values, work, "calibration-processing", disabled),
                ):
                    ids = list(intake)
                    if not watcher.wait_for(ids, timeout=60 + count):
                        raise RuntimeError(f"calibration: outcomes {watcher.outcomes(ids)}")
                    proxy.wait_quiet()
                    ended = time.perf_counter()
                processing_ops = {rid: [] for rid in intake}
                for op in proxy.between(intake_end, ended):
                    owner = owners.get((op.container, op.blob)) or next(
                        (rid for rid in intake if rid in op.blob), None
                    )
                    if owner is not None:
                        processing_ops[owner].append(op)
                        attributed.add(op)
            unattributed = [
                op for op in proxy.between(0, time.perf_counter()) if op not in attributed
            ]
            calibration = Calibration(count, intake, processing_ops, unattributed, shape)
            if load is not None:
                calibration.under_load = ops_under_load(
                    proxy, stack, script_root, values, work, disabled, *load
                )
            return calibration
        finally:
            proxy.close()


def ops_under_load(
    proxy: CountingProxy,
    stack: Services,
    script_root: Path,
    values: dict[str, str],
    work: Path,
    disabled: Sequence[str],
    requests: int,
    callers: int,
) -> tuple[int, int, float]:
    """Storage operations per request when ``requests`` go through at ``callers``
    concurrent clients with the processor running (conflicts and retries included):
    every blob operation from the first submit until all outcomes are seen and the proxy
    is quiet, / requests. Returns (requests, callers, ops per request)."""
    with (
        stack.outcome_watcher(values) as watcher,
        running_host(script_root, values, work, "calibration-load", disabled) as host,
    ):
        began = time.perf_counter()
        load = submit_load(host.port, host.key, requests, callers)
        ids = list(load.accepted)
        if not watcher.wait_for(ids, timeout=60 + requests):
            raise RuntimeError(f"calibration under load: outcomes {watcher.outcomes(ids)}")
        proxy.wait_quiet()
        ops = [op for op in proxy.between(began, time.perf_counter()) if op.blob]
    return requests, callers, len(ops) / max(1, len(ids))


@dataclass
class Replay:
    ops: int
    seconds: float
    latencies: list[float]  # seconds per template (its timed phases)
    unexpected: int  # operations whose status differed from the app's
    cpu: dict[str, float]

    @property
    def ops_per_second(self) -> float:
        return self.ops / self.seconds if self.seconds else 0.0

    @property
    def templates_per_second(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else 0.0

    def cpu_per_template(self, names: Sequence[str]) -> float:
        """CPU ms per replayed request (its timed phases) of the named processes."""
        return per_call_ms(self.cpu, names, len(self.latencies))


_PAYLOADS: dict[int, bytes] = {}
_JSON = ContentSettings(content_type="application/json")


def _payload(size: int) -> bytes:
    if size not in _PAYLOADS:
        _PAYLOADS[size] = b"{" + b"x" * max(0, size - 2) + b"}"
    return _PAYLOADS[size]


def _run_ops(
    client: BlobServiceClient, ops: Sequence[TemplateOp], prefix: str, etags: dict[int, str]
) -> tuple[int, int]:
    """Run ``ops`` as the app did (same verbs, conditions, sizes) on blobs under ``prefix``;
    returns (operations run, operations whose status differed from the app's)."""
    ran = unexpected = 0
    for op in ops:
        blob = client.get_blob_client(op.container, f"{prefix}/{op.blob}")
        status = 200
        try:
            if op.kind in ("create", "put", "replace"):
                conditions: dict[str, Any] = {}
                if op.kind == "replace":
                    conditions = {
                        "etag": etags.get(op.blob, "*"),
                        "match_condition": MatchConditions.IfNotModified,
                    }
                result = blob.upload_blob(
                    _payload(op.size),
                    overwrite=op.kind != "create",
                    content_settings=_JSON,
                    **conditions,
                )
                etags[op.blob] = str(result["etag"])
                status = 201
            elif op.kind == "get":
                downloader = blob.download_blob()
                downloader.readall()
                etags[op.blob] = str(downloader.properties.etag)
            elif op.kind == "head":
                etags[op.blob] = str(blob.get_blob_properties().etag)
            elif op.kind == "delete":
                blob.delete_blob()
                status = 202
            elif op.kind == "list":
                pages = client.get_container_client(op.container).list_blobs(
                    name_starts_with=prefix
                )
                next(iter(pages.by_page()), None)
            else:
                continue  # container and other management calls are not replayed
        except ResourceNotFoundError:
            status = 404
        except ResourceExistsError:
            status = 409
        except ResourceModifiedError:
            status = 412
        ran += 1
        if (status >= 400) != (op.status >= 400):
            unexpected += 1
    return ran, unexpected


def replay(
    storage: str,
    templates: Sequence[Sequence[TemplateOp]],
    count: int,
    concurrency: int,
    *,
    timed: Sequence[str] = ("intake", "processing"),
    azurite_pid: int | None = None,
) -> Replay:
    """Replay ``count`` requests' storage sequences (cycling through ``templates``) with
    ``azure-storage-blob``, ``concurrency`` threads each with its own client. Only the
    ``timed`` phases are timed; the others run first, untimed (e.g. the intake that
    creates the blobs a processing replay reads)."""
    containers = {op.container for template in templates for op in template}
    setup_client = BlobServiceClient.from_connection_string(storage)
    for container in containers:
        with suppress(ResourceExistsError):
            setup_client.create_container(container)
    run_id = uuid.uuid4().hex[:8]
    state: list[dict[int, str]] = [{} for _ in range(count)]
    clients = [BlobServiceClient.from_connection_string(storage) for _ in range(concurrency)]
    lock = threading.Lock()

    def phase(
        ops_of: Callable[[Sequence[TemplateOp]], list[TemplateOp]], record: bool
    ) -> tuple[int, int, list[float]]:
        next_index = [0]
        totals = [0, 0]
        latencies: list[float] = []

        def worker(client: BlobServiceClient) -> None:
            while True:
                with lock:
                    index = next_index[0]
                    next_index[0] += 1
                if index >= count:
                    return
                ops = ops_of(templates[index % len(templates)])
                began = time.perf_counter()
                ran, unexpected = _run_ops(client, ops, f"replay-{run_id}-{index}", state[index])
                spent = time.perf_counter() - began
                with lock:
                    totals[0] += ran
                    totals[1] += unexpected
                    if record:
                        latencies.append(spent)

        threads = [threading.Thread(target=worker, args=(client,)) for client in clients]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return totals[0], totals[1], latencies

    untimed = [p for p in ("intake", "processing") if p not in timed]
    if untimed:
        phase(lambda t: [op for op in t if op.phase in untimed], record=False)
    meter = CpuMeter({"azurite": azurite_pid} if azurite_pid else {})
    meter.start()
    began = time.perf_counter()
    ops, unexpected, latencies = phase(lambda t: [op for op in t if op.phase in timed], record=True)
    seconds = time.perf_counter() - began
    return Replay(ops, seconds, latencies, unexpected, meter.stop())


def intake_sequence_latencies(
    storage: str,
    servicebus: str,
    queue: str,
    templates: Sequence[Sequence[TemplateOp]],
    shape: MessageShape,
    count: int,
) -> list[float]:
    """Seconds per intake of the intake's own calls alone, in its order, on the services
    the app uses (so against the same number of blobs): its storage operations, with the
    request message sent before the last one (the job is recorded after the broker took
    the message). One thread, clients opened beforehand; blobs under a prefix of their own."""
    run_id = uuid.uuid4().hex[:8]
    blobs = BlobServiceClient.from_connection_string(storage)
    latencies = []
    with (
        ServiceBusClient.from_connection_string(servicebus) as client,
        client.get_queue_sender(queue) as sender,
    ):
        sender.send_messages(shape.message())
        for index in range(count):
            ops = [op for op in templates[index % len(templates)] if op.phase == "intake"]
            prefix = f"sequence-{run_id}-{index}"
            etags: dict[int, str] = {}
            message = shape.message()
            began = time.perf_counter()
            _run_ops(blobs, ops[:-1], prefix, etags)
            sender.send_messages(message)
            _run_ops(blobs, ops[-1:], prefix, etags)
            latencies.append(time.perf_counter() - began)
    return latencies


def storage_replay(
    work: Path,
    name: str,
    templates: Sequence[Sequence[TemplateOp]],
    count: int,
    concurrency: int,
    timed: Sequence[str] = ("intake", "processing"),
) -> Replay:
    """``replay`` against a new, empty Azurite of its own (stopped afterwards)."""
    child, storage = fresh_azurite(work, name)
    try:
        result = replay(
            storage, templates, count, concurrency, timed=timed, azurite_pid=child.process.pid
        )
    finally:
        child.stop()
    if result.unexpected:
        print(
            f"  note: {result.unexpected} of {result.ops} replayed storage operations answered "
            "otherwise than the app's (success where it failed or the reverse)"
        )
    return result
