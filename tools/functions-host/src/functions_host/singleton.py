"""Timer triggers run as singletons across instances, as the Functions host runs them.

Several hosts of one app (the app scaled out, ``python -m devtools.stack --instances N``)
would each fire every timer; the Functions host prevents that with a blob lease: the
timer's listener runs only on the instance that holds the lease of
``azure-webjobs-hosts/locks/<host id>/Host.Functions.<function>.Listener`` in
``AzureWebJobsStorage``, renewed while it runs; when that instance goes away, its lease
lapses and another instance takes the listener over. ``ListenerLock`` holds that lease:
it tries to take it when the timer starts and then every ``RENEW_SECONDS``, renews it
while held, and releases it when the timer stops. Without ``AzureWebJobsStorage`` there
is no lock (one host: it always holds).
"""

from __future__ import annotations

import contextlib
import logging
import threading

from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.storage.blob import BlobLeaseClient, ContainerClient

from functions_host.storage import StorageConnectionError, blob_service_for_connection

log = logging.getLogger("host.singleton")

CONTAINER = "azure-webjobs-hosts"
LEASE_SECONDS = 15  # the lease a listener holds (15-60 s: the storage service's range)
RENEW_SECONDS = 5.0  # how often it is renewed, or taken when another instance let go


def lock_blob_name(host_id: str, function: str) -> str:
    return f"locks/{host_id}/Host.Functions.{function}.Listener"


class ListenerLock:
    """The lease of one timer's listener (``held``: this instance may fire it)."""

    def __init__(self, container: ContainerClient | None, host_id: str, function: str) -> None:
        self._container = container
        self._blob = (
            container.get_blob_client(lock_blob_name(host_id, function)) if container else None
        )
        self._function = function
        self._lease: BlobLeaseClient | None = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lock-{function}", daemon=True)

    @classmethod
    def for_timer(cls, host_id: str, function: str) -> ListenerLock:
        """The lock in ``AzureWebJobsStorage``, or no lock when it is not configured."""
        try:
            service = blob_service_for_connection("AzureWebJobsStorage")
        except StorageConnectionError:
            return cls(None, host_id, function)
        return cls(service.get_container_client(CONTAINER), host_id, function)

    @property
    def held(self) -> bool:
        return self._blob is None or self._lease is not None

    def start(self) -> None:
        if self._blob is not None:
            self._step()
            self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        lease, self._lease = self._lease, None
        if lease is not None:
            with contextlib.suppress(HttpResponseError):  # else it lapses by itself
                lease.release()

    def _run(self) -> None:
        while not self._stopped.wait(RENEW_SECONDS):
            self._step()

    def _step(self) -> None:
        """Renew the lease held, or take it when it is free."""
        assert self._blob is not None
        try:
            if self._lease is not None:
                self._lease.renew()
                return
            self._ensure_blob()
            self._lease = self._blob.acquire_lease(lease_duration=LEASE_SECONDS)
            log.info("timer %s: this instance holds its listener lock", self._function)
        except HttpResponseError as error:
            if self._lease is not None:
                log.warning("timer %s: lost its listener lock (%s)", self._function, error)
            self._lease = None  # another instance holds it (409), or storage failed
        except Exception:
            log.exception("timer %s: its listener lock failed", self._function)
            self._lease = None

    def _ensure_blob(self) -> None:
        """The lock blob (and its container) exist: a lease is taken on a blob."""
        assert self._blob is not None
        assert self._container is not None
        try:
            self._blob.upload_blob(b"", overwrite=False)
        except ResourceNotFoundError:
            with contextlib.suppress(ResourceExistsError):
                self._container.create_container()
            self._ensure_blob()
        except ResourceExistsError:
            pass
        except HttpResponseError as error:
            if error.status_code not in (409, 412):  # a leased blob refuses the write: it exists
                raise
