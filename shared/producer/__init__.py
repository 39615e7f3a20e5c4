"""The producer: send inference requests straight to the Service Bus request queues.

Producers that hold the Azure Service Bus Data Sender role need not go through the HTTP
API: a request message is first-class, and the processor records its job from the message
on first delivery (``processing.adopted_jobs``). This package is the library and the CLI
(``python -m shared.producer``) for them.

- ``lines``: the JSONL line contract (``RequestLine``), validation with line numbers, and
  deterministic request ids (UUID version 5 of a line's canonical content), so running the
  same file twice sends the same message ids and the repeats are dropped;
- ``planning``: policy checks, the message (``messaging.request_envelope`` with
  ``source=producer``) and its lane's queue (``lanes.lane_of_message``);
- ``batching``: size-limited batches per queue over two ports (``BatchSender``,
  ``OutgoingBatch``; adapter ``adapters.servicebus_producer``);
- ``producer``: ``Producer(planner, senders, claim_checks).send(lines) -> SendReport`` (or
  ``Producer.from_settings(settings, senders, blobs)``), with claim checks for inline text
  too large for a message;
- ``report``: the counts, the summary and the exit code.

    from shared.adapters.servicebus import servicebus_client
    from shared.adapters.servicebus_producer import ServiceBusBatchSenders
    from shared.producer import Producer, RequestLine

    senders = ServiceBusBatchSenders(servicebus_client(settings))
    report = Producer.from_settings(settings, senders).send(
        [RequestLine.model_validate(
            {"tenant_id": "contoso", "model": "local-analyzer", "input": {"text": "..."}}
        )]
    )
"""

from shared.producer.lines import LineRefusal, ParsedLine, RequestLine, parse_lines
from shared.producer.producer import Producer
from shared.producer.report import SendReport

__all__ = ["LineRefusal", "ParsedLine", "Producer", "RequestLine", "SendReport", "parse_lines"]
