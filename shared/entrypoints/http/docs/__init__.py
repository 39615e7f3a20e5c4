"""The human-readable API page: Swagger UI over ``GET /api/openapi.json``.

``GET /api/docs`` serves the page and ``GET /api/docs/{asset}`` its few files, all from
this origin: the Swagger UI files come from the pinned ``swagger-ui-dist`` npm package,
copied into ``vendor/swagger-ui/`` beside this module by ``make bootstrap`` (gitignored,
shipped with the app package), so the page needs no CDN and runs under a strict
Content-Security-Policy. Without that build step the routes answer 503 problem+json
naming it, rather than a page that loads nothing.

The page is left out of the OpenAPI document: it reads the API, it is not part of it.
"""

from shared.entrypoints.http.docs.handlers import serve_docs_asset, serve_docs_page

__all__ = ["serve_docs_asset", "serve_docs_page"]
