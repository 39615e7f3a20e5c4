"""What a model provider is: a name the catalog uses, its options model, and a client.

Each provider is one module of this package that defines ``PROVIDER``: the registry
(``shared.adapters.models``) finds it there, so adding a provider is adding a module. The
provider's options (an alias's ``options`` in the catalog) are its own pydantic model: the
registry validates each alias's options against it and hands ``serve`` the result, so a
new option is a new field of that model and nowhere else (docs/providers.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from shared.inference import ModelClient
from shared.inference.catalog import ModelCard
from shared.settings import Settings


class ProviderOptions(BaseModel):
    """The base of every provider's options: frozen, and an option it does not declare is
    refused (a misspelt option is named, not ignored).

    Every alias may name its ``deployment``: aliases on one deployment share its capacity
    gate (``shared.inference.capacity``), whatever serves them. A provider that needs
    one (the chat providers) declares it required.

    ``setting_options``: the options whose value is the name of an app setting the
    provider reads when it serves (a key's: ``api_key_setting``). The registry refuses,
    when the app starts, an alias whose such option names a setting that is unset or
    empty, naming the file, the alias and the option.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    setting_options: ClassVar[tuple[str, ...]] = ()

    deployment: str | None = Field(None, min_length=1)


class NoOptions(ProviderOptions):
    """The options of a provider that takes none of its own."""


@dataclass(frozen=True)
class ModelProvider[OptionsT: ProviderOptions]:
    """One way of serving an alias.

    ``options``: the model of its options (required fields are what it cannot do
    without); ``serve``: the client of one alias, made when the services are built;
    ``tasks``: the tasks it runs (None: any); ``check``: further checks of an alias
    (a handler that must import, say), raising ``ProviderRefusal``, run when the app
    starts.
    """

    name: str
    options: type[OptionsT]
    serve: Callable[[ModelCard, OptionsT, Settings], ModelClient]
    tasks: frozenset[str] | None = None
    check: Callable[[ModelCard, OptionsT], None] | None = None


def unset_setting(name: str) -> str:
    """The refusal of an option naming app setting ``name``, which holds nothing."""
    return f"{name} names an app setting that is not set (or is empty)"
