"""The claim check: inputs live in Blob storage, messages carry only a verified reference.

Service Bus messages are small (256 KB on Standard) and every byte in them is paid for on
each delivery; documents are not. Intake stores the input once as
``<inputs container>/<tenant>/<request_id>`` with its SHA-256, size and media type, and
the message carries that reference so the processor can verify what it reads.

A caller may instead reference a blob already in the app's storage account. That
reference is an SSRF and cross-tenant risk, so it is accepted only when it names this
account's endpoint, an allowed container, and a blob under the caller's tenant prefix,
with no query string (no SAS tokens) and no path tricks.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from shared.blobs import BlobStore
from shared.contracts import ClaimCheck
from shared.errors import ClaimCheckInvalid, FieldError, InvalidInput, PayloadTooLarge
from shared.settings import Settings


@dataclass(frozen=True)
class BlobLocation:
    container: str
    name: str


def _invalid_uri(reason: str) -> InvalidInput:
    return InvalidInput(
        f"input.blob_uri is not acceptable: {reason}", (FieldError("input.blob_uri", reason),)
    )


class ClaimChecks:
    def __init__(
        self,
        blobs: BlobStore,
        inputs_container: str,
        allowed_containers: tuple[str, ...],
        max_bytes: int,
    ) -> None:
        self._blobs = blobs
        self._inputs_container = inputs_container
        self._allowed_containers = allowed_containers
        self._max_bytes = max_bytes

    @classmethod
    def from_settings(cls, blobs: BlobStore, settings: Settings) -> ClaimChecks:
        """The claim checks of the app's settings (InputsContainer, AllowedInputContainers,
        MaxUploadBytes) over ``blobs``."""
        return cls(
            blobs,
            settings.containers.inputs,
            settings.containers.allowed_inputs,
            settings.limits.max_upload_bytes,
        )

    def blob_uri(self, container: str, name: str) -> str:
        return f"{self._blobs.account_url}/{container}/{name}"

    def store(self, tenant_id: str, request_id: str, data: bytes, media_type: str) -> ClaimCheck:
        """Store an input and describe it."""
        digest = hashlib.sha256(data).hexdigest()
        name = f"{tenant_id}/{request_id}"
        self._blobs.upload(
            self._inputs_container,
            name,
            data,
            media_type,
            {"sha256": digest, "tenant_id": tenant_id, "request_id": request_id},
        )
        return ClaimCheck(
            blob_uri=self.blob_uri(self._inputs_container, name),
            sha256=digest,
            size=len(data),
            media_type=media_type,
        )

    def stored_by_a_door(self, claim_check: ClaimCheck, tenant_id: str, request_id: str) -> bool:
        """Whether ``claim_check`` is the input a door of this app stored for this request
        (``InputsContainer/{tenant}/{request}``, as ``store`` names it). Only the app's
        identity writes that container, and a direct producer holds send rights on the
        queues, no storage rights: such a message came through a door that authenticated
        its tenant, even when the door could not record its job."""
        try:
            location = self.locate_any(claim_check.blob_uri)
        except InvalidInput:
            return False
        if location != BlobLocation(self._inputs_container, f"{tenant_id}/{request_id}"):
            return False
        return self._blobs.info(location.container, location.name) is not None

    def locate_any(self, blob_uri: str) -> BlobLocation:
        """Container and name of a blob URI of this account (no tenant or container rule)."""
        account = urlsplit(self._blobs.account_url)
        parts = urlsplit(blob_uri)
        prefix = account.path.rstrip("/") + "/"
        path = unquote(parts.path)
        if parts.netloc.lower() != account.netloc.lower() or not path.startswith(prefix):
            raise _invalid_uri("it must point into this service's storage account")
        container, _, name = path[len(prefix) :].partition("/")
        if not container or not name:
            raise _invalid_uri("it names no blob")
        return BlobLocation(container, name)

    def locate(self, blob_uri: str, tenant_id: str) -> BlobLocation:
        """Parse a caller's blob URI, refusing anything outside the allowed space."""
        account = urlsplit(self._blobs.account_url)
        parts = urlsplit(blob_uri)
        if parts.scheme not in ("https", "http") or parts.netloc.lower() != account.netloc.lower():
            raise _invalid_uri("it must point into this service's storage account")
        if parts.query or parts.fragment:
            raise _invalid_uri("query strings and fragments (such as SAS tokens) are not allowed")
        path = unquote(parts.path)
        prefix = account.path.rstrip("/") + "/"
        if not path.startswith(prefix):
            raise _invalid_uri("it must point into this service's storage account")
        container, _, name = path[len(prefix) :].partition("/")
        if container not in self._allowed_containers:
            allowed = ", ".join(self._allowed_containers)
            raise _invalid_uri(f"container '{container}' is not one of: {allowed}")
        segments = name.split("/")
        if not name or any(segment in ("", ".", "..") for segment in segments) or "\\" in name:
            raise _invalid_uri("the blob name is empty or contains empty, '.' or '..' segments")
        if segments[0] != tenant_id or len(segments) < 2:
            raise _invalid_uri(f"the blob name must start with the caller's tenant '{tenant_id}/'")
        return BlobLocation(container, name)

    def reference(self, blob_uri: str, tenant_id: str, sha256: str | None) -> ClaimCheck:
        """Describe a caller-referenced blob; computes its SHA-256 when none was given."""
        location = self.locate(blob_uri, tenant_id)
        info = self._blobs.info(location.container, location.name)
        if info is None:
            raise _invalid_uri("no such blob")
        self._check_size(info.size)
        digest = sha256 or self._digest(location)
        return ClaimCheck(
            blob_uri=self.blob_uri(location.container, location.name),
            sha256=digest,
            size=info.size,
            media_type=info.media_type,
        )

    def open(self, claim_check: ClaimCheck, tenant_id: str) -> bytes:
        """Read a claim-check blob and verify it; ClaimCheckInvalid when it does not match."""
        try:
            location = self.locate(claim_check.blob_uri, tenant_id)
        except InvalidInput as error:
            raise ClaimCheckInvalid(f"the claim check is not acceptable: {error}") from error
        content = self._blobs.read(location.container, location.name)
        if content is None:
            raise ClaimCheckInvalid(f"the claim-check blob {claim_check.blob_uri} does not exist")
        digest = hashlib.sha256(content).hexdigest()
        if digest != claim_check.sha256:
            raise ClaimCheckInvalid(
                f"the claim-check blob {claim_check.blob_uri} has sha256 {digest}, "
                f"expected {claim_check.sha256}"
            )
        return content

    def _check_size(self, size: int) -> None:
        if size > self._max_bytes:
            raise PayloadTooLarge(
                f"the input is {size} bytes; the limit is {self._max_bytes} bytes",
                (FieldError("input", f"larger than {self._max_bytes} bytes"),),
            )

    def _digest(self, location: BlobLocation) -> str:
        digest = hashlib.sha256()
        for chunk in self._blobs.read_chunks(location.container, location.name):
            digest.update(chunk)
        return digest.hexdigest()
