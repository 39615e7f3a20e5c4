"""Service Bus triggers: the request batch processor and the deferred-message sweeper.

``auto_complete_messages=False`` because every message is settled on its own by the
processor (complete, abandon, dead-letter, defer); batch size and wait are in host.json.
"""

from __future__ import annotations

import azure.functions as func
import azurefunctions.extensions.bindings.servicebus as servicebus

from shared import workers

bp = func.Blueprint()


@bp.function_name("process_requests")
@bp.service_bus_queue_trigger(
    arg_name="messages",
    queue_name="%RequestsQueueName%",
    connection="ServiceBusConnection",
    cardinality="many",
    auto_complete_messages=False,
)
def process_requests(
    messages: list[servicebus.ServiceBusReceivedMessage],
    message_actions: servicebus.ServiceBusMessageActions,
) -> None:
    workers.handle_request_batch(messages, message_actions)


@bp.function_name("report_backlog")
@bp.timer_trigger(arg_name="timer", schedule="%BacklogReportSchedule%", run_on_startup=False)
def report_backlog(timer: func.TimerRequest) -> None:
    workers.report_backlog()


@bp.function_name("sweep_deferred")
@bp.timer_trigger(arg_name="timer", schedule="%DeferredSweepSchedule%", run_on_startup=False)
def sweep_deferred(timer: func.TimerRequest) -> None:
    workers.sweep_deferred()
