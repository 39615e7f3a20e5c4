"""``GET /api/v1/requests``: the caller's own requests, newest first, a page at a time.

The query is ``status`` (job statuses, comma-separated), ``model`` (an alias), ``limit``
(1-200, 50 by default) and ``continuation``, the token the previous page gave. The token
is opaque to the caller but not a secret: it says where the listing stands
(``job_listing.Position``) and which tenant and filters it belongs to, so a token from
another tenant or another query is refused (400 ``invalid-continuation``) rather than
resuming somewhere meaningless. It cannot reach another tenant's jobs either way: every
listing is under the caller's own prefix.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shared.contracts import Job, JobStatus, RequestList, RequestSummary
from shared.entrypoints.http.messages import ApiRequest, ApiResponse, json_response
from shared.entrypoints.http.requests import collection_url
from shared.errors import FieldError, InvalidContinuation, InvalidInput
from shared.intake.tenancy import CallerTenancy
from shared.job_listing import JobListing, Phase, Position

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
TOKEN_VERSION = 1
MAX_TOKEN_CHARACTERS = 4_096
MODEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
# The function key rides in ``?code=``: a ``next`` link never repeats it.
PRIVATE_PARAMETERS = frozenset({"code", "continuation"})


class ListQuery(BaseModel):
    """The query parameters, checked: a wrong one is a 400 naming it."""

    model_config = ConfigDict(frozen=True)

    statuses: frozenset[JobStatus] = frozenset()
    model: str | None = Field(None, pattern=MODEL_PATTERN)
    limit: int = Field(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT)

    def accepts(self, job: Job) -> bool:
        if self.statuses and job.status not in self.statuses:
            return False
        return self.model is None or job.model == self.model

    def scope(self, tenant_id: str) -> str:
        """What a token is bound to: the tenant and the filters (not the limit, which a
        caller may change from page to page)."""
        statuses = ",".join(sorted(self.statuses))
        text = f"{tenant_id}\n{statuses}\n{self.model or ''}"
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def _statuses(given: str | None) -> frozenset[JobStatus]:
    if not given:
        return frozenset()
    values = [value.strip() for value in given.split(",") if value.strip()]
    known = {status.value for status in JobStatus}
    unknown = [value for value in values if value not in known]
    if unknown:
        allowed = ", ".join(status.value for status in JobStatus)
        raise InvalidInput(
            f"status {', '.join(repr(u) for u in unknown)} is not one of: {allowed}",
            (FieldError("query.status", f"one or more of: {allowed}"),),
        )
    return frozenset(JobStatus(value) for value in values)


def _limit(given: str | None) -> int:
    if given is None:
        return DEFAULT_LIMIT
    if not given.isdigit() or not 1 <= int(given) <= MAX_LIMIT:
        raise InvalidInput(
            f"limit must be a whole number from 1 to {MAX_LIMIT}",
            (FieldError("query.limit", f"an integer from 1 to {MAX_LIMIT}"),),
        )
    return int(given)


def parse_query(params: dict[str, str]) -> ListQuery:
    """The listing's query from the URL's parameters (others, such as ``code``, ignored)."""
    statuses, limit = _statuses(params.get("status")), _limit(params.get("limit"))
    try:
        return ListQuery(statuses=statuses, model=params.get("model") or None, limit=limit)
    except ValidationError as error:
        raise InvalidInput(
            "model must be a model alias", (FieldError("query.model", "not an alias"),)
        ) from error


class _Token(BaseModel):
    """A continuation token's content (``encode_token``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    v: int
    s: str
    h: str = Field(pattern=r"^[0-9a-f]{8}-[0-9a-f]{4}$")
    b: str = Field(pattern=r"^[0-9a-f-]{0,36}$")
    p: Phase
    m: str | None = Field(None, max_length=2_048)
    a: str | None = Field(None, max_length=1_024)


def encode_token(position: Position, scope: str) -> str:
    """``position`` as URL-safe text (base64url of compact JSON, no padding)."""
    token = _Token(
        v=TOKEN_VERSION,
        s=scope,
        h=position.horizon,
        b=position.bound,
        p=position.phase,
        m=position.marker,
        a=position.after,
    )
    data = json.dumps(token.model_dump(exclude_none=True), separators=(",", ":"))
    return base64.urlsafe_b64encode(data.encode("utf-8")).decode("ascii").rstrip("=")


def decode_token(text: str, scope: str) -> Position:
    """The position ``text`` names, or InvalidContinuation: malformed, of another
    version, or issued to another tenant or query (``scope``)."""
    if len(text) > MAX_TOKEN_CHARACTERS:
        raise _invalid("is too long")
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        token = _Token.model_validate_json(data)
    except (binascii.Error, ValueError) as error:  # ValidationError is a ValueError
        raise _invalid("is malformed") from error
    if token.v != TOKEN_VERSION:
        raise _invalid("is of another version")
    if token.s != scope:
        raise _invalid("belongs to another tenant or another status or model filter")
    return Position(horizon=token.h, bound=token.b, phase=token.p, marker=token.m, after=token.a)


def _invalid(why: str) -> InvalidContinuation:
    return InvalidContinuation(
        f"the continuation token {why}: start again without one",
        (FieldError("query.continuation", why),),
    )


def next_url(request: ApiRequest, token: str) -> str:
    """The request's own URL with ``continuation`` set (and without the function key)."""
    parts = urlsplit(request.url)
    query = [(k, v) for k, v in request.params.items() if k not in PRIVATE_PARAMETERS]
    query.append(("continuation", token))
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), ""))


def summary(job: Job, collection: str) -> RequestSummary:
    return RequestSummary(
        id=job.id,
        status=job.status,
        model=job.model,
        priority=job.priority,
        mode=job.mode,
        created_at=job.created_at,
        updated_at=job.updated_at,
        completed_at=job.completed_at,
        status_url=f"{collection}/{job.id}",
    )


@dataclass(frozen=True)
class RequestListEndpoint:
    """``GET /api/v1/requests``: the listing of the caller's tenant."""

    listing: JobListing
    tenancy: CallerTenancy

    def list(self, request: ApiRequest) -> ApiResponse:
        """A page of the caller's requests (cost: ``job_listing``'s module doc)."""
        tenant_id = self.tenancy.tenant_of(request.headers)
        query = parse_query(dict(request.params))
        scope = query.scope(tenant_id)
        given = request.params.get("continuation")
        position = decode_token(given, scope) if given else self.listing.start()
        page = self.listing.page(tenant_id, position, query.limit, query.accepts)
        collection = collection_url(request)
        more: dict[str, str] = {}
        if page.next is not None:
            token = encode_token(page.next, scope)
            more = {"continuation": token, "next": next_url(request, token)}
        body = RequestList(requests=[summary(job, collection) for job in page.jobs], **more)
        return json_response(200, body.model_dump(mode="json", exclude_unset=True))
