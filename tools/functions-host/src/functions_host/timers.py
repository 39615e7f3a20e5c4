"""Timer triggers: one thread per timer, firing on its NCRONTAB schedule (UTC).

As in the host, executions of one timer never overlap (the next occurrence is computed
after the previous invocation ends), ``run_on_startup`` fires once when the host starts,
``past_due`` is true when an invocation starts well after its scheduled time, and a timer
fires only on the instance that holds its listener lock (``singleton``): scaled out to
several hosts, each timer still runs once per occurrence.
The host sends the timer's JSON (``Schedule``, ``ScheduleStatus``, ``IsPastDue``); the
runtime turns it into an ``azure.functions.TimerRequest``.
"""

from __future__ import annotations

import json
import logging
import threading
from datetime import UTC, datetime, timedelta

from functions_host.functions import FunctionSpec
from functions_host.invocation import HostStoppingError, Invoker
from functions_host.ncrontab import parse_schedule
from functions_host.protos import messages
from functions_host.singleton import ListenerLock

log = logging.getLogger("host.timers")
PAST_DUE_AFTER = timedelta(seconds=5)


class TimerRunner:
    def __init__(
        self, spec: FunctionSpec, invoker: Invoker, lock: ListenerLock | None = None
    ) -> None:
        self.spec = spec
        self._invoker = invoker
        self._lock = lock
        self._schedule = parse_schedule(str(spec.trigger.get("schedule", "")))
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._guarded_run, name=f"timer-{spec.name}", daemon=True
        )
        self._last: datetime | None = None

    def start(self) -> None:
        if self._lock is not None:
            self._lock.start()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._lock is not None:
            self._lock.stop()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def _fire(self, scheduled: datetime, past_due: bool) -> None:
        if self._lock is not None and not self._lock.held:
            log.debug("timer %s: another instance holds its listener", self.spec.name)
            self._last = scheduled
            return
        now = datetime.now(UTC)
        status = {
            "Last": (self._last or now).isoformat(),
            "Next": self._schedule.next_after(now).isoformat(),
            "LastUpdated": now.isoformat(),
        }
        # The JSON the host sends a timer trigger (the worker builds the TimerRequest).
        document = {
            "Schedule": {"AdjustForDST": True},
            "ScheduleStatus": status,
            "IsPastDue": past_due,
        }
        try:
            data = messages.TypedData(json=json.dumps(document))
            self._invoker.invoke(self.spec, {self.spec.trigger_parameter: data})
        except HostStoppingError:
            self._stop.set()
        except Exception as error:
            # Logged by the invoker; the timer keeps its schedule.
            log.debug("timer %s invocation failed: %r", self.spec.name, error)
        self._last = scheduled

    def _guarded_run(self) -> None:
        try:
            self._run()
        except Exception:
            log.exception("timer %s stopped unexpectedly", self.spec.name)

    def _run(self) -> None:
        if self.spec.trigger.get("runOnStartup"):
            self._fire(datetime.now(UTC), past_due=False)
        while not self._stop.is_set():
            due = self._schedule.next_after(datetime.now(UTC))
            log.debug("timer %s next at %s", self.spec.name, due.isoformat())
            while not self._stop.is_set():
                remaining = (due - datetime.now(UTC)).total_seconds()
                if remaining <= 0:
                    break
                self._stop.wait(min(remaining, 1.0))
            if self._stop.is_set():
                return
            late = datetime.now(UTC) - due
            self._fire(due, past_due=late > PAST_DUE_AFTER)
