"""The chaos run "emulator restarted mid-burst": the broker dies while work is in flight.

A burst of healthy HTTP requests in three waves: the first is accepted and being
processed (the local model takes LocalModelLatencyMs per call) when the Service Bus
emulator is killed (SIGKILL: nothing flushed, nothing settled); the second arrives while
it is down (the door may refuse it: a refused request is owed nothing) and the emulator is
started again on the same ports with its data folder ``DOWN_S`` later; the third wave
arrives after it (refusals while the app reconnects are retried, as a client honouring
Retry-After does). Every request accepted in any wave must complete exactly once: its
message kept by the emulator across the restart, or sent again from its job.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from tests.chaos.campaign import SUBMITTERS, Campaign
from tests.chaos.conftest import ChaosSize
from tests.chaos.evidence import dead_letters, result_events, result_messages, wait_until_terminal
from tests.chaos.local_stack import ChaosStack
from tests.chaos.traffic import Sent, healthy_body, new_tenant, submit

# Requests of each wave before and after the outage; the wave during it is one per caller.
WAVE_SHARE = 3
# How long the emulator stays down: a restart, not an outage (the SDK's connect retries
# still run when it is back, so some requests sent while it was down may be accepted).
DOWN_S = 3.0
# How long a caller of the last wave keeps retrying a refusal (the app's sender reconnects
# and its breaker re-closes within seconds of the emulator's return).
RECONNECT_RETRY_S = 60.0


def _submit_wave(
    stack: ChaosStack, indexes: range, retry_for_s: float = 0.0
) -> tuple[list[Sent], int]:
    """One wave from SUBMITTERS callers at once: the accepted requests and the refusals
    (a refusal is retried for ``retry_for_s`` seconds)."""

    def one(index: int) -> Sent | None:
        kind, body = healthy_body(index)
        tenant = new_tenant(kind)
        give_up = time.monotonic() + retry_for_s
        while True:
            request_id = submit(stack.base_url, stack.key, tenant, body)
            if request_id is not None:
                return Sent(request_id, tenant, kind, "completed")
            if time.monotonic() >= give_up:
                return None
            time.sleep(1.0)

    with ThreadPoolExecutor(SUBMITTERS) as pool:
        outcomes = list(pool.map(one, indexes))
    accepted = [sent for sent in outcomes if sent is not None]
    return accepted, len(outcomes) - len(accepted)


def run_emulator_restart(stack: ChaosStack, size: ChaosSize) -> Campaign:
    campaign = Campaign()
    per_wave = max(SUBMITTERS, size.requests // WAVE_SHARE)
    before, refused_before = _submit_wave(stack, range(per_wave))
    campaign.sent += before
    stack.kill_servicebus()
    killed_at = time.monotonic()
    with ThreadPoolExecutor(1) as background:
        during_wave = background.submit(_submit_wave, stack, range(per_wave, per_wave + SUBMITTERS))
        time.sleep(DOWN_S)
        stack.start_servicebus()
        down_s = time.monotonic() - killed_at
        during, refused = during_wave.result()
    campaign.sent += during
    campaign.chaos.append(
        f"Service Bus emulator killed (SIGKILL) after {len(before)} accepted requests and "
        f"started again with its data folder {down_s:.1f}s later "
        f"({len(during)} accepted, {refused} refused of the requests sent while it was down)"
    )
    after_start = per_wave + SUBMITTERS
    after, refused_after = _submit_wave(
        stack, range(after_start, after_start + per_wave), RECONNECT_RETRY_S
    )
    campaign.sent += after
    campaign.refused_at_the_door = refused_before + refused_after
    campaign.statuses = wait_until_terminal(stack.base_url, stack.key, campaign.sent, size.wait_s)
    waited_s = time.monotonic() - killed_at
    campaign.chaos.append(
        f"the wait for every request to end stopped {waited_s:.0f}s after the kill"
    )
    bus = stack.servicebus_connection_string
    campaign.result_messages = result_messages(bus)
    campaign.result_events = result_events(
        stack.values["EventGridTopic__topicEndpoint"], stack.values["EventGridTopic__topicKey"]
    )
    campaign.dead_letters = dead_letters(bus)
    return campaign
