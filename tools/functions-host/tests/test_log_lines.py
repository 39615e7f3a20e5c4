"""The host's console lines: one per record, whatever a caller or a worker put in it."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from functions_host.log_lines import OneLineFormatter, visible
from functions_host.protos import messages
from functions_host.worker_logs import WorkerLogPrinter

FORGED = "zz\r\n2026-12-04 00:00:00,000 ERROR injected.line: FAKE"


@pytest.fixture
def console() -> Iterator[io.StringIO]:
    """A console handler as the host installs it, on the root logger."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(OneLineFormatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    level = root.level
    root.setLevel(logging.INFO)
    yield stream
    root.removeHandler(handler)
    root.setLevel(level)


def test_every_control_character_is_written_out() -> None:
    assert visible("a\r\nb\x1b[31m\x00\x7f\x85\u2028\tc") == (
        "a\\r\\nb\\x1b[31m\\x00\\x7f\\x85\\u2028\\tc"
    )


def test_a_forged_line_in_a_host_record_stays_one_line(console: io.StringIO) -> None:
    logging.getLogger("host.http").warning("GET %s -> 404", f"/api/{FORGED}")
    lines = console.getvalue().splitlines()
    assert lines == ["WARNING host.http: GET /api/zz\\r\\n2026-12-04 00:00:00,000 ERROR "
                     "injected.line: FAKE -> 404"]  # fmt: skip


def test_a_workers_line_and_its_stack_trace_cannot_pass_for_records(
    console: io.StringIO,
) -> None:
    rpc_log = messages.RpcLog(
        invocation_id="inv-1",
        category="shared.processing.outcomes",
        level=messages.RpcLog.Error,
        message=f"unexpected failure on message {FORGED}",
        exception=messages.RpcException(
            message="ValueError: bad",
            stack_trace="Traceback (most recent call last):\n"
            f'  File "x", line 1\nValueError: {FORGED}\n',
        ),
    )
    WorkerLogPrinter({"inv-1": "process_requests"}).print(rpc_log)
    lines = console.getvalue().splitlines()
    assert lines[0] == (
        "ERROR Function.process_requests.User: unexpected failure on message "
        "zz\\r\\n2026-12-04 00:00:00,000 ERROR injected.line: FAKE"
    )
    assert all(line.startswith("    ") for line in lines[1:]), lines
    assert lines[1:] == [
        "    Traceback (most recent call last):",
        '      File "x", line 1',
        "    ValueError: zz\\r",
        "    2026-12-04 00:00:00,000 ERROR injected.line: FAKE",
    ]


def test_an_exception_of_the_host_is_indented_below_its_line(console: io.StringIO) -> None:
    try:
        raise RuntimeError(FORGED)
    except RuntimeError:
        logging.getLogger("host").exception("listener failed")
    first, *rest = console.getvalue().splitlines()
    assert first == "ERROR host: listener failed"
    assert rest
    assert all(line.startswith("    ") for line in rest), rest
