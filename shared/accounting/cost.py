"""What a request's tokens cost: its usage at its alias's prices, on the lane that ran it.

Pure: ``request_cost`` reads a ``TokenUsage`` and the alias's ``Prices`` (the model
catalog's ``prices``, ``shared.inference.prices``) and answers a ``Cost`` in the
catalog's currency. The queue lane pays the online price; the Global Batch lane that
price less its ``batch_discount``. An alias without prices, or a call that reported no
usage, has no known cost: None, never 0, so that a sum of costs cannot pass an unknown
for free.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any, Final

from shared.accounting.ledger import Spend
from shared.contracts import Cost, ProcessingMode, TokenUsage
from shared.inference.capacity import answer_allowance, prompt_tokens
from shared.inference.catalog import ModelCard
from shared.inference.prices import Prices

# Decimal, not float: a price such as 0.15 has no exact binary form, and a float's error
# would grow in a sum over many requests. An amount is rounded (half to even) to 10
# places, once, after the whole price is applied: tokens x price / 1,000,000 is exact
# there for prices written with up to 4 decimal places (a discount's product may go finer,
# and loses at most half of 10^-10), far finer than any currency's smallest unit; and an
# amount below 100,000 then has at most 15 significant digits, which the JSON number
# (a double) it is written as carries exactly.
COST_DECIMAL_PLACES: Final = 10
_QUANTUM: Final = Decimal(1).scaleb(-COST_DECIMAL_PLACES)
_MILLION: Final = Decimal(1_000_000)


def request_cost(
    usage: TokenUsage | None, prices: Prices | None, lane: ProcessingMode
) -> Cost | None:
    """What ``usage`` costs at ``prices`` on ``lane``; None when either is unknown."""
    if usage is None or prices is None:
        return None
    online = (
        usage.input_tokens * prices.input_per_million
        + usage.output_tokens * prices.output_per_million
    ) / _MILLION
    amount = online * (1 - prices.batch_discount) if lane is ProcessingMode.BATCH else online
    return Cost(
        amount=amount.quantize(_QUANTUM, rounding=ROUND_HALF_EVEN), currency=prices.currency
    )


def estimated_spend(
    card: ModelCard, text_chars: int, parameters: Mapping[str, Any], lane: ProcessingMode
) -> Spend:
    """What a request is held at against its tenant's budgets before it runs: its prompt
    at four characters a token and the longest answer it allows (``max_tokens``, else
    ``DEFAULT_ANSWER_TOKENS``), as the capacity gate counts a call; costed at its
    alias's prices on ``lane`` (nothing when the alias has none)."""
    prompt = prompt_tokens(len(card.task.instructions(parameters)) + text_chars)
    answer = answer_allowance(parameters)
    cost = request_cost(
        TokenUsage(input_tokens=prompt, output_tokens=answer, total_tokens=prompt + answer),
        card.prices,
        lane,
    )
    return Spend(prompt + answer, cost.amount if cost is not None else Decimal(0))
