"""Service Bus triggers: the request batch processor and the deferred-message sweeper.

``auto_complete_messages=False`` because every message is settled on its own by the
processor (complete, abandon, dead-letter, defer); batch size and wait are in host.json.
The batch trigger decodes its binding into the app's own types before ``shared`` sees
it: each ``ServiceBusReceivedMessage`` becomes an ``InboundMessage`` and the
``ServiceBusMessageActions`` are wrapped in the ``Settler`` port.
"""

from __future__ import annotations

import typing

import azure.functions as func
import azurefunctions.extensions.bindings.servicebus as servicebus

from shared import entry_points
from shared.adapters.servicebus_inbound import ActionsSettler, from_sdk
from shared.composition import get_services

bp = func.Blueprint()

# The batch parameter's annotation must be a typing generic: the Functions Python runtime
# rejects the builtin form list[...] ("invalid non-type annotation"), and one rejected
# function fails the whole app. noqa keeps ruff's UP006 auto-fix from bringing that back;
# tests/unit/test_function_index.py indexes the app with the real runtime to prove it.
ReceivedMessages = typing.List[servicebus.ServiceBusReceivedMessage]  # noqa: UP006


@bp.function_name("process_requests")
@bp.service_bus_queue_trigger(
    arg_name="messages",
    queue_name="%RequestsQueueName%",
    connection="ServiceBusConnection",
    cardinality="many",
    auto_complete_messages=False,
)
def process_requests(
    messages: ReceivedMessages,
    message_actions: servicebus.ServiceBusMessageActions,
) -> None:
    inbound = [from_sdk(message) for message in messages]
    entry_points.handle_request_batch(get_services, inbound, ActionsSettler(message_actions))


@bp.function_name("report_backlog")
@bp.timer_trigger(arg_name="timer", schedule="%BacklogReportSchedule%", run_on_startup=False)
def report_backlog(timer: func.TimerRequest) -> None:
    entry_points.report_backlog(get_services)


@bp.function_name("sweep_deferred")
@bp.timer_trigger(arg_name="timer", schedule="%DeferredSweepSchedule%", run_on_startup=False)
def sweep_deferred(timer: func.TimerRequest) -> None:
    entry_points.sweep_deferred(get_services)
