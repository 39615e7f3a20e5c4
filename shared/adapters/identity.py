"""Credentials: managed identity in Azure, developer sign-in locally, one per process.

``DefaultAzureCredential`` picks managed identity on Azure and the developer's Azure CLI
or VS Code sign-in elsewhere. A user-assigned identity is chosen by its client id (the
``<Connection>__clientId`` app setting), as the Functions extensions do.
"""

from __future__ import annotations

from functools import cache

from azure.core.credentials import AzureKeyCredential
from azure.identity import DefaultAzureCredential


@cache
def azure_credential(client_id: str | None = None) -> DefaultAzureCredential:
    """A shared credential: token caches are per instance, so reuse it."""
    if client_id:
        return DefaultAzureCredential(managed_identity_client_id=client_id)
    return DefaultAzureCredential()


def key_or_identity(
    key: str | None, client_id: str | None
) -> AzureKeyCredential | DefaultAzureCredential:
    """An access key where one is configured (local emulators only), else the identity."""
    if key:
        return AzureKeyCredential(key)
    return azure_credential(client_id)
