"""Model capacity (``shared.inference.capacity``): a deployment's budget in one instance,
its share of the quota, its pause on a 429, priorities, and how a call that finds no
capacity is given back to the processor without spending an attempt."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from shared.adapters.in_memory import InMemoryBlobs, InMemoryDocuments
from shared.contracts import Priority, TokenUsage
from shared.errors import CapacityExhausted, PermanentError, Throttled
from shared.inference import InferenceInput, ModelAnswer
from shared.inference.capacity import (
    DEFAULT_ANSWER_TOKENS,
    BudgetedModel,
    DeploymentGate,
    estimated_tokens,
    gate_key,
)
from shared.inference.catalog import Capacity
from shared.inference.instances import InstanceRegistry
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
    assert exhausted.value.retry_after == pytest.approx(3.0), "300 tokens take 3 s to come back"
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


def test_each_instance_takes_its_share_of_the_quota() -> None:
    clock = Seconds()
    instances = {"live": 3}
    budget = gate(tokens=6_000, clock=clock, instances=lambda: instances["live"])
    budget.acquire(333, Priority.NORMAL, 0)  # a third of the 1,000-token window
    with pytest.raises(CapacityExhausted):
        budget.acquire(10, Priority.NORMAL, 0)
    instances["live"] = 1
    clock.now += 1.0
    budget.acquire(100, Priority.NORMAL, 0)


def test_the_service_says_what_is_left_and_the_gate_holds_itself_to_it() -> None:
    clock = Seconds()
    budget = gate(tokens=6_000, clock=clock)
    budget.observe(remaining_tokens=600, remaining_requests=None)  # a 100-token window left
    with pytest.raises(CapacityExhausted):
        budget.acquire(200, Priority.NORMAL, 0)
    budget.acquire(100, Priority.NORMAL, 0)


def test_a_429_pauses_every_call_of_the_deployment_for_the_time_asked() -> None:
    clock = Seconds()
    budget = gate(clock=clock)  # no quota declared: only the service's own pauses
    assert not budget.limited
    budget.acquire(10**6, Priority.NORMAL, 0)
    budget.throttled(retry_after=20.0)
    with pytest.raises(CapacityExhausted) as paused:
        budget.acquire(1, Priority.HIGH, 5.0)
    assert paused.value.retry_after == pytest.approx(20.0)
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


def test_the_instances_are_counted_from_their_heartbeats() -> None:
    blobs = InMemoryBlobs()
    documents = InMemoryDocuments(blobs)
    clock = ManualClock()
    registries = [
        InstanceRegistry(
            documents, documents, "ledgers", f"i{n}", heartbeat_seconds=10, clock=clock
        )
        for n in range(3)
    ]
    assert [registry.beat() for registry in registries] == [1, 2, 3]
    key = ("ledgers", "instances/i0.json")
    stale = blobs.stored[key]  # three heartbeats missed
    blobs.stored[key] = replace(stale, modified=stale.modified - timedelta(seconds=31))
    assert registries[1].beat() == 2


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
