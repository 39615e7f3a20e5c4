"""Service Bus triggers: one per request lane (``shared.lanes``), and the deferral sweeper.

- ``process_requests`` and ``process_priority_requests``: batches of the standard and the
  high-priority queue, each trigger with its own listener, so high-priority work never
  queues behind a standard backlog (and its own pool of model calls,
  PriorityModelConcurrency);
- ``process_ordered_requests``: the session queue, one message per invocation. The
  extension then runs up to ``maxConcurrentSessions`` documents (sessions) at once and one
  message at a time within each, in order (a batch trigger would hold one session at a
  time per instance).

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

from shared.adapters.servicebus_inbound import ActionsSettler, from_sdk
from shared.entrypoints import functions as entry_points
from shared.entrypoints.bootstrap import get_services
from shared.lanes import Lane
from triggers.invocation import in_trace

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
    context: func.Context,
) -> None:
    with in_trace(context):
        _handle(messages, message_actions, Lane.STANDARD)


@bp.function_name("process_priority_requests")
@bp.service_bus_queue_trigger(
    arg_name="messages",
    queue_name="%PriorityQueueName%",
    connection="ServiceBusConnection",
    cardinality="many",
    auto_complete_messages=False,
)
def process_priority_requests(
    messages: ReceivedMessages,
    message_actions: servicebus.ServiceBusMessageActions,
    context: func.Context,
) -> None:
    with in_trace(context):
        _handle(messages, message_actions, Lane.PRIORITY)


@bp.function_name("process_ordered_requests")
@bp.service_bus_queue_trigger(
    arg_name="message",
    queue_name="%OrderedQueueName%",
    connection="ServiceBusConnection",
    is_sessions_enabled=True,
    auto_complete_messages=False,
)
def process_ordered_requests(
    message: servicebus.ServiceBusReceivedMessage,
    message_actions: servicebus.ServiceBusMessageActions,
    context: func.Context,
) -> None:
    with in_trace(context):
        _handle([message], message_actions, Lane.ORDERED)


def _handle(
    messages: ReceivedMessages, actions: servicebus.ServiceBusMessageActions, lane: Lane
) -> None:
    """Decode the binding into the app's types and hand the batch to its lane."""
    inbound = [from_sdk(message) for message in messages]
    entry_points.handle_request_batch(get_services, inbound, ActionsSettler(actions), lane)


@bp.function_name("report_backlog")
@bp.timer_trigger(arg_name="timer", schedule="%BacklogReportSchedule%", run_on_startup=False)
def report_backlog(timer: func.TimerRequest, context: func.Context) -> None:
    with in_trace(context):
        entry_points.report_backlog(get_services)


@bp.function_name("sweep_deferred")
@bp.timer_trigger(arg_name="timer", schedule="%DeferredSweepSchedule%", run_on_startup=False)
def sweep_deferred(timer: func.TimerRequest, context: func.Context) -> None:
    with in_trace(context):
        entry_points.sweep_deferred(get_services)
