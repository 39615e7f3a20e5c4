"""Running user functions: thread pool for sync, one event loop for async, timeouts, logs.

Like the Python worker, sync functions run in a thread pool
(``PYTHON_THREADPOOL_THREAD_COUNT``, default ``min(32, cpus + 4)``) and coroutine
functions on a single event loop in its own thread. Every invocation gets an id, honours
host.json ``functionTimeout`` and ends with exactly one log line in the host's words:
``Executed 'Functions.<name>' (Succeeded|Failed, Id=<id>, Duration=<ms>ms)``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from devtools.host.app_loader import FunctionSpec

log = logging.getLogger("host.invocation")


class FunctionTimeoutError(Exception):
    """The function ran past host.json ``functionTimeout``."""


class HostStoppingError(Exception):
    """The host is draining and accepts no new invocations."""


@dataclass(frozen=True)
class TraceContext:
    trace_parent: str
    trace_state: str
    attributes: dict[str, str]


@dataclass(frozen=True)
class RetryContext:
    retry_count: int = 0
    max_retry_count: int = 0
    exception: Any = None


class InvocationContext:
    """What the worker passes to a ``context`` parameter (``azure.functions.Context``)."""

    def __init__(self, invocation_id: str, function_name: str, function_directory: str) -> None:
        self.invocation_id = invocation_id
        self.function_name = function_name
        self.function_directory = function_directory
        self.thread_local_storage = threading.local()
        self.trace_context = TraceContext(
            f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01", "", {}
        )
        self.retry_context = RetryContext()


def default_thread_count() -> int:
    configured = os.environ.get("PYTHON_THREADPOOL_THREAD_COUNT")
    if configured and configured.isdigit() and int(configured) > 0:
        return int(configured)
    return min(32, (os.cpu_count() or 1) + 4)


class Invoker:
    """Runs invocations and knows how many are in flight (for a graceful drain)."""

    def __init__(self, function_timeout_s: float | None, script_root: str) -> None:
        self._timeout = function_timeout_s
        self._script_root = script_root
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=default_thread_count(), thread_name_prefix="function"
        )
        self._loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(
            target=self._run_loop, name="function-event-loop", daemon=True
        )
        self._loop_thread.start()
        self._in_flight = 0
        self._idle = threading.Condition()
        self._stopping = False

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        except Exception:  # pragma: no cover - the loop only stops when asked
            log.exception("function event loop crashed")

    def _start(
        self, spec: FunctionSpec, arguments: dict[str, Any]
    ) -> concurrent.futures.Future[Any]:
        if spec.is_async:
            coroutine = spec.user_function(**arguments)
            return asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        return self._pool.submit(spec.user_function, **arguments)

    def invoke(
        self,
        spec: FunctionSpec,
        arguments: dict[str, Any],
    ) -> Any:
        """Run one invocation to its end and return its result, or raise what it raised.

        ``arguments`` are the trigger/binding parameters; a ``context`` parameter is added
        when the function declares one. Raises HostStoppingError while draining.
        """
        with self._idle:
            if self._stopping:
                raise HostStoppingError(f"host is stopping: {spec.name} not invoked")
            self._in_flight += 1
        invocation_id = str(uuid.uuid4())
        context = InvocationContext(invocation_id, spec.name, self._script_root)
        call_arguments = dict(arguments)
        if spec.wants_context:
            call_arguments["context"] = context
        started = time.perf_counter()
        outcome = "Failed"
        try:
            future = self._start(spec, call_arguments)
            try:
                result = future.result(timeout=self._timeout)
            except concurrent.futures.TimeoutError as error:
                future.cancel()  # cancels a coroutine; a running thread cannot be stopped
                raise FunctionTimeoutError(
                    f"Timeout value of {self._timeout:.0f}s exceeded by function "
                    f"'Functions.{spec.name}' (Id: '{invocation_id}')"
                ) from error
            outcome = "Succeeded"
            return result
        except Exception:
            log.exception("Executing 'Functions.%s' failed (Id=%s)", spec.name, invocation_id)
            raise
        finally:
            duration_ms = (time.perf_counter() - started) * 1000
            log.info(
                "Executed 'Functions.%s' (%s, Id=%s, Duration=%.0fms)",
                spec.name,
                outcome,
                invocation_id,
                duration_ms,
            )
            with self._idle:
                self._in_flight -= 1
                self._idle.notify_all()

    @property
    def in_flight(self) -> int:
        with self._idle:
            return self._in_flight

    def stop_accepting(self) -> None:
        with self._idle:
            self._stopping = True

    def drain(self, timeout_s: float) -> bool:
        """Wait for running invocations; True when all finished within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        with self._idle:
            self._stopping = True
            while self._in_flight:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle.wait(remaining)
        return True

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._loop_thread.join(timeout=5)
