"""The launcher names the settings a developer's older ``local.settings.json`` lacks."""

from __future__ import annotations

import json
from pathlib import Path

from devtools.stack import missing_settings

SAMPLE = Path(__file__).resolve().parents[2] / "local.settings.sample.json"


def test_a_copy_of_the_sample_lacks_nothing_and_an_older_copy_is_told_what_it_lacks() -> None:
    values = json.loads(SAMPLE.read_text(encoding="utf-8"))["Values"]
    assert missing_settings(dict(values)) == []

    older = {k: v for k, v in values.items() if k not in {"JobWatchdogSchedule", "WebhookTenants"}}
    assert missing_settings(older) == ["JobWatchdogSchedule", "WebhookTenants"]
