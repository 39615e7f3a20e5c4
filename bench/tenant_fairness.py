"""Tenants' fair shares of one deployment, measured through the whole local stack.

The app runs on ``--instances`` (2) hosts (``python -m devtools.stack --instances``) in
front of the Azure OpenAI emulator's deployment of ``--tpm`` (30,000) tokens a minute,
each call taking ``--latency-ms`` (1,000); a tenant catalog gives the tenants their
weights. The runs, in one invocation, each on a fresh stack:

* ``solo``: tenant ``support`` alone sends one request every ``--trickle-seconds`` (3)
  for ``--solo-seconds`` (60): its wait when nobody else is there;
* ``noisy-on``, ``noisy-off``: tenant ``marketing`` drops ``--backlog`` (400) requests at
  once from 16 callers, while ``support`` keeps sending one request every 3 s for
  ``--trickle-for`` (240) seconds. ``on`` is the app as shipped; ``off`` sets
  ``ModelCapacity__fairShareSeconds`` to 0, so no message goes back to the queue for
  its tenant's turn and the queue's order rules (the gate still orders the calls it
  holds by weight, but holds only the head of the queue): the broker's order alone;
* ``weights``: tenants ``gold`` (weight 3) and ``bronze`` (weight 1) each drop
  ``--backlog`` / 2 requests at once, interleaved;
* ``weights-late``: ``bronze`` drops its ``--backlog`` / 2 requests alone, and ``gold``
  its own ``--late-seconds`` (30) later: the part bronze was released at alone must make
  way for gold's;
* ``weights-producer``: the ``weights`` run's two bursts sent by a producer straight to
  the standard queue (``shared.producer``, one batch send for both, interleaved): no
  intake paces them, so the processors' turns alone keep the weights.

Printed per run: each tenant's requests, completed, p50/p95 wait (submission to
outcome) and for ``support`` its p95 over its solo p95; the served shares while every
tenant waited, from the last tenant's first request until the first tenant had its last
outcome and until it had 95% of them (its last few can be stragglers: requests are the
same size, so shares of requests completed are shares of tokens); goodput (the
deployment's tokens per minute of the drain over its quota, the local limit: 1.0 is all
it can answer) and 429s over calls; requests not completed and dead letters.

Targets (issue: tenants share a deployment fairly): ``support``'s p95 under the
neighbour at most max(3 x its solo p95, 15 s); with weights 3:1 and both waiting,
served shares within 10% of 75% / 25%; goodput at least 0.9 and 429s at most 5%; 0
requests not completed or dead-lettered.

Beside the noisy runs' two tenants, tenant ``trial`` has a small budget
(``--trial-budget`` tokens a day, 6,000) and sends one request every ``--trial-seconds``
(2) for the same time: printed, its requests accepted and refused (429
``budget-exceeded``), and what the ledger counts of its answers at the end
(``GET /api/v1/usage``) against its budget: the overshoot (target 0; at most the
estimates of requests admitted at the same moment). It is left out of the served shares.
The whole invocation takes about 35 minutes.
"""

from __future__ import annotations

import json
import math
import signal
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _harness import (
    REPO,
    argument_parser,
    connect,
    machine,
    now_stamp,
    quantile,
    ratio,
    run_threads,
    work_folder,
)
from model_capacity import ALIAS, KEY, READY, Watch, control, post, stack_settings, text

from local_processes import Child
from shared.adapters.servicebus import servicebus_client
from shared.adapters.servicebus_producer import ServiceBusBatchSenders
from shared.producer import Producer, parse_lines
from shared.settings import Settings

FLUSH_SECONDS = 5  # Usage__flushSeconds, the app's default

WEIGHTS = {"support": 1, "marketing": 1, "gold": 3, "bronze": 1}
BUDGETED = "trial"  # the noisy runs' third tenant, with a small daily budget


@dataclass
class Run:
    name: str
    fair_share_seconds: float | None = None  # None: the app's default
    submitted: dict[str, tuple[float, str]] = field(default_factory=dict)  # id -> time, tenant
    outcomes: dict[str, tuple[float, str]] = field(default_factory=dict)  # id -> time, outcome
    refused: Counter[str] = field(default_factory=Counter)  # tenant -> answers not 202
    began: float = 0.0
    served: int = 0
    throttled: int = 0
    tokens: int = 0
    dead_letters: int = 0
    usage: dict[str, Any] | None = None  # the budgeted tenant's GET /api/v1/usage at the end
    values: dict[str, str] = field(default_factory=dict)  # the stack's app settings
    lock: threading.Lock = field(default_factory=threading.Lock)

    def tenants(self) -> list[str]:
        return sorted({tenant for _, tenant in self.submitted.values()})

    def waits(self, tenant: str) -> list[float]:
        return [
            self.outcomes[i][0] - at
            for i, (at, owner) in self.submitted.items()
            if owner == tenant and i in self.outcomes
        ]

    def completed(self, tenant: str) -> int:
        return sum(
            1
            for i, (_, owner) in self.submitted.items()
            if owner == tenant and self.outcomes.get(i, (0.0, ""))[1] == "completed"
        )

    def not_completed(self) -> int:
        done = Counter(outcome for _, outcome in self.outcomes.values())
        return len(self.submitted) - done.get("completed", 0)

    def drain_seconds(self) -> float:
        last = max((at for at, _ in self.outcomes.values()), default=self.began)
        return max(last - self.began, 1e-9)

    def shares_while_all_wait(self, part: float = 1.0) -> dict[str, float]:
        """Each tenant's part of the requests completed from the last tenant's first
        request until the first tenant had ``part`` of its outcomes (1: its last; all of
        them waited until then). A lower
        part leaves out a tenant's last stragglers (a message sent back that returns
        after the rest of its backlog), which stretch the window into a time when the
        tenant no longer has a backlog."""
        tenants = [tenant for tenant in self.tenants() if tenant != BUDGETED]
        ends = []
        for tenant in tenants:
            times = sorted(self.outcomes[i][0] for i, (_, o) in self.submitted.items()
                           if o == tenant and i in self.outcomes)  # fmt: skip
            ends.append(times[max(math.ceil(part * len(times)) - 1, 0)] if times else self.began)
        until = min(ends)
        since = max(
            min(at for at, owner in self.submitted.values() if owner == tenant)
            for tenant in tenants
        )
        counted = Counter(
            owner
            for i, (_, owner) in self.submitted.items()
            if i in self.outcomes and since <= self.outcomes[i][0] <= until
        )
        total = sum(counted.values())
        return {tenant: ratio(counted[tenant], total) for tenant in tenants}


def send(port: int, key: str, run: Run, tenant: str, index: int, args: Any) -> None:
    connection = connect(port)
    body = {"model": ALIAS, "input": {"text": text(index, args.text_chars)}}
    sent = time.perf_counter()
    status, request_id, _ = post(connection, key, body, tenant)
    with run.lock:
        if status == 202 and request_id:
            run.submitted[request_id] = (sent, tenant)
        else:
            run.refused[tenant] += 1


def trickle(
    port: int, key: str, run: Run, tenant: str, seconds: float, args: Any, every: float = 0.0
) -> None:
    """One request of ``tenant`` every ``every`` (``--trickle-seconds``) for ``seconds``."""
    every = every or args.trickle_seconds
    start = time.perf_counter()
    index = 0
    while time.perf_counter() - start < seconds:
        send(port, key, run, tenant, 100_000 + index, args)
        index += 1
        time.sleep(max(0.0, start + index * every - time.perf_counter()))


def usage_of(port: int, key: str, tenant: str) -> dict[str, Any]:
    """``GET /api/v1/usage`` as ``tenant``."""
    connection = connect(port)
    connection.request("GET", f"/api/v1/usage?code={key}", headers={"X-Tenant-Id": tenant})
    response = connection.getresponse()
    payload = response.read()
    assert response.status == 200, payload
    answer: dict[str, Any] = json.loads(payload)
    return answer


def backlog(port: int, key: str, run: Run, tenants: list[str], count: int, args: Any) -> None:
    """``count`` requests at once from 16 callers, the ``tenants`` taking turns."""
    indexes = iter(range(count))
    lock = threading.Lock()

    def caller() -> None:
        while True:
            with lock:
                index = next(indexes, None)
            if index is None:
                return
            send(port, key, run, tenants[index % len(tenants)], index, args)

    run_threads(caller, 16)


def produce(run: Run, tenants: list[str], count: int, args: Any) -> None:
    """``count`` requests sent straight to the queue by the producer library, the
    ``tenants`` taking turns."""
    settings = Settings.model_validate(run.values)
    lines = [
        json.dumps({"request_id": f"{run.name}-{index}", "tenant_id": tenants[index % len(tenants)],
                    "model": ALIAS, "input": {"text": text(index, args.text_chars)}})
        for index in range(count)
    ]  # fmt: skip
    senders = ServiceBusBatchSenders(servicebus_client(settings))
    try:
        sent = time.perf_counter()
        report = Producer.from_settings(settings, senders).send(parse_lines(lines))
    finally:
        senders.close()
    assert report.sent == count, report.summary_text()
    with run.lock:
        for index in range(count):
            run.submitted[f"{run.name}-{index}"] = (sent, tenants[index % len(tenants)])


def run_once(work: Path, run: Run, args: Any) -> Run:
    capacity = {"tokens_per_minute": args.tpm, "requests_per_minute": args.rpm}
    tenants: dict[str, Any] = {name: {"weight": w} for name, w in WEIGHTS.items()}
    tenants[BUDGETED] = {"budget": {"tokens_per_day": args.trial_budget}}
    (work / "tenants.json").write_text(json.dumps({"tenants": tenants}))
    # The producers' run names its tenants straight on the queue.
    extra = {"TenantCatalog": str(work / "tenants.json"), "ProducerTenants": ",".join(WEIGHTS)}
    if run.fair_share_seconds is not None:
        extra["ModelCapacity__fairShareSeconds"] = str(run.fair_share_seconds)
    settings_path, values = stack_settings(work, capacity, extra)
    command = [sys.executable, "-m", "devtools.stack", "--settings", str(settings_path),
               "--in-memory", "--instances", str(args.instances)]  # fmt: skip
    stack = Child("stack", command, work / "stack.log", cwd=REPO)
    try:
        stack.wait_for(READY, 180)
        found = KEY.search(stack.output())
        assert found, "the stack printed no function key"
        key = found.group(1)
        openai = values["AzureOpenAI__endpoint"]
        control(openai, "PUT", f"/_emulator/deployments/{ALIAS}",
                {"tokens_per_minute": args.tpm, "requests_per_minute": args.rpm,
                 "latency_ms": args.latency_ms, "limiter": "window"})  # fmt: skip
        run.values = values
        watch = Watch.start(values, run.outcomes)
        port = int(json.loads(settings_path.read_text())["Host"]["LocalHttpPort"])
        run.began = time.perf_counter()
        drive(port, key, run, args)
        run.served, run.throttled, run.tokens, run.dead_letters = watch.drain(
            run.submitted, args.timeout
        )
        if run.name.startswith("noisy"):
            time.sleep(FLUSH_SECONDS + 2)  # the ledger's last flush
            run.usage = usage_of(port, key, BUDGETED)
    finally:
        stack.stop(signal.SIGINT, timeout=120)
    return run


def drive(port: int, key: str, run: Run, args: Any) -> None:
    """The run's arrivals (see the module doc)."""
    if run.name == "solo":
        trickle(port, key, run, "support", args.solo_seconds, args)
        return
    if run.name == "weights":
        backlog(port, key, run, ["gold", "bronze"], args.backlog, args)
        return
    if run.name == "weights-producer":
        produce(run, ["gold", "bronze"], args.backlog, args)
        return
    if run.name == "weights-late":
        backlog(port, key, run, ["bronze"], args.backlog // 2, args)
        time.sleep(args.late_seconds)
        backlog(port, key, run, ["gold"], args.backlog // 2, args)
        return
    tricklers = [
        threading.Thread(target=trickle, args=(port, key, run, "support", args.trickle_for, args)),
        threading.Thread(
            target=trickle,
            args=(port, key, run, BUDGETED, args.trickle_for, args, args.trial_seconds),
        ),
    ]
    for trickler in tricklers:
        trickler.start()
    time.sleep(args.trickle_seconds / 2)  # the backlog lands between two trickled requests
    backlog(port, key, run, ["marketing"], args.backlog, args)
    for trickler in tricklers:
        trickler.join()


def describe(run: Run, solo_p95: float | None, args: Any) -> str:
    calls = run.served + run.throttled
    goodput = ratio(run.tokens / (run.drain_seconds() / 60), args.tpm)
    parts = [
        f"{run.name}: goodput {goodput:.2f} of TPM, drain {run.drain_seconds():.0f}s, "
        f"429s {ratio(run.throttled, calls):.1%} of {calls} calls, not completed "
        f"{run.not_completed()}, dead letters {run.dead_letters}"
    ]
    for tenant in run.tenants():
        waits = run.waits(tenant)
        line = (
            f"{tenant} {len(waits)}/{sum(1 for _, t in run.submitted.values() if t == tenant)}"
            f" answered ({run.completed(tenant)} completed, {run.refused[tenant]} refused),"
            f" wait p50/p95 {quantile(waits, 0.5):.1f}/{quantile(waits, 0.95):.1f}s"
        )
        if tenant == "support" and solo_p95 and run.name != "solo":
            target = max(3 * solo_p95, 15.0)
            line += f" ({quantile(waits, 0.95) / solo_p95:.1f}x solo p95; target <= {target:.1f}s)"
        parts.append(line)
    if run.usage is not None:
        parts.append(budget_line(run, args))
    if len(run.tenants()) > 1:
        for part, label in ((1.0, "its last outcome"), (0.95, "95% of its outcomes")):
            shares = run.shares_while_all_wait(part)
            parts.append(
                f"served until the first tenant had {label}: "
                + ", ".join(f"{tenant} {share:.0%}" for tenant, share in shares.items())
            )
    return "; ".join(parts)


def budget_line(run: Run, args: Any) -> str:
    """The budgeted tenant: accepted, refused, and its answers' tokens over its budget."""
    assert run.usage is not None
    total = run.usage["total"]
    used = total["input_tokens"] + total["output_tokens"]
    accepted = sum(1 for _, tenant in run.submitted.values() if tenant == BUDGETED)
    overshoot = max(0, used - args.trial_budget) / args.trial_budget
    return (
        f"{BUDGETED} (budget {args.trial_budget:,} tokens a day): {accepted} accepted, "
        f"{run.refused[BUDGETED]} refused; its answers used {used:,} tokens "
        f"({total['requests']} answers, {run.usage['held']['requests']} still held), "
        f"overshoot {overshoot:.1%} (target 0%)"
    )


def main() -> int:
    parser = argument_parser(__doc__)
    parser.add_argument(
        "--runs", default="solo,noisy-on,noisy-off,weights,weights-late,weights-producer"
    )
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--tpm", type=int, default=30_000)
    parser.add_argument("--rpm", type=int, default=300)
    parser.add_argument("--latency-ms", type=int, default=1_000)
    parser.add_argument("--text-chars", type=int, default=800)
    parser.add_argument("--backlog", type=int, default=400)
    parser.add_argument("--trickle-seconds", type=float, default=3.0)
    parser.add_argument("--trickle-for", type=float, default=240.0)
    parser.add_argument("--solo-seconds", type=float, default=60.0)
    parser.add_argument("--late-seconds", type=float, default=30.0,
                        help="weights-late: gold's burst this long after bronze's")  # fmt: skip
    parser.add_argument("--trial-budget", type=int, default=6_000,
                        help="the budgeted tenant's tokens a day")  # fmt: skip
    parser.add_argument("--trial-seconds", type=float, default=2.0,
                        help="the budgeted tenant's interval between requests")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=1_200, help="a run's longest drain")
    parser.add_argument("--keep", type=Path, help="keep every run's folder (logs) here")
    args = parser.parse_args()
    print(f"tenant fairness, {now_stamp()}, {machine()}")
    print(
        f"{args.instances} instances, {args.tpm} TPM, {args.latency_ms} ms a call, weights "
        f"{WEIGHTS}; the local limit is the deployment's quota (goodput 1.0)"
    )
    chosen = {"noisy-off": 0.0}
    solo_p95: float | None = None
    for number, name in enumerate(args.runs.split(","), 1):
        keep = args.keep / f"run-{number}-{name}" if args.keep else None
        with work_folder("fairness-bench-", keep) as work:
            run = run_once(work, Run(name, chosen.get(name)), args)
        if name == "solo":
            solo_p95 = quantile(run.waits("support"), 0.95)
        print(f"  {describe(run, solo_p95, args)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
