"""``provider: openai_compatible``: any endpoint that speaks OpenAI's chat completions.

Azure AI Foundry models, vLLM, Ollama, LiteLLM or a gateway of your own: the entry names
the ``endpoint`` (the base URL, ``/v1`` included: ``http://127.0.0.1:8000/v1``), the
``deployment`` (the model name the server knows) and, when the server checks one,
``api_key_setting`` (the app setting holding the bearer key; put a Key Vault reference
there in Azure). A server that checks no key gets a placeholder one (the SDK always sends
``Authorization``).

The request is the one every provider sends (``shared.inference.chat``), with
structured outputs (``json_schema``) unless the entry asks for ``json_object`` (servers
without structured outputs). A request's ``max_tokens`` goes in the body as
``max_tokens``, the name every OpenAI-compatible server knows (Ollama, older vLLM and
gateways may not know ``max_completion_tokens``); an entry whose server is OpenAI itself,
or serves reasoning models that refuse ``max_tokens``, says
``"token_limit_parameter": "max_completion_tokens"``. Failures are sorted as for Azure OpenAI
(``chat_client``): 429, 5xx and timeouts transient honouring ``retry-after-ms`` /
``retry-after``, other 4xx permanent. Aliases on the same endpoint and key share a client.
"""

from __future__ import annotations

from functools import cache

from openai import OpenAI
from pydantic import Field

from shared.adapters.models.chat_client import ChatModel, ChatOptions, key_in_setting
from shared.adapters.models.provider import ModelProvider
from shared.errors import ProviderRefusal
from shared.inference.catalog import ModelCard
from shared.inference.chat import JSON_SCHEMA, MAX_TOKENS
from shared.settings import Settings

# ``gen_ai.system`` of a service reached through the OpenAI protocol.
SYSTEM = "openai"
DEFAULT_TIMEOUT_SECONDS = 120.0
PLACEHOLDER_KEY = "unused"


@cache
def _client(endpoint: str, api_key: str, timeout_seconds: float) -> OpenAI:
    return OpenAI(base_url=endpoint, api_key=api_key, timeout=timeout_seconds, max_retries=0)


class OpenAICompatibleOptions(ChatOptions):
    """An alias on an OpenAI-compatible server: its base URL is required."""

    endpoint: str = Field(min_length=1)


def serve(card: ModelCard, options: OpenAICompatibleOptions, settings: Settings) -> ChatModel:
    key = key_in_setting(options, settings) or PLACEHOLDER_KEY
    client = _client(
        options.endpoint.rstrip("/"), key, options.timeout_seconds or DEFAULT_TIMEOUT_SECONDS
    )
    return ChatModel(
        client,
        card,
        options.deployment,
        SYSTEM,
        options.response_format or JSON_SCHEMA,
        options.token_limit_parameter or MAX_TOKENS,
    )


def check(card: ModelCard, options: OpenAICompatibleOptions) -> None:
    if not options.endpoint.startswith(("http://", "https://")):
        raise ProviderRefusal("endpoint", f"'{options.endpoint}' is not an http(s) URL")


PROVIDER = ModelProvider("openai_compatible", OpenAICompatibleOptions, serve, check=check)
