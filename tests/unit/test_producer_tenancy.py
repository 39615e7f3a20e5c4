"""Direct producers are denied by default: ProducerTenants lists the tenants they may name.

A message sent straight to a request queue names its tenant itself; sending rights alone
must not choose the tenant work runs as. Empty (the default) allows none.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.adapters.in_memory import InMemoryBlobs
from shared.contracts import InlineText, RequestMessage
from shared.intake.claim_checks import ClaimChecks
from shared.intake.request_rules import RequestRules, TenantNotAllowed
from shared.processing.adopted_jobs import INTAKE_RECORD_WAITS_SECONDS
from shared.processing.settlement import DeadLetterReason
from shared.producer.lines import RequestLine
from shared.producer.producer import Producer
from shared.settings import Settings
from tests.fakes import ManualClock
from tests.support.catalogs import local_catalog
from tests.unit.test_processing import NOW, TENANT, Harness, message
from tests.unit.test_processing import request_body as door_request_body
from tests.unit.test_producer import FakeSenders


def request_body(h: Harness, request_id: str = "r1", **changes: Any) -> dict[str, Any]:
    """A direct producer's request: its input inline (a producer holds no storage rights,
    so it cannot have stored the claim check a door stores in the inputs container)."""
    inline = InlineText(text="Invoice 8. Total amount due: 40 EUR.").model_dump(mode="json")
    return {**door_request_body(h, request_id), "input": inline, **changes}


def test_an_empty_list_refuses_every_tenant_with_tenant_not_allowed() -> None:
    h = Harness(producer_tenants=())

    assert h.processor.process(message(request_body(h)), h.settler) == "dead-lettered"

    [(action, _, reason, description)] = h.settler.actions
    assert (action, reason) == ("dead_letter", DeadLetterReason.TENANT_NOT_ALLOWED.value)
    assert f"tenant '{TENANT}'" in str(description)
    assert "ProducerTenants" in str(description)
    assert "it is empty, so no tenant may be named" in str(description)
    assert h.jobs.find(TENANT, "r1") is None, "no job for a refused tenant"
    assert h.events.published == []
    assert h.model.calls == 0


def test_a_tenant_not_listed_is_refused_without_naming_the_listed_ones() -> None:
    h = Harness(producer_tenants=("fabrikam", "northwind"))

    assert h.processor.process(message(request_body(h)), h.settler) == "dead-lettered"

    description = str(h.settler.actions[0][3])
    assert h.settler.actions[0][2] == "TenantNotAllowed"
    assert "it lists 2 other tenant(s)" in description
    assert "fabrikam" not in description


def test_a_listed_tenant_runs() -> None:
    h = Harness(producer_tenants=(TENANT,))
    assert h.processor.process(message(request_body(h)), h.settler) == "completed"


def test_an_invalid_tenant_id_is_still_an_invalid_payload() -> None:
    h = Harness(producer_tenants=())
    body = request_body(h, tenant_id="no/slashes")
    assert h.processor.process(message(body), h.settler) == "dead-lettered"
    assert h.settler.actions[0][2] == "InvalidPayload"


def test_intakes_message_that_overtook_its_job_waits_for_it_instead_of_being_refused() -> None:
    """Intake sends first and records the job right after: a fresh first delivery gets
    one short wait for it before its tenant counts as a direct producer's."""
    h = Harness(producer_tenants=())

    def intake_records_the_job() -> None:
        h.job()

    h.while_sleeping = intake_records_the_job

    assert h.processor.process(message(request_body(h)), h.settler) == "completed"
    assert h.slept == [INTAKE_RECORD_WAITS_SECONDS[0]]  # found at the first look


def test_a_doors_message_whose_job_write_failed_is_adopted_whatever_the_list() -> None:
    """Intake sends, then its job write fails (storage down): the request was accepted
    (202) and its message names a tenant intake authenticated. Its input is the claim
    check the door stored in the inputs container, which no producer can write, so the
    processor records its job instead of refusing the tenant."""
    h = Harness(producer_tenants=())

    assert h.processor.process(message(door_request_body(h)), h.settler) == "completed"
    assert h.slept == list(INTAKE_RECORD_WAITS_SECONDS)  # looked for it for 2 s in all
    assert h.status() == "completed"


def test_a_producer_naming_a_doors_claim_check_of_another_request_is_refused() -> None:
    h = Harness(producer_tenants=())
    other = h.claim_check("r0").model_dump(mode="json")

    assert h.processor.process(message(request_body(h, input=other)), h.settler) == (
        "dead-lettered"
    )
    assert h.settler.actions[0][2] == "TenantNotAllowed"


def test_a_redelivered_producer_message_is_refused_without_waiting() -> None:
    h = Harness(producer_tenants=())
    again = replace(message(request_body(h)), delivery_count=2)

    assert h.processor.process(again, h.settler) == "dead-lettered"
    assert h.slept == []


def test_the_rules_refuse_an_unlisted_tenant_at_the_queue_door() -> None:
    rules = RequestRules(local_catalog(), 3600, 86_400)
    request = RequestMessage(
        request_id="r1", tenant_id="contoso", model="local-analyzer", input=InlineText(text="x")
    )
    claim_checks = ClaimChecks(InMemoryBlobs(), "inputs", ("inputs",), 10_000)
    with pytest.raises(TenantNotAllowed, match="ProducerTenants"):
        rules.check_message(request, datetime.now(UTC), claim_checks)


@pytest.mark.parametrize("listed", ["", "fabrikam"])
def test_the_producer_refuses_a_line_whose_tenant_is_not_listed(listed: str) -> None:
    senders = FakeSenders()
    settings = Settings.model_validate({"AllowedModels": "local-analyzer",
                                        "ProducerTenants": listed})  # fmt: skip
    line = {"tenant_id": "contoso", "model": "local-analyzer", "input": {"text": "hello"}}

    report = Producer.from_settings(settings, senders, clock=ManualClock(NOW)).send(
        [RequestLine.model_validate(line)]
    )

    [refusal] = report.refusals
    assert [f.field for f in refusal.fields] == ["tenant_id"]
    assert "ProducerTenants" in refusal.describe()
    assert report.sent == 0
    assert senders.queues == {}
