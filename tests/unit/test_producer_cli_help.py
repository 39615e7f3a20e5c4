"""The help of ``python -m shared.producer``, read as an operator reads it: every option
says what it does and its default, and ``--help`` ends with the line format, the exit
codes and where the settings come from, as written (``producer.EPILOG``)."""

from __future__ import annotations

import argparse
import re

import pytest

from shared.entrypoints.cli.producer import EPILOG, main, parser


@pytest.fixture
def help_text(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    monkeypatch.setenv("COLUMNS", "100")  # argparse wraps to the terminal's width
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


def options_help(text: str) -> dict[str, str]:
    """Each option's invocation (``--tenant TENANT``) and its help, its lines joined."""
    found: dict[str, str] = {}
    section = text.split("\noptions:\n", 1)[1].split("\n\n", 1)[0]
    current = ""
    for line in section.splitlines():
        if re.match(r"^  -", line):
            current, _, rest = line[2:].partition("  ")
            current = current.strip()
            found[current] = rest.strip()
        else:
            found[current] = f"{found[current]} {line.strip()}".strip()
    return found


def test_every_option_says_what_it_does_and_its_default(help_text: str) -> None:
    options = options_help(help_text)
    declared = {
        action.option_strings[-1]
        for action in parser()._actions
        if action.option_strings and not isinstance(action, argparse._HelpAction)
    }
    shown = {invocation.split()[0].rstrip(",") for invocation in options}
    assert declared <= shown, sorted(declared - shown)
    for invocation, text in options.items():
        if invocation.startswith("-h"):
            continue
        assert text, f"{invocation} has no help"
        source = invocation in ("--file FILE", "--text TEXT", "--blob-uri BLOB_URI")
        assert source or "default: " in text, f"{invocation} does not give its default"


def test_help_ends_with_the_exit_codes_and_where_settings_come_from(help_text: str) -> None:
    assert help_text.rstrip().endswith(EPILOG)  # as written, its lines kept
    for code in ("0  all sent", "1  some requests", "2  usage or configuration", "3  Service Bus"):
        assert f"\n  {code}" in help_text
    assert "environment" in help_text
    assert "local.settings.json" in help_text
    assert "ServiceBusConnection" in help_text
