"""A total that fades: what was counted lately, each amount weighing less as it ages.

The capacity gate counts the tokens a deployment served lately (how much went to high
priority) and the tenants' shares the tokens each tenant was served lately: both want
a sum over about the last ``seconds`` without keeping every amount, so each keeps one
number and the time it was last brought up to date, faded exponentially.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class FadingTotal:
    """Amounts counted over about the last ``seconds`` (an exponential fade)."""

    seconds: float
    _total: float = 0.0
    _at: float = 0.0

    def value(self, now: float) -> float:
        """The total faded to ``now``."""
        return self._total * math.exp(-max(0.0, now - self._at) / self.seconds)

    def add(self, amount: float, now: float) -> None:
        self._total, self._at = self.value(now) + amount, now

    def rate(self, now: float) -> float:
        """About the amount a second lately."""
        return self.value(now) / self.seconds

    def since(self, now: float) -> float:
        """The seconds since an amount was last counted."""
        return now - self._at
