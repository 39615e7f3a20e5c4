"""Message settlement for functions: a local ``ServiceBusMessageActions``.

The extension's class (azurefunctions-extensions-bindings-servicebus 1.0.0b2) settles
over gRPC with the host; this one has the same methods and signatures and settles through
the SDK receiver the messages came from. Failures raise ``SettlementError`` with the same
``method``/``details``/``original`` attributes (the extension's own class when installed).
It also remembers which messages the function settled, so the host never settles them
again (auto-complete applies only to the rest).
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

from azure.servicebus import ServiceBusReceivedMessage, ServiceBusReceiver

try:  # the extension's own exception type, so `except SettlementError` works in apps
    from azurefunctions.extensions.bindings.servicebus.serviceBusMessageActions import (
        SettlementError,
    )
except ImportError:  # pragma: no cover - the extension is a runtime dependency

    class SettlementError(Exception):  # type: ignore[no-redef]
        def __init__(self, method: str, details: str, original: Exception) -> None:
            super().__init__(f"[{method}] {details}. Underlying error: {original}")
            self.method = method
            self.details = details
            self.original = original


class LocalMessageActions:
    """Settles messages of one receiver; safe to call from the function's threads."""

    def __init__(self, receiver: ServiceBusReceiver, lock: threading.Lock) -> None:
        self._receiver = receiver
        self._lock = lock
        self._settled: set[int] = set()

    def was_settled(self, message: ServiceBusReceivedMessage) -> bool:
        return id(message) in self._settled

    @staticmethod
    def _lock_token(message: Any) -> str:
        token = getattr(message, "lock_token", None)
        if not token:
            raise ValueError("lockToken is required in ServiceBusReceivedMessage.")
        return str(token)

    def _settle(self, method: str, message: Any, **kwargs: Any) -> None:
        token = "<no lock token>"  # noqa: S105 (a label, not a secret)
        try:
            token = self._lock_token(message)
            with self._lock:
                getattr(self._receiver, f"{method}_message")(message, **kwargs)
            self._settled.add(id(message))
        except Exception as error:
            raise SettlementError(method, f"Failed to {method} message {token}", error) from error

    def complete(self, message: Any) -> None:
        self._settle("complete", message)

    def abandon(self, message: Any) -> None:
        self._settle("abandon", message)

    def deadletter(
        self,
        message: Any,
        deadletter_reason: str | None = None,
        deadletter_error_description: str | None = None,
    ) -> None:
        token = "<no lock token>"  # noqa: S105 (a label, not a secret)
        try:
            token = self._lock_token(message)
            with self._lock:
                self._receiver.dead_letter_message(
                    message,
                    reason=deadletter_reason,
                    error_description=deadletter_error_description,
                )
            self._settled.add(id(message))
        except Exception as error:
            raise SettlementError(
                "deadletter", f"Failed to deadletter message {token}", error
            ) from error

    def defer(self, message: Any) -> None:
        self._settle("defer", message)

    def renew_message_lock(self, message: Any) -> None:
        token = "<no lock token>"  # noqa: S105 (a label, not a secret)
        try:
            token = self._lock_token(message)
            with self._lock:
                self._receiver.renew_message_lock(message)
        except Exception as error:
            raise SettlementError(
                "renew_message_lock", f"Failed to renew lock for {token}", error
            ) from error

    def _session(self, method: str, session_id: str) -> Any:
        session = self._receiver.session
        if session is None or session.session_id != session_id:
            raise SettlementError(
                method,
                f"Failed for session {session_id}",
                ValueError("the trigger holds no lock on this session"),
            )
        return session

    def set_session_state(self, session_id: str, session_state: bytes) -> None:
        session = self._session("set_session_state", session_id)
        try:
            with self._lock:
                session.set_state(session_state)
        except Exception as error:
            raise SettlementError(
                "set_session_state", f"Failed to set state for session {session_id}", error
            ) from error

    def release_session(self, session_id: str) -> None:
        self._session("release_session", session_id)
        try:
            with self._lock:
                self._receiver.close()
        except Exception as error:
            raise SettlementError(
                "release_session", f"Failed to release session {session_id}", error
            ) from error

    def renew_session_lock(self, session_id: str) -> datetime:
        session = self._session("renew_session_lock", session_id)
        try:
            with self._lock:
                locked_until: datetime = session.renew_lock()
        except Exception as error:
            raise SettlementError(
                "renew_session_lock", f"Failed to renew lock for session {session_id}", error
            ) from error
        return locked_until
