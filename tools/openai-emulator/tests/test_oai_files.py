"""Files through the real SDK: upload, list, retrieve, content, delete; auth and routes."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import openai
import pytest
from openai import AzureOpenAI, OpenAI

from oai_testing import azure_client, request_line, to_jsonl, upload
from openai_emulator.process import API_VERSION, OpenAIEmulator


def test_upload_retrieve_content_and_delete(client: AzureOpenAI) -> None:
    data = to_jsonl([request_line("a", "Invoice 42. Due tomorrow.")])
    created = client.files.create(file=("requests.jsonl", data), purpose="batch")
    assert created.id.startswith("file-")
    assert (created.object, created.purpose, created.status) == ("file", "batch", "processed")
    assert (created.bytes, created.filename) == (len(data), "requests.jsonl")
    assert client.files.retrieve(created.id) == created
    assert client.files.content(created.id).content == data
    deleted = client.files.delete(created.id)
    assert (deleted.id, deleted.object, deleted.deleted) == (created.id, "file", True)
    for call in (client.files.retrieve, client.files.content, client.files.delete):
        with pytest.raises(openai.NotFoundError) as caught:
            call(created.id)
        assert created.id in caught.value.message


def test_list_filters_by_purpose_and_pages(client: AzureOpenAI) -> None:
    ids = [upload(client, [request_line(str(n), "Text.")]) for n in range(3)]
    other = client.files.create(file=("notes.jsonl", b"{}\n"), purpose="fine-tune").id
    listed = [f.id for f in client.files.list(purpose="batch", limit=1)]  # pages of one
    assert listed[:3] == ids[::-1]  # newest first, every page followed
    assert other not in listed
    page = client.files.list(purpose="batch", limit=2, order="asc")
    assert page.has_more is True
    assert len(page.data) == 2


def test_upload_with_expiry_and_bad_uploads(client: AzureOpenAI) -> None:
    kept = client.files.create(
        file=("r.jsonl", b"{}\n"),
        purpose="batch",
        expires_after={"anchor": "created_at", "seconds": 1_209_600},
    )
    assert kept.expires_at == kept.created_at + 1_209_600
    with pytest.raises(openai.BadRequestError) as caught:
        client.files.create(file=("r.jsonl", b"{}\n"), purpose="batch_output")  # type: ignore[arg-type]
    assert "purpose" in caught.value.message
    with pytest.raises(openai.BadRequestError, match="seconds"):
        client.files.create(
            file=("r.jsonl", b"{}\n"),
            purpose="batch",
            expires_after={"anchor": "created_at", "seconds": 60},
        )


def test_wrong_key_is_401_and_bearer_is_accepted(emulator: OpenAIEmulator) -> None:
    with (
        azure_client(emulator, api_key="not-the-key") as wrong,
        pytest.raises(openai.AuthenticationError) as caught,
    ):
        wrong.files.list()
    assert caught.value.code == "401"
    assert "Access denied" in caught.value.message
    token_client = openai.AzureOpenAI(
        azure_endpoint=emulator.endpoint,
        azure_ad_token="an-entra-token",
        api_version=API_VERSION,
        max_retries=0,
    )
    with token_client:
        assert isinstance(token_client.files.list().data, list)


def test_v1_routes_with_the_plain_client(emulator: OpenAIEmulator, client: AzureOpenAI) -> None:
    file_id = upload(client, [request_line("a", "Hello.")])
    with OpenAI(base_url=emulator.v1_base_url, api_key=emulator.api_key, max_retries=0) as v1:
        assert v1.files.retrieve(file_id).id == file_id
        assert file_id in [f.id for f in v1.files.list(purpose="batch")]


def test_missing_api_version_unknown_route_and_controls_without_key(
    emulator: OpenAIEmulator,
) -> None:
    def status(path: str, headers: dict[str, str]) -> tuple[int, dict[str, object]]:
        request = urllib.request.Request(emulator.endpoint + path, headers=headers)  # noqa: S310
        try:
            with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 (loopback)
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    code, body = status("/openai/files", {"api-key": emulator.api_key})
    assert code == 400
    assert "api-version" in str(body["error"])
    code, body = status(f"/openai/models?api-version={API_VERSION}", {"api-key": "x"})
    assert code == 404
    assert "error" in body
    code, body = status("/_emulator/stats", {})
    assert code == 200
    assert {"files_uploaded", "batches_created", "batches"} <= set(body)
