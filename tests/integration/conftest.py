"""Integration fixtures: real Azurite storage behind the app's services, and a way to call
the registered Azure Functions with real ``azure.functions.HttpRequest`` objects."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

import azure.functions as func
import pytest

from openai_emulator.process import OpenAIEmulator
from shared.adapters.blob_documents import BlobJsonDocuments
from shared.adapters.blob_storage import AzureBlobStore, blob_service_client
from shared.adapters.in_memory import InMemoryDocuments, RecordingPublisher, RecordingSender
from shared.entrypoints.bootstrap import Services, build_services, use_services
from shared.entrypoints.port_sets import azure_ports, replaced
from shared.settings import Settings
from tests.fixtures.azurite import Azurite
from tests.fixtures.servicebus_emulator import ServiceBusEmulator
from tests.support.functions import indexed_functions
from tests.support.global_batch import BatchLane, batch_settings
from tests.support.servicebus import QueueRecorder, connect
from tests.support.wiring import request_content

Documents = InMemoryDocuments | BlobJsonDocuments

BASE_URL = "http://localhost:7071/api"
Call = Callable[..., func.HttpResponse]


def make_settings(azurite: Azurite, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "Storage": azurite.connection_string,
        "ServiceBusConnection": "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=x;"
        "SharedAccessKey=x;UseDevelopmentEmulator=true",
        "AllowTenantHeader": "true",
        "MaxQueueBacklog": "0",
        "AllowedModels": "local-analyzer,other-model",
        "MaxInlineTextBytes": "1024",
        "MaxUploadBytes": "4096",
    }
    if "ModelCatalog" in overrides:  # a catalog instead of the shorthand
        del values["AllowedModels"]
    values.update(overrides)
    return Settings.model_validate(values)


@pytest.fixture(params=["azurite", "in_memory"])
def own_container(request: pytest.FixtureRequest) -> tuple[Documents, str]:
    """Documents in a container of their own: on Azurite, and the in-memory port the unit
    tests use, so that both answer alike."""
    container = f"own-{uuid.uuid4().hex[:10]}"
    if request.param == "in_memory":
        return InMemoryDocuments(), container
    azurite: Azurite = request.getfixturevalue("azurite")
    client = blob_service_client(make_settings(azurite))
    AzureBlobStore(client).ensure_containers([container])
    return BlobJsonDocuments(client), container


@pytest.fixture(scope="session")
def storage(azurite: Azurite) -> AzureBlobStore:
    """The app's containers in Azurite, created once."""
    settings = make_settings(azurite)
    blobs = AzureBlobStore(blob_service_client(settings))
    blobs.ensure_containers(settings.containers.names())
    return blobs


@pytest.fixture
def sender(servicebus_emulator: ServiceBusEmulator) -> Iterator[QueueRecorder]:
    """The request queue on the emulator: what the app's real sender delivered there."""
    with connect(servicebus_emulator) as bus:
        yield QueueRecorder(bus, "inference-requests")


class InstallServices(Protocol):
    def __call__(
        self,
        *,
        emulator: ServiceBusEmulator | None = None,
        ports: dict[str, Any] | None = None,
        settings: Mapping[str, str] | None = None,
        **overrides: str,
    ) -> Services: ...


@pytest.fixture
def install_services(
    azurite: Azurite, storage: AzureBlobStore, servicebus_emulator: ServiceBusEmulator
) -> Iterator[InstallServices]:
    """Build the app's real services (Azurite, the emulator) and install them for the
    registered functions; ``settings`` (a mapping, for names such as ``GlobalBatch__endpoint``)
    and then ``overrides`` (keywords) replace app settings, ``ports`` replace adapters by
    ``Ports`` field (``port_sets.azure_ports``). Uninstalled after the test."""

    def install(
        *,
        emulator: ServiceBusEmulator | None = None,
        ports: dict[str, Any] | None = None,
        settings: Mapping[str, str] | None = None,
        **overrides: str,
    ) -> Services:
        connection = (emulator or servicebus_emulator).connection_string
        chosen = make_settings(
            azurite, ServiceBusConnection=connection, **{**(settings or {}), **overrides}
        )
        built = build_services(chosen, replaced(azure_ports(chosen), **(ports or {})))
        use_services(built)
        return built

    yield install
    use_services(None)


@pytest.fixture
def services(install_services: InstallServices, sender: QueueRecorder) -> Services:
    """The real services on Azurite and the emulator (an empty request queue), installed."""
    return install_services()


@pytest.fixture
def tenant() -> str:
    """A fresh tenant per test keeps tests apart in the shared Azurite account."""
    return f"t-{uuid.uuid4().hex[:12]}"


def principal_header(tenant_id: str, claim_type: str = "tid") -> str:
    document = {"auth_typ": "aad", "claims": [{"typ": claim_type, "val": tenant_id}]}
    return base64.b64encode(json.dumps(document).encode()).decode()


def _function(name: str) -> Callable[[func.HttpRequest], func.HttpResponse]:
    user_function: Callable[[func.HttpRequest], func.HttpResponse] = indexed_functions()[
        name
    ].get_user_function()
    return user_function


@pytest.fixture
def call(tenant: str) -> Call:
    """Invoke a registered function as the Functions host would, with the test's tenant."""

    def invoke(
        function_name: str,
        method: str,
        path: str,
        *,
        body: bytes | dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        params: dict[str, str] | None = None,
        route_params: dict[str, str] | None = None,
        as_tenant: str | None = tenant,
    ) -> func.HttpResponse:
        all_headers, raw = request_content(as_tenant, body, headers)
        request = func.HttpRequest(
            method=method,
            url=f"{BASE_URL}{path}",
            headers=all_headers,
            params=params or {},
            route_params=route_params or {},
            body=raw,
        )
        return _function(function_name)(request)

    return invoke


def json_body(response: func.HttpResponse) -> Any:
    return json.loads(response.get_body())


@pytest.fixture
def openai_emulator(openai_emulator_factory: Any) -> Iterator[OpenAIEmulator]:
    """The local Azure OpenAI batch emulator (shared by the session; no quota left set)."""
    emulator: OpenAIEmulator = openai_emulator_factory()
    yield emulator
    emulator.set_quota(None)


MakeBatchLane = Callable[..., BatchLane]


@pytest.fixture
def make_batch_lane(
    install_services: InstallServices, openai_emulator: OpenAIEmulator
) -> MakeBatchLane:
    """The app's services with the Global Batch lane on (``overrides``: app settings),
    the request queue and the event channels recorded in memory."""

    def make(**overrides: str) -> BatchLane:
        queue, events = RecordingSender(), RecordingPublisher()
        services = install_services(
            ports={"requests": queue, "events": events, "results_topic": None},
            settings=batch_settings(openai_emulator, **overrides),
        )
        return BatchLane(services, openai_emulator, queue, events)

    return make


@pytest.fixture
def batch_lane(make_batch_lane: MakeBatchLane) -> BatchLane:
    return make_batch_lane()
