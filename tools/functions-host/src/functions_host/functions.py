"""The functions the worker indexed, as the host sees them: metadata and resolved bindings.

The runtime indexes the app at worker init and answers ``FunctionsMetadataRequest`` with
one ``RpcFunctionMetadata`` per function: its id and its bindings as function.json JSON
(``raw_bindings``). The host resolves ``%Setting%`` references in binding properties from
the app settings; a function that names a missing setting is put in an error state and the
others run, as on the platform.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from functions_host.config import HostConfigError, resolve_binding

log = logging.getLogger("host.functions")


@dataclass(frozen=True)
class FunctionSpec:
    """One indexed function: its id (for invocations), trigger and bindings."""

    name: str
    function_id: str
    trigger_type: str
    trigger: dict[str, Any]
    bindings: list[dict[str, Any]]

    @property
    def trigger_parameter(self) -> str:
        return str(self.trigger.get("name", ""))

    @property
    def supports_deferred_binding(self) -> bool:
        """Whether the runtime marked the trigger as an SDK-type (deferred) binding."""
        properties = self.trigger.get("properties") or {}
        return str(properties.get("SupportsDeferredBinding", "")).lower() == "true"

    @property
    def has_http_return(self) -> bool:
        return any(b.get("name") == "$return" and b.get("type") == "http" for b in self.bindings)


def spec_from_metadata(metadata: Any) -> FunctionSpec | None:
    """The spec of one RpcFunctionMetadata, or None when its bindings cannot be resolved."""
    name = str(metadata.name)
    try:
        bindings = [resolve_binding(json.loads(raw)) for raw in metadata.raw_bindings]
    except HostConfigError as error:
        log.error("Function '%s' is in error and will not run: %s", name, error)
        return None
    trigger = next((b for b in bindings if str(b.get("type", "")).endswith("Trigger")), None)
    if trigger is None:
        log.error("Function '%s' is in error and will not run: it has no trigger binding", name)
        return None
    return FunctionSpec(
        name=name,
        function_id=str(metadata.function_id),
        trigger_type=str(trigger["type"]),
        trigger=trigger,
        bindings=bindings,
    )
