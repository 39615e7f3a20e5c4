"""The launcher names the settings a developer's older ``local.settings.json`` lacks."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from devtools.stack import missing_settings, model_quota, openai_port, parse_args

SAMPLE = Path(__file__).resolve().parents[2] / "local.settings.sample.json"


def test_a_copy_of_the_sample_lacks_nothing_and_an_older_copy_is_told_what_it_lacks() -> None:
    values = json.loads(SAMPLE.read_text(encoding="utf-8"))["Values"]
    assert missing_settings(dict(values)) == []

    older = {k: v for k, v in values.items() if k not in {"JobWatchdogSchedule", "ProducerTenants"}}
    assert missing_settings(older) == ["JobWatchdogSchedule", "ProducerTenants"]


def test_the_openai_emulator_serves_whichever_endpoint_points_at_this_machine() -> None:
    assert openai_port({"GlobalBatch__endpoint": "http://127.0.0.1:5390"}) == 5390
    assert openai_port({"AzureOpenAI__endpoint": "http://localhost:6000"}) == 6000
    assert openai_port({"AzureOpenAI__endpoint": "https://x.openai.azure.com"}) is None
    assert openai_port({}) is None


def test_a_model_quota_is_a_deployment_its_limits_and_its_latency() -> None:
    assert model_quota("gpt-4o-mini=24000,144,800") == ("gpt-4o-mini", 24_000, 144, 800)
    assert model_quota("d=30000") == ("d", 30_000, None, 0)
    assert model_quota("d=,60") == ("d", None, 60, 0)
    for bad in ("d", "=1", "d=x", "d=1,2,3,4", "d=-1"):
        with pytest.raises(argparse.ArgumentTypeError, match="DEPLOYMENT=TPM"):
            model_quota(bad)
    assert parse_args(["--instances=3", "--model-quota=d=1,2,3"]).instances == 3
