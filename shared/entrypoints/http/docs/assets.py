"""The files the API page loads: the vendored Swagger UI files and its initializer.

Only the names listed here are served (a lookup in a fixed table, so no request reaches
another file). Each file is read once per process and named in the page with a digest of
its content (``?v=``): the files can then be cached for a year, and a new Swagger UI
version, which changes the digests, is fetched at once.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from pathlib import Path

from shared.errors import AssetsMissing

VENDOR_DIR = Path(__file__).resolve().parent / "vendor" / "swagger-ui"
BUILD_STEP = "make bootstrap"

CSS = "text/css; charset=utf-8"
JAVASCRIPT = "text/javascript; charset=utf-8"

# The files the Makefile copies from node_modules/swagger-ui-dist, and their media types.
# The standalone preset (its top bar browses any URL) is not used.
VENDORED: dict[str, str] = {
    "swagger-ui.css": CSS,
    "swagger-ui-bundle.js": JAVASCRIPT,
    "favicon-32x32.png": "image/png",
}

INITIALIZER = "swagger-initializer.js"
# The app's own start-up script (an inline script would need 'unsafe-inline'): it renders
# the document the page names in data-openapi-url. No validator badge (it would call
# validator.swagger.io) and no ?url= / ?configUrl= from the address bar (Swagger UI 5
# ignores them unless queryConfigEnabled).
INITIALIZER_SOURCE = b"""\
"use strict";
window.addEventListener("load", function () {
  var root = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: new URL(root.dataset.openapiUrl, document.baseURI).href,
    domNode: root,
    deepLinking: true,
    validatorUrl: null,
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout"
  });
});
"""


@dataclass(frozen=True)
class Asset:
    name: str
    content_type: str
    body: bytes

    @property
    def version(self) -> str:
        """A short digest of the content, for the page's cache-busting ``?v=``."""
        return hashlib.sha256(self.body).hexdigest()[:16]


_loaded: dict[Path, dict[str, Asset]] = {}
_lock = threading.Lock()


def is_listed(name: str) -> bool:
    return name in VENDORED or name == INITIALIZER


def load_assets() -> dict[str, Asset]:
    """Every file of the page, by name, from ``VENDOR_DIR``. Raises ``AssetsMissing``
    while any vendored file is absent; only a complete set is kept, so a build that runs
    while the app does is seen at the next request."""
    directory = VENDOR_DIR
    with _lock:
        cached = _loaded.get(directory)
        if cached is not None:
            return cached
        missing = [name for name in VENDORED if not (directory / name).is_file()]
        if missing:
            raise AssetsMissing(str(directory), missing)
        assets = {
            name: Asset(name, content_type, (directory / name).read_bytes())
            for name, content_type in VENDORED.items()
        }
        assets[INITIALIZER] = Asset(INITIALIZER, JAVASCRIPT, INITIALIZER_SOURCE)
        _loaded[directory] = assets
        return assets
