"""The Azure OpenAI Global Batch lane: hour-scale work at half the price, with the app as
the only submitter, so that every batch request is validated, attributed to its tenant
and accounted for like queue work (docs/global-batch.md, "Queue or batch?")."""
