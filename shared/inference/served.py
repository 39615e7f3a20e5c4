"""The models a deployment serves: each alias of its catalog with the client that answers it.

The catalog says what each alias is (``catalog.ModelCard``); the adapters make its client
(``shared.adapters.models.serve``). ``ServedModels`` is what the use cases hold: intake
reads an alias's parameters and lanes from it, the processor the client and the task.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from shared.errors import ConfigurationError
from shared.inference import ModelClient
from shared.inference.catalog import ModelCard, ModelCatalog


@dataclass(frozen=True)
class ServedModel:
    card: ModelCard
    client: ModelClient


class ServedModels(Mapping[str, ServedModel]):
    """Alias -> served model, in the catalog's order."""

    def __init__(self, catalog: ModelCatalog, clients: Mapping[str, ModelClient]) -> None:
        missing = sorted(set(catalog.cards) - set(clients))
        if missing:
            raise ConfigurationError(f"no client serves {', '.join(missing)}")
        self.catalog = catalog
        self._served = {
            alias: ServedModel(card, clients[alias]) for alias, card in catalog.cards.items()
        }

    def __getitem__(self, alias: str) -> ServedModel:
        return self._served[alias]

    def __iter__(self) -> Iterator[str]:
        return iter(self._served)

    def __len__(self) -> int:
        return len(self._served)

    @property
    def aliases(self) -> tuple[str, ...]:
        return self.catalog.aliases

    def alias_for(self, setting: str, chosen: str | None) -> str:
        """The alias a door uses for work that names none: ``chosen`` (the door's setting,
        or DefaultModel), which must be served, else the catalog's first."""
        if chosen is None:
            return self.aliases[0]
        if chosen not in self._served:
            raise ConfigurationError(
                f"{setting} is '{chosen}', which {self.catalog.source} does not serve "
                f"(served: {', '.join(self.aliases)})"
            )
        return chosen
