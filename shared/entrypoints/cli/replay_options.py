"""What the two dead-letter replays of ``python -m shared.ops`` share: the operator's
confirmation (``--yes`` skips it) and ``--extend-deadline DURATION``.

``sb-deadletters replay`` and ``deadletters replay`` (Event Grid) ask the same question
the same way, and read and cap a new deadline the same way
(``processing.dead_letters.deadlines``): an operator who learnt one knows the other.
"""

from __future__ import annotations

import argparse
from datetime import timedelta

from shared.entrypoints.cli.servicebus_output import format_age
from shared.processing.dead_letters.deadlines import DeadlineExtension, parse_duration

DECLINED = "nothing done (answer y, or pass --yes)"


def confirmed(question: str) -> bool:
    """Whether the operator answers y to ``question`` (no answer, as from a closed or
    empty stdin, is a no; told on stdout)."""
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        answer = ""
    if answer.strip().lower() in ("y", "yes"):
        return True
    print(DECLINED)
    return False


def add_yes(action: argparse.ArgumentParser) -> None:
    action.add_argument(
        "--yes",
        action="store_true",
        help="do not ask for confirmation (default: ask, and do nothing unless answered y)",
    )


def duration(text: str) -> timedelta:
    """``--extend-deadline``'s value (argparse turns the error into exit 2)."""
    try:
        return parse_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_extend_deadline(action: argparse.ArgumentParser, applies_to: str) -> None:
    """``--extend-deadline DURATION``; ``applies_to`` says what gets the new deadline."""
    action.add_argument(
        "--extend-deadline",
        type=duration,
        metavar="DURATION",
        help=f"give {applies_to} the deadline now + DURATION (90m, 2h, 1d, 1d12h, PT2H; at "
        "most MaxDeadlineSeconds; a later deadline is kept) (default: off, deadlines "
        "unchanged)",
    )


def deadline_extension(chosen: timedelta | None, cap: timedelta) -> DeadlineExtension | None:
    """``--extend-deadline``, capped by ``MaxDeadlineSeconds`` (told once when it is)."""
    if chosen is None:
        return None
    extension = DeadlineExtension(chosen, cap)
    if extension.capped:
        print(
            f"--extend-deadline {format_age(extension.duration)} is beyond "
            f"MaxDeadlineSeconds={int(cap.total_seconds())}: "
            f"deadlines become now + {format_age(cap)}"
        )
    return extension
