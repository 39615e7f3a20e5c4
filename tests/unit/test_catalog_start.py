"""The model catalog refuses at start what it cannot serve, naming the file, the entry and
the field: an alias or task declared twice (JSON itself would keep the last one without a
word), and a key setting (``api_key_setting``) that names an app setting that is unset or
empty (every request would fail later).

The refusals come from the real start: ``parse_catalog`` and ``catalog_for``, the check the
app runs when it is indexed (``verify_model_catalog``, as ``function_app.py`` calls it, and
the worker's init through the Functions Python runtime), and the launcher's
(``devtools.stack.served_models``).
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from azure_functions_runtime import handle_event

from devtools.stack import StackError, served_models
from functions_host.protos import messages
from functions_host.worker.dispatcher import RuntimeRequest
from shared.adapters.models import check_catalog, serve_catalog
from shared.entrypoints.bootstrap import verify_model_catalog
from shared.errors import CatalogError
from shared.inference.catalog import catalog_for, parse_catalog
from shared.settings import Settings
from tests.support.catalogs import catalog

REPO_ROOT = Path(__file__).resolve().parents[2]
TASK = '{"instructions": "Rate it.", "output_schema": {"type": "object"}}'
RATER = '{"provider": "python", "task": "t", "handler": "tests.support.model_handlers:sentiment"}'
ECHO = '{"provider": "python", "task": "t", "handler": "tests.support.model_handlers:Echo"}'


def refused(text: str) -> CatalogError:
    with pytest.raises(CatalogError) as refusal:
        parse_catalog(text, "m.json")
    return refusal.value


# --- a name given twice -----------------------------------------------------------------


def test_an_alias_declared_twice_is_refused_naming_the_section_and_the_alias() -> None:
    error = refused(
        f'{{"tasks": {{"t": {TASK}}}, "models": {{"rater": {RATER}, "rater": {ECHO}}}}}'
    )

    assert str(error) == (
        "m.json: model 'rater': declared twice in \"models\"; declare each alias once "
        "(JSON would keep only the last)"
    )
    assert (error.file, error.entry, error.field) == ("m.json", "model 'rater'", None)


def test_a_task_declared_twice_is_refused_naming_the_section_and_the_task() -> None:
    error = refused(f'{{"tasks": {{"t": {TASK}, "t": {TASK}}}, "models": {{"rater": {RATER}}}}}')

    assert str(error) == (
        "m.json: task 't': declared twice in \"tasks\"; declare each task once "
        "(JSON would keep only the last)"
    )
    assert (error.file, error.entry, error.field) == ("m.json", "task 't'", None)


@pytest.mark.parametrize(
    ("text", "entry", "field"),
    [
        (
            '{"models": {"a": {"provider": "local"}}, "models": {"b": {"provider": "local"}}}',
            None,
            "models",
        ),
        ('{"models": {"a": {"provider": "local", "provider": "python"}}}', "model 'a'", "provider"),
        (
            '{"models": {"a": {"provider": "python",'
            ' "options": {"handler": "x:y", "handler": "z:w"}}}}',
            "model 'a'",
            "options.handler",
        ),
        (
            '{"tasks": {"t": {"instructions": "x", "output_schema": {"type": "object",'
            ' "properties": {"s": {"type": "string"}, "s": {"type": "number"}}}}},'
            ' "models": {"a": {"provider": "local", "task": "t"}}}',
            "task 't'",
            "output_schema.properties.s",
        ),
        (
            '{"currency": "USD", "models": {"a": {"provider": "local", "prices":'
            ' {"input_per_million": 1, "output_per_million": 2, "output_per_million": 3}}}}',
            "model 'a'",
            "prices.output_per_million",
        ),
        (
            '{"currency": "USD", "currency": "EUR", "models": {"a": {"provider": "local"}}}',
            None,
            "currency",
        ),
    ],
    ids=["section", "alias-field", "option", "schema-property", "price", "currency"],
)
def test_any_other_key_given_twice_is_refused_where_it_is(
    text: str, entry: str | None, field: str
) -> None:
    error = refused(text)

    assert (error.entry, error.field) == (entry, field)
    assert str(error).endswith(": given twice; give each key once (JSON would keep only the last)")


def test_the_same_name_in_different_objects_is_no_repetition() -> None:
    text = (
        '{"tasks": {"rater": {"instructions": "x", "output_schema": {"type": "object"}}},'
        ' "models": {"rater": {"provider": "local", "task": "document-analysis"},'
        ' "other": {"provider": "local", "task": "rater"}}}'
    )

    document = parse_catalog(text, "m.json")

    assert list(document.models) == ["rater", "other"]


def test_a_catalog_file_with_an_alias_declared_twice_stops_catalog_for(tmp_path: Path) -> None:
    path = tmp_path / "models.json"
    path.write_text('{"models": {"a": {"provider": "local"}, "a": {"provider": "local"}}}')

    with pytest.raises(CatalogError) as refusal:
        catalog_for(Settings.model_validate({"ModelCatalog": str(path)}))

    assert str(refusal.value).startswith(f"{path}: model 'a': declared twice in \"models\"")


# --- a key setting that holds nothing ---------------------------------------------------

LLAMA: dict[str, Any] = {
    "provider": "openai_compatible",
    "task": "t",
    "deployment": "llama3.1",
    "endpoint": "http://127.0.0.1:9/v1",
    "api_key_setting": "VllmKey",
}
KEYED: dict[str, Any] = {
    "tasks": {"t": {"instructions": "Rate it.", "output_schema": {"type": "object"}}},
    "models": {
        "local-analyzer": {"provider": "local"},
        "llama": LLAMA,
    },
}
NO_KEY = "model 'llama', field 'api_key_setting': VllmKey names an app setting that is not set"


def keyed_file(tmp_path: Path, document: dict[str, Any] = KEYED) -> Path:
    path = tmp_path / "models.json"
    path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize("value", [None, "", "   "], ids=["unset", "empty", "blank"])
def test_a_key_setting_that_holds_nothing_stops_the_apps_start(
    tmp_path: Path, value: str | None
) -> None:
    path = keyed_file(tmp_path)
    environ = {"ModelCatalog": str(path)} | ({"VllmKey": value} if value is not None else {})

    with pytest.raises(CatalogError) as refusal:
        verify_model_catalog(environ)

    assert str(refusal.value) == f"{path}: {NO_KEY} (or is empty)"
    assert (refusal.value.entry, refusal.value.field) == ("model 'llama'", "api_key_setting")


def test_a_key_setting_that_holds_a_key_starts(tmp_path: Path) -> None:
    verify_model_catalog({"ModelCatalog": str(keyed_file(tmp_path)), "VllmKey": "k"})


def test_a_key_setting_written_in_options_is_checked_too() -> None:
    llama = dict(LLAMA)
    options = {"api_key_setting": llama.pop("api_key_setting")}
    document = {**KEYED, "models": {"llama": {**llama, "options": options}}}

    with pytest.raises(CatalogError) as refusal:
        check_catalog(catalog(document), settings_complete=False)

    assert f"models.json: {NO_KEY} (or is empty)" == str(refusal.value)


def test_serving_refuses_it_with_the_same_words() -> None:
    with pytest.raises(CatalogError) as refusal:
        serve_catalog(catalog(KEYED), Settings.model_validate({}))

    assert f"models.json: {NO_KEY} (or is empty)" == str(refusal.value)


def test_a_catalog_checked_without_its_settings_is_refused_when_served() -> None:
    unknown = replace(catalog(KEYED), app_setting=None)  # the settings it was resolved against
    check_catalog(unknown)  # nothing to check the setting against

    with pytest.raises(CatalogError) as refusal:
        serve_catalog(unknown, Settings.model_validate({}))

    assert f"models.json: {NO_KEY} (or is empty)" == str(refusal.value)


def test_the_launcher_refuses_it_before_starting_anything(tmp_path: Path) -> None:
    path = keyed_file(tmp_path)

    with pytest.raises(StackError) as refusal:
        served_models(Settings.model_validate({"ModelCatalog": str(path)}))

    assert str(refusal.value) == (
        f"the model catalog cannot be served: {path}: {NO_KEY} (or is empty)"
    )


# --- through the Functions Python runtime, as a worker starts ---------------------------


def _call(verb: Any, **content: Any) -> Any:
    request = messages.StreamingMessage(request_id="test", **content)
    return asyncio.run(verb(RuntimeRequest(request, {"protos": messages, "host": "127.0.0.1"})))


def _is_app_module(name: str) -> bool:
    return name == "function_app" or name == "triggers" or name.startswith("triggers.")


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (json.dumps(KEYED), NO_KEY),
        (
            '{"models": {"a": {"provider": "local"}, "a": {"provider": "local"}}}',
            "model 'a': declared twice in \"models\"",
        ),
    ],
    ids=["key-setting-unset", "alias-twice"],
)
def test_the_worker_refuses_to_index_the_app_naming_the_file_alias_and_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, named: str
) -> None:
    path = tmp_path / "models.json"
    path.write_text(text)
    monkeypatch.setenv("ModelCatalog", str(path))
    monkeypatch.delenv("VllmKey", raising=False)
    saved = {name: sys.modules.pop(name) for name in list(sys.modules) if _is_app_module(name)}
    try:
        init = _call(
            handle_event.worker_init_request,
            worker_init_request=messages.WorkerInitRequest(function_app_directory=str(REPO_ROOT)),
        )
    finally:
        for name in [name for name in sys.modules if _is_app_module(name)]:
            del sys.modules[name]
        sys.modules.update(saved)

    assert init.result.status == messages.StatusResult.Failure
    assert f"{path}: {named}" in init.result.exception.message
