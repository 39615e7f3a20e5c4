"""What a model provider is: a name the catalog uses, the fields it needs, and a client.

Each provider is one module of this package that defines ``PROVIDER``: the registry
(``shared.adapters.models``) finds it there, so adding a provider is adding a module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from shared.inference import ModelClient
from shared.inference.catalog import ModelCard
from shared.settings import Settings


@dataclass(frozen=True)
class ModelProvider:
    """One way of serving an alias.

    ``required``: the card's fields the provider cannot do without; ``tasks``: the tasks
    it runs (None: any); ``check``: further checks of an entry, raising
    ``ProviderRefusal`` (a handler that must import, say), run when the app starts;
    ``serve``: the client of one alias, made when the services are built.
    """

    name: str
    serve: Callable[[ModelCard, Settings], ModelClient]
    required: tuple[str, ...] = ()
    tasks: frozenset[str] | None = None
    check: Callable[[ModelCard], None] | None = None
