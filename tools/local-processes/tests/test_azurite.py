"""Azurite's persistence: in memory for tests and benchmarks, on disk only when asked.

Tests and benchmarks (``run_azurite``, the ``azurite`` fixture) start Azurite with
``--inMemoryPersistence``: nothing is written to disk, so however many blobs a run writes,
they go with the process. The launcher (``make run``) passes ``location`` so that
developers' data survives a restart. The blobs are written with azure-storage-blob, the
client the app uses (in the dev environment; skipped without it).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from local_processes import ACCOUNT_NAME, Azurite, run_azurite, start_azurite
from local_processes.azurite import blob_port

blob = pytest.importorskip("azure.storage.blob")

ROOT = Path(__file__).resolve().parents[3]


def _write(connection_string: str, container: str, name: str) -> None:
    client = blob.BlobServiceClient.from_connection_string(connection_string)
    client.create_container(container)
    client.get_blob_client(container, name).upload_blob(b"x" * 65_536)


def _names(connection_string: str, container: str) -> list[str]:
    client = blob.BlobServiceClient.from_connection_string(connection_string)
    if not client.get_container_client(container).exists():
        return []
    return [item.name for item in client.get_container_client(container).list_blobs()]


def test_run_azurite_writes_nothing_but_its_log_and_cleans_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with run_azurite(ROOT) as azurite:
        _write(azurite.connection_string, "kept-in-memory", "a.bin")
        assert _names(azurite.connection_string, "kept-in-memory") == ["a.bin"]
        (workdir,) = tmp_path.iterdir()
        assert sorted(path.name for path in workdir.rglob("*")) == ["azurite.log"]
    assert list(tmp_path.iterdir()) == [], "run_azurite left its working folder behind"


def test_start_azurite_without_a_location_is_in_memory(tmp_path: Path) -> None:
    child = start_azurite({"Blob": 0}, tmp_path / "azurite.log", root=ROOT)
    try:
        command = child.process.args
        assert isinstance(command, list)
        assert "--inMemoryPersistence" in command
        assert "--location" not in command
    finally:
        child.stop()


@pytest.mark.parametrize("persistent", [True, False], ids=["location", "in-memory"])
def test_only_a_location_keeps_blobs_across_a_restart(tmp_path: Path, persistent: bool) -> None:
    """What ``make run`` relies on (a location), and what tests rely on (a clean start)."""
    location = tmp_path / "data" if persistent else None
    for run in range(2):
        child = start_azurite({"Blob": 0}, tmp_path / "azurite.log", location=location, root=ROOT)
        try:
            port = blob_port(child)
            storage = Azurite(f"http://127.0.0.1:{port}/{ACCOUNT_NAME}").connection_string
            if run == 0:
                _write(storage, "survivors", "a.bin")
            else:
                assert _names(storage, "survivors") == (["a.bin"] if persistent else [])
        finally:
            child.stop()
    if location is not None:
        assert any(location.iterdir()), "a persistent Azurite keeps its data in the location"
