"""Host keys: function keys, the master key and the extensions' system keys.

The real host keeps keys in storage; locally they live in one JSON file, created with
random values on first run (``.local/host-keys.json`` under the script root, which git
ignores)::

    {"masterKey": "...",
     "functionKeys": {"default": "..."},
     "systemKeys": {"eventgrid_extension": "...", "blobs_extension": "..."}}

Function-level routes accept any function key or the master key; admin-level routes only
the master key; the webhooks of an extension accept its system key or the master key.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SYSTEM_KEY_NAMES = ("eventgrid_extension", "blobs_extension")


def _new_key() -> str:
    # Same shape as the host's keys: URL-safe, no padding, ~56 characters.
    return secrets.token_urlsafe(42)


@dataclass(frozen=True)
class HostKeys:
    master_key: str
    function_keys: dict[str, str]
    system_keys: dict[str, str]

    @property
    def default_function_key(self) -> str:
        return self.function_keys["default"]

    def to_document(self) -> dict[str, Any]:
        return {
            "masterKey": self.master_key,
            "functionKeys": dict(self.function_keys),
            "systemKeys": dict(self.system_keys),
        }

    def _matches(self, presented: str | None, candidates: list[str]) -> bool:
        if not presented:
            return False
        # compare_digest takes str only when it is ASCII: a key presented with other
        # characters is compared as bytes and fails (401, as in Azure), never raises.
        given = presented.encode("utf-8", "surrogateescape")
        return any(hmac.compare_digest(given, key.encode()) for key in candidates)

    def allows(self, auth_level: str, presented: str | None) -> bool:
        """Whether ``presented`` (from ``?code=`` or ``x-functions-key``) opens the level."""
        level = auth_level.lower()
        if level == "anonymous":
            return True
        if level == "admin":
            return self._matches(presented, [self.master_key])
        return self._matches(presented, [self.master_key, *self.function_keys.values()])

    def allows_system(self, extension: str, presented: str | None) -> bool:
        key = self.system_keys.get(extension)
        return self._matches(presented, [self.master_key] + ([key] if key else []))


def load_or_create_keys(path: Path) -> HostKeys:
    """Read the keys file, adding whatever is missing; create it (mode 0600) if absent."""
    document: dict[str, Any] = {}
    if path.is_file():
        document = json.loads(path.read_text(encoding="utf-8"))
    changed = not path.is_file()
    master = document.get("masterKey") or _new_key()
    function_keys = dict(document.get("functionKeys") or {})
    system_keys = dict(document.get("systemKeys") or {})
    if "default" not in function_keys:
        function_keys["default"] = _new_key()
        changed = True
    for name in SYSTEM_KEY_NAMES:
        if name not in system_keys:
            system_keys[name] = _new_key()
            changed = True
    keys = HostKeys(master, function_keys, system_keys)
    if changed or "masterKey" not in document:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump(keys.to_document(), handle, indent=2)
        temporary.replace(path)
    return keys
