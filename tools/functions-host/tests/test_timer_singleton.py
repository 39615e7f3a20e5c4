"""Timers run once per occurrence across instances (the Functions host's listener lock):
three hosts of the sample app, one ``tick`` a second, fired by one host at a time; when
that host stops, another takes its timer over."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from hostproc import SampleHost, wait_for

pytestmark = pytest.mark.integration
# These hosts need no Service Bus listeners (which would compete with the session host's).
NO_SERVICE_BUS = tuple(
    arg for name in ("settle_batch", "handle_single", "ordered") for arg in ("--disable", name)
)


def test_three_hosts_fire_each_timer_once_and_hand_it_over(
    host_values_factory: Callable[..., dict[str, str]], tmp_path: Path
) -> None:
    values = host_values_factory(
        TickSchedule="* * * * * *", AzureFunctionsWebHost__hostid=f"t{uuid.uuid4().hex[:10]}"
    )
    hosts: list[SampleHost] = []
    try:
        for n in range(3):
            workdir = tmp_path / f"host-{n}"
            workdir.mkdir()
            hosts.append(SampleHost(workdir, values, *NO_SERVICE_BUS))
        ticks = hosts[0].records
        wait_for(lambda: len(ticks("tick")) >= 6, timeout=30, what="six ticks")
        fired = ticks("tick")
        assert len({row["pid"] for row in fired}) == 1, "one host holds the timer"
        seconds = Counter(int(row["at"]) for row in fired)
        assert max(seconds.values()) == 1, f"a second fired more than once: {seconds}"

        holder = next(h for h in hosts if "timer tick: this instance holds" in h.log())
        holder.stop()
        before = len(ticks("tick"))
        wait_for(lambda: len(ticks("tick")) >= before + 3, timeout=30, what="the takeover")
        after = ticks("tick")[before:]
        assert {row["pid"] for row in after} != {fired[0]["pid"]}, "another host took over"
        assert len({row["pid"] for row in after}) == 1
    finally:
        for host in hosts:
            host.stop()
