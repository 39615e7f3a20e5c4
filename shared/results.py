"""Result documents: what a model's answer (or refusal) becomes.

A result is stored in its job document, in the same compare-and-swap write that marks
the job completed: one storage operation instead of a result blob plus a job update,
and a status or result request reads one document. Inference is the expensive, possibly
non-deterministic step, so the job is completed (the result durable) before anything is
announced; a redelivery of a completed job republishes the stored result instead of
running the model again.
"""

from __future__ import annotations

import json
import logging

from shared.clock import Clock, utc_now
from shared.contracts import RequestMessage, ResultDocument
from shared.errors import PolicyRefusal
from shared.inference import InferenceInput, ModelClient

log = logging.getLogger(__name__)


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
