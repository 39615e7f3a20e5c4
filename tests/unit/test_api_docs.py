"""``GET /api/docs`` and ``GET /api/docs/{asset}``: the Swagger UI page and its files.

The handlers read a vendor folder of the test's own (tiny stand-ins for the Swagger UI
files), so these tests need no ``make bootstrap``; the registered triggers are called as
the worker calls them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import azure.functions as func
import pytest

from shared.entrypoints.http.docs import assets, handlers, serve_docs_asset, serve_docs_page
from shared.entrypoints.http.messages import ApiRequest, ApiResponse
from tests.support.functions import indexed_functions

REPO_ROOT = Path(__file__).resolve().parents[2]
PAGE_URL = "http://localhost:7071/api/docs"
STAND_INS = {
    "swagger-ui.css": b".swagger-ui { color: #3b4151 }\n",
    "swagger-ui-bundle.js": b"window.SwaggerUIBundle = function () {};\n",
    "favicon-32x32.png": b"\x89PNG\r\n\x1a\n",
}
EXPECTED_TYPES = {
    "swagger-ui.css": "text/css; charset=utf-8",
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "favicon-32x32.png": "image/png",
    "swagger-initializer.js": "text/javascript; charset=utf-8",
}


@pytest.fixture
def vendor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A built vendor folder: every listed file present."""
    for name, body in STAND_INS.items():
        (tmp_path / name).write_bytes(body)
    monkeypatch.setattr(assets, "VENDOR_DIR", tmp_path)
    return tmp_path


@pytest.fixture
def unbuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No ``make bootstrap``: the vendor folder is absent."""
    missing = tmp_path / "vendor" / "swagger-ui"
    monkeypatch.setattr(assets, "VENDOR_DIR", missing)
    return missing


def page(url: str = PAGE_URL) -> ApiResponse:
    return serve_docs_page(ApiRequest("GET", url, {}))


def asset(name: str) -> ApiResponse:
    url = f"{PAGE_URL}/{name}?v=0"
    return serve_docs_asset(ApiRequest("GET", url, {}, {"v": "0"}, {"asset": name}))


def problem(response: ApiResponse) -> dict[str, Any]:
    assert response.headers["Content-Type"] == "application/problem+json"
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    document: dict[str, Any] = json.loads(response.body)
    assert document["status"] == response.status
    return document


def linked(html: str) -> list[str]:
    return re.findall(r'(?:href|src|data-openapi-url)="([^"]+)"', html)


def csp(response: ApiResponse) -> dict[str, list[str]]:
    directives = response.headers["Content-Security-Policy"].split(";")
    return {name: sources for name, *sources in (d.split() for d in directives)}


def test_the_page_is_html_with_a_same_origin_only_policy(vendor: Path) -> None:
    response = page()

    assert response.status == 200
    assert response.headers["Content-Type"] == "text/html; charset=utf-8"
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Cache-Control"] == "no-cache"
    policy = csp(response)
    assert policy["default-src"] == ["'none'"]
    assert policy["script-src"] == ["'self'"]
    assert policy["style-src"] == ["'self'"]
    assert policy["img-src"] == ["'self'", "data:"]
    assert policy["connect-src"] == ["'self'"]
    assert policy["frame-ancestors"] == ["'none'"]
    sources = {source for values in policy.values() for source in values}
    assert sources <= {"'none'", "'self'", "data:"}, "only this origin (and data: images)"


def test_the_page_links_only_listed_files_relative_to_itself(vendor: Path) -> None:
    html = page().body.decode()

    links = linked(html)
    assert "openapi.json" in links
    files = [link for link in links if link != "openapi.json"]
    assert {link.partition("?")[0] for link in files} == {f"docs/{name}" for name in EXPECTED_TYPES}
    for link in files:
        name, _, query = link.removeprefix("docs/").partition("?")
        served = asset(name)
        assert served.status == 200, name
        assert query == f"v={assets.Asset(name, '', served.body).version}", "digest of content"
    assert "<style" not in html
    assert re.search(r"<script>|<script(?![^>]*\bsrc=)", html) is None, "no inline script"
    assert "//" not in "".join(links), "no other origin"


def test_with_a_trailing_slash_the_links_still_resolve_beside_the_page(vendor: Path) -> None:
    links = linked(page(PAGE_URL + "/").body.decode())

    assert "../openapi.json" in links
    assert "swagger-ui-bundle.js" in {link.partition("?")[0] for link in links}


@pytest.mark.parametrize("name", sorted(EXPECTED_TYPES))
def test_each_listed_file_is_served_with_its_type_and_cached_for_a_year(
    vendor: Path, name: str
) -> None:
    response = asset(name)

    assert response.status == 200
    assert response.headers["Content-Type"] == EXPECTED_TYPES[name]
    assert response.headers["Cache-Control"] == "public, max-age=31536000, immutable"
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    expected = STAND_INS.get(name, assets.INITIALIZER_SOURCE)
    assert response.body == expected


@pytest.mark.parametrize(
    "name",
    [
        "index.html",
        "swagger-ui.js",
        "swagger-ui-bundle.js.map",
        "swagger-ui-standalone-preset.js",
        "LICENSE",
        "..",
        "../../../function_app.py",
        "%2e%2e%2fhost.json",
        "SWAGGER-UI.CSS",
        "",
    ],
)
def test_any_other_name_is_404_problem_json(vendor: Path, name: str) -> None:
    (vendor / "LICENSE").write_text("shipped, not served")
    response = asset(name)

    assert response.status == 404
    document = problem(response)
    assert document["type"] == "urn:inferbus:problem:not-found"
    assert "swagger-ui-bundle.js" in document["detail"], "the detail lists what is served"


def test_without_the_build_step_the_page_is_503_naming_it(unbuilt: Path) -> None:
    response = page()

    assert response.status == 503
    document = problem(response)
    assert document["type"] == "urn:inferbus:problem:api-docs-not-built"
    assert document["title"] == "API docs not built"
    assert "make bootstrap" in document["detail"]
    assert "swagger-ui-bundle.js" in document["detail"]


def test_without_the_build_step_the_files_are_503_and_others_still_404(unbuilt: Path) -> None:
    assert problem(asset("swagger-ui-bundle.js"))["status"] == 503
    assert problem(asset(assets.INITIALIZER))["status"] == 503
    assert problem(asset("index.html"))["status"] == 404


def test_a_partial_build_is_503_and_completing_it_serves_the_page(unbuilt: Path) -> None:
    unbuilt.mkdir(parents=True)
    (unbuilt / "swagger-ui.css").write_bytes(STAND_INS["swagger-ui.css"])
    document = problem(page())
    assert "swagger-ui-bundle.js" in document["detail"]
    assert "swagger-ui.css" not in document["detail"].partition("(")[2].partition(")")[0]

    for name, body in STAND_INS.items():
        (unbuilt / name).write_bytes(body)
    assert page().status == 200, "a build made while the app runs is seen"


def test_the_makefile_copies_every_listed_file() -> None:
    makefile = (REPO_ROOT / "Makefile").read_text()
    match = re.search(r"^SWAGGER_UI_FILES := ((?:.*\\\n)*.*)$", makefile, re.MULTILINE)
    assert match, "the Makefile names the Swagger UI files it copies"
    copied = set(match.group(1).replace("\\\n", " ").split())
    assert set(assets.VENDORED) <= copied
    assert "shared/entrypoints/http/docs/vendor/swagger-ui" in makefile
    assert (
        assets.VENDOR_DIR
        == REPO_ROOT / "shared" / "entrypoints" / "http" / "docs" / "vendor" / "swagger-ui"
    )


def test_the_page_is_pinned_to_an_exact_swagger_ui_dist_version() -> None:
    package = json.loads((REPO_ROOT / "package.json").read_text())
    dependencies = {**package.get("dependencies", {}), **package.get("devDependencies", {})}
    assert re.fullmatch(r"\d+\.\d+\.\d+", dependencies["swagger-ui-dist"]), "an exact version"


def http_request(url: str, route_params: dict[str, str] | None = None) -> func.HttpRequest:
    return func.HttpRequest("GET", url, headers={}, route_params=route_params or {}, body=b"")


def test_the_registered_triggers_are_anonymous_get_routes_that_serve_the_handlers(
    vendor: Path,
) -> None:
    functions = indexed_functions()
    routes = {
        name: next(b for b in functions[name].get_bindings() if b.type == "httpTrigger")
        for name in ("api_docs_page", "api_docs_asset")
    }
    assert {name: binding.route for name, binding in routes.items()} == {
        "api_docs_page": "docs",
        "api_docs_asset": "docs/{asset}",
    }
    for binding in routes.values():
        assert binding.methods == [func.HttpMethod.GET]
        assert binding.auth_level == func.AuthLevel.ANONYMOUS, "like /api/openapi.json"

    page_response = functions["api_docs_page"].get_user_function()(http_request(PAGE_URL))
    assert page_response.status_code == 200
    assert page_response.headers["Content-Security-Policy"] == handlers.CONTENT_SECURITY_POLICY
    css = functions["api_docs_asset"].get_user_function()(
        http_request(PAGE_URL + "/swagger-ui.css", {"asset": "swagger-ui.css"})
    )
    assert css.status_code == 200
    assert css.get_body() == STAND_INS["swagger-ui.css"]
    assert css.headers["Content-Type"] == "text/css; charset=utf-8"
