"""Tenant resolution from the App Service principal and the local header."""

from __future__ import annotations

import base64
import json

import pytest

from shared.entrypoints.http.problems import problem_for
from shared.errors import Unauthenticated
from shared.intake.tenancy import resolve_tenant

CLAIMS = ("tid", "http://schemas.microsoft.com/identity/claims/tenantid")


def principal(claims: list[dict[str, str]]) -> str:
    return base64.b64encode(json.dumps({"auth_typ": "aad", "claims": claims}).encode()).decode()


def test_the_first_configured_claim_type_wins() -> None:
    header = principal([{"typ": CLAIMS[1], "val": "long"}, {"typ": "tid", "val": "short"}])
    assert resolve_tenant({"x-ms-client-principal": header}, CLAIMS, False) == "short"


def test_the_principal_beats_the_header() -> None:
    headers = {"x-ms-client-principal": principal([{"typ": "tid", "val": "p"}]), "x-tenant-id": "h"}
    assert resolve_tenant(headers, CLAIMS, True) == "p"


def test_the_header_counts_only_when_allowed() -> None:
    assert resolve_tenant({"x-tenant-id": "dev"}, CLAIMS, True) == "dev"
    with pytest.raises(Unauthenticated):
        resolve_tenant({"x-tenant-id": "dev"}, CLAIMS, False)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"x-ms-client-principal": "%%%"},
        {"x-ms-client-principal": base64.b64encode(b"[1,2]").decode()},
        {"x-ms-client-principal": principal([{"typ": "name", "val": "n"}])},
        {"x-ms-client-principal": principal([{"typ": "tid", "val": "../escape"}])},
        {"x-tenant-id": "bad/tenant"},
    ],
)
def test_no_usable_identity_is_unauthenticated(headers: dict[str, str]) -> None:
    with pytest.raises(Unauthenticated):
        resolve_tenant(headers, CLAIMS, True)


@pytest.mark.parametrize(
    "document",
    [
        b'{"claims": ' + b"[" * 1000 + b"]" * 1000 + b"}",
        b'{"claims": [{"typ": "tid", "val": "\\ud800"}]}',
        b'{"claims": [{"typ": "tid", "val": "contoso\\n"}]}',
        b"[NaN]",
    ],
)
def test_a_principal_the_fuzzer_sent_is_401_not_a_crash(document: bytes) -> None:
    headers = {"x-ms-client-principal": base64.b64encode(document).decode()}
    with pytest.raises(Unauthenticated):
        resolve_tenant(headers, ("tid",), allow_tenant_header=False)


def test_a_principal_header_that_is_not_ascii_is_401() -> None:
    with pytest.raises(Unauthenticated, match="not valid base64 JSON"):
        resolve_tenant({"x-ms-client-principal": "é"}, ("tid",), allow_tenant_header=False)


def principal_with_values(claims: list[dict[str, object]]) -> str:
    """A principal whose claim values may be any JSON value (the fuzzer's kind)."""
    return base64.b64encode(json.dumps({"auth_typ": "aad", "claims": claims}).encode()).decode()


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (None, "null"),
        (True, "a boolean"),
        (False, "a boolean"),
        (0, "a number"),
        (3.14, "a number"),
        (["contoso"], "an array"),
        ({"id": "contoso"}, "an object"),
    ],
)
def test_a_tenant_claim_that_is_not_a_string_is_401_naming_the_claim(
    value: object, kind: str
) -> None:
    header = principal_with_values([{"typ": "tid", "val": value}])
    with pytest.raises(Unauthenticated) as refused:
        resolve_tenant({"x-ms-client-principal": header}, CLAIMS, allow_tenant_header=True)
    assert refused.value.message == (
        f"the client principal's tenant claim 'tid' is not a string (it is {kind})"
    )
    problem = problem_for(refused.value)
    assert problem.status == 401
    assert "'tid'" in json.loads(problem.body())["detail"]


def test_a_non_string_tenant_claim_is_not_rescued_by_a_later_claim_type() -> None:
    header = principal_with_values([{"typ": "tid", "val": 0}, {"typ": CLAIMS[1], "val": "contoso"}])
    with pytest.raises(Unauthenticated, match="'tid' is not a string"):
        resolve_tenant({"x-ms-client-principal": header}, CLAIMS, allow_tenant_header=False)


def test_claims_that_name_no_tenant_may_carry_any_value() -> None:
    header = principal_with_values(
        [
            {"typ": "groups", "val": ["a", "b"]},
            {"typ": "amr", "val": None},
            {"typ": "tid", "val": "t1"},
        ]
    )
    assert resolve_tenant({"x-ms-client-principal": header}, CLAIMS, False) == "t1"


def test_an_empty_tenant_claim_falls_through_to_the_next_claim_type() -> None:
    header = principal([{"typ": "tid", "val": ""}, {"typ": CLAIMS[1], "val": "long"}])
    assert resolve_tenant({"x-ms-client-principal": header}, CLAIMS, False) == "long"
