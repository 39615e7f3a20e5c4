"""Event Grid push delivery: the event shape of storage events and the retry policy.

Retry policy as documented for Event Grid: only 200-204 mean delivered; 400 and 413 (and
401/403 on webhooks) are never retried; 503 waits at least 30 s and 408 at least 2 min;
otherwise the schedule is 10 s, 30 s, 1 min, 5 min, 10 min, 30 min, 1 h, 3 h, 6 h, then
every 12 h, up to 30 attempts or 24 h. ``time_scale`` shrinks every delay for tests.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

RETRY_SCHEDULE_S = (10, 30, 60, 300, 600, 1800, 3600, 10800, 21600)
LATER_RETRY_S = 43200
MAX_ATTEMPTS = 30
EVENT_TTL_S = 86400
DELIVERED = frozenset({200, 201, 202, 203, 204})
NOT_RETRIED = frozenset({400, 401, 403, 413})
MINIMUM_WAIT_S = {503: 30, 408: 120}
ZERO_SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"


@dataclass(frozen=True)
class RetryPolicy:
    time_scale: float = 1.0
    max_attempts: int = MAX_ATTEMPTS
    ttl_s: float = EVENT_TTL_S

    def delay_after(self, attempt: int, status: int) -> float | None:
        """Seconds before attempt ``attempt + 1``, or None when delivery ends here."""
        if status in DELIVERED or status in NOT_RETRIED or attempt >= self.max_attempts:
            return None
        index = attempt - 1
        delay = RETRY_SCHEDULE_S[index] if index < len(RETRY_SCHEDULE_S) else LATER_RETRY_S
        return max(delay, MINIMUM_WAIT_S.get(status, 0)) * self.time_scale


def blob_created_event(
    *,
    account: str,
    container: str,
    blob_name: str,
    blob_url: str,
    etag: str,
    content_type: str | None,
    content_length: int,
    last_modified: datetime,
    sequencer: int,
) -> dict[str, Any]:
    """A ``Microsoft.Storage.BlobCreated`` event in the Event Grid schema, as Azure sends it."""
    return {
        "topic": (
            f"/subscriptions/{ZERO_SUBSCRIPTION}/resourceGroups/local/providers/"
            f"Microsoft.Storage/storageAccounts/{account}"
        ),
        "subject": f"/blobServices/default/containers/{container}/blobs/{blob_name}",
        "eventType": "Microsoft.Storage.BlobCreated",
        "eventTime": last_modified.isoformat().replace("+00:00", "Z"),
        "id": str(uuid.uuid4()),
        "data": {
            "api": "PutBlob",
            "clientRequestId": str(uuid.uuid4()),
            "requestId": str(uuid.uuid4()),
            "eTag": etag,
            "contentType": content_type or "application/octet-stream",
            "contentLength": content_length,
            "blobType": "BlockBlob",
            "url": f"{blob_url.rsplit('/', 1)[0]}/{quote(blob_name)}" if blob_url else "",
            "sequencer": f"{sequencer:032X}",
            "storageDiagnostics": {"batchId": str(uuid.uuid4())},
        },
        "dataVersion": "",
        "metadataVersion": "1",
    }


def post_events(
    url: str, events: list[dict[str, Any]], *, attempt: int = 1, validation: bool = False
) -> tuple[int, bytes]:
    """POST like Event Grid does; returns (status, body); network errors count as 503-ish."""
    request = urllib.request.Request(  # noqa: S310 (the host's own loopback URL)
        url,
        data=json.dumps(events).encode(),
        method="POST",
        headers={
            "Content-Type": "application/json",
            "aeg-event-type": "SubscriptionValidation" if validation else "Notification",
            "aeg-delivery-count": str(attempt - 1),
            "aeg-data-version": "",
            "aeg-metadata-version": "1",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 (loopback)
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as error:
        return int(error.code), bytes(error.read() or b"")
    except (urllib.error.URLError, TimeoutError, ConnectionError):
        return 0, b""


def validation_event(topic: str) -> tuple[dict[str, Any], str]:
    code = str(uuid.uuid4())
    event = {
        "id": str(uuid.uuid4()),
        "topic": topic,
        "subject": "",
        "data": {"validationCode": code, "validationUrl": ""},
        "eventType": "Microsoft.EventGrid.SubscriptionValidationEvent",
        "eventTime": datetime.now().astimezone().isoformat(),
        "metadataVersion": "1",
        "dataVersion": "2",
    }
    return event, code
