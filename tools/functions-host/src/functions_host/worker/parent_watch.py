"""The worker ends when its host does.

The host starts the worker in a session of its own (so a terminal's Ctrl-C reaches the
host alone and the host can drain), which also means nothing stops the worker when the
host dies without a clean stop (SIGKILL, a crash): its gRPC stream breaks, but a function
still running in the thread pool would keep the process, its Service Bus locks and the
app's resources alive. A thread polls the parent's pid; once the worker has been
re-parented (its host is gone), it exits at once.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable

POLL_INTERVAL_S = 0.5
ORPHANED_EXIT_CODE = 70  # EX_SOFTWARE: not a clean stop


def _exit_orphaned() -> None:
    sys.stderr.write("worker: the host process is gone; exiting\n")
    sys.stderr.flush()
    os._exit(ORPHANED_EXIT_CODE)  # running functions cannot be waited for: nobody settles them


def watch_parent(
    parent_pid: int,
    on_orphaned: Callable[[], None] = _exit_orphaned,
    poll_interval_s: float = POLL_INTERVAL_S,
) -> threading.Event:
    """Call ``on_orphaned`` once ``parent_pid`` is no longer this process's parent.

    Returns an event that stops the watch when set (for tests and a clean exit).
    """
    stopped = threading.Event()

    def watch() -> None:
        while not stopped.wait(poll_interval_s):
            if os.getppid() != parent_pid:
                on_orphaned()
                return

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
    return stopped
