"""Staging: a batch-mode request message becomes a pending line of the next input file.

Batch-mode requests travel the same queue as every other request (so every door, direct
producers included, works the same, and intake stays two storage writes). The processor
hands a batch-mode message here instead of to the model: its input is read once and its
JSONL line built now, so submitting later reads only the staged records. The line is the
chat-completions body any provider sends (``shared.inference.chat``): the alias's task's
instructions and output schema, its declared parameters. Staging is one exclusive
create: a redelivered message finds its line staged and changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from shared.clock import Clock, utc_now
from shared.contracts import RequestMessage
from shared.errors import InvalidInput, PermanentError
from shared.global_batch.files import encoded, input_line
from shared.global_batch.records import PendingRequest
from shared.global_batch.store import BatchRecords
from shared.inference import InferenceInput, reads_as_text
from shared.inference.catalog import ModelCatalog
from shared.inference.chat import JSON_SCHEMA, chat_request
from shared.inference.faults import split_faults

TRACE_PROPERTIES = ("traceparent", "tracestate")


@dataclass(frozen=True)
class StagingPolicy:
    catalog: ModelCatalog  # each alias's task, parameters and Global Batch deployment
    max_bytes_per_file: int


class BatchStager:
    def __init__(
        self, records: BatchRecords, policy: StagingPolicy, clock: Clock = utc_now
    ) -> None:
        self._records = records
        self._policy = policy
        self._clock = clock

    def withdraw(self, request: RequestMessage) -> None:
        """Take back ``request``'s staged line (its job ended before it went out)."""
        card = self._policy.catalog.card(request.model)
        if card is not None and card.batch_deployment is not None:
            self._records.unstage(card.batch_deployment, request.tenant_id, [request.request_id])

    def stage(
        self,
        request: RequestMessage,
        correlation_id: str,
        content: bytes,
        media_type: str,
        properties: Mapping[str, object],
    ) -> bool:
        """Stage ``request`` (its input already read); False when it was staged before.
        PermanentError for a request no batch file can carry."""
        card = self._policy.catalog.card(request.model)
        deployment = card.batch_deployment if card is not None else None
        if card is None or deployment is None:
            raise PermanentError(f"model '{request.model}' has no Global Batch deployment here")
        if not reads_as_text(media_type):
            raise PermanentError(f"the batch lane reads text only, not {media_type}")
        text = InferenceInput(
            request_id=request.request_id,
            model=request.model,
            content=content,
            media_type=media_type,
        ).text()
        given, _ = split_faults(request.parameters, allowed=False)  # no faults in batches
        try:
            parameters = card.parameters.read(given, request.model)
        except InvalidInput as error:  # intake refuses these: only an unchecked message has one
            raise PermanentError(error.message) from error
        # Structured outputs: the Global Batch API versions all have them.
        body = chat_request(deployment, card.task, text, parameters, JSON_SCHEMA)
        line = input_line(request.request_id, body)
        size = len(encoded(line))
        if size > self._policy.max_bytes_per_file:
            raise PermanentError(
                f"the request's batch line is {size} bytes; an input file holds at most "
                f"{self._policy.max_bytes_per_file} (GlobalBatch__maxBytesPerFile)"
            )
        trace = {
            name: value
            for name in TRACE_PROPERTIES
            if isinstance(value := properties.get(name), str)
        }
        return self._records.stage(
            PendingRequest(
                request=request,
                deployment=deployment,
                correlation_id=correlation_id,
                properties=trace,
                line=line,
                staged_at=self._clock(),
            )
        )
