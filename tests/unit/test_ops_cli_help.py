"""The help of ``python -m shared.ops``, read as an operator reads it: the ``--help`` of
every command and area says what each option does and its default, ends with the exit
codes and where the settings come from (one epilog, ``ops_help.OPS_EPILOG``, given to
every parser), and names the two dead-letter areas so that each tells which is which.
Also the check of the ``Storage`` connection string that turns a key the SDK could not
sign with into a configuration error."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

import pytest

from shared.adapters.blob_storage import storage_connection_problem
from shared.entrypoints.cli.ops import main, parser
from shared.entrypoints.cli.ops_help import OPS_EPILOG

KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def commands(
    command: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every parser under ``command`` (itself first) by its primary name's path; an
    alias names the same parser and is not repeated."""
    yield path, command
    for action in command._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) not in seen:
                    seen.add(id(sub))
                    yield from commands(sub, (*path, name))


PATHS = [path for path, _ in commands(parser())]
LEAVES = [path for path, command in commands(parser()) if command._subparsers is None]


def help_text(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        main([*path, "--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


def entries(text: str, section: str) -> dict[str, str]:
    """The entries of one section of a ``--help`` (``options``, ``positional arguments``):
    each argument's invocation (``--limit N``) and its help, its lines joined."""
    found: dict[str, str] = {}
    inside, current = False, None
    for line in text.splitlines():
        if not line.startswith(" "):
            inside, current = line == f"{section}:", None
            continue
        if not inside or not line.strip():
            continue
        if re.match(r"^  \S", line):  # a new argument (a sub-command is indented by 4)
            invocation, _, rest = line[2:].partition("  ")
            current = invocation.strip()
            found[current] = rest.strip()
        elif current is not None and re.match(r"^ {3,}\S", line):
            found[current] = f"{found[current]} {line.strip()}".strip()
    return found


@pytest.fixture(autouse=True)
def wide_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")  # argparse wraps to the terminal's width


def test_the_walk_finds_every_command() -> None:
    assert PATHS == [
        (),
        ("deadletters",),
        ("deadletters", "list"),
        ("deadletters", "replay"),
        ("sb-deadletters",),
        ("sb-deadletters", "list"),
        ("sb-deadletters", "show"),
        ("sb-deadletters", "replay"),
        ("sb-deadletters", "purge"),
        ("usage",),
        ("jobs",),
        ("jobs", "reindex"),
    ]


@pytest.mark.parametrize("path", LEAVES, ids=" ".join)
def test_every_option_says_what_it_does_and_its_default(
    path: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    options = entries(help_text(path, capsys), "options")
    command = dict(commands(parser()))[path]
    declared = {action.option_strings[-1] for action in command._actions if action.option_strings}

    shown = {invocation.split()[0].rstrip(",") for invocation in options}
    shown |= {invocation.split(", ")[-1].split()[0] for invocation in options}
    assert declared <= shown  # the parse above read every option of the parser
    for invocation, text in options.items():
        if invocation.startswith("-h"):
            continue
        assert text, f"{' '.join(path)} {invocation} has no help"
        assert "(default: " in text, f"{' '.join(path)} {invocation} does not give its default"
    for invocation, text in entries(help_text(path, capsys), "positional arguments").items():
        assert text, f"{' '.join(path)} {invocation} has no help"


@pytest.mark.parametrize("path", PATHS, ids=lambda path: " ".join(path) or "root")
def test_every_help_ends_with_the_exit_codes_and_where_settings_come_from(
    path: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    text = help_text(path, capsys)

    assert text.rstrip().endswith(OPS_EPILOG)  # as written, its lines kept
    for code in ("0  done", "1  some were rejected", "2  usage or configuration", "3  storage"):
        assert f"\n  {code}" in text
    assert "environment" in text
    assert "local.settings.json" in text


def test_the_epilog_has_one_source() -> None:
    for path, command in commands(parser()):
        assert command.epilog is OPS_EPILOG, " ".join(path)
        assert "exit code" not in (command.description or "").lower(), " ".join(path)


@pytest.mark.parametrize(
    ("name", "area"),
    [
        ("deadletters", "eventgrid"),
        ("eg-deadletters", "eventgrid"),
        ("eventgrid-deadletters", "eventgrid"),
        ("sb-deadletters", "servicebus"),
        ("servicebus-deadletters", "servicebus"),
    ],
)
def test_each_dead_letter_name_reaches_its_area(name: str, area: str) -> None:
    assert parser().parse_args([name, "list"]).tools == area


def test_each_dead_letter_help_says_which_is_which(capsys: pytest.CaptureFixture[str]) -> None:
    listing = " ".join(help_text((), capsys).split())
    event_grid = " ".join(help_text(("eg-deadletters",), capsys).split())
    service_bus = " ".join(help_text(("servicebus-deadletters",), capsys).split())

    assert "deadletters (eg-deadletters, eventgrid-deadletters) Event Grid:" in listing
    assert "sb-deadletters (servicebus-deadletters) Service Bus:" in listing
    assert event_grid.startswith("usage: python -m shared.ops deadletters ")
    assert "Event Grid: the dead-lettered events" in event_grid
    assert "the Service Bus dead-letter queues: sb-deadletters" in event_grid
    assert "deadletters is eg-deadletters and eventgrid-deadletters" in event_grid
    assert "Service Bus: the dead-letter queues" in service_bus
    assert "Event Grid's dead-lettered events: deadletters" in service_bus


def test_both_replays_offer_yes_and_extend_deadline(capsys: pytest.CaptureFixture[str]) -> None:
    for area in ("deadletters", "sb-deadletters"):
        options = entries(help_text((area, "replay"), capsys), "options")
        assert {"--yes", "--extend-deadline DURATION"} <= set(options)


# --- the Storage connection string -------------------------------------------------------


@pytest.mark.parametrize(
    ("connection", "problem"),
    [
        (
            "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=not-base64!;"
            "BlobEndpoint=http://127.0.0.1:1/devstoreaccount1",
            "has an AccountKey that is not base64",
        ),
        ("AccountName=a;accountkey=abc", "has an AccountKey that is not base64"),
        ("AccountName=a;AccountKey", "is malformed"),
        ("just-a-key", "is malformed"),
    ],
)
def test_a_connection_string_the_sdk_could_not_sign_with_is_named(
    connection: str, problem: str
) -> None:
    told = storage_connection_problem(connection)

    assert told is not None
    assert problem in told
    assert "not-base64!" not in told  # the key is never quoted


@pytest.mark.parametrize(
    "connection",
    [
        f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={KEY};"
        "BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;",
        "UseDevelopmentStorage=true",
        "BlobEndpoint=https://a.blob.core.windows.net;SharedAccessSignature=sv=2024&sig=x",
        # The SDK's own decoding drops what is not base64, as here.
        f"AccountName=a;AccountKey={KEY[:-2]}!==",
    ],
)
def test_a_connection_string_the_sdk_can_sign_with_passes(connection: str) -> None:
    assert storage_connection_problem(connection) is None
