"""A stand-in for the storage account's Event Grid system topic.

For every blob trigger it polls the trigger's container and pushes a ``BlobCreated`` event
per new blob version to the host's blobs webhook, with Event Grid's retry policy.

Delivered-once bookkeeping mirrors the host's blob receipts: in the ``azure-webjobs-hosts``
container of the storage account (``AzureWebJobsStorage`` when set, else the trigger's
connection) it keeps, per function,

* ``blobreceipts/<hostId>/<function>/subscription`` - written when the "subscription" is
  first created; like a real Event Grid subscription, only blobs written after it produce
  events (earlier blobs are never delivered);
* ``blobreceipts/<hostId>/<function>/<etag>/<container>/<blob>`` - one per blob version
  whose delivery ended (delivered, or dropped after the retries), so nothing is delivered
  twice, across restarts too. Deliveries still retrying when the host stops are
  delivered again after a restart (at-least-once, as with Event Grid).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import heapq
import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from azure.storage.blob import BlobServiceClient, ContainerClient

from functions_host.eventgrid_delivery import (
    DELIVERED,
    RetryPolicy,
    blob_created_event,
    post_events,
    validation_event,
)
from functions_host.functions import FunctionSpec
from functions_host.storage import blob_service_for_connection, container_of_path

log = logging.getLogger("host.blob_watcher")
RECEIPTS_CONTAINER = "azure-webjobs-hosts"


@dataclass
class _Watch:
    function: str
    container: ContainerClient
    receipts: ContainerClient
    prefix: str
    webhook_url: str
    since: datetime | None = None
    known: set[tuple[str, str]] = field(default_factory=set)


@dataclass(order=True)
class _Delivery:
    due: float
    order: int
    watch: _Watch = field(compare=False)
    blob_name: str = field(compare=False)
    etag: str = field(compare=False)
    event: dict[str, Any] = field(compare=False)
    first_attempt: float = field(compare=False, default=0.0)
    attempt: int = field(compare=False, default=1)


class BlobWatcher:
    def __init__(
        self,
        functions: list[FunctionSpec],
        webhook_base: str,
        blobs_key: str,
        host_id: str,
        *,
        poll_interval_s: float = 2.0,
        retry: RetryPolicy | None = None,
        receipts_connection: str | None = "AzureWebJobsStorage",
    ) -> None:
        self._specs = [f for f in functions if f.trigger_type == "blobTrigger"]
        self._webhook_base = webhook_base.rstrip("/")
        self._key = blobs_key
        self._host_id = host_id
        self._poll = poll_interval_s
        self._retry = retry or RetryPolicy()
        self._receipts_connection = receipts_connection
        self._watches: list[_Watch] = []
        self._queue: list[_Delivery] = []
        self._queue_lock = threading.Lock()
        self._sequence = itertools.count(int(time.time() * 1000))
        self._stop = threading.Event()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=4, thread_name_prefix="eventgrid"
        )
        self._thread = threading.Thread(target=self._guarded_run, name="blob-watcher", daemon=True)

    def _client(self, connection: str) -> BlobServiceClient:
        return blob_service_for_connection(connection)

    def _build_watches(self) -> None:
        for spec in self._specs:
            connection = str(spec.trigger.get("connection") or "AzureWebJobsStorage")
            service = self._client(connection)
            try:
                receipts_service = self._client(self._receipts_connection or connection)
            except Exception:
                receipts_service = service
            receipts = receipts_service.get_container_client(RECEIPTS_CONTAINER)
            url = (
                f"{self._webhook_base}/runtime/webhooks/blobs?functionName=Host.Functions."
                f"{spec.name}&code={self._key}"
            )
            container = service.get_container_client(container_of_path(str(spec.trigger["path"])))
            self._watches.append(
                _Watch(
                    spec.name,
                    container,
                    receipts,
                    f"blobreceipts/{self._host_id}/{spec.name}/",
                    url,
                )
            )

    def start(self) -> None:
        """Subscribe every blob trigger (synchronously, so blobs written after the host
        reports ready are never missed), then poll in the background."""
        if not self._specs:
            return
        self._build_watches()
        for watch in self._watches:
            try:
                self._subscribe(watch)
            except Exception as error:
                log.warning(
                    "subscribing %s failed (%r); retrying in the background", watch.function, error
                )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _guarded_run(self) -> None:
        while not self._stop.is_set():
            for watch in self._watches:
                try:
                    self._scan(watch)
                except Exception as error:
                    log.warning(
                        "scanning %s for %s failed: %r",
                        watch.container.container_name,
                        watch.function,
                        error,
                    )
            self._dispatch_due()
            self._stop.wait(self._poll)

    def _subscribe(self, watch: _Watch) -> None:
        """Create (or find) the subscription marker and learn the delivered receipts."""
        with contextlib.suppress(ResourceExistsError):
            watch.receipts.create_container()
        marker = watch.receipts.get_blob_client(f"{watch.prefix}subscription")
        try:
            marker.upload_blob(b"", overwrite=False)
            status, _ = self._validate(watch)
            log.info(
                "blob trigger %s subscribed to %s (validation %s)",
                watch.function,
                watch.container.container_name,
                status,
            )
        except ResourceExistsError:
            pass
        watch.since = marker.get_blob_properties().last_modified
        for item in watch.receipts.list_blobs(name_starts_with=watch.prefix):
            rest = item.name[len(watch.prefix) :]
            etag, _, path = rest.partition("/")
            if path:
                watch.known.add((path.partition("/")[2], etag))

    def _validate(self, watch: _Watch) -> tuple[int, bytes]:
        event, _code = validation_event(watch.container.url)
        return post_events(watch.webhook_url, [event], validation=True)

    def _scan(self, watch: _Watch) -> None:
        if watch.since is None:
            self._subscribe(watch)
        assert watch.since is not None
        try:
            blobs = list(watch.container.list_blobs())
        except ResourceNotFoundError:
            return  # the container does not exist (yet): no events
        for blob in blobs:
            key = (blob.name, str(blob.etag))
            if key in watch.known or blob.last_modified < watch.since:
                continue
            watch.known.add(key)
            event = blob_created_event(
                account=watch.container.account_name or "devstoreaccount1",
                container=watch.container.container_name,
                blob_name=blob.name,
                blob_url=watch.container.get_blob_client(blob.name).url,
                etag=str(blob.etag),
                content_type=blob.content_settings.content_type,
                content_length=int(blob.size or 0),
                last_modified=blob.last_modified,
                sequencer=next(self._sequence),
            )
            now = time.monotonic()
            delivery = _Delivery(
                now, next(self._sequence), watch, blob.name, str(blob.etag), event, now
            )
            with self._queue_lock:
                heapq.heappush(self._queue, delivery)

    def _dispatch_due(self) -> None:
        now = time.monotonic()
        with self._queue_lock:
            due = []
            while self._queue and self._queue[0].due <= now:
                due.append(heapq.heappop(self._queue))
        for delivery in due:
            self._pool.submit(self._deliver, delivery)

    def _deliver(self, delivery: _Delivery) -> None:
        try:
            status, _ = post_events(
                delivery.watch.webhook_url, [delivery.event], attempt=delivery.attempt
            )
            self._after_attempt(delivery, status)
        except Exception:
            log.exception("delivering %s to %s failed", delivery.blob_name, delivery.watch.function)

    def _after_attempt(self, delivery: _Delivery, status: int) -> None:
        watch = delivery.watch
        delay = self._retry.delay_after(delivery.attempt, status)
        elapsed = time.monotonic() - delivery.first_attempt
        if delay is not None and elapsed + delay <= self._retry.ttl_s * self._retry.time_scale:
            log.info(
                "BlobCreated %s/%s -> %s answered %s (attempt %d); retrying in %.1fs",
                watch.container.container_name,
                delivery.blob_name,
                watch.function,
                status or "no answer",
                delivery.attempt,
                delay,
            )
            delivery.attempt += 1
            delivery.due = time.monotonic() + delay
            with self._queue_lock:
                heapq.heappush(self._queue, delivery)
            return
        if status not in DELIVERED:
            log.warning(
                "BlobCreated %s/%s -> %s dropped after %d attempt(s) (last answer %s)",
                watch.container.container_name,
                delivery.blob_name,
                watch.function,
                delivery.attempt,
                status or "none",
            )
        self._write_receipt(delivery, status)

    def _write_receipt(self, delivery: _Delivery, status: int) -> None:
        watch = delivery.watch
        name = (
            f"{watch.prefix}{delivery.etag}/{watch.container.container_name}/{delivery.blob_name}"
        )
        try:
            watch.receipts.get_blob_client(name).upload_blob(
                b"",
                overwrite=True,
                metadata={"status": str(status), "attempts": str(delivery.attempt)},
            )
        except Exception as error:
            log.warning("could not record the receipt of %s: %r", delivery.blob_name, error)
