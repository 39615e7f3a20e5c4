"""The worker's side of the FunctionRpc stream: requests in, runtime verbs, responses out.

One event loop, as in the platform's worker: each request becomes a task, so a long
invocation never holds up another (sync functions run in the runtime's thread pool,
``PYTHON_THREADPOOL_THREAD_COUNT``; async ones on this loop). Responses carry the
request's ``request_id``; the stream is written by one task only, as gRPC requires.
Logs of the app and of the runtime go to the host as ``RpcLog`` messages, tagged with the
invocation they belong to, so the host prints them the way it prints a worker's logs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

import azure_functions_runtime as runtime
import grpc
from azure_functions_runtime import invocation_id_cv

from functions_host.protos import EVENT_STREAM_METHOD, messages

log = logging.getLogger("functions_host.worker")
Verb = Callable[[Any], Awaitable[Any]]

# Request field -> (response field, runtime verb). Everything a worker decides happens in these.
RUNTIME_VERBS: dict[str, tuple[str, Verb]] = {
    "worker_init_request": ("worker_init_response", runtime.worker_init_request),
    "functions_metadata_request": (
        "function_metadata_response",
        runtime.functions_metadata_request,
    ),
    "function_load_request": ("function_load_response", runtime.function_load_request),
    "invocation_request": ("invocation_response", runtime.invocation_request),
    "function_environment_reload_request": (
        "function_environment_reload_response",
        runtime.function_environment_reload_request,
    ),
}
# Loggers whose records are the worker's own ("System"); everything else is the app's ("User").
SYSTEM_LOGGERS = ("azure.functions", "azure_functions_runtime", "functions_host.worker")
_LEVELS = {
    logging.DEBUG: messages.RpcLog.Debug,
    logging.INFO: messages.RpcLog.Information,
    logging.WARNING: messages.RpcLog.Warning,
    logging.ERROR: messages.RpcLog.Error,
    logging.CRITICAL: messages.RpcLog.Critical,
}


class RuntimeRequest:
    """The argument of a runtime verb: the StreamingMessage and what the proxy adds."""

    def __init__(self, request: Any, properties: dict[str, Any]) -> None:
        self.request = request
        self.properties = properties


class RpcLogHandler(logging.Handler):
    """Sends log records to the host as ``RpcLog`` (from any thread)."""

    def __init__(self, send: Callable[[Any], None]) -> None:
        super().__init__()
        self._send = send

    def emit(self, record: logging.LogRecord) -> None:
        try:
            system = record.name.startswith(SYSTEM_LOGGERS)
            rpc_log = messages.RpcLog(
                invocation_id=invocation_id_cv.get() or "",
                category=record.name,
                level=_LEVELS.get(record.levelno, messages.RpcLog.Information),
                message=record.getMessage(),
                log_category=messages.RpcLog.System if system else messages.RpcLog.User,
            )
            if record.exc_info and record.exc_info[1] is not None:
                error = record.exc_info[1]
                rpc_log.exception.CopyFrom(
                    messages.RpcException(
                        message=f"{type(error).__name__}: {error}",
                        stack_trace="".join(traceback.format_exception(error)),
                    )
                )
            self._send(messages.StreamingMessage(rpc_log=rpc_log))
        except Exception:
            self.handleError(record)


class WorkerSession:
    """One connection to the host, from StartStream to the end of the stream."""

    def __init__(self, call: Any, host: str, loop: asyncio.AbstractEventLoop) -> None:
        self._call = call
        self._host = host
        self._loop = loop
        self._outgoing: asyncio.Queue[Any] = asyncio.Queue()
        self._tasks: set[asyncio.Task[None]] = set()
        self.terminated = asyncio.Event()

    def send(self, message: Any) -> None:
        """Queue a message for the host; safe from any thread. Once the session's loop
        has closed (the worker is shutting down; a telemetry flush may still log) the
        message is dropped: there is no stream left to write it to."""
        if self._loop.is_closed():
            return
        try:
            self._loop.call_soon_threadsafe(self._outgoing.put_nowait, message)
        except RuntimeError:  # closed between the check and the call
            return

    async def write_loop(self) -> None:
        while True:
            message = await self._outgoing.get()
            if message is None:
                return
            try:
                await self._call.write(message)
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                # The host closed the stream (after WorkerTerminate, or on its way down)
                # while a last message, usually a log line, was still queued: nobody is
                # left to tell. The read side reports a stream that ended unexpectedly.
                return

    async def read_loop(self) -> None:
        while True:
            message = await self._call.read()
            if message is grpc.aio.EOF:
                return
            task = asyncio.create_task(self._handle(message))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            if self.terminated.is_set():
                return

    async def _handle(self, message: Any) -> None:
        kind = message.WhichOneof("content")
        if kind == "worker_init_request":
            _prepare_app_directory(message.worker_init_request.function_app_directory)
        if kind in RUNTIME_VERBS:
            response_field, verb = RUNTIME_VERBS[kind]
            response = await self._call_verb(kind, verb, message)
            self.send(
                messages.StreamingMessage(
                    request_id=message.request_id, **{response_field: response}
                )
            )
        elif kind == "worker_status_request":
            self.send(
                messages.StreamingMessage(
                    request_id=message.request_id,
                    worker_status_response=messages.WorkerStatusResponse(),
                )
            )
        elif kind == "worker_terminate":
            log.info("worker terminating at the host's request")
            self.terminated.set()
        elif kind == "invocation_cancel":
            # As in the platform's Python worker: a running Python call cannot be interrupted.
            log.info("cancel of invocation %s noted", message.invocation_cancel.invocation_id)
        else:
            log.warning("ignoring a %s message the worker does not handle", kind)

    async def _call_verb(self, kind: str, verb: Verb, message: Any) -> Any:
        request = RuntimeRequest(message, {"protos": messages, "host": self._host})
        if kind == "invocation_request":
            # Logs written while this task runs (async functions) name their invocation;
            # the runtime sets the same variable in the pool thread of a sync function.
            invocation_id_cv.set(message.invocation_request.invocation_id)
        try:
            return await verb(request)
        except Exception as error:  # the verbs report their own failures; this is a backstop
            log.exception("runtime verb %s failed", kind)
            return _failure_response(kind, message, error)

    async def finish(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._outgoing.put_nowait(None)


def _failure_response(kind: str, message: Any, error: Exception) -> Any:
    status = messages.StatusResult(
        status=messages.StatusResult.Failure,
        exception=messages.RpcException(
            message=f"{type(error).__name__}: {error}",
            stack_trace="".join(traceback.format_exception(error)),
        ),
    )
    if kind == "invocation_request":
        invocation_id = message.invocation_request.invocation_id
        return messages.InvocationResponse(invocation_id=invocation_id, result=status)
    if kind == "function_load_request":
        function_id = message.function_load_request.function_id
        return messages.FunctionLoadResponse(function_id=function_id, result=status)
    if kind == "functions_metadata_request":
        return messages.FunctionMetadataResponse(result=status)
    if kind == "worker_init_request":
        return messages.WorkerInitResponse(result=status)
    return messages.FunctionEnvironmentReloadResponse(result=status)


def _prepare_app_directory(directory: str) -> None:
    """The app's folder first on sys.path and as the working folder, as on the platform."""
    if directory:
        if directory not in sys.path:
            sys.path.insert(0, directory)
        os.chdir(directory)


def _configure_logging(handler: logging.Handler) -> None:
    root = logging.getLogger()
    root.handlers = [handler]
    debug = os.environ.get("PYTHON_ENABLE_DEBUG_LOGGING", "").lower() in ("1", "true")
    root.setLevel(logging.DEBUG if debug else logging.INFO)
    # The SDKs' per-request INFO lines (HTTP policy, AMQP links) would drown the app's own.
    for noisy in ("azure.core", "azure.storage", "azure.servicebus", "azure.identity", "uamqp"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


async def run_worker(
    host: str, port: int, worker_id: str, request_id: str, max_message_length: int
) -> int:
    options = [
        ("grpc.max_send_message_length", max_message_length),
        ("grpc.max_receive_message_length", max_message_length),
    ]
    async with grpc.aio.insecure_channel(f"{host}:{port}", options=options) as channel:
        event_stream = channel.stream_stream(
            EVENT_STREAM_METHOD,
            request_serializer=messages.StreamingMessage.SerializeToString,
            response_deserializer=messages.StreamingMessage.FromString,
        )
        call = event_stream()
        session = WorkerSession(call, host, asyncio.get_running_loop())
        _configure_logging(RpcLogHandler(session.send))
        runtime.start_threadpool_executor()
        session.send(
            messages.StreamingMessage(
                request_id=request_id, start_stream=messages.StartStream(worker_id=worker_id)
            )
        )
        writer = asyncio.create_task(session.write_loop())
        try:
            await session.read_loop()
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.CANCELLED:
                print(f"worker {worker_id}: stream to the host ended: {error}", file=sys.stderr)
        await session.finish()
        await writer
        runtime.stop_threadpool_executor()
    return 0
