"""Result documents: what a model's answer (or refusal) becomes.

A result is stored in its job document, in the same compare-and-swap write that marks
the job completed: one storage operation instead of a result blob plus a job update,
and a status or result request reads one document. Inference is the expensive, possibly
non-deterministic step, so the job is completed (the result durable) before anything is
announced; a redelivery of a completed job republishes the stored result instead of
running the model again.

Every lane's model call goes through ``run_model``, so this is where a call becomes
telemetry: a CLIENT span ``chat <model>`` with the OpenTelemetry GenAI attributes and the
``gen_ai.client.*`` metrics, for answers, refusals and failures alike (a refusal is an
outcome, not an error; a failure marks the span failed and still records its duration).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from opentelemetry.trace import Span

from shared import telemetry
from shared.clock import Clock, utc_now
from shared.contracts import InferenceResult, RequestMessage, ResultDocument
from shared.errors import PermanentError, PolicyRefusal, TransientError
from shared.inference import InferenceInput, ModelClient

log = logging.getLogger(__name__)

UNKNOWN_SYSTEM = "unknown"


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
    answer = _observed_infer(model, model_input, request.tenant_id)
    if isinstance(answer, PolicyRefusal):
        category = answer.category or "content_policy"
        return refused_result(request, category, str(answer), completed_at)
    return completed_result(request, answer, completed_at)


def completed_result(
    request: RequestMessage, result: InferenceResult, completed_at: str
) -> ResultDocument:
    """The result document of a model's answer (either lane)."""
    return ResultDocument.model_validate(
        {
            **_result_ids(request, completed_at),
            "outcome": "completed",
            "result": result.model_dump(mode="json"),
        }
    )


def refused_result(
    request: RequestMessage, category: str, message: str, completed_at: str
) -> ResultDocument:
    """The result document of a content-policy refusal (either lane)."""
    return ResultDocument.model_validate(
        {
            **_result_ids(request, completed_at),
            "outcome": "refused",
            "refusal": {"category": category, "message": message},
        }
    )


def _result_ids(request: RequestMessage, completed_at: str) -> dict[str, str]:
    return {
        "request_id": request.request_id,
        "tenant_id": request.tenant_id,
        "model": request.model,
        "completed_at": completed_at,
    }


def system_of(model: ModelClient) -> str:
    """The model's ``gen_ai.system``; a client that does not name one (a test double) is
    reported as ``unknown`` rather than failing the call: telemetry never breaks work."""
    system = getattr(model, "system", None)
    return system if isinstance(system, str) and system else UNKNOWN_SYSTEM


def _observed_infer(
    model: ModelClient, model_input: InferenceInput, tenant: str
) -> InferenceResult | PolicyRefusal:
    """``model.infer`` inside a ``chat <model>`` span, recording the call's metrics. A
    refusal is returned, not raised: raised through the span it would mark it failed."""
    system = system_of(model)
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.system": system,
        "gen_ai.request.model": model_input.model,
        "inferbus.request_id": model_input.request_id,
        "inferbus.tenant": tenant,
        "inferbus.attempt": model_input.attempt,
    }
    started = time.perf_counter()

    def record(current: Span, outcome: str, result: InferenceResult | None = None) -> None:
        usage = result.usage if result is not None else None
        current.set_attribute("inferbus.outcome", outcome)
        telemetry.record_model_call(
            system=system,
            model=model_input.model,
            tenant=tenant,
            seconds=time.perf_counter() - started,
            outcome=outcome,
            input_tokens=usage.input_tokens if usage else None,
            output_tokens=usage.output_tokens if usage else None,
        )

    with telemetry.span(
        f"{telemetry.SPAN_CHAT} {model_input.model}", kind=telemetry.CLIENT, attributes=attributes
    ) as current:
        try:
            result = model.infer(model_input)
        except PolicyRefusal as refusal:
            if refusal.category:
                current.set_attribute("inferbus.refusal.category", refusal.category)
            record(current, "refused")
            return refusal
        except TransientError:
            record(current, "transient_error")
            raise
        except PermanentError:
            record(current, "permanent_error")
            raise
        except Exception:
            record(current, "unexpected_error")  # a bug: the span is failed, the call timed
            raise
        if result.usage is not None:
            current.set_attribute("gen_ai.usage.input_tokens", result.usage.input_tokens)
            current.set_attribute("gen_ai.usage.output_tokens", result.usage.output_tokens)
        if result.finish_reason:
            current.set_attribute("gen_ai.response.finish_reasons", [result.finish_reason])
        record(current, "completed", result)
        return result
