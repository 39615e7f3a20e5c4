"""The chaos run: traffic in waves, the host killed between them, storage taken away.

The order, for ``host_kills`` = K: poison first (direct producers' bad messages, and two
deferred requests whose claim-check blobs are then deleted and overwritten); then K + 1
waves of healthy HTTP requests, the host killed with SIGKILL right after each of the
first K waves (so batches are mid-flight: the local model takes LocalModelLatencyMs per
call) and started again; then valid producer messages, and Azurite stopped for
``storage_outage_s`` while more producer messages arrive and two deferred requests fall
due (the deferral sweeper meets them mid-outage); then Azurite back with its data.
Afterwards the run waits (bounded) for every accepted request to end and gathers the
evidence the properties are judged on.
"""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from tests.chaos.conftest import ChaosSize
from tests.chaos.evidence import (
    DeadLetter,
    dead_letters,
    result_events,
    result_messages,
    wait_until_terminal,
)
from tests.chaos.local_stack import ChaosStack
from tests.chaos.traffic import (
    Sent,
    direct_healthy,
    direct_poison,
    healthy_body,
    new_tenant,
    submit,
    submit_claim_check_victims,
    submit_due_later,
    tamper_claim_checks,
    wait_until_deferred,
)

CLAIM_CHECK_DELAY_S = 3.0
VICTIMS_WAIT_S = 30.0
# Requests due this long after they are sent: deferred first, then due while Azurite is
# down, so the deferral sweeper meets them mid-outage.
DUE_IN_OUTAGE_S = 6.0
SUBMITTERS = 8


@dataclass
class Campaign:
    """What was sent, what happened to it, and what was refused at the door."""

    sent: list[Sent] = field(default_factory=list)
    refused_at_the_door: int = 0
    chaos: list[str] = field(default_factory=list)
    statuses: dict[str, str] = field(default_factory=dict)
    result_messages: dict[str, list[str]] = field(default_factory=dict)
    result_events: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    dead_letters: dict[str, list[DeadLetter]] = field(default_factory=dict)

    @property
    def healthy(self) -> list[Sent]:
        return [s for s in self.sent if s.expected == "completed"]

    @property
    def poison(self) -> list[Sent]:
        return [s for s in self.sent if s.dead_letter_reason is not None]

    def summary(self) -> str:
        """Counts for the report: what was sent, how it ended, duplicate deliveries."""
        kinds = Counter(s.kind for s in self.sent)
        ended = Counter(self.statuses.values())
        repeated = sum(len(events) - len(set(events)) for events in self.result_events.values())
        return (
            f"sent {dict(kinds)}; refused at the door {self.refused_at_the_door}; "
            f"statuses {dict(ended)}; result events delivered more than once {repeated}; "
            f"chaos: {'; '.join(self.chaos)}"
        )


def _wave(stack: ChaosStack, campaign: Campaign, indexes: range) -> None:
    """Submit one wave of healthy requests in parallel, as many callers would."""

    def one(index: int) -> Sent | None:
        kind, body = healthy_body(index)
        tenant = new_tenant(kind)
        request_id = submit(stack.base_url, stack.key, tenant, body)
        return Sent(request_id, tenant, kind, "completed") if request_id else None

    with ThreadPoolExecutor(SUBMITTERS) as pool:
        for sent in pool.map(one, indexes):
            if sent is None:
                campaign.refused_at_the_door += 1
            else:
                campaign.sent.append(sent)


def run_campaign(stack: ChaosStack, size: ChaosSize) -> Campaign:
    campaign = Campaign()
    bus = stack.servicebus_connection_string
    campaign.sent += direct_poison(bus)
    victims = submit_claim_check_victims(stack.base_url, stack.key, CLAIM_CHECK_DELAY_S)
    tamper_claim_checks(stack.storage_connection_string, victims)
    campaign.sent += victims
    # The tampered requests end before the host is killed, so what they prove (a claim
    # check that no longer matches is dead-lettered) does not depend on timing.
    wait_until_terminal(stack.base_url, stack.key, victims, VICTIMS_WAIT_S)
    waves = size.host_kills + 1
    per_wave = max(1, size.requests // waves)
    for wave in range(waves):
        last = wave == waves - 1
        end = size.requests if last else (wave + 1) * per_wave
        _wave(stack, campaign, range(wave * per_wave, end))
        if not last:
            stack.kill_host()
            campaign.chaos.append(f"host killed (SIGKILL) after wave {wave + 1}")
            stack.start_host()
    campaign.sent += direct_healthy(bus, max(2, size.requests // 10))
    due_in_outage = submit_due_later(stack.base_url, stack.key, DUE_IN_OUTAGE_S)
    campaign.sent += due_in_outage
    deferred = wait_until_deferred(bus, due_in_outage, DUE_IN_OUTAGE_S / 2)
    stack.stop_storage()
    campaign.chaos.append(
        f"Azurite stopped for {size.storage_outage_s:.0f}s "
        f"({'with' if deferred else 'before'} 2 deferred requests due during it)"
    )
    outage_ends = time.monotonic() + size.storage_outage_s
    campaign.sent += direct_healthy(bus, max(2, size.requests // 20))
    time.sleep(max(0.0, outage_ends - time.monotonic()))
    stack.start_storage()
    campaign.statuses = wait_until_terminal(stack.base_url, stack.key, campaign.sent, size.wait_s)
    campaign.result_messages = result_messages(bus)
    campaign.result_events = result_events(
        stack.values["EventGridTopic__topicEndpoint"], stack.values["EventGridTopic__topicKey"]
    )
    campaign.dead_letters = dead_letters(bus)
    return campaign


def listing(campaign: Campaign, requests: list[Sent], limit: int = 15) -> str:
    """The requests that broke a property, one line each (kind, id, tenant, last status,
    dead letters), and the run's summary."""

    def line(s: Sent) -> str:
        letters = [(d.queue, d.reason) for d in campaign.dead_letters.get(s.request_id, [])]
        status = campaign.statuses.get(s.request_id)
        return f"  {s.kind:<24} {s.request_id} ({s.tenant}): {status}, dead letters {letters}"

    lines = [line(s) for s in requests[:limit]]
    more = f"\n  ... and {len(requests) - limit} more" if len(requests) > limit else ""
    return "\n".join(lines) + more + f"\n  run: {campaign.summary()}"
