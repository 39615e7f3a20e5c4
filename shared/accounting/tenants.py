"""The tenant catalog: each tenant's share of a deployment, its budget and its models.

Tenants share every deployment of the model catalog. What each may take is written in
one JSON file, ``tenants.json`` at the app root (the app setting ``TenantCatalog`` names
another)::

    {
      "default": {"weight": 1},
      "tenants": {
        "support": {"weight": 3, "models": ["gpt-4o-mini"]},
        "trial": {"budget": {"tokens_per_day": 3000, "tokens_per_month": 50000,
                             "cost_per_month": 20}}
      }
    }

``weight`` is a tenant's share of each deployment under contention (a positive number,
1 unless given); ``budget`` what it may spend per UTC day and month (tokens, cost);
``models`` the aliases it may use (every alias when left out). A tenant the file does
not name gets ``default``, itself optional: weight 1, no budget, every model. Without
the file (and without ``TenantCatalog``) every tenant gets that; ``TenantCatalog``
naming a file that is not there stops the start, as a missing model catalog does.

The file is checked when the app starts, as ``models.json`` is: a field this module does
not know, a weight or budget that is not positive, a tenant id the app would never see
(``TENANT_ID_PATTERN``), a tenant or key given twice (JSON would keep the last without
a word) and, once the model catalog is loaded, an alias it does not serve, each stop the
start with the file, the tenant and the field named.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Final

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from shared.contracts import TENANT_ID_PATTERN, ModelName
from shared.errors import TenantCatalogError
from shared.inference.catalog import APP_ROOT, ModelCatalog, shown
from shared.repeated_keys import read_catalog_json
from shared.settings import Settings

DEFAULT_TENANT_CATALOG: Final = "tenants.json"
SETTING: Final = "TenantCatalog"

TenantId = Annotated[str, StringConstraints(pattern=TENANT_ID_PATTERN.pattern)]
# Strict: JSON's "3000" or true is a mistake in a budget, not a number to coerce.
PositiveCount = Annotated[int, Field(gt=0, strict=True)]
PositiveNumber = Annotated[float, Field(gt=0, strict=True, allow_inf_nan=False)]


# --- the file, as written -------------------------------------------------------------------


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BudgetEntry(_Entry):
    tokens_per_day: PositiveCount | None = None
    tokens_per_month: PositiveCount | None = None
    cost_per_month: PositiveNumber | None = None


class PolicyEntry(_Entry):
    weight: PositiveNumber = 1.0
    budget: BudgetEntry | None = None
    models: tuple[ModelName, ...] | None = None


class TenantDocument(_Entry):
    schema_: str | None = Field(None, alias="$schema")  # for editors; not read
    default: PolicyEntry = Field(default_factory=PolicyEntry)
    tenants: dict[TenantId, PolicyEntry] = Field(default_factory=dict)


# --- the catalog, read ------------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    """What a tenant may spend: tokens per UTC day and month, cost per UTC month (None:
    no limit of that kind)."""

    tokens_per_day: int | None = None
    tokens_per_month: int | None = None
    cost_per_month: float | None = None


@dataclass(frozen=True)
class TenantPolicy:
    """One tenant's terms: its weight under contention, its budget (None: none) and the
    aliases it may use (None: every alias the deployment serves)."""

    weight: float = 1.0
    budget: Budget | None = None
    models: frozenset[str] | None = None

    def may_use(self, alias: str) -> bool:
        return self.models is None or alias in self.models


EVERYONE_EQUAL: Final = TenantPolicy()


@dataclass(frozen=True, eq=False)
class TenantCatalog:
    """Every tenant's policy (``source``: the file, None when there is none). Built once
    per process, it is equal only to itself, as the model catalog is."""

    source: str | None = None
    default: TenantPolicy = EVERYONE_EQUAL
    tenants: Mapping[str, TenantPolicy] = field(default_factory=dict)

    def policy(self, tenant_id: str) -> TenantPolicy:
        """The tenant's own policy, else the default one."""
        return self.tenants.get(tenant_id, self.default)

    def check_models(self, models: ModelCatalog) -> None:
        """TenantCatalogError naming the first tenant whose ``models`` lists an alias
        ``models`` does not serve (such a tenant would be refused work it was promised),
        or whose ``cost_per_month`` has no prices to count against (no alias of
        ``models`` has any: the budget would never be spent)."""
        named = [("default", self.default)]
        named += [(f"tenant '{tenant}'", policy) for tenant, policy in self.tenants.items()]
        for entry, policy in named:
            cost_budget = policy.budget is not None and policy.budget.cost_per_month is not None
            if cost_budget and models.currency is None:
                raise TenantCatalogError(
                    f"a cost budget needs prices: no alias of {models.source} has "
                    '"prices" (nor the catalog a "currency"), so every request would '
                    "cost nothing against it",
                    file=self.source or DEFAULT_TENANT_CATALOG,
                    entry=entry,
                    field="budget.cost_per_month",
                )
            unknown = sorted((policy.models or frozenset()) - set(models.aliases))
            if unknown:
                raise TenantCatalogError(
                    f"'{unknown[0]}' is not an alias of {models.source}; "
                    f"its aliases: {', '.join(models.aliases)}",
                    file=self.source or DEFAULT_TENANT_CATALOG,
                    entry=entry,
                    field="models",
                )


# --- reading the file ---------------------------------------------------------------------


def _where(location: tuple[int | str, ...]) -> tuple[str | None, str | None]:
    """The entry (a tenant, or the default) and the field a location points at."""
    parts = [str(part) for part in location if part != "[key]"]  # [key]: the name itself
    if len(parts) >= 2 and parts[0] == "tenants":
        return f"tenant '{parts[1]}'", ".".join(parts[2:]) or None
    if parts and parts[0] == "default":
        return "default", ".".join(parts[1:]) or None
    return None, ".".join(parts) or None


def _fields_of(entry: str | None, place: str | None) -> str:
    """The fields the object holding an unknown one takes (the document's, a policy's
    or a budget's), for its refusal."""
    if entry is None:
        names = ["$schema", "default", "tenants"]
    elif place is not None and place.startswith("budget."):
        names = list(BudgetEntry.model_fields)
    else:
        names = list(PolicyEntry.model_fields)
    return ", ".join(names)


_OBJECT_EXPECTED = frozenset({"model_type", "dict_type", "model_attributes_type"})


def _refusal(error: ValidationError, source: str) -> TenantCatalogError:
    """The first validation error in the author's words, naming the tenant and field."""
    first = error.errors()[0]
    location = tuple(first["loc"])
    entry, place = _where(location)
    if location[-1:] == ("[key]",) and location[0] == "tenants":
        message = (
            "not a valid tenant id: 1 to 128 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit"
        )
    elif first["type"] in _OBJECT_EXPECTED:
        message = "must be a JSON object"
        if not location:
            message = 'the tenant catalog must be a JSON object with "tenants"'
    elif first["type"] == "extra_forbidden":
        message = f"unknown field; the fields here: {_fields_of(entry, place)}"
    else:
        message = re.sub(r" or instance of \w+", "", first["msg"])
    return TenantCatalogError(message, file=source, entry=entry, field=place)


def _policy(entry: PolicyEntry) -> TenantPolicy:
    budget = entry.budget
    return TenantPolicy(
        weight=entry.weight,
        budget=Budget(budget.tokens_per_day, budget.tokens_per_month, budget.cost_per_month)
        if budget is not None
        else None,
        models=frozenset(entry.models) if entry.models is not None else None,
    )


def parse_tenant_catalog(text: str, source: str) -> TenantCatalog:
    """The tenant catalog of ``text`` (the file ``source``), checked; its models are
    checked against the model catalog by ``check_models``."""
    raw = read_catalog_json(
        text, source, error=TenantCatalogError, locate=_where, kinds={"tenants": "tenant"}
    )
    try:
        document = TenantDocument.model_validate(raw)
    except ValidationError as error:
        raise _refusal(error, source) from None
    return TenantCatalog(
        source=source,
        default=_policy(document.default),
        tenants={tenant: _policy(entry) for tenant, entry in document.tenants.items()},
    )


def read_tenant_catalog_file(path: Path, named_by_setting: bool = False) -> TenantCatalog:
    """``parse_tenant_catalog`` of the file at ``path`` (TenantCatalogError when it cannot
    be read; ``named_by_setting``: the app setting chose it, and the refusal says so)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        setting = f" (the app setting {SETTING} names it)" if named_by_setting else ""
        raise TenantCatalogError(f"no such file{setting}", file=shown(path)) from None
    except OSError as error:
        raise TenantCatalogError(f"cannot be read: {error.strerror}", file=shown(path)) from None
    return parse_tenant_catalog(text, shown(path))


# --- which catalog a deployment reads -----------------------------------------------------


def tenant_catalog_for(
    settings: Settings, models: ModelCatalog | None = None, root: Path = APP_ROOT
) -> TenantCatalog:
    """The tenant catalog of this deployment: the file ``TenantCatalog`` names (relative
    to ``root``, the app root), else ``tenants.json`` there when it exists, else every
    tenant equal. Checked against ``models`` when given."""
    named = settings.tenancy.catalog
    if named:
        path = Path(named)
        catalog = read_tenant_catalog_file(
            path if path.is_absolute() else root / path, named_by_setting=True
        )
    elif (root / DEFAULT_TENANT_CATALOG).is_file():
        catalog = read_tenant_catalog_file(root / DEFAULT_TENANT_CATALOG)
    else:
        catalog = TenantCatalog()
    if models is not None:
        catalog.check_models(models)
    return catalog
