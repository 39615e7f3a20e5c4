"""The worker's side of the FunctionRpc stream: requests in, runtime verbs, responses out.

The threading model is the platform's proxy worker's: the stream is a synchronous gRPC
call served by a thread of its own, which hands each request to the event loop as a task
(so a long invocation never holds up another: sync functions run in the runtime's thread
pool, ``PYTHON_THREADPOOL_THREAD_COUNT``; async ones on the loop). Everything the worker
sends (responses, ``RpcLog`` lines) goes through one thread-safe queue that the gRPC call
drains, so a log line written in a pool thread costs a ``put``, not a wake-up of the loop,
and the stream has a single writer, as gRPC requires. Responses carry the request's
``request_id``; logs are tagged with the invocation they belong to, so the host prints
them the way it prints a worker's logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import sys
import threading
import traceback
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import azure_functions_runtime as runtime
import grpc
from azure_functions_runtime import invocation_id_cv

from functions_host.protos import EVENT_STREAM_METHOD, messages

log = logging.getLogger("functions_host.worker")
STREAM_CLOSE_TIMEOUT_S = 5.0  # for the host to close its side once ours is closed
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

    def __init__(self, host: str, loop: asyncio.AbstractEventLoop) -> None:
        self._host = host
        self._loop = loop
        self._outgoing: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._tasks: set[asyncio.Task[None]] = set()
        self._call: Any = None
        self._thread: threading.Thread | None = None
        self.ended = asyncio.Event()  # the host closed the stream, or asked us to stop
        self.failure: str | None = None

    def send(self, message: Any) -> None:
        """Queue a message for the host; safe from any thread. After the stream has
        ended (a telemetry flush may still log on the way down) it is never written."""
        self._outgoing.put(message)

    def start(self, target: str, options: list[tuple[str, Any]]) -> None:
        """Open the stream on its own thread; requests arrive as tasks on the loop."""
        self._thread = threading.Thread(
            target=self._serve, args=(target, options), name="grpc-stream", daemon=True
        )
        self._thread.start()

    def _messages(self) -> Iterator[Any]:
        while True:
            message = self._outgoing.get()
            if message is None:
                return
            yield message

    def _serve(self, target: str, options: list[tuple[str, Any]]) -> None:
        with grpc.insecure_channel(target, options=options) as channel:
            event_stream = channel.stream_stream(
                EVENT_STREAM_METHOD,
                request_serializer=messages.StreamingMessage.SerializeToString,
                response_deserializer=messages.StreamingMessage.FromString,
            )
            self._call = event_stream(self._messages())
            try:
                for message in self._call:
                    self._to_loop(self._dispatch, message)
            except grpc.RpcError as error:
                if error.code() != grpc.StatusCode.CANCELLED:
                    self.failure = f"{error.code().name}: {error.details()}"
            finally:
                self._to_loop(self.ended.set)

    def _to_loop(self, callback: Callable[..., None], *args: Any) -> None:
        """Run ``callback`` on the loop, unless the worker is already past it (shutting
        down: the loop has closed while the host was still closing the stream)."""
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(callback, *args)

    def _dispatch(self, message: Any) -> None:
        if self.ended.is_set():
            return
        task = asyncio.create_task(self._handle(message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

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
            self.ended.set()
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
        """Let running requests answer, then end our half of the stream and its thread."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._outgoing.put(None)
        thread = self._thread
        if thread is None:
            return
        await asyncio.to_thread(thread.join, STREAM_CLOSE_TIMEOUT_S)
        if thread.is_alive() and self._call is not None:
            self._call.cancel()  # the host kept its side open: hang up
            await asyncio.to_thread(thread.join, STREAM_CLOSE_TIMEOUT_S)


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
    options: list[tuple[str, Any]] = [
        ("grpc.max_send_message_length", max_message_length),
        ("grpc.max_receive_message_length", max_message_length),
    ]
    session = WorkerSession(host, asyncio.get_running_loop())
    # StartStream must be the stream's first message: queued before any log line can be.
    session.send(
        messages.StreamingMessage(
            request_id=request_id, start_stream=messages.StartStream(worker_id=worker_id)
        )
    )
    _configure_logging(RpcLogHandler(session.send))
    runtime.start_threadpool_executor()
    session.start(f"{host}:{port}", options)
    await session.ended.wait()
    if session.failure:
        print(f"worker {worker_id}: stream to the host ended: {session.failure}", file=sys.stderr)
    await session.finish()
    runtime.stop_threadpool_executor()
    return 0
