"""The sample functions; each records what it received so tests can observe it."""

import asyncio
import json
import os
import time
import typing

import azure.functions as func
from azurefunctions.extensions.bindings import servicebus
from recorder import attempts, record

bp = func.Blueprint()


@bp.route(route="hello/{name}", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
def hello(req: func.HttpRequest) -> func.HttpResponse:
    document = {
        "name": req.route_params.get("name"),
        "params": dict(req.params),
        "url": req.url,
        "method": req.method,
    }
    return func.HttpResponse(json.dumps(document), mimetype="application/json")


@bp.function_name("echo_item")
@bp.route(route="items/{id:int}/{label?}", methods=["POST", "PUT"])
def echo_item(req: func.HttpRequest) -> func.HttpResponse:
    response = func.HttpResponse(
        req.get_body(),
        status_code=201,
        headers={
            "X-Item-Id": req.route_params["id"],
            "X-Label": req.route_params.get("label", "-"),
        },
        mimetype=req.headers.get("content-type", "application/octet-stream"),
    )
    response.headers.add("Set-Cookie", "a=1")
    response.headers.add("Set-Cookie", "b=2")
    response.headers["X-Echo-Header"] = req.headers.get("x-custom", "")
    return response


@bp.route(route="async/{value}", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
async def async_value(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    await asyncio.sleep(0.01)
    body = {"value": req.route_params["value"], "invocation_id": context.invocation_id}
    return func.HttpResponse(json.dumps(body), mimetype="application/json")


@bp.route(route="slow/{ms:int}", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
def slow(req: func.HttpRequest) -> func.HttpResponse:
    record("slow-started", ms=req.route_params["ms"])
    time.sleep(int(req.route_params["ms"]) / 1000)
    record("slow", ms=req.route_params["ms"])
    return func.HttpResponse("done")


@bp.route(route="ping", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
def ping(req: func.HttpRequest) -> func.HttpResponse:
    return func.HttpResponse("pong")


@bp.route(route="fail", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
def fail(req: func.HttpRequest) -> func.HttpResponse:
    raise RuntimeError("this function always fails")


@bp.event_grid_trigger(arg_name="event")
def on_event(event: func.EventGridEvent) -> None:
    record(
        "on_event", id=event.id, subject=event.subject, type=event.event_type, data=event.get_json()
    )


@bp.blob_trigger(
    arg_name="blob",
    path="%WatchedContainer%/{name}",
    connection="Storage",
    source=func.BlobSource.EVENT_GRID,
)
def on_blob(blob: func.InputStream) -> None:
    content = blob.read()
    name = blob.name or ""
    if (
        name.rsplit("/", 1)[-1].startswith("flaky")
        and attempts("on_blob_attempt", "name", name) == 0
    ):
        record("on_blob_attempt", name=name)
        raise RuntimeError("first attempt fails on purpose")
    record("on_blob", name=name, length=blob.length, uri=blob.uri, content=content.decode())


@bp.service_bus_queue_trigger(
    arg_name="messages",
    queue_name="%BatchQueue%",
    connection="ServiceBusConnection",
    cardinality="many",
    auto_complete_messages=False,
)
def settle_batch(
    messages: typing.List[servicebus.ServiceBusReceivedMessage],  # noqa: UP006 (runtime rule)
    message_actions: servicebus.ServiceBusMessageActions,
) -> None:
    bodies = []
    for message in messages:
        body = b"".join(message.body).decode()
        bodies.append(body)
        if body.startswith("complete"):
            message_actions.complete(message)
        elif body.startswith("deadletter"):
            message_actions.deadletter(
                message, deadletter_reason="SampleReason", deadletter_error_description=body
            )
        # "leave..." messages stay unsettled: their locks expire
    record("settle_batch", bodies=bodies, size=len(messages))


@bp.service_bus_topic_trigger(
    arg_name="message",
    topic_name="%EventsTopic%",
    subscription_name="%EventsSubscription%",
    connection="ServiceBusConnection",
)
def handle_single(message: func.ServiceBusMessage) -> None:
    body = message.get_body().decode()
    record(
        "handle_single",
        body=body,
        delivery_count=message.delivery_count,
        properties=message.application_properties,
    )
    if body.startswith("boom"):
        raise RuntimeError("failing on purpose: the host abandons the message")


@bp.timer_trigger(schedule="0 0 0 1 1 *", arg_name="timer", run_on_startup=True)
def yearly(timer: func.TimerRequest) -> None:
    record("yearly", past_due=timer.past_due)


@bp.timer_trigger(schedule="%TickSchedule%", arg_name="timer")
def tick(timer: func.TimerRequest) -> None:
    """Which worker fired, and when: the singleton test counts them."""
    record("tick", pid=os.getpid(), at=time.time())


@bp.service_bus_queue_trigger(
    arg_name="message",
    queue_name="%SessionQueue%",
    connection="ServiceBusConnection",
    is_sessions_enabled=True,
)
def ordered(message: func.ServiceBusMessage) -> None:
    record("ordered", session=message.session_id, body=message.get_body().decode())
