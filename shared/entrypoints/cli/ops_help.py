"""The help every ``python -m shared.ops`` parser shares: one epilog, written once.

Every command's ``--help`` ends with the exit codes and where the settings come from
(``OPS_EPILOG``); ``ops`` gives it to the root parser and each area adds its parsers
through ``command_parser``, so no parser carries a copy of its own. The epilog keeps its
line breaks (a table of codes); descriptions and option help are wrapped as argparse wraps them, but
never at a hyphen.
"""

from __future__ import annotations

import argparse
import re
import textwrap
from collections.abc import Sequence
from typing import Any

OPS_EPILOG = """\
exit codes:
  0  done
  1  some were rejected or refused (also: show found nothing, the confirmation was
     declined)
  2  usage or configuration error: a bad option, a missing or malformed setting
  3  storage or Service Bus unavailable: run the same command again (a replay
     continues where it stopped)

settings: the app's own, from the environment over the Values of local.settings.json
in the current directory (INFERBUS_LOCAL_SETTINGS names another file); a variable of
the environment wins, as under the Functions host."""


class OpsHelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, keeping the epilog's lines as written and never breaking a
    line at a hyphen (``eventgrid-deadletters``, ``--extend-deadline`` stay whole, to be
    copied as they are)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text == OPS_EPILOG:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return textwrap.fill(
            _one_line(text),
            width,
            initial_indent=indent,
            subsequent_indent=indent,
            break_on_hyphens=False,
        )

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(_one_line(text), width, break_on_hyphens=False)


def _one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def root_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The root parser of ``python -m shared.ops``, with the shared epilog."""
    return argparse.ArgumentParser(
        prog=prog, description=description, epilog=OPS_EPILOG, formatter_class=OpsHelpFormatter
    )


def command_parser(
    commands: Any,
    name: str,
    *,
    summary: str,
    description: str | None = None,
    aliases: Sequence[str] = (),
) -> argparse.ArgumentParser:
    """A parser under ``commands`` (an ``add_subparsers`` action) with the shared epilog;
    ``summary`` is its line in the parent's listing and, without ``description``, its own
    description."""
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        aliases=list(aliases),
        help=summary,
        description=description or summary,
        epilog=OPS_EPILOG,
        formatter_class=OpsHelpFormatter,
    )
    return parser
