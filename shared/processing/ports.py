"""Ports the processing capability needs from others, declared here so that it imports
none of them (the rings test keeps processing from importing ``global_batch``).

``BatchStaging`` is how the pipeline hands a batch-mode request to the Global Batch lane
(``global_batch.staging.BatchStager`` implements it; ``entrypoints.bootstrap`` wires it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from shared.contracts import RequestMessage


class BatchStaging(Protocol):
    """Stages batch-mode requests for the next Global Batch file of their deployment."""

    def stage(
        self,
        request: RequestMessage,
        correlation_id: str,
        content: bytes,
        media_type: str,
        properties: Mapping[str, object],
    ) -> bool:
        """Stage ``request`` (its input already read); False when it was staged before."""
        ...

    def withdraw(self, request: RequestMessage) -> None:
        """Take back ``request``'s staged line (its job ended before it went out)."""
        ...
