"""Model capacity: how much of a deployment's quota the app turns into finished requests.

In Azure the limit of the product is the model deployment's quota (tokens and requests
per minute), not the machine. Each run starts the local stack as a user does
(``python -m devtools.stack --in-memory --instances N``) with one model alias
(``provider: azure_openai``, the document analysis) on the project's OpenAI emulator, whose
deployment is limited like an Azure one (``--tpm``/``--rpm``, 429 with ``retry-after-ms``
and ``x-ratelimit-*``, ``--latency-ms`` a call), sends a burst of ``--requests`` from
``--callers`` clients (a tenth ``high`` priority, the rest ``normal``) and waits until every
request has an outcome: its result message (the results topic's ``audit`` subscription,
which takes every one) or a dead letter. Runs alternate, in one invocation: the capacity
gate on (the app's behaviour) and off (``ModelCapacity__enabled=false``: every call goes out
at once and a 429 is a failed attempt, as before), with 1 and with ``--instances``
instances, repeated ``--repeats`` times in that interleaved order.

Per run, and as ``median [min..max, n]`` over the repeats:

* goodput: the tokens of the calls the deployment answered (its own count: every answered
  call completed a request) per minute of the drain (first submission to last outcome),
  divided by the deployment's TPM. Target: 0.9 or more, with 1 and with 3 instances;
* 429s / model calls (the emulator's served and throttled counts). Target: 5% at most;
* requests not completed, and dead letters (the request queues' counts). Target: 0;
* high-priority and normal wait, submission to outcome, p50 and p95. Target: high p95
  at most 0.2 of normal p95.

The deployment's quota is the local limit here: 1.0 goodput is all the deployment can
answer, whatever the machine. With the default TPM, a burst takes about four minutes
to drain; a whole invocation (8 runs) about 40 minutes.
"""

from __future__ import annotations

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
    submit,
    work_folder,
)
from azure.servicebus import ServiceBusClient, ServiceBusReceiveMode

from local_processes import ACCOUNT_KEY, ACCOUNT_NAME, Child, free_port

ALIAS = "gpt-4o-mini"
READY = re.compile(r"Inferbus is running")
KEY = re.compile(r"Default function key: (\S+)")
WORDS = (
    "invoice contract payment quarterly revenue delivery customer support ticket refund "
    "shipment warehouse schedule approval review budget forecast supplier order account"
).split()


@dataclass
class Run:
    capacity: bool
    instances: int
    submitted: dict[str, tuple[float, str]] = field(default_factory=dict)  # id -> time, priority
    outcomes: dict[str, tuple[float, str]] = field(default_factory=dict)  # id -> time, outcome
    began: float = 0.0
    served: int = 0
    throttled: int = 0
    tokens: int = 0
    dead_letters: int = 0
    refused_at_door: int = 0

    @property
    def label(self) -> str:
        return f"{'gate on ' if self.capacity else 'gate off'} x{self.instances}"

    @property
    def drain_seconds(self) -> float:
        last = max((at for at, _ in self.outcomes.values()), default=self.began)
        return last - self.began

    def goodput(self, tpm: int) -> float:
        return ratio(self.tokens / max(self.drain_seconds / 60, 1e-9), tpm)

    def waits(self, priority: str) -> list[float]:
        return [
            self.outcomes[i][0] - at
            for i, (at, chosen) in self.submitted.items()
            if chosen == priority and i in self.outcomes
        ]

    def not_completed(self) -> int:
        counted = Counter(outcome for _, outcome in self.outcomes.values())
        return len(self.submitted) - counted.get("completed", 0)


def settings(work: Path, run: Run, args: Any) -> tuple[Path, dict[str, str]]:
    """The sample's settings on free ports, one alias on the emulator's limited deployment."""
    document = json.loads((REPO / "local.settings.sample.json").read_text())
    ports = {name: free_port() for name in ("blob", "queue", "table", "bus", "http", "counts",
                                            "eventgrid", "openai")}  # fmt: skip
    storage = (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT_NAME};AccountKey={ACCOUNT_KEY};"
        f"BlobEndpoint=http://127.0.0.1:{ports['blob']}/{ACCOUNT_NAME};"
    )
    catalog = {
        "models": {
            ALIAS: {
                "provider": "azure_openai",
                "task": "document-analysis",
                "deployment": ALIAS,
                "capacity": {"tokens_per_minute": args.tpm, "requests_per_minute": args.rpm},
            }
        }
    }
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
            "ModelCapacity__enabled": "true" if run.capacity else "false",
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


def burst(port: int, key: str, run: Run, args: Any) -> None:
    """``--requests`` submissions by ``--callers`` clients; each tenth is high priority."""
    lock = threading.Lock()
    indexes = iter(range(args.requests))

    def caller() -> None:
        connection = connect(port)
        while True:
            with lock:
                index = next(indexes, None)
            if index is None:
                return
            priority = "high" if index % 10 == 0 else "normal"
            request = {"model": ALIAS, "input": {"text": text(index, args.text_chars)}}
            sent = time.perf_counter()
            status, request_id = submit(
                connection, key, json.dumps({**request, "priority": priority}).encode()
            )
            with lock:
                if status == 202 and request_id:
                    run.submitted[request_id] = (sent, priority)
                else:
                    run.refused_at_door += 1

    run_threads(caller, args.callers)


def watch_outcomes(connection_string: str, run: Run, stop: threading.Event) -> None:
    """Every result message (the ``audit`` subscription takes them all), until ``stop``."""
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
                if request_id not in run.outcomes:
                    run.outcomes[request_id] = (time.perf_counter(), str(body.get("outcome")))


def dead_letters(counts_url: str) -> int:
    with urllib.request.urlopen(counts_url, timeout=10) as response:  # noqa: S310 (loopback)
        counts = json.loads(response.read())
    queues = ("inference-requests", "inference-priority", "inference-ordered")
    return sum(int(counts.get(q, {}).get("dead_letter_message_count", 0)) for q in queues)


def run_once(work: Path, run: Run, args: Any) -> Run:
    settings_path, values = settings(work, run, args)
    command = [sys.executable, "-m", "devtools.stack", "--settings", str(settings_path),
               "--in-memory", "--instances", str(run.instances)]  # fmt: skip
    stack = Child("stack", command, work / "stack.log", cwd=REPO)
    try:
        stack.wait_for(READY, 180)
        found = KEY.search(stack.output())
        assert found, "the stack printed no function key"
        openai = values["AzureOpenAI__endpoint"]
        control(openai, "PUT", f"/_emulator/deployments/{ALIAS}",
                {"tokens_per_minute": args.tpm, "requests_per_minute": args.rpm,
                 "latency_ms": args.latency_ms})  # fmt: skip
        stop = threading.Event()
        watcher = threading.Thread(
            target=watch_outcomes, args=(values["ServiceBusConnection"], run, stop), daemon=True
        )
        watcher.start()
        time.sleep(2)  # the watcher's link is open before the first result
        run.began = time.perf_counter()
        burst(int(json.loads(settings_path.read_text())["Host"]["LocalHttpPort"]),
              found.group(1), run, args)  # fmt: skip
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline and len(run.outcomes) < len(run.submitted):
            time.sleep(1)
        stop.set()
        watcher.join(10)
        stats = control(openai, "GET", "/stats")["deployments"][ALIAS]
        run.served, run.throttled = stats["served"], stats["throttled"]
        run.tokens = stats["prompt_tokens"] + stats["completion_tokens"]
        run.dead_letters = dead_letters(values["ServiceBusRuntimeCountsUrl"])
    finally:
        stack.stop(signal.SIGINT, timeout=120)
    return run


def describe(run: Run, tpm: int) -> str:
    high, normal = run.waits("high"), run.waits("normal")
    calls = run.served + run.throttled
    return (
        f"{run.label}: goodput {run.goodput(tpm):.2f} of TPM, drain {run.drain_seconds:.0f}s, "
        f"429s {ratio(run.throttled, calls):.1%} of {calls} calls, "
        f"not completed {run.not_completed()}, dead letters {run.dead_letters}, "
        f"refused at the door {run.refused_at_door}, wait high p50/p95 "
        f"{quantile(high, 0.5):.1f}/{quantile(high, 0.95):.1f}s, normal p50/p95 "
        f"{quantile(normal, 0.5):.1f}/{quantile(normal, 0.95):.1f}s"
    )


def main() -> int:
    parser = argument_parser(__doc__)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--callers", type=int, default=16)
    parser.add_argument("--tpm", type=int, default=60_000, help="the deployment's tokens/min")
    parser.add_argument("--rpm", type=int, default=600, help="the deployment's requests/min")
    parser.add_argument("--latency-ms", type=int, default=1_000, help="each model call's time")
    parser.add_argument("--text-chars", type=int, default=800, help="each document's length")
    parser.add_argument("--instances", type=int, default=3, help="the scaled-out runs' hosts")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=1_200, help="a run's longest drain")
    parser.add_argument("--only", choices=("on", "off"), help="one side of the A/B only")
    parser.add_argument("--keep", type=Path, help="keep every run's folder (logs) here")
    args = parser.parse_args()
    print(f"model capacity, {now_stamp()}, {machine()}")
    print(
        f"{args.requests} requests from {args.callers} callers; deployment {args.tpm} TPM, "
        f"{args.rpm} RPM, {args.latency_ms} ms a call; the local limit is the deployment's "
        "quota (goodput 1.0)"
    )
    sides = [s for s in (True, False) if args.only is None or (args.only == "on") is s]
    plan = [(side, n) for _ in range(args.repeats) for n in (1, args.instances) for side in sides]
    results: dict[tuple[bool, int], list[Run]] = {}
    for number, (side, instances) in enumerate(plan, 1):
        keep = args.keep / f"run-{number}" if args.keep else None
        with work_folder("capacity-bench-", keep) as work:
            run = run_once(work, Run(side, instances), args)
        results.setdefault((side, instances), []).append(run)
        print(f"  run {number}/{len(plan)} {describe(run, args.tpm)}", flush=True)
    print("\nmedian [min..max, n] of the repeats:")
    for runs in results.values():
        high_p95 = [quantile(r.waits("high"), 0.95) for r in runs]
        normal_p95 = [quantile(r.waits("normal"), 0.95) for r in runs]
        print(
            f"  {runs[0].label}: goodput {spread([r.goodput(args.tpm) for r in runs], 2)}"
            f" (target >= 0.9); 429s/calls "
            f"{spread([100 * ratio(r.throttled, r.served + r.throttled) for r in runs], 1, '%')}"
            f" (target <= 5%); not completed {spread([r.not_completed() for r in runs], 0)}; "
            f"dead letters {spread([r.dead_letters for r in runs], 0)}; high p95 / normal p95 "
            f"{spread([ratio(h, n) for h, n in zip(high_p95, normal_p95, strict=True)], 2)}"
            f" (target <= 0.2); high p95 {spread(high_p95, 1, 's')}, "
            f"normal p95 {spread(normal_p95, 1, 's')}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
