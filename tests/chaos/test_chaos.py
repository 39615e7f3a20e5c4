"""Nothing accepted is lost, whatever breaks (architecture rule 6), on the whole local stack.

One chaos run (``campaign.py``) per module; each test judges one property of its outcome,
so a report names exactly which guarantees held and which did not, with the requests
that broke them.
"""

from __future__ import annotations

import pytest

from tests.chaos.campaign import Campaign, listing, run_campaign
from tests.chaos.conftest import RUN_SUMMARIES, ChaosSize
from tests.chaos.evidence import COMPLETED_EVENT, TERMINAL
from tests.chaos.local_stack import ChaosStack

pytestmark = pytest.mark.chaos


@pytest.fixture(scope="module")
def campaign(
    chaos_stack: ChaosStack, chaos_size: ChaosSize, pytestconfig: pytest.Config
) -> Campaign:
    ran = run_campaign(chaos_stack, chaos_size)
    pytestconfig.stash.setdefault(RUN_SUMMARIES, []).append(ran.summary())
    return ran


def test_the_run_accepted_what_it_sent(campaign: Campaign, chaos_size: ChaosSize) -> None:
    """The door stayed open between the blows: every healthy HTTP request was accepted."""
    assert campaign.refused_at_the_door == 0
    assert len(campaign.healthy) >= chaos_size.requests


def test_every_accepted_request_ends(campaign: Campaign) -> None:
    stuck = [
        s
        for s in campaign.sent
        if s.has_job and campaign.statuses.get(s.request_id) not in TERMINAL
    ]
    assert not stuck, f"{len(stuck)} accepted requests never ended:\n{listing(campaign, stuck)}"


def test_no_healthy_request_fails(campaign: Campaign) -> None:
    broken = [
        s
        for s in campaign.healthy
        if campaign.statuses.get(s.request_id) in TERMINAL - {"completed"}
    ]
    assert not broken, (
        f"{len(broken)} healthy requests did not complete:\n{listing(campaign, broken)}"
    )


def test_no_healthy_request_is_dead_lettered(campaign: Campaign) -> None:
    lettered = [s for s in campaign.healthy if s.request_id in campaign.dead_letters]
    assert not lettered, (
        f"{len(lettered)} healthy requests were dead-lettered:\n{listing(campaign, lettered)}"
    )


def test_each_ended_request_has_exactly_one_result_message(campaign: Campaign) -> None:
    """One message on the results topic per request that ended, saying how it ended
    (``completed`` for completed and refused, ``failed`` for failed and expired)."""
    ended = {r: status for r, status in campaign.statuses.items() if status in TERMINAL}
    expected = {r: ["failed" if s in ("failed", "expired") else "completed"]
                for r, s in ended.items() if s != "cancelled"}  # fmt: skip
    wrong = {
        r: (ended.get(r), campaign.result_messages.get(r, []))
        for r in set(expected) | set(campaign.result_messages)
        if campaign.result_messages.get(r, []) != expected.get(r, [])
    }
    assert "completed" in ended.values(), f"no request completed: {campaign.summary()}"
    assert not wrong, f"(job status, result messages) where not one matching: {wrong}"


def test_each_completed_request_has_exactly_one_result_event(campaign: Campaign) -> None:
    """One ``InferenceCompleted`` event id per completed request on the Event Grid topic.
    The same event delivered again (same id) is at-least-once delivery, which the event
    contract allows (deterministic ids, consumers dedupe); ``summary()`` counts those."""
    completed = {r for r, status in campaign.statuses.items() if status == "completed"}
    ids = {
        r: {i for t, i in events if t == COMPLETED_EVENT}
        for r, events in campaign.result_events.items()
    }
    wrong = {
        r: sorted(ids.get(r, set()))
        for r in completed | set(ids)
        if len(ids.get(r, set())) != (1 if r in completed else 0)
    }
    assert completed, f"no request completed: {campaign.summary()}"
    assert not wrong, f"InferenceCompleted event ids per request (want 1 per completed): {wrong}"


def test_every_poison_message_is_dead_lettered_with_its_reason(campaign: Campaign) -> None:
    wrong = [
        s
        for s in campaign.poison
        if [d.reason for d in campaign.dead_letters.get(s.request_id, [])] != [s.dead_letter_reason]
    ]
    expected = ", ".join(f"{s.kind}: {s.dead_letter_reason}" for s in wrong)
    assert not wrong, f"want exactly one dead letter each ({expected}):\n{listing(campaign, wrong)}"


def test_every_poison_job_fails(campaign: Campaign) -> None:
    wrong = [
        s for s in campaign.poison if s.has_job and campaign.statuses.get(s.request_id) != "failed"
    ]
    assert not wrong, f"poison requests whose job did not fail:\n{listing(campaign, wrong)}"
