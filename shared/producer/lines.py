"""Request lines: what a producer hands over, one JSON object per line (JSONL).

A line carries the fields of the request message contract (``inferbus.request/v1``,
``contracts.RequestMessage``) with three conveniences for people writing files:
``request_id`` may be left out (a deterministic one is derived, see below),
``deadline_seconds`` may stand in for an absolute ``deadline``, and ``input`` may be
inline text ``{text}``, a full claim check ``{blob_uri, sha256, size, media_type}``, or a
reference ``{blob_uri, sha256?}`` to a blob of the app's account that the producer
describes (size, media type, SHA-256) before sending. ``schema`` is optional and, when
present, must be ``inferbus.request/v1``.

Deterministic request ids. A line without ``request_id`` is named by a version 5 UUID of
its canonical content (its validated fields, tenant included, defaults left out, keys
sorted). Sending the same file twice therefore sends the same message ids, and the
repeats go nowhere: the queue's duplicate detection drops a message id it has seen in the
last 10 minutes, and after that the processor finds the job already recorded (it records
jobs exclusively) and does not run it again. The price: two identical lines are one
request. To send the same content twice on purpose, give each line its own ``request_id``.

Everything here is pure: parsing and validating text, never a network call.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StringConstraints,
    Tag,
    ValidationError,
    model_validator,
)

from shared.contracts import (
    REQUEST_MESSAGE_SCHEMA,
    TENANT_ID_PATTERN,
    BlobReferenceInput,
    ClaimCheck,
    DocumentId,
    MetadataKey,
    MetadataValue,
    ModelName,
    Priority,
    TextInput,
)
from shared.errors import FieldError
from shared.intake.request_rules import MAX_METADATA

# Request ids become message ids (at most 128 characters on Service Bus), job blob names
# (<tenant>/<id>) and a segment of the status URL: URL-safe characters only.
RequestId = Annotated[
    str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._~:-]*$")
]
# The same rule as for the tenant of an HTTP caller.
TenantId = Annotated[str, StringConstraints(pattern=TENANT_ID_PATTERN.pattern)]
# Derived ids are UUID version 5 in this namespace (uuid5(NAMESPACE_URL, "urn:inferbus:producer")).
PRODUCER_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "urn:inferbus:producer")

_INPUT_TAGS = ("text", "claim_check", "blob_reference")


def _input_kind(value: Any) -> str | None:
    """Which input a line gives, by its keys (so errors name that input's fields only)."""
    if isinstance(value, BaseModel):
        value = value.model_dump()
    if not isinstance(value, dict):
        return None
    if "text" in value:
        return "text"
    if "size" in value or "media_type" in value:
        return "claim_check"
    if "blob_uri" in value:
        return "blob_reference"
    return None


LineInput = Annotated[
    Annotated[TextInput, Tag("text")]
    | Annotated[ClaimCheck, Tag("claim_check")]
    | Annotated[BlobReferenceInput, Tag("blob_reference")],
    Discriminator(
        _input_kind,
        custom_error_type="input_kind",
        custom_error_message=(
            "expected {text}, {blob_uri, sha256, size, media_type} or {blob_uri, sha256?}"
        ),
    ),
]


class RequestLine(BaseModel):
    """One request as a producer writes it (a JSONL line, or the CLI's flags)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    schema_: Literal["inferbus.request/v1"] | None = Field(None, alias="schema")
    request_id: RequestId | None = None
    tenant_id: TenantId
    model: ModelName
    input: LineInput
    parameters: dict[str, Any] = Field(default_factory=dict)
    priority: Priority = Priority.NORMAL
    not_before: AwareDatetime | None = None
    deadline: AwareDatetime | None = None
    deadline_seconds: int | None = Field(None, ge=1)
    metadata: dict[MetadataKey, MetadataValue] = Field(
        default_factory=dict, max_length=MAX_METADATA
    )
    after: str | None = Field(None, min_length=1, max_length=128)
    document_id: DocumentId | None = None

    @model_validator(mode="after")
    def _one_deadline(self) -> RequestLine:
        if self.deadline is not None and self.deadline_seconds is not None:
            raise ValueError("give deadline or deadline_seconds, not both")
        return self

    def canonical(self) -> str:
        """The line's content in one spelling: what its derived id is computed from."""
        content = self.model_dump(
            mode="json", by_alias=True, exclude={"schema_", "request_id"}, exclude_defaults=True
        )
        return json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class ParsedLine:
    """A valid line, with the request id it will be sent under."""

    line: int
    request: RequestLine
    request_id: str
    fingerprint: str  # the canonical content: same id + same fingerprint = the same request

    @classmethod
    def of(cls, line: int, request: RequestLine) -> ParsedLine:
        """The line, under its own request id or the name-based id of its content (UUID
        version 5)."""
        canonical = request.canonical()
        request_id = request.request_id or str(uuid.uuid5(PRODUCER_NAMESPACE, canonical))
        return cls(line, request, request_id, canonical)


@dataclass(frozen=True)
class LineRefusal:
    """A line that is not sent, and why (``fields`` name the failing parts)."""

    line: int
    reason: str
    fields: tuple[FieldError, ...] = ()
    request_id: str | None = None

    def describe(self) -> str:
        where = f"line {self.line}"
        if self.request_id:
            where += f" ({self.request_id})"
        details = "; ".join(f"{f.field}: {f.message}" for f in self.fields)
        return f"{where}: {self.reason}" + (f" ({details})" if details else "")


def field_errors(error: ValidationError) -> tuple[FieldError, ...]:
    """Pydantic's errors as dotted fields (the input kind's tag left out of the path)."""
    found = []
    for item in error.errors():
        location = [str(part) for part in item["loc"]]
        if location[:1] == ["input"] and len(location) > 2 and location[1] in _INPUT_TAGS:
            del location[1]
        found.append(FieldError(".".join(location) or "(line)", item["msg"]))
    return tuple(found)


def parse_document(
    document: object, line: int, defaults: dict[str, Any] | None = None
) -> ParsedLine | LineRefusal:
    """Validate one decoded line; ``defaults`` fill fields the line leaves out (the CLI's
    ``--tenant`` and ``--model``), before its id is derived."""
    if not isinstance(document, dict):
        return LineRefusal(line, "not a JSON object")
    claimed_id = document.get("request_id")
    claimed = claimed_id if isinstance(claimed_id, str) else None
    schema = document.get("schema", REQUEST_MESSAGE_SCHEMA)
    if schema != REQUEST_MESSAGE_SCHEMA:
        return LineRefusal(
            line,
            f"unknown schema {schema!r}; expected {REQUEST_MESSAGE_SCHEMA!r}",
            (FieldError("schema", "unknown version"),),
            claimed,
        )
    merged = {**(defaults or {}), **document}
    try:
        request = RequestLine.model_validate(merged)
    except ValidationError as error:
        return LineRefusal(line, "invalid request", field_errors(error), claimed)
    return ParsedLine.of(line, request)


def parse_line(
    raw: bytes | str, line: int, defaults: dict[str, Any] | None = None
) -> ParsedLine | LineRefusal | None:
    """One JSONL line: a request, a refusal, or None for a blank line."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as error:
        return LineRefusal(line, f"not UTF-8: {error.reason} at byte {error.start}")
    if not text.strip():
        return None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        return LineRefusal(line, f"not JSON: {error.msg} (column {error.colno})")
    return parse_document(document, line, defaults)


def parse_lines(
    lines: Iterable[bytes | str], defaults: dict[str, Any] | None = None
) -> Iterator[ParsedLine | LineRefusal]:
    """Every non-blank line of a JSONL stream, numbered from 1, in order."""
    for number, raw in enumerate(lines, start=1):
        parsed = parse_line(raw, number, defaults)
        if parsed is not None:
            yield parsed
