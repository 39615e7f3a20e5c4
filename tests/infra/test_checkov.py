"""checkov's Bicep checks pass on infra/, except the reasoned skips of ``.checkov.yaml``.

``.checkov.yaml`` at the repository root is checkov's own configuration (``checkov -d infra``
from the root reads it, as does ``checkov --config-file .checkov.yaml``): the directory, the
framework and the ``skip-check`` list. Each skip carries its reason as the YAML comment right
above it (or on its line), which starts with the resource types it is meant for in brackets,
e.g. ``# [Microsoft.Web/sites] Incoming client certificates: ...``. checkov itself skips a
check on every resource type; the tests keep the skip to the types its reason names.

checkov runs from its own virtual environment, ``.local/checkov``, which ``make bootstrap``
creates from ``requirements-checkov.txt``: checkov pins ``packaging<24`` while pytest needs
``packaging>=24``, so it cannot share ``.venv``. Its pycep-parser is the version the tests
read the templates with (requirements-dev.txt), which the first test checks.

Two scans run side by side: one with the configuration, as a developer or CI runs checkov
(no failure may be left), and one without it (from a folder with no ``.checkov.yaml``), which
shows what each skip hides: a skip that hides nothing is stale, and a skipped check failing
on a resource type its reason does not name is a new finding.

The scans are offline: ``--skip-download`` and ``BC_SKIP_MAPPING`` (no Prisma Cloud data),
``CKV_SKIP_PACKAGE_UPDATE_CHECK`` (no PyPI version check), no API key (nothing uploaded).
The ``arm`` framework has nothing to scan: there are no ARM templates in infra/ (Bicep
compiles to ARM, and checkov's Bicep runner applies the ARM resource checks to the Bicep
resources).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.infra import INFRA, REPO_ROOT, bicep_files

# checkov 3.3.30 pins pycep-parser==0.5.1; the tests must read Bicep as checkov does.
PYCEP_VERSION = "0.5.1"
CHECKOV_PYTHON = REPO_ROOT / ".local" / "checkov" / "bin" / "python"
CHECKOV_CONFIG = REPO_ROOT / ".checkov.yaml"
OFFLINE_ENV = {
    "BC_SKIP_MAPPING": "TRUE",
    "CKV_SKIP_PACKAGE_UPDATE_CHECK": "TRUE",
    "CKV_PARSE_ERROR_FAIL": "TRUE",
    "LOG_LEVEL": "WARNING",
}
# A reason is at least this long once its resource types are taken off: say why.
MIN_REASON = 40


# --- the skips of .checkov.yaml, with the reasons of their comments -------------------------


@dataclass(frozen=True)
class Skip:
    resource_types: frozenset[str]
    reason: str


_TOP_LEVEL_KEY = re.compile(r"^[A-Za-z][\w-]*\s*:")
_COMMENT = re.compile(r"^\s*#\s?(?P<text>.*)$")
_ITEM = re.compile(r"^\s*-\s*(?P<value>[^\s#]+)\s*(?:#\s?(?P<comment>.*))?$")
_TYPED_REASON = re.compile(r"^\[(?P<types>[^\]]*)\]\s*(?P<reason>.*)$", re.DOTALL)


def skip_comments(text: str) -> dict[str, str]:
    """Each item of the block ``skip-check:`` with its comment: the comment lines right above
    it (a blank line ends a comment block) and a comment on its own line, joined."""
    comments: dict[str, str] = {}
    in_block = False
    pending: list[str] = []
    for line in text.splitlines():
        if _TOP_LEVEL_KEY.match(line):
            in_block = line.split(":", 1)[0].strip() == "skip-check"
            pending = []
            continue
        if not in_block:
            continue
        if not line.strip():
            pending = []
        elif comment := _COMMENT.match(line):
            pending.append(comment["text"].strip())
        elif item := _ITEM.match(line):
            parts = [*pending, (item["comment"] or "").strip()]
            comments[item["value"].strip("'\"")] = " ".join(part for part in parts if part)
            pending = []
    return comments


def read_skips(text: str) -> tuple[dict[str, Skip], list[str]]:
    """The skips of a checkov configuration and the problems of their reasons (a skip with
    no comment, no bracketed resource types, or too short a reason is a problem)."""
    config = yaml.safe_load(text) or {}
    listed = config.get("skip-check") or []
    if isinstance(listed, str):  # checkov also takes a comma-separated string
        listed = [part.strip() for part in listed.split(",") if part.strip()]
    comments = skip_comments(text)
    skips: dict[str, Skip] = {}
    problems: list[str] = []
    for check_id in listed:
        comment = comments.get(str(check_id), "")
        typed = _TYPED_REASON.match(comment)
        if not comment:
            problems.append(f"{check_id}: no reason (a comment right above it, or on its line)")
            continue
        if typed is None:
            problems.append(f"{check_id}: the reason does not start with [resource types]")
            continue
        types = frozenset(part.strip() for part in typed["types"].split(",") if part.strip())
        reason = typed["reason"].strip()
        if not types:
            problems.append(f"{check_id}: no resource type in the brackets")
        if len(reason) < MIN_REASON:
            problems.append(f"{check_id}: say why it does not apply: {reason!r}")
        if check_id in skips:
            problems.append(f"{check_id}: listed twice")
        skips[str(check_id)] = Skip(types, reason)
    return skips, problems


def config_text() -> str:
    assert CHECKOV_CONFIG.is_file(), f"{CHECKOV_CONFIG} is missing"
    return CHECKOV_CONFIG.read_text(encoding="utf-8")


def configured_skips() -> dict[str, Skip]:
    skips, problems = read_skips(config_text())
    assert not problems, "skips of .checkov.yaml without a proper reason:\n" + "\n".join(problems)
    return skips


# --- the scans ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scans:
    configured: dict[str, Any]  # checkov --config-file .checkov.yaml, from the repository root
    unfiltered: dict[str, Any]  # checkov --directory infra, no configuration read


@pytest.fixture(scope="session")
def checkov_python() -> Path:
    if not CHECKOV_PYTHON.is_file():
        pytest.fail(f"{CHECKOV_PYTHON} is missing: `make bootstrap` creates checkov's venv")
    return CHECKOV_PYTHON


def _report(process: subprocess.Popen[str]) -> dict[str, Any]:
    stdout, stderr = process.communicate(timeout=300)
    # 0: all passed, 1: some checks failed; anything else is checkov itself failing.
    assert process.returncode in (0, 1), stderr[-4000:]
    report = json.loads(stdout)
    assert isinstance(report, dict), f"one framework expected: {stdout[:500]}"
    assert report["check_type"] == "bicep"
    return report


def _scan(checkov_python: Path, root: Path, home: Path) -> Scans:
    """checkov's JSON reports of ``root``'s infra/, with and without its .checkov.yaml, both
    running at once; ``home`` is checkov's home (it also reads ~/.checkov.yaml: a home of its
    own keeps the scans to ``root``) and the folder the unconfigured scan runs from."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("BC_", "PRISMA"))}
    env.update(OFFLINE_ENV, HOME=str(home))
    output = ["--output", "json", "--compact"]
    common: dict[str, Any] = {
        "stdout": subprocess.PIPE,
        "stderr": subprocess.PIPE,
        "text": True,
        "env": env,
    }
    module = [str(checkov_python), "-m", "checkov.main"]
    configured = subprocess.Popen(
        [*module, "--config-file", str(root / ".checkov.yaml"), *output], cwd=root, **common
    )
    # From a folder without .checkov.yaml (checkov reads the one of the working directory).
    infra = root / "infra"
    unfiltered = subprocess.Popen(
        [*module, "--directory", str(infra), "--framework", "bicep", "--skip-download", *output],
        cwd=home,
        **common,
    )
    return Scans(configured=_report(configured), unfiltered=_report(unfiltered))


@pytest.fixture(scope="session")
def scans(checkov_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Scans:
    """checkov's JSON reports of infra/, with and without .checkov.yaml, every result included."""
    return _scan(checkov_python, REPO_ROOT, tmp_path_factory.mktemp("checkov-home"))


# The private setting (main.bicep's privateNetworking=true): checkov scans each file alone,
# with its parameters' defaults, so the scan of that setting is a copy of infra/ whose
# defaults are the values main.bicep passes with the option on.
PRIVATE_DEFAULTS = (
    ("modules/*.bicep", "param publicNetworkAccess string = 'Enabled'", "'Disabled'"),
    ("main.bicep", "param privateNetworking bool = false", "true"),
)
# The public-access checks the default setting skips, which the private setting passes.
PUBLIC_ACCESS_CHECKS = {
    ("CKV_AZURE_59", "Microsoft.Storage/storageAccounts"),
    ("CKV_AZURE_193", "Microsoft.EventGrid/topics"),
    ("CKV_AZURE_134", "Microsoft.CognitiveServices/accounts"),
}


@pytest.fixture(scope="session")
def private_scans(checkov_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Scans:
    """The scans of ``scans`` on a copy of infra/ set up as privateNetworking=true deploys."""
    root = tmp_path_factory.mktemp("checkov-private")
    shutil.copytree(INFRA, root / "infra")
    shutil.copy(CHECKOV_CONFIG, root / ".checkov.yaml")
    flipped = 0
    for pattern, line, value in PRIVATE_DEFAULTS:
        for path in sorted((root / "infra").glob(pattern)):
            text = path.read_text(encoding="utf-8")
            if line in text:
                head = line.rsplit("= ", 1)[0]
                path.write_text(text.replace(line, f"{head}= {value}"), encoding="utf-8")
                flipped += 1
    # Six modules take publicNetworkAccess (storage x2, Service Bus, the topics, the
    # namespace, Azure OpenAI), and main.bicep the option itself.
    assert flipped == 7, f"{flipped} defaults set for the private scan"
    return _scan(checkov_python, root, tmp_path_factory.mktemp("checkov-private-home"))


def failures(report: dict[str, Any]) -> list[str]:
    """A report's failed checks, one line each: the check, its name, the file and resource."""
    return [
        f"{r['check_id']} {r['check_name']} ({r['file_path']} {r['resource']})"
        for r in report["results"]["failed_checks"]
    ]


# --- tests ----------------------------------------------------------------------------------


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


def test_the_config_scans_the_bicep_of_infra_offline() -> None:
    config = yaml.safe_load(config_text())
    assert config["directory"] == ["infra"]
    assert config["framework"] == ["bicep"]
    assert config["skip-download"] is True


def test_every_skip_in_the_config_has_a_reason() -> None:
    skips, problems = read_skips(config_text())
    assert skips, ".checkov.yaml skips nothing: then remove this test's skip machinery"
    assert not problems, "skips of .checkov.yaml without a proper reason:\n" + "\n".join(problems)


def test_a_skip_without_a_reason_is_caught() -> None:
    reason = "[Microsoft.Web/sites] " + "a reason long enough to say why it does not apply"
    text = (
        "framework:\n  - bicep\nskip-check:\n"
        f"  # {reason}\n  - CKV_AZURE_1\n"
        f"  - CKV_AZURE_2  # {reason}\n"
        "  # a comment block that a blank line ends\n\n  - CKV_AZURE_3\n"
        "  - CKV_AZURE_4\n"
        "  # no resource types, but long enough to be a reason otherwise\n  - CKV_AZURE_5\n"
    )
    skips, problems = read_skips(text)
    assert skips["CKV_AZURE_1"] == Skip(frozenset({"Microsoft.Web/sites"}), reason[22:])
    assert skips["CKV_AZURE_2"] == skips["CKV_AZURE_1"]
    assert [problem.split(":")[0] for problem in problems] == [
        "CKV_AZURE_3",
        "CKV_AZURE_4",
        "CKV_AZURE_5",
    ]


def test_checkov_parses_every_template(scans: Scans) -> None:
    for report in (scans.configured, scans.unfiltered):
        results = report["results"]
        assert report["summary"]["parsing_errors"] == 0, results["parsing_errors"]
    results = scans.unfiltered["results"]
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


def test_checkov_with_the_config_fails_nothing(scans: Scans) -> None:
    """What `checkov -d infra` (or --config-file .checkov.yaml) prints: no failure at all."""
    report = scans.configured
    failed = failures(report)
    assert report["summary"]["passed"] > 0, "checkov with .checkov.yaml checked nothing"
    assert not failed, "checkov failures to fix (or skip with a reason):\n" + "\n".join(failed)


def _skip_for(result: dict[str, Any], skips: dict[str, Skip]) -> str | None:
    skip = skips.get(result["check_id"])
    resource_type = result["resource"].rsplit(".", 1)[0]
    if skip is not None and resource_type in skip.resource_types:
        return skip.reason
    return None


def test_no_failed_check_outside_the_skip_list(scans: Scans) -> None:
    skips = configured_skips()
    unexpected = [
        f"{r['check_id']} {r['check_name']} ({r['file_path']} {r['resource']})"
        for r in scans.unfiltered["results"]["failed_checks"]
        if _skip_for(r, skips) is None
    ]
    assert not unexpected, (
        "checkov failures to fix (or skip in .checkov.yaml, with the resource type and a "
        "reason):\n" + "\n".join(unexpected)
    )


def test_every_skip_is_still_needed(scans: Scans) -> None:
    used = {
        (r["check_id"], r["resource"].rsplit(".", 1)[0])
        for r in scans.unfiltered["results"]["failed_checks"]
    }
    stale = [
        f"{check_id} on {resource_type}"
        for check_id, skip in configured_skips().items()
        for resource_type in sorted(skip.resource_types)
        if (check_id, resource_type) not in used
    ]
    assert not stale, f"skips of .checkov.yaml that match no failure (remove them): {stale}"


def test_skips_are_few_and_reasoned() -> None:
    skips = configured_skips()
    # 17: CKV_AZURE_78 looks for siteConfig.ftpsState, which Flex Consumption rejects.
    assert len(skips) <= 17
    for check_id, skip in skips.items():
        assert check_id.startswith("CKV_AZURE_"), check_id
        assert skip.resource_types, check_id
        assert len(skip.reason) >= MIN_REASON, f"{check_id}: say why it does not apply"


def test_checkov_with_the_config_fails_nothing_with_private_networking(
    private_scans: Scans,
) -> None:
    """`checkov -d infra` of the privateNetworking=true setting: no failure either."""
    report = private_scans.configured
    failed = failures(report)
    assert report["summary"]["passed"] > 0, "the private scan checked nothing"
    assert not failed, "checkov failures with privateNetworking:\n" + "\n".join(failed)
    skips = configured_skips()
    unexpected = [
        f"{r['check_id']} ({r['file_path']} {r['resource']})"
        for r in private_scans.unfiltered["results"]["failed_checks"]
        if _skip_for(r, skips) is None
    ]
    assert not unexpected, "failures outside the skip list:\n" + "\n".join(unexpected)


def test_private_networking_passes_the_public_access_checks(private_scans: Scans) -> None:
    """The public-access skips hold for the default setting only: with privateNetworking
    every resource they name passes them, and none fails them."""
    results = private_scans.unfiltered["results"]
    failed = {(r["check_id"], r["resource"].rsplit(".", 1)[0]) for r in results["failed_checks"]}
    passed = {(r["check_id"], r["resource"].rsplit(".", 1)[0]) for r in results["passed_checks"]}
    assert not PUBLIC_ACCESS_CHECKS & failed
    assert passed >= PUBLIC_ACCESS_CHECKS
