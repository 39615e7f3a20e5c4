"""A local Azure Functions host for Python v2 apps, for machines without Core Tools.

It indexes ``function_app.py`` the way the Python worker does and runs HTTP, Event Grid,
blob (Event Grid source), Service Bus and timer triggers against the local stack
(Azurite and the Service Bus emulator). See tools/functions-host/README.md.
"""
