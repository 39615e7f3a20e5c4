"""Host configuration: host.json, local.settings.json and ``%Setting%`` resolution.

The real host reads ``host.json`` from the script root and app settings from the
environment; Core Tools adds ``local.settings.json`` Values to the environment without
overriding variables that are already set. This module does the same, before the app is
imported, so module-level code in the app sees the same settings it would in Azure.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_PORT = 7071
_SETTING_REFERENCE = re.compile(r"%([^%]+)%")
_TIMESPAN = re.compile(r"^(?:(\d+)\.)?(\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.(\d+))?$")


class HostConfigError(Exception):
    """The host cannot start with this configuration (the message says what to fix)."""


def parse_timespan(text: str) -> float:
    """Seconds in a .NET TimeSpan string such as ``00:10:00`` or ``1.00:00:00``."""
    match = _TIMESPAN.match(text.strip())
    if not match:
        raise HostConfigError(f"not a TimeSpan (expected [d.]hh:mm:ss): {text!r}")
    days, hours, minutes, seconds, fraction = match.groups()
    total = int(days or 0) * 86400 + int(hours) * 3600 + int(minutes) * 60 + int(seconds)
    return total + (float(f"0.{fraction}") if fraction else 0.0)


# The extension refuses a longer maxBatchWaitTime at start: held messages must be
# dispatched well within their locks (at most half of the longest lock, 5 minutes).
MAX_BATCH_WAIT_TIME_S = 150.0
# .NET's Timeout.InfiniteTimeSpan, as host.json writes it for maxAutoLockRenewalDuration.
INFINITE_TIMESPAN = "-00:00:00.0010000"


def _renewal_duration(value: Any) -> float | None:
    """Seconds of ``maxAutoLockRenewalDuration``; None for Timeout.InfiniteTimeSpan (-1 ms),
    the only negative value the extension accepts."""
    text = str(value).strip()
    if text.startswith("-"):
        if parse_timespan(text[1:]) == parse_timespan(INFINITE_TIMESPAN[1:]):
            return None
        raise HostConfigError(
            "extensions.serviceBus.maxAutoLockRenewalDuration: must not be negative "
            f"(except {INFINITE_TIMESPAN}, no limit): {value!r}"
        )
    return parse_timespan(text)


@dataclass(frozen=True)
class ServiceBusOptions:
    """host.json ``extensions.serviceBus``, defaults as in the extension 5.x ServiceBusOptions.

    Keys match case-insensitively, as .NET configuration binding does. Like the extension
    at start, a ``minMessageBatchSize`` above ``maxMessageBatchSize``, a
    ``maxBatchWaitTime`` above 2.5 minutes, ``maxConcurrentSessions`` or
    ``maxConcurrentCallsPerSession`` below 1, a ``sessionIdleTimeout`` that is not positive
    and a negative ``maxAutoLockRenewalDuration`` (other than the infinite -1 ms) are
    refused. ``sessionIdleTimeout`` unset means ``clientRetryOptions.tryTimeout`` (60 s),
    as in the SDK's session processor.
    """

    max_message_batch_size: int = 1000
    min_message_batch_size: int = 1
    max_batch_wait_time_s: float = 30.0
    max_concurrent_calls: int = 16 * (os.cpu_count() or 1)
    prefetch_count: int = 0
    auto_complete_messages: bool = True
    max_concurrent_sessions: int = 8
    max_concurrent_calls_per_session: int = 1
    session_idle_timeout_s: float | None = None
    try_timeout_s: float = 60.0
    # None: no limit (Timeout.InfiniteTimeSpan); 0: no automatic renewal.
    max_auto_lock_renewal_duration_s: float | None = 300.0

    @property
    def session_idle_s(self) -> float:
        """How long a session receiver waits for a message before it lets the session go."""
        if self.session_idle_timeout_s is not None:
            return self.session_idle_timeout_s
        return self.try_timeout_s

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> ServiceBusOptions:
        defaults = cls()
        values = {str(key).lower(): value for key, value in section.items()}

        def number(name: str, default: int) -> int:
            value = values.get(name.lower())
            if value is None:
                return default
            try:
                return int(value)
            except (TypeError, ValueError) as error:
                raise HostConfigError(
                    f"extensions.serviceBus.{name}: not a number: {value!r}"
                ) from error

        def timespan(name: str) -> float | None:
            value = values.get(name.lower())
            return None if value is None or value == "" else parse_timespan(str(value))

        wait = values.get("maxbatchwaittime")
        auto = values.get("autocompletemessages")
        renewal = values.get("maxautolockrenewalduration")
        retry = values.get("clientretryoptions") or {}
        if not isinstance(retry, Mapping):
            raise HostConfigError("extensions.serviceBus.clientRetryOptions must be an object")
        try_timeout = {str(key).lower(): value for key, value in retry.items()}.get("trytimeout")
        options = cls(
            max_message_batch_size=number("maxMessageBatchSize", defaults.max_message_batch_size),
            min_message_batch_size=number("minMessageBatchSize", defaults.min_message_batch_size),
            max_batch_wait_time_s=(
                parse_timespan(str(wait)) if wait else defaults.max_batch_wait_time_s
            ),
            max_concurrent_calls=number("maxConcurrentCalls", defaults.max_concurrent_calls),
            prefetch_count=number("prefetchCount", defaults.prefetch_count),
            auto_complete_messages=(
                defaults.auto_complete_messages if auto is None else _boolean(auto)
            ),
            max_concurrent_sessions=number(
                "maxConcurrentSessions", defaults.max_concurrent_sessions
            ),
            max_concurrent_calls_per_session=number(
                "maxConcurrentCallsPerSession", defaults.max_concurrent_calls_per_session
            ),
            session_idle_timeout_s=timespan("sessionIdleTimeout"),
            try_timeout_s=(
                parse_timespan(str(try_timeout)) if try_timeout else defaults.try_timeout_s
            ),
            max_auto_lock_renewal_duration_s=(
                defaults.max_auto_lock_renewal_duration_s
                if renewal is None
                else _renewal_duration(renewal)
            ),
        )
        for name, count in (
            ("maxConcurrentSessions", options.max_concurrent_sessions),
            ("maxConcurrentCallsPerSession", options.max_concurrent_calls_per_session),
        ):
            if count < 1:
                raise HostConfigError(f"extensions.serviceBus.{name} must be at least 1")
        if options.session_idle_timeout_s is not None and options.session_idle_timeout_s <= 0:
            raise HostConfigError("extensions.serviceBus.sessionIdleTimeout must be positive")
        if options.try_timeout_s <= 0:
            raise HostConfigError(
                "extensions.serviceBus.clientRetryOptions.tryTimeout must be positive"
            )
        if options.min_message_batch_size > options.max_message_batch_size:
            raise HostConfigError(
                "extensions.serviceBus: minMessageBatchSize "
                f"({options.min_message_batch_size}) must not be larger than "
                f"maxMessageBatchSize ({options.max_message_batch_size})"
            )
        if options.max_batch_wait_time_s > MAX_BATCH_WAIT_TIME_S:
            raise HostConfigError(
                "extensions.serviceBus: maxBatchWaitTime must be at most 00:02:30 "
                "(half the longest message lock), or held messages may lose their locks"
            )
        return options


def _boolean(value: Any) -> bool:
    """A JSON boolean, or the string forms .NET configuration accepts."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise HostConfigError(f"not a boolean: {value!r}")
    return text == "true"


@dataclass(frozen=True)
class HostConfig:
    """Everything the host takes from host.json and local.settings.json."""

    script_root: Path
    values: dict[str, str]
    route_prefix: str = "api"
    function_timeout_s: float | None = 300.0
    service_bus: ServiceBusOptions = field(default_factory=ServiceBusOptions)
    local_http_port: int = DEFAULT_PORT
    log_level: str = "Information"
    # host.json logging.logLevel categories other than "default" (e.g. "Function", "Host.Worker").
    category_levels: dict[str, str] = field(default_factory=dict)
    settings_path: Path | None = None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, json.JSONDecodeError) as error:
        raise HostConfigError(f"cannot read {path}: {error}") from error
    if not isinstance(document, dict):
        raise HostConfigError(f"{path} must hold a JSON object")
    return document


def find_local_settings(script_root: Path, explicit: Path | None) -> Path | None:
    """``--settings`` if given, else local.settings.json, else the sample next to it."""
    if explicit is not None:
        if not explicit.is_file():
            raise HostConfigError(f"settings file not found: {explicit}")
        return explicit
    for name in ("local.settings.json", "local.settings.sample.json"):
        candidate = script_root / name
        if candidate.is_file():
            return candidate
    return None


def load_host_config(script_root: Path, settings_path: Path | None = None) -> HostConfig:
    """Read host.json (required, as for the real host) and the local settings."""
    host_json_path = script_root / "host.json"
    if not host_json_path.is_file():
        raise HostConfigError(f"no host.json in {script_root}: is this a function app folder?")
    host_json = _read_json(host_json_path)
    extensions = host_json.get("extensions") or {}
    http_section = extensions.get("http") or {}
    route_prefix = str(http_section.get("routePrefix", "api")).strip("/")
    timeout_text = host_json.get("functionTimeout")
    # Core Tools and Premium/Dedicated plans default to 30 minutes; -1 means unbounded.
    timeout: float | None = 1800.0
    if timeout_text is not None:
        timeout = None if str(timeout_text).strip() == "-1" else parse_timespan(str(timeout_text))
    log_levels = (host_json.get("logging") or {}).get("logLevel") or {}

    path = find_local_settings(script_root, settings_path)
    values: dict[str, str] = {}
    port = DEFAULT_PORT
    if path is not None:
        document = _read_json(path)
        values = {str(k): str(v) for k, v in (document.get("Values") or {}).items()}
        port = int((document.get("Host") or {}).get("LocalHttpPort", DEFAULT_PORT))
    return HostConfig(
        script_root=script_root,
        values=values,
        route_prefix=route_prefix,
        function_timeout_s=timeout,
        service_bus=ServiceBusOptions.from_section(extensions.get("serviceBus") or {}),
        local_http_port=port,
        log_level=str(log_levels.get("default", "Information")),
        category_levels={str(k): str(v) for k, v in log_levels.items() if k != "default"},
        settings_path=path,
    )


def apply_values_to_environment(
    values: Mapping[str, str], environ: MutableMapping[str, str] | None = None
) -> list[str]:
    """Export Values as environment variables; existing variables win (as in Core Tools).

    Returns the names that were skipped because the environment already defines them.
    """
    target = os.environ if environ is None else environ
    skipped = []
    for name, value in values.items():
        if name in target:
            skipped.append(name)
            continue
        target[name] = value
    return skipped


def resolve_setting_references(text: str, environ: Mapping[str, str] | None = None) -> str:
    """Replace ``%Name%`` with the app setting, as the host does for binding properties."""
    source = os.environ if environ is None else environ

    def lookup(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in source:
            raise HostConfigError(f"binding refers to app setting %{name}% which is not set")
        return source[name]

    return _SETTING_REFERENCE.sub(lookup, text)


def resolve_binding(
    binding: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A binding's metadata with every string property's ``%Setting%`` names resolved."""
    resolved: dict[str, Any] = {}
    for key, value in binding.items():
        resolved[key] = (
            resolve_setting_references(value, environ) if isinstance(value, str) else value
        )
    return resolved
