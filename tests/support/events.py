"""Event payloads in the shapes Event Grid documents, built for tests."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from shared.blobs import BlobStore

STORAGE_TOPIC = (
    "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg"
    "/providers/Microsoft.Storage/storageAccounts/devstoreaccount1"
)


VALIDATION_CODE = "512d38b6-c7b8-40c8-89fe-f46f9e9622b6"


def subscription_validation_event() -> dict[str, Any]:
    """The event Event Grid sends (Event Grid schema) to validate a webhook subscription."""
    return {
        "id": "2d1781af",
        "topic": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.EventGrid/topics/t",
        "subject": "",
        "data": {"validationCode": VALIDATION_CODE},
        "eventType": "Microsoft.EventGrid.SubscriptionValidationEvent",
        "eventTime": "2026-11-29T10:00:00Z",
        "metadataVersion": "1",
        "dataVersion": "1",
    }


def blob_created_event(storage: BlobStore, container: str, name: str) -> dict[str, Any]:
    """A ``Microsoft.Storage.BlobCreated`` event (Event Grid schema) for a stored blob."""
    info = storage.info(container, name)
    assert info is not None, f"{container}/{name} must exist"
    return {
        "topic": STORAGE_TOPIC,
        "subject": f"/blobServices/default/containers/{container}/blobs/{name}",
        "eventType": "Microsoft.Storage.BlobCreated",
        "id": str(uuid.uuid4()),
        "data": {
            "api": "PutBlob",
            "clientRequestId": str(uuid.uuid4()),
            "requestId": str(uuid.uuid4()),
            "eTag": info.etag,
            "contentType": info.media_type,
            "contentLength": info.size,
            "blobType": "BlockBlob",
            "url": f"{storage.account_url}/{container}/{name}",
            "sequencer": "00000000000000000000000000000001",
            "storageDiagnostics": {"batchId": str(uuid.uuid4())},
        },
        "dataVersion": "",
        "metadataVersion": "1",
        "eventTime": datetime.now(UTC).isoformat(),
    }


def requested_event(tenant: str, event_id: str | None = None, **data: Any) -> dict[str, Any]:
    """A structured ``com.inferbus.InferenceRequested`` CloudEvent for ``tenant``."""
    return {
        "specversion": "1.0",
        "type": "com.inferbus.InferenceRequested",
        "source": "/apps/crm",
        "id": event_id or str(uuid.uuid4()),
        "time": "2026-11-29T10:00:00Z",
        "subject": f"/tenants/{tenant}",
        "datacontenttype": "application/json",
        "data": {"tenant_id": tenant, "input": {"text": "Please summarise this report."}, **data},
    }
