"""An alias's prices in the model catalog: as written in ``models.json``, and as read.

The catalog names one currency at its top (``"currency": "USD"``, an ISO 4217 code); an
alias may give its prices in it::

    "gpt-5.1": {"provider": "azure_openai", ...,
                "prices": {"input_per_million": 1.25, "output_per_million": 10,
                           "batch_discount": 0.5}}

``input_per_million`` and ``output_per_million`` are what a million input (prompt) and
output (completion) tokens cost on the queue lane; ``batch_discount`` is the fraction of
that price the Global Batch lane takes off, input and output alike (0.5: half price, as
Azure OpenAI's Global Batch is; 0, the default: the same price). An alias without
``prices`` has no known cost (``shared.accounting.cost``).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

# Strict, as the tenant catalog's numbers: JSON's "0.15" or true is a mistake in a price,
# not a number to coerce.
Price = Annotated[float, Field(ge=0, strict=True, allow_inf_nan=False)]
Discount = Annotated[float, Field(ge=0, lt=1, strict=True, allow_inf_nan=False)]


class PricesEntry(BaseModel):
    """An alias's ``prices``, as written (per million tokens, in the catalog's currency)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_per_million: Price
    output_per_million: Price
    batch_discount: Discount = 0.0


@dataclass(frozen=True)
class Prices:
    """An alias's prices, read: per million tokens in ``currency`` on the queue lane, and
    the fraction the Global Batch lane takes off. Decimals of the numbers as written
    (0.15 is 0.15, not the binary float nearest to it)."""

    currency: str
    input_per_million: Decimal
    output_per_million: Decimal
    batch_discount: Decimal = Decimal(0)


def prices_of(entry: PricesEntry, currency: str) -> Prices:
    """The prices ``entry`` writes, in the catalog's ``currency``."""
    return Prices(
        currency=currency,
        input_per_million=_as_written(entry.input_per_million),
        output_per_million=_as_written(entry.output_per_million),
        batch_discount=_as_written(entry.batch_discount),
    )


def _as_written(number: float) -> Decimal:
    """The decimal a JSON number was written as: a float's shortest repr is the text it
    was read from (up to 15 significant digits)."""
    return Decimal(repr(number))
