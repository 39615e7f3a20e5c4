"""Accounting: what each tenant may take of a deployment, and what its requests consumed.

``usage`` sums jobs into rows per UTC day, tenant, model and mode (pure);
``usage_report`` finds and reads the jobs through the document ports. ``ledger`` is
the usage ledger (one document per tenant and UTC month: answers, reservations, budgets'
rule), ``spending`` keeps it in storage, ``ledger_report`` reads it for a range of days
(``ledger_sums``: what that report holds). The ops command ``python -m shared.ops usage``
(``shared.entrypoints.cli.usage``) prints the ledger's report, or the jobs' with
``--from-jobs``.
``tenants`` is the tenant catalog (``tenants.json``): what each tenant may take of a
deployment, its weight, its budget and its models. ``cost`` is what a request's usage
cost at its alias's prices in the model catalog, on the lane that ran it (pure).
"""
