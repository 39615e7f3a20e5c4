"""Result documents: written once per request, found again on any redelivery.

Inference is the expensive, possibly non-deterministic step. If a previous attempt ran
the model and stored the result but failed later (publication, settlement), a retry must
publish that same stored result rather than run the model again: so results are looked
up first and written only when absent.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from shared.clock import Clock, utc_now
from shared.contracts import RequestMessage
from shared.errors import PolicyRefusal
from shared.inference import InferenceInput, ModelClient, ResultDocument
from shared.intake.claim_checks import BlobStore

log = logging.getLogger(__name__)


class ResultStore:
    def __init__(self, blobs: BlobStore, container: str, clock: Clock = utc_now) -> None:
        self._blobs = blobs
        self._container = container
        self._clock = clock

    @staticmethod
    def blob_name(tenant_id: str, request_id: str) -> str:
        return f"{tenant_id}/{request_id}.json"

    def uri(self, blob_name: str) -> str:
        return f"{self._blobs.account_url}/{self._container}/{blob_name}"

    def find(self, tenant_id: str, request_id: str) -> ResultDocument | None:
        content = self._blobs.read(self._container, self.blob_name(tenant_id, request_id))
        return ResultDocument.model_validate_json(content) if content is not None else None

    def save(self, document: ResultDocument) -> str:
        name = self.blob_name(document.tenant_id, document.request_id)
        body = document.model_dump_json(by_alias=True).encode("utf-8")
        self._blobs.upload(self._container, name, body, "application/json", {})
        return name

    def find_or_create(
        self,
        request: RequestMessage,
        read_input: Callable[[], tuple[bytes, str]],
        model: ModelClient,
        attempt: int,
    ) -> tuple[ResultDocument, str]:
        """The stored result of ``request``, running the model only when there is none."""
        existing = self.find(request.tenant_id, request.request_id)
        if existing is not None:
            log.info("result of %s already stored; reusing it", request.request_id)
            return existing, self.blob_name(request.tenant_id, request.request_id)
        content, media_type = read_input()
        document = run_model(request, content, media_type, model, attempt, self._clock)
        return document, self.save(document)


def run_model(
    request: RequestMessage,
    content: bytes,
    media_type: str,
    model: ModelClient,
    attempt: int,
    clock: Clock = utc_now,
) -> ResultDocument:
    """Ask the model; a policy refusal becomes a ``refused`` result, not an error."""
    model_input = InferenceInput(
        request_id=request.request_id,
        model=request.model,
        content=content,
        media_type=media_type,
        parameters=request.parameters,
        attempt=attempt,
    )
    completed_at = clock().isoformat()
    common = {
        "request_id": request.request_id,
        "tenant_id": request.tenant_id,
        "model": request.model,
        "completed_at": completed_at,
    }
    try:
        result = model.infer(model_input)
    except PolicyRefusal as refusal:
        category = refusal.category or "content_policy"
        return ResultDocument.model_validate(
            {
                **common,
                "outcome": "refused",
                "refusal": {"category": category, "message": str(refusal)},
            }
        )
    return ResultDocument.model_validate(
        {**common, "outcome": "completed", "result": json.loads(result.model_dump_json())}
    )


def summary_of(document: ResultDocument) -> dict[str, object]:
    """What the job document keeps of a result (the full result stays in its blob)."""
    summary: dict[str, object] = {"outcome": document.outcome}
    if document.result is not None:
        summary["document_type"] = document.result.document_type
        summary["confidence"] = document.result.confidence
        summary["review_required"] = document.result.review_required
    if document.refusal:
        summary["refusal"] = document.refusal
    return summary
