"""The app's chat request on a reasoning-model deployment (gpt-5, o-series) of the Azure
OpenAI emulator, which refuses what the service refuses for one: a temperature other than
the default, and ``max_tokens``. The default request must pass on the default API (v1)
and on a dated one; a setting only the caller chose may be refused, as a permanent
failure the caller can read."""

from __future__ import annotations

import json
from typing import Any

import pytest

from openai_emulator.process import OpenAIEmulator
from shared.adapters.models import serve_catalog
from shared.errors import PermanentError
from shared.inference import InferenceInput
from shared.inference.served import ServedModel
from shared.settings import Settings
from tests.support.catalogs import catalog

pytestmark = pytest.mark.integration

# A reasoning model's name: the emulator takes such a deployment for one.
DEPLOYMENT = "gpt-5.1"
SENTIMENT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["sentiment"],
    "properties": {"sentiment": {"enum": ["positive", "negative", "neutral"]}},
}


def serve(emulator: OpenAIEmulator, provider: str = "azure_openai", **entry: Any) -> ServedModel:
    """One alias of ``provider`` on the emulator's reasoning deployment, as the app serves it."""
    settings = {
        "AzureOpenAI__endpoint": emulator.endpoint,
        "AzureOpenAI__apiKey": emulator.api_key,
        "AzureOpenAI__timeoutSeconds": "10",
        "EmulatorKey": emulator.api_key,
    }
    model: dict[str, Any] = {"provider": provider, "task": "sentiment", "deployment": DEPLOYMENT}
    if provider == "openai_compatible":
        model |= {"endpoint": emulator.v1_base_url, "api_key_setting": "EmulatorKey"}
    document = {
        "tasks": {"sentiment": {"instructions": "Rate it.", "output_schema": SENTIMENT}},
        "models": {"m": {**model, **entry}},
    }
    return serve_catalog(catalog(document, settings), Settings.model_validate(settings))["m"]


def request(**parameters: Any) -> InferenceInput:
    return InferenceInput(
        request_id="r1",
        model="m",
        content=b"What a lovely day.",
        media_type="text/plain",
        parameters=parameters,
    )


@pytest.mark.parametrize("api_version", [None, "2025-04-01-preview"])
@pytest.mark.parametrize("parameters", [{}, {"max_tokens": 200}])
def test_the_default_request_passes_on_a_reasoning_deployment(
    openai_emulator: OpenAIEmulator, api_version: str | None, parameters: dict[str, Any]
) -> None:
    entry = {"api_version": api_version} if api_version else {}
    served = serve(openai_emulator, **entry)

    answer = served.client.infer(request(**parameters))

    result = served.card.task.result(answer)
    assert isinstance(result, dict), "a catalog task answers with its schema's object"
    assert result["sentiment"] in ("positive", "negative", "neutral")


def test_a_temperature_the_caller_sets_is_refused_permanently_naming_it(
    openai_emulator: OpenAIEmulator,
) -> None:
    with pytest.raises(PermanentError, match="temperature") as refused:
        serve(openai_emulator).client.infer(request(temperature=0))
    assert "Only the default (1) value is supported" in refused.value.message
    assert serve(openai_emulator).client.infer(request(temperature=1)).content


def test_an_openai_compatible_alias_of_a_reasoning_model_names_the_field_it_takes(
    openai_emulator: OpenAIEmulator,
) -> None:
    bounded = request(max_tokens=200)
    with pytest.raises(PermanentError, match="max_completion_tokens"):
        serve(openai_emulator, "openai_compatible").client.infer(bounded)

    served = serve(
        openai_emulator,
        "openai_compatible",
        options={"token_limit_parameter": "max_completion_tokens"},
    )
    answer = served.client.infer(bounded)
    assert json.dumps(served.card.task.result(answer))
