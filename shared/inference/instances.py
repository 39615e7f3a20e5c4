"""How many instances of the app are running: each one's share of a deployment's quota.

A model deployment's quota is shared by every instance the platform runs (Flex scales the
app out to ``maximumInstanceCount``), and no always-on service counts them. So each
instance writes a heartbeat document into the app's own storage every
``heartbeat_seconds`` (``instances/<id>.json`` in the ledger container) and counts the
heartbeats written within three ``heartbeat_seconds`` of the newest one (the storage's clock
for all of them, so the instances' clocks need not agree). A crashed instance drops out
of the count three heartbeats later; a new one is counted from its first. Until the first
count, an instance counts itself alone.

The count is kept by a thread of its own, started at the first use, so a model call never
waits for storage; a storage failure keeps the last count (and says so once).
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime

from shared.clock import Clock, utc_now
from shared.documents import DocumentListing, JsonDocuments

log = logging.getLogger(__name__)

PREFIX = "instances/"


class InstanceRegistry:
    def __init__(
        self,
        documents: JsonDocuments,
        listing: DocumentListing,
        container: str,
        instance_id: str,
        *,
        heartbeat_seconds: float = 10.0,
        clock: Clock = utc_now,
    ) -> None:
        self._documents = documents
        self._listing = listing
        self._container = container
        self.instance_id = instance_id
        self._heartbeat = heartbeat_seconds
        self._clock = clock
        self._count = 1
        self._started = False
        self._lock = threading.Lock()
        self._failing = False

    def count(self) -> int:
        """The live instances, this one included (1 until the first heartbeat is read)."""
        with self._lock:
            if not self._started:
                self._started = True
                threading.Thread(target=self._run, name="instances", daemon=True).start()
            return self._count

    def beat(self) -> int:
        """Write this instance's heartbeat and count the live ones (one round trip each)."""
        name = f"{PREFIX}{self.instance_id}.json"
        self._documents.put(
            self._container, name, {"instance": self.instance_id, "at": self._clock().isoformat()}
        )
        modified = [at for _, at in self._listing.list_modified(self._container, PREFIX)]
        newest = max(modified, default=None)
        if newest is None:
            return 1
        return max(1, sum(1 for at in modified if fresh(at, newest, 3 * self._heartbeat)))

    def _run(self) -> None:
        while True:  # a daemon thread: it ends with the process
            try:
                counted = self.beat()
            except Exception as error:
                if not self._failing:
                    log.warning("instance heartbeat failed (%s); keeping the count", error)
                self._failing = True
            else:
                self._failing = False
                with self._lock:
                    if counted != self._count:
                        log.info("live instances: %d (was %d)", counted, self._count)
                    self._count = counted
            time.sleep(self._heartbeat)


def fresh(at: datetime, newest: datetime, within: float) -> bool:
    return (newest - at).total_seconds() <= within
