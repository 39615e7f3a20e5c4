"""The emulator as a process: ready line, health, clean stop on SIGTERM, bad options."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from openai_emulator.__main__ import limits_of, parse_args
from openai_emulator.process import OpenAIEmulatorProcess


def test_ready_line_health_and_sigterm(tmp_path: Path) -> None:
    process = OpenAIEmulatorProcess(tmp_path / "emulator.log", api_key="secret-key-1234")
    try:
        emulator = process.wait_ready()
        url = f"{emulator.endpoint}/health"
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 (loopback)
            assert json.loads(response.read()) == {"status": "ok"}
    finally:
        returncode = process.child.stop(signal.SIGTERM, timeout=10)
    assert returncode == 0
    output = process.child.output()
    assert "ready http=http://127.0.0.1:" in output
    assert "auto-advance=0" in output
    assert "stopped" in output
    assert "secret-key-1234" not in output


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        (["--port", "-1"], "--port"),
        (["--auto-advance", "soon"], "--auto-advance"),
        (["--max-lines", "0"], "--max-lines"),
        (["--key", ""], "--key"),
        (["--enqueued-token-limit", "=5"], "--enqueued-token-limit"),
        (["--enqueued-token-limit", "gpt=many"], "--enqueued-token-limit"),
        (["--enqueued-token-limit", "-3"], "--enqueued-token-limit"),
        (["--deployment", "gpt=1000,10,0,hourly"], "LIMITER is window or minute"),
    ],
)
def test_bad_options_exit_2_and_say_why(options: list[str], reason: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "openai_emulator", *options],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert reason in result.stderr


def test_token_limits_name_deployments_and_a_bare_one_is_the_default() -> None:
    args = parse_args(["--enqueued-token-limit", "5000", "--enqueued-token-limit", "d=30000"])
    limits = limits_of(args)
    assert (limits.enqueued_token_limit, limits.deployment_token_limits) == (5000, (("d", 30000),))
    assert limits_of(parse_args([])).enqueued_token_limit is None
