"""Sample app for the local host's tests: every trigger kind the host supports."""

import azure.functions as func
from sample_blueprint import bp

app = func.FunctionApp(http_auth_level=func.AuthLevel.FUNCTION)
app.register_functions(bp)
