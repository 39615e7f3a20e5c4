"""A second message for work another delivery does, or did, is harmless.

The job watchdog resends a job whose message seems lost, with the same message id; when
the original was not lost after all, its copy meets the job running or ended.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from shared.contracts import JobStatus
from tests.unit.test_processing import NOW, TENANT, Harness, message, request_body


def test_a_first_delivery_of_a_job_running_in_another_delivery_is_a_duplicate() -> None:
    h = Harness()
    h.job(status=JobStatus.RUNNING, updated_at=NOW - timedelta(minutes=2), attempts=1)

    assert h.processor.process(message(request_body(h)), h.settler) == "duplicate"

    assert h.settler.actions == [("complete", "r1", None, None)]
    assert h.model.calls == 0, "the model is not paid for twice"
    job = h.jobs.get(TENANT, "r1")
    assert (job.status, job.attempts) == (JobStatus.RUNNING, 1)


def test_a_redelivery_of_a_running_job_is_the_same_work_coming_back() -> None:
    h = Harness()
    h.job(status=JobStatus.RUNNING, updated_at=NOW - timedelta(minutes=2), attempts=1)
    redelivered = replace(message(request_body(h)), delivery_count=2)  # its lock was lost

    assert h.processor.process(redelivered, h.settler) == "completed"
    assert h.model.calls == 1


def test_a_resent_message_of_a_job_whose_lock_is_long_gone_runs() -> None:
    h = Harness()
    h.job(status=JobStatus.RUNNING, updated_at=NOW - timedelta(minutes=16), attempts=1)

    assert h.processor.process(message(request_body(h)), h.settler) == "completed"
    assert h.status() is JobStatus.COMPLETED


def test_a_resent_message_of_an_ended_job_is_completed_and_changes_nothing() -> None:
    h = Harness()
    h.job(status=JobStatus.FAILED)

    assert h.processor.process(message(request_body(h)), h.settler) == "duplicate"
    assert h.settler.actions == [("complete", "r1", None, None)]
    assert (h.status(), h.model.calls) == (JobStatus.FAILED, 0)
