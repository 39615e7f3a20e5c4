"""``provider: azure_openai``: chat completions on an Azure OpenAI deployment.

A catalog entry names its ``deployment`` (the shorthand ``ModelProvider=azure_openai``
uses the alias itself), and optionally its own ``endpoint``, ``api_version`` and
``api_key_setting``; otherwise the resource is ``AzureOpenAI__endpoint`` at
``AzureOpenAI__apiVersion``. Authentication is Microsoft Entra ID
(``get_bearer_token_provider`` over the managed identity, ``AzureOpenAI__clientId``; role
Cognitive Services OpenAI User) unless a key is configured (``api_key_setting``, or
``AzureOpenAI__apiKey`` for local emulators).

The answer's shape is asked for with structured outputs (``response_format``
``json_schema``, built from the task's schema) on API versions that have them
(2024-08-01 and later, and the v1 API), with ``json_object`` before; an entry's
``response_format`` overrides. Aliases on the same resource share one client.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from openai import AzureOpenAI
from pydantic import Field

from shared.adapters.identity import azure_credential
from shared.adapters.models.chat_client import ChatModel, ChatOptions, key_in_setting
from shared.adapters.models.provider import ModelProvider
from shared.errors import ProviderRefusal
from shared.inference.catalog import ModelCard
from shared.inference.chat import JSON_OBJECT, JSON_SCHEMA, ResponseFormat
from shared.settings import Settings

COGNITIVE_SERVICES_SCOPE = "https://cognitiveservices.azure.com/.default"
# The OpenTelemetry GenAI ``gen_ai.system`` value of Azure OpenAI.
SYSTEM = "az.ai.openai"
# The first dated API version with structured outputs (json_schema response formats).
STRUCTURED_OUTPUTS_SINCE = "2024-08-01"


def azure_openai_client(
    endpoint: str,
    api_version: str,
    timeout_seconds: float,
    api_key: str | None,
    client_id: str | None,
) -> AzureOpenAI:
    """A client of one Azure OpenAI resource: Microsoft Entra ID (``client_id``: a
    user-assigned identity) or, for a local emulator, ``api_key``. Its own retries are
    off: the caller's schedule is the retry, visibly."""
    common: dict[str, Any] = {
        "azure_endpoint": endpoint,
        "api_version": api_version,
        "timeout": timeout_seconds,
        "max_retries": 0,
    }
    if api_key:
        return AzureOpenAI(api_key=api_key, **common)
    from azure.identity import get_bearer_token_provider

    token_provider = get_bearer_token_provider(
        azure_credential(client_id), COGNITIVE_SERVICES_SCOPE
    )
    return AzureOpenAI(azure_ad_token_provider=token_provider, **common)


_shared_client = cache(azure_openai_client)


def format_for(api_version: str) -> ResponseFormat:
    """Structured outputs where the API version has them, else any JSON object."""
    dated = re.match(r"\d{4}-\d{2}-\d{2}", api_version)
    if dated is None or dated.group(0) >= STRUCTURED_OUTPUTS_SINCE:
        return JSON_SCHEMA
    return JSON_OBJECT


class AzureOpenAIOptions(ChatOptions):
    """An alias on an Azure OpenAI deployment: the resource is the app's
    (``AzureOpenAI__endpoint``) unless the alias names its own."""

    api_version: str | None = Field(None, min_length=1)


def serve(card: ModelCard, options: AzureOpenAIOptions, settings: Settings) -> ChatModel:
    endpoint = options.endpoint or settings.azure_openai.endpoint
    if not endpoint:
        raise ProviderRefusal(
            "endpoint", "provider 'azure_openai' needs an endpoint, or AzureOpenAI__endpoint"
        )
    api_version = options.api_version or settings.azure_openai.api_version
    key = key_in_setting(options, settings)
    client = _shared_client(
        endpoint,
        api_version,
        options.timeout_seconds or settings.azure_openai.timeout_seconds,
        key or settings.azure_openai.api_key,
        settings.azure_openai.client_id,
    )
    chosen = options.response_format or format_for(api_version)
    return ChatModel(client, card, options.deployment, SYSTEM, chosen)


PROVIDER = ModelProvider("azure_openai", AzureOpenAIOptions, serve)
