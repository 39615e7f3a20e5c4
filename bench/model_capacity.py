"""Model capacity: how much of a deployment's quota the app turns into finished requests.

In Azure the limit of the product is the model deployment's quota (tokens and requests
per minute), not the machine. Each run starts the local stack as a user does
(``python -m devtools.stack --in-memory --instances N``) with one model alias
(``provider: azure_openai``, the document analysis) on the project's OpenAI emulator, whose
deployment is limited like an Azure one (TPM/RPM, 429 with ``retry-after-ms`` and
``x-ratelimit-*``, ``--latency-ms`` a call) over 10-second windows (``window``, as Azure
OpenAI) or over a sliding minute (``minute``, as other OpenAI-compatible services; the
catalog's ``capacity.limiter`` says the same), sends a burst from ``--callers`` clients (a
tenth ``high`` priority, the rest ``normal``) and waits until every request has an
outcome: its result message (the results topic's ``audit`` subscription, which takes every
one) or a dead letter.

The cells (``--cells``, all by default, run in this order and repeated ``--repeats`` times,
interleaved: every cell once, then again):

* ``w24k-x1``, ``w24k-x3``, ``w24k-x6``, ``m24k-x1``, ``m24k-x3``, ``m24k-x6``: 300
  requests, 24,000 TPM and 240 RPM, 1, 3 or 6 instances, window (``w``) or sliding minute
  (``m``) limiter;
* ``w60k-x3-120``, ``w60k-x3-600``: 3 instances at 60,000 TPM and 600 RPM, bursts of 120
  and 600 (the short burst is where equal shares wasted a fifth of the quota);
* ``join-leave``: 300 requests at 24,000 TPM, window; the stack runs 2 hosts and the
  benchmark a third from the start; a fourth joins when a quarter of the outcomes are in,
  and the benchmark's third leaves (Ctrl-C: it drains) at 60%;
* ``overload``: 3 instances at 24,000 TPM, window: arrivals paced at
  ``--overload-factor`` (3) times the requests a minute the quota clears, for
  ``--overload-seconds`` (300), each with ``deadline_seconds`` ``--overload-deadline``
  (120: the default deadline, 3,600 s, is never threatened by five minutes of overload, so
  nothing would be refused). The app refuses what cannot meet its deadline with 503 and
  ``Retry-After``. The arrivals go on at the same pace for ``--overload-tail`` seconds
  more (120: no accepted request waits longer), so that every judged refusal's would-be
  wait passes under the overload it was refused in; the tail's refusals are counted
  apart (their waits end after the arrivals stop, which no estimate made at the door
  can know).

Per run, and as ``median [min..max, n]`` over the repeats:

* goodput: the tokens of the calls the deployment answered (its own count: every answered
  call completed a request) per minute of the drain (first submission to last outcome),
  divided by the deployment's TPM. Target: 0.9 or more in every cell;
* 429s / model calls (the emulator's served and throttled counts). Target: 5% at most;
* requests not completed (failed, expired), expired, and dead letters. Target: 0;
* high-priority and normal wait, submission to outcome, p95. Target: high p95 at most
  0.2 of normal p95;
* overload only: accepted and refused, requests expired after acceptance (target 0), and
  for each refusal its ``Retry-After`` against the wait it would have had. That wait is
  bracketed: from the refusal until the last request of its priority accepted before it
  had its outcome (the lower bound) and until the first accepted after it had its outcome
  (the upper bound). Printed: the ratio over each bound (median, p10, p90), the share
  within 30% of the lower bound, and the share within 30% of the bracket (at least 0.7 of
  the lower bound, at most 1.3 of the upper; target: all), for the refusals of the
  judged ``--overload-seconds`` and apart for the tail's.

The deployment's quota is the local limit here: 1.0 goodput is all the deployment can
answer, whatever the machine. A gate starts with an empty window (the instances cannot
know what the others spent), so a run's first 10 seconds go at the quota's pace. A 300
request cell drains in about five minutes at 24,000 TPM; the default invocation (10
cells) takes about 45 minutes, ``--repeats 2`` twice that.
``--only off`` runs the chosen cells with the gate off (``ModelCapacity__enabled=false``:
every call goes out at once and a 429 is a failed attempt), for comparison.
"""

from __future__ import annotations

import http.client
import json
import random
import re
import signal
import sys
import threading
import time
import urllib.request
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
    sample_values,
    spread,
    work_folder,
)
from azure.servicebus import ServiceBusClient, ServiceBusReceiveMode

from functions_host.process import HostProcess
from local_processes import ACCOUNT_KEY, ACCOUNT_NAME, Child, free_port

ALIAS = "gpt-4o-mini"
TENANT = "bench"
READY = re.compile(r"Inferbus is running")
KEY = re.compile(r"Default function key: (\S+)")
WORDS = (
    "invoice contract payment quarterly revenue delivery customer support ticket refund "
    "shipment warehouse schedule approval review budget forecast supplier order account"
).split()


@dataclass(frozen=True)
class Cell:
    name: str
    instances: int
    tpm: int
    rpm: int
    requests: int
    limiter: str = "window"
    kind: str = "burst"  # burst, join-leave or overload


CELLS = {
    cell.name: cell
    for cell in (
        *(
            Cell(f"{limiter[0]}24k-x{n}", n, 24_000, 240, 300, limiter)
            for limiter in ("window", "minute")
            for n in (1, 3, 6)
        ),
        Cell("w60k-x3-120", 3, 60_000, 600, 120),
        Cell("w60k-x3-600", 3, 60_000, 600, 600),
        Cell("join-leave", 2, 24_000, 240, 300, kind="join-leave"),
        Cell("overload", 3, 24_000, 240, 0, kind="overload"),
    )
}


@dataclass
class Run:
    cell: Cell
    capacity: bool
    submitted: dict[str, tuple[float, str]] = field(default_factory=dict)  # id -> time, priority
    outcomes: dict[str, tuple[float, str]] = field(default_factory=dict)  # id -> time, outcome
    refusals: list[tuple[float, str, float]] = field(default_factory=list)  # time, prio, after
    began: float = 0.0
    served: int = 0
    throttled: int = 0
    tokens: int = 0
    dead_letters: int = 0
    other_refusals: int = 0
    events: list[str] = field(default_factory=list)
    judged_until: float = float("inf")  # refusals sent later are the overload's tail

    @property
    def label(self) -> str:
        return f"{self.cell.name}{'' if self.capacity else ' (gate off)'}"

    @property
    def drain_seconds(self) -> float:
        last = max((at for at, _ in self.outcomes.values()), default=self.began)
        return last - self.began

    def goodput(self) -> float:
        return ratio(self.tokens / max(self.drain_seconds / 60, 1e-9), self.cell.tpm)

    def waits(self, priority: str) -> list[float]:
        return [
            self.outcomes[i][0] - at
            for i, (at, chosen) in self.submitted.items()
            if chosen == priority and i in self.outcomes
        ]

    def counted(self) -> Counter[str]:
        return Counter(outcome for _, outcome in self.outcomes.values())

    def not_completed(self) -> int:
        return len(self.submitted) - self.counted().get("completed", 0)

    def throttled_share(self) -> float:
        return ratio(self.throttled, self.served + self.throttled)

    def high_over_normal(self) -> float:
        return ratio(quantile(self.waits("high"), 0.95), quantile(self.waits("normal"), 0.95))

    def would_have_waited(self, judged: bool = True) -> list[tuple[float, float, float]]:
        """Each refusal's Retry-After and the bounds of the wait it would have had: the
        judged window's refusals, or (``judged`` false) the tail's."""
        return [
            (after, lower, upper)
            for at, _, after, lower, upper in self.brackets()
            if (at < self.judged_until) == judged
        ]

    def brackets(self) -> list[tuple[float, str, float, float, float]]:
        """Each refusal's time, priority, Retry-After and the bounds of its would-be wait.

        The refused request was never run, so its wait is bracketed by the two accepted
        requests of its priority around it: the last accepted before the refusal had its
        outcome no later than the refused one would have (the lower bound, which shortens
        through a run of refusals), the first accepted after it no earlier (the upper bound).
        A refusal with no accepted request after it has the lower bound for both.
        """
        accepted = sorted((at, i, p) for i, (at, p) in self.submitted.items())
        found = []
        for refused_at, priority, retry_after in self.refusals:
            before = [i for at, i, p in accepted if at <= refused_at and p == priority]
            after = [i for at, i, p in accepted if at > refused_at and p == priority]
            if not before or before[-1] not in self.outcomes:
                continue
            lower = self.outcomes[before[-1]][0] - refused_at
            upper = (
                self.outcomes[after[0]][0] - refused_at
                if after and after[0] in self.outcomes
                else lower
            )
            if lower > 0:
                found.append((refused_at, priority, retry_after, lower, max(lower, upper)))
        return found

    def misses(self) -> list[str]:
        """Where the judged refusals whose Retry-After falls outside their bracket fell
        (seconds into the run, priority, Retry-After and the bracket): a pattern to read."""
        return [
            f"{at - self.began:.0f}s {priority} {after:.0f}s/[{lower:.0f},{upper:.0f}]"
            for at, priority, after, lower, upper in self.brackets()
            if at < self.judged_until and not 0.7 * lower <= after <= 1.3 * upper
        ]


def settings(work: Path, run: Run) -> tuple[Path, dict[str, str]]:
    """The sample's settings on free ports, one alias on the emulator's limited deployment."""
    cell = run.cell
    capacity = {"tokens_per_minute": cell.tpm, "requests_per_minute": cell.rpm,
                "limiter": cell.limiter}  # fmt: skip
    return stack_settings(work, capacity, {"ModelCapacity__enabled": str(run.capacity).lower()})


def stack_settings(
    work: Path, capacity: dict[str, Any], extra: dict[str, str]
) -> tuple[Path, dict[str, str]]:
    """The sample's settings on free ports, ``ALIAS`` on the emulator's deployment of that
    ``capacity``, and ``extra`` app settings."""
    document = json.loads((REPO / "local.settings.sample.json").read_text())
    ports = {name: free_port() for name in ("blob", "queue", "table", "bus", "http", "counts",
                                            "eventgrid", "openai")}  # fmt: skip
    storage = (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT_NAME};AccountKey={ACCOUNT_KEY};"
        f"BlobEndpoint=http://127.0.0.1:{ports['blob']}/{ACCOUNT_NAME};"
    )
    catalog = {"models": {ALIAS: {"provider": "azure_openai", "task": "document-analysis",
                                  "deployment": ALIAS, "capacity": capacity}}}  # fmt: skip
    (work / "models.json").write_text(json.dumps(catalog))
    openai = f"http://127.0.0.1:{ports['openai']}"
    document["Values"].update(
        {
            "AzureWebJobsStorage": storage
            + f"QueueEndpoint=http://127.0.0.1:{ports['queue']}/{ACCOUNT_NAME};"
            + f"TableEndpoint=http://127.0.0.1:{ports['table']}/{ACCOUNT_NAME};",
            "Storage": storage,
            "ServiceBusConnection": f"Endpoint=sb://127.0.0.1:{ports['bus']};"
            "SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;"
            "UseDevelopmentEmulator=true",
            "ServiceBusRuntimeCountsUrl": f"http://127.0.0.1:{ports['counts']}/runtime",
            "EventGridPull__namespaceEndpoint": f"http://127.0.0.1:{ports['eventgrid']}",
            "ModelCatalog": str(work / "models.json"),
            "AzureOpenAI__endpoint": openai,
            "AzureOpenAI__apiKey": sample_values()["GlobalBatch__apiKey"],
            "GlobalBatch__endpoint": openai,
            "GlobalBatch__deployments": "",
            "LocalModelFaults": "false",
            **extra,
        }
    )
    document["Host"]["LocalHttpPort"] = ports["http"]
    path = work / "local.settings.json"
    path.write_text(json.dumps(document))
    return path, document["Values"]


def control(endpoint: str, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    request = urllib.request.Request(  # noqa: S310 (the local emulator)
        endpoint + path,
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 (loopback)
        return json.loads(response.read())


def text(index: int, size: int) -> str:
    chooser = random.Random(index)
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < size:
        words.append(chooser.choice(WORDS))
    return f"Document {index}. " + " ".join(words).capitalize() + "."


def post(
    connection: http.client.HTTPConnection, key: str, body: dict[str, Any], tenant: str = TENANT
) -> tuple[int, str | None, float | None]:
    """``POST /api/v1/requests``: status, the request id of a 202, the Retry-After of a 503."""
    connection.request(
        "POST",
        f"/api/v1/requests?code={key}",
        body=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "X-Tenant-Id": tenant},
    )
    response = connection.getresponse()
    payload = response.read()
    if response.status == 202:
        return 202, str(json.loads(payload)["id"]), None
    retry_after = response.getheader("Retry-After")
    return response.status, None, float(retry_after) if retry_after else None


def request_body(index: int, args: Any, deadline: int | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": ALIAS,
        "input": {"text": text(index, args.text_chars)},
        "priority": "high" if index % 10 == 0 else "normal",
    }
    if deadline is not None:
        body["deadline_seconds"] = deadline
    return body


def record(run: Run, lock: threading.Lock, body: dict[str, Any], sent: float,
           answer: tuple[int, str | None, float | None]) -> None:  # fmt: skip
    status, request_id, retry_after = answer
    with lock:
        if status == 202 and request_id:
            run.submitted[request_id] = (sent, body["priority"])
        elif status == 503 and retry_after is not None:
            run.refusals.append((sent, body["priority"], retry_after))
        else:
            run.other_refusals += 1


def burst(port: int, key: str, run: Run, args: Any) -> None:
    """The cell's requests from ``--callers`` clients at once; each tenth is high priority."""
    lock = threading.Lock()
    indexes = iter(range(run.cell.requests))

    def caller() -> None:
        connection = connect(port)
        while True:
            with lock:
                index = next(indexes, None)
            if index is None:
                return
            body = request_body(index, args)
            sent = time.perf_counter()
            record(run, lock, body, sent, post(connection, key, body))

    run_threads(caller, args.callers)


def paced(port: int, key: str, run: Run, args: Any) -> None:
    """Overload: arrivals at ``--overload-factor`` times what the quota clears, for
    ``--overload-seconds``, each with ``--overload-deadline``."""
    per_request = args.text_chars / 4 + args.answer_tokens + 150  # prompt, answer, task
    per_second = args.overload_factor * run.cell.tpm / per_request / 60
    run.events.append(
        f"arrivals {per_second:.2f}/s for {args.overload_seconds:.0f}s ({args.overload_factor}x "
        f"the quota's {per_second / args.overload_factor:.2f}/s at about {per_request:.0f} "
        f"tokens a request), deadline_seconds {args.overload_deadline}"
    )
    lock = threading.Lock()
    run.events.append(f"then {args.overload_tail:.0f}s more of the same arrivals, not judged")
    total = int(per_second * (args.overload_seconds + args.overload_tail))
    start = time.perf_counter()
    run.judged_until = start + args.overload_seconds
    indexes = iter(range(total))

    def caller() -> None:
        connection = connect(port)
        while True:
            with lock:
                index = next(indexes, None)
            if index is None:
                return
            delay = start + index / per_second - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            body = request_body(index, args, args.overload_deadline)
            sent = time.perf_counter()
            record(run, lock, body, sent, post(connection, key, body))

    run_threads(caller, args.callers)


def watch_outcomes(
    connection_string: str, outcomes: dict[str, tuple[float, str]], stop: threading.Event
) -> None:
    """Every result message (the ``audit`` subscription takes them all), until ``stop``:
    ``outcomes`` gets each request's time and outcome."""
    with (
        ServiceBusClient.from_connection_string(connection_string) as client,
        client.get_subscription_receiver(
            "inference-results",
            "audit",
            receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE,
            prefetch_count=200,
            max_wait_time=1,
        ) as receiver,
    ):
        while not stop.is_set():
            for message in receiver.receive_messages(max_message_count=200, max_wait_time=1):
                body = json.loads(b"".join(message.body))
                request_id = str(body.get("request_id"))
                if request_id not in outcomes:
                    outcomes[request_id] = (time.perf_counter(), str(body.get("outcome")))


@dataclass
class Watch:
    """The results of a run as they come (``watch_outcomes`` in a thread of its own),
    until every submitted request has its outcome."""

    values: dict[str, str]
    outcomes: dict[str, tuple[float, str]]
    stop: threading.Event
    thread: threading.Thread

    @classmethod
    def start(cls, values: dict[str, str], outcomes: dict[str, tuple[float, str]]) -> Watch:
        stop = threading.Event()
        thread = threading.Thread(
            target=watch_outcomes,
            args=(values["ServiceBusConnection"], outcomes, stop),
            daemon=True,
        )
        thread.start()
        time.sleep(2)  # the watcher's link is open before the first result
        return cls(values, outcomes, stop, thread)

    def drain(self, submitted: dict[str, Any], timeout: float) -> tuple[int, int, int, int]:
        """Wait for every outcome (at most ``timeout``), then the deployment's served and
        throttled calls and tokens (the emulator's count) and the queues' dead letters."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(self.outcomes) < len(submitted):
            time.sleep(1)
        self.stop.set()
        self.thread.join(10)
        stats = control(self.values["AzureOpenAI__endpoint"], "GET", "/stats")
        counts = stats["deployments"][ALIAS]
        tokens = counts["prompt_tokens"] + counts["completion_tokens"]
        lost = dead_letters(self.values["ServiceBusRuntimeCountsUrl"])
        return counts["served"], counts["throttled"], tokens, lost


def dead_letters(counts_url: str) -> int:
    with urllib.request.urlopen(counts_url, timeout=10) as response:  # noqa: S310 (loopback)
        counts = json.loads(response.read())
    queues = ("inference-requests", "inference-priority", "inference-ordered")
    return sum(int(counts.get(q, {}).get("dead_letter_message_count", 0)) for q in queues)


class Membership:
    """The join-leave cell's own hosts: one from the start, one joining at a quarter of the
    outcomes; the first leaves at 60%."""

    def __init__(self, work: Path, settings_path: Path, run: Run) -> None:
        self._work = work
        self._settings = settings_path
        self._run = run
        self.hosts: list[HostProcess] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, daemon=True)

    def add(self) -> None:
        number = len(self.hosts) + 3
        host = HostProcess(REPO, self._settings, self._work / f"host-{number}.log",
                           port=free_port())  # fmt: skip
        host.wait_started(timeout=120)
        self.hosts.append(host)

    def start(self) -> None:
        self.add()
        self._thread.start()

    def _follow(self) -> None:
        run, began = self._run, time.perf_counter()
        joined = left = False
        while not self._stop.wait(0.5):
            target = max(run.cell.requests, 1)
            done = len(run.outcomes) / target
            if not joined and done >= 0.25:
                self.add()
                joined = True
                run.events.append(f"a host joined at {time.perf_counter() - began:.0f}s")
            if joined and not left and done >= 0.6:
                self.hosts[0].stop(timeout=120)
                left = True
                run.events.append(f"a host left at {time.perf_counter() - began:.0f}s")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(130)
        for host in self.hosts:
            host.stop(timeout=120)


def run_once(work: Path, run: Run, args: Any) -> Run:
    settings_path, values = settings(work, run)
    cell = run.cell
    command = [sys.executable, "-m", "devtools.stack", "--settings", str(settings_path),
               "--in-memory", "--instances", str(cell.instances)]  # fmt: skip
    stack = Child("stack", command, work / "stack.log", cwd=REPO)
    membership: Membership | None = None
    try:
        stack.wait_for(READY, 180)
        found = KEY.search(stack.output())
        assert found, "the stack printed no function key"
        openai = values["AzureOpenAI__endpoint"]
        control(openai, "PUT", f"/_emulator/deployments/{ALIAS}",
                {"tokens_per_minute": cell.tpm, "requests_per_minute": cell.rpm,
                 "latency_ms": args.latency_ms, "limiter": cell.limiter})  # fmt: skip
        if cell.kind == "join-leave":
            membership = Membership(work, settings_path, run)
            membership.start()
        watch = Watch.start(values, run.outcomes)
        run.began = time.perf_counter()
        port = int(json.loads(settings_path.read_text())["Host"]["LocalHttpPort"])
        (paced if cell.kind == "overload" else burst)(port, found.group(1), run, args)
        drained = watch.drain(run.submitted, args.timeout)
        run.served, run.throttled, run.tokens, run.dead_letters = drained
    finally:
        if membership is not None:
            membership.stop()
        stack.stop(signal.SIGINT, timeout=120)
    return run


def within_bracket(bounds: list[tuple[float, float, float]]) -> int:
    """How many Retry-Afters are at least 0.7 of their lower bound, at most 1.3 of the upper."""
    return sum(1 for after, lower, upper in bounds if 0.7 * lower <= after <= 1.3 * upper)


def describe(run: Run) -> str:
    high, normal = run.waits("high"), run.waits("normal")
    calls = run.served + run.throttled
    counted = run.counted()
    line = (
        f"{run.label}: goodput {run.goodput():.2f} of TPM, drain {run.drain_seconds:.0f}s, "
        f"429s {run.throttled_share():.1%} of {calls} calls, not completed "
        f"{run.not_completed()} (expired {counted.get('expired', 0)}), dead letters "
        f"{run.dead_letters}, wait high p50/p95 {quantile(high, 0.5):.1f}/"
        f"{quantile(high, 0.95):.1f}s, normal p50/p95 {quantile(normal, 0.5):.1f}/"
        f"{quantile(normal, 0.95):.1f}s"
    )
    if run.cell.kind == "overload":
        bounds = run.would_have_waited()
        over_lower = [after / lower for after, lower, _ in bounds]
        over_upper = [after / upper for after, _, upper in bounds]
        within = sum(1 for after, lower, _ in bounds if 0.7 <= after / lower <= 1.3)
        bracketed = within_bracket(bounds)
        tail = run.would_have_waited(judged=False)
        line += (
            f"; {ratio(run.tokens, run.served):.0f} tokens a call; accepted "
            f"{len(run.submitted)}, refused 503 {len(run.refusals)}"
            f" (other answers {run.other_refusals}); Retry-After / would-have-waited, over "
            f"its lower bound median {quantile(over_lower, 0.5):.2f} (p10 "
            f"{quantile(over_lower, 0.1):.2f}, p90 {quantile(over_lower, 0.9):.2f}), within 30% "
            f"{within}/{len(bounds)}; over its upper bound median {quantile(over_upper, 0.5):.2f}"
            f" (p10 {quantile(over_upper, 0.1):.2f}, p90 {quantile(over_upper, 0.9):.2f}); "
            f"within 30% of the bracket {bracketed}/{len(bounds)}, outside it at: "
            + (", ".join(run.misses()) or "none")
            + f"; the tail's refusals within 30% of the bracket {within_bracket(tail)}/{len(tail)}"
        )
    return line + "".join(f"; {event}" for event in run.events)


def main() -> int:
    parser = argument_parser(__doc__)
    parser.add_argument("--cells", default=",".join(CELLS),
                        help=f"comma-separated, of: {', '.join(CELLS)}")  # fmt: skip
    parser.add_argument("--callers", type=int, default=16)
    parser.add_argument("--latency-ms", type=int, default=1_000, help="each model call's time")
    parser.add_argument("--text-chars", type=int, default=800, help="each document's length")
    parser.add_argument("--answer-tokens", type=int, default=60,
                        help="the emulator's answer size, for the overload's pace")  # fmt: skip
    parser.add_argument("--overload-factor", type=float, default=3.0)
    parser.add_argument("--overload-seconds", type=float, default=300.0)
    parser.add_argument("--overload-deadline", type=int, default=120)
    parser.add_argument("--overload-tail", type=float, default=120.0,
                        help="seconds of arrivals after the judged overload")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=1_200, help="a run's longest drain")
    parser.add_argument("--only", choices=("on", "off"), default="on",
                        help="the gate on (the app) or off (every call at once)")  # fmt: skip
    parser.add_argument("--keep", type=Path, help="keep every run's folder (logs) here")
    args = parser.parse_args()
    chosen = [CELLS[name] for name in args.cells.split(",") if name]
    print(f"model capacity, {now_stamp()}, {machine()}")
    print(
        f"cells {', '.join(c.name for c in chosen)}; {args.callers} callers, "
        f"{args.latency_ms} ms a call; the local limit is the deployment's quota (goodput 1.0)"
    )
    plan = [cell for _ in range(args.repeats) for cell in chosen]
    results: dict[str, list[Run]] = {}
    for number, cell in enumerate(plan, 1):
        keep = args.keep / f"run-{number}-{cell.name}" if args.keep else None
        with work_folder("capacity-bench-", keep) as work:
            run = run_once(work, Run(cell, args.only == "on"), args)
        results.setdefault(cell.name, []).append(run)
        print(f"  run {number}/{len(plan)} {describe(run)}", flush=True)
    print("\nmedian [min..max, n] of the repeats (targets: goodput >= 0.9, 429s <= 5%, "
          "high p95 / normal p95 <= 0.2, 0 not completed and 0 dead letters):")  # fmt: skip
    for name, runs in results.items():
        print(
            f"  {name}: goodput {spread([r.goodput() for r in runs], 2)}; 429s "
            f"{spread([100 * r.throttled_share() for r in runs], 1, '%')}; not completed "
            f"{spread([r.not_completed() for r in runs], 0)}; dead letters "
            f"{spread([r.dead_letters for r in runs], 0)}; high p95 / normal p95 "
            f"{spread([r.high_over_normal() for r in runs], 2)}; high p95 "
            f"{spread([quantile(r.waits('high'), 0.95) for r in runs], 1, 's')}, normal p95 "
            f"{spread([quantile(r.waits('normal'), 0.95) for r in runs], 1, 's')}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
