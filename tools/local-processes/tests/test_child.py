"""Child: its own session, this run's output only, ready lines, stop with a signal."""

from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path

import pytest

from local_processes import Child, StartError

READY = re.compile(r"ready amqp=\S+ admin=(http://\S+)")


def test_a_restarted_child_is_not_ready_because_of_an_earlier_runs_log(tmp_path: Path) -> None:
    log_path = tmp_path / "emulator.log"
    log_path.write_text("ready amqp=127.0.0.1:5672 admin=http://127.0.0.1:1111\n")
    script = "import time; time.sleep(0.3); print('ready amqp=x admin=http://127.0.0.1:2222')"
    child = Child("emulator", [sys.executable, "-c", script], log_path)
    try:
        assert child.wait_for(READY, timeout=30).group(1) == "http://127.0.0.1:2222"
    finally:
        child.stop()
    assert "1111" in log_path.read_text()  # the earlier run's lines are kept, just not read


def started_child(tmp_path: Path, name: str, signal_handling: str) -> Child:
    """A Python child that installs ``signal_handling``, says "up", then sleeps."""
    script = f"import signal, sys, time\n{signal_handling}\nprint('up', flush=True)\ntime.sleep(60)"
    child = Child(name, [sys.executable, "-c", script], tmp_path / f"{name}.log")
    child.wait_for(re.compile("up"), timeout=30)
    return child


def test_a_child_runs_in_its_own_session_and_stops_on_the_signal_given(tmp_path: Path) -> None:
    handler = "lambda *a: (print('drained', flush=True), sys.exit(3))"
    child = started_child(tmp_path, "sleeper", f"signal.signal(signal.SIGINT, {handler})")
    assert os.getsid(child.process.pid) != os.getsid(0)
    assert child.stop(signal.SIGINT, timeout=10) == 3
    assert "drained" in child.output()
    assert not child.running()


def test_a_child_that_ignores_the_signal_is_killed_after_the_timeout(tmp_path: Path) -> None:
    child = started_child(tmp_path, "stubborn", "signal.signal(signal.SIGTERM, signal.SIG_IGN)")
    assert child.stop(signal.SIGTERM, timeout=0.5) == -signal.SIGKILL


def test_an_early_exit_or_silence_is_a_start_error_with_the_output(tmp_path: Path) -> None:
    crashing = Child("crasher", [sys.executable, "-c", "print('boom'); raise SystemExit(2)"], None)
    with pytest.raises(StartError, match=r"crasher exited early:\n.*boom"):
        crashing.wait_for(READY, timeout=30)
    crashing.stop()
    silent = Child("silent", [sys.executable, "-c", "import time; time.sleep(30)"], None)
    try:
        with pytest.raises(StartError, match=r"silent did not become ready within 0s"):
            silent.wait_for(READY, timeout=0.2)
    finally:
        silent.stop()
