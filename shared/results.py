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
from shared.accounting.cost import request_cost
from shared.clock import Clock, utc_now
from shared.contracts import (
    Cost,
    InferenceResult,
    ProcessingMode,
    RequestMessage,
    ResultDocument,
    TokenUsage,
)
from shared.errors import InvalidModelOutput, PermanentError, PolicyRefusal, TransientError
from shared.inference import InferenceInput, ModelAnswer, ModelClient
from shared.inference.faults import SimulatedFaults, raise_simulated, split_faults
from shared.inference.served import ServedModel

log = logging.getLogger(__name__)

UNKNOWN_SYSTEM = "unknown"
TaskResult = InferenceResult | dict[str, Any]


def run_model(
    request: RequestMessage,
    content: bytes,
    media_type: str,
    served: ServedModel,
    attempt: int,
    clock: Clock = utc_now,
    *,
    faults_allowed: bool = False,
) -> ResultDocument:
    """Ask the alias's model and shape its answer by the alias's task, costed at the
    alias's queue-lane prices; a policy refusal becomes a ``refused`` result, not an error.
    ``faults_allowed``: the faults a request asks for (``parameters.simulate``) are raised
    (LocalModelFaults), else dropped."""
    parameters, faults = split_faults(request.parameters, faults_allowed)
    now = clock()
    model_input = InferenceInput(
        request_id=request.request_id,
        model=request.model,
        content=content,
        media_type=media_type,
        parameters=parameters,
        attempt=attempt,
        task=served.card.task.name,
        priority=request.priority,
        tenant=request.tenant_id,
        wait_limit=(request.deadline - now).total_seconds() if request.deadline else None,
    )
    completed_at = now.isoformat()
    outcome = _observed_infer(served, model_input, request.tenant_id, faults)
    if isinstance(outcome, PolicyRefusal):
        category = outcome.category or "content_policy"
        return refused_result(request, served.card.task.name, category, str(outcome), completed_at)
    result, answer = outcome
    cost = request_cost(answer.usage, served.card.prices, ProcessingMode.QUEUE)
    if cost is not None:
        telemetry.record_cost(
            model=request.model, tenant=request.tenant_id, mode=ProcessingMode.QUEUE.value,
            amount=float(cost.amount), currency=cost.currency,
        )  # fmt: skip
    return completed_result(
        request,
        served.card.task.name,
        result,
        answer.usage,
        answer.finish_reason,
        completed_at,
        cost=cost,
    )


def completed_result(
    request: RequestMessage,
    task: str,
    result: TaskResult,
    usage: TokenUsage | None,
    finish_reason: str | None,
    completed_at: str,
    *,
    cost: Cost | None,
) -> ResultDocument:
    """The result document of a model's answer (either lane), with what its usage cost
    on that lane (``shared.accounting.cost``; None when not known)."""
    return ResultDocument.model_validate(
        {
            **_result_ids(request, task, completed_at),
            "outcome": "completed",
            "result": result.model_dump(mode="json")
            if isinstance(result, InferenceResult)
            else result,
            "usage": usage.model_dump() if usage is not None else None,
            "cost": cost,
            "finish_reason": finish_reason,
        }
    )


def refused_result(
    request: RequestMessage, task: str, category: str, message: str, completed_at: str
) -> ResultDocument:
    """The result document of a content-policy refusal (either lane)."""
    return ResultDocument.model_validate(
        {
            **_result_ids(request, task, completed_at),
            "outcome": "refused",
            "refusal": {"category": category, "message": message},
        }
    )


def _result_ids(request: RequestMessage, task: str, completed_at: str) -> dict[str, str]:
    return {
        "request_id": request.request_id,
        "tenant_id": request.tenant_id,
        "model": request.model,
        "task": task,
        "completed_at": completed_at,
    }


def system_of(model: ModelClient) -> str:
    """The model's ``gen_ai.system``; a client that does not name one (a test double) is
    reported as ``unknown`` rather than failing the call: telemetry never breaks work."""
    system = getattr(model, "system", None)
    return system if isinstance(system, str) and system else UNKNOWN_SYSTEM


def _observed_infer(
    served: ServedModel,
    model_input: InferenceInput,
    tenant: str,
    faults: SimulatedFaults | None,
) -> tuple[TaskResult, ModelAnswer] | PolicyRefusal:
    """The model's answer and the task's result of it, inside a ``chat <alias>`` span that
    records the call's metrics. A refusal is returned, not raised: raised through the span
    it would mark it failed."""
    system = system_of(served.client)
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.system": system,
        "gen_ai.request.model": model_input.model,
        "inferbus.task": model_input.task,
        "inferbus.provider": served.card.provider,
        "inferbus.request_id": model_input.request_id,
        "inferbus.tenant": tenant,
        "inferbus.attempt": model_input.attempt,
    }
    started = time.perf_counter()

    def record(current: Span, outcome: str, usage: TokenUsage | None = None) -> None:
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
        answer: ModelAnswer | None = None
        try:
            raise_simulated(faults, model_input.attempt)
            answer = served.client.infer(model_input)
            result = served.card.task.result(answer)
        except PolicyRefusal as refusal:
            if refusal.category:
                current.set_attribute("inferbus.refusal.category", refusal.category)
            record(current, "refused")
            return refusal
        except InvalidModelOutput:
            # The tokens of an answer that breaks its schema are spent all the same.
            record(current, "invalid_output", answer.usage if answer is not None else None)
            raise
        except TransientError:
            record(current, "transient_error")
            raise
        except PermanentError:
            record(current, "permanent_error")
            raise
        except Exception:
            record(current, "unexpected_error")  # a bug: the span is failed, the call timed
            raise
        if answer.usage is not None:
            current.set_attribute("gen_ai.usage.input_tokens", answer.usage.input_tokens)
            current.set_attribute("gen_ai.usage.output_tokens", answer.usage.output_tokens)
        if answer.finish_reason:
            current.set_attribute("gen_ai.response.finish_reasons", [answer.finish_reason])
        record(current, "completed", answer.usage)
        return result, answer
