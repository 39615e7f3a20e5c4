"""Invocations are appended as JSON lines to the file named by SAMPLE_RECORD_FILE."""

import json
import os
import threading
from typing import Any

_lock = threading.Lock()


def record(function: str, **facts: Any) -> None:
    line = json.dumps({"function": function, **facts}, default=str)
    with _lock, open(os.environ["SAMPLE_RECORD_FILE"], "a", encoding="utf-8") as handle:
        handle.write(line + "\n")


def attempts(function: str, key: str, value: str) -> int:
    """How many times ``function`` was recorded with ``key == value`` so far."""
    path = os.environ["SAMPLE_RECORD_FILE"]
    if not os.path.exists(path):
        return 0
    with _lock, open(path, encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    return sum(1 for row in rows if row.get("function") == function and row.get(key) == value)
