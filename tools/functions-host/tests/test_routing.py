"""Route templates and keys (unit tests, no services)."""

from __future__ import annotations

from pathlib import Path

import pytest

from functions_host.keys import load_or_create_keys
from functions_host.routing import RouteTable, compile_route


def table(*templates: str) -> RouteTable[str]:
    routes: RouteTable[str] = RouteTable()
    for template in templates:
        routes.add(compile_route(template, ["GET"], template, "api"))
    return routes


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/api/items/12", ("items/{id:int}/{label?}", {"id": "12"})),
        ("/api/items/12/red", ("items/{id:int}/{label?}", {"id": "12", "label": "red"})),
        ("/API/Items/12", ("items/{id:int}/{label?}", {"id": "12"})),
        ("/api/items/new", ("items/new", {})),
        ("/api/items/abc", None),
        ("/api/files/a/b/c.txt", ("files/{*path}", {"path": "a/b/c.txt"})),
        ("/api/flags/true", ("flags/{on:bool}", {"on": "true"})),
        ("/other/items/12", None),
    ],
)
def test_route_matching(path: str, expected: tuple[str, dict[str, str]] | None) -> None:
    routes = table("items/{id:int}/{label?}", "items/new", "files/{*path}", "flags/{on:bool}")
    assert routes.find("GET", path) == expected


def test_methods_are_part_of_the_match() -> None:
    assert table("items/new").find("POST", "/api/items/new") is None


def test_keys_file_is_created_once_with_every_key(tmp_path: Path) -> None:
    path = tmp_path / ".local" / "host-keys.json"
    first = load_or_create_keys(path)
    second = load_or_create_keys(path)
    assert first == second
    assert set(first.system_keys) == {"eventgrid_extension", "blobs_extension"}
    assert first.allows("function", first.default_function_key)
    assert first.allows("function", first.master_key)
    assert not first.allows("admin", first.default_function_key)
    assert not first.allows("function", None)
    assert first.allows("anonymous", None)
    assert path.stat().st_mode & 0o077 == 0
