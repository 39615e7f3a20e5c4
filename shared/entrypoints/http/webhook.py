"""``/api/v1/events``: the webhook that Event Grid subscriptions push to.

Status codes follow Event Grid's retry rules: 200/202 delivered; 400 (malformed) and 413
(too large) are never retried and go to the dead-letter container; 401/403 for failed
authentication (not retried either); 503 with Retry-After when a dependency is down
(retried). Events are accepted only for the tenants the delivery's credential may act for
(``WebhookTenants``, see ``webhook_tenancy``); an event for another tenant is rejected.
Unknown event types are acknowledged with 200 and logged: subscription filters should
keep them out. Work is persisted and acknowledged in milliseconds, far
inside Event Grid's 30-second window. ``WebhookEndpoint`` holds the event intake and the
delivery's checks (WebhookSharedSecret, the Entra token validator, WebhookTenants).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from shared.contracts import Door
from shared.entrypoints.http.messages import ApiRequest, ApiResponse, json_response
from shared.errors import FieldError, InvalidInput
from shared.events.incoming import ValidationRequest, ValidationResponse, parse_delivery
from shared.events.intake import EventIntake, EventOutcome
from shared.events.ports import TokenValidator
from shared.events.webhook_auth import authenticate_delivery
from shared.events.webhook_tenancy import running_in_azure, webhook_tenancy


class DeliveryReport(BaseModel):
    """The answer to a delivery: what became of each of its events."""

    events: list[EventOutcome]


def abuse_protection_handshake(request: ApiRequest) -> ApiResponse:
    """CloudEvents webhook validation: ``OPTIONS`` with ``WebHook-Request-Origin``."""
    origin = request.header("webhook-request-origin")
    if not origin:
        raise InvalidInput("OPTIONS needs a WebHook-Request-Origin header")
    return ApiResponse(
        200, b"", {"WebHook-Allowed-Origin": origin, "WebHook-Allowed-Rate": "*", "Allow": "POST"}
    )


@dataclass(frozen=True)
class WebhookEndpoint:
    """``/api/v1/events``: ``OPTIONS`` (the CloudEvents handshake) and ``POST``."""

    intake: EventIntake
    shared_secret: str | None  # WebhookSharedSecret (None: not required)
    tokens: TokenValidator | None  # Entra bearer tokens (None: not required)
    tenants: str | None  # WebhookTenants, as set (parsed once by webhook_tenancy)

    def handle(self, request: ApiRequest) -> ApiResponse:
        if request.method == "OPTIONS":
            return abuse_protection_handshake(request)
        return self.receive(request)

    def receive(self, request: ApiRequest) -> ApiResponse:
        """``POST``: the validation handshake, or a delivery of one or more events."""
        authenticate_delivery(request.headers, self.shared_secret, self.tokens)
        delivery = parse_delivery(request.headers, request.body)
        if isinstance(delivery, ValidationRequest):
            answer = ValidationResponse(validationResponse=delivery.code)
            return json_response(200, answer.model_dump())
        scope = webhook_tenancy(self.tenants, running_in_azure()).scope_for(request.headers)
        outcomes = [
            self.intake.accept_event(event, source=Door.WEBHOOK, tenants=scope)
            for event in delivery
        ]
        rejected = [o for o in outcomes if o.status == "rejected"]
        if rejected:
            raise InvalidInput(
                f"{len(rejected)} of {len(outcomes)} events were rejected",
                tuple(FieldError(f"event {o.event_id}", o.reason or "rejected") for o in rejected),
            )
        accepted = any(o.status in ("accepted", "duplicate") for o in outcomes)
        report = DeliveryReport(events=outcomes)
        return json_response(202 if accepted else 200, report.model_dump(mode="json"))
