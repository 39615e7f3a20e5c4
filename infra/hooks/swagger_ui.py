"""azd prepackage hook: put the API page's Swagger UI files into the app package.

GET /api/docs serves Swagger UI from shared/entrypoints/http/docs/vendor/swagger-ui/
(gitignored), which azd zips with the app. The files come from the swagger-ui-dist npm
package at the version package-lock.json pins, checked against the lock file's
``integrity`` (sha512): copied from node_modules/swagger-ui-dist when `make bootstrap` has
installed that version, else read from the npm registry's tarball. Only Python's standard
library: no make, Node or npm. Files already in place at the pinned version are kept.

    python infra/hooks/swagger_ui.py      (azd runs it; `make swagger-ui` does the same
                                           from node_modules)

``INFERBUS_NPM_REGISTRY`` names another registry (a mirror; default
https://registry.npmjs.org).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import sys
import tarfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "swagger-ui-dist"
TARGET = ROOT / "shared" / "entrypoints" / "http" / "docs" / "vendor" / "swagger-ui"
# The files the app serves (shared/entrypoints/http/docs/assets.py) and their licences.
FILES = (
    "swagger-ui.css",
    "swagger-ui-bundle.js",
    "favicon-32x32.png",
    "LICENSE",
    "NOTICE",
    "swagger-ui-bundle.js.LICENSE.txt",
)
STAMP = ".version"
DEFAULT_REGISTRY = "https://registry.npmjs.org"
TIMEOUT_SECONDS = 60


class HookError(Exception):
    """What went wrong, in words for the person running azd."""


def pinned(lock_file: Path = ROOT / "package-lock.json") -> tuple[str, str]:
    """The version and sha512 integrity package-lock.json pins for swagger-ui-dist."""
    entry = json.loads(lock_file.read_text(encoding="utf-8"))["packages"].get(
        f"node_modules/{PACKAGE}"
    )
    if not entry or not str(entry.get("integrity", "")).startswith("sha512-"):
        raise HookError(f"{lock_file.name} pins no {PACKAGE} with a sha512 integrity")
    return str(entry["version"]), str(entry["integrity"])


def check_integrity(content: bytes, integrity: str) -> None:
    expected = base64.b64decode(integrity.removeprefix("sha512-"))
    if hashlib.sha512(content).digest() != expected:
        raise HookError(f"the {PACKAGE} tarball does not match package-lock.json's integrity")


def from_node_modules(version: str, root: Path = ROOT) -> dict[str, bytes] | None:
    """The files of an installed swagger-ui-dist of exactly ``version``, if there is one."""
    installed = root / "node_modules" / PACKAGE
    try:
        manifest = json.loads((installed / "package.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if manifest.get("version") != version:
        return None
    try:
        return {name: (installed / name).read_bytes() for name in FILES}
    except OSError:
        return None


def from_registry(version: str, integrity: str, registry: str) -> dict[str, bytes]:
    """The files of the registry's tarball of ``version``, once its integrity holds."""
    url = f"{registry.rstrip('/')}/{PACKAGE}/-/{PACKAGE}-{version}.tgz"
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as response:  # noqa: S310
            content = response.read()
    except OSError as error:
        raise HookError(f"cannot download {url}: {error}") from error
    check_integrity(content, integrity)
    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(content), mode="r:gz") as archive:
        for name in FILES:
            member = archive.extractfile(f"package/{name}")
            if member is None:
                raise HookError(f"{url} has no {name}")
            files[name] = member.read()
    return files


def in_place(version: str, target: Path) -> bool:
    stamp = target / STAMP
    return (
        stamp.is_file()
        and stamp.read_text(encoding="utf-8").strip() == version
        and all((target / name).is_file() for name in FILES)
    )


def install(root: Path = ROOT, target: Path = TARGET, registry: str | None = None) -> str:
    """Puts the pinned files in ``target``; says where they came from."""
    version, integrity = pinned(root / "package-lock.json")
    if in_place(version, target):
        return f"{PACKAGE} {version} already in {target}"
    files = from_node_modules(version, root)
    source = f"node_modules/{PACKAGE}"
    if files is None:
        source = registry or os.environ.get("INFERBUS_NPM_REGISTRY") or DEFAULT_REGISTRY
        files = from_registry(version, integrity, source)
    target.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (target / name).write_bytes(content)
    (target / STAMP).write_text(version + "\n", encoding="utf-8")
    return f"{PACKAGE} {version} from {source} into {target}"


def main() -> int:
    try:
        print(f"prepackage: {install()}")
    except HookError as error:
        print(f"prepackage: the API page's Swagger UI files: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
