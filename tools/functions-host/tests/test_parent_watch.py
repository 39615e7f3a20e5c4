"""The worker's parent watch (its end to end case, a killed host, is in test_interrupt.py)."""

from __future__ import annotations

import os
import threading

from functions_host.worker.parent_watch import watch_parent


def test_the_watch_calls_back_once_the_parent_is_another_process() -> None:
    orphaned = threading.Event()
    not_our_parent = os.getpid()  # a process is never its own parent
    stop = watch_parent(not_our_parent, on_orphaned=orphaned.set, poll_interval_s=0.01)
    try:
        assert orphaned.wait(10), "the watch never noticed the parent had changed"
    finally:
        stop.set()
