"""The command lines: the operators' ``python -m shared.ops`` (``ops``, with its areas
``servicebus_dead_letters``, ``eventgrid_dead_letters``, ``usage`` and ``jobs``; the help
every parser shares in ``ops_help``, the confirmation and ``--extend-deadline`` of both
replays in ``replay_options``) and the producer's ``python -m shared.producer``
(``producer``). ``shared/ops`` and ``shared/producer`` keep the command names and hand
over to these."""
