"""``parameters.simulate``: model faults a request asks for, on development stacks only.

The end-to-end tests and a developer trying the retry and dead-letter paths need a model
that fails on demand. Where ``LocalModelFaults`` is on (the local stack), a request may
carry ``{"simulate": {"transient_attempts": 2, "retry_after": 1}}`` (fail the first two
attempts), ``{"always_transient": true}`` (every attempt) or ``{"permanent": true}``; the
processor raises the fault before the alias's model is called, whichever provider serves
it. Anywhere else intake refuses ``simulate`` with 422, and a message that carries it
anyway has it dropped unread: no caller can make a model fail.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pydantic import Field, ValidationError

from shared.errors import FieldError, InvalidParameters, PermanentError, TransientError
from shared.inference.parameters import ModelParameters

SIMULATE: Final = "simulate"


class SimulatedFaults(ModelParameters):
    """``parameters.simulate``: the faults to raise before the model runs."""

    transient_attempts: int = Field(
        0, ge=0, le=20, description="fail this many attempts with a transient error first"
    )
    retry_after: float | None = Field(
        None, ge=0, le=3600, description="the Retry-After seconds the simulated throttling asks"
    )
    always_transient: bool = Field(False, description="fail every attempt transiently")
    permanent: bool = Field(False, description="fail permanently (dead-letter)")


def split_faults(
    parameters: Mapping[str, Any], allowed: bool
) -> tuple[dict[str, Any], SimulatedFaults | None]:
    """The parameters the model receives, and the faults asked for (None when none were,
    or when faults are not ``allowed`` here: then they are dropped unread)."""
    rest = {name: value for name, value in parameters.items() if name != SIMULATE}
    if SIMULATE not in parameters or not allowed:
        return rest, None
    return rest, read_faults(parameters[SIMULATE])


def read_faults(value: object) -> SimulatedFaults:
    """``simulate`` as declared, or InvalidParameters naming the field."""
    try:
        return SimulatedFaults.model_validate(value)
    except ValidationError as error:
        fields = tuple(
            FieldError(".".join(("parameters", SIMULATE, *map(str, item["loc"]))), item["msg"])
            for item in error.errors()
        )
        raise InvalidParameters(
            "parameters.simulate is invalid: " + "; ".join(f.message for f in fields[:5]), fields
        ) from None


def raise_simulated(faults: SimulatedFaults | None, attempt: int) -> None:
    """The fault ``faults`` asks for on this attempt, if any."""
    if faults is None:
        return
    if faults.permanent:
        raise PermanentError("simulated permanent model failure")
    if faults.always_transient or attempt < faults.transient_attempts:
        raise TransientError("simulated model throttling (429)", faults.retry_after)
