"""docs/models.md's "Your own model": its catalog parses, and its five-minute handler
answers what the page says it answers (the code is taken from the page itself)."""

from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path

import pytest

from shared.adapters.models import serve_catalog
from shared.inference import InferenceInput
from shared.settings import Settings
from tests.support.catalogs import catalog

README = Path(__file__).resolve().parents[2] / "docs" / "models.md"


def section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(title)
    following = re.search(r"^#{2,3} ", text[start + len(title) :], re.MULTILINE)
    return text[start : start + len(title) + (following.start() if following else len(text))]


def blocks(text: str, language: str) -> list[str]:
    return [
        textwrap.dedent(match)
        for match in re.findall(rf"^ *```{language}\n(.*?)^ *```", text, re.DOTALL | re.MULTILINE)
    ]


def test_the_readmes_handler_answers_what_the_readme_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (handler_code,) = blocks(section("### Your own model in five minutes"), "python")
    package = tmp_path / "handlers"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "rater.py").write_text(handler_code)
    monkeypatch.syspath_prepend(str(tmp_path))
    document = json.loads(blocks(section("## Your own model"), "json")[0])
    settings = {
        "ChatDeployment": "gpt-5.1",
        "VllmKey": "k",
        "AzureOpenAI__endpoint": "https://x.openai.azure.com",
        "AzureOpenAI__apiKey": "k",
    }
    try:
        served = serve_catalog(catalog(document, settings), Settings.model_validate(settings))
        rater = served["rater"]
        answer = rater.client.infer(
            InferenceInput(
                request_id="r",
                model="rater",
                content=b"The parcel came late and broken.",
                media_type="text/plain",
                task="sentiment",
            )
        )
    finally:
        sys.modules.pop("handlers.rater", None)
        sys.modules.pop("handlers", None)

    assert rater.card.task.result(answer) == {"sentiment": "negative", "score": -0.67}
    assert answer.usage is not None
    assert (answer.usage.input_tokens, answer.usage.output_tokens) == (6, 2)
    assert sorted(served) == ["gpt-5.1", "llama", "local-analyzer", "rater"]
