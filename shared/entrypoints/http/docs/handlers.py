"""``GET /api/docs`` (the page) and ``GET /api/docs/{asset}`` (its files).

The page holds no inline script or style sheet, so its Content-Security-Policy allows
scripts, style sheets, fonts and fetches from this origin only, with one addition that
Swagger UI needs: the ``data:`` SVG icons it draws (``img-src data:``). Its inline styles
are set through the DOM, which the policy does not restrict, so no ``'unsafe-inline'``;
its "Try it out" calls go to this same origin (the document's server is ``/api``).

The page names its files relative to its own address, so it works under any route prefix
or gateway path, with or without a trailing slash.
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

from shared.entrypoints.http.docs.assets import (
    BUILD_STEP,
    INITIALIZER,
    VENDORED,
    Asset,
    is_listed,
    load_assets,
)
from shared.entrypoints.http.messages import ApiRequest, ApiResponse, problem_response
from shared.entrypoints.http.problems import Problem
from shared.errors import AssetsMissing

log = logging.getLogger(__name__)

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "form-action 'self'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
    )
)
NOSNIFF = {"X-Content-Type-Options": "nosniff"}
# The files' addresses carry a digest of their content: cached for a year, never revalidated.
ASSET_CACHE_CONTROL = "public, max-age=31536000, immutable"
# The page names the current digests: always revalidated.
PAGE_CACHE_CONTROL = "no-cache"

PAGE_TEMPLATE = """\
<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Inferbus API</title>
<link rel="stylesheet" href="{base}swagger-ui.css?v={css}">
<link rel="icon" type="image/png" sizes="32x32" href="{base}favicon-32x32.png?v={icon}">
</head>
<body>
<div id="swagger-ui" data-openapi-url="{openapi}"></div>
<noscript>This page needs JavaScript; the API is described at {openapi}.</noscript>
<script src="{base}swagger-ui-bundle.js?v={bundle}"></script>
<script src="{base}{initializer}?v={start}"></script>
</body>
</html>
"""


def _relative_links(url: str) -> tuple[str, str]:
    """(prefix of the files, address of the OpenAPI document), relative to the page:
    ``/api/docs`` links ``docs/...`` and ``openapi.json``; ``/api/docs/`` links ``...``
    and ``../openapi.json``."""
    if urlsplit(url).path.endswith("/"):
        return "", "../openapi.json"
    return "docs/", "openapi.json"


def render_page(url: str, assets: dict[str, Asset]) -> str:
    base, openapi = _relative_links(url)
    return PAGE_TEMPLATE.format(
        base=base,
        openapi=openapi,
        initializer=INITIALIZER,
        css=assets["swagger-ui.css"].version,
        icon=assets["favicon-32x32.png"].version,
        bundle=assets["swagger-ui-bundle.js"].version,
        start=assets[INITIALIZER].version,
    )


def not_built(error: AssetsMissing) -> ApiResponse:
    log.warning("API docs unavailable: %s", error)
    return problem_response(
        Problem(
            503,
            "API docs not built",
            f"the Swagger UI files ({', '.join(error.missing)}) are missing from the app "
            f"package: run `{BUILD_STEP}` (it copies them from the swagger-ui-dist npm "
            "package) before starting or packaging the app",
            "api_docs_not_built",
            headers=dict(NOSNIFF),
        )
    )


def not_found() -> ApiResponse:
    listed = ", ".join([*VENDORED, INITIALIZER])
    return problem_response(
        Problem(
            404,
            "Not found",
            f"the API docs serve only these files: {listed}",
            "not_found",
            headers=dict(NOSNIFF),
        )
    )


def serve_docs_page(request: ApiRequest) -> ApiResponse:
    """``GET /api/docs``: the Swagger UI page over the app's OpenAPI document."""
    try:
        assets = load_assets()
    except AssetsMissing as error:
        return not_built(error)
    return ApiResponse(
        200,
        render_page(request.url, assets).encode("utf-8"),
        {
            "Content-Type": "text/html; charset=utf-8",
            "Content-Security-Policy": CONTENT_SECURITY_POLICY,
            "Cache-Control": PAGE_CACHE_CONTROL,
            "Referrer-Policy": "no-referrer",
            **NOSNIFF,
        },
    )


def serve_docs_asset(request: ApiRequest) -> ApiResponse:
    """``GET /api/docs/{asset}``: one listed file; any other name is 404."""
    name = request.route_params.get("asset", "")
    if not is_listed(name):
        return not_found()
    try:
        asset = load_assets()[name]
    except AssetsMissing as error:
        return not_built(error)
    return ApiResponse(
        200,
        asset.body,
        {
            "Content-Type": asset.content_type,
            "Cache-Control": ASSET_CACHE_CONTROL,
            **NOSNIFF,
        },
    )
