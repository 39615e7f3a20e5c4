"""ChatModel: one alias on a chat-completions endpoint, through the ``openai`` SDK.

The Azure OpenAI and OpenAI-compatible providers differ only in how the client reaches
the service (``azure_openai``, ``openai_compatible``); the call and the sorting of its
failures are the same, and live here:

- throttling (429) is ``Throttled``, with the service's ``retry-after-ms``/``retry-after``
  and what it says is left: the deployment's capacity gate pauses on it
  (``shared.inference.capacity``); conflicts and timeouts (408, 409), server errors and
  connection failures are transient, with the service's wait as the floor;
- a content-filter refusal (finish_reason ``content_filter``, a 400 with code
  ``content_filter``) or the model's own refusal is a PolicyRefusal, i.e. a result;
- any other 4xx is permanent.

A request's ``max_tokens`` goes in the body under the field the provider takes
(``max_completion_tokens`` on Azure OpenAI, ``max_tokens`` on other OpenAI-compatible
servers); an alias's ``token_limit_parameter`` overrides.

Every answer's ``x-ratelimit-remaining-tokens`` / ``-requests`` go on the ``ModelAnswer``:
the deployment's own view of its quota, which the gate holds itself to. The client's own
retries are off: the gate and Service Bus scheduling do the retrying, visibly.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

from openai import APIConnectionError, APIStatusError, BadRequestError, OpenAI
from pydantic import Field

from shared.adapters.models.provider import ProviderOptions, unset_setting
from shared.errors import (
    InvalidInput,
    PermanentError,
    PolicyRefusal,
    ProviderRefusal,
    Throttled,
    TransientError,
)
from shared.inference import InferenceInput, ModelAnswer, reads_as_text
from shared.inference.catalog import ModelCard
from shared.inference.chat import (
    CONTENT_FILTER,
    ResponseFormat,
    TokenLimitField,
    chat_request,
    filtered_categories,
    read_completion,
)
from shared.settings import Settings


class ChatOptions(ProviderOptions):
    """The options of an alias on a chat-completions endpoint (both chat providers)."""

    deployment: str = Field(min_length=1)  # the model's name on the service
    endpoint: str | None = Field(None, min_length=1)
    api_key_setting: str | None = Field(None, min_length=1)  # the app setting of the key
    # How the answer's shape is asked for: a JSON Schema (structured outputs) or any JSON
    # object (for endpoints without structured outputs). Unset: the provider decides.
    response_format: ResponseFormat | None = None
    timeout_seconds: float | None = Field(None, gt=0, le=3600)
    # The body field a request's max_tokens goes under: max_completion_tokens (OpenAI's
    # current name, the only one reasoning models take) or max_tokens (servers that know
    # only the older name). Unset: the provider decides.
    token_limit_parameter: TokenLimitField | None = None

    # The app setting it names must hold the key: checked when the app starts.
    setting_options: ClassVar[tuple[str, ...]] = ("api_key_setting",)


def key_in_setting(options: ChatOptions, settings: Settings) -> str | None:
    """The key in the app setting ``api_key_setting`` names (None when it names none).
    The start refuses a setting that holds nothing (``setting_options``); this is the
    same refusal for a catalog checked without its settings."""
    if options.api_key_setting is None:
        return None
    key = settings.app_setting(options.api_key_setting)
    if key is None:
        raise ProviderRefusal("api_key_setting", unset_setting(options.api_key_setting))
    return key


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


def remaining(headers: Any, name: str) -> int | None:
    """An ``x-ratelimit-remaining-*`` header as a count (None when absent or nonsense)."""
    value = headers.get(f"x-ratelimit-remaining-{name}") if headers is not None else None
    try:
        return int(float(value)) if value is not None else None
    except ValueError:
        return None


def status_error(who: str, error: APIStatusError) -> TransientError | PermanentError:
    """A service's answer sorted for the app: throttling (429) is ``Throttled``, timeouts,
    conflicts (408, 409) and server errors are transient, with the service's wait as the
    floor; any other 4xx is permanent."""
    status = error.status_code
    headers = error.response.headers
    if status == 429:
        return Throttled(
            f"{who} answered 429 (throttled)",
            retry_after_seconds(headers),
            remaining(headers, "tokens"),
            remaining(headers, "requests"),
        )
    if status in (408, 409) or status >= 500:
        return TransientError(
            f"{who} answered {status}", retry_after_seconds(error.response.headers)
        )
    return PermanentError(f"{who} answered {status}: {error.message}")


class ChatModel:
    """Implements ``inference.ModelClient`` for one alias (its deployment and task)."""

    def __init__(
        self,
        client: OpenAI,
        card: ModelCard,
        deployment: str,
        system: str,
        response_format: ResponseFormat,
        token_limit: TokenLimitField,
    ) -> None:
        self._client = client
        self._card = card
        self._deployment = deployment
        self._format: ResponseFormat = response_format
        self._token_limit: TokenLimitField = token_limit
        self.system = system

    def infer(self, request: InferenceInput) -> ModelAnswer:
        if not reads_as_text(request.media_type):
            raise PermanentError(f"the model reads text only, not {request.media_type}")
        try:
            parameters = self._card.parameters.read(request.parameters, request.model)
        except InvalidInput as error:  # intake refuses these: only an unchecked message has one
            raise PermanentError(error.message) from error
        text = request.text()
        body = chat_request(
            self._deployment, self._card.task, text, parameters, self._format, self._token_limit
        )
        raw = self._complete(body)
        answer = read_completion(raw.parse().model_dump(), len(text))
        return replace(
            answer,
            remaining_tokens=remaining(raw.headers, "tokens"),
            remaining_requests=remaining(raw.headers, "requests"),
        )

    def _complete(self, body: dict[str, Any]) -> Any:
        """The raw response (its headers and its completion)."""
        try:
            return self._client.chat.completions.with_raw_response.create(**body)
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
