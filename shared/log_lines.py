"""Log lines that caller text cannot forge (CWE-117): every record is one line.

Problem details, rejected events, blob names and message ids echo what callers sent, and
a carriage return or line feed in them would start a line of its own in the console, a
log file or the log stream (a forged ``ERROR`` line, say), while escape codes would
recolour a terminal. So every record this process makes has its message rendered once,
at creation, with each control character (C0 and C1, DEL, and the Unicode line and
paragraph separators) written visibly as ``\\r``, ``\\n``, ``\\t`` or ``\\xNN``. Only the
message text changes: answers to callers are built elsewhere and keep their text, and
the structured fields a record carries (``inferbus.*``, OpenTelemetry's attributes) are
left as they are.

Installed once per process by the wiring (``bootstrap.observe``, and the composition
root before anything logs); the local Functions host keeps its own lines safe the same
way in its formatter.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\r": "\\r", "\n": "\\n", "\t": "\\t"}
_lock = threading.Lock()
_installed = False


def _visible(match: re.Match[str]) -> str:
    character = match.group()
    if character in _NAMED:
        return _NAMED[character]
    code = ord(character)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def one_line(text: str) -> str:
    """``text`` with every control character written visibly: one line, no escapes."""
    return _CONTROL.sub(_visible, text)


def install_one_line_records() -> None:
    """From now on, every log record of this process carries its message as one line
    (idempotent; the record factory before it still runs first)."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:
            return record  # a malformed call: logging reports it when the record is handled
        safe = one_line(message)
        if safe != message:
            record.msg, record.args = safe, None
        return record

    logging.setLogRecordFactory(factory)
