"""Accounting: what each tenant's requests consumed, read from the stored jobs.

``usage`` sums jobs into rows per UTC day, tenant, model and mode (pure);
``usage_report`` finds and reads the jobs through the document ports. The ops command
``python -m shared.ops usage`` (``shared.entrypoints.cli.usage``) prints the result.
"""
