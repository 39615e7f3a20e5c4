"""``GET /api/docs`` in a real browser: headless Chromium loads the page from the local
stack and Swagger UI renders the app's OpenAPI document from it.

The page runs under its Content-Security-Policy, with only same-origin files, so a
rendered document also shows that the policy and the vendored files suffice (no CDN).
Without Chromium (``/usr/bin/chromium``, or ``chromium`` / ``chromium-browser`` / Google
Chrome on PATH) the test is skipped, saying so; ``.ci/run`` installs Debian's.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.e2e.conftest import Stack

BROWSER_TIMEOUT_S = 90.0
HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


def chromium() -> str | None:
    """Debian's Chromium (what .ci/run installs), else a Chromium or Chrome on PATH (the
    GitHub runners ship Google Chrome)."""
    if Path("/usr/bin/chromium").is_file():
        return "/usr/bin/chromium"
    names = ("chromium", "chromium-browser", "google-chrome-stable", "google-chrome")
    return next((found for name in names if (found := shutil.which(name))), None)


BROWSER = chromium()
# Skipped before the stack starts when there is no browser to load the page with.
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        BROWSER is None,
        reason="no Chromium to load the page: install it (Debian: apt-get install chromium)",
    ),
]


def rendered_dom(browser: str, url: str) -> tuple[str, str]:
    """The page's DOM once scripts have run (virtual time: no fixed sleep), and the
    browser's log, where the console messages (CSP refusals among them) are."""
    with tempfile.TemporaryDirectory(prefix="inferbus-chromium-") as profile:
        result = subprocess.run(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--enable-logging=stderr",
                "--v=0",
                f"--user-data-dir={profile}",
                "--virtual-time-budget=15000",
                "--dump-dom",
                url,
            ],
            capture_output=True,
            text=True,
            timeout=BROWSER_TIMEOUT_S,
            check=False,
        )
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout, result.stderr


def test_swagger_ui_renders_the_apps_openapi_document(stack: Stack) -> None:
    assert BROWSER is not None
    status, _, raw = stack.request("GET", "/api/openapi.json", key=None)
    assert status == 200, raw
    document = json.loads(raw)
    operations = {
        (method, path)
        for path, item in document["paths"].items()
        for method in item
        if method in HTTP_METHODS
    }

    dom, log = rendered_dom(BROWSER, stack.base_url + "/api/docs")

    assert 'class="swagger-ui' in dom, f"Swagger UI did not start:\n{dom[:2000]}"
    title = re.escape(html.escape(document["info"]["title"]))
    assert re.search(rf'class="title">{title}\b', dom), "the document's title is not shown"
    rendered = re.findall(r'class="opblock opblock-([a-z]+)\b', dom)
    assert len(rendered) == len(operations), f"{len(rendered)} of {len(operations)} operations"
    for path in {path for _, path in operations}:
        assert f'data-path="{html.escape(path)}"' in dom, f"{path} is not rendered"
    refusals = [line for line in log.splitlines() if "Content Security Policy" in line]
    assert refusals == [], "\n".join(refusals)

    # The headers the browser obeyed come through the host as the handler set them.
    status, headers, _ = stack.request("GET", "/api/docs", key=None)
    assert status == 200
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert headers["X-Content-Type-Options"] == "nosniff"
    status, headers, _ = stack.request("GET", "/api/docs/index.html", key=None)
    assert (status, headers["Content-Type"]) == (404, "application/problem+json")
