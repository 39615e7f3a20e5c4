"""The repository's tooling says what the project does: CI, deploy, Dependabot, pre-commit,
the editor, the dev container, the licence and the changelog.

Every file is parsed (YAML with PyYAML, JSON with comments after stripping them), nothing
touches the network, and each check compares the tooling with the project file it must
follow: the pins of requirements*.txt, the Makefile's lint target, the values
infra/main.bicepparam reads, the ports of local.settings.sample.json, pyproject's version.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

from devtools.typecheck import TEST_APP_PATTERN, programs
from tests.support.repository import candidate_files

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = REPO_ROOT / ".github" / "workflows"
CI = WORKFLOWS / "ci.yml"
DEPLOY = WORKFLOWS / "deploy.yml"
DEPENDABOT = REPO_ROOT / ".github" / "dependabot.yml"
PRE_COMMIT = REPO_ROOT / ".pre-commit-config.yaml"
VSCODE = REPO_ROOT / ".vscode"
DEVCONTAINER = REPO_ROOT / ".devcontainer" / "devcontainer.json"
EXTENSIONS = (
    "ms-python.python",
    "ms-python.vscode-pylance",
    "charliermarsh.ruff",
    "ms-azuretools.vscode-azurefunctions",
    "ms-azuretools.vscode-bicep",
    "ms-azuretools.azure-dev",
)
# The betas requirements.in pins exactly: Dependabot must propose their updates too.
PINNED_BETAS = ("azurefunctions-extensions-bindings-servicebus", "azure-functions-runtime")


# --- readers --------------------------------------------------------------------------------


def load_yaml(path: Path) -> dict[str, Any]:
    assert path.is_file(), f"{path.relative_to(REPO_ROOT)} is missing"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), f"{path.relative_to(REPO_ROOT)}: a mapping expected"
    return data


def strip_json_comments(text: str) -> str:
    """JSON with comments (VS Code, dev containers) as plain JSON: ``//`` and ``/* */``
    comments go, strings (which may hold ``//``, as URLs do) stay as they are."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char == '"':
            end = i + 1
            while end < n and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            out.append(text[i : end + 1])
            i = end + 1
        elif text.startswith("//", i):
            newline = text.find("\n", i)
            i = n if newline == -1 else newline
        elif text.startswith("/*", i):
            close = text.find("*/", i + 2)
            assert close != -1, "unterminated /* comment"
            i = close + 2
        else:
            out.append(char)
            i += 1
    return "".join(out)


def load_jsonc(path: Path) -> dict[str, Any]:
    assert path.is_file(), f"{path.relative_to(REPO_ROOT)} is missing"
    data = json.loads(strip_json_comments(path.read_text(encoding="utf-8")))
    assert isinstance(data, dict), f"{path.relative_to(REPO_ROOT)}: an object expected"
    return data


def triggers(workflow: Mapping[Any, Any]) -> dict[str, Any]:
    """The workflow's ``on:`` (YAML 1.1 reads the bare key ``on`` as True)."""
    on = workflow.get("on", workflow.get(True))
    if isinstance(on, str):
        return {on: None}
    if isinstance(on, list):
        return dict.fromkeys(on)
    assert isinstance(on, dict), f"no triggers: {on!r}"
    return on


def repository_variable(name: str) -> str:
    """The expression a workflow reads a repository variable with."""
    return "${{ vars." + name + " }}"


def steps(workflow: dict[str, Any]) -> list[dict[str, Any]]:
    return [step for job in workflow["jobs"].values() for step in job.get("steps", [])]


def job_running(workflow: dict[str, Any], command: str) -> dict[str, Any]:
    """The one job with a step whose script runs ``command`` (a whole line of it)."""
    found: list[dict[str, Any]] = [
        job
        for job in workflow["jobs"].values()
        if any(command in _lines(step.get("run", "")) for step in job.get("steps", []))
    ]
    assert len(found) == 1, f"one job running `{command}` expected, found {len(found)}"
    return found[0]


def _lines(script: str) -> list[str]:
    return [line.strip() for line in script.splitlines()]


def uses(job: dict[str, Any], action: str) -> dict[str, Any]:
    """The ``with:`` of the job's step that uses ``action`` (any version)."""
    for step in job.get("steps", []):
        if str(step.get("uses", "")).lower().split("@")[0] == action.lower():
            return dict(step.get("with") or {})
    pytest.fail(f"no step uses {action}")


def requirement(path: Path, name: str) -> Requirement:
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        parsed = Requirement(line)
        if parsed.name.lower() == name.lower():
            return parsed
    pytest.fail(f"{path.name} does not require {name}")


def assert_rev_follows(rev: str, required: Requirement) -> None:
    """A hook's rev is the pinned version when the requirement is an exact pin, and within
    its range otherwise."""
    version = Version(rev.removeprefix("v"))
    exact = [spec.version for spec in required.specifier if spec.operator in ("==", "===")]
    if exact:
        assert version == Version(exact[0]), f"rev {rev}, but {required} is pinned"
    else:
        assert required.specifier.contains(version, prereleases=True), (
            f"rev {rev} is outside {required}"
        )


# --- pre-commit -----------------------------------------------------------------------------


def _repo(config: dict[str, Any], url: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [repo for repo in config["repos"] if repo["repo"] == url]
    assert len(found) == 1, f"{url} expected once in .pre-commit-config.yaml"
    return found[0]


def makefile_lint_commands() -> list[str]:
    """The commands of the `make lint` recipe, comments dropped."""
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.split("\nlint:", 1)[1].split("\n\n", 1)[0]
    return [line.split("#", 1)[0].strip() for line in recipe.splitlines()[1:]]


def test_pre_commit_ruff_rev_follows_requirements_dev() -> None:
    ruff = _repo(load_yaml(PRE_COMMIT), "https://github.com/astral-sh/ruff-pre-commit")
    assert_rev_follows(str(ruff["rev"]), requirement(REPO_ROOT / "requirements-dev.txt", "ruff"))
    hooks = {hook["id"]: hook for hook in ruff["hooks"]}
    assert {"ruff-check", "ruff-format"} <= set(hooks), sorted(hooks)
    assert "--fix" in hooks["ruff-check"].get("args", [])


def test_pre_commit_mypy_is_the_venv_mypy_of_make_lint() -> None:
    config = load_yaml(PRE_COMMIT)
    for repo in config["repos"]:  # a mirror hook, if one comes back, follows the pin too
        if repo["repo"].endswith("/mirrors-mypy"):
            mypy = requirement(REPO_ROOT / "requirements-dev.txt", "mypy")
            assert_rev_follows(str(repo["rev"]), mypy)
    local = _repo(config, "local")
    hooks = [hook for hook in local["hooks"] if hook["id"].startswith("mypy")]
    assert len(hooks) == 1, "one local mypy hook, the one make lint runs"
    (hook,) = hooks
    assert hook["language"] == "system"
    assert hook["pass_filenames"] is False
    assert shlex.split(hook["entry"]) == [".venv/bin/python", "-m", "devtools.typecheck"]
    assert "$(PY) -m devtools.typecheck" in makefile_lint_commands()


def _checked_by(path: str, programs: list[list[str]]) -> list[list[str]]:
    """The programs whose targets hold ``path`` and do not exclude it."""
    holding = []
    for arguments in programs:
        targets, excluded = [], []
        words = iter(arguments)
        for word in words:
            if word == "--exclude":
                excluded.append(next(words))
            else:
                targets.append(word)
        inside = any(path == target or path.startswith(f"{target}/") for target in targets)
        if inside and not any(re.search(pattern, path) for pattern in excluded):
            holding.append(arguments)
    return holding


def test_strict_mypy_checks_every_python_file_we_write_exactly_once() -> None:
    ours = [path for path in candidate_files() if path.endswith(".py")]
    assert "shared/entrypoints/bootstrap.py" in ours, "git lists the repository's files"
    checked_by = {path: _checked_by(path, programs()) for path in ours}
    unchecked = [path for path, found in checked_by.items() if not found]
    twice = [path for path, found in checked_by.items() if len(found) > 1]
    assert unchecked == [], f"not type-checked by make lint: {unchecked}"
    assert twice == [], f"type-checked by two programs (one module, two meanings): {twice}"


def test_a_file_outside_every_program_is_found_unchecked() -> None:
    chosen = [["shared"], ["--exclude", TEST_APP_PATTERN, "tools/x/tests"]]
    assert _checked_by("shared/errors.py", chosen) == [["shared"]]
    assert _checked_by("tools/x/tests/test_x.py", chosen) == [chosen[1]]
    assert _checked_by("tools/x/tests/sample_app/function_app.py", chosen) == []
    assert _checked_by("scripts/new.py", chosen) == []


def test_strict_mypy_is_on_for_every_program() -> None:
    pyproject = (REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8")
    mypy = pyproject.split("[tool.mypy]", 1)[1].split("\n[", 1)[0]
    assert re.search(r"^strict = true$", mypy, re.MULTILINE), "[tool.mypy] strict = true"


def test_assert_rev_follows_fails_on_a_mismatch() -> None:
    assert_rev_follows("v0.17.6", Requirement("ruff==0.17.6"))
    assert_rev_follows("v0.17.6", Requirement("ruff>=0.8,<1"))
    with pytest.raises(AssertionError):
        assert_rev_follows("v0.17.5", Requirement("ruff==0.17.6"))
    with pytest.raises(AssertionError):
        assert_rev_follows("v1.0.0", Requirement("ruff>=0.8,<1"))


# --- CI -------------------------------------------------------------------------------------


def test_ci_runs_on_push_and_pull_request() -> None:
    on = triggers(load_yaml(CI))
    assert {"push", "pull_request"} <= set(on), sorted(on)


def test_ci_runs_make_lint_on_python_313() -> None:
    job = job_running(load_yaml(CI), "make lint")
    assert job["runs-on"] == "ubuntu-latest"
    assert str(uses(job, "actions/setup-python")["python-version"]) == "3.13"


def test_ci_runs_make_test_on_python_313_and_node_20() -> None:
    job = job_running(load_yaml(CI), "make test")
    assert job["runs-on"] == "ubuntu-latest"
    python = uses(job, "actions/setup-python")
    assert str(python["python-version"]) == "3.13"
    assert python["cache"] == "pip"
    assert "requirements*.txt" in str(python["cache-dependency-path"]).split()
    node = uses(job, "actions/setup-node")
    assert str(node["node-version"]) == "20"
    assert node["cache"] == "npm"


def test_ci_chromium_install_never_fails_the_job() -> None:
    chromium = [step for step in steps(load_yaml(CI)) if "chromium" in step.get("run", "")]
    assert chromium, "no step installs Chromium"
    for step in chromium:
        assert step.get("continue-on-error") is True, step.get("name")


@pytest.mark.parametrize("workflow", [CI, DEPLOY], ids=lambda path: path.name)
def test_actions_are_pinned_to_a_major_version(workflow: Path) -> None:
    actions = [str(step["uses"]) for step in steps(load_yaml(workflow)) if "uses" in step]
    assert actions
    unpinned = [action for action in actions if not re.fullmatch(r"[\w.-]+/[\w.-]+@v\d+", action)]
    assert not unpinned, f"pin these to a major version (@vN): {unpinned}"


def test_ci_uploads_nothing() -> None:
    uploads = [
        step["uses"]
        for step in steps(load_yaml(CI))
        if "upload-artifact" in str(step.get("uses", ""))
    ]
    assert not uploads, uploads


# --- deploy ---------------------------------------------------------------------------------


def test_deploy_signs_in_with_federated_credentials() -> None:
    workflow = load_yaml(DEPLOY)
    assert workflow["permissions"] == {"id-token": "write", "contents": "read"}
    job = next(iter(workflow["jobs"].values()))
    for name in (
        "AZURE_CLIENT_ID",
        "AZURE_TENANT_ID",
        "AZURE_SUBSCRIPTION_ID",
        "AZURE_ENV_NAME",
        "AZURE_LOCATION",
    ):
        assert job["env"][name] == repository_variable(name)
    # A GitHub environment would change the token's subject away from azd's credentials.
    assert "environment" not in job
    uses(job, "Azure/setup-azd")
    login = " ".join(
        step.get("run", "") for step in job["steps"] if "azd auth login" in step.get("run", "")
    )
    words = shlex.split(login.replace("\\\n", " ").replace("`\n", " "))
    assert words[:3] == ["azd", "auth", "login"], words
    assert words[words.index("--federated-credential-provider") + 1] == "github"
    assert "--client-id" in words
    assert "--tenant-id" in words


def test_deploy_provisions_then_deploys_with_azd() -> None:
    workflow = load_yaml(DEPLOY)
    on = triggers(workflow)
    assert "workflow_dispatch" in on
    assert on["push"]["branches"] == ["main"]
    scripts = [line for step in steps(workflow) for line in _lines(step.get("run", ""))]
    provision = scripts.index("azd provision --no-prompt")
    deploy = scripts.index("azd deploy --no-prompt")
    assert provision < deploy


def test_deploys_of_one_environment_never_overlap() -> None:
    concurrency = load_yaml(DEPLOY)["concurrency"]
    assert "vars.AZURE_ENV_NAME" in concurrency["group"]
    assert concurrency["cancel-in-progress"] is False


def test_deploy_passes_every_value_main_bicepparam_reads() -> None:
    bicepparam = (REPO_ROOT / "infra" / "main.bicepparam").read_text(encoding="utf-8")
    read = set(re.findall(r"readEnvironmentVariable\('(INFERBUS_\w+)'", bicepparam))
    assert "INFERBUS_PRODUCER_TENANTS" in read
    workflow = load_yaml(DEPLOY)
    passed = {
        name
        for step in steps(workflow)
        for name, value in (step.get("env") or {}).items()
        if value == repository_variable(name) and name in step.get("run", "")
    }
    missing = sorted(read - passed)
    assert not missing, f"deploy.yml does not pass these azd environment values: {missing}"
    assert "AZURE_RESOURCE_GROUP" in passed  # main.bicep is resource-group scoped


# --- Dependabot -----------------------------------------------------------------------------


def test_dependabot_updates_pip_npm_and_actions_weekly() -> None:
    config = load_yaml(DEPENDABOT)
    assert config["version"] == 2
    root = {
        update["package-ecosystem"]: update
        for update in config["updates"]
        if update["directory"] == "/"
    }
    assert {"pip", "npm", "github-actions"} <= set(root), sorted(root)
    for update in root.values():
        assert update["schedule"]["interval"] == "weekly"
    groups = root["pip"].get("groups", {}).values()
    assert any("azure-*" in group.get("patterns", []) for group in groups)


def test_dependabot_ignores_none_of_the_pinned_betas() -> None:
    requirements = REPO_ROOT / "requirements.in"
    for name in PINNED_BETAS:
        pinned = [spec.operator for spec in requirement(requirements, name).specifier]
        assert pinned == ["=="], f"{name} is no longer pinned exactly: update this test"
    ignored = {
        str(rule.get("dependency-name", "")).lower()
        for update in load_yaml(DEPENDABOT)["updates"]
        for rule in update.get("ignore", [])
    }
    for name in PINNED_BETAS:
        assert not [rule for rule in ignored if re.fullmatch(rule.replace("*", ".*"), name)], name


# --- editor and dev container ---------------------------------------------------------------


def test_vscode_tasks_run_the_make_targets() -> None:
    tasks = {task["label"]: task for task in load_jsonc(VSCODE / "tasks.json")["tasks"]}
    for target in ("run", "test", "lint"):
        assert tasks[f"make {target}"]["command"] == f"make {target}"


def test_vscode_attaches_to_the_local_worker_by_process_id() -> None:
    configurations = load_jsonc(VSCODE / "launch.json")["configurations"]
    attach = next(c for c in configurations if c["name"] == "Attach to the local Functions worker")
    assert (attach["type"], attach["request"]) == ("debugpy", "attach")
    # The local host has no debugpy option: attach by pid, not to a port.
    assert attach["processId"] == "${command:pickProcess}"
    host = REPO_ROOT / "tools" / "functions-host" / "src" / "functions_host"
    assert "debugpy" not in (host / "language_worker.py").read_text(encoding="utf-8"), (
        "the local host knows debugpy now: attach to its port instead"
    )


def test_vscode_settings_use_the_venv_ruff_and_pytest() -> None:
    settings = load_jsonc(VSCODE / "settings.json")
    assert settings["python.defaultInterpreterPath"].endswith(".venv/bin/python")
    assert settings["python.testing.pytestEnabled"] is True
    assert settings["[python]"]["editor.defaultFormatter"] == "charliermarsh.ruff"


def test_vscode_and_the_dev_container_recommend_the_same_extensions() -> None:
    recommended = load_jsonc(VSCODE / "extensions.json")["recommendations"]
    assert set(recommended) == set(EXTENSIONS)
    container = load_jsonc(DEVCONTAINER)["customizations"]["vscode"]["extensions"]
    assert set(container) == set(EXTENSIONS)


def test_devcontainer_bootstraps_with_make() -> None:
    container = load_jsonc(DEVCONTAINER)
    assert container["postCreateCommand"] == "make bootstrap"
    assert container["image"] == "mcr.microsoft.com/devcontainers/python:1-3.13-bookworm"
    features = container["features"]
    assert str(features["ghcr.io/devcontainers/features/node:1"]["version"]) == "20"
    assert "ghcr.io/devcontainers/features/azure-cli:1" in features
    assert "ghcr.io/azure/azure-dev/azd:latest" in features


def test_devcontainer_forwards_the_ports_of_make_run() -> None:
    sample = (REPO_ROOT / "local.settings.sample.json").read_text(encoding="utf-8")
    ports = {int(port) for port in re.findall(r"(?:127\.0\.0\.1|localhost):(\d+)", sample)}
    ports.add(json.loads(sample)["Host"]["LocalHttpPort"])
    assert {7071, 10000, 5672} <= ports
    missing = sorted(ports - set(load_jsonc(DEVCONTAINER)["forwardPorts"]))
    assert not missing, f"forward these ports of local.settings.sample.json: {missing}"


def test_json_comments_are_stripped_outside_strings_only() -> None:
    text = '{"url": "https://example.test/a//b", // a comment\n /* block */ "n": 1}'
    assert json.loads(strip_json_comments(text)) == {"url": "https://example.test/a//b", "n": 1}


# --- licence and changelog ------------------------------------------------------------------


def test_license_is_mit() -> None:
    text = (REPO_ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.splitlines()[0] == "MIT License"
    assert "Copyright (c) 2026 The Inferbus authors" in text
    assert "Permission is hereby granted, free of charge, to any person obtaining a copy" in text
    assert 'THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND' in text


def test_changelog_keeps_a_changelog_and_names_the_project_version() -> None:
    text = (REPO_ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", text, re.MULTILINE)
    assert headings[0] == ("Unreleased", ""), headings
    released = headings[1][0]
    pyproject = (REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8")
    project_version = re.search(r'^version = "([^"]+)"', pyproject, re.MULTILINE)
    assert project_version is not None
    assert released == project_version[1], "the newest release is pyproject's version"
    first = text.split("## [0.1.0] - 2026-12-02", 1)[1]
    bullets = [line for line in first.splitlines() if line.startswith("- ")]
    assert 8 <= len(bullets) <= 15, len(bullets)


CHECK_JSONSCHEMA = Path(sys.executable).with_name("check-jsonschema")


@pytest.mark.parametrize(
    ("schema", "files"),
    [
        ("vendor.github-workflows", [".github/workflows/ci.yml", ".github/workflows/deploy.yml"]),
        ("vendor.dependabot", [".github/dependabot.yml"]),
    ],
)
def test_github_files_are_valid_against_their_schemas(schema: str, files: list[str]) -> None:
    """GitHub's workflow and Dependabot schemas (SchemaStore's, as check-jsonschema
    vendors them): what GitHub would refuse to run fails here, offline."""
    result = subprocess.run(
        [str(CHECK_JSONSCHEMA), "--builtin-schema", schema, *files],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_schema_check_refuses_a_broken_workflow(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text("on: push\njobs:\n  build:\n    steps: []\n", encoding="utf-8")
    result = subprocess.run(
        [str(CHECK_JSONSCHEMA), "--builtin-schema", "vendor.github-workflows", str(broken)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1, result.stdout  # a job without runs-on is not a workflow
