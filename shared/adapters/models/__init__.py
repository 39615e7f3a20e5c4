"""Model providers: the clients behind the catalog's aliases, one module per provider.

- ``local``: the deterministic local analyzer (document analysis only), the local stack's
  default and the tests' model;
- ``azure_openai``: chat completions on an Azure OpenAI deployment (Entra ID or a key);
- ``openai_compatible``: the same request to any OpenAI-compatible ``/v1`` endpoint
  (Azure AI Foundry models, vLLM, Ollama, LiteLLM, a gateway), with a bearer key;
- ``python``: a handler of the app's own (``package.module:callable``), sync or async.

Each module defines ``PROVIDER`` (``provider.ModelProvider``); this registry finds them, so
a new provider is one new module here. ``check_catalog`` holds a catalog to what its
providers need (``function_app.py`` runs it when the app is indexed, so a broken catalog
stops the start); ``serve_catalog`` makes the clients.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from functools import cache

from shared.adapters.models.provider import ModelProvider
from shared.errors import CatalogError, ProviderRefusal
from shared.inference import ModelClient
from shared.inference.catalog import SHORTHAND_SOURCE, ModelCard, ModelCatalog
from shared.inference.served import ServedModels
from shared.settings import Settings


@cache
def providers() -> Mapping[str, ModelProvider]:
    """Every provider of this package, by the name the catalog uses."""
    found: dict[str, ModelProvider] = {}
    for module_info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        provider = getattr(module, "PROVIDER", None)
        if isinstance(provider, ModelProvider):
            found[provider.name] = provider
    return found


def _refusal(catalog: ModelCatalog, card: ModelCard, field: str, message: str) -> CatalogError:
    if catalog.source == SHORTHAND_SOURCE and field == "provider":
        field = "ModelProvider"
    return catalog.fail(message, card.alias, field)


def check_card(catalog: ModelCatalog, card: ModelCard, *, settings_complete: bool = True) -> None:
    """CatalogError when ``card``'s provider cannot serve it. ``settings_complete``:
    False while the app is indexed, when an unset app setting may still be set before the
    services are built (its fields are checked then)."""
    known = providers()
    provider = known.get(card.provider)
    if provider is None:
        raise _refusal(
            catalog,
            card,
            "provider",
            f"unknown provider '{card.provider}'; providers: {', '.join(sorted(known))}",
        )
    if provider.tasks is not None and card.task.name not in provider.tasks:
        raise _refusal(
            catalog,
            card,
            "task",
            f"provider '{provider.name}' runs only {', '.join(sorted(provider.tasks))}, "
            f"not '{card.task.name}'",
        )
    for name in provider.required:
        if getattr(card, name) is not None:
            continue
        if name in card.unresolved:
            if settings_complete:
                raise _refusal(
                    catalog,
                    card,
                    name,
                    f"%{card.unresolved[name]}% names an app setting that is not set",
                )
            continue
        raise _refusal(catalog, card, name, f"provider '{provider.name}' needs {name}")
    if provider.check is not None:
        try:
            provider.check(card)
        except ProviderRefusal as refusal:
            raise _refusal(catalog, card, refusal.field, refusal.message) from None


def check_catalog(catalog: ModelCatalog, *, settings_complete: bool = True) -> None:
    """``check_card`` for every alias."""
    for card in catalog.cards.values():
        check_card(catalog, card, settings_complete=settings_complete)


def serve_catalog(catalog: ModelCatalog, settings: Settings) -> ServedModels:
    """The client of every alias (checked first: the settings are complete now)."""
    check_catalog(catalog)
    clients: dict[str, ModelClient] = {}
    for alias, card in catalog.cards.items():
        try:
            clients[alias] = providers()[card.provider].serve(card, settings)
        except ProviderRefusal as refusal:
            raise _refusal(catalog, card, refusal.field, refusal.message) from None
    return ServedModels(catalog, clients)
