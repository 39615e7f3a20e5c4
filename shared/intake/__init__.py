"""Accepting work: the HTTP request API, submissions, idempotency keys, tenancy, backpressure.

Every door ends in ``submissions.Intake``, so validation, the claim check, the job and the
request message are the same for all of them. May import the root of ``shared`` and the
ports of other capabilities; never ``adapters`` or an SDK.
"""
