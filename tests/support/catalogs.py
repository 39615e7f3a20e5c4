"""Model catalogs for tests: parsed and resolved as the app reads ``models.json``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shared.inference import ModelClient
from shared.inference.catalog import (
    ModelCatalog,
    parse_catalog,
    resolve_catalog,
    shorthand_catalog,
)
from shared.inference.served import ServedModel, ServedModels

SOURCE = "models.json"


def catalog(document: Mapping[str, Any], settings: Mapping[str, str] | None = None) -> ModelCatalog:
    """``document`` as the catalog file would say it, resolved against ``settings``."""
    values = dict(settings or {})
    return resolve_catalog(parse_catalog(json.dumps(document), SOURCE), SOURCE, values.get)


def local_catalog(*aliases: str) -> ModelCatalog:
    """Document-analysis aliases of the local analyzer (``local-analyzer`` by default)."""
    return shorthand_catalog(aliases or ("local-analyzer",), "local")


def served(client: ModelClient, alias: str = "local-analyzer") -> ServedModel:
    """``client`` serving ``alias`` of the local catalog (a test double in place of the
    local analyzer)."""
    return ServedModel(local_catalog(alias).cards[alias], client)


def served_models(client: ModelClient, *aliases: str) -> ServedModels:
    """``client`` serving every alias of the local catalog."""
    models = local_catalog(*aliases)
    return ServedModels(models, dict.fromkeys(models.aliases, client))


def priced_catalog_file(directory: Path, **entry: Any) -> str:
    """A catalog of the local analyzer priced at 2.5 and 10 a million tokens (USD)."""
    document = {
        "currency": "USD",
        "models": {
            "local-analyzer": {
                "provider": "local",
                "prices": {"input_per_million": 2.5, "output_per_million": 10},
                **entry,
            },
            "unpriced": {"provider": "local"},
        },
    }
    path = directory / "models.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return str(path)
