"""``python -m shared.ops``: the operators' command name. The commands live in
``shared.entrypoints.cli`` (``ops`` assembles them); what they act on lives with the
capability it belongs to: the request queues' dead letters and the backlog in
``processing``, Event Grid's dead letters in ``events``, usage in ``accounting``."""
