"""The host's end of the language worker: a gRPC server, the worker process, its stream.

As the Functions host does, the local host serves gRPC on a loopback port (FunctionRpc's
``EventStream`` for the worker and the Service Bus extension's ``Settlement`` service on
the same port), starts one worker process with the platform's arguments, waits for its
``StartStream``, and then talks request/response over the stream: ``WorkerInitRequest``
(the runtime indexes the app here and fails the init on any error), ``FunctionsMetadataRequest``,
``FunctionLoadRequest`` per function and ``InvocationRequest`` per invocation. The worker's
``RpcLog`` messages are printed as the host prints a worker's logs.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc

from functions_host.protos import EVENT_STREAM_METHOD, messages

log = logging.getLogger("host.worker")
WORKER_DIRECTORY = Path(__file__).resolve().with_name("worker")
HOST_VERSION = "4.0.0-local"
MAX_MESSAGE_LENGTH = 2_147_483_647  # what the Functions host passes its workers
START_TIMEOUT_S = 60.0
CONTROL_TIMEOUT_S = 120.0  # init indexes the app: imports can take a while on a cold disk
_STREAM_CLOSED = object()


class WorkerError(Exception):
    """The worker failed, exited, or answered a control request with a failure."""


def describe_failure(result: Any) -> str:
    """The text of a failed StatusResult: exception message, then its stack trace."""
    exception = result.exception
    text = exception.message or result.result or "no details"
    if exception.stack_trace:
        text = f"{text}\n{exception.stack_trace.rstrip()}"
    return str(text)


class WorkerStream:
    """One worker's EventStream: requests out, responses matched to waiting callers."""

    def __init__(self, on_log: Callable[[Any], None]) -> None:
        self._outgoing: queue.Queue[Any] = queue.Queue()
        self._pending: dict[str, concurrent.futures.Future[Any]] = {}
        self._lock = threading.Lock()
        self._on_log = on_log
        self.connected = threading.Event()
        self.worker_id = ""
        self._gone: str | None = None

    def serve(
        self, request_iterator: Iterator[Any], context: grpc.ServicerContext
    ) -> Iterator[Any]:
        """The gRPC handler: the first message must be the worker's StartStream."""
        first = next(request_iterator, None)
        if first is None or first.WhichOneof("content") != "start_stream":
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "expected StartStream first")
            return
        if self.connected.is_set():
            context.abort(grpc.StatusCode.ALREADY_EXISTS, "this host runs one worker")
        self.worker_id = first.start_stream.worker_id
        threading.Thread(
            target=self._read, args=(request_iterator,), name="worker-stream", daemon=True
        ).start()
        self.connected.set()
        while True:
            message = self._outgoing.get()
            if message is _STREAM_CLOSED:
                return
            yield message

    def _read(self, request_iterator: Iterator[Any]) -> None:
        try:
            for message in request_iterator:
                self._dispatch(message)
        except grpc.RpcError as error:
            log.debug("worker stream ended: %r", error)
        finally:
            self.fail_pending("the worker's stream closed")

    def _dispatch(self, message: Any) -> None:
        kind = message.WhichOneof("content")
        if kind == "rpc_log":
            self._on_log(message.rpc_log)
            return
        if kind == "invocation_response":
            key = _invocation_key(message.invocation_response.invocation_id)
        else:
            key = message.request_id
        with self._lock:
            future = self._pending.pop(key, None)
        if future is None:
            log.warning("unexpected %s from the worker (request %s)", kind, key)
            return
        future.set_result(getattr(message, str(kind)))

    def _expect(self, key: str) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            if self._gone is not None:
                raise WorkerError(self._gone)
            self._pending[key] = future
        return future

    def request(self, field: str, payload: Any, timeout: float = CONTROL_TIMEOUT_S) -> Any:
        """Send a control request (init, metadata, load) and wait for its response."""
        request_id = str(uuid.uuid4())
        future = self._expect(request_id)
        self._outgoing.put(messages.StreamingMessage(request_id=request_id, **{field: payload}))
        return self._wait(future, request_id, field, timeout)

    def invoke(self, request: Any, timeout: float | None) -> Any:
        """Send an InvocationRequest and wait for its InvocationResponse."""
        key = _invocation_key(request.invocation_id)
        future = self._expect(key)
        self._outgoing.put(
            messages.StreamingMessage(request_id=str(uuid.uuid4()), invocation_request=request)
        )
        return self._wait(future, key, "invocation_request", timeout)

    def _wait(
        self, future: concurrent.futures.Future[Any], key: str, what: str, timeout: float | None
    ) -> Any:
        try:
            return future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            with self._lock:
                self._pending.pop(key, None)
            raise

    def send(self, field: str, payload: Any) -> None:
        self._outgoing.put(messages.StreamingMessage(**{field: payload}))

    def close(self) -> None:
        self._outgoing.put(_STREAM_CLOSED)

    def fail_pending(self, reason: str) -> None:
        with self._lock:
            self._gone = reason
            pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(WorkerError(reason))


def _invocation_key(invocation_id: str) -> str:
    return f"invocation:{invocation_id}"


class LanguageWorker:
    """Starts the gRPC server and the worker process, and owns the stream between them."""

    def __init__(
        self,
        script_root: Path,
        on_log: Callable[[Any], None],
        services: list[Callable[[grpc.Server], None]] | None = None,
    ) -> None:
        self.script_root = script_root
        self.stream = WorkerStream(on_log)
        self._server = grpc.server(
            concurrent.futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="grpc"),
            options=[
                ("grpc.max_send_message_length", MAX_MESSAGE_LENGTH),
                ("grpc.max_receive_message_length", MAX_MESSAGE_LENGTH),
            ],
        )
        handler = grpc.stream_stream_rpc_method_handler(
            self.stream.serve,
            request_deserializer=messages.StreamingMessage.FromString,
            response_serializer=messages.StreamingMessage.SerializeToString,
        )
        service, method = EVENT_STREAM_METHOD.strip("/").split("/")
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(service, {method: handler}),)
        )
        for add_service in services or []:
            add_service(self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self.process: subprocess.Popen[bytes] | None = None
        self._stopping = False
        self.capabilities: dict[str, str] = {}

    def start(self) -> None:
        """Start the worker and initialise it; raises WorkerError with the runtime's reason."""
        self._server.start()
        worker_id = str(uuid.uuid4())
        request_id = str(uuid.uuid4())
        address = ["--host", "127.0.0.1", "--port", str(self.port)]
        command = [
            sys.executable, "-m", "functions_host.worker",
            *address,
            "--workerId", worker_id,
            "--requestId", request_id,
            "--grpcMaxMessageLength", str(MAX_MESSAGE_LENGTH),
            "--functions-uri", f"http://127.0.0.1:{self.port}/",
            "--functions-worker-id", worker_id,
            "--functions-request-id", request_id,
            "--functions-grpc-max-message-length", str(MAX_MESSAGE_LENGTH),
        ]  # fmt: skip
        # The worker package is importable wherever functions_host is installed (as the
        # platform's worker is), so the environment goes to it unchanged. It runs in a
        # session of its own: a terminal's Ctrl-C (SIGINT to the foreground process group)
        # reaches the host alone, which drains running invocations before it stops the
        # worker. The worker exits by itself when the host dies (its parent watch), and the
        # host kills the worker's group whenever it ends without a clean stop (``kill``).
        self.process = subprocess.Popen(command, cwd=self.script_root, **_own_session())
        threading.Thread(target=self._watch_process, name="worker-watch", daemon=True).start()
        if not self.stream.connected.wait(START_TIMEOUT_S):
            raise WorkerError(
                f"the language worker did not connect within {START_TIMEOUT_S:.0f}s"
                + self._exit_note()
            )
        log.info("Worker process started and initialized (pid %d)", self.process.pid)
        response = self.stream.request(
            "worker_init_request",
            messages.WorkerInitRequest(
                host_version=HOST_VERSION,
                worker_directory=str(WORKER_DIRECTORY),
                function_app_directory=str(self.script_root),
            ),
        )
        self.capabilities = dict(response.capabilities)
        if response.result.status != messages.StatusResult.Success:
            raise WorkerError(
                f"Worker failed to index functions: {describe_failure(response.result)}"
            )
        metadata = response.worker_metadata
        log.info(
            "Python worker runtime %s (azure-functions-runtime) on Python %s",
            metadata.worker_version,
            metadata.runtime_version,
        )

    def _exit_note(self) -> str:
        if self.process is not None and self.process.poll() is not None:
            return f" (the worker exited with code {self.process.returncode})"
        return ""

    def _watch_process(self) -> None:
        assert self.process is not None
        code = self.process.wait()
        self.stream.fail_pending(f"the language worker exited with code {code}")
        if not self._stopping:
            log.error("Language worker process exited unexpectedly with code %d", code)

    def functions_metadata(self) -> list[Any]:
        response = self.stream.request(
            "functions_metadata_request",
            messages.FunctionsMetadataRequest(function_app_directory=str(self.script_root)),
        )
        if response.result.status != messages.StatusResult.Success:
            raise WorkerError(
                f"function metadata request failed: {describe_failure(response.result)}"
            )
        return list(response.function_metadata_results)

    def load(self, metadata: Any) -> None:
        response = self.stream.request(
            "function_load_request",
            messages.FunctionLoadRequest(function_id=metadata.function_id, metadata=metadata),
        )
        if response.result.status != messages.StatusResult.Success:
            raise WorkerError(describe_failure(response.result))

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, grace_s: float = 10.0) -> None:
        """WorkerTerminate, close the stream, wait for the process, stop the server."""
        self._stopping = True
        if self.alive:
            terminate = messages.WorkerTerminate()
            terminate.grace_period.FromSeconds(int(grace_s))
            self.stream.send("worker_terminate", terminate)
        self.stream.close()
        if self.process is not None:
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                log.warning("worker did not exit within %.0fs; killing it", grace_s)
                self.kill()
        self._server.stop(grace=2).wait(5)

    def kill(self) -> None:
        """Kill the worker and every process it started (its process group); idempotent."""
        self._stopping = True
        process = self.process
        if process is None or process.returncode is not None:
            return
        try:
            if sys.platform == "win32":
                process.kill()
            else:
                os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # it ended on its own meanwhile
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            log.error("worker process %d did not exit after SIGKILL", process.pid)


def _own_session() -> dict[str, Any]:
    """Popen arguments that keep the worker out of the terminal's foreground process group."""
    if sys.platform == "win32":
        return {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP}
    return {"start_new_session": True}
