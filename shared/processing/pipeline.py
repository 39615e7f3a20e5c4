"""One request message from its receipt to its settlement: admitted, then run.

``MessageProcessor`` opens the message's span and hands it to ``admission``, which reads
it, finds (or adopts) its job and settles the happy rows that need no model (a duplicate,
a deferral, an expiry, a line staged for Global Batch), then to ``execution``, which runs
the model, stores the result and announces it. Whatever either meets goes, as the
exception it is, to the outcome table (``outcomes``), which carries out every unhappy row
of docs/processing.md's table in one place. Nothing one message does can touch another:
errors are contained per message.
"""

from __future__ import annotations

from shared import telemetry
from shared.processing.admission import Admission
from shared.processing.execution import Execution
from shared.processing.inbound import InboundMessage
from shared.processing.policy import ProcessingPolicy
from shared.processing.ports import Settler
from shared.processing.settlement import NotedSettler
from shared.processing.values import Outcome

# The situations of docs/processing.md's outcome table that the happy path settles
# itself (``admission`` and ``execution``); ``outcomes.ROWS`` carries out the others (a
# test holds both against the page).
SETTLED_ON_THE_HAPPY_PATH = (
    "no job yet (intake is a step behind, or a direct producer)",
    "its tenant already holds `ModelCapacity__fairShareSeconds` of its share of the "
    "deployment in this instance (not the ordered lane, not high priority)",
    "job already finished (duplicate delivery)",
    "past its deadline",
    "`not_before` in the future, or `after` not yet completed",
    "model refused (content filter)",
    "throttled (429): the deployment's capacity gate pauses, the call waits and goes again",
    "success",
)


class MessageProcessor:
    """Processes one lane's messages: admitted, then run (see the module doc)."""

    def __init__(
        self, *, policy: ProcessingPolicy, admission: Admission, execution: Execution
    ) -> None:
        self._policy = policy
        self._admission = admission
        self._execution = execution

    def process(
        self, message: InboundMessage, settler: Settler, invocation: str | None = None
    ) -> Outcome:
        """Process and settle one message; returns the outcome (for logs and reports).
        ``invocation`` is the traceparent of the invocation that received it, which its
        span links to (``telemetry.processing``)."""
        noted = NotedSettler(settler)
        with telemetry.processing(
            queue=self._policy.queue_name,
            lane=self._policy.lane,
            message_id=message.message_id,
            correlation_id=message.correlation_id,
            delivery_count=message.delivery_count,
            retry_count=message.retry_count,
            properties=message.application_properties,
            invocation=invocation,
        ) as processing:
            admitted = self._admission.admit(message, noted)
            if isinstance(admitted, Outcome):
                outcome = admitted
            else:
                outcome = self._execution.run(message, admitted, noted)
            failed = outcome in (Outcome.DEAD_LETTERED, Outcome.ABANDONED)
            processing.settled(outcome, noted.dead_letter_reason, failed)
        return outcome
