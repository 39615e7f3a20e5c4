"""The in-memory documents port, watched: for the tests of what a report reads."""

from __future__ import annotations

import threading

from shared.adapters.in_memory import InMemoryDocuments
from shared.documents import Document


class ReadCounting(InMemoryDocuments):
    """The in-memory documents, noting the name of every document read."""

    def __init__(self) -> None:
        super().__init__()
        self.read_names: list[str] = []
        self._noting = threading.Lock()

    def load(self, container: str, name: str) -> tuple[Document, str] | None:
        with self._noting:
            self.read_names.append(name)
        return super().load(container, name)
