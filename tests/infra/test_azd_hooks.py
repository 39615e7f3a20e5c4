"""azd's hooks run with Python alone on PATH: no make, Node, npm or az.

Each hook is run as azure.yaml says (its POSIX command, through ``/bin/sh``) with a PATH
that holds only the Python running the tests. The prepackage hook then puts the pinned
Swagger UI files in place from the registry's tarball (a local registry here, checked
against the lock file's integrity); the preprovision hook takes a given client id without
az, and where az is truly needed (creating the API's app registration, stage 2 after the
deploy) both stop at once and say so.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

from tests.infra import INFRA, REPO_ROOT
from tests.infra.test_azd import azure_yaml

HOOKS = INFRA / "hooks"
VERSION = "9.9.9"
FILES = {
    "swagger-ui.css": b".swagger-ui {}\n",
    "swagger-ui-bundle.js": b"window.SwaggerUIBundle = function () {};\n",
    "favicon-32x32.png": b"\x89PNG\r\n",
    "LICENSE": b"Apache-2.0\n",
    "NOTICE": b"swagger-ui\n",
    "swagger-ui-bundle.js.LICENSE.txt": b"licences\n",
}


def hook_module(name: str) -> ModuleType:
    """A hook script of infra/hooks, imported from its file (infra is no package)."""
    spec = importlib.util.spec_from_file_location(f"hooks_{name}", HOOKS / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def python_only(tmp_path: Path) -> dict[str, str]:
    """An environment whose PATH holds python3 and python and nothing else."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("python3", "python"):
        (bin_dir / name).symlink_to(sys.executable)
    for tool in ("make", "node", "npm", "az", "dirname"):
        assert shutil.which(tool, path=str(bin_dir)) is None
    return {"PATH": str(bin_dir), "HOME": str(tmp_path), "SYSTEMROOT": ""}


def run_hook(name: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = azure_yaml()["hooks"][name]["posix"]
    assert command["shell"] == "sh"
    return subprocess.run(
        ["/bin/sh", "-c", command["run"]],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def tarball() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, content in FILES.items():
            info = tarfile.TarInfo(f"package/{name}")
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def app_copy(tmp_path: Path, content: bytes, integrity_of: bytes | None = None) -> Path:
    """A folder laid out as the repository for the hook: the script, a lock file pinning
    swagger-ui-dist VERSION with the integrity of ``integrity_of`` (default: ``content``),
    and a file registry serving ``content`` as its tarball."""
    root = tmp_path / "app"
    (root / "infra" / "hooks").mkdir(parents=True)
    shutil.copy(HOOKS / "swagger_ui.py", root / "infra" / "hooks")
    digest = hashlib.sha512(content if integrity_of is None else integrity_of).digest()
    lock = {
        "packages": {
            "node_modules/swagger-ui-dist": {
                "version": VERSION,
                "integrity": "sha512-" + base64.b64encode(digest).decode(),
            }
        }
    }
    (root / "package-lock.json").write_text(json.dumps(lock))
    registry = tmp_path / "registry" / "swagger-ui-dist" / "-"
    registry.mkdir(parents=True)
    (registry / f"swagger-ui-dist-{VERSION}.tgz").write_bytes(content)
    return root


VENDOR = Path("shared/entrypoints/http/docs/vendor/swagger-ui")


def test_prepackage_fetches_the_pinned_swagger_ui_with_python_alone(
    tmp_path: Path, python_only: dict[str, str]
) -> None:
    root = app_copy(tmp_path, tarball())
    env = python_only | {"INFERBUS_NPM_REGISTRY": (tmp_path / "registry").as_uri()}

    done = run_hook("prepackage", root, env)

    assert done.returncode == 0, done.stderr
    for name, content in FILES.items():
        assert (root / VENDOR / name).read_bytes() == content
    again = run_hook("prepackage", root, env)
    assert "already in" in again.stdout, "files in place at the pinned version are kept"


def test_prepackage_refuses_a_tarball_that_is_not_the_pinned_one(
    tmp_path: Path, python_only: dict[str, str]
) -> None:
    root = app_copy(tmp_path, tarball(), integrity_of=b"another tarball")
    env = python_only | {"INFERBUS_NPM_REGISTRY": (tmp_path / "registry").as_uri()}

    done = run_hook("prepackage", root, env)

    assert done.returncode == 1
    assert "does not match package-lock.json's integrity" in done.stderr
    assert not (root / VENDOR / "swagger-ui-bundle.js").exists()


def test_prepackage_reads_the_repositorys_own_pin() -> None:
    version, integrity = hook_module("swagger_ui").pinned(REPO_ROOT / "package-lock.json")
    package = json.loads((REPO_ROOT / "package.json").read_text())
    assert version == package["devDependencies"]["swagger-ui-dist"]
    assert integrity.startswith("sha512-")


def test_preprovision_takes_a_given_client_id_without_az(python_only: dict[str, str]) -> None:
    env = python_only | {"AZURE_ENV_NAME": "dev", "INFERBUS_API_CLIENT_ID": "0" * 36}
    done = run_hook("preprovision", REPO_ROOT, env)
    assert done.returncode == 0, done.stderr
    assert "0" * 36 in done.stdout


def test_preprovision_says_az_is_needed_to_create_the_registration(
    python_only: dict[str, str],
) -> None:
    done = run_hook("preprovision", REPO_ROOT, python_only | {"AZURE_ENV_NAME": "dev"})
    assert done.returncode == 1
    assert "needs the Azure CLI (az), which is not on PATH" in done.stderr
    assert "azd env set INFERBUS_API_CLIENT_ID" in done.stderr, "and the way around it"


def test_preprovision_says_when_az_is_not_signed_in(
    tmp_path: Path, python_only: dict[str, str]
) -> None:
    az = Path(python_only["PATH"]) / "az"
    az.write_text("#!/bin/sh\necho 'ERROR: Please run az login to setup account.' >&2\nexit 1\n")
    az.chmod(0o755)
    done = run_hook("preprovision", REPO_ROOT, python_only | {"AZURE_ENV_NAME": "dev"})
    assert done.returncode == 1
    assert "is not signed in" in done.stderr
    assert "Please run az login" in done.stderr, "az's own words"


def test_preprovision_creates_or_reuses_the_registration_by_its_unique_name(
    tmp_path: Path, python_only: dict[str, str]
) -> None:
    """A stand-in az records the Graph calls; a stand-in azd what is stored."""
    log = tmp_path / "calls.log"
    bin_dir = Path(python_only["PATH"])
    (bin_dir / "az").write_text(
        "#!/bin/sh\n"
        f'echo "az $*" >> {log}\n'
        'case "$*" in\n'
        '  "account show"*) echo "t-1" ;;\n'
        '  *"--method GET"*) echo \'{"appId": "11111111-2222-3333-4444-555555555555"}\' ;;\n'
        "esac\n"
    )
    (bin_dir / "azd").write_text(f'#!/bin/sh\necho "azd $*" >> {log}\n')
    for tool in ("az", "azd"):
        (bin_dir / tool).chmod(0o755)
    env = python_only | {
        "AZURE_ENV_NAME": "dev",
        "AZURE_SUBSCRIPTION_ID": "abcdef12-0000-0000-0000-000000000000",
        "AZURE_TENANT_ID": "t-1",
    }

    done = run_hook("preprovision", REPO_ROOT, env)

    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines()
    key = "https://graph.microsoft.com/v1.0/applications(uniqueName='inferbus-api-dev-abcdef12')"
    assert any(c.startswith(f"az rest --method PATCH --url {key} ") for c in calls)
    assert all("Prefer=create-if-missing" in c for c in calls if "--method PATCH" in c)
    principal = "servicePrincipals(appId='11111111-2222-3333-4444-555555555555')"
    assert any("--method PATCH" in c and principal in c for c in calls)
    assert calls[-1] == "azd env set INFERBUS_API_CLIENT_ID 11111111-2222-3333-4444-555555555555"


def test_preprovision_refuses_a_cli_signed_in_to_another_tenant(
    tmp_path: Path, python_only: dict[str, str]
) -> None:
    az = Path(python_only["PATH"]) / "az"
    az.write_text("#!/bin/sh\necho other-tenant\n")
    az.chmod(0o755)
    env = python_only | {"AZURE_ENV_NAME": "dev", "AZURE_TENANT_ID": "t-1"}
    done = run_hook("preprovision", REPO_ROOT, env)
    assert done.returncode == 1
    assert "az login --tenant t-1" in done.stderr


def test_postdeploy_stops_at_once_when_az_is_missing(python_only: dict[str, str]) -> None:
    env = python_only | {
        "AZURE_SUBSCRIPTION_ID": "s",
        "AZURE_RESOURCE_GROUP": "rg",
        "environmentName": "dev",
        "functionAppName": "func-dev",
    }
    done = run_hook("postdeploy", REPO_ROOT, env)
    assert done.returncode == 1
    assert "needs the Azure CLI (az), which is not on PATH" in done.stderr
    assert "azd hooks run postdeploy" in done.stderr


def test_postdeploy_stops_at_once_when_az_is_not_signed_in(python_only: dict[str, str]) -> None:
    az = Path(python_only["PATH"]) / "az"
    az.write_text("#!/bin/sh\nexit 1\n")
    az.chmod(0o755)
    done = run_hook("postdeploy", REPO_ROOT, python_only)
    assert done.returncode == 1
    assert "the Azure CLI is not signed in" in done.stderr


def test_no_hook_calls_make_node_or_npm() -> None:
    for hook in azure_yaml()["hooks"].values():
        for platform in hook.values():
            words = platform["run"].split()
            assert not {"make", "node", "npm", "npx"} & set(words), platform["run"]
    for script in (*HOOKS.glob("*.py"), *HOOKS.glob("*.sh"), *HOOKS.glob("*.ps1")):
        text = script.read_text(encoding="utf-8")
        for tool in ("make ", "npm ", "npx ", "node "):
            assert f"\n{tool}" not in text, (script.name, tool)
            assert f"$({tool}" not in text, (script.name, tool)
    assert os.access(HOOKS / "postdeploy.sh", os.X_OK)
