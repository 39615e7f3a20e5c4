"""Chaos "emulator restarted mid-burst": every accepted request completes, exactly once.

The Service Bus emulator is killed while a burst is in flight and started again with its
data folder (``emulator_restart.py``); each test judges one property of that run: the door
open before the kill and again after the restart, nothing accepted lost, nothing done
twice (one result message and one ``InferenceCompleted`` event id per request), nothing
dead-lettered.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.chaos.campaign import Campaign, listing
from tests.chaos.conftest import RUN_SUMMARIES, ChaosSize, running_chaos_stack
from tests.chaos.emulator_restart import run_emulator_restart
from tests.chaos.evidence import COMPLETED_EVENT, TERMINAL
from tests.chaos.local_stack import ChaosStack

pytestmark = pytest.mark.chaos

# A message the emulator lost with its process is sent again from its job after this long
# (the lanes' normal wait in this run is a few seconds), well within the run's wait.
RESEND_AFTER = {"JobResend__afterSeconds": "30"}


@pytest.fixture(scope="module")
def restart_stack(pytestconfig: pytest.Config) -> Iterator[ChaosStack]:
    with running_chaos_stack(
        pytestconfig.rootpath, servicebus_data=True, extra_values=RESEND_AFTER
    ) as stack:
        yield stack


@pytest.fixture(scope="module")
def campaign(
    restart_stack: ChaosStack, chaos_size: ChaosSize, pytestconfig: pytest.Config
) -> Campaign:
    ran = run_emulator_restart(restart_stack, chaos_size)
    pytestconfig.stash.setdefault(RUN_SUMMARIES, []).append(f"emulator restart: {ran.summary()}")
    return ran


def test_the_door_is_open_before_the_kill_and_after_the_restart(campaign: Campaign) -> None:
    """No request of the first and last waves was refused for good (only those sent while
    the emulator was down may be)."""
    assert campaign.refused_at_the_door == 0, campaign.summary()
    assert len(campaign.healthy) >= 2, campaign.summary()


def test_every_request_accepted_around_the_restart_completes(campaign: Campaign) -> None:
    lost = [s for s in campaign.healthy if campaign.statuses.get(s.request_id) != "completed"]
    assert not lost, f"{len(lost)} accepted requests did not complete:\n{listing(campaign, lost)}"


def test_no_request_has_two_results(campaign: Campaign) -> None:
    """One result message on the results topic (kept across the restart) per request."""
    wrong = {
        s.request_id: campaign.result_messages.get(s.request_id, [])
        for s in campaign.healthy
        if campaign.result_messages.get(s.request_id, []) != ["completed"]
    }
    assert not wrong, f"result messages per request (want one 'completed'): {wrong}"


def test_no_request_is_announced_twice(campaign: Campaign) -> None:
    ids = {
        r: {i for t, i in events if t == COMPLETED_EVENT}
        for r, events in campaign.result_events.items()
    }
    wrong = {
        s.request_id: sorted(ids.get(s.request_id, set()))
        for s in campaign.healthy
        if len(ids.get(s.request_id, set())) != 1
    }
    assert not wrong, f"InferenceCompleted event ids per request (want 1): {wrong}"


def test_no_request_is_dead_lettered_by_the_restart(campaign: Campaign) -> None:
    lettered = [s for s in campaign.sent if s.request_id in campaign.dead_letters]
    ended = sum(1 for status in campaign.statuses.values() if status in TERMINAL)
    assert not lettered, (
        f"{len(lettered)} of {ended} ended requests were dead-lettered:\n"
        f"{listing(campaign, lettered)}"
    )


def test_no_error_is_logged_for_a_request_that_completed(
    campaign: Campaign, restart_stack: ChaosStack
) -> None:
    """The restart takes the locks of messages whose jobs had completed: settling them
    fails, and their next delivery completes them as duplicates. That is one INFO line
    each, not an ERROR, and the SDK's own line for each message on the dropped
    connection is no ERROR either."""
    completed = {r for r, status in campaign.statuses.items() if status == "completed"}
    errors = [
        line
        for log in sorted(restart_stack.workdir.glob("host-*.log"))
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines()
        if " ERROR " in line
    ]
    false_alarms = [
        line
        for line in errors
        if "Transfer callback function failed" in line or any(r in line for r in completed)
    ]
    assert not false_alarms, "\n".join(false_alarms[:20])
