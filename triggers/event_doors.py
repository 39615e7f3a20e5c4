"""Event doors into intake: the Blob-created trigger, the Event Grid trigger, the
Event Grid webhook and the Event Grid namespace pull timer. Each decodes its binding
and hands over to ``shared``.

The blob trigger uses ``source=EventGrid``: the storage account's system topic pushes
``BlobCreated`` to ``/runtime/webhooks/blobs`` (a subscription filtered to the incoming
container), so there is no container polling and no delay.
"""

from __future__ import annotations

import azure.functions as func

from shared.entrypoints import functions as entry_points
from shared.entrypoints.bootstrap import get_services
from shared.events.incoming import IncomingEvent
from triggers.http_adapter import serve
from triggers.invocation import in_trace

bp = func.Blueprint()


@bp.function_name("blob_intake")
@bp.blob_trigger(
    arg_name="blob",
    path="%IncomingContainer%/{name}",
    connection="Storage",
    source=func.BlobSource.EVENT_GRID,
)
def blob_intake(blob: func.InputStream, context: func.Context) -> None:
    with in_trace(context):
        entry_points.handle_new_blob(get_services(), blob.name or "", blob.read)


@bp.function_name("eventgrid_intake")
@bp.event_grid_trigger(arg_name="event")
def eventgrid_intake(event: func.EventGridEvent, context: func.Context) -> None:
    with in_trace(context):
        entry_points.handle_event(
            get_services(),
            IncomingEvent(
                id=event.id,
                type=event.event_type,
                source=event.topic or "",
                subject=event.subject,
                data=event.get_json(),
                schema="eventgrid",
                time=event.event_time.isoformat() if event.event_time else None,
            ),
        )


@bp.function_name("event_webhook")
@bp.route(route="v1/events", methods=["POST", "OPTIONS"], auth_level=func.AuthLevel.FUNCTION)
def event_webhook(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    with in_trace(context):
        return serve(lambda http: http.webhook.handle, req)


@bp.function_name("pull_events")
@bp.timer_trigger(arg_name="timer", schedule="%EventGridPullSchedule%", run_on_startup=False)
def pull_events(timer: func.TimerRequest, context: func.Context) -> None:
    """Functions has no namespace pull trigger: a singleton timer drains the queue
    subscription for a bounded window (``shared.events.pull``)."""
    with in_trace(context):
        entry_points.pull_events(get_services)
