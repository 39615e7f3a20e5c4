"""Child processes of the local stack: start, wait until ready, stop; ports; Azurite.

One starter for everything that runs a local service as a child process: the app's
launcher (``python -m devtools.stack``), the test fixtures and the benchmarks, and the
tools' own starters (``servicebus_emulator.process``, ``functions_host.process``).
"""

from __future__ import annotations

from local_processes.azurite import ACCOUNT_KEY, ACCOUNT_NAME, Azurite, run_azurite, start_azurite
from local_processes.child import Child, StartError
from local_processes.ports import PORT_OWNERS, describe_port, free_port, wait_for_ports

__all__ = [
    "ACCOUNT_KEY",
    "ACCOUNT_NAME",
    "PORT_OWNERS",
    "Azurite",
    "Child",
    "StartError",
    "describe_port",
    "free_port",
    "run_azurite",
    "start_azurite",
    "wait_for_ports",
]
