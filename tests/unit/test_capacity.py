"""Model capacity (``shared.inference.capacity``): a deployment's budget in one instance,
its share of the quota, its pause on a 429, priorities, and how a call that finds no
capacity is given back to the processor without spending an attempt."""

from __future__ import annotations

import contextlib
import json
import math
import threading
import time
from dataclasses import replace
from datetime import timedelta
from functools import partial
from typing import Any, Literal

import pytest

from shared.adapters.in_memory import InMemoryBlobs, InMemoryDocuments
from shared.contracts import Priority, TokenUsage
from shared.errors import CapacityExhausted, PermanentError, Throttled
from shared.inference import InferenceInput, ModelAnswer
from shared.inference.capacity import (
    DEFAULT_ANSWER_TOKENS,
    SERVED_SECONDS,
    WINDOW_SECONDS,
    AnswerEstimate,
    BudgetedModel,
    Demand,
    DeploymentGate,
    estimated_tokens,
    gate_key,
)
from shared.inference.catalog import Capacity
from shared.inference.instances import (
    IDLE_FLOOR,
    InstanceRegistry,
    decode_demands,
    demand_share,
    encode_demands,
)
from tests.fakes import ManualClock
from tests.support.catalogs import catalog, local_catalog
from tests.support.wiring import wire


class Seconds:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def gate(tokens: int | None = None, requests: int | None = None, **options: Any) -> DeploymentGate:
    return DeploymentGate("gpt-4o-mini", Capacity(tokens, requests), **options)


def test_a_call_reserves_its_prompt_and_its_longest_answer() -> None:
    assert estimated_tokens("x" * 40, "y" * 60, {}) == 25 + DEFAULT_ANSWER_TOKENS
    assert estimated_tokens("", "y" * 8, {"max_tokens": 100}) == 2 + 100


def test_the_window_holds_a_sixth_of_the_minute_and_refills_at_its_rate() -> None:
    clock = Seconds()
    budget = gate(tokens=6_000, clock=clock)  # a 1,000-token window, 100 tokens a second
    budget.acquire(600, Priority.NORMAL, 0)
    budget.acquire(400, Priority.NORMAL, 0)
    with pytest.raises(CapacityExhausted) as exhausted:
        budget.acquire(300, Priority.NORMAL, 2.0)
    # 300 tokens take 3 s to come back; the copy returns while half the bound is still to go,
    # so the line never runs dry waiting for it.
    assert exhausted.value.retry_after == pytest.approx(3.0 - 2.0 / 2)
    clock.now += 3.0
    budget.acquire(300, Priority.NORMAL, 0)
    assert budget.stats.admitted == 3
    assert budget.stats.gave_up == 1


def test_a_settled_call_gives_back_what_it_did_not_use() -> None:
    clock = Seconds()
    budget = gate(tokens=6_000, clock=clock)
    reserved = budget.acquire(1_000, Priority.NORMAL, 0)
    with pytest.raises(CapacityExhausted):
        budget.acquire(100, Priority.NORMAL, 0)
    budget.settle(reserved, used_tokens=400)
    budget.acquire(600, Priority.NORMAL, 0)  # the 600 it did not use
    failed = budget.acquire(0, Priority.NORMAL, 0)
    budget.settle(failed, used_tokens=None)


def test_the_request_quota_counts_calls_whatever_their_size() -> None:
    clock = Seconds()
    budget = gate(requests=60, clock=clock)  # ten calls a window, one a second
    for _ in range(10):
        budget.acquire(10_000, Priority.NORMAL, 0)
    with pytest.raises(CapacityExhausted):
        budget.acquire(1, Priority.NORMAL, 0.5)
    clock.now += 1.0
    budget.acquire(1, Priority.NORMAL, 0)


class Shares:
    """A fleet whose share and others' demand the test sets (``capacity.Fleet``)."""

    def __init__(self, share: float = 1.0, elsewhere: float = 0.0) -> None:
        self.value = share
        self.elsewhere = elsewhere
        self.served = (0.0, 0.0)
        self.changes = 0

    def share(self, gate: str) -> float:
        return self.value

    def tokens_elsewhere(self, gate: str) -> float:
        return self.elsewhere

    def served_elsewhere(self, gate: str) -> tuple[float, float]:
        return self.served

    def demand_changed(self) -> None:
        self.changes += 1


def warmed(budget: DeploymentGate, clock: Seconds) -> DeploymentGate:
    """``budget`` after a full window's time: among other instances a gate starts empty."""
    budget.settle(budget.acquire(0, Priority.NORMAL, 0), 0)
    clock.now += WINDOW_SECONDS
    return budget


def test_among_other_instances_a_gate_starts_with_an_empty_window() -> None:
    clock = Seconds()
    alone = gate(tokens=6_000, clock=clock)
    alone.acquire(1_000, Priority.NORMAL, 0)  # a whole window at once
    among = gate(tokens=6_000, clock=clock, fleet=Shares())
    with pytest.raises(CapacityExhausted):
        among.acquire(100, Priority.NORMAL, 0)
    clock.now += 1.0
    among.acquire(100, Priority.NORMAL, 0)  # what a second brings


def test_each_instance_takes_its_share_of_the_quota() -> None:
    clock = Seconds()
    fleet = Shares(share=1 / 3)
    budget = warmed(gate(tokens=6_000, clock=clock, fleet=fleet), clock)
    budget.acquire(333, Priority.NORMAL, 0)  # a third of the 1,000-token window
    with pytest.raises(CapacityExhausted):
        budget.acquire(10, Priority.NORMAL, 0)
    fleet.value = 1.0  # the others went idle: the budget flows here
    clock.now += 1.0
    budget.acquire(100, Priority.NORMAL, 0)


@pytest.mark.parametrize(
    ("limiter", "remaining"),
    # A window's part of the minute, the other instances' calls already counted in it;
    # what goes now over a sliding minute, which every instance reads: our half of it.
    [("window", 1_200), ("minute", 400)],
)
def test_the_service_says_what_is_left_and_the_gate_holds_itself_to_it(
    limiter: Literal["window", "minute"], remaining: int
) -> None:
    clock = Seconds()
    budget = DeploymentGate(
        "gpt-4o-mini", Capacity(6_000, None, limiter), clock=clock, fleet=Shares(share=0.5)
    )
    warmed(budget, clock)  # our half of the window: 500 tokens
    # 200 tokens may go now, read as the limiter means it.
    budget.observe(remaining_tokens=remaining, remaining_requests=None)
    with pytest.raises(CapacityExhausted):
        budget.acquire(300, Priority.NORMAL, 0)
    budget.acquire(200, Priority.NORMAL, 0)


def test_a_call_behind_a_long_line_gives_its_message_back_at_once() -> None:
    clock = Seconds()
    budget = gate(tokens=6_000, clock=clock, max_wait=5.0)  # 100 tokens a second
    budget.acquire(1_000, Priority.NORMAL, 0)  # the window is used up
    started = threading.Event()

    def waiting() -> None:
        started.set()
        with contextlib.suppress(CapacityExhausted):
            budget.acquire(400, Priority.NORMAL, 4.5)  # 4 s: within its bound, so it waits

    first = threading.Thread(target=waiting, daemon=True)
    first.start()
    started.wait(5)
    time.sleep(0.05)
    with pytest.raises(CapacityExhausted) as behind:
        budget.acquire(200, Priority.NORMAL, 5.0)  # 600 tokens ahead with it: 6 s > 5 s
    assert behind.value.retry_after == pytest.approx(6.0 - 5.0 / 2)
    assert budget.stats.gave_up == 1, "the first call still waits its turn"
    clock.now += 5.0
    first.join(5)
    assert budget.stats.admitted == 2


def test_the_others_demand_decides_when_this_instance_waits_for_its_share() -> None:
    clock = Seconds()
    # Our share is a floor (we just got work), but nobody else waits: the share will
    # follow within a heartbeat, so the call waits for it instead of going back.
    alone = gate(tokens=6_000, clock=clock, fleet=Shares(share=0.001), max_wait=10.0)
    with pytest.raises(CapacityExhausted) as late:
        alone.acquire(500, Priority.NORMAL, 0.1)
    assert (late.value.retry_after or 0) < 6.0, "500 tokens at the whole quota's pace: 5 s"
    # The same floor while the others wait for 5,000 tokens: 55 s at the whole pace.
    crowded = gate(tokens=6_000, clock=clock, fleet=Shares(0.001, 5_000), max_wait=10.0)
    with pytest.raises(CapacityExhausted) as hopeless:
        crowded.acquire(500, Priority.NORMAL, 10.0)
    assert hopeless.value.retry_after == pytest.approx(55.0 - 10.0 / 2, rel=0.02)


def test_the_demand_counts_waiting_and_running_calls_high_priority_weighted_up() -> None:
    fleet = Shares()
    clock = Seconds()
    budget = warmed(gate(tokens=60_000, fleet=fleet, clock=clock), clock)
    assert budget.demand() == Demand()
    fleet.changes = 0
    normal = budget.acquire(300, Priority.NORMAL, 0)
    high = budget.acquire(100, Priority.HIGH, 0)
    assert budget.demand() == Demand(300 + 4 * 100, 400)
    assert fleet.changes == 1, "the demand started"
    budget.settle(normal, 250)
    budget.settle(high, 90)
    # A heartbeat reads the most since the one before: a gap between batches is not idle.
    assert budget.demand() == Demand(300 + 4 * 100, 400, high=90, served=340)
    assert budget.demand() == Demand(high=90, served=340), "what it served stays a while"
    assert fleet.changes == 2, "and stopped"


def test_a_429_pauses_every_call_of_the_deployment_for_the_time_asked() -> None:
    clock = Seconds()
    budget = gate(clock=clock)  # no quota declared: only the service's own pauses
    assert not budget.limited
    budget.acquire(10**6, Priority.NORMAL, 0)
    budget.throttled(retry_after=20.0)
    with pytest.raises(CapacityExhausted) as paused:
        budget.acquire(1, Priority.HIGH, 5.0)
    assert paused.value.retry_after == pytest.approx(20.0 - 5.0 / 2)
    clock.now += 20.0
    budget.acquire(1, Priority.NORMAL, 0)
    assert budget.stats.throttled == 1


def test_high_priority_work_takes_the_budget_first() -> None:
    budget = gate(tokens=60_000)  # 10,000 tokens a window, 1,000 a second
    budget.acquire(10_000, Priority.NORMAL, 0)  # the window is used up
    order: list[Priority] = []

    def call(priority: Priority) -> None:
        budget.acquire(800, priority, 10.0)
        order.append(priority)

    low = threading.Thread(target=call, args=(Priority.LOW,))
    low.start()
    time.sleep(0.05)  # the low-priority call waits first
    high = threading.Thread(target=call, args=(Priority.HIGH,))
    high.start()
    low.join(5)
    high.join(5)
    assert order == [Priority.HIGH, Priority.LOW]


def test_within_a_priority_the_earliest_deadline_goes_first() -> None:
    budget = gate(tokens=60_000)  # 10,000 tokens a window, 1,000 a second
    budget.acquire(10_000, Priority.NORMAL, 0)  # the window is used up
    order: list[str] = []

    def call(name: str, due: float) -> None:
        budget.acquire(800, Priority.NORMAL, 10.0, due=due)
        order.append(name)

    now = budget.clock()
    # A message given back comes in behind newer ones; its older deadline puts it first.
    newer = threading.Thread(target=call, args=("newer", now + 100))
    newer.start()
    time.sleep(0.05)  # the newer request waits first
    older = threading.Thread(target=call, args=("older", now + 40))
    older.start()
    newer.join(5)
    older.join(5)
    assert order == ["older", "newer"]


def test_a_request_takes_its_deadline_to_the_gate() -> None:
    budget = gate(tokens=60_000)
    budget.acquire(10_000, Priority.NORMAL, 0)
    order: list[str] = []

    def infer(name: str, wait_limit: float | None) -> None:
        budgeted(Service(), budget).infer(REQUEST.model_copy(update={"wait_limit": wait_limit}))
        order.append(name)

    calls = [("no deadline", None), ("late", 50.0), ("soon", 20.0)]
    threads = [threading.Thread(target=infer, args=call) for call in calls]
    for thread in threads:
        thread.start()
        time.sleep(0.05)
    for thread in threads:
        thread.join(10)
    assert order == ["soon", "late", "no deadline"]


class Service:
    """A model that answers, or first throttles ``throttles`` times."""

    system = "az.ai.openai"

    def __init__(self, throttles: int = 0, fail: Exception | None = None) -> None:
        self.throttles = throttles
        self.fail = fail
        self.calls = 0

    def infer(self, request: InferenceInput) -> ModelAnswer:
        self.calls += 1
        if self.fail is not None:
            raise self.fail
        if self.throttles:
            self.throttles -= 1
            raise Throttled("429", retry_after=0.05, remaining_tokens=0)
        usage = TokenUsage(input_tokens=100, output_tokens=50, total_tokens=150)
        return ModelAnswer(content={"a": 1}, usage=usage, remaining_tokens=50_000)


def budgeted(service: Service, budget: DeploymentGate) -> BudgetedModel:
    return BudgetedModel(local_catalog().cards["local-analyzer"], service, budget)


REQUEST = InferenceInput(
    request_id="r", model="local-analyzer", content=b"x" * 400, media_type="text/plain"
)


def test_a_throttled_call_waits_the_pause_and_goes_again_without_failing() -> None:
    service = Service(throttles=2)
    budget = gate(tokens=600_000)

    answer = budgeted(service, budget).infer(REQUEST)

    assert answer.content == {"a": 1}
    assert service.calls == 3
    assert budget.stats.throttled == 2


def test_a_call_that_cannot_get_capacity_in_time_is_given_back() -> None:
    budget = gate(tokens=600)  # a 100-token window: this call needs about 700
    budget.acquire(100, Priority.NORMAL, 0)
    service = Service()
    waiting = REQUEST.model_copy(update={"wait_limit": 0.2})

    with pytest.raises(CapacityExhausted):
        budgeted(service, budget).infer(waiting)
    assert service.calls == 0, "nothing was sent"


def test_a_failed_call_returns_its_reservation() -> None:
    clock = Seconds()
    budget = gate(tokens=6_000, clock=clock)
    with pytest.raises(PermanentError):
        budgeted(Service(fail=PermanentError("no such deployment")), budget).infer(REQUEST)
    assert budget.acquire(1_000, Priority.NORMAL, 0).tokens == 1_000, "the whole window is back"


def test_a_deployment_is_its_provider_endpoint_and_name() -> None:
    entry = {"provider": "openai_compatible", "endpoint": "http://127.0.0.1:8000/v1"}
    cards = catalog(
        {
            "models": {
                "rate": {**entry, "deployment": "llama"},
                "summarise": {**entry, "deployment": "llama"},  # another task, same model
                "other-model": {**entry, "deployment": "qwen"},
                "other-server": {**entry, "deployment": "llama",
                                 "endpoint": "http://127.0.0.1:9000/v1"},
            }
        }
    ).cards  # fmt: skip
    assert gate_key(cards["rate"]) == gate_key(cards["summarise"])
    assert gate_key(cards["rate"]) != gate_key(cards["other-model"])
    assert gate_key(cards["rate"]) != gate_key(cards["other-server"])
    first, second = local_catalog("a", "b").cards.values()
    assert gate_key(first) != gate_key(second), "the shorthand deploys each under its name"


def test_a_share_follows_demand_with_a_floor_for_the_idle() -> None:
    assert demand_share(0, [0, 0]) == pytest.approx(1 / 3), "nobody has work: equal"
    assert demand_share(0, [500, 0]) == pytest.approx(IDLE_FLOOR / 3)
    busy = demand_share(500, [0, 0])
    assert busy == pytest.approx(1 - 2 * IDLE_FLOOR / 3), "the idle keep only their floor"
    assert demand_share(300, [100, 0]) == pytest.approx((1 - IDLE_FLOOR / 3) * 0.75)
    assert demand_share(500, [0, 0], ramping=True) == pytest.approx(1 / 3)
    shares = [demand_share(d, [o for o in (600, 300, 0, 100) if o is not d]) for d in
              (600, 300, 0, 100)]  # fmt: skip
    assert sum(shares) == pytest.approx(1.0), "one listing: the shares add up to the quota"


def test_demands_travel_in_metadata_and_a_foreign_part_counts_as_none() -> None:
    demands = {
        "abc": Demand(2100.4, 400, 30, 900),
        "idle": Demand(),
        "served": Demand(0, 0, 0, 1_000),
    }
    assert decode_demands(encode_demands(demands)) == {
        "abc": Demand(2100, 400, 30, 900),
        "served": Demand(0, 0, 0, 1_000),
    }
    assert decode_demands("abc:x:1;def:5:5;new:1:2:3") == {"def": Demand(5, 5)}, (
        "an older heartbeat's demand alone reads; three numbers do not"
    )


def test_the_instances_are_counted_and_shared_from_their_heartbeats() -> None:
    blobs = InMemoryBlobs()
    documents = InMemoryDocuments(blobs)
    clock = ManualClock()
    demands = {f"i{n}": Demand() for n in range(3)}
    registries = []
    for n in range(3):
        registry = InstanceRegistry(
            documents, "ledgers", f"i{n}", heartbeat_seconds=10, clock=clock
        )
        registry.watch("gpt", partial(demands.__getitem__, f"i{n}"))
        registries.append(registry)
    assert [registry.beat() for registry in registries] == [1, 2, 3]
    demands["i0"] = Demand(3_000, 3_000)
    demands["i1"] = Demand(1_000, 1_000)
    for registry in registries:  # the demand started: each writes at once, then reads
        registry.beat()
    registries[0].beat()
    assert registries[2].tokens_elsewhere("gpt") == 4_000
    assert registries[2].share("gpt") == pytest.approx(IDLE_FLOOR / 3)
    assert registries[1].tokens_elsewhere("gpt") == 3_000
    key = ("ledgers", "instances/i0.json")
    stale = blobs.stored[key]  # three heartbeats missed
    blobs.stored[key] = replace(stale, modified=stale.modified - timedelta(seconds=31))
    assert registries[1].beat() == 2
    assert registries[1].tokens_elsewhere("gpt") == 0


def test_an_alias_learns_how_long_its_answers_are() -> None:
    estimate = AnswerEstimate()
    assert estimate.tokens() == DEFAULT_ANSWER_TOKENS
    for _ in range(3):
        estimate.learn(80)
    assert estimate.tokens() == 100, "80 tokens with a quarter's margin"
    assert estimated_tokens("", "y" * 8, {}, estimate.tokens()) == 2 + 100
    assert estimated_tokens("", "y" * 8, {"max_tokens": 30}, estimate.tokens()) == 2 + 30
    service = Service()
    model = budgeted(service, gate(tokens=600_000))
    model.infer(REQUEST)
    assert model.answers.tokens() == math.ceil(50 * AnswerEstimate.MARGIN), "from usage"


def test_the_services_put_every_alias_behind_its_deployments_gate(tmp_path: Any) -> None:
    catalog = tmp_path / "models.json"
    catalog.write_text(
        json.dumps(
            {
                "models": {
                    "a": {"provider": "local", "deployment": "shared",
                          "capacity": {"tokens_per_minute": 60000}},
                    "b": {"provider": "local", "deployment": "shared"},
                    "c": {"provider": "local", "deployment": "other"},
                }
            }
        )
    )  # fmt: skip
    gated = wire(ModelCatalog=str(catalog)).services.models
    clients = {alias: gated[alias].client for alias in gated}
    assert all(isinstance(client, BudgetedModel) for client in clients.values())
    gates = {alias: client.gate for alias, client in clients.items()}  # type: ignore[attr-defined]
    assert gates["a"] is gates["b"], "one deployment, one quota"
    assert gates["a"] is not gates["c"]
    assert gates["a"].limited
    assert not gates["c"].limited

    ungated = wire(ModelCatalog=str(catalog), ModelCapacity__enabled="false").services.models
    assert not any(isinstance(ungated[alias].client, BudgetedModel) for alias in ungated)


def test_a_429_teaches_the_gate_to_wait_for_more_room_than_it_reserves() -> None:
    clock = Seconds()
    budget = gate(tokens=6_000, clock=clock)  # 1,000 a window, 100 tokens a second
    budget.acquire(900, Priority.NORMAL, 0)  # 100 left
    budget.acquire(50, Priority.NORMAL, 0)  # fits: 50 left
    budget.throttled(retry_after=0.0)  # the service counted more than the gate did
    with pytest.raises(CapacityExhausted):
        budget.acquire(40, Priority.NORMAL, 0)  # 40 fits, but not with 128 of headroom
    clock.now += 1.2  # 170 in the bucket: the call and its headroom
    budget.acquire(40, Priority.NORMAL, 0)
    for _ in range(1_000):  # every call that goes through shrinks the headroom back
        clock.now += 1.0
        budget.settle(budget.acquire(1, Priority.NORMAL, 0), 1)
    clock.now += WINDOW_SECONDS
    budget.acquire(900, Priority.NORMAL, 0)
    budget.acquire(95, Priority.NORMAL, 0)  # 100 left: the headroom has shrunk to 1 token


def test_high_priority_takes_its_part_of_the_quota_not_of_the_few_calls_served() -> None:
    clock = Seconds()
    budget = warmed(gate(tokens=6_000, clock=clock, fleet=Shares()), clock)  # 100 a second
    budget.settle(budget.acquire(300, Priority.HIGH, 0), 300)
    budget.settle(budget.acquire(100, Priority.NORMAL, 0), 100)
    # The first calls of a burst: 300 of the 6,000 tokens a minute, not 3 of every 4.
    assert budget.high_share() == pytest.approx(300 / (100 * SERVED_SECONDS))
    for _ in range(int(5 * SERVED_SECONDS)):  # the deployment busy, a quarter for high
        clock.now += 1.0
        budget.settle(budget.acquire(25, Priority.HIGH, 0), 25)
        budget.settle(budget.acquire(75, Priority.NORMAL, 0), 75)
    assert budget.high_share() == pytest.approx(0.25, abs=0.01)


def test_the_gate_says_what_part_of_the_deployment_high_priority_took_lately() -> None:
    clock = Seconds()
    fleet = Shares()
    budget = warmed(gate(clock=clock, fleet=fleet), clock)  # no quota: of what was served
    assert budget.high_share() == 0.0, "nothing served: nothing overtakes"
    budget.settle(budget.acquire(100, Priority.HIGH, 0), 100)
    budget.settle(budget.acquire(300, Priority.NORMAL, 0), 300)
    budget.settle(budget.acquire(400, Priority.NORMAL, 0), None)  # failed: nothing served
    assert budget.high_share() == pytest.approx(0.25)
    budget.demand()  # the peak since the last heartbeat held the calls
    assert budget.demand() == Demand(high=100, served=400), "in the heartbeat"
    fleet.served = (300.0, 400.0)  # another instance served mostly high priority
    assert budget.high_share() == pytest.approx(0.5), "the deployment's mix, not this one's"
    fleet.served = (0.0, 0.0)
    clock.now += 5 * SERVED_SECONDS  # the high-priority run is long over
    budget.settle(budget.acquire(300, Priority.NORMAL, 0), 300)
    assert budget.high_share() < 0.01
