"""azd preprovision hook: the Entra app registration of the Inferbus API.

App Service authentication guards the request API with tokens issued for this
registration (infra/modules/app-authentication.bicep), and the app reads each caller's
tenant from them, so main.bicep cannot be deployed without one. When the azd environment
names none (``INFERBUS_API_CLIENT_ID``), this hook creates it, or finds the one it created
before, and stores its client id there:

- the registration's ``uniqueName`` is ``inferbus-api-<AZURE_ENV_NAME>`` (and the first
  eight characters of the subscription id when azd knows it), so running again reuses it;
  Microsoft Graph's upsert (``PATCH /applications(uniqueName=...)`` with
  ``Prefer: create-if-missing``) creates it only when it is missing;
- single tenant (``AzureADMyOrg``), v2 access tokens (their audience is the client id,
  which App Service authentication accepts), no secret, no redirect URI: it only
  identifies the API to callers asking for tokens;
- its service principal in the tenant (``PATCH /servicePrincipals(appId=...)``, also an
  upsert), without which no token can be issued for it.

The Graph calls go through the Azure CLI (``az rest``), signed in to the tenant azd
deploys to, as someone allowed to register applications (by default every member user;
otherwise the Application Developer role). Without az, or not signed in, the hook stops
before anything is provisioned and says so. Only Python's standard library.

    python infra/hooks/api_registration.py   (azd runs it before `azd provision`)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence

GRAPH = "https://graph.microsoft.com/v1.0"
SETTING = "INFERBUS_API_CLIENT_ID"
AZ_MISSING = (
    f"{SETTING} is not set, and creating the API's Entra app registration needs the "
    "Azure CLI (az), which is not on PATH. Install it (https://aka.ms/installazurecli) and "
    f"sign in with `az login`, or name an existing registration: azd env set {SETTING} "
    "<client id>"
)


class HookError(Exception):
    """What went wrong, in words for the person running azd."""


def unique_name(environ: Mapping[str, str]) -> str:
    environment = environ.get("AZURE_ENV_NAME", "").strip()
    if not environment:
        raise HookError("AZURE_ENV_NAME is not set: run this through azd (azd up, azd provision)")
    subscription = environ.get("AZURE_SUBSCRIPTION_ID", "").strip()
    return f"inferbus-api-{environment}" + (f"-{subscription[:8]}" if subscription else "")


def run(command: Sequence[str]) -> str:
    """A command's output; its own error output as the error when it fails."""
    done = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise HookError(f"{' '.join(command[:3])} failed: {said[-1] if said else done.returncode}")
    return done.stdout


def signed_in_tenant(az: str, environ: Mapping[str, str]) -> str:
    try:
        tenant = run([az, "account", "show", "--query", "tenantId", "--output", "tsv"]).strip()
    except HookError as error:
        raise HookError(
            f"{SETTING} is not set, and the Azure CLI that would create the API's app "
            f"registration is not signed in ({error}): run `az login`, or name an existing "
            f"registration: azd env set {SETTING} <client id>"
        ) from error
    wanted = environ.get("AZURE_TENANT_ID", "").strip()
    if wanted and wanted.lower() != tenant.lower():
        raise HookError(
            f"the Azure CLI is signed in to tenant {tenant}, azd deploys to {wanted}: "
            f"run `az login --tenant {wanted}`"
        )
    return tenant


def graph(az: str, method: str, path: str, body: Mapping[str, object] | None = None) -> str:
    command = [az, "rest", "--method", method, "--url", f"{GRAPH}/{path}"]
    if body is not None:
        command += [
            "--headers",
            "Content-Type=application/json",
            "Prefer=create-if-missing",
            "--body",
            json.dumps(body),
        ]
    return run(command)


def ensure_registration(az: str, name: str, environment: str) -> str:
    """The client id of the registration called ``name``, created if it is missing."""
    key = f"applications(uniqueName='{name}')"
    graph(
        az,
        "PATCH",
        key,
        {
            "displayName": f"Inferbus API ({environment})",
            "signInAudience": "AzureADMyOrg",
            "api": {"requestedAccessTokenVersion": 2},
        },
    )
    app_id = str(json.loads(graph(az, "GET", f"{key}?$select=appId"))["appId"])
    graph(az, "PATCH", f"servicePrincipals(appId='{app_id}')", {"accountEnabled": True})
    return app_id


def store(client_id: str) -> None:
    azd = shutil.which("azd")
    if azd is None:
        raise HookError(
            f"the API's app registration is {client_id}, but azd is not on PATH to store it: "
            f"run `azd env set {SETTING} {client_id}`, then azd up again"
        )
    run([azd, "env", "set", SETTING, client_id])


def main(environ: Mapping[str, str] = os.environ) -> int:
    given = environ.get(SETTING, "").strip()
    try:
        if given:
            print(f"preprovision: the API's app registration is {given} ({SETTING})")
            return 0
        name = unique_name(environ)
        az = shutil.which("az")
        if az is None:
            raise HookError(AZ_MISSING)
        tenant = signed_in_tenant(az, environ)
        client_id = ensure_registration(az, name, environ["AZURE_ENV_NAME"])
        store(client_id)
    except HookError as error:
        print(f"preprovision: {error}", file=sys.stderr)
        return 1
    print(
        f"preprovision: the API's app registration {name} in tenant {tenant} is {client_id}, "
        f"stored as {SETTING}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
