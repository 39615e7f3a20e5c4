"""Operations (``python -m shared.ops``): dead letters of Event Grid and of the request
queues, and the backlog report.

Commands run on the services ``shared.composition`` builds for the app (``get_services``). May
import every capability of ``shared``; SDK calls stay in ``adapters``.

- ``__main__``: the command line: assembles the command areas' parsers and runs one.
- ``eventgrid_deadletters`` / ``eventgrid_cli``: Event Grid's dead-lettered events and the
  ``deadletters`` commands that list and replay them.
- ``servicebus_deadletter_queues``: what a request queue's dead-letter sub-queue holds, and
  the port over it; ``deadletter_filters``: choosing and summarising its messages;
  ``servicebus_deadletters``: replaying and purging them; ``servicebus_cli`` and
  ``servicebus_cli_output``: the ``sb-deadletters`` commands and how they print.
- ``message_preview``: redaction and body previews for anything shown to an operator.
- ``backlog_report``: the request queue's health (counts, oldest age), logged once a minute.
"""
