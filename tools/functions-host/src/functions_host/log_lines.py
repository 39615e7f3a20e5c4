"""The host's log: one line per record, whatever a caller or a worker put in it.

Request paths, blob names, event ids and the worker's relayed lines can carry text a
caller chose; a carriage return or line feed in it would start a line of its own (a
forged ``ERROR`` line, say), and escape codes would recolour the console. The formatter
writes every control character of a record's message visibly (``\\r``, ``\\n``, ``\\xNN``).
A traceback (the host's own, or the stack trace a worker sent with its line) keeps its
lines, each indented below the record and its control characters written visibly too,
so that no line of it can pass for a record.
"""

from __future__ import annotations

import copy
import logging
import re

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\r": "\\r", "\n": "\\n", "\t": "\\t"}
# The attribute a relayed worker line carries its stack trace in (``worker_logs``).
STACK_TRACE = "worker_stack_trace"
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _visible(match: re.Match[str]) -> str:
    character = match.group()
    code = ord(character)
    fallback = f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    return _NAMED.get(character, fallback)


def visible(text: str) -> str:
    """``text`` on one line, each control character written out."""
    return _CONTROL.sub(_visible, text)


class OneLineFormatter(logging.Formatter):
    """Formats a record as one line, and any traceback as indented lines below it."""

    def __init__(self, fmt: str = FORMAT) -> None:
        super().__init__(fmt)

    def format(self, record: logging.LogRecord) -> str:
        line = copy.copy(record)  # other handlers format the record as it came
        line.msg, line.args = visible(record.getMessage()), None
        line.exc_info, line.exc_text, line.stack_info = None, None, None
        text = super().format(line)
        tails = [str(getattr(record, STACK_TRACE, "") or "")]
        if record.exc_info:
            tails.append(self.formatException(record.exc_info))
        if record.stack_info:
            tails.append(self.formatStack(record.stack_info))
        # Split on line feeds only: every other break (CR, FS, NEL, LS) is written out.
        below = [
            f"    {visible(part)}"
            for tail in tails
            if tail.strip()
            for part in tail.rstrip("\n").split("\n")
        ]
        return "\n".join([text, *below])
