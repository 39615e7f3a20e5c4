"""Inferbus: the composition root. Creates the FunctionApp and registers the Blueprints."""

import azure.functions as func

from triggers.event_doors import bp as event_doors
from triggers.http_api import bp as http_api
from triggers.maintenance import bp as maintenance
from triggers.servicebus import bp as servicebus

app = func.FunctionApp()
app.register_functions(http_api)
app.register_functions(servicebus)
app.register_functions(event_doors)
app.register_functions(maintenance)
