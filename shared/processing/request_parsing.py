"""Reading a request message: the body must be a known version of the request contract.

Everything here is a reason to dead-letter with ``InvalidPayload``: no retry can turn a
malformed body into a valid one, and the description tells an operator exactly why.
"""

from __future__ import annotations

from pydantic import ValidationError

from shared.bounded_json import MAX_MESSAGE_JSON_BYTES, parse_json
from shared.contracts import REQUEST_MESSAGE_SCHEMA, RequestMessage
from shared.errors import InvalidInput, InvalidPayload
from shared.processing.inbound import InboundMessage


def parse_request(message: InboundMessage, aliases: tuple[str, ...]) -> RequestMessage:
    """The request in a message body, or InvalidPayload saying exactly what is wrong
    (``aliases``: the models served here)."""
    try:
        document = parse_json(message.body, max_bytes=MAX_MESSAGE_JSON_BYTES, what="the body")
    except InvalidInput as error:
        raise InvalidPayload(f"the body is not JSON: {error}") from error
    if not isinstance(document, dict):
        raise InvalidPayload("the body is not a JSON object")
    schema = document.get("schema")
    if schema != REQUEST_MESSAGE_SCHEMA:
        raise InvalidPayload(f"unknown schema {schema!r}; expected {REQUEST_MESSAGE_SCHEMA!r}")
    try:
        request = RequestMessage.model_validate(document)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in item['loc'])}: {item['msg']}" for item in error.errors()
        )
        raise InvalidPayload(f"the request does not match {schema}: {problems}") from error
    if request.model not in aliases:
        raise InvalidPayload(f"unknown model {request.model!r}; served here: {', '.join(aliases)}")
    return request
