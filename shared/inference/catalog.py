"""The model catalog: the aliases a deployment serves, each a task and a model that runs it.

One JSON file ships with the app, ``models.json`` at the app root (the app setting
``ModelCatalog`` names another)::

    {
      "currency": "USD",
      "tasks": {
        "document-analysis": {"builtin": true},
        "sentiment": {"instructions": "...", "output_schema": {"type": "object", ...}}
      },
      "models": {
        "local-analyzer": {"provider": "local", "task": "document-analysis"},
        "gpt-5.1": {"provider": "azure_openai", "deployment": "%ChatDeployment%",
                    "batch_deployment": "gpt-5.1-batch",
                    "capacity": {"tokens_per_minute": 30000, "requests_per_minute": 180},
                    "prices": {"input_per_million": 1.25, "output_per_million": 10,
                               "batch_discount": 0.5}}
      }
    }

A request's ``model`` is an alias. Each alias names its ``provider`` (an adapter of
``shared.adapters.models``), its ``task``, and what every alias may have (``capacity``,
``parameters``, ``batch_deployment``, ``prices``, ``description``). Prices are in the one
``currency`` the catalog names, required once any alias has prices (``prices``). What the
provider needs to reach the model are its options: an ``options`` object, or (the first
catalogs' form, still read) the seven fields of ``FLAT_OPTIONS`` beside the alias's own.
The catalog holds the options as written, ``%Name%`` resolved; the provider's options
model checks them (``check_catalog``).
``%Name%`` in an entry's values is the app setting of that name, as in binding expressions;
a reference to a setting that is unset or empty leaves an optional field unset, and a
required one names the setting in its error.

The catalog is read when the app starts (``function_app.py`` checks the file, so a broken
catalog stops the indexing) and resolved against the app settings when the services are
built. Every refusal names the file, the alias or task, and the field. A key given twice
in one object (an alias, a task, a field) is refused: JSON would keep the last without a
word. The resolved catalog keeps the settings it was resolved against, so that a
provider's option naming an app setting (``api_key_setting``) is refused at start when
that setting holds nothing.

Existing settings keep working: without ``ModelCatalog``, ``AllowedModels`` and
``ModelProvider`` build a catalog of one document-analysis alias per allowed model,
served by that provider with the alias as its deployment (``shorthand_catalog``).
``GlobalBatch__deployments`` adds batch deployments to the aliases of either.

No provider is named here: the catalog holds each entry's options; the adapters know what
each provider needs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from shared.contracts import CURRENCY_PATTERN, DOCUMENT_ANALYSIS, ModelName
from shared.errors import CatalogError, ConfigurationError
from shared.inference.json_schemas import check_object_schema
from shared.inference.parameters import (
    GENERATION_PARAMETERS,
    SAMPLING_PARAMETERS_ONLY,
    ParameterDeclaration,
    SchemaParameters,
)
from shared.inference.prices import Prices, PricesEntry, prices_of
from shared.inference.tasks import BUILTIN_TASKS, SchemaTask, Task
from shared.repeated_keys import read_catalog_json
from shared.settings import Settings

# The folder of function_app.py: relative catalog paths start here, as the Functions host
# runs the app from its root.
APP_ROOT: Final = Path(__file__).resolve().parents[2]
DEFAULT_CATALOG: Final = "models.json"
SHORTHAND_SOURCE: Final = "AllowedModels/ModelProvider"
DEFAULT_PROVIDER: Final = "local"
# How the service enforces a minute's quota, which says what its remaining-budget headers
# mean: ``window`` (Azure OpenAI: over 10-second windows; the headers count the minute, a
# sixth of it usable at once) or ``minute`` (a sliding minute, as other OpenAI-compatible
# services limit: the headers say what may go now).
Limiter = Literal["window", "minute"]
_REFERENCE: Final = re.compile(r"%([A-Za-z_][A-Za-z0-9_.:-]*)%")

TaskName = Annotated[
    str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
]


# --- the file, as written -------------------------------------------------------------------


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TaskEntry(_Entry):
    builtin: bool = False
    description: str | None = None
    instructions: str | None = Field(None, min_length=1)
    output_schema: dict[str, Any] | None = None


class CapacityEntry(_Entry):
    """The deployment's quota (``tokens_per_minute``: Azure's capacity times 1,000), and
    the shape of the service's limiter (``Limiter``)."""

    tokens_per_minute: int | str | None = None
    requests_per_minute: int | str | None = None
    limiter: Limiter = "window"

    @field_validator("tokens_per_minute", "requests_per_minute")
    @classmethod
    def _count_or_reference(cls, value: int | str | None) -> int | str | None:
        if isinstance(value, bool) or (isinstance(value, int) and value < 0):
            raise ValueError("a capacity is a whole number of 0 or more")
        if isinstance(value, str) and not _REFERENCE.fullmatch(value):
            raise ValueError("a capacity is a whole number, or a %Setting% reference")
        return value


# The provider options the first catalogs wrote beside an alias's own fields. Still read
# there, and routed to ``options``: today's files keep loading and meaning the same. A
# provider's other options go in ``options``, so that a misspelt field is still refused here.
FLAT_OPTIONS: Final = (
    "deployment",
    "endpoint",
    "api_key_setting",
    "api_version",
    "handler",
    "response_format",
    "timeout_seconds",
)


class ModelEntry(_Entry):
    """What every alias has, and its provider's ``options`` (checked by the provider)."""

    provider: str = Field(min_length=1)
    task: TaskName = DOCUMENT_ANALYSIS
    description: str | None = None
    parameters: dict[str, Any] | None = None
    batch_deployment: str | None = Field(None, min_length=1)
    capacity: CapacityEntry | None = None
    prices: PricesEntry | None = None
    options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _flat_options_into_options(cls, value: Any) -> Any:
        if not isinstance(value, dict) or not any(name in value for name in FLAT_OPTIONS):
            return value
        entry = {name: given for name, given in value.items() if name not in FLAT_OPTIONS}
        options = entry.get("options", {})
        if not isinstance(options, dict):
            return value  # the field's own check names it
        twice = sorted(name for name in FLAT_OPTIONS if name in value and name in options)
        if twice:
            raise ValueError(f"{twice[0]} is given twice: beside the alias's fields and in options")
        flat = {name: given for name, given in value.items() if name in FLAT_OPTIONS}
        return {**entry, "options": {**options, **flat}}


class CatalogDocument(_Entry):
    schema_: str | None = Field(None, alias="$schema")  # for editors; not read
    currency: str | None = None  # of every alias's prices
    tasks: dict[TaskName, TaskEntry] = Field(default_factory=dict)
    models: dict[ModelName, ModelEntry] = Field(min_length=1)

    @field_validator("currency")
    @classmethod
    def _currency_code(cls, value: str | None) -> str | None:
        if value is not None and not CURRENCY_PATTERN.fullmatch(value):
            raise ValueError("a currency is an ISO 4217 code: three capital letters, such as USD")
        return value


# --- the catalog, resolved ---------------------------------------------------------------


@dataclass(frozen=True)
class Capacity:
    tokens_per_minute: int | None = None
    requests_per_minute: int | None = None
    limiter: Limiter = "window"


@dataclass(frozen=True)
class ModelCard:
    """One alias, resolved: everything a provider needs to serve it."""

    alias: str
    provider: str
    task: Task
    parameters: ParameterDeclaration = GENERATION_PARAMETERS
    batch_deployment: str | None = None
    capacity: Capacity | None = None
    prices: Prices | None = None  # None: what its calls cost is not known
    # The provider's options as written, ``%Name%`` resolved; its options model checks them.
    options: Mapping[str, Any] = field(default_factory=dict)
    # Fields and options left unset because the app setting they name is unset or empty.
    unresolved: Mapping[str, str] = field(default_factory=dict)

    @property
    def deployment(self) -> str | None:
        """The name the model is deployed under, when its provider has deployments (the
        capacity gate and Global Batch group aliases by it)."""
        return self.text_option("deployment")

    def text_option(self, name: str) -> str | None:
        """The option ``name`` when it is text, else None."""
        value = self.options.get(name)
        return value if isinstance(value, str) else None


def option_field(name: str) -> str:
    """Where an option is written, as a refusal names it (``options.name`` unless it is
    one of the first catalogs' flat fields)."""
    return name if name in FLAT_OPTIONS else f"options.{name}"


Lookup = Callable[[str], str | None]  # an app setting's value, None when unset


@dataclass(frozen=True, eq=False)
class ModelCatalog:
    """The aliases a deployment serves (``source``: the file, or the shorthand settings).
    Built once per process, it is equal only to itself (and so hashable: documents
    derived from it, such as the OpenAPI document, are cached by it).

    ``app_setting``: the app settings it was resolved against, so that the providers'
    checks at start can refuse an option naming a setting that holds nothing (an
    ``api_key_setting``); None when they are not known (then serving checks it)."""

    source: str
    cards: Mapping[str, ModelCard]
    app_setting: Lookup | None = None

    @property
    def aliases(self) -> tuple[str, ...]:
        return tuple(self.cards)

    def card(self, alias: str) -> ModelCard | None:
        return self.cards.get(alias)

    @property
    def currency(self) -> str | None:
        """The currency of the aliases' prices (one per catalog); None when none has any."""
        return next((c.prices.currency for c in self.cards.values() if c.prices), None)

    @property
    def batch_deployments(self) -> dict[str, str]:
        """Alias -> Global Batch deployment, for the aliases that may take ``mode=batch``."""
        return {
            alias: card.batch_deployment
            for alias, card in self.cards.items()
            if card.batch_deployment
        }

    def fail(
        self, message: str, alias: str | None = None, field: str | None = None
    ) -> CatalogError:
        """A refusal of this catalog, naming where (``alias``, ``field``)."""
        return CatalogError(
            message, file=self.source, entry=f"model '{alias}'" if alias else None, field=field
        )


# --- reading the file ---------------------------------------------------------------------


def _where(location: tuple[int | str, ...]) -> tuple[str | None, str | None]:
    """The entry and field a pydantic error location points at."""
    parts = [str(part) for part in location if part != "[key]"]  # [key]: the name itself
    if len(parts) >= 2 and parts[0] in ("models", "tasks"):
        kind = "model" if parts[0] == "models" else "task"
        return f"{kind} '{parts[1]}'", ".".join(parts[2:]) or None
    return None, ".".join(parts) or None


_OBJECT_EXPECTED = frozenset({"model_type", "dict_type", "model_attributes_type"})


def _in_user_words(kind: str, message: str, value: object) -> str:
    """A validation error as the catalog's author reads it: JSON's words, never the name
    of a class of ours (pydantic says "instance of CatalogDocument")."""
    if kind in _OBJECT_EXPECTED and "CatalogDocument" in message:
        return (
            f'the catalog must be a JSON object with "tasks" and "models", not {_json_kind(value)}'
        )
    if kind in _OBJECT_EXPECTED:
        return f"must be a JSON object, not {_json_kind(value)}"
    return re.sub(r" or instance of \w+", "", message)


def _json_kind(value: object) -> str:
    """What a JSON value is, with its article."""
    if isinstance(value, bool):
        return "true or false"
    if value is None:
        return "null"
    kinds = ((list, "an array"), (str, "a string"), (int | float, "a number"))
    return next((name for kind, name in kinds if isinstance(value, kind)), "an object")


def parse_catalog(text: str, source: str) -> CatalogDocument:
    """The catalog file's document, checked: JSON (an alias, a task or any key given twice
    in one object is refused), shape, tasks, schemas, and that every alias names a task.
    Provider-specific fields are the adapters' to check."""
    raw = read_catalog_json(
        text, source, error=CatalogError, locate=_where, kinds={"models": "alias", "tasks": "task"}
    )
    try:
        document = CatalogDocument.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        entry, location = _where(tuple(first["loc"]))
        message = _in_user_words(first["type"], first["msg"], first.get("input"))
        raise CatalogError(message, file=source, entry=entry, field=location) from None
    for name, task in document.tasks.items():
        _check_task(source, name, task)
    for alias, model in document.models.items():
        where = f"model '{alias}'"
        if model.task not in document.tasks and model.task not in BUILTIN_TASKS:
            known = sorted(set(document.tasks) | set(BUILTIN_TASKS))
            raise CatalogError(
                f"unknown task '{model.task}'; the catalog's tasks: {', '.join(known)}",
                file=source,
                entry=where,
                field="task",
            )
        if model.prices is not None and document.currency is None:
            raise CatalogError(
                'prices need the catalog\'s "currency" (an ISO 4217 code such as "USD",'
                " at the top of the file)",
                file=source,
                entry=where,
                field="prices",
            )
        if model.parameters is not None:
            problem = check_object_schema(model.parameters)
            if problem is None and model.parameters.get("additionalProperties") is not False:
                problem = (
                    'the parameters schema must close its properties ("additionalProperties":'
                    " false), so that a misspelt parameter is refused at the door"
                )
            if problem:
                raise CatalogError(problem, file=source, entry=where, field="parameters")
    return document


def _check_task(source: str, name: str, task: TaskEntry) -> None:
    where = f"task '{name}'"
    if task.builtin:
        if name not in BUILTIN_TASKS:
            raise CatalogError(
                f"there is no built-in task of this name; built-in: {', '.join(BUILTIN_TASKS)}",
                file=source,
                entry=where,
                field="builtin",
            )
        if task.instructions or task.output_schema:
            raise CatalogError(
                "a built-in task takes no instructions or output_schema",
                file=source,
                entry=where,
                field="instructions" if task.instructions else "output_schema",
            )
        return
    if name in BUILTIN_TASKS:
        raise CatalogError(
            'this is the built-in task\'s name: declare it {"builtin": true}',
            file=source,
            entry=where,
            field="builtin",
        )
    if not task.instructions:
        raise CatalogError(
            "a task needs instructions", file=source, entry=where, field="instructions"
        )
    if task.output_schema is None:
        raise CatalogError(
            "a task needs an output_schema", file=source, entry=where, field="output_schema"
        )
    if problem := check_object_schema(task.output_schema):
        raise CatalogError(problem, file=source, entry=where, field="output_schema")


def read_catalog_file(path: Path) -> CatalogDocument:
    """``parse_catalog`` of the file at ``path`` (CatalogError when it cannot be read)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise CatalogError(f"cannot be read: {error.strerror}", file=shown(path)) from None
    return parse_catalog(text, shown(path))


# --- resolving against the app settings ---------------------------------------------------


def _resolve_text(value: str, lookup: Lookup) -> tuple[str | None, str | None]:
    """``value`` with its ``%Name%`` references replaced, and the setting that left it
    unset (a value that is a reference to an unset or empty setting)."""
    whole = _REFERENCE.fullmatch(value)
    if whole:
        resolved = (lookup(whole.group(1)) or "").strip()
        return (resolved, None) if resolved else (None, whole.group(1))

    def one(match: re.Match[str]) -> str:
        resolved = lookup(match.group(1))
        if not resolved:
            raise KeyError(match.group(1))
        return resolved

    return _REFERENCE.sub(one, value), None


def _capacity(
    entry: CapacityEntry, lookup: Lookup, fail: Callable[[str, str], Exception]
) -> Capacity:
    def number(name: str, value: int | str | None) -> int | None:
        if value is None or isinstance(value, int):
            return value
        text, _ = _resolve_text(value, lookup)
        if text is None:
            return None
        try:
            parsed = int(text)
        except ValueError:
            raise fail(f"capacity.{name}", f"{value} is {text!r}, not a whole number") from None
        if parsed < 0:
            raise fail(f"capacity.{name}", f"{value} is {parsed}; it must be 0 or more")
        return parsed

    return Capacity(
        number("tokens_per_minute", entry.tokens_per_minute),
        number("requests_per_minute", entry.requests_per_minute),
        entry.limiter,
    )


def _parameters(alias: str, model: ModelEntry) -> ParameterDeclaration:
    """The alias's own declaration, else the default of its task's kind."""
    if model.parameters is not None:
        return SchemaParameters(f"{alias}.parameters", model.parameters)
    return GENERATION_PARAMETERS if model.task in BUILTIN_TASKS else SAMPLING_PARAMETERS_ONLY


def _resolve_options(
    options: Mapping[str, Any],
    lookup: Lookup,
    fail: Callable[[str, str], CatalogError],
    where: Callable[[str], str] = option_field,
) -> tuple[dict[str, Any], dict[str, str]]:
    """The values with ``%Name%`` resolved in their text, and those left unset (name ->
    the unset setting that left it so); ``where`` names a value's field in a refusal."""
    resolved: dict[str, Any] = {}
    unresolved: dict[str, str] = {}
    for name, raw in options.items():
        if not isinstance(raw, str):
            resolved[name] = raw
            continue
        try:
            value, missing = _resolve_text(raw, lookup)
        except KeyError as setting:
            raise fail(
                where(name), f"{raw} names app setting {setting}, which is not set"
            ) from None
        if missing:
            unresolved[name] = missing
        else:
            resolved[name] = value
    return resolved, unresolved


def resolve_catalog(document: CatalogDocument, source: str, lookup: Lookup) -> ModelCatalog:
    """The catalog's aliases with ``%Name%`` resolved from the app settings (``lookup``,
    which the catalog keeps for the providers' checks of options that name a setting)."""
    tasks: dict[str, Task] = dict(BUILTIN_TASKS)
    for name, entry in document.tasks.items():
        if not entry.builtin:  # parse_catalog made sure both are there
            tasks[name] = SchemaTask(name, entry.instructions or "", entry.output_schema or {})
    cards: dict[str, ModelCard] = {}
    for alias, model in document.models.items():

        def fail(field: str, message: str, alias: str = alias) -> CatalogError:
            return CatalogError(message, file=source, entry=f"model '{alias}'", field=field)

        given = {"batch_deployment": model.batch_deployment} if model.batch_deployment else {}
        resolved, unresolved = _resolve_options(given, lookup, fail, where=str)
        options, unset_options = _resolve_options(model.options, lookup, fail)
        cards[alias] = ModelCard(
            alias=alias,
            provider=model.provider,
            task=tasks[model.task],
            parameters=_parameters(alias, model),
            batch_deployment=resolved.get("batch_deployment"),
            capacity=_capacity(model.capacity, lookup, fail) if model.capacity else None,
            prices=prices_of(model.prices, document.currency)
            if model.prices is not None and document.currency is not None
            else None,
            options=options,
            unresolved=unresolved | unset_options,
        )
    return ModelCatalog(source, cards, lookup)


def shorthand_catalog(
    aliases: tuple[str, ...], provider: str | None, capacity: Capacity | None = None
) -> ModelCatalog:
    """``AllowedModels`` and ``ModelProvider`` as a catalog: each allowed model a
    document-analysis alias of that provider (the local analyzer when unset), deployed
    under its own name, with the quota of ``ModelCapacity__*`` when set."""
    chosen = provider or DEFAULT_PROVIDER
    task = BUILTIN_TASKS[DOCUMENT_ANALYSIS]

    return ModelCatalog(
        SHORTHAND_SOURCE,
        {
            alias: ModelCard(alias, chosen, task, capacity=capacity, options={"deployment": alias})
            for alias in aliases
        },
    )


def with_batch_deployments(catalog: ModelCatalog, pairs: Mapping[str, str]) -> ModelCatalog:
    """``catalog`` with the batch deployments of ``GlobalBatch__deployments`` added."""
    if not pairs:
        return catalog
    unknown = sorted(set(pairs) - set(catalog.cards))
    if unknown:
        raise ConfigurationError(
            f"GlobalBatch__deployments names models that {catalog.source} does not serve: "
            f"{', '.join(unknown)} (served: {', '.join(catalog.aliases)})"
        )
    cards = dict(catalog.cards)
    for alias, deployment in pairs.items():
        given = cards[alias].batch_deployment
        if given and given != deployment:
            raise ConfigurationError(
                f"model '{alias}' has batch_deployment '{given}' in {catalog.source} and "
                f"'{deployment}' in GlobalBatch__deployments: keep one"
            )
        cards[alias] = replace(cards[alias], batch_deployment=deployment)
    return replace(catalog, cards=cards)


# --- which catalog a deployment serves ------------------------------------------------------


def catalog_file(settings: Settings) -> Path | None:
    """The catalog file this deployment reads: ``ModelCatalog`` (relative to the app
    root), else ``models.json`` at the app root unless the shorthand settings are in use."""
    if settings.models.catalog:
        path = Path(settings.models.catalog)
        return path if path.is_absolute() else APP_ROOT / path
    if settings.models.uses_shorthand:
        return None
    default = APP_ROOT / DEFAULT_CATALOG
    return default if default.is_file() else None


def shown(path: Path) -> str:
    """A catalog path as messages show it: relative to the app root when inside it."""
    try:
        return str(path.relative_to(APP_ROOT))
    except ValueError:
        return str(path)


def catalog_for(settings: Settings, lookup: Lookup | None = None) -> ModelCatalog:
    """The catalog of this deployment, resolved against its app settings (``lookup``:
    another source of them), with the batch deployments of ``GlobalBatch__deployments``
    added."""
    path = catalog_file(settings)
    if path is None:
        quota = Capacity(
            settings.model_capacity.tokens_per_minute, settings.model_capacity.requests_per_minute
        )
        capacity = quota if quota.tokens_per_minute or quota.requests_per_minute else None
        catalog = shorthand_catalog(settings.models.allowed, settings.models.provider, capacity)
    else:
        catalog = resolve_catalog(
            read_catalog_file(path), shown(path), lookup or settings.app_setting
        )
    return with_batch_deployments(catalog, settings.batch_deployments)
