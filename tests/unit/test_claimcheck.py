"""The blob_uri guard: only this account, allowed containers, the caller's tenant prefix."""

from __future__ import annotations

import pytest

from shared.errors import InvalidInput
from shared.intake.claim_checks import BlobLocation, ClaimChecks

ACCOUNT = "https://acct.blob.core.windows.net"


class AccountOnly:
    account_url = ACCOUNT


def checks() -> ClaimChecks:
    return ClaimChecks(AccountOnly(), "inputs", ("incoming", "inputs"), 1000)  # type: ignore[arg-type]


def test_a_blob_under_the_tenant_prefix_is_located() -> None:
    location = checks().locate(f"{ACCOUNT}/incoming/t1/a%20b/doc.pdf", "t1")
    assert location == BlobLocation("incoming", "t1/a b/doc.pdf")


@pytest.mark.parametrize(
    "uri",
    [
        "https://evil.example/incoming/t1/doc",
        "https://acct.blob.core.windows.net.evil.example/incoming/t1/doc",
        "file:///etc/passwd",
        "ftp://acct.blob.core.windows.net/incoming/t1/doc",
        f"{ACCOUNT}/jobs/t1/doc",
        f"{ACCOUNT}/incoming/t2/doc",
        f"{ACCOUNT}/incoming/t1",
        f"{ACCOUNT}/incoming/t1/../t2/doc",
        f"{ACCOUNT}/incoming/t1/%2e%2e/t2/doc",
        f"{ACCOUNT}/incoming/t1//doc",
        f"{ACCOUNT}/incoming/t1/doc?sig=secret",
        f"{ACCOUNT}/incoming/t1/doc#frag",
    ],
)
def test_anything_else_is_refused_with_the_field_named(uri: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        checks().locate(uri, "t1")
    assert refused.value.fields[0].field == "input.blob_uri"


def test_path_style_accounts_such_as_azurite_keep_their_account_segment() -> None:
    class Azurite:
        account_url = "http://127.0.0.1:10000/devstoreaccount1"

    guard = ClaimChecks(Azurite(), "inputs", ("incoming",), 10)  # type: ignore[arg-type]
    assert guard.locate("http://127.0.0.1:10000/devstoreaccount1/incoming/t/x", "t").name == "t/x"
    with pytest.raises(InvalidInput):
        guard.locate("http://127.0.0.1:10000/otheraccount/incoming/t/x", "t")
