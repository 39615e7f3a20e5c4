"""From a valid line to the message to send and the queue it goes to (pure).

The processor checks a message that reaches it without a job against the rules every
door applies (``intake.request_rules.RequestRules``) and dead-letters one that breaks
them. The producer applies the same rules first, so such a line is refused at once with
its line number instead: the model (where the producer's settings name ``AllowedModels``:
a producer whose settings leave it out does not guess), ``parameters`` (at most 32,
``simulate`` only where ``LocalModelFaults`` is on), ``ProducerTenants`` (empty: no tenant),
the default and largest deadline, ``not_before`` before the deadline, and no
``not_before`` or ``after`` on a document's step. Inline text above ``MaxInlineTextBytes``
is not refused: the producer moves it into a claim check (``producer.Producer``); above
``MaxUploadBytes`` it is.

The message is ``messaging.request_envelope`` (the same properties as intake's, time to
live up to the deadline, ``session_id = document_id``) with ``source=producer``, routed
by ``lanes.lane_of_message``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from shared.contracts import ClaimCheck, Door, InlineText, RequestMessage, TextInput
from shared.errors import FieldError, InvalidInput
from shared.inference.catalog import catalog_for
from shared.intake.request_rules import RequestRules
from shared.lanes import LaneQueues, lane_of_message
from shared.messaging import OutgoingMessage, request_envelope
from shared.producer.lines import LineRefusal, ParsedLine, RequestLine
from shared.settings import Settings
from shared.tracing import continue_or_start

TEXT_MEDIA_TYPE = "text/plain; charset=utf-8"
# The fields a line hands to its message as they are (tenant, model, parameters, priority,
# not_before, metadata, after, document_id...): every field the two contracts share but
# the id, the input and the deadline, which the producer resolves. Derived, so a field
# added to both contracts cannot be dropped on the way.
CARRIED_FIELDS = (set(RequestLine.model_fields) & set(RequestMessage.model_fields)) - {
    "schema_",
    "request_id",
    "input",
    "deadline",
}


@dataclass(frozen=True)
class LinePolicy:
    """What a line must satisfy beyond its shape, from app settings."""

    rules: RequestRules
    max_input_bytes: int  # MaxUploadBytes: the largest input, claim-checked or not
    check_models: bool = True

    @classmethod
    def from_settings(cls, settings: Settings) -> LinePolicy:
        """The rules of this deployment; its models are checked when the settings name
        them (ModelCatalog, or the shorthand settings), not when only the defaults would."""
        return cls(
            rules=RequestRules.from_settings(settings, catalog_for(settings)),
            max_input_bytes=settings.limits.max_upload_bytes,
            check_models=settings.models.catalog is not None or settings.models.uses_shorthand,
        )

    @property
    def max_inline_text_bytes(self) -> int:
        return self.rules.max_inline_text_bytes

    def check(self, parsed: ParsedLine, now: datetime) -> LineRefusal | None:
        """A refusal naming every rule the line breaks, or None."""
        request = parsed.request
        rules = self.rules
        problems: list[FieldError] = []

        def rule(check: Callable[[], object]) -> None:
            try:
                check()
            except InvalidInput as error:
                field = error.fields[0].field if error.fields else "request"
                problems.append(FieldError(field, error.message))

        rule(lambda: rules.check_producer_tenant(request.tenant_id))
        if self.check_models:
            rule(lambda: rules.check_model(request.model))
        rule(lambda: rules.check_parameters(request.parameters, request.model))
        deadline = self.deadline(parsed, now)
        if request.deadline_seconds is not None:
            rule(lambda: rules.deadline_seconds(request.deadline_seconds))
        elif deadline - now > timedelta(seconds=rules.max_deadline_seconds):
            problems.append(
                FieldError("deadline", f"more than {rules.max_deadline_seconds} s away")
            )
        elif deadline <= now:
            problems.append(FieldError("deadline", "already passed"))
        rule(lambda: rules.check_timing(request.not_before, deadline))
        rule(lambda: rules.check_ordering(request.document_id, request.not_before, request.after))
        if isinstance(request.input, TextInput):
            size = len(request.input.text.encode("utf-8"))
            if size > self.max_input_bytes:
                problems.append(
                    FieldError("input.text", f"{size} bytes; the limit is {self.max_input_bytes}")
                )
        if not problems:
            return None
        return LineRefusal(parsed.line, "refused by policy", tuple(problems), parsed.request_id)

    def deadline(self, parsed: ParsedLine, now: datetime) -> datetime:
        request = parsed.request
        if request.deadline is not None:
            return request.deadline
        seconds = request.deadline_seconds or self.rules.default_deadline_seconds
        return now + timedelta(seconds=seconds)


@dataclass(frozen=True)
class Planned:
    """A request message, its envelope and the queue it is sent to."""

    parsed: ParsedLine
    message: RequestMessage
    envelope: OutgoingMessage
    queue: str

    @property
    def inline_text(self) -> bytes | None:
        """The inline text (UTF-8), which a claim check can carry instead."""
        if isinstance(self.message.input, InlineText):
            return self.message.input.text.encode("utf-8")
        return None


class Planner:
    """Builds the message of a line and routes it to its lane's queue."""

    def __init__(self, policy: LinePolicy, queues: LaneQueues) -> None:
        self.policy = policy
        self.queues = queues

    @classmethod
    def from_settings(cls, settings: Settings) -> Planner:
        return cls(LinePolicy.from_settings(settings), LaneQueues.from_settings(settings))

    def plan(
        self, parsed: ParsedLine, now: datetime, content: ClaimCheck | InlineText | None = None
    ) -> Planned:
        """The message for ``parsed``; ``content`` replaces a line's input (a resolved
        blob reference, or inline text moved into a claim check)."""
        request = parsed.request
        if content is None:
            given = request.input
            if isinstance(given, TextInput):
                content = InlineText(text=given.text)
            elif isinstance(given, ClaimCheck):
                content = given
            else:
                raise ValueError("a blob reference must be resolved before it is planned")
        message = RequestMessage(
            **request.model_dump(include=CARRIED_FIELDS),
            request_id=parsed.request_id,
            input=content,
            deadline=self.policy.deadline(parsed, now),
        )
        trace = continue_or_start(None)
        envelope = request_envelope(
            message, correlation_id=trace.trace_id, trace=trace, now=now, source=Door.PRODUCER
        )
        return Planned(parsed, message, envelope, self.queues.queue(lane_of_message(envelope)))
