"""``provider: azure_openai``: chat completions on an Azure OpenAI deployment.

A catalog entry names its ``deployment`` (the shorthand ``ModelProvider=azure_openai``
uses the alias itself), and optionally its own ``endpoint``, ``api_version`` and
``api_key_setting``; otherwise the resource is ``AzureOpenAI__endpoint`` at
``AzureOpenAI__apiVersion``.

The API version is ``v1`` by default: the v1 API (``<endpoint>/openai/v1/``, the
deployment named by ``model``, no ``api-version``), reached with the plain ``OpenAI``
client. Current models need it: the newest GA dated version, 2024-10-21, predates the
reasoning models (gpt-5, o-series), which Azure serves only on the v1 API or on preview
dated versions. A dated version (``2024-10-21``, ``2025-04-01-preview``) still works
through ``AzureOpenAI`` (``/openai/deployments/<deployment>/...?api-version=``).

Authentication is Microsoft Entra ID (``get_bearer_token_provider`` over the managed
identity, ``AzureOpenAI__clientId``; role Cognitive Services OpenAI User) unless a key is
configured (``api_key_setting``, or ``AzureOpenAI__apiKey`` for local emulators).

The answer's shape is asked for with structured outputs (``response_format``
``json_schema``, built from the task's schema) on API versions that have them
(the v1 API, and dated versions from 2024-08-01), with ``json_object`` before; an entry's
``response_format`` overrides. Aliases on the same resource share one client.

A request's ``max_tokens`` goes in the body as ``max_completion_tokens``: Azure OpenAI
takes it for every current chat model, and reasoning models (gpt-5, o1, o3, o4) refuse
``max_tokens`` with a 400; an entry's ``token_limit_parameter`` overrides.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from typing import Any, Final

from openai import AzureOpenAI, OpenAI
from pydantic import Field

from shared.adapters.identity import azure_credential
from shared.adapters.models.chat_client import ChatModel, ChatOptions, key_in_setting
from shared.adapters.models.provider import ModelProvider
from shared.errors import ProviderRefusal
from shared.inference.catalog import ModelCard
from shared.inference.chat import JSON_OBJECT, JSON_SCHEMA, MAX_COMPLETION_TOKENS, ResponseFormat
from shared.settings import Settings

COGNITIVE_SERVICES_SCOPE = "https://cognitiveservices.azure.com/.default"
# The OpenTelemetry GenAI ``gen_ai.system`` value of Azure OpenAI.
SYSTEM = "az.ai.openai"
# The first dated API version with structured outputs (json_schema response formats).
STRUCTURED_OUTPUTS_SINCE = "2024-08-01"
# The API version that is not a date: the v1 API, with the plain OpenAI client.
V1_API: Final = "v1"


def azure_openai_client(
    endpoint: str,
    api_version: str,
    timeout_seconds: float,
    api_key: str | None,
    client_id: str | None,
) -> OpenAI:
    """A client of one Azure OpenAI resource: Microsoft Entra ID (``client_id``: a
    user-assigned identity) or, for a local emulator, ``api_key``; on the v1 API
    (``V1_API``) the plain ``OpenAI`` client, whose key may be a function that returns a
    fresh Entra token, else ``AzureOpenAI`` at the dated version. Its own retries are
    off: the caller's schedule is the retry, visibly."""
    if api_version == V1_API:
        key: str | Callable[[], str] = api_key or _token_provider(client_id)
        return OpenAI(
            base_url=f"{endpoint.rstrip('/')}/openai/v1/",
            api_key=key,
            timeout=timeout_seconds,
            max_retries=0,
        )
    common: dict[str, Any] = {
        "azure_endpoint": endpoint,
        "api_version": api_version,
        "timeout": timeout_seconds,
        "max_retries": 0,
    }
    if api_key:
        return AzureOpenAI(api_key=api_key, **common)
    return AzureOpenAI(azure_ad_token_provider=_token_provider(client_id), **common)


def _token_provider(client_id: str | None) -> Callable[[], str]:
    """Entra ID tokens for Azure OpenAI, from the managed identity (``client_id``)."""
    from azure.identity import get_bearer_token_provider

    provider: Callable[[], str] = get_bearer_token_provider(
        azure_credential(client_id), COGNITIVE_SERVICES_SCOPE
    )
    return provider


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
    token_limit = options.token_limit_parameter or MAX_COMPLETION_TOKENS
    return ChatModel(client, card, options.deployment, SYSTEM, chosen, token_limit)


PROVIDER = ModelProvider("azure_openai", AzureOpenAIOptions, serve)
