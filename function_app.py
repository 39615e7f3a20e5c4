"""Inferbus: the composition root. Creates the FunctionApp and registers the Blueprints.

The model catalog is checked first (``models.json``, or ``ModelCatalog``), then the tenant
catalog against it (``tenants.json`` when there is one, or ``TenantCatalog``): a catalog
that cannot be served stops the indexing here, with the file, the alias or tenant and the
field named, instead of failing every request later.
"""

import azure.functions as func

from shared.entrypoints.bootstrap import verify_model_catalog, verify_tenant_catalog
from shared.log_lines import install_one_line_records
from triggers.event_doors import bp as event_doors
from triggers.http_api import bp as http_api
from triggers.maintenance import bp as maintenance
from triggers.servicebus import bp as servicebus

install_one_line_records()  # caller text never forges a log line (shared/log_lines.py)
verify_tenant_catalog(verify_model_catalog())

app = func.FunctionApp()
app.register_functions(http_api)
app.register_functions(servicebus)
app.register_functions(event_doors)
app.register_functions(maintenance)
