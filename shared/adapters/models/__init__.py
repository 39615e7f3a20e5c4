"""Model providers: the clients behind the catalog's aliases, one module per provider.

- ``local``: the deterministic local analyzer (document analysis only), the local stack's
  default and the tests' model;
- ``azure_openai``: chat completions on an Azure OpenAI deployment (Entra ID or a key);
- ``openai_compatible``: the same request to any OpenAI-compatible ``/v1`` endpoint
  (Azure AI Foundry models, vLLM, Ollama, LiteLLM, a gateway), with a bearer key;
- ``python``: a handler of the app's own (``package.module:callable``), sync or async.

Each module defines ``PROVIDER`` (``provider.ModelProvider``, with its options model); this
registry finds them, so a new provider is one new module here (docs/providers.md).
``check_catalog`` validates each alias's options against its provider's options model
(``function_app.py`` runs it when the app is indexed, so a broken catalog stops the start);
``serve_catalog`` makes the clients.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from functools import cache
from typing import Any

from pydantic import ValidationError

from shared.adapters.models.provider import ModelProvider, ProviderOptions, unset_setting
from shared.errors import CatalogError, ProviderRefusal
from shared.inference import ModelClient
from shared.inference.catalog import (
    SHORTHAND_SOURCE,
    ModelCard,
    ModelCatalog,
    option_field,
)
from shared.inference.served import ServedModels
from shared.settings import Settings

# Providers of the app's own outside this package (``register``), by name.
_registered: dict[str, ModelProvider[Any]] = {}


@cache
def _package_providers() -> Mapping[str, ModelProvider[Any]]:
    found: dict[str, ModelProvider[Any]] = {}
    for module_info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        provider = getattr(module, "PROVIDER", None)
        if isinstance(provider, ModelProvider):
            found[provider.name] = provider
    return found


def providers() -> Mapping[str, ModelProvider[Any]]:
    """Every provider, by the name the catalog uses: this package's, then those
    registered."""
    return {**_package_providers(), **_registered}


def register(provider: ModelProvider[Any]) -> None:
    """Serve ``provider.name`` with ``provider``: one that lives outside this package (in
    a package of the app's own, say). Register before the services are built; a name
    already taken is refused."""
    if provider.name in providers():
        raise ValueError(f"there is a provider '{provider.name}' already")
    _registered[provider.name] = provider


def _refusal(catalog: ModelCatalog, card: ModelCard, field: str, message: str) -> CatalogError:
    if catalog.source == SHORTHAND_SOURCE and field == "provider":
        field = "ModelProvider"
    return catalog.fail(message, card.alias, field)


def _provider(catalog: ModelCatalog, card: ModelCard) -> ModelProvider[Any]:
    """``card``'s provider, when it is one of ours and runs the card's task."""
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
    return provider


def _options_problem(provider: ModelProvider[Any], error: Any, name: str) -> str:
    """One pydantic error of an alias's options (on option ``name``), in the catalog
    author's words."""
    if error["type"] == "missing":
        return f"provider '{provider.name}' needs {name}"
    if error["type"] == "extra_forbidden":
        known = ", ".join(provider.options.model_fields) or "none"
        return f"provider '{provider.name}' has no option '{name}' (its options: {known})"
    return str(error["msg"])


def _options(
    provider: ModelProvider[Any], catalog: ModelCatalog, card: ModelCard, settings_complete: bool
) -> ProviderOptions | None:
    """``card``'s options, validated by its provider's options model (CatalogError naming
    the option). None while the app is indexed (``settings_complete`` False) and a
    required option waits for an app setting that may still be set."""
    try:
        options: ProviderOptions = provider.options.model_validate(dict(card.options))
        return options
    except ValidationError as invalid:
        # A misspelt option first: its name says more than the option it left missing.
        errors = sorted(invalid.errors(), key=lambda error: error["type"] != "extra_forbidden")
    for error in errors:
        name = str(error["loc"][0]) if error["loc"] else ""
        if error["type"] == "missing" and name in card.unresolved:
            if not settings_complete:
                continue
            message = f"%{card.unresolved[name]}% names an app setting that is not set"
        else:
            message = _options_problem(provider, error, name)
        raise _refusal(catalog, card, option_field(name), message)
    return None


def _check_named_settings(
    provider: ModelProvider[Any], catalog: ModelCatalog, card: ModelCard
) -> None:
    """Refuse an option that names an app setting holding nothing (``setting_options``).
    Checked while the app is indexed too: the setting is the worker's environment, which
    holds every app setting from its start, and without it every request would fail."""
    lookup = catalog.app_setting
    if lookup is None:
        return
    for name in provider.options.setting_options:
        setting = card.options.get(name)
        if isinstance(setting, str) and not (lookup(setting) or "").strip():
            raise _refusal(catalog, card, option_field(name), unset_setting(setting))


def check_card(
    catalog: ModelCatalog, card: ModelCard, *, settings_complete: bool = True
) -> ProviderOptions | None:
    """``card``'s options, validated, when its provider can serve it; CatalogError when
    it cannot. ``settings_complete``: False while the app is indexed, when an unset app
    setting may still be set before the services are built (its options are checked
    then, and None is returned meanwhile)."""
    provider = _provider(catalog, card)
    options = _options(provider, catalog, card, settings_complete)
    _check_named_settings(provider, catalog, card)
    if options is not None and provider.check is not None:
        try:
            provider.check(card, options)
        except ProviderRefusal as refusal:
            raise _refusal(catalog, card, refusal.field, refusal.message) from None
    return options


def check_catalog(catalog: ModelCatalog, *, settings_complete: bool = True) -> None:
    """``check_card`` for every alias."""
    for card in catalog.cards.values():
        check_card(catalog, card, settings_complete=settings_complete)


def serve_catalog(catalog: ModelCatalog, settings: Settings) -> ServedModels:
    """The client of every alias (checked first: the settings are complete now)."""
    checked = {alias: check_card(catalog, card) for alias, card in catalog.cards.items()}
    clients: dict[str, ModelClient] = {}
    known = providers()
    for alias, card in catalog.cards.items():
        options = checked[alias]
        try:
            clients[alias] = known[card.provider].serve(card, options, settings)
        except ProviderRefusal as refusal:
            raise _refusal(catalog, card, refusal.field, refusal.message) from None
    return ServedModels(catalog, clients)
