"""The app indexed by the real Functions Python runtime, as a worker does at init.

The worker's ``WorkerInitRequest`` makes ``azure-functions-runtime`` import
``function_app.py``, index every function and validate every annotation; one error fails
the init and with it every function of the app. This test sends the same requests with
the FunctionRpc message classes the local host uses, so anything the runtime would reject
in Azure fails here first.
"""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure_functions_runtime import handle_event

from functions_host.protos import messages
from functions_host.worker.dispatcher import RuntimeRequest

REPO_ROOT = Path(__file__).resolve().parents[2]
EXPECTED_TRIGGERS = {
    "submit_request": "httpTrigger",
    "list_requests": "httpTrigger",
    "get_request": "httpTrigger",
    "get_request_result": "httpTrigger",
    "cancel_request": "httpTrigger",
    "get_batch": "httpTrigger",
    "cancel_batch": "httpTrigger",
    "get_usage": "httpTrigger",
    "event_webhook": "httpTrigger",
    "openapi_document": "httpTrigger",
    "api_docs_page": "httpTrigger",
    "api_docs_asset": "httpTrigger",
    "process_requests": "serviceBusTrigger",
    "process_priority_requests": "serviceBusTrigger",
    "process_ordered_requests": "serviceBusTrigger",
    "report_backlog": "timerTrigger",
    "sweep_deferred": "timerTrigger",
    "pull_events": "timerTrigger",
    "reconcile_dead_letters": "timerTrigger",
    "watch_jobs": "timerTrigger",
    "drive_global_batch": "timerTrigger",
    "blob_intake": "blobTrigger",
    "eventgrid_intake": "eventGridTrigger",
}


def _call(verb: Any, **content: Any) -> Any:
    request = messages.StreamingMessage(request_id="test", **content)
    return asyncio.run(verb(RuntimeRequest(request, {"protos": messages, "host": "127.0.0.1"})))


def index(app_directory: Path) -> tuple[Any, list[Any]]:
    """(WorkerInitResponse, function metadata) for the app in ``app_directory``."""
    init = _call(
        handle_event.worker_init_request,
        worker_init_request=messages.WorkerInitRequest(function_app_directory=str(app_directory)),
    )
    if init.result.status != messages.StatusResult.Success:
        return init, []
    metadata = _call(
        handle_event.functions_metadata_request,
        functions_metadata_request=messages.FunctionsMetadataRequest(),
    )
    return init, list(metadata.function_metadata_results)


def _trigger(metadata: Any) -> dict[str, Any]:
    bindings = [json.loads(raw) for raw in metadata.raw_bindings]
    return next(b for b in bindings if b["type"].endswith("Trigger"))


@pytest.fixture(scope="module")
def app_index() -> Iterator[tuple[Any, list[Any]]]:
    """The app indexed once, from a fresh import as in a new worker process.

    An app object's functions can be built only once, and other tests may have imported
    (and indexed) function_app already: its modules are set aside while the runtime
    imports its own copy, then put back.
    """
    fresh = [name for name in sys.modules if _is_app_module(name)]
    saved = {name: sys.modules.pop(name) for name in fresh}
    try:
        yield index(REPO_ROOT)
    finally:
        for name in [name for name in sys.modules if _is_app_module(name)]:
            del sys.modules[name]
        sys.modules.update(saved)


def _is_app_module(name: str) -> bool:
    return name == "function_app" or name == "triggers" or name.startswith("triggers.")


def test_the_runtime_indexes_every_function_of_the_app(app_index: tuple[Any, list[Any]]) -> None:
    init, functions = app_index

    assert init.result.status == messages.StatusResult.Success, init.result.exception.message
    assert {f.name: _trigger(f)["type"] for f in functions} == EXPECTED_TRIGGERS


def test_the_batch_trigger_gets_sdk_messages_and_its_settlement_client(
    app_index: tuple[Any, list[Any]],
) -> None:
    init, functions = app_index
    assert init.result.status == messages.StatusResult.Success, init.result.exception.message
    process = next(f for f in functions if f.name == "process_requests")
    trigger = _trigger(process)

    assert trigger["cardinality"].lower() == "many"
    assert trigger["autoCompleteMessages"] is False
    assert trigger["properties"] == {"SupportsDeferredBinding": True}
    loaded = handle_event._functions.get_function(process.function_id)
    assert loaded.settlement_client_arg == "message_actions"


def test_the_ordered_trigger_holds_sessions_one_message_at_a_time(
    app_index: tuple[Any, list[Any]],
) -> None:
    _, functions = app_index
    ordered = next(f for f in functions if f.name == "process_ordered_requests")
    trigger = _trigger(ordered)

    assert trigger["isSessionsEnabled"] is True
    assert trigger.get("cardinality", "one").lower() == "one"
    assert trigger["queueName"] == "%OrderedQueueName%"
    assert trigger["autoCompleteMessages"] is False
    assert trigger["properties"] == {"SupportsDeferredBinding": True}
    loaded = handle_event._functions.get_function(ordered.function_id)
    assert loaded.settlement_client_arg == "message_actions"


def test_a_builtin_list_annotation_fails_the_whole_app(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check above can fail: the annotation the runtime rejects, in a throwaway app."""
    (tmp_path / "rejected_app.py").write_text(
        textwrap.dedent(
            """
            import azure.functions as func
            import azurefunctions.extensions.bindings.servicebus as servicebus

            app = func.FunctionApp()


            @app.route(route="ok")
            def ok(req: func.HttpRequest) -> func.HttpResponse:
                return func.HttpResponse("ok")


            @app.service_bus_queue_trigger(
                arg_name="messages", queue_name="q", connection="C", cardinality="many"
            )
            def batch(messages: list[servicebus.ServiceBusReceivedMessage]) -> None:
                pass
            """
        )
    )
    monkeypatch.setenv("PYTHON_SCRIPT_FILE_NAME", "rejected_app.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        init, functions = index(tmp_path)
    finally:
        sys.modules.pop("rejected_app", None)

    assert init.result.status == messages.StatusResult.Failure
    assert "invalid non-type annotation" in init.result.exception.message
    assert functions == []


@pytest.mark.parametrize(
    ("catalog", "named"),
    [
        ('{"models": {"a": {"provider": "local",}}}', "not valid JSON"),
        (
            '{"models": {"rater": {"provider": "local", "task": "sentimnet"}}}',
            "model 'rater', field 'task': unknown task 'sentimnet'",
        ),
        (
            '{"models": {"rater": {"provider": "python", "handler": "nowhere.models:Rater"}}}',
            "model 'rater', field 'handler': 'nowhere.models:Rater' does not import",
        ),
        (
            '{"tasks": {"t": {"instructions": "x", "output_schema": {"type": 7}}},'
            ' "models": {"rater": {"provider": "local", "task": "t"}}}',
            "task 't', field 'output_schema': not a valid JSON Schema",
        ),
    ],
    ids=["bad-file", "unknown-task", "handler-does-not-import", "invalid-schema"],
)
def test_a_broken_model_catalog_fails_the_indexing_naming_the_file_alias_and_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalog: str, named: str
) -> None:
    """The app refuses to start as the Functions host (and the local host) would see it:
    the worker's init fails with the catalog's error, and no function is indexed."""
    path = tmp_path / "broken-models.json"
    path.write_text(catalog)
    monkeypatch.setenv("ModelCatalog", str(path))
    fresh = [name for name in sys.modules if _is_app_module(name)]
    saved = {name: sys.modules.pop(name) for name in fresh}
    try:
        init, functions = index(REPO_ROOT)
    finally:
        for name in [name for name in sys.modules if _is_app_module(name)]:
            del sys.modules[name]
        sys.modules.update(saved)

    assert init.result.status == messages.StatusResult.Failure
    assert f"{path}: " in init.result.exception.message
    assert named in init.result.exception.message
    assert functions == []
