"""AzureOpenAIModel: chat completions in JSON mode behind the ModelClient port.

The model name of a request is the Azure OpenAI deployment name. Authentication is
Microsoft Entra ID (``get_bearer_token_provider`` over the managed identity; role
"Cognitive Services OpenAI User") or, for local tests only, an API key.

Failures are sorted for the processor: throttling (429), server errors and timeouts are
transient, with the service's ``retry-after-ms``/``retry-after`` as the floor for the next
attempt; a content-filter refusal (finish_reason ``content_filter``, or a 400 with code
``content_filter``) is a PolicyRefusal, i.e. a result; any other 4xx is permanent. The
client's own retries are off: Service Bus scheduling does the retrying, visibly.

The completion's ``usage`` (prompt, completion and total tokens) and the first choice's
``finish_reason`` go on the result: tokens are what the service bills and throttles by.
"""

from __future__ import annotations

from typing import Any

from openai import (
    APIConnectionError,
    APIStatusError,
    AzureOpenAI,
    BadRequestError,
)

from shared.adapters.identity import azure_credential
from shared.chat_completions import (
    CONTENT_FILTER,
    chat_request,
    filtered_categories,
    read_completion,
    reads_as_text,
)
from shared.contracts import InferenceResult
from shared.errors import (
    ConfigurationError,
    InvalidInput,
    PermanentError,
    PolicyRefusal,
    TransientError,
)
from shared.inference import InferenceInput
from shared.model_parameters import AzureOpenAIParameters, parse_parameters
from shared.settings import Settings

COGNITIVE_SERVICES_SCOPE = "https://cognitiveservices.azure.com/.default"
# The OpenTelemetry GenAI ``gen_ai.system`` value of Azure OpenAI.
SYSTEM = "az.ai.openai"


def status_error(who: str, error: APIStatusError) -> TransientError | PermanentError:
    """An Azure OpenAI answer sorted for the app: throttling (408, 409, 429) and server
    errors are transient, with the service's wait as the floor; any other 4xx is permanent."""
    status = error.status_code
    if status in (408, 409, 429) or status >= 500:
        return TransientError(
            f"{who} answered {status}", retry_after_seconds(error.response.headers)
        )
    return PermanentError(f"{who} answered {status}: {error.message}")


def retry_after_seconds(headers: Any) -> float | None:
    """The wait the service asked for, from ``retry-after-ms`` or ``retry-after``."""
    if headers is None:
        return None
    milliseconds = headers.get("retry-after-ms")
    seconds = headers.get("retry-after")
    try:
        if milliseconds is not None:
            return float(milliseconds) / 1000
        if seconds is not None:
            return float(seconds)
    except ValueError:
        return None
    return None


class AzureOpenAIModel:
    """Implements ``inference.ModelClient``."""

    system = SYSTEM

    def __init__(self, client: AzureOpenAI) -> None:
        self._client = client

    def infer(self, request: InferenceInput) -> InferenceResult:
        if not reads_as_text(request.media_type):
            raise PermanentError(f"the model reads text only, not {request.media_type}")
        completion = self._complete(request)
        return read_completion(completion.model_dump(), len(request.text()))

    def _complete(self, request: InferenceInput) -> Any:
        try:
            parameters = parse_parameters(AzureOpenAIParameters, request.parameters, request.model)
        except InvalidInput as error:  # intake refuses these: only an unchecked message has one
            raise PermanentError(error.message) from error
        body = chat_request(request.model, request.text(), parameters)
        try:
            return self._client.chat.completions.create(**body)
        except BadRequestError as error:
            if error.code == CONTENT_FILTER:
                raise PolicyRefusal(
                    "the prompt was refused by the content filter", filtered_categories(error.body)
                ) from error
            raise PermanentError(f"the model refused the request: {error.message}") from error
        except APIStatusError as error:
            raise status_error("the model", error) from error
        except APIConnectionError as error:
            raise TransientError(f"the model is unreachable: {type(error).__name__}") from error


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


def azure_openai_model(settings: Settings) -> AzureOpenAIModel:
    if not settings.azure_openai_endpoint:
        raise ConfigurationError("ModelProvider=azure_openai needs AzureOpenAI__endpoint")
    return AzureOpenAIModel(
        azure_openai_client(
            settings.azure_openai_endpoint,
            settings.azure_openai_api_version,
            settings.azure_openai_timeout_seconds,
            settings.azure_openai_api_key,
            settings.azure_openai_client_id,
        )
    )
