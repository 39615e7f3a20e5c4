"""docs/providers.md runs: its code blocks, in order, register the page's provider, serve
a request through a catalog using it, and print what the page says they print."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Any

import pytest

import shared.adapters.models as registry
from shared.adapters.models import providers

PAGE = Path(__file__).resolve().parents[2] / "docs" / "providers.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def blocks(kind: str) -> list[str]:
    return [body for language, body in BLOCK.findall(PAGE.read_text()) if language == kind]


def run_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], str]:
    """The page's Python blocks run in one namespace, beside its ``models.json``; what
    they printed."""
    (catalog_json,) = blocks("json")
    (tmp_path / "models.json").write_text(catalog_json, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(registry, "_registered", {})  # the page's provider goes with the test
    namespace: dict[str, Any] = {"__name__": "providers_page"}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        for number, code in enumerate(blocks("python")):
            exec(compile(code, f"{PAGE.name}[python block {number + 1}]", "exec"), namespace)  # noqa: S102
    return namespace, printed.getvalue()


def test_the_pages_blocks_run_and_print_what_the_page_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    namespace, printed = run_page(tmp_path, monkeypatch)
    assert printed.splitlines() == [line for text in blocks("text") for line in text.splitlines()]
    assert providers()["greeter"] is namespace["PROVIDER"], "the example registers"


def test_the_examples_options_are_validated_and_resolved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    namespace, printed = run_page(tmp_path, monkeypatch)
    served = namespace["served"]["hello"]
    assert served.client.system == "example.greeter"
    assert served.card.options == {"greeting": "Hello", "shout": True}, "%Greeting% resolved"
    assert "field 'options.greting'" in printed, "the misspelt option is named"


def test_the_page_is_gone_with_the_test(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as scoped:
        run_page(tmp_path, scoped)
        assert "greeter" in providers()
    assert "greeter" not in providers()
