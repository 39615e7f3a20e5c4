"""Maintenance timers: every accepted request ends (architecture.md rule 6).

- ``reconcile_dead_letters`` (``DeadLetterReconcileSchedule``): a request message in a
  request queue's dead-letter sub-queue, for any reason, ends its job;
- ``watch_jobs`` (``JobWatchdogSchedule``): a job past its deadline (plus a grace
  period), or stale without one, is ended;
- ``drive_global_batch`` (``GlobalBatchSchedule``): the Global Batch control plane submits,
  polls and concludes batches (``shared.global_batch.control_plane``).

Thin: each timer calls one entry point of ``shared.entrypoints.functions``.
"""

from __future__ import annotations

import azure.functions as func

from shared.entrypoints import functions as entry_points
from shared.entrypoints.bootstrap import get_services
from triggers.invocation import in_trace

bp = func.Blueprint()


@bp.function_name("reconcile_dead_letters")
@bp.timer_trigger(arg_name="timer", schedule="%DeadLetterReconcileSchedule%", run_on_startup=False)
def reconcile_dead_letters(timer: func.TimerRequest, context: func.Context) -> None:
    with in_trace(context):
        entry_points.reconcile_dead_letters(get_services)


@bp.function_name("watch_jobs")
@bp.timer_trigger(arg_name="timer", schedule="%JobWatchdogSchedule%", run_on_startup=False)
def watch_jobs(timer: func.TimerRequest, context: func.Context) -> None:
    with in_trace(context):
        entry_points.watch_jobs(get_services)


@bp.function_name("drive_global_batch")
@bp.timer_trigger(arg_name="timer", schedule="%GlobalBatchSchedule%", run_on_startup=False)
def drive_global_batch(timer: func.TimerRequest, context: func.Context) -> None:
    with in_trace(context):
        entry_points.drive_global_batch(get_services)
