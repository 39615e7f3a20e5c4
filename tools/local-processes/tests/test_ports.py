"""Port probing: free, a foreign listener, Azurite."""

from __future__ import annotations

import socket

from local_processes import Azurite, describe_port, free_port


def test_a_free_port_and_a_foreign_listener() -> None:
    port = free_port()
    assert describe_port(port) == "free"
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert describe_port(server.getsockname()[1]) == "other"


def test_azurite_is_told_apart_from_other_http_servers(azurite: Azurite) -> None:
    port = int(azurite.blob_endpoint.rsplit(":", 1)[1].split("/")[0])
    assert describe_port(port) == "azurite"
    assert "BlobEndpoint=http://127.0.0.1:" in azurite.connection_string
