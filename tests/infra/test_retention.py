"""Retention: every data container that accumulates expires by a lifecycle rule.

The data account's one management policy (``modules/storage-data.bicep``) holds a delete rule
per container, ``prefixMatch: ['${dataContainers.<role>}/']`` and
``daysAfterModificationGreaterThan: <parameter>``; the parameters come from ``main.bicep``,
the app learns the jobs retention through ``JobRetentionDays`` (410 Gone for a request id
older than it whose job is gone), and the results container of old is gone for good
(results live in their job documents).
https://learn.microsoft.com/azure/storage/blobs/lifecycle-management-overview
"""

import json
from pathlib import Path
from typing import Any

import pytest

from tests.infra import (
    CATALOG,
    DATA_STORAGE,
    FUNCTION_APP,
    INFRA,
    MAIN,
    REPO_ROOT,
    app_settings,
    bicep_files,
    constants,
    decorator,
    has_default,
    is_reference,
    literal,
    module,
    params,
    read,
    render,
    resolve,
    resource_body,
    resources_of_type,
)

DAY_SECONDS = 86_400

# Container role (catalog.json dataContainers) -> lifecycle rule, the days parameter of
# storage-data.bicep, and its default in main.bicep (None: a module parameter alone).
RULES = {
    "incoming": ("expire-incoming", "incomingRetentionDays", 7),
    "inputs": ("expire-inputs", "inputsRetentionDays", 30),
    "jobs": ("expire-jobs", "jobsRetentionDays", 90),
    "idempotency": ("expire-idempotency", "idempotencyRetentionDays", 1),
    "ledgers": ("expire-ledgers", "ledgersRetentionDays", 30),
    "usage": ("expire-usage", "usageRetentionDays", 400),
    "batches": ("expire-batches", "batchRetentionDays", 90),
    "eventGridDeadLetters": ("expire-eventgrid-deadletters", "deadLetterRetentionDays", None),
}
# What must outlive the longest request deadline: a request's input (the inputs container,
# or the dropped document itself in incoming), its job and its ledger entries.
OUTLIVE_THE_DEADLINE = ("incoming", "inputs", "jobs", "ledgers")
MAIN_PARAMETERS = [
    (role, days) for role, (_, days, default) in RULES.items() if default is not None
]


def _catalog() -> dict[str, Any]:
    catalog: dict[str, Any] = json.loads(CATALOG.read_text(encoding="utf-8"))
    return catalog


def _policy() -> dict[str, Any]:
    (policy,) = resources_of_type(
        DATA_STORAGE, "Microsoft.Storage/storageAccounts/managementPolicies"
    ).values()
    body = resource_body(policy)
    assert body["name"] == "default"
    assert is_reference(body["parent"], "account")
    return body


def _rules() -> dict[str, dict[str, Any]]:
    rules = _policy()["properties"]["policy"]["rules"]
    by_name = {rule["name"]: rule for rule in rules}
    assert len(by_name) == len(rules), "lifecycle rule names must be unique"
    return by_name


def _container_role(rule: dict[str, Any]) -> str:
    """The catalogue role a rule's single prefix names: '${dataContainers.<role>}/'."""
    (prefix,) = rule["definition"]["filters"]["prefixMatch"]
    hole, slash = literal(prefix)
    assert slash == "/", f"{rule['name']}: the prefix must end with the container's '/'"
    owner, _, role = render(hole).partition(".")
    assert owner == "dataContainers", f"{rule['name']}: prefix {render(hole)} is not a container"
    return role


def _max_deadline_seconds() -> int:
    settings = app_settings()
    return int(resolve(settings["MaxDeadlineSeconds"], constants(FUNCTION_APP)))


# --- one delete rule per container ----------------------------------------------------------


def test_every_data_container_has_exactly_one_rule() -> None:
    """A container added to the catalogue without a retention rule fails here."""
    roles = [_container_role(rule) for rule in _rules().values()]
    containers = _catalog()["dataContainers"]
    assert sorted(roles) == sorted(containers)
    assert set(RULES) == set(containers)
    # Jobs (with their results), idempotency markers and ledgers expire like the rest.
    names = {containers[role] for role in roles}
    assert set(_catalog()["appContainerNames"]) <= names
    assert {"jobs", "idempotency", "ledgers", "inputs", "incoming", "batches"} <= names


@pytest.mark.parametrize(
    ("role", "rule_name", "days"), [(r, n, d) for r, (n, d, _) in RULES.items()]
)
def test_rule_deletes_base_blobs_after_the_parameter(role: str, rule_name: str, days: str) -> None:
    rule = _rules()[rule_name]
    assert rule["enabled"] is True
    assert rule["type"] == "Lifecycle"
    assert _container_role(rule) == role
    definition = rule["definition"]
    assert definition["filters"]["blobTypes"] == ["blockBlob"]
    assert set(definition["actions"]) == {"baseBlob"}
    delete = definition["actions"]["baseBlob"]["delete"]
    assert delete == {"daysAfterModificationGreaterThan": days}
    assert is_reference(delete["daysAfterModificationGreaterThan"], days)
    declared = params(DATA_STORAGE)[days]
    assert declared["type"] == "int"
    assert decorator(declared, "description")
    assert decorator(declared, "min_value") >= 1


# --- the days are parameters of main.bicep ------------------------------------------------


@pytest.mark.parametrize(("role", "days"), MAIN_PARAMETERS)
def test_main_exposes_the_retention_and_passes_it_down(role: str, days: str) -> None:
    declared = params(MAIN)[days]
    assert declared["type"] == "int"
    assert declared["default"] == RULES[role][2]
    assert decorator(declared, "description")
    assert decorator(declared, "min_value") is not None
    passed = module(MAIN, "dataStorage")["params"]
    assert is_reference(passed[days], days), f"main.bicep must pass {days} to storage-data"


@pytest.mark.parametrize(("role", "days"), MAIN_PARAMETERS)
def test_module_defaults_and_bounds_agree_with_main(role: str, days: str) -> None:
    """storage-data.bicep keeps defaults of its own: they must not drift from main's."""
    in_main, in_module = params(MAIN)[days], params(DATA_STORAGE)[days]
    assert has_default(in_module)
    assert in_module["default"] == in_main["default"]
    assert decorator(in_module, "min_value") == decorator(in_main, "min_value")


def test_no_retention_parameter_is_left_unused() -> None:
    """Every *RetentionDays parameter of main reaches the data account."""
    declared = {name for name in params(MAIN) if name.endswith("RetentionDays")}
    assert declared == {days for _, days in MAIN_PARAMETERS}
    in_module = {name for name in params(DATA_STORAGE) if name.endswith("RetentionDays")}
    assert in_module == {days for _, days, _ in RULES.values()}


@pytest.mark.parametrize("role", OUTLIVE_THE_DEADLINE)
def test_retention_outlives_the_longest_request_deadline(role: str) -> None:
    """An input, job or ledger entry is needed until its request's deadline at least.

    The rule deletes a blob more than N days after its last change, and the longest
    deadline is MaxDeadlineSeconds (one day): the smallest N allowed must exceed it.
    """
    deadline = _max_deadline_seconds()
    assert deadline == DAY_SECONDS
    days = RULES[role][1]
    for path in (MAIN, DATA_STORAGE):
        min_value = decorator(params(path)[days], "min_value")
        assert min_value * DAY_SECONDS > deadline, f"{path.name}: {days} may undercut a deadline"
        assert min_value >= 2


def test_idempotency_keys_are_remembered_at_least_a_day() -> None:
    for path in (MAIN, DATA_STORAGE):
        declared = params(path)["idempotencyRetentionDays"]
        assert declared["default"] == 1
        assert decorator(declared, "min_value") == 1


def test_replay_markers_outlive_the_dead_letters_they_guard() -> None:
    """A replay marker (ledgers) keeps a dead-lettered event from being replayed twice."""
    ledgers = params(MAIN)["ledgersRetentionDays"]["default"]
    dead_letters = params(DATA_STORAGE)["deadLetterRetentionDays"]["default"]
    assert ledgers >= dead_letters


# --- the app knows the jobs retention -----------------------------------------------------


def test_job_retention_setting_is_the_jobs_rule_parameter() -> None:
    """JobRetentionDays and the jobs rule read one parameter of main.bicep."""
    settings = app_settings()
    assert render(settings["JobRetentionDays"]) == "string(jobsRetentionDays)"
    app_params = module(MAIN, "functionApp")["params"]
    storage_params = module(MAIN, "dataStorage")["params"]
    assert is_reference(app_params["jobsRetentionDays"], "jobsRetentionDays")
    assert is_reference(storage_params["jobsRetentionDays"], "jobsRetentionDays")
    delete = _rules()["expire-jobs"]["definition"]["actions"]["baseBlob"]["delete"]
    assert is_reference(delete["daysAfterModificationGreaterThan"], "jobsRetentionDays")
    in_app, in_main = params(FUNCTION_APP)["jobsRetentionDays"], params(MAIN)["jobsRetentionDays"]
    assert in_app["default"] == in_main["default"]
    assert decorator(in_app, "min_value") == decorator(in_main, "min_value")
    assert resolve(settings["JobRetentionDays"], constants(FUNCTION_APP)) == "90"


# --- no results container -------------------------------------------------------------------


def test_no_results_container() -> None:
    """Results live in their job documents: no container, rule, setting or parameter."""
    catalog = _catalog()
    assert "results" not in catalog["dataContainers"]
    assert "results" not in catalog["dataContainers"].values()
    assert "results" not in catalog["appContainerNames"]
    assert "expire-results" not in _rules()
    assert "ResultsContainer" not in app_settings()
    for path in (MAIN, DATA_STORAGE, FUNCTION_APP):
        assert "resultsRetentionDays" not in params(path)


@pytest.mark.parametrize(
    "path",
    [
        *bicep_files(),
        INFRA / "main.parameters.json",
        INFRA / "main.bicepparam",
        INFRA / "README.md",
    ],
    ids=lambda path: str(path.relative_to(REPO_ROOT)),
)
def test_nothing_in_infra_names_the_results_container(path: Path) -> None:
    text = read(path)
    for stale in ("dataContainers.results", "ResultsContainer", "resultsRetentionDays"):
        assert stale not in text, f"{path.name} still names {stale}"
