"""checkov's Bicep checks pass on infra/, except the reasoned skips of checkov_skips.py.

checkov runs from its own virtual environment, ``.local/checkov``, which ``make bootstrap``
creates from ``requirements-checkov.txt``: checkov pins ``packaging<24`` while pytest needs
``packaging>=24``, so it cannot share ``.venv``. Its pycep-parser is the version the tests
read the templates with (requirements-dev.txt), which the first test checks.

The scan is offline: ``--skip-download`` and ``BC_SKIP_MAPPING`` (no Prisma Cloud data),
``CKV_SKIP_PACKAGE_UPDATE_CHECK`` (no PyPI version check), no API key (nothing uploaded).
The ``arm``
framework has nothing to scan: there are no ARM templates in infra/ (Bicep compiles to ARM,
and checkov's Bicep runner applies the ARM resource checks to the Bicep resources).
"""

from __future__ import annotations

import json
import os
import subprocess
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from tests.infra import INFRA, REPO_ROOT, bicep_files
from tests.infra.checkov_skips import SKIPS

# checkov 3.3.30 pins pycep-parser==0.5.1; the tests must read Bicep as checkov does.
PYCEP_VERSION = "0.5.1"
CHECKOV_PYTHON = REPO_ROOT / ".local" / "checkov" / "bin" / "python"
OFFLINE_ENV = {
    "BC_SKIP_MAPPING": "TRUE",
    "CKV_SKIP_PACKAGE_UPDATE_CHECK": "TRUE",
    "CKV_PARSE_ERROR_FAIL": "TRUE",
    "LOG_LEVEL": "WARNING",
}


@pytest.fixture(scope="session")
def checkov_python() -> Path:
    if not CHECKOV_PYTHON.is_file():
        pytest.fail(f"{CHECKOV_PYTHON} is missing: `make bootstrap` creates checkov's venv")
    return CHECKOV_PYTHON


@pytest.fixture(scope="session")
def checkov_report(checkov_python: Path) -> dict[str, Any]:
    """checkov's JSON report of infra/ (framework bicep), every result included."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("BC_", "PRISMA"))}
    env.update(OFFLINE_ENV)
    completed = subprocess.run(
        [
            str(checkov_python),
            "-m",
            "checkov.main",
            "--directory",
            str(INFRA),
            "--framework",
            "bicep",
            "--skip-download",
            "--output",
            "json",
            "--compact",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    # 0: all passed, 1: some checks failed; anything else is checkov itself failing.
    assert completed.returncode in (0, 1), completed.stderr[-4000:]
    report = json.loads(completed.stdout)
    assert isinstance(report, dict), f"one framework expected: {completed.stdout[:500]}"
    assert report["check_type"] == "bicep"
    return report


def test_checkov_reads_bicep_with_the_pycep_version_of_the_tests(checkov_python: Path) -> None:
    assert version("pycep-parser") == PYCEP_VERSION
    installed = subprocess.run(
        [
            str(checkov_python),
            "-c",
            "from importlib.metadata import version; print(version('pycep-parser'))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert installed.stdout.strip() == PYCEP_VERSION


def test_checkov_parses_every_template(checkov_report: dict[str, Any]) -> None:
    results = checkov_report["results"]
    assert checkov_report["summary"]["parsing_errors"] == 0, results["parsing_errors"]
    scanned = {
        result["file_path"]
        for kind in ("passed_checks", "failed_checks")
        for result in results[kind]
    }
    templates_with_resources = {
        "/" + path.relative_to(INFRA).as_posix()
        for path in bicep_files()
        if "\nresource " in "\n" + path.read_text(encoding="utf-8")
    }
    # Every template that declares resources was read (those checkov has checks for).
    assert scanned, "checkov checked nothing"
    assert scanned <= templates_with_resources
    assert {
        "/modules/storage-host.bicep",
        "/modules/storage-data.bicep",
        "/modules/function-app.bicep",
        "/modules/eventgrid-topics.bicep",
        "/modules/app-authentication.bicep",
    } <= scanned


def _skip_for(result: dict[str, Any]) -> str | None:
    skip = SKIPS.get(result["check_id"])
    resource_type = result["resource"].rsplit(".", 1)[0]
    if skip is not None and resource_type in skip.resource_types:
        return skip.reason
    return None


def test_no_failed_check_outside_the_skip_list(checkov_report: dict[str, Any]) -> None:
    unexpected = [
        f"{r['check_id']} {r['check_name']} ({r['file_path']} {r['resource']})"
        for r in checkov_report["results"]["failed_checks"]
        if _skip_for(r) is None
    ]
    assert not unexpected, "checkov failures to fix (or skip with a reason):\n" + "\n".join(
        unexpected
    )


def test_every_skip_is_still_needed(checkov_report: dict[str, Any]) -> None:
    used = {
        (r["check_id"], r["resource"].rsplit(".", 1)[0])
        for r in checkov_report["results"]["failed_checks"]
    }
    stale = [
        f"{check_id} on {resource_type}"
        for check_id, skip in SKIPS.items()
        for resource_type in skip.resource_types
        if (check_id, resource_type) not in used
    ]
    assert not stale, f"skips that match no failure (remove them): {stale}"


def test_skips_are_few_and_reasoned() -> None:
    # 17: CKV_AZURE_78 looks for siteConfig.ftpsState, which Flex Consumption rejects.
    assert len(SKIPS) <= 17
    for check_id, skip in SKIPS.items():
        assert check_id.startswith("CKV_AZURE_"), check_id
        assert skip.resource_types, check_id
        assert len(skip.reason) >= 40, f"{check_id}: say why it does not apply"
