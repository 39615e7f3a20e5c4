"""A message's turn among its deployment's tenants, taken before anything is read for it.

A queue is first in, first out: one tenant's backlog of four hundred messages stands in
front of another tenant's one, and the capacity gate, which orders the calls it holds by
their tenants' weights (``inference.tenant_shares``), only ever sees the head of the
queue. So each message first books its tokens against its tenant's share of the
deployment in this instance (``DeploymentGate.book``); while other tenants contend for
it, a tenant that already holds ``ModelCapacity__fairShareSeconds`` of work here sends
the message back to the queue, scheduled for its turn, before its job or input is read:
no storage operation, no attempt, the job untouched. The backlog so waits in the
broker's schedule instead of at the head of the queue. Intake paces the bursts it accepts
the same way before they reach the queue (``ServedPace.release_delay``); this catches
what it did not pace (producers sending straight to the queue) and what came due while
its tenant's turn had not.

Not booked, and so never sent back: the ordered lane (a copy would let the document's
next step overtake; its sessions keep one document's messages apart anyway), high
priority (its own queue, ahead of the others at the gate), the Global Batch lane's
requests, and an alias whose deployment counts no tokens.
"""

from __future__ import annotations

import logging

from shared.contracts import Priority, ProcessingMode, RequestMessage, input_characters
from shared.inference.capacity import Booking, DeploymentGate, budgeted
from shared.inference.served import ServedModels
from shared.processing.inbound import InboundMessage
from shared.processing.ports import Settler
from shared.processing.retries import Retries
from shared.processing.values import NO_TURN, Outcome, Turn

log = logging.getLogger(__name__)


class FairTurns:
    """Books each message's tokens against its tenant's share (see the module doc)."""

    def __init__(
        self,
        *,
        models: ServedModels,
        retries: Retries,
        horizon_seconds: float,
        longest_wait: float = 600.0,
    ) -> None:
        self._models = models
        self._retries = retries
        self._horizon = horizon_seconds
        self._longest_wait = longest_wait

    def take(
        self, message: InboundMessage, request: RequestMessage, settler: Settler
    ) -> Turn | Outcome:
        """The message's ``Turn``, or ``Outcome.FAIR_SHARE_WAIT`` when it was sent back."""
        gate_and_tokens = self._booked_call(request)
        if gate_and_tokens is None:
            return NO_TURN
        gate, tokens = gate_and_tokens
        booked = gate.book(request.tenant_id, tokens, self._horizon, paced=message.paced)
        if isinstance(booked, Booking):
            return Turn(gate, booked)
        # Never longer than ``longest_wait`` (half of JobResend__afterSeconds: the watchdog
        # would take a job still accepted then for one whose message was lost).
        booked = min(booked, self._longest_wait)
        outcome = self._retries.fair_share_copy(message, request, settler, booked)
        if outcome is None:  # its deadline comes first: it takes its chance at the gate
            return NO_TURN
        log.info(
            "message %s: tenant %s holds its share of %s; back in %.1fs",
            message.message_id, request.tenant_id, gate.name, booked,
        )  # fmt: skip
        return outcome

    def _booked_call(self, request: RequestMessage) -> tuple[DeploymentGate, int] | None:
        if self._retries.in_place or request.priority is Priority.HIGH:
            return None
        client = budgeted(self._models, request.model)
        if request.mode is ProcessingMode.BATCH or client is None:
            return None
        return client.gate, client.typical(input_characters(request.input), request.parameters)
