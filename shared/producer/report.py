"""What a producer run did: counts per queue, claim checks, refusals, and why it stopped."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from shared.producer.lines import LineRefusal

DUPLICATE_NOTE = (
    "sent counts messages the broker accepted; the broker drops ids it has seen in the "
    "last 10 minutes without telling the sender, so a re-sent request is not queued twice"
)

EXIT_SENT = 0
EXIT_REFUSED = 1
EXIT_CONFIGURATION = 2
EXIT_UNAVAILABLE = 3


def _batches(count: int) -> str:
    return f"{count:,} batch" if count == 1 else f"{count:,} batches"


@dataclass
class QueueTally:
    sent: int = 0
    batches: int = 0


@dataclass(frozen=True)
class RepeatedLine:
    """A line with the same request id and content as an earlier line: not sent again."""

    line: int
    request_id: str
    first_line: int


@dataclass
class SendReport:
    """Counts of one ``Producer.send``; ``exit_code`` is the CLI's."""

    queues: dict[str, QueueTally] = field(default_factory=dict)
    claim_checked: int = 0
    refusals: list[LineRefusal] = field(default_factory=list)
    repeats: list[RepeatedLine] = field(default_factory=list)
    request_ids: list[str] = field(default_factory=list)  # sent ids, when asked to keep them
    lines: int = 0  # requests read (valid or not; blank lines are not counted)
    unsent: int = 0  # taken into a batch that was not sent because the run stopped
    stopped: str | None = None  # why the run stopped before the end of its input
    stop_code: int = EXIT_SENT
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None

    @property
    def sent(self) -> int:
        return sum(tally.sent for tally in self.queues.values())

    @property
    def batches(self) -> int:
        return sum(tally.batches for tally in self.queues.values())

    @property
    def seconds(self) -> float:
        return (self.finished or time.monotonic()) - self.started

    @property
    def rate(self) -> float:
        """Messages sent per second so far."""
        return self.sent / self.seconds if self.seconds > 0 else 0.0

    @property
    def exit_code(self) -> int:
        """0 all sent, 1 some lines refused, 2 configuration error, 3 a dependency was
        unavailable (a stop outranks refusals: the run did not finish)."""
        if self.stopped:
            return self.stop_code
        return EXIT_REFUSED if self.refusals else EXIT_SENT

    def count_batch(self, queue: str, messages: int) -> None:
        tally = self.queues.setdefault(queue, QueueTally())
        tally.sent += messages
        tally.batches += 1

    def as_dict(self) -> dict[str, Any]:
        """The summary as JSON-ready values (the CLI's ``--json``)."""
        document: dict[str, Any] = {
            "sent": self.sent,
            "batches": self.batches,
            "claim_checked": self.claim_checked,
            "refused": len(self.refusals),
            "repeated": len(self.repeats),
            "lines": self.lines,
            "unsent": self.unsent,
            "stopped": self.stopped,
            "exit_code": self.exit_code,
            "seconds": round(self.seconds, 3),
            "rate": round(self.rate, 1),
            "queues": {
                name: {"sent": tally.sent, "batches": tally.batches}
                for name, tally in sorted(self.queues.items())
            },
            "refusals": [
                {
                    "line": refusal.line,
                    "request_id": refusal.request_id,
                    "reason": refusal.reason,
                    "fields": [{"field": f.field, "message": f.message} for f in refusal.fields],
                }
                for refusal in self.refusals
            ],
            "repeats": [
                {"line": r.line, "request_id": r.request_id, "first_line": r.first_line}
                for r in self.repeats
            ],
            "note": DUPLICATE_NOTE,
        }
        if self.request_ids:
            document["request_ids"] = list(self.request_ids)
        return document

    def progress_text(self) -> str:
        """One line for a progress display."""
        return (
            f"{self.sent:,} sent in {_batches(self.batches)}, {self.claim_checked:,} "
            f"claim-checked, {len(self.refusals):,} refused, {self.rate:,.0f} msg/s"
        )

    def summary_text(self) -> str:
        """The human summary printed at the end of a run."""
        lines = [
            f"sent {self.sent:,} (the broker drops ids it has seen in the last 10 minutes) "
            f"in {_batches(self.batches)}, {self.seconds:.2f} s, {self.rate:,.0f} msg/s"
        ]
        lines += [
            f"  {name}: {tally.sent:,} in {_batches(tally.batches)}"
            for name, tally in sorted(self.queues.items())
        ]
        if len(self.request_ids) == 1:
            lines.append(f"request id: {self.request_ids[0]}")
        if self.claim_checked:
            lines.append(
                f"claim-checked {self.claim_checked:,} (inline text too large for a message, "
                "stored in the inputs container)"
            )
        if self.repeats:
            lines.append(
                f"repeated {len(self.repeats):,} (same id and content as an earlier line):"
            )
            lines += [
                f"  line {r.line} ({r.request_id}) repeats line {r.first_line}"
                for r in self.repeats
            ]
        if self.refusals:
            lines.append(f"refused {len(self.refusals):,}:")
            lines += [f"  {refusal.describe()}" for refusal in self.refusals]
        if self.stopped:
            lines.append(
                f"stopped after {self.lines:,} requests read: {self.stopped}; {self.unsent:,} "
                "messages taken into batches were not sent. Run the same input again: request "
                "ids repeat, so what was sent is not queued twice."
            )
        return "\n".join(lines)
